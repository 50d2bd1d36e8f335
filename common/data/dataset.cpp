#include "starling/data/dataset.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
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

// Checks the CSR arrays of fromSparse and fromSparseTargets against the example count.
Status validateSparse(std::span<const uint64_t> offsets, std::span<const uint32_t> indices,
                      std::span<const float> values, std::size_t examples, std::size_t featureDim) {
  auto bad = [](const std::string& why) { return Status{StatusCode::kInvalidArgument, why}; };
  if (featureDim == 0) return bad("a dataset needs featureDim >= 1");
  if (uint64_t(featureDim) > (uint64_t(1) << 32))  // 64-bit: size_t has 32 bits on armhf
    return bad("featureDim " + std::to_string(featureDim) + " exceeds the 2^32 features a sparse dataset can index");
  if (offsets.size() != examples + 1)
    return bad(std::to_string(offsets.size()) + " row offsets do not delimit " + std::to_string(examples) +
               " examples (expected one more offset than examples)");
  if (indices.size() != values.size())
    return bad(std::to_string(indices.size()) + " column indices but " + std::to_string(values.size()) + " values");
  if (offsets[0] != 0) return bad("the first row offset must be 0");
  if (offsets[examples] != indices.size())
    return bad("the last row offset " + std::to_string(offsets[examples]) + " is not the number of non-zeros " +
               std::to_string(indices.size()));
  for (std::size_t r = 0; r < examples; ++r) {
    if (offsets[r + 1] < offsets[r]) return bad("row offsets decrease at example " + std::to_string(r));
    for (uint64_t k = offsets[r]; k < offsets[r + 1]; ++k) {
      if (indices[k] >= featureDim)
        return bad("example " + std::to_string(r) + ": feature index " + std::to_string(indices[k]) +
                   " is not below featureDim " + std::to_string(featureDim));
      if (k > offsets[r] && indices[k] <= indices[k - 1])
        return bad("example " + std::to_string(r) + ": feature indices do not strictly increase (" +
                   std::to_string(indices[k - 1]) + " then " + std::to_string(indices[k]) + ")");
    }
  }
  return Status::ok();
}

}  // namespace

Result<Dataset> Dataset::fromSparse(std::vector<uint64_t> rowOffsets, std::vector<uint32_t> columnIndices,
                                    std::vector<float> values, std::vector<int32_t> labels, std::size_t featureDim,
                                    int numClasses) {
  STARLING_RETURN_IF_ERROR(validateSparse(rowOffsets, columnIndices, values, labels.size(), featureDim));
  // The label checks of the dense factories, as if each example had one feature.
  std::vector<int> one = {1};
  STARLING_RETURN_IF_ERROR(validate(labels.size(), labels, 1, numClasses, one));
  std::vector<int> shape;
  if (featureDim <= static_cast<std::size_t>(std::numeric_limits<int>::max())) shape = {static_cast<int>(featureDim)};
  Dataset d;
  d.sparse_ = true;
  d.offsets_ = std::move(rowOffsets);
  d.indices_ = std::move(columnIndices);
  d.floats_ = std::move(values);
  d.labels_ = std::move(labels);
  d.featureDim_ = featureDim;
  d.numClasses_ = numClasses;
  d.shape_ = std::move(shape);
  return d;
}

Result<Dataset> Dataset::fromSparseTargets(std::vector<uint64_t> rowOffsets, std::vector<uint32_t> columnIndices,
                                           std::vector<float> values, std::vector<float> targets,
                                           std::size_t featureDim) {
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (!std::isfinite(targets[i]))
      return Status(StatusCode::kInvalidArgument, "target of example " + std::to_string(i) + " is not a finite number");
  auto d = fromSparse(std::move(rowOffsets), std::move(columnIndices), std::move(values),
                      std::vector<int32_t>(targets.size(), 0), featureDim, 1);
  if (!d) return d.status();
  d->targets_ = std::move(targets);
  d->regression_ = true;
  return d;
}

std::size_t Dataset::nnz() const {
  return sparse_ ? indices_.size() : size() * featureDim_;
}

