#pragma once
// Robust aggregation rules (ALGORITHMS.md §10; docs/privacy.md "Robust aggregation"):
// what a round's updates add up to when some of their senders may be broken or hostile.
//
//   - coordinateMedian: each coordinate the median of the updates' values (the mean
//     of the two middle values for an even count). Yin et al. 2018.
//   - trimmedMean(beta): each coordinate the mean of the values left after dropping the
//     floor(beta n) largest and the floor(beta n) smallest. Yin et al. 2018.
//   - multiKrum(f, m): each update's score is the sum of its squared distances to its
//     n - f - 2 nearest other updates; the m updates of the lowest scores are kept (ties
//     to the earlier update), and their mean is the aggregate. Blanchard et al. 2017
//     (Krum is m = 1), El Mhamdi et al. 2018.
//   - clipToNorm: an update scaled down to L2 norm at most c (server-side clipping).
//
// Updates are dense vectors of one length. A sparse (top-k) update enters as its dense
// form: the coordinates it did not send are zeros, as the mean reads them too. So a
// coordinate that few senders carry has a median of 0 (docs/privacy.md says why that
// is the conservative reading). Sums are in double, results stored as float; the
// order of the updates changes no result but Krum's ties.

#include <cstddef>
#include <span>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::coordinator {

using UpdateViews = std::span<const std::span<const float>>;

// out[i] = the median of updates[k][i]. kInvalidArgument when there is no update or the
// lengths differ from out's.
Status coordinateMedian(UpdateViews updates, std::span<float> out);

// out[i] = the mean of updates[k][i] without the floor(beta n) largest and smallest;
// beta in [0, 0.5). beta = 0 is the plain mean.
Status trimmedMean(UpdateViews updates, double beta, std::span<float> out);

// The indices (ascending) of the m updates multi-Krum keeps, given at most f faulty
// ones; needs n >= f + 3 (each score has at least one neighbour) and 1 <= m <= n.
Result<std::vector<std::size_t>> multiKrumSelect(UpdateViews updates, std::size_t f, std::size_t m);

// out = the mean of the updates multiKrumSelect keeps; returns their indices.
Result<std::vector<std::size_t>> multiKrum(UpdateViews updates, std::size_t f, std::size_t m, std::span<float> out);

// Scales v to L2 norm at most c (c > 0); returns the factor applied (1 when it was
// within c).
double clipToNorm(std::span<float> v, double c);

}  // namespace starling::coordinator
