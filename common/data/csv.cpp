// loadCsv: label and features as comma-separated numbers, one example per line.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "starling/data/loaders.hpp"

#include "file_reader.hpp"
#include "text_parse.hpp"

namespace starling::data {
namespace {

Status lineError(const std::string& path, std::size_t line, const std::string& what) {
  return {StatusCode::kMalformed, path + ":" + std::to_string(line) + ": " + what};
}

// Splits line at delimiter into fields (trimmed); reuses fields' storage.
void splitFields(std::string_view line, char delimiter, std::vector<std::string_view>& fields) {
  fields.clear();
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = line.find(delimiter, start);
    if (end == std::string_view::npos) {
      fields.push_back(detail::trim(line.substr(start)));
      return;
    }
    fields.push_back(detail::trim(line.substr(start, end - start)));
    start = end + 1;
  }
}

}  // namespace

Result<Dataset> loadCsv(const std::string& path, const CsvOptions& options) {
  if (options.numClasses < 0) return Status(StatusCode::kInvalidArgument, path + ": numClasses must be >= 0");
  std::string text;
  {
    auto reader = detail::FileReader::open(path);
    if (!reader) return reader.status();
    STARLING_RETURN_IF_ERROR(reader->readAll(text));
  }

  detail::LineCursor cursor(text);
  std::string_view line;
  if (options.hasHeader && !cursor.next(line)) {
    return Status(StatusCode::kMalformed, path + ": empty file, expected a header line");
  }

  std::vector<float> features;
  std::vector<int32_t> labels;
  std::vector<std::string_view> fields;
  std::size_t expectedFields = 0;  // set by the first data row
  std::size_t labelIndex = 0;
  int32_t maxLabel = -1;
  std::size_t maxLabelLine = 0;

  while (cursor.next(line)) {
    if (detail::trim(line).empty()) continue;
    splitFields(line, options.delimiter, fields);
    if (expectedFields == 0) {
      if (fields.size() < 2) {
        return lineError(path, cursor.number(),
                         "expected a label and at least one feature separated by '" +
                             std::string(1, options.delimiter) + "', found 1 field");
      }
      const auto n = static_cast<std::ptrdiff_t>(fields.size());
      const std::ptrdiff_t column = options.labelColumn < 0 ? n + options.labelColumn : options.labelColumn;
      if (column < 0 || column >= n) {
        return Status(StatusCode::kInvalidArgument, path + ":" + std::to_string(cursor.number()) + ": label column " +
                                                        std::to_string(options.labelColumn) + " is outside a row of " +
                                                        std::to_string(n) + " fields");
      }
      expectedFields = fields.size();
      labelIndex = static_cast<std::size_t>(column);
      // Lines bound the rows, so features are allocated once (blank lines aside).
      const std::size_t maxRows = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
      features.reserve(maxRows * (expectedFields - 1));
      labels.reserve(maxRows);
    } else if (fields.size() != expectedFields) {
      return lineError(
          path, cursor.number(),
          "expected " + std::to_string(expectedFields) + " fields, found " + std::to_string(fields.size()));
    }

    const auto label = detail::parseIntegral(fields[labelIndex]);
    if (!label || *label < 0) {
      return lineError(path, cursor.number(),
                       "label " + detail::quoted(fields[labelIndex]) + " (field " + std::to_string(labelIndex + 1) +
                           ") is not an integer >= 0");
    }
    if (options.numClasses > 0 && *label >= options.numClasses) {
      return lineError(
          path, cursor.number(),
          "label " + std::to_string(*label) + " is not below numClasses " + std::to_string(options.numClasses));
    }
    if (*label > maxLabel) {
      maxLabel = static_cast<int32_t>(*label);
      maxLabelLine = cursor.number();
    }
    labels.push_back(static_cast<int32_t>(*label));

    for (std::size_t f = 0; f < fields.size(); ++f) {
      if (f == labelIndex) continue;
      const auto value = detail::parseFloat(fields[f]);
      if (!value) {
        return lineError(
            path, cursor.number(),
            "field " + std::to_string(f + 1) + ": " + detail::quoted(fields[f]) + " is not a finite number");
      }
      features.push_back(*value);
    }
  }

  if (labels.empty()) return Status(StatusCode::kMalformed, path + ": no data rows");
  if (maxLabel == INT32_MAX) {
    return lineError(path, maxLabelLine, "label " + std::to_string(maxLabel) + " leaves no room for a class count");
  }
  const int numClasses = options.numClasses > 0 ? options.numClasses : maxLabel + 1;
  auto dataset = Dataset::fromFloats(std::move(features), std::move(labels), expectedFields - 1, numClasses);
  if (!dataset) return dataset.status().withContext(path);
  return dataset;
}

}  // namespace starling::data
