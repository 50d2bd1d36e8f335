#pragma once
// Synthetic data sets with a stated generator, for benchmarks and tests that need more
// or larger data than the public sets (issue 22: row sets of sparse models).
//
// powerLawSparse: a bag-of-words-like binary data set whose feature frequencies follow a
// power law, as hashed text features do. The generator, for a seed:
//   1. rank -> feature: a seeded shuffle of the D features (Fisher-Yates), so the
//      popular features are scattered over the index space as hashing scatters words;
//   2. the planted model: feature j (in index order) gets a weight w_j ~ N(0, 1) with
//      probability plantedFraction, else 0 (a sparse linear model);
//   3. per example, K tokens: K ranks drawn i.i.d. from Zipf(s) over 1..D (P(rank r)
//      proportional to r^-s; Hoermann and Derflinger's rejection-inversion sampler, O(1)
//      memory), each mapped to its feature; the example holds its distinct features
//      with their counts as values, scaled to unit L2 norm (as the SpamAssassin rows of
//      bench/tasks.py), indices ascending;
//   4. the labels, after all examples are drawn: the planted score sum_j w_j x_j of each
//      example against the median score m over the data set (the upper median: element
//      N / 2 in order): 1 above m, 0 below it, a fair coin at it (so the classes are
//      balanced even when the most popular features carry large weights); then each
//      label flipped with probability labelNoise (examples in order).
// So the number of examples in which the feature of rank r appears falls as r^-s for
// ranks where K P(r) is small (the top ranks saturate: they appear in most examples).
// The randomness is data/'s seeded xoshiro256** (random.hpp); the Zipf sampler and the
// Gaussian weights use std::log and std::exp, so as for the Dirichlet partitioner a
// libm that rounds differently in the last bit could, rarely, change a draw. Same seed,
// same data set, on one machine always.
//
// Memory while generating: 8 bytes per feature (the shuffle and the weights) besides
// the data set's CSR. Pure function; any thread may call it.

#include <cstddef>
#include <cstdint>

#include "starling/data/dataset.hpp"
#include "starling/util/status.hpp"

namespace starling::data {

struct PowerLawOptions {
  std::size_t examples = 20000;   // N, >= 1
  uint32_t features = 1u << 20;   // D, 1 to kMaxPowerLawFeatures (the hashed feature space)
  uint32_t tokens = 32;           // K, tokens drawn per example (>= 1; non-zeros <= K)
  double exponent = 1.1;          // s > 0: P(rank r) proportional to r^-s
  double plantedFraction = 0.25;  // features with a non-zero planted weight, in [0, 1]
  double labelNoise = 0.05;       // probability a label is flipped, in [0, 0.5]
  uint64_t seed = 1;
};

// The most features powerLawSparse() generates: 2^28 (2 GiB of working memory).
inline constexpr uint32_t kMaxPowerLawFeatures = 1u << 28;

// A binary (2 classes, labels 0/1) sparse data set drawn as above; kInvalidArgument
// naming the option out of its range.
Result<Dataset> powerLawSparse(const PowerLawOptions& options);

}  // namespace starling::data
