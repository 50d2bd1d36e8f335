#pragma once
// RowSet: the rows of a model's first layer that a client's data touches, and their
// coding (issue 22, sparse models).
//
// A row set is a sorted list of distinct rows below a universe (the first layer's rows:
// for `linear`, `mlp` and `embedbag` models one row per input feature). Which rows a
// data set touches is data's business (data::featuresTouched, starling/data/
// touched_features.hpp); which parameters a row owns is the model's
// (model::Model::firstLayerRows); this file holds only the set, its coarsening and its
// bytes, so compression/ keeps depending on common/util alone.
//
// Coarsening (the privacy note in docs/compression.md, "Row sets"): a row set names the
// hashed features a client holds. coarsen(rows, B) replaces row j by bucket j / B, so a
// peer learns only which blocks of B rows the client touches; the client then moves
// every row of its buckets (coveredRows()), which is what coarsening costs.
//
// Coding (encodeRowSet): a byte, the index format (encoding.hpp: 1 delta varint, 2
// bitmap, 3 Rice-coded gaps), then the number of rows n as a LEB128 varint, then the n
// rows as the payload codec writes top-k indices over a tensor of `universe` elements
// in that format; the encoder takes whichever of the three is fewest bytes (the
// Rice-coded gaps for all but very dense sets). The universe is not written: the
// receiver knows it (its model's input size) and passes it to decodeRowSet, which
// treats the bytes as hostile like the payload decoder (payload.hpp): it reads nothing
// out of bounds, allocates no more than the bytes can describe, and returns kMalformed
// naming what is wrong.
//
// Values; pure functions, thread-safe on distinct arguments.

#include <cstdint>
#include <span>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::compression {

class RowSet {
 public:
  // The empty set over no rows.
  RowSet() = default;

  // rows: strictly increasing, each below universe; kInvalidArgument naming the first
  // position that is not.
  static Result<RowSet> fromSorted(std::vector<std::uint32_t> rows, std::uint32_t universe);
  // rows in any order, repeats allowed (sorted and made unique here); each below
  // universe, else kInvalidArgument naming the first that is not.
  static Result<RowSet> fromRows(std::vector<std::uint32_t> rows, std::uint32_t universe);

  std::span<const std::uint32_t> rows() const { return rows_; }
  std::size_t size() const { return rows_.size(); }
  bool empty() const { return rows_.empty(); }
  // The rows there could be: every row is below it.
  std::uint32_t universe() const { return universe_; }
  bool contains(std::uint32_t row) const;

  friend bool operator==(const RowSet&, const RowSet&) = default;

 private:
  RowSet(std::vector<std::uint32_t> rows, std::uint32_t universe) : rows_(std::move(rows)), universe_(universe) {}

  std::vector<std::uint32_t> rows_;  // strictly increasing, below universe_
  std::uint32_t universe_ = 0;
};

// The buckets of B rows that rows touches: row j is in bucket j / B; the result's
// universe is ceil(rows.universe() / B). B = 1 gives rows back. kInvalidArgument for
// B = 0.
Result<RowSet> coarsen(const RowSet& rows, std::uint32_t bucketRows);

// The rows the buckets cover below universe: bucket b holds rows [b B, min((b + 1) B,
// universe)). coveredRows(coarsen(s, B), B, s.universe()) contains s. kInvalidArgument
// for B = 0 or buckets whose universe is not ceil(universe / B).
Result<RowSet> coveredRows(const RowSet& buckets, std::uint32_t bucketRows, std::uint32_t universe);

// The bytes of a row set (layout above). Never fails: a RowSet holds its invariants.
std::vector<std::uint8_t> encodeRowSet(const RowSet& rows);

// A row set from bytes for a model of `universe` rows. kMalformed naming the problem:
// empty or truncated bytes, an index format other than delta varint, bitmap or Rice, a
// count above the universe, a row out of range, rows not increasing, bad padding or
// trailing bytes.
Result<RowSet> decodeRowSet(std::span<const std::uint8_t> bytes, std::uint32_t universe);

// The rows that coded buckets of B rows cover below universe (a Hello's row set and
// row_bucket, for a model of `universe` inputs): decodeRowSet over ceil(universe / B)
// buckets, then coveredRows. Errors: theirs (kInvalidArgument for B = 0).
Result<RowSet> decodeCoveredRows(std::span<const std::uint8_t> bytes, std::uint32_t bucketRows, std::uint32_t universe);

}  // namespace starling::compression
