#pragma once
// ShardMap: which of the engine's S shards owns each parameter (docs/coordinator.md
// "Shards"). Each parameter belongs to exactly one shard. Two maps:
//  - ranges: S contiguous ranges of equal size (within one parameter);
//  - fromRows: the first layer's rows, one per input feature, placed by a row -> shard
//    map, e.g. `starling-coordinator placement`'s (ShardPlacement: the touched rows
//    only); the rows it does not name fill the shards with the fewest rows, in
//    contiguous runs of row ids, until every shard has about rowCount / S rows; the
//    dense rest after the rows is split into S equal ranges. The rows take the first
//    rowCount x rowWidth parameters in one of two layouts (RowLayout), as
//    model::Model::firstLayerRows names them: embedbag's table {rowCount, rowWidth}
//    (row r = parameters [r W, (r + 1) W)), or a dense first layer's weight
//    {rowWidth, rowCount} row-major (linear, mlp: row r is column r, parameters
//    r, r + rowCount, r + 2 rowCount, ...).
//
// Representation: one owner per row (a byte up to 256 shards, else four) and the S
// ranges of the dense rest; the owner of a parameter is computed, never listed. A
// list of intervals would need one per run of parameters of one shard: up to one per
// parameter for columns (2^20 features x 2 outputs placed at random on 2 shards:
// 2^20 intervals, 24 MB and 24 MB again by shard), where the owner table is 1 MB
// whatever the outputs. Nothing needs the list: dense work is cut into S equal ranges
// whatever the map (Shards::forRanges), and sparse work goes by split().
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

// How the first layer's rows lie in the first rowCount x rowWidth parameters.
enum class RowLayout : uint8_t {
  kContiguous,  // row r: [r W, (r + 1) W) (embedbag's embed.weight {rows, W})
  kColumns,     // row r: r + k rowCount for k < W (dense0.weight {W, rows}: linear, mlp)
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
                                   std::span<const uint32_t> rows, std::span<const uint32_t> shardOf,
                                   RowLayout layout = RowLayout::kContiguous);

  uint32_t shards() const { return shards_; }
  std::size_t dim() const { return dim_; }
  // Rows of the first layer the map places (0 for a range map), and their layout.
  std::size_t rowCount() const { return rowCount_; }
  RowLayout rowLayout() const { return layout_; }
  // The shard owning parameter p (< dim): O(1) in the rows, O(log S) after them.
  uint32_t ownerOf(std::size_t p) const;
  // The shard owning row r (< rowCount()).
  uint32_t rowOwner(std::size_t r) const { return rowOwner8_.empty() ? rowOwner32_[r] : rowOwner8_[r]; }
  // Shard s's part of the parameters after the rows, [rowCount x rowWidth, dim) cut
  // into S equal ranges: of every parameter for a range map.
  const ShardInterval& restRange(uint32_t s) const { return rest_[s]; }
  // Parameters owned by each shard.
  std::span<const std::size_t> sizes() const { return sizes_; }
  // Splits a sparse tensor's indices (strictly increasing, < dim) by owner: out[s] gets
  // the runs of entries shard s owns, ascending (cleared first). One pass over the
  // indices: in contiguous rows a lookup per row touched, in columns a lookup per
  // entry (its row: the index less a multiple of rowCount, tracked as the pass goes),
  // then the rest by S searches, each galloping from the last.
  void split(std::span<const uint32_t> indices, std::vector<std::vector<EntryRun>>& out) const;

 private:
  ShardMap(std::size_t dim, uint32_t shards, std::size_t restBegin);
  // The runs of entries [from, n), all in the rest.
  void splitRest(std::span<const uint32_t> indices, std::size_t from, std::vector<std::vector<EntryRun>>& out) const;
  // The runs of the entries in the rows; returns the first entry past them.
  template <typename Owner>
  std::size_t splitRows(std::span<const uint32_t> indices, const std::vector<Owner>& owner,
                        std::vector<std::vector<EntryRun>>& out) const;
  template <typename Owner>
  std::size_t splitColumns(std::span<const uint32_t> indices, const std::vector<Owner>& owner,
                           std::vector<std::vector<EntryRun>>& out) const;

  std::size_t dim_;
  uint32_t shards_;
  std::vector<ShardInterval> rest_;  // S ranges, ascending, covering [rowCount x rowWidth, dim)
  std::vector<std::size_t> sizes_;
  // fromRows: the shard of each of the rowCount_ rows of rowWidth_ parameters, one
  // byte a row up to 256 shards (a table of 2^20 rows stays in L2: split() looks up a
  // random row per row touched), else four; rowCount_ 0 for a range map.
  uint32_t rowWidth_ = 0;
  std::size_t rowCount_ = 0;
  RowLayout layout_ = RowLayout::kContiguous;
  std::vector<uint8_t> rowOwner8_;
  std::vector<uint32_t> rowOwner32_;
};

}  // namespace starling::coordinator
