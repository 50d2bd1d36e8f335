// loadLibsvm: sparse "label index:value ..." lines, kept sparse (CSR), read in blocks
// so that memory follows the non-zeros rather than the file or examples x features.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "starling/data/loaders.hpp"

#include "file_reader.hpp"
#include "labels.hpp"
#include "load_internal.hpp"
#include "text_parse.hpp"

namespace starling::data {
namespace {

Status lineError(const std::string& path, std::size_t line, const std::string& what) {
  return {StatusCode::kMalformed, path + ":" + std::to_string(line) + ": " + what};
}

// The next whitespace-separated token of rest, or empty at the end.
std::string_view nextToken(std::string_view& rest) {
  std::size_t start = 0;
  while (start < rest.size() && detail::isBlank(rest[start]))
    ++start;
  std::size_t end = start;
  while (end < rest.size() && !detail::isBlank(rest[end]))
    ++end;
  const std::string_view token = rest.substr(start, end - start);
  rest.remove_prefix(end);
  return token;
}

// Where the labels of the file sit, for choosing and checking the label mapping.
struct LabelStats {
  int64_t min = std::numeric_limits<int64_t>::max();
  int64_t max = std::numeric_limits<int64_t>::min();
  std::size_t minLine = 0;
  std::size_t maxLine = 0;
  std::size_t firstUnsignedLine = 0;  // first label other than -1 and +1; 0 if none
  bool sawMinusOne = false;
  bool sawZero = false;

