#pragma once
// ShardMap: which of the engine's S shards owns each parameter (docs/coordinator.md
// "Shards"). Each parameter belongs to exactly one shard; a shard owns a sorted list of
// intervals of the flat parameter vector. Two maps:
//  - ranges: S contiguous ranges of equal size (within one parameter);
//  - fromRows: the first layer's rows (row r = parameters [r W, (r + 1) W)) placed by a
//    row -> shard map, e.g. `starling-coordinator placement`'s (ShardPlacement: the
//    touched rows only); the rows it does not name fill the shards with the fewest rows,
//    in contiguous runs, until every shard has about rowCount / S rows; the dense rest
//    after the rows is split into S equal ranges.
//
// Immutable once made; any thread may read it.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::coordinator {

// Parameters [begin, end), owned by `shard`.
struct ShardInterval {
  std::size_t begin = 0;
  std::size_t end = 0;
  uint32_t shard = 0;
};

// Entries [first, last) of a sparse tensor's indices.
struct EntryRun {
  std::size_t first = 0;
  std::size_t last = 0;
};

class ShardMap {
 public:
  // kInvalidArgument for no shards or more shards than parameters.
  static Result<ShardMap> ranges(std::size_t dim, uint32_t shards);
  // rows[j] (ascending, unique, < rowCount) is owned by shardOf[j] (< shards); the
  // other rows and the rest as above. kInvalidArgument, naming what is wrong, for
  // rowWidth 0, rowCount x rowWidth over dim, rows and shardOf of different sizes, a
  // row out of order or past rowCount, a shard out of range, or more shards than
  // parameters.
  static Result<ShardMap> fromRows(std::size_t dim, uint32_t shards, uint32_t rowWidth, std::size_t rowCount,
                                   std::span<const uint32_t> rows, std::span<const uint32_t> shardOf);

  uint32_t shards() const { return shards_; }
  std::size_t dim() const { return dim_; }
  // Every interval, ascending, covering [0, dim) without gaps; neighbours belong to
  // different shards.
  std::span<const ShardInterval> intervals() const { return intervals_; }
  // The intervals of one shard, ascending.
  std::span<const ShardInterval> intervalsOf(uint32_t shard) const { return byShard_[shard]; }
  // Parameters owned by each shard.
  std::span<const std::size_t> sizes() const { return sizes_; }
  // Splits a sparse tensor's indices (strictly increasing, < dim) by owner: out[s] gets
  // the runs of entries shard s owns, ascending (cleared first). A range map: S
  // searches, each galloping from the last. A map from rows: one pass over the
  // indices in the rows, each looking its row's shard up, then the rest as a range map.
  void split(std::span<const uint32_t> indices, std::vector<std::vector<EntryRun>>& out) const;

 private:
  ShardMap(std::size_t dim, uint32_t shards, std::vector<ShardInterval> intervals);
  // The runs of entries [from, n) over intervals_[k...] (k holding indices[from]).
  void splitByIntervals(std::span<const uint32_t> indices, std::size_t from, std::size_t k,
                        std::vector<std::vector<EntryRun>>& out) const;

  std::size_t dim_;
  uint32_t shards_;
  std::vector<ShardInterval> intervals_;
  std::vector<std::vector<ShardInterval>> byShard_;
  std::vector<std::size_t> sizes_;
  // fromRows: the shard of each of the first rowCount_ rows of rowWidth_ parameters,
  // one byte a row up to 256 shards (a table of 2^20 rows stays in L2: split() looks
  // up a random row per row touched), else four; rowCount_ 0 for a range map.
  template <typename Owner>
  std::size_t splitRows(std::span<const uint32_t> indices, const std::vector<Owner>& owner,
                        std::vector<std::vector<EntryRun>>& out) const;
  uint32_t rowWidth_ = 0;
  std::size_t rowCount_ = 0;
  std::vector<uint8_t> rowOwner8_;
  std::vector<uint32_t> rowOwner32_;
};

}  // namespace starling::coordinator
