#include "labels.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>

#include "text_parse.hpp"

namespace starling::data::detail {

namespace {

Status labelError(const std::string& what) {
  return {StatusCode::kMalformed, what};
}

}  // namespace

std::string formatNumber(double value) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  if (ec != std::errc()) return "?";
  return std::string(buf, end);
}

Status LabelCollector::checkOptions(const std::string& path) const {
  if (numClasses_ < 0) return {StatusCode::kInvalidArgument, path + ": numClasses must be >= 0"};
  if (task_ == TaskKind::kBinary && numClasses_ != 0 && numClasses_ != 2) {
    return {StatusCode::kInvalidArgument,
            path + ": a binary task has 2 classes, not numClasses " + std::to_string(numClasses_)};
  }
  return Status::ok();
}

void LabelCollector::reserve(std::size_t n) {
  if (task_ == TaskKind::kRegression) {
    targets_.reserve(n);
  } else {
    classes_.reserve(n);
  }
}

Status LabelCollector::addText(std::string_view text) {
  if (task_ == TaskKind::kRegression) {
    const auto value = parseFloat(text);
    if (!value) return labelError("label " + quoted(text) + " is not a finite number (regression task)");
    targets_.push_back(*value);
    return Status::ok();
  }
  const auto value = parseIntegral(text);
  if (!value) {
    if (task_ == TaskKind::kBinary) {
      return labelError("label " + quoted(text) + " is not a binary label: 0/1 or -1/+1 (binary task)");
    }
    return labelError("label " + quoted(text) + " is not an integer >= 0 (classification task)");
  }
  return addClass(*value, text);
}

Status LabelCollector::addValue(double value) {
  if (task_ == TaskKind::kRegression) {
    const float f = static_cast<float>(value);
    if (!std::isfinite(value) || !std::isfinite(f)) {
      return labelError("label " + formatNumber(value) + " is not a finite number (regression task)");
    }
    targets_.push_back(f);
    return Status::ok();
  }
  const std::string shown = formatNumber(value);
  if (!std::isfinite(value) || value != std::floor(value) || std::fabs(value) > 2147483647.0) {
    if (task_ == TaskKind::kBinary) {
      return labelError("label " + shown + " is not a binary label: 0/1 or -1/+1 (binary task)");
    }
    return labelError("label " + shown + " is not an integer >= 0 (classification task)");
  }
  return addClass(static_cast<int64_t>(value), shown);
}

Status LabelCollector::addClass(int64_t value, std::string_view shown) {
  if (task_ == TaskKind::kBinary) {
    if (value != 0 && value != 1 && value != -1) {
      return labelError("label " + quoted(shown) + " is not a binary label: 0/1 or -1/+1 (binary task)");
    }
    sawMinusOne_ = sawMinusOne_ || value == -1;
    sawZero_ = sawZero_ || value == 0;
    if (sawMinusOne_ && sawZero_) {
      return labelError("label " + quoted(shown) +
                        " mixes the 0/1 and -1/+1 conventions; binary labels are one or the other (binary task)");
    }
    classes_.push_back(value == 1 ? 1 : 0);
    return Status::ok();
  }
  if (value < 0) return labelError("label " + quoted(shown) + " is not an integer >= 0 (classification task)");
  if (numClasses_ > 0 && value >= numClasses_) {
    return labelError("label " + std::to_string(value) + " is not below numClasses " + std::to_string(numClasses_));
  }
  if (value == std::numeric_limits<int32_t>::max()) {
    return labelError("label " + std::to_string(value) + " leaves no room for a class count");
  }
  const auto cls = static_cast<int32_t>(value);
  if (cls > maxClass_) maxClass_ = cls;
  classes_.push_back(cls);
  return Status::ok();
}

Result<Dataset> LabelCollector::build(std::vector<float> features, std::size_t featureDim, std::vector<int> shape,
                                      const std::string& path) {
  Result<Dataset> dataset;
  switch (task_) {
    case TaskKind::kRegression:
      dataset = Dataset::fromFloatTargets(std::move(features), std::move(targets_), featureDim, std::move(shape));
      break;
    case TaskKind::kBinary:
      dataset = Dataset::fromFloats(std::move(features), std::move(classes_), featureDim, 2, std::move(shape));
      break;
    case TaskKind::kClassification:
      dataset = Dataset::fromFloats(std::move(features), std::move(classes_), featureDim,
                                    numClasses_ > 0 ? numClasses_ : maxClass_ + 1, std::move(shape));
      break;
  }
  if (!dataset) return dataset.status().withContext(path);
  return dataset;
}

Result<Dataset> LabelCollector::buildSparse(std::vector<uint64_t> rowOffsets, std::vector<uint32_t> columnIndices,
                                            std::vector<float> values, std::size_t featureDim,
                                            const std::string& path) {
  Result<Dataset> dataset;
  switch (task_) {
    case TaskKind::kRegression:
      dataset = Dataset::fromSparseTargets(std::move(rowOffsets), std::move(columnIndices), std::move(values),
                                           std::move(targets_), featureDim);
      break;
    case TaskKind::kBinary:
      dataset = Dataset::fromSparse(std::move(rowOffsets), std::move(columnIndices), std::move(values),
                                    std::move(classes_), featureDim, 2);
      break;
    case TaskKind::kClassification:
      dataset = Dataset::fromSparse(std::move(rowOffsets), std::move(columnIndices), std::move(values),
                                    std::move(classes_), featureDim, numClasses_ > 0 ? numClasses_ : maxClass_ + 1);
      break;
  }
  if (!dataset) return dataset.status().withContext(path);
  return dataset;
}

}  // namespace starling::data::detail
