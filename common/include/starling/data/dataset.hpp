#pragma once
// Dataset: labelled examples held in memory, compactly.
//
// Images stay as bytes (one byte per pixel, 784 bytes per Fashion-MNIST example)
// and are converted to floats only per batch, by gather(); tabular data (CSV,
// LIBSVM) is held as floats. A Dataset is immutable once built; gather() and
// label() may be called from several threads at once.

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

  std::size_t size() const { return labels_.size(); }
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
  std::size_t featureDim_ = 0;
  int numClasses_ = 0;
  float scale_ = 1.0f;
  std::vector<int> shape_;
};

}  // namespace starling::data
