#include "starling/data/touched_features.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <numeric>
#include <string>

namespace starling::data {

std::vector<uint32_t> featuresTouched(const Dataset& dataset) {
  std::vector<uint32_t> all(dataset.size());
  std::iota(all.begin(), all.end(), 0u);
  return featuresTouched(dataset, all);
}

std::vector<uint32_t> featuresTouched(const Dataset& dataset, std::span<const uint32_t> examples) {
  // A bit per feature (featureDim / 8 bytes): the set is as large as the feature space
  // at worst, and the bits come out in order. Batches of examples go through
  // gatherSparse(), which yields the non-zero values of dense data sets too.
  const std::size_t dim = dataset.featureDim();
  std::vector<uint64_t> seen((dim + 63) / 64, 0);
  constexpr std::size_t kBatch = 256;
  SparseBatch batch;
  for (std::size_t start = 0; start < examples.size(); start += kBatch) {
    const auto rows = examples.subspan(start, std::min(kBatch, examples.size() - start));
    for ([[maybe_unused]] uint32_t e : rows)
      assert(e < dataset.size());
    dataset.gatherSparse(rows, batch);
    for (std::size_t k = 0; k < batch.nnz(); ++k)
      if (batch.values[k] != 0.0f) seen[batch.indices[k] / 64] |= uint64_t{1} << (batch.indices[k] % 64);
  }
  std::vector<uint32_t> out;
  for (std::size_t w = 0; w < seen.size(); ++w) {
    for (uint64_t bits = seen[w]; bits != 0; bits &= bits - 1)
      out.push_back(static_cast<uint32_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(bits))));
  }
  return out;
}

Result<Dataset> restrictFeatures(const Dataset& dataset, std::span<const uint32_t> rows) {
  for (std::size_t k = 0; k < rows.size(); ++k)
    if (rows[k] >= dataset.featureDim() || (k > 0 && rows[k] <= rows[k - 1]))
      return Status(StatusCode::kInvalidArgument,
                    "the features kept must increase and lie below " + std::to_string(dataset.featureDim()) +
                        "; position " + std::to_string(k) + " (feature " + std::to_string(rows[k]) + ") does not");
  std::vector<uint64_t> offsets{0};
  std::vector<uint32_t> indices;
  std::vector<float> values;
  offsets.reserve(dataset.size() + 1);
  constexpr std::size_t kBatch = 256;
  SparseBatch batch;
  std::vector<uint32_t> examples;
  for (std::size_t start = 0; start < dataset.size(); start += kBatch) {
    examples.resize(std::min(kBatch, dataset.size() - start));
    std::iota(examples.begin(), examples.end(), static_cast<uint32_t>(start));
    dataset.gatherSparse(examples, batch);
    for (std::size_t r = 0; r < examples.size(); ++r) {
      for (std::size_t e = batch.offsets[r]; e < batch.offsets[r + 1]; ++e) {
        if (batch.values[e] == 0.0f) continue;
        const auto at = std::lower_bound(rows.begin(), rows.end(), batch.indices[e]);
        if (at == rows.end() || *at != batch.indices[e])
          return Status(StatusCode::kInvalidArgument, "example " + std::to_string(start + r) + " has feature " +
                                                          std::to_string(batch.indices[e]) +
                                                          ", which is not among the features kept");
        indices.push_back(static_cast<uint32_t>(at - rows.begin()));
        values.push_back(batch.values[e]);
      }
      offsets.push_back(indices.size());
    }
  }
  if (dataset.isRegression())
    return Dataset::fromSparseTargets(std::move(offsets), std::move(indices), std::move(values),
                                      std::vector<float>(dataset.targets().begin(), dataset.targets().end()),
                                      rows.size());
  return Dataset::fromSparse(std::move(offsets), std::move(indices), std::move(values),
                             std::vector<int32_t>(dataset.labels().begin(), dataset.labels().end()), rows.size(),
                             dataset.numClasses());
}

}  // namespace starling::data
