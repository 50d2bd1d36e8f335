// CSV: RFC 4180 fields (optionally quoted), an optional header, one example per line.
// loadCsv (loaders.hpp) and loadData (load.hpp) both read through readCsv.

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "starling/data/loaders.hpp"

#include "file_reader.hpp"
#include "labels.hpp"
#include "load_internal.hpp"
#include "text_parse.hpp"

namespace starling::data {
namespace {

Status lineError(const std::string& path, std::size_t line, const std::string& what,
                 StatusCode code = StatusCode::kMalformed) {
  return {code, path + ":" + std::to_string(line) + ": " + what};
}

// Splits one line into fields, reusing fields' storage; *count says how many. A field
// is unquoted (spaces and tabs around it dropped) or in double quotes, where the
// delimiter is literal and "" stands for one quote. An empty string on success,
// otherwise what is wrong with the line.
std::string splitRecord(std::string_view line, char delimiter, std::vector<std::string>& fields, std::size_t* count) {
  std::size_t n = 0;
  std::size_t i = 0;
  const auto blank = [&](char c) { return c != delimiter && detail::isBlank(c); };
  for (;;) {
    if (fields.size() <= n) fields.emplace_back();
    std::string& field = fields[n++];
    field.clear();
    while (i < line.size() && blank(line[i]))
      ++i;
    if (i < line.size() && line[i] == '"') {
      const std::size_t open = i + 1;
      ++i;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] != '"') {
          field.push_back(line[i++]);
        } else if (i + 1 < line.size() && line[i + 1] == '"') {
          field.push_back('"');
          i += 2;
        } else {
          ++i;
          closed = true;
          break;
        }
      }
      if (!closed) {
        return "the quoted field opened at column " + std::to_string(open) +
               " does not close on this line (newlines inside quotes are not supported)";
      }
      while (i < line.size() && blank(line[i]))
        ++i;
      if (i < line.size() && line[i] != delimiter) {
        return "unexpected " + detail::quoted(line.substr(i, 1)) + " after the closing quote at column " +
               std::to_string(i) + " (a quote inside a quoted field is written twice: \"\")";
      }
    } else {
      const std::size_t end = std::min(line.find(delimiter, i), line.size());
      field.assign(detail::trim(line.substr(i, end - i)));
      i = end;
    }
    if (i >= line.size()) break;
    ++i;  // the delimiter
  }
  *count = n;
  return {};
}

// FNV-1a, 64-bit: a category's slot, the same on every machine.
uint64_t fnv1a(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

bool hasNonNumericField(const std::vector<std::string>& fields, std::size_t count) {
  for (std::size_t f = 0; f < count; ++f)
    if (!detail::isNumeric(fields[f])) return true;
  return false;
}

std::string columnName(const std::vector<std::string>& header, std::size_t f) {
  if (f < header.size() && !header[f].empty()) return "column " + detail::quoted(header[f]);
  return "column " + std::to_string(f + 1);
}

}  // namespace

