#pragma once
// Statistics: the merge of a statistics round (docs/coordinator.md, "The statistics
// round"). Before round 1 of a task that standardizes (task.standardize), clients send
// per feature the count, sum and sum of squares of their training examples
// (data::featureSums, wire FeatureStats); the coordinator merges them here into the
// mean and population standard deviation every party scales with (data::FeatureScaling).
// The daemon's Federation and the simulator both call these functions: one merge.
//
// The merge is exact in the sense that it does not depend on arrival order: the sums
// are added in double in the order of the client ids (a std::map), so the same clients
// give the same bits however their messages interleave. Pure functions.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "starling/data/feature_scaling.hpp"
#include "starling/util/status.hpp"
#include "starling/wire/messages.hpp"

namespace starling::coordinator {

// What a statistics round produced, and who took part (stored with the task).
struct StatisticsResult {
  data::FeatureScaling scaling;
  std::vector<std::string> clients;  // the participants, sorted
  uint64_t examples = 0;             // their training examples
};

// kMalformed naming what is wrong when a client's sums cannot be merged: another
// number of features than featureDim, vectors of different lengths, a count that is
// negative, not finite or above the client's examples, a sum or sum of squares that
// is not finite, or a sum of squares below zero.
Status checkFeatureSums(const data::FeatureSums& sums, std::size_t featureDim);

// The sums a FeatureStats message carries (client::shardStatistics made it).
data::FeatureSums featureSumsOf(const wire::FeatureStatsMsg& m);

// Merges the clients' sums (each passed checkFeatureSums), in id order: per feature
// mean = sum / count and std = sqrt(max(0, sumSquares / count - mean^2)), std 0 (or a
// feature no example has) -> 1; a feature with count 0 has mean 0. centre = false
// (when any client's data is sparse): the means are still computed and stored, but
// scaling only divides. kInvalidArgument when byClient is empty or the clients disagree
// on the number of features.
Result<StatisticsResult> mergeFeatureSums(const std::map<std::string, data::FeatureSums>& byClient);

}  // namespace starling::coordinator
