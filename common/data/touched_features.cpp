#include "starling/data/touched_features.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <numeric>

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

}  // namespace starling::data