namespace detail {

Result<Dataset> readCsv(const std::string& path, const CsvSpec& spec) {
  LabelCollector labels(spec.task, spec.numClasses);
  STARLING_RETURN_IF_ERROR(labels.checkOptions(path));
  auto reader = FileReader::open(path);
  if (!reader) return reader.status();
  // Streamed: memory holds a block of text and the parsed rows, never the whole file.
  BlockLines cursor(*reader);
  std::string_view line;
  std::vector<std::string> fields;
  std::size_t count = 0;
  std::vector<std::string> header;  // column names when the file has a header
  std::vector<float> features;
  std::size_t expectedFields = 0;  // set by the header or the first data row
  std::size_t labelIndex = 0;
  std::optional<std::size_t> groupIndex;     // spec.groupName's column
  std::map<std::string, uint32_t> groupIds;  // in order of first appearance
  std::vector<uint32_t> groups;
  std::vector<bool> isCategorical;  // by column
  // The categorical columns' values: by file column, its index among them; per one, a
  // dictionary of its values (value -> code, in order of first appearance).
  std::map<std::size_t, std::size_t> categoryOf;
  std::vector<std::unordered_map<std::string, uint32_t>> codeOf;
  CategoryColumns cats;
  std::size_t featureDim = 0;
  bool first = true;

  while (cursor.next(line)) {
    if (trim(line).empty()) continue;
    const std::string problem = splitRecord(line, spec.delimiter, fields, &count);
    if (!problem.empty()) return lineError(path, cursor.number(), problem);

    if (first) {
      first = false;
      if (count < 2) {
        return lineError(path, cursor.number(),
                         "expected a label and at least one feature separated by '" + std::string(1, spec.delimiter) +
                             "', found 1 field");
      }
      const bool isHeader = spec.header ? *spec.header : hasNonNumericField(fields, count);
      expectedFields = count;
      if (isHeader) header.assign(fields.begin(), fields.begin() + static_cast<std::ptrdiff_t>(count));

      // The label column: a header name, else a 0-based index.
      const auto n = static_cast<long>(count);
      long column = spec.labelIndex < 0 ? n + spec.labelIndex : spec.labelIndex;
      std::string asked = std::to_string(spec.labelIndex);
      if (!spec.labelName.empty()) {
        asked = detail::quoted(spec.labelName);
        const auto named = std::find(header.begin(), header.end(), spec.labelName);
        if (named != header.end()) {
          column = named - header.begin();
        } else if (const auto index = parseIndex(spec.labelName)) {
          column = *index < count ? static_cast<long>(*index) : n;
        } else {
          std::string names;
          for (const std::string& h : header)
            names += (names.empty() ? "" : ", ") + detail::quoted(h);
          return lineError(
              path, cursor.number(),
              "label column " + asked + " is neither a column name nor a 0-based index" +
                  (header.empty() ? std::string(" (the file has no header)") : " (columns: " + names + ")"),
              StatusCode::kInvalidArgument);
        }
      }
      if (column < 0 || column >= n) {
        return lineError(path, cursor.number(),
                         "label column " + asked + " is outside a row of " + std::to_string(n) + " fields",
                         StatusCode::kInvalidArgument);
      }
      labelIndex = static_cast<std::size_t>(column);
      if (!spec.categorical.empty()) {
        if (spec.buckets == 0)
          return lineError(path, cursor.number(), "categorical columns need at least 1 bucket",
                           StatusCode::kInvalidArgument);
        isCategorical.assign(count, false);
        for (const std::string& name : spec.categorical) {
          const auto named = std::find(header.begin(), header.end(), name);
          if (named == header.end())
            return lineError(path, cursor.number(),
                             "categorical column " + detail::quoted(name) +
                                 (header.empty() ? " needs a header naming the columns" : " is not a column name"),
                             StatusCode::kInvalidArgument);
          const auto f = static_cast<std::size_t>(named - header.begin());
          if (f == labelIndex)
            return lineError(path, cursor.number(), "the label column cannot be categorical",
                             StatusCode::kInvalidArgument);
          isCategorical[f] = true;
        }
      }
      if (!spec.groupName.empty()) {
        const auto named = std::find(header.begin(), header.end(), spec.groupName);
        if (named == header.end())
          return lineError(path, cursor.number(),
                           "group column " + detail::quoted(spec.groupName) +
                               (header.empty() ? " needs a header naming the columns" : " is not a column name"),
                           StatusCode::kInvalidArgument);
        groupIndex = static_cast<std::size_t>(named - header.begin());
        if (*groupIndex == labelIndex)
          return lineError(path, cursor.number(), "the group column is the label column", StatusCode::kInvalidArgument);
        if (count < 3)
          return lineError(path, cursor.number(), "a group column leaves no feature", StatusCode::kInvalidArgument);
        if (!isCategorical.empty()) isCategorical[*groupIndex] = false;
      }
      for (std::size_t f = 0; f < count; ++f) {
        if (f == labelIndex || (groupIndex && f == *groupIndex)) continue;
        if (!isCategorical.empty() && isCategorical[f]) {
          categoryOf[f] = cats.names.size();
          cats.names.push_back(header[f]);
          cats.offsets.push_back(featureDim);
          featureDim += spec.buckets;
        } else {
          featureDim += 1;
        }
      }
      cats.width = spec.buckets;
      cats.values.resize(cats.names.size());
      codeOf.resize(cats.names.size());
      if (isHeader) continue;
    } else if (count != expectedFields) {
      return lineError(path, cursor.number(),
                       "expected " + std::to_string(expectedFields) + " fields, found " + std::to_string(count));
    }

    if (const std::size_t held = (features.size() + featureDim + 2 + cats.codes.size()) * sizeof(float);
        held > spec.memoryLimit.bytes)
      return overMemoryLimit(path + ":" + std::to_string(cursor.number()), held, spec.memoryLimit);
    if (Status s = labels.addText(fields[labelIndex]); !s) {
      return lineError(path, cursor.number(), "field " + std::to_string(labelIndex + 1) + ": " + s.message());
    }
    if (groupIndex) {
      const auto id = groupIds.emplace(fields[*groupIndex], static_cast<uint32_t>(groupIds.size())).first->second;
      groups.push_back(id);
    }
    for (std::size_t f = 0; f < count; ++f) {
      if (f == labelIndex || (groupIndex && f == *groupIndex)) continue;
      if (!isCategorical.empty() && isCategorical[f]) {
        const std::size_t at = features.size();
        features.resize(at + spec.buckets, 0.0f);
        features[at + fnv1a(fields[f]) % spec.buckets] = 1.0f;
        // The value itself, by code, for a vocabulary agreed later (data/categories.hpp).
        const std::size_t c = categoryOf[f];
        const auto [it, added] = codeOf[c].emplace(fields[f], static_cast<uint32_t>(cats.values[c].size()));
        if (added) cats.values[c].push_back(fields[f]);
        cats.codes.push_back(it->second);
        continue;
      }
      const auto value = parseFloat(fields[f]);
      if (value) {
        features.push_back(*value);
        continue;
      }
      const std::string where = "field " + std::to_string(f + 1) + ": ";
      if (fields[f].empty()) return lineError(path, cursor.number(), where + "empty (" + columnName(header, f) + ")");
      if (isNumeric(fields[f])) {
        return lineError(path, cursor.number(),
                         where + detail::quoted(fields[f]) + " is not a finite number (" + columnName(header, f) + ")");
      }
      return lineError(path, cursor.number(),
                       where + detail::quoted(fields[f]) + " is not a number: " + columnName(header, f) +
                           " is not numeric (name it with --categorical to hash its values into buckets)");
    }
  }

  STARLING_RETURN_IF_ERROR(cursor.status());
  if (labels.size() == 0) return Status(StatusCode::kMalformed, path + ": no data rows");
  auto built = labels.build(std::move(features), featureDim, {}, path);
  if (built && groupIndex) STARLING_RETURN_IF_ERROR(built->withGroups(std::move(groups)));
  if (built && !cats.empty()) STARLING_RETURN_IF_ERROR(built->withCategories(std::move(cats)).withContext(path));
  return built;
}

}  // namespace detail

Result<Dataset> loadCsv(const std::string& path, const CsvOptions& options) {
  detail::CsvSpec spec;
  spec.delimiter = options.delimiter;
  spec.header = options.hasHeader;
  spec.labelIndex = options.labelColumn;
  spec.numClasses = options.numClasses;
  return detail::readCsv(path, spec);
}

}  // namespace starling::data