  void add(int64_t label, std::size_t line) {
    if (label < min) {
      min = label;
      minLine = line;
    }
    if (label > max) {
      max = label;
      maxLine = line;
    }
    if (label != -1 && label != 1 && firstUnsignedLine == 0) firstUnsignedLine = line;
    sawMinusOne = sawMinusOne || label == -1;
    sawZero = sawZero || label == 0;
  }
};

}  // namespace

namespace detail {

Result<Dataset> readLibsvm(const std::string& path, const LibsvmOptions& options, TaskKind task,
                           const MemoryLimit& memoryLimit) {
  if (options.numClasses < 0) return Status(StatusCode::kInvalidArgument, path + ": numClasses must be >= 0");
  // Binary and regression labels follow the task's rules; classification keeps the
  // LibsvmLabels mapping.
  const bool byTask = task != TaskKind::kClassification;
  LabelCollector collector(task, options.numClasses);
  STARLING_RETURN_IF_ERROR(collector.checkOptions(path));
  auto reader = detail::FileReader::open(path);
  if (!reader) return reader.status();

  // CSR rows as they come: the dimension may only be known at the end.
  std::vector<uint64_t> rowStart;
  std::vector<uint32_t> indices;  // 0-based
  std::vector<float> values;
  std::vector<int64_t> rawLabels;
  LabelStats stats;
  std::size_t maxIndex = 0;                               // 1-based, as in the file
  std::map<std::string, uint32_t, std::less<>> groupIds;  // in order of first appearance
  std::vector<uint32_t> groups;
  const std::string groupPrefix = options.groupName + ":";

  detail::BlockLines cursor(*reader);
  std::string_view line;
  while (cursor.next(line)) {
    const std::size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    std::string_view rest = line;
    const std::string_view labelToken = nextToken(rest);
    if (labelToken.empty()) continue;
    if (byTask) {
      if (Status s = collector.addText(labelToken); !s) return lineError(path, cursor.number(), s.message());
    } else {
      const auto label = detail::parseIntegral(labelToken);
      if (!label) return lineError(path, cursor.number(), "label " + detail::quoted(labelToken) + " is not an integer");
      stats.add(*label, cursor.number());
      rawLabels.push_back(*label);
    }
    if (!options.groupName.empty()) {
      const std::string_view token = nextToken(rest);
      if (!token.starts_with(groupPrefix) || token.size() == groupPrefix.size())
        return lineError(path, cursor.number(),
                         "expected the group " + detail::quoted(groupPrefix + "VALUE") +
                             " after the label (partition by-column:" + options.groupName + "), found " +
                             (token.empty() ? std::string("nothing") : detail::quoted(token)));
      const std::string_view value = token.substr(groupPrefix.size());
      auto at = groupIds.find(value);
      if (at == groupIds.end()) at = groupIds.emplace(std::string(value), static_cast<uint32_t>(groupIds.size())).first;
      groups.push_back(at->second);
    }
    rowStart.push_back(indices.size());
    const std::size_t held =
        indices.size() * (sizeof(uint32_t) + sizeof(float)) + rowStart.size() * (sizeof(uint64_t) + sizeof(int64_t));
    if (held > memoryLimit.bytes)
      return detail::overMemoryLimit(path + ":" + std::to_string(cursor.number()), held, memoryLimit);

    std::size_t previous = 0;
    for (std::string_view token = nextToken(rest); !token.empty(); token = nextToken(rest)) {
      const std::size_t colon = token.find(':');
      if (colon == std::string_view::npos) {
        return lineError(path, cursor.number(), "expected index:value, found " + detail::quoted(token));
      }
      // Read in 64 bits, so that an index too large for this target's size_t is
      // refused as too large (below) rather than as not a number.
      const auto index = detail::parseIndex64(token.substr(0, colon));
      if (!index || *index == 0) {
        return lineError(path, cursor.number(),
                         "index " + detail::quoted(token.substr(0, colon)) + " is not an integer >= 1");
      }
      if (*index <= previous) {
        return lineError(
            path, cursor.number(),
            "index " + std::to_string(*index) + " does not increase (follows " + std::to_string(previous) + ")");
      }
      if (options.featureDim > 0 && *index > options.featureDim) {
        return lineError(
            path, cursor.number(),
            "index " + std::to_string(*index) + " exceeds featureDim " + std::to_string(options.featureDim));
      }
      // 2^32 features (indices 1 .. 2^32), or what a 32-bit target's size_t holds.
      constexpr uint64_t kMostFeatures = std::min<uint64_t>(uint64_t(1) << 32, std::numeric_limits<std::size_t>::max());
      if (*index > kMostFeatures) {
        return Status(StatusCode::kOutOfRange, path + ":" + std::to_string(cursor.number()) + ": index " +
                                                   std::to_string(*index) + " exceeds the " +
                                                   std::to_string(kMostFeatures) +
                                                   " features a sparse data set can index here");
      }
      const auto value = detail::parseFloat(token.substr(colon + 1));
      if (!value) {
        return lineError(path, cursor.number(),
                         "value " + detail::quoted(token.substr(colon + 1)) + " of index " + std::to_string(*index) +
                             " is not a finite number");
      }
      previous = static_cast<std::size_t>(*index);
      maxIndex = std::max(maxIndex, static_cast<std::size_t>(*index));
      indices.push_back(static_cast<uint32_t>(*index - 1));
      values.push_back(*value);
    }
  }
  STARLING_RETURN_IF_ERROR(cursor.status());
  if (rowStart.empty()) return Status(StatusCode::kMalformed, path + ": no examples");
  rowStart.push_back(indices.size());

  // Label mapping: see LibsvmLabels.
  std::vector<int32_t> labels(rawLabels.size());
  int numClasses = options.numClasses;
  if (!byTask) {
    LibsvmLabels mode = options.labels;
    if (mode == LibsvmLabels::kAuto) {
      if (stats.firstUnsignedLine == 0 && stats.sawMinusOne) {
        mode = LibsvmLabels::kSigned;
      } else {
        mode = stats.sawZero ? LibsvmLabels::kZeroBased : LibsvmLabels::kOneBased;
      }
    }
    int64_t offset = 0;
    switch (mode) {
      case LibsvmLabels::kSigned:
        if (stats.firstUnsignedLine != 0) {
          return lineError(path, stats.firstUnsignedLine, "label is not -1 or +1 (labels read as signed)");
        }
        break;
      case LibsvmLabels::kZeroBased:
        if (stats.min < 0) {
          return lineError(path, stats.minLine,
                           "label " + std::to_string(stats.min) + " is negative (labels read as 0-based)");
        }
        break;
      case LibsvmLabels::kOneBased:
        if (stats.min < 1) {
          return lineError(path, stats.minLine,
                           "label " + std::to_string(stats.min) + " is below 1 (labels read as 1-based)");
        }
        offset = -1;
        break;
      case LibsvmLabels::kAuto:
        break;
    }
    int64_t maxClass = 0;
    for (std::size_t i = 0; i < rawLabels.size(); ++i) {
      const int64_t cls = mode == LibsvmLabels::kSigned ? (rawLabels[i] > 0 ? 1 : 0) : rawLabels[i] + offset;
      labels[i] = static_cast<int32_t>(cls);
      maxClass = std::max(maxClass, cls);
    }
    if (numClasses == 0) {
      numClasses = mode == LibsvmLabels::kSigned ? 2 : static_cast<int>(maxClass + 1);
    } else if (maxClass >= numClasses) {
      return lineError(path, stats.maxLine,
                       "label " + std::to_string(stats.max) + " is class " + std::to_string(maxClass) +
                           ", not below numClasses " + std::to_string(numClasses));
    }
  }

  const std::size_t dim = options.featureDim > 0 ? options.featureDim : maxIndex;
  if (dim == 0) return Status(StatusCode::kMalformed, path + ": no features on any line; set featureDim");
  if (uint64_t(dim) > (uint64_t(1) << 32))
    return Status(StatusCode::kInvalidArgument, path + ": featureDim " + std::to_string(dim) +
                                                    " exceeds the 2^32 features a sparse data set can index");
  auto dataset = byTask ? collector.buildSparse(std::move(rowStart), std::move(indices), std::move(values), dim, path)
                        : Dataset::fromSparse(std::move(rowStart), std::move(indices), std::move(values),
                                              std::move(labels), dim, numClasses);
  if (!dataset) return byTask ? dataset.status() : dataset.status().withContext(path);
  if (!options.groupName.empty()) STARLING_RETURN_IF_ERROR(dataset->withGroups(std::move(groups)));
  return dataset;
}

}  // namespace detail

Result<Dataset> loadLibsvm(const std::string& path, const LibsvmOptions& options) {
  return detail::readLibsvm(path, options, TaskKind::kClassification);
}

}  // namespace starling::data
