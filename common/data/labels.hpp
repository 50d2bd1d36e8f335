#pragma once
// LabelCollector: checks each example's label against the task and builds the Dataset
// (private to data/). Shared by the CSV, LIBSVM and NPY/NPZ readers so that every
// format applies the same rules:
//   classification: an integral value >= 0 ("3" or "3.0"), below numClasses when set;
//   binary: 0/1 or -1/+1 (not both kinds in one file), mapped to classes 0 and 1;
//   regression: any finite number, kept as a real target.
// add*() return an error message without a location; the caller knows the line or the
// element and prefixes it. One thread at a time.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/data/task_kind.hpp"
#include "starling/util/status.hpp"

namespace starling::data::detail {

class LabelCollector {
 public:
  LabelCollector(TaskKind task, int numClasses) : task_(task), numClasses_(numClasses) {}

  // kInvalidArgument when numClasses does not fit the task (negative; binary other than
  // 0 or 2); path prefixes the message.
  Status checkOptions(const std::string& path) const;

  // A label as written in a text file.
  Status addText(std::string_view text);
  // A label read as a number (NPY and NPZ).
  Status addValue(double value);

  std::size_t size() const { return task_ == TaskKind::kRegression ? targets_.size() : classes_.size(); }
  void reserve(std::size_t n);

  // The Dataset of these labels and features (floats, featureDim per example); errors
  // carry path as context.
  Result<Dataset> build(std::vector<float> features, std::size_t featureDim, std::vector<int> shape,
                        const std::string& path);
  // The same with CSR features (Dataset::fromSparse).
  Result<Dataset> buildSparse(std::vector<uint64_t> rowOffsets, std::vector<uint32_t> columnIndices,
                              std::vector<float> values, std::size_t featureDim, const std::string& path);

 private:
  Status addClass(int64_t value, std::string_view shown);

  TaskKind task_;
  int numClasses_;
  std::vector<int32_t> classes_;
  std::vector<float> targets_;
  int32_t maxClass_ = -1;
  bool sawMinusOne_ = false;
  bool sawZero_ = false;
};

// value as a short decimal string, for messages.
std::string formatNumber(double value);

}  // namespace starling::data::detail
