#include "aggregator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "starling/compression/compressor.hpp"

namespace starling::coordinator {
namespace {

// The element at size / 2 of the sorted values (the upper median).
double upperMedian(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

Aggregator::Aggregator(std::size_t dim, double maxNormRatio, bool senderMean, StalenessWeight weight)
    : maxNormRatio_(maxNormRatio), weight_(weight), senderMean_(senderMean), sum_(dim, 0.0f) {}

void Aggregator::begin() {
  sum_.assign(sum_.size(), 0.0f);
  if (senderMean_) coverage_.assign(sum_.size(), 0.0f);
  norms_.clear();
  weightSum_ = stepSum_ = normSqSum_ = 0;
}

std::optional<double> Aggregator::limitOnTime() const {
  const bool check = maxNormRatio_ > 0;
  if (check && norms_.size() < kMinNormsToJudge) return std::nullopt;  // held until a median means something
  return check ? maxNormRatio_ * upperMedian(norms_) : 0;
}

double Aggregator::limitAtClose(std::span<const double> lateNorms) const {
  std::vector<double> norms = norms_;
  norms.insert(norms.end(), lateNorms.begin(), lateNorms.end());
  const bool check = maxNormRatio_ > 0 && norms.size() >= kMinNormsToJudge;
  return check ? maxNormRatio_ * upperMedian(std::move(norms)) : 0;
}

std::optional<std::string> Aggregator::add(Contribution& c, double limit) {
  std::optional<std::string> rejected;
  if (limit > 0 && c.norm > limit) {
    rejected = fmt::format("update norm {:.3g} is over {} x the round's median", c.norm, maxNormRatio_);
  } else {
    // Weights: examples x s(staleness); FedNova-style normalization by steps
    // is applied in finish(), when the sums are complete.
    // With sticky sampling, x the selection weight (unbiased for uniform sampling's sum).
    const double w = double(c.examples) * c.selectionWeight / weight_.inverse(c.staleness);
    weightSum_ += w;
    stepSum_ += w * c.steps;
    const double perStep = c.norm / double(c.steps);
    normSqSum_ += w * perStep * perStep;
    (void)compression::addScaled(c.delta, static_cast<float>(w / double(c.steps)), sum_);
    if (senderMean_) {
      const bool sparse =
          c.delta.encoding == compression::Encoding::kTopK || c.delta.encoding == compression::Encoding::kRandK;
      if (sparse) {
        for (uint32_t i : c.delta.indices)
          coverage_[i] += static_cast<float>(w);
      } else {
        for (float& x : coverage_)
          x += static_cast<float>(w);
      }
    }
  }
  c.delta = compression::Compressed{};  // releases its buffers
  return rejected;
}

std::span<float> Aggregator::finish() {
  // Delta = (stepSum / W) * sum_k (w_k / W) q_k / steps_k: the running sum holds
  // sum_k (w_k / steps_k) q_k (see add()).
  if (weightSum_ > 0) {
    const auto scale = static_cast<float>(stepSum_ / (weightSum_ * weightSum_));
    for (float& x : sum_)
      x *= scale;
    if (senderMean_)
      for (std::size_t i = 0; i < sum_.size(); ++i)
        if (coverage_[i] > 0) sum_[i] *= static_cast<float>(weightSum_ / coverage_[i]);
  }
  return sum_;
}

std::optional<double> Aggregator::spread() const {
  if (!(weightSum_ > 0)) return std::nullopt;
  // Each update enters Delta as a_k = (stepSum / W) q_k / steps_k with weight w_k / W:
  // sum_k (w_k / W) ||a_k||^2 = (stepSum / W)^2 normSqSum / W.
  const double unit = stepSum_ / weightSum_;
  return unit * unit * normSqSum_ / weightSum_;
}

}  // namespace starling::coordinator
