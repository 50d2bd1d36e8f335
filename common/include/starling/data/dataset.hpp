#pragma once
// Dataset: labelled examples held in memory, compactly.
//
// Images stay as bytes (one byte per pixel, 784 bytes per Fashion-MNIST example)
// and are converted to floats only per batch, by gather(); tabular data (CSV,
// LIBSVM) is held as floats. A Dataset is immutable once built; gather() and
// label() may be called from several threads at once.
//
// Labels are classes (int32 in [0, numClasses)) or, for regression, real values
// (targets(), float): a regression data set has numClasses() == 1 (one output) and
// every label() 0, so code that only counts examples or classes works on both; code
// that needs the values reads targets().

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::data {

class Dataset {
 public:
  Dataset() = default;

  // Bytes: features[i * featureDim + j] is feature j of example i; gather() yields
  // float(byte) * scale. shape describes one example, e.g. {1, 28, 28}; its product
  // must equal featureDim ({featureDim} when empty).
  static Result<Dataset> fromBytes(std::vector<uint8_t> features, std::vector<int32_t> labels, std::size_t featureDim,
                                   int numClasses, float scale = 1.0f / 255.0f, std::vector<int> shape = {});
  // Floats, same layout.
  static Result<Dataset> fromFloats(std::vector<float> features, std::vector<int32_t> labels, std::size_t featureDim,
                                    int numClasses, std::vector<int> shape = {});

  // Regression: one real target per example (finite), features as in fromFloats.
  static Result<Dataset> fromFloatTargets(std::vector<float> features, std::vector<float> targets,
                                          std::size_t featureDim, std::vector<int> shape = {});

  std::size_t size() const { return labels_.size(); }
  // True when the labels are real values (fromFloatTargets).
  bool isRegression() const { return regression_; }
  // The real targets of a regression data set (empty otherwise).
  std::span<const float> targets() const { return targets_; }
  float target(std::size_t i) const { return targets_[i]; }
  std::size_t featureDim() const { return featureDim_; }
  int numClasses() const { return numClasses_; }
  const std::vector<int>& shape() const { return shape_; }
  int32_t label(std::size_t i) const { return labels_[i]; }
  std::span<const int32_t> labels() const { return labels_; }

  // Writes the features of examples idx[0..n) as the rows of out, row-major:
  // out[r * featureDim() + j]. out.size() must be idx.size() * featureDim().
  void gather(std::span<const uint32_t> idx, std::span<float> out) const;

  // A copy holding only the examples idx, in that order.
  Dataset subset(std::span<const uint32_t> idx) const;

  // Bytes of memory the features and labels occupy.
  std::size_t memoryBytes() const;

 private:
  std::vector<uint8_t> bytes_;  // when stored as bytes
  std::vector<float> floats_;   // when stored as floats
  std::vector<int32_t> labels_;
  std::vector<float> targets_;  // regression only
  bool regression_ = false;     // also when it holds no example
  std::size_t featureDim_ = 0;
  int numClasses_ = 0;
  float scale_ = 1.0f;
  std::vector<int> shape_;
};

}  // namespace starling::data
