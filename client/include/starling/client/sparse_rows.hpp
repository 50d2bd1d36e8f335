#pragma once
// Sparse models on the client (issue 22; docs/sparse.md): the rows a client offers in
// Hello, and what it trains once the coordinator takes them (Welcome.sparse_rows): the
// compact model of the covered rows (model::compactSpec) over its data with those
// features renamed (data::restrictFeatures). The Learner then runs as for any model.
// starling-client (Participant) and the simulator's virtual clients both go through here.
//
// Pure functions; any thread.

#include <cstdint>
#include <span>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/util/status.hpp"
#include "starling/wire/messages.hpp"

namespace starling::client {

struct RowOffer {
  uint32_t bucket = 0;            // rows per bucket (>= 1)
  std::vector<uint8_t> bytes;     // Hello.row_set: the buckets touched (compression::encodeRowSet)
  std::vector<uint32_t> covered;  // every row of those buckets, ascending: the compact model's inputs
  std::size_t touched = 0;        // the rows the data touches (covered holds at least these)
};

// The rows the data touches (the union over `parts`, e.g. a client's training and
// held-out examples, all of one feature dimension), in buckets of `bucket` rows.
// kInvalidArgument for bucket 0, no parts, parts of different dimensions, or data that
// touches no row.
Result<RowOffer> offerRows(std::span<const data::Dataset* const> parts, uint32_t bucket);

// The Welcome of the compact model: its model spec over offer.covered.size() inputs.
// kInvalidArgument when the coordinator's model does not take `featureDim` inputs (the
// client's data does not fit it) or has no first-layer rows.
Result<wire::WelcomeMsg> compactWelcome(const wire::WelcomeMsg& welcome, const RowOffer& offer, std::size_t featureDim);

}  // namespace starling::client
