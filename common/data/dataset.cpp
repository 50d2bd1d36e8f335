#include "starling/data/dataset.hpp"

#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace starling::data {
namespace {

// Checks what fromBytes and fromFloats have in common; fills shape when it is empty.
Status validate(std::size_t numFeatureValues, std::span<const int32_t> labels, std::size_t featureDim, int numClasses,
                std::vector<int>& shape) {
  if (featureDim == 0) return {StatusCode::kInvalidArgument, "a dataset needs featureDim >= 1"};
  if (numClasses < 1) return {StatusCode::kInvalidArgument, "a dataset needs numClasses >= 1"};
  if (numFeatureValues / featureDim != labels.size() || numFeatureValues % featureDim != 0) {
    return {StatusCode::kInvalidArgument, std::to_string(numFeatureValues) + " feature values do not make " +
                                              std::to_string(labels.size()) + " examples of " +
                                              std::to_string(featureDim) + " features"};
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= numClasses) {
      return {StatusCode::kInvalidArgument, "label " + std::to_string(labels[i]) + " of example " + std::to_string(i) +
                                                " is outside [0, " + std::to_string(numClasses) + ")"};
    }
  }
  if (shape.empty()) {
    if (featureDim > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      return {StatusCode::kOutOfRange, "featureDim " + std::to_string(featureDim) + " does not fit a shape"};
    }
    shape = {static_cast<int>(featureDim)};
    return Status::ok();
  }
  std::size_t product = 1;
  for (int extent : shape) {
    if (extent < 1) return {StatusCode::kInvalidArgument, "shape extents must be >= 1"};
    product *= static_cast<std::size_t>(extent);
    if (product > featureDim) break;
  }
  if (product != featureDim) {
    return {StatusCode::kInvalidArgument, "shape does not multiply to featureDim " + std::to_string(featureDim)};
  }
  return Status::ok();
}

}  // namespace

Result<Dataset> Dataset::fromBytes(std::vector<uint8_t> features, std::vector<int32_t> labels, std::size_t featureDim,
                                   int numClasses, float scale, std::vector<int> shape) {
  STARLING_RETURN_IF_ERROR(validate(features.size(), labels, featureDim, numClasses, shape));
  Dataset d;
  d.bytes_ = std::move(features);
  d.labels_ = std::move(labels);
  d.featureDim_ = featureDim;
  d.numClasses_ = numClasses;
  d.scale_ = scale;
  d.shape_ = std::move(shape);
  return d;
}

Result<Dataset> Dataset::fromFloats(std::vector<float> features, std::vector<int32_t> labels, std::size_t featureDim,
                                    int numClasses, std::vector<int> shape) {
  STARLING_RETURN_IF_ERROR(validate(features.size(), labels, featureDim, numClasses, shape));
  Dataset d;
  d.floats_ = std::move(features);
  d.labels_ = std::move(labels);
  d.featureDim_ = featureDim;
  d.numClasses_ = numClasses;
  d.shape_ = std::move(shape);
  return d;
}

Result<Dataset> Dataset::fromFloatTargets(std::vector<float> features, std::vector<float> targets,
                                          std::size_t featureDim, std::vector<int> shape) {
  std::vector<int32_t> zeros(targets.size(), 0);
  STARLING_RETURN_IF_ERROR(validate(features.size(), zeros, featureDim, 1, shape));
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (!std::isfinite(targets[i]))
      return Status(StatusCode::kInvalidArgument, "target of example " + std::to_string(i) + " is not a finite number");
  Dataset d;
  d.floats_ = std::move(features);
  d.labels_ = std::move(zeros);
  d.targets_ = std::move(targets);
  d.regression_ = true;
  d.featureDim_ = featureDim;
  d.numClasses_ = 1;
  d.shape_ = std::move(shape);
  return d;
}

void Dataset::gather(std::span<const uint32_t> idx, std::span<float> out) const {
  const std::size_t dim = featureDim_;
  assert(out.size() == idx.size() * dim);
  if (floats_.empty() && bytes_.empty()) return;  // an empty dataset: idx must be empty too
  float* __restrict dstBase = out.data();
  if (!bytes_.empty()) {
    const uint8_t* __restrict srcBase = bytes_.data();
    const float scale = scale_;
    for (std::size_t r = 0; r < idx.size(); ++r) {
      assert(idx[r] < labels_.size());
      const uint8_t* __restrict src = srcBase + static_cast<std::size_t>(idx[r]) * dim;
      float* __restrict dst = dstBase + r * dim;
      // A plain loop over restrict pointers: the compiler widens bytes to floats 8 or 16 at a time.
      for (std::size_t j = 0; j < dim; ++j)
        dst[j] = static_cast<float>(src[j]) * scale;
    }
  } else {
    const float* srcBase = floats_.data();
    for (std::size_t r = 0; r < idx.size(); ++r) {
      assert(idx[r] < labels_.size());
      std::memcpy(dstBase + r * dim, srcBase + static_cast<std::size_t>(idx[r]) * dim, dim * sizeof(float));
    }
  }
}

Dataset Dataset::subset(std::span<const uint32_t> idx) const {
  Dataset d;
  d.featureDim_ = featureDim_;
  d.numClasses_ = numClasses_;
  d.scale_ = scale_;
  d.shape_ = shape_;
  d.labels_.reserve(idx.size());
  const std::size_t dim = featureDim_;
  if (!bytes_.empty()) {
    d.bytes_.resize(idx.size() * dim);
    for (std::size_t r = 0; r < idx.size(); ++r) {
      assert(idx[r] < labels_.size());
      std::memcpy(d.bytes_.data() + r * dim, bytes_.data() + static_cast<std::size_t>(idx[r]) * dim, dim);
    }
  } else if (!floats_.empty()) {
    d.floats_.resize(idx.size() * dim);
    for (std::size_t r = 0; r < idx.size(); ++r) {
      assert(idx[r] < labels_.size());
      std::memcpy(d.floats_.data() + r * dim, floats_.data() + static_cast<std::size_t>(idx[r]) * dim,
                  dim * sizeof(float));
    }
  }
  for (uint32_t i : idx)
    d.labels_.push_back(labels_[i]);
  d.regression_ = regression_;
  if (regression_) {
    d.targets_.reserve(idx.size());
    for (uint32_t i : idx)
      d.targets_.push_back(targets_[i]);
  }
  return d;
}

std::size_t Dataset::memoryBytes() const {
  return bytes_.size() * sizeof(uint8_t) + floats_.size() * sizeof(float) + labels_.size() * sizeof(int32_t) +
         targets_.size() * sizeof(float);
}

}  // namespace starling::data
