#include "starling/data/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "random.hpp"

namespace starling::data {

namespace {

Status invalid(const std::string& what) {
  return {StatusCode::kInvalidArgument, "powerLawSparse: " + what};
}

// Zipf(s) over 1..n by rejection-inversion (Hoermann and Derflinger, "Rejection-inversion
// to generate variates from monotone discrete distributions", 1996): invert the integral
// H of the hat h(x) = x^-s over [1.5, n + 0.5], round to the nearest rank k, and accept
// when the draw fell under the bar of k (mostly at once: the squeeze accepts without
// evaluating H). O(1) memory and time per draw for any n.
class ZipfSampler {
 public:
  ZipfSampler(uint32_t n, double s)
      : n_(n),
        s_(s),
        hIntegralX1_(hIntegral(1.5) - 1.0),
        hIntegralN_(hIntegral(n + 0.5)),
        squeeze_(2.0 - hIntegralInverse(hIntegral(2.5) - h(2.0))) {}

  uint32_t draw(detail::Rng& rng) const {
    for (;;) {
      const double u = hIntegralN_ + rng.openUnit() * (hIntegralX1_ - hIntegralN_);
      const double x = hIntegralInverse(u);
      const double k = std::clamp(std::floor(x + 0.5), 1.0, static_cast<double>(n_));
      if (k - x <= squeeze_ || u >= hIntegral(k + 0.5) - h(k)) return static_cast<uint32_t>(k);
    }
  }

 private:
  double h(double x) const { return std::exp(-s_ * std::log(x)); }
  // H(x) = (x^(1-s) - 1) / (1 - s), log x at s = 1; written so that s near 1 loses nothing.
  double hIntegral(double x) const {
    const double logX = std::log(x);
    return expm1OverX((1.0 - s_) * logX) * logX;
  }
  double hIntegralInverse(double y) const {
    const double t = std::max(-1.0, y * (1.0 - s_));  // rounding could take it below -1
    return std::exp(log1pOverX(t) * y);
  }
  // log(1 + x) / x and (e^x - 1) / x, 1 at x = 0 (Taylor terms near it).
  static double log1pOverX(double x) {
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double expm1OverX(double x) {
    return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
  }

  uint32_t n_;
  double s_;
  double hIntegralX1_;
  double hIntegralN_;
  double squeeze_;
};

}  // namespace

Result<Dataset> powerLawSparse(const PowerLawOptions& o) {
  if (o.examples == 0) return invalid("examples must be at least 1");
  if (uint64_t(o.examples) >= (uint64_t{1} << 32)) return invalid("examples must be below 2^32");
  if (o.features == 0 || o.features > kMaxPowerLawFeatures) {
    return invalid("features " + std::to_string(o.features) + " not in [1, 2^28]");
  }
  if (o.tokens == 0) return invalid("tokens must be at least 1");
  if (!(o.exponent > 0.0) || !std::isfinite(o.exponent)) {
    return invalid("exponent " + std::to_string(o.exponent) + " must be a finite number above 0");
  }
  if (!(o.plantedFraction >= 0.0 && o.plantedFraction <= 1.0)) {
    return invalid("plantedFraction " + std::to_string(o.plantedFraction) + " not in [0, 1]");
  }
  if (!(o.labelNoise >= 0.0 && o.labelNoise <= 0.5)) {
    return invalid("labelNoise " + std::to_string(o.labelNoise) + " not in [0, 0.5]");
  }

  detail::Rng rng(o.seed);
  std::vector<uint32_t> featureOfRank(o.features);
  std::iota(featureOfRank.begin(), featureOfRank.end(), 0u);
  rng.shuffle(featureOfRank);
  std::vector<float> weight(o.features, 0.0f);
  for (float& w : weight)
    if (rng.openUnit() < o.plantedFraction) w = static_cast<float>(rng.normal());

  const ZipfSampler zipf(o.features, o.exponent);
  std::vector<uint64_t> offsets{0};
  std::vector<uint32_t> indices;
  std::vector<float> values;
  std::vector<double> scores;  // the planted model's, per example
  offsets.reserve(o.examples + 1);
  scores.reserve(o.examples);
  std::vector<uint32_t> drawn(o.tokens);
  for (std::size_t i = 0; i < o.examples; ++i) {
    for (uint32_t& f : drawn)
      f = featureOfRank[zipf.draw(rng) - 1];
    std::sort(drawn.begin(), drawn.end());
    const std::size_t first = indices.size();
    double squares = 0.0;
    for (std::size_t t = 0; t < drawn.size();) {
      std::size_t end = t;
      while (end < drawn.size() && drawn[end] == drawn[t])
        ++end;
      const auto count = static_cast<double>(end - t);
      indices.push_back(drawn[t]);
      values.push_back(static_cast<float>(count));
      squares += count * count;
      t = end;
    }
    const double norm = std::sqrt(squares);
    double score = 0.0;
    for (std::size_t k = first; k < indices.size(); ++k) {
      values[k] = static_cast<float>(values[k] / norm);
      score += static_cast<double>(weight[indices[k]]) * values[k];
    }
    scores.push_back(score);
    offsets.push_back(indices.size());
  }
  // Labels: above the median score 1, below it 0, a coin at it; then the noise.
  std::vector<double> sorted = scores;
  const auto middle = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), middle, sorted.end());
  const double median = *middle;
  std::vector<int32_t> labels;
  labels.reserve(o.examples);
  for (const double score : scores) {
    int32_t label = score > median ? 1 : 0;
    if (score == median) label = static_cast<int32_t>(rng.below(2));
    if (rng.openUnit() < o.labelNoise) label = 1 - label;
    labels.push_back(label);
  }
  return Dataset::fromSparse(std::move(offsets), std::move(indices), std::move(values), std::move(labels), o.features,
                             2);
}

}  // namespace starling::data
