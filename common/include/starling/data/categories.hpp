#pragma once
// Categorical columns over an agreed vocabulary (docs/data.md, "Categorical columns").
//
// A CSV column named categorical (DataOptions::categorical) is one-hot over `width`
// slots. By default a value's slot is FNV-1a(value) mod width: nothing to agree on, but
// distinct values may share a slot. With task.categorical-vocabulary the statistics
// round agrees a vocabulary instead: each client counts its values (categoryCounts),
// the coordinator merges the counts (coordinator/engine/vocabulary.hpp), and every party
// re-encodes its examples over the result (recodeCategories): the k-th value of a
// column's sorted vocabulary in slot k, every other value in the last slot. The width
// stays the same, so the model's input does not depend on the vocabulary.
//
// The daemon's clients, the coordinator's evaluation data, the C API and the simulator
// all use these functions. Pure; thread-safe on distinct arguments.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/util/status.hpp"

namespace starling::data {

// Per categorical column (by name), the number of examples holding each value.
using CategoryCounts = std::map<std::string, std::map<std::string, uint64_t>>;

// The values of d's categorical columns with their counts (empty when it has none).
CategoryCounts categoryCounts(const Dataset& d);

// Per categorical column (by name), its vocabulary: distinct values, sorted (byte order).
using CategoryVocabulary = std::map<std::string, std::vector<std::string>>;

// d with every categorical column one-hot over `vocabulary` (value k in slot k, other
// values in the last slot, width - 1); the other features, labels, groups and the
// categorical values kept. kInvalidArgument naming the column when the vocabulary does
// not name exactly d's categorical columns, a list is not sorted and distinct, or has
// more than width - 1 values (the last slot is for the others).
Result<Dataset> recodeCategories(const Dataset& d, const CategoryVocabulary& vocabulary);

// The one-hot features of d's categorical columns, ascending (empty when it has none).
std::vector<std::size_t> oneHotFeatures(const Dataset& d);

}  // namespace starling::data
