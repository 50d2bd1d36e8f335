#pragma once
// SparseBatch: a batch of examples in CSR (compressed sparse row) form, as
// data::Dataset::gatherSparse() writes it and Model's sparse passes read it.
//
// Row r holds the features indices[k] (0-based, strictly increasing within the row)
// with the values values[k], for k in [offsets[r], offsets[r + 1]); every other
// feature of the row is 0. offsets has rows() + 1 entries and starts at 0. A plain
// value type: the vectors keep their capacity when a batch is refilled.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace starling::data {

struct SparseBatch {
  std::vector<uint64_t> offsets;  // rows() + 1 entries, offsets[0] == 0
  std::vector<uint32_t> indices;  // nnz() feature indices
  std::vector<float> values;      // nnz() values

  std::size_t rows() const { return offsets.empty() ? 0 : offsets.size() - 1; }
  std::size_t nnz() const { return indices.size(); }
  void clear() {
    offsets.assign(1, 0);
    indices.clear();
    values.clear();
  }
};

}  // namespace starling::data
