#pragma once
// Vocabulary: the categorical half of a statistics round (docs/data.md, "Categorical
// columns"). With task.categorical-vocabulary each client sends, per categorical
// column, the distinct values of its training examples with their counts; the
// coordinator merges them here into the vocabulary every party one-hot encodes over
// (one slot per value plus one "other" slot for values outside it).
//
// Privacy: a value whose total count is below minCount never leaves the coordinator;
// the surviving values (and their counts, stored with the task) do.
//
// The merge does not depend on arrival order: counts are integers, summed per value,
// and the cut (most frequent first, ties by value) and the final order (by value) are
// functions of the totals alone. Pure functions; the daemon and the simulator share them.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "starling/data/categories.hpp"
#include "starling/util/status.hpp"
#include "starling/wire/messages.hpp"

namespace starling::coordinator {

// One categorical column's distinct values on one client, each with the number of
// training examples that hold it.
using ValueCounts = std::map<std::string, uint64_t>;
// Per categorical column name.
using CategoryCounts = std::map<std::string, ValueCounts>;

struct VocabularyOptions {
  uint64_t minCount = 5;        // task.vocabulary-min-count: a value seen on fewer examples is dropped
  std::size_t maxValues = 256;  // task.vocabulary-max: at most this many values per column
};

// One column's vocabulary: its values sorted (byte order), and their merged counts.
struct ColumnVocabulary {
  std::vector<std::string> values;
  std::vector<uint64_t> counts;  // counts[i] belongs to values[i]
  uint64_t dropped = 0;          // examples whose value fell below minCount or the cap
};

// Column name -> its vocabulary.
using Vocabulary = std::map<std::string, ColumnVocabulary>;

// kMalformed naming what is wrong when a client's counts cannot be merged: a column
// that is not one of `columns`, a missing column, an empty value, a value count of 0,
// or counts of one column that add up to more than the client's examples.
Status checkCategoryCounts(const CategoryCounts& counts, const std::vector<std::string>& columns, uint64_t examples);

// Merges the clients' counts (each passed checkCategoryCounts): per column, per value,
// the sum over clients; keeps values with total >= minCount; when more than maxValues
// remain keeps the maxValues most frequent (equal counts: the smaller value first);
// sorts the kept values. kInvalidArgument when byClient is empty, the clients disagree
// on the columns, or minCount is 0 or maxValues 0.
Result<Vocabulary> mergeCategoryCounts(const std::map<std::string, CategoryCounts>& byClient,
                                       const VocabularyOptions& options);

// The counts a FeatureStats message carries (wire categories); kMalformed when a column
// or a value of one column appears twice.
Result<CategoryCounts> categoryCountsOf(const std::vector<wire::CategoryValuesMsg>& columns);

// The vocabulary as Welcome carries it: per column its sorted values, no counts.
std::vector<wire::CategoryValuesMsg> vocabularyMessage(const Vocabulary& vocabulary);

// The vocabulary as every party re-encodes its data over it (data::recodeCategories).
data::CategoryVocabulary vocabularyValues(const Vocabulary& vocabulary);

}  // namespace starling::coordinator