void Dataset::gatherSparse(std::span<const uint32_t> idx, SparseBatch& out) const {
  out.clear();
  if (sparse_) {
    for (uint32_t i : idx) {
      assert(i < labels_.size());
      const uint64_t begin = offsets_[i];
      const uint64_t end = offsets_[i + 1];
      out.indices.insert(out.indices.end(), indices_.begin() + begin, indices_.begin() + end);
      out.values.insert(out.values.end(), floats_.begin() + begin, floats_.begin() + end);
      out.offsets.push_back(out.indices.size());
    }
    return;
  }
  // Dense storage: the non-zero values of each row.
  const std::size_t dim = featureDim_;
  for (uint32_t i : idx) {
    assert(i < labels_.size());
    for (std::size_t j = 0; j < dim; ++j) {
      const std::size_t at = static_cast<std::size_t>(i) * dim + j;
      const float v = bytes_.empty() ? floats_[at] : static_cast<float>(bytes_[at]) * scale_;
      if (v == 0.0f) continue;
      out.indices.push_back(static_cast<uint32_t>(j));
      out.values.push_back(v);
    }
    out.offsets.push_back(out.indices.size());
  }
}

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

Status Dataset::withGroups(std::vector<uint32_t> groups) {
  if (!groups.empty() && groups.size() != size())
    return Status(StatusCode::kInvalidArgument,
                  std::to_string(groups.size()) + " group ids for " + std::to_string(size()) + " examples");
  groups_ = std::move(groups);
  return Status::ok();
}

Status Dataset::withCategories(CategoryColumns c) {
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, "categorical columns: " + m); };
  const std::size_t columns = c.names.size();
  if (columns == 0) {
    categories_ = CategoryColumns{};
    return Status::ok();
  }
  if (sparse_ || !bytes_.empty()) return bad("need dense float features");
  if (c.offsets.size() != columns || c.values.size() != columns)
    return bad(std::to_string(columns) + " names, " + std::to_string(c.offsets.size()) + " offsets and " +
               std::to_string(c.values.size()) + " value lists");
  if (c.width == 0) return bad("a width of 0 slots");
  for (std::size_t k = 0; k < columns; ++k)
    if (c.offsets[k] + c.width > featureDim_)
      return bad("column '" + c.names[k] + "' ends past the " + std::to_string(featureDim_) + " features");
  if (c.codes.size() != size() * columns)
    return bad(std::to_string(c.codes.size()) + " codes for " + std::to_string(size()) + " examples x " +
               std::to_string(columns) + " columns");
  for (std::size_t i = 0; i < c.codes.size(); ++i)
    if (c.codes[i] >= c.values[i % columns].size())
      return bad("example " + std::to_string(i / columns) + " has code " + std::to_string(c.codes[i]) + " in column '" +
                 c.names[i % columns] + "', which has " + std::to_string(c.values[i % columns].size()) + " values");
  categories_ = std::move(c);
  return Status::ok();
}

