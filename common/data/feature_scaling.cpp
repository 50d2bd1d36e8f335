#include "starling/data/feature_scaling.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "starling/data/categories.hpp"
#include "starling/data/sparse_batch.hpp"

namespace starling::data {
namespace {

// Rows are visited in blocks of this many, so a dense pass needs block x featureDim floats.
constexpr std::size_t kBlock = 512;

std::vector<uint32_t> rowsOf(std::size_t begin, std::size_t end) {
  std::vector<uint32_t> idx(end - begin);
  std::iota(idx.begin(), idx.end(), static_cast<uint32_t>(begin));
  return idx;
}

}  // namespace

FeatureSums featureSums(const Dataset& d) {
  const std::size_t dim = d.featureDim();
  FeatureSums s;
  s.count.assign(dim, double(d.size()));
  s.sum.assign(dim, 0.0);
  s.sumSquares.assign(dim, 0.0);
  s.examples = d.size();
  s.sparse = d.isSparse();
  if (s.sparse) {
    SparseBatch batch;
    for (std::size_t begin = 0; begin < d.size(); begin += kBlock) {
      const auto idx = rowsOf(begin, std::min(d.size(), begin + kBlock));
      d.gatherSparse(idx, batch);
      for (std::size_t k = 0; k < batch.nnz(); ++k) {
        const double x = batch.values[k];
        s.sum[batch.indices[k]] += x;
        s.sumSquares[batch.indices[k]] += x * x;
      }
    }
    return s;
  }
  std::vector<float> rows;
  for (std::size_t begin = 0; begin < d.size(); begin += kBlock) {
    const auto idx = rowsOf(begin, std::min(d.size(), begin + kBlock));
    rows.resize(idx.size() * dim);
    d.gather(idx, rows);
    for (std::size_t r = 0; r < idx.size(); ++r)
      for (std::size_t j = 0; j < dim; ++j) {
        const double x = rows[r * dim + j];
        s.sum[j] += x;
        s.sumSquares[j] += x * x;
      }
  }
  // One-hot indicators stay 0/1: their sums read as a feature of mean 0 and std 0,
  // which the merge turns into the identity (mean 0, std 1).
  for (std::size_t j : oneHotFeatures(d)) {
    s.sum[j] = 0.0;
    s.sumSquares[j] = 0.0;
  }
  return s;
}

Result<Dataset> scaleFeatures(const Dataset& d, const FeatureScaling& scaling) {
  const std::size_t dim = d.featureDim();
  if (scaling.mean.size() != dim || scaling.std.size() != dim)
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("feature scaling has {} means and {} standard deviations for {} features",
                              scaling.mean.size(), scaling.std.size(), dim));
  if (d.isSparse() && scaling.centre)
    return Status(StatusCode::kInvalidArgument, "sparse features are scaled, never centred (it would densify them)");
  const std::vector<uint32_t> all = rowsOf(0, d.size());
  std::vector<uint32_t> groups(d.groups().begin(), d.groups().end());
  Result<Dataset> out = Status(StatusCode::kInternal, "unset");
  if (d.isSparse()) {
    SparseBatch b;
    d.gatherSparse(all, b);
    for (std::size_t k = 0; k < b.nnz(); ++k)
      b.values[k] = static_cast<float>(double(b.values[k]) / scaling.std[b.indices[k]]);
    if (d.isRegression()) {
      out = Dataset::fromSparseTargets(std::move(b.offsets), std::move(b.indices), std::move(b.values),
                                       {d.targets().begin(), d.targets().end()}, dim);
    } else {
      out = Dataset::fromSparse(std::move(b.offsets), std::move(b.indices), std::move(b.values),
                                {d.labels().begin(), d.labels().end()}, dim, d.numClasses());
    }
  } else {
    std::vector<float> x(d.size() * dim);
    d.gather(all, x);
    for (std::size_t i = 0; i < d.size(); ++i)
      for (std::size_t j = 0; j < dim; ++j) {
        float& v = x[i * dim + j];
        v = static_cast<float>((double(v) - scaling.mean[j]) / scaling.std[j]);
      }
    if (d.isRegression()) {
      out = Dataset::fromFloatTargets(std::move(x), {d.targets().begin(), d.targets().end()}, dim, d.shape());
    } else {
      out = Dataset::fromFloats(std::move(x), {d.labels().begin(), d.labels().end()}, dim, d.numClasses(), d.shape());
    }
  }
  if (!out) return out.status().withContext("scaling the features");
  if (!groups.empty()) STARLING_RETURN_IF_ERROR(out->withGroups(std::move(groups)));
  STARLING_RETURN_IF_ERROR(out->withCategories(d.categories()));
  return out;
}

}  // namespace starling::data
