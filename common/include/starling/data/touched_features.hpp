#pragma once
// The features a data set touches: the input side of a row set (issue 22, sparse
// models). Under a model whose first layer has one row per input feature (linear, mlp,
// embedbag: model::Model::firstLayerRows), a client's training reads and writes only
// the rows of these features; compression::RowSet codes them.
//
// Pure functions; any thread may call them (a Dataset is immutable).

#include <cstdint>
#include <span>
#include <vector>

#include "starling/data/dataset.hpp"

namespace starling::data {

// The features j, ascending and distinct, that some example holds with a non-zero
// value: of a sparse data set the CSR entries whose value is not 0 (an explicit 0 such
// as LIBSVM's "262144:0" touches nothing), of a dense one the non-zero features.
std::vector<uint32_t> featuresTouched(const Dataset& dataset);

// The same over the examples listed (a client's share, data::Partition); each below
// dataset.size() (a precondition, asserted).
std::vector<uint32_t> featuresTouched(const Dataset& dataset, std::span<const uint32_t> examples);

// The data set over the features `rows` only (strictly increasing, below featureDim()):
// feature rows[k] becomes feature k, as CSR (a dense data set's non-zero values), with
// the same labels or targets; what a client with a compact model (model::RowView)
// trains on. kInvalidArgument for rows out of order or range, or naming the first
// example with a non-zero feature outside them.
Result<Dataset> restrictFeatures(const Dataset& dataset, std::span<const uint32_t> rows);

}  // namespace starling::data