void Dataset::gather(std::span<const uint32_t> idx, std::span<float> out) const {
  const std::size_t dim = featureDim_;
  assert(out.size() == idx.size() * dim);
  if (floats_.empty() && bytes_.empty() && !sparse_) return;  // an empty dataset: idx must be empty too
  float* __restrict dstBase = out.data();
  if (sparse_) {
    std::fill(out.begin(), out.end(), 0.0f);
    for (std::size_t r = 0; r < idx.size(); ++r) {
      assert(idx[r] < labels_.size());
      float* dst = dstBase + r * dim;
      for (uint64_t k = offsets_[idx[r]]; k < offsets_[idx[r] + 1]; ++k)
        dst[indices_[k]] = floats_[k];
    }
  } else if (!bytes_.empty()) {
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

Dataset Dataset::emptyLike() const {
  Dataset d;
  d.featureDim_ = featureDim_;
  d.numClasses_ = numClasses_;
  d.scale_ = scale_;
  d.shape_ = shape_;
  d.sparse_ = sparse_;
  d.regression_ = regression_;
  d.categories_.names = categories_.names;
  d.categories_.offsets = categories_.offsets;
  d.categories_.width = categories_.width;
  d.categories_.values = categories_.values;
  return d;
}

void Dataset::flipLabels() {
  for (int32_t& y : labels_)
    y = numClasses_ - 1 - y;
  for (float& t : targets_)
    t = -t;
}

Dataset Dataset::subset(std::span<const uint32_t> idx) const {
  Dataset d = emptyLike();
  d.labels_.reserve(idx.size());
  const std::size_t dim = featureDim_;
  if (sparse_) {
    d.offsets_.reserve(idx.size() + 1);
    d.offsets_.push_back(0);
    for (uint32_t i : idx) {
      assert(i < labels_.size());
      const uint64_t begin = offsets_[i];
      const uint64_t end = offsets_[i + 1];
      d.indices_.insert(d.indices_.end(), indices_.begin() + begin, indices_.begin() + end);
      d.floats_.insert(d.floats_.end(), floats_.begin() + begin, floats_.begin() + end);
      d.offsets_.push_back(d.indices_.size());
    }
  } else if (!bytes_.empty()) {
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
  if (regression_) {
    d.targets_.reserve(idx.size());
    for (uint32_t i : idx)
      d.targets_.push_back(targets_[i]);
  }
  if (!groups_.empty()) {
    d.groups_.reserve(idx.size());
    for (uint32_t i : idx)
      d.groups_.push_back(groups_[i]);
  }
  if (const std::size_t columns = categories_.names.size(); columns > 0) {
    d.categories_.codes.reserve(idx.size() * columns);
    for (uint32_t i : idx)
      d.categories_.codes.insert(d.categories_.codes.end(), categories_.codes.begin() + std::ptrdiff_t(i * columns),
                                 categories_.codes.begin() + std::ptrdiff_t((i + 1) * columns));
  }
  return d;
}

Result<Dataset> Dataset::concat(std::span<const Dataset> parts) {
  if (parts.empty()) return Status(StatusCode::kInvalidArgument, "nothing to concatenate");
  const Dataset& first = parts[0];
  for (std::size_t p = 1; p < parts.size(); ++p) {
    const Dataset& d = parts[p];
    auto differs = [&](const std::string& what) {
      return Status(StatusCode::kInvalidArgument, "part " + std::to_string(p) + " differs from part 0 in " + what);
    };
    if (d.sparse_ != first.sparse_ || d.bytes_.empty() != first.bytes_.empty())
      return differs("how its features are stored");
    if (d.featureDim_ != first.featureDim_)
      return differs("its features (" + std::to_string(d.featureDim_) + ", not " + std::to_string(first.featureDim_) +
                     ")");
    if (d.regression_ != first.regression_) return differs("its task (regression or not)");
    if (d.numClasses_ != first.numClasses_)
      return differs("its classes (" + std::to_string(d.numClasses_) + ", not " + std::to_string(first.numClasses_) +
                     ")");
    if (d.groups_.empty() != first.groups_.empty()) return differs("having groups");
    if (d.categories_.names != first.categories_.names || d.categories_.offsets != first.categories_.offsets ||
        d.categories_.width != first.categories_.width)
      return differs("its categorical columns");
  }
  Dataset out = first.emptyLike();
  if (out.sparse_) out.offsets_.push_back(0);
  uint32_t groupBase = 0;
  for (const Dataset& d : parts) {
    out.bytes_.insert(out.bytes_.end(), d.bytes_.begin(), d.bytes_.end());
    out.floats_.insert(out.floats_.end(), d.floats_.begin(), d.floats_.end());
    if (out.sparse_) {
      const uint64_t base = out.indices_.size();
      for (std::size_t r = 1; r < d.offsets_.size(); ++r)
        out.offsets_.push_back(base + d.offsets_[r]);
      out.indices_.insert(out.indices_.end(), d.indices_.begin(), d.indices_.end());
    }
    out.labels_.insert(out.labels_.end(), d.labels_.begin(), d.labels_.end());
    out.targets_.insert(out.targets_.end(), d.targets_.begin(), d.targets_.end());
    uint32_t most = 0;
    for (uint32_t g : d.groups_) {
      out.groups_.push_back(groupBase + g);
      most = std::max(most, g + 1);
    }
    groupBase += most;
  }
  // Categorical values: one dictionary per column over every part (first seen first).
  const std::size_t columns = out.categories_.names.size();
  if (columns > 0) {
    out.categories_.values.assign(columns, {});
    std::vector<std::map<std::string, uint32_t>> codeOf(columns);
    for (const Dataset& d : parts) {
      std::vector<std::vector<uint32_t>> remap(columns);
      for (std::size_t c = 0; c < columns; ++c)
        for (const std::string& v : d.categories_.values[c]) {
          const auto [it, added] = codeOf[c].emplace(v, static_cast<uint32_t>(out.categories_.values[c].size()));
          if (added) out.categories_.values[c].push_back(v);
          remap[c].push_back(it->second);
        }
      for (std::size_t k = 0; k < d.categories_.codes.size(); ++k)
        out.categories_.codes.push_back(remap[k % columns][d.categories_.codes[k]]);
    }
  }
  return out;
}

std::size_t Dataset::memoryBytes() const {
  return bytes_.size() * sizeof(uint8_t) + floats_.size() * sizeof(float) + labels_.size() * sizeof(int32_t) +
         targets_.size() * sizeof(float) + groups_.size() * sizeof(uint32_t) + offsets_.size() * sizeof(uint64_t) +
         indices_.size() * sizeof(uint32_t) + categories_.codes.size() * sizeof(uint32_t);
}

}  // namespace starling::data
