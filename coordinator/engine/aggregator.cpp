#include "aggregator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "starling/compression/compressor.hpp"
#include "starling/compression/noise.hpp"

#include "engine/robust.hpp"
#include "engine/shards.hpp"

namespace starling::coordinator {
namespace {

// The element at size / 2 of the sorted values (the upper median).
double upperMedian(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

namespace {

bool sparse(const compression::Compressed& c) {
  return c.encoding == compression::Encoding::kTopK || c.encoding == compression::Encoding::kRandK;
}

}  // namespace

Aggregator::Aggregator(std::size_t dim, double maxNormRatio, bool senderMean, StalenessWeight weight, Shards* shards)
    : maxNormRatio_(maxNormRatio),
      weight_(weight),
      senderMean_(senderMean),
      sum_(dim, 0.0f),
      shards_(shards),
      loads_(shards ? shards->count() : 1, 0) {}

Result<Aggregator::Rule> Aggregator::rule(const EngineConfig& c) {
  Rule r;
  if (c.aggregation == "mean")
    r.kind = Rule::Kind::kMean;
  else if (c.aggregation == "median")
    r.kind = Rule::Kind::kMedian;
  else if (c.aggregation == "trimmed-mean")
    r.kind = Rule::Kind::kTrimmedMean;
  else if (c.aggregation == "multi-krum")
    r.kind = Rule::Kind::kMultiKrum;
  else
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("unknown aggregation '{}' (mean, median, trimmed-mean or multi-krum)", c.aggregation));
  if (!(c.trimFraction >= 0 && c.trimFraction < 0.5))
    return Status(StatusCode::kInvalidArgument, fmt::format("trim fraction {} is outside [0, 0.5)", c.trimFraction));
  if (!(c.serverClipNorm >= 0) || !std::isfinite(c.serverClipNorm))
    return Status(StatusCode::kInvalidArgument, fmt::format("server clip norm {} is not a norm", c.serverClipNorm));
  if (r.kind != Rule::Kind::kMean && c.senderMean)
    return Status(StatusCode::kInvalidArgument, "the sender mean is a kind of mean: it needs aggregation mean");
  r.trim = c.trimFraction;
  r.krumFaulty = c.krumFaulty;
  r.krumSelect = c.krumSelect;
  r.clipNorm = c.serverClipNorm;
  return r;
}

void Aggregator::setPrivacy(double clipNorm, double noiseStd, compression::GaussianNoise* noise, uint32_t shares) {
  dpShares_ = shares;
  dpClip_ = clipNorm;
  dpNoiseStd_ = noiseStd;
  noise_ = noise;
}

double Aggregator::privacyWeight(uint32_t staleness) const {
  return double(static_cast<float>(1.0 / weight_.inverse(staleness)));  // as it enters the float sum
}

void Aggregator::begin(double denominator) {
  denominator_ = denominator;
  heldCount_ = 0;
  dpAdded_ = 0;
  if (senderMean_ && coverage_.size() != sum_.size()) coverage_.resize(sum_.size());
  if (shards_) {
    shards_->forRanges([&](std::size_t b, std::size_t e) {
      std::fill(sum_.begin() + std::ptrdiff_t(b), sum_.begin() + std::ptrdiff_t(e), 0.0f);
      if (senderMean_) std::fill(coverage_.begin() + std::ptrdiff_t(b), coverage_.begin() + std::ptrdiff_t(e), 0.0f);
    });
  } else {
    sum_.assign(sum_.size(), 0.0f);
    if (senderMean_) coverage_.assign(sum_.size(), 0.0f);
  }
  std::fill(loads_.begin(), loads_.end(), 0);
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
  // Clipping: privacy's (the client clipped already; a client that did not is clipped
  // here) or the server's. Not a message carrying its sender's noise share: clipping it
  // would shrink the noise the round is accounted with.
  if (dpShares_ > 0 &&
      !((c.delta.encoding == compression::Encoding::kDense32 || c.delta.encoding == compression::Encoding::kDense16) &&
        c.delta.values.size() == c.delta.count)) {
    c.delta = compression::Compressed{};
    return std::string("under distributed noise an update must be dense: its share covers every coordinate");
  }
  const double clip = dpShares_ > 0                       ? 0.0
                      : dpClip_ > 0 && rule_.clipNorm > 0 ? std::min(dpClip_, rule_.clipNorm)
                      : dpClip_ > 0                       ? dpClip_
                                                          : rule_.clipNorm;
  if (clip > 0 && c.norm > clip) {
    auto factor = compression::clipToNorm(c.delta, clip);
    if (!factor) {
      rejected = "update could not be clipped: " + factor.status().message();
      c.delta = compression::Compressed{};
      return rejected;
    }
    c.norm = std::min(c.norm * *factor, clip);
  }
  if (dpClip_ > 0) {
    // Each client's share is bounded by the clip norm alone: s(staleness) <= 1.
    const double w = privacyWeight(c.staleness);
    weightSum_ += w;
    ++dpAdded_;
    if (shards_)
      addSharded(c.delta, static_cast<float>(w), static_cast<float>(w));
    else
      addWhole(c.delta, static_cast<float>(w), static_cast<float>(w));
  } else if (limit > 0 && c.norm > limit) {
    rejected = fmt::format("update norm {:.3g} is over {} x the round's median", c.norm, maxNormRatio_);
  } else if (rule_.kind != Rule::Kind::kMean) {
    if (held_.size() <= heldCount_) held_.emplace_back();
    std::vector<float>& h = held_[heldCount_++];
    h.assign(sum_.size(), 0.0f);
    const double w = 1.0 / weight_.inverse(c.staleness);
    (void)compression::addScaled(c.delta, static_cast<float>(w), h);
    weightSum_ += w;
    loads_[0] += c.delta.selected();
  } else {
    // Weights: examples x s(staleness); FedNova-style normalization by steps
    // is applied in finish(), when the sums are complete.
    // With sticky sampling, x the selection weight (unbiased for uniform sampling's sum).
    const double w = double(c.examples) * c.selectionWeight / weight_.inverse(c.staleness);
    weightSum_ += w;
    stepSum_ += w * c.steps;
    const double perStep = c.norm / double(c.steps);
    normSqSum_ += w * perStep * perStep;
    const auto alpha = static_cast<float>(w / double(c.steps));
    if (shards_)
      addSharded(c.delta, alpha, static_cast<float>(w));
    else
      addWhole(c.delta, alpha, static_cast<float>(w));
  }
  c.delta = compression::Compressed{};  // releases its buffers
  return rejected;
}

void Aggregator::addWhole(const compression::Compressed& delta, float alpha, float w) {
  (void)compression::addScaled(delta, alpha, sum_);
  if (!shards_) loads_[0] += delta.selected();
  if (senderMean_) {
    if (sparse(delta)) {
      for (uint32_t i : delta.indices)
        coverage_[i] += w;
    } else {
      for (float& x : coverage_)
        x += w;
    }
  }
}

void Aggregator::addSharded(const compression::Compressed& delta, float alpha, float w) {
  // The parts' arithmetic is addWhole's, element by element: the same bits. The delta
  // was checked (l2Norm) before.
  if (sparse(delta)) {
    const auto& runs = shards_->split(delta.indices);
    for (uint32_t s = 0; s < shards_->count(); ++s)
      for (const EntryRun& r : runs[s])
        loads_[s] += r.last - r.first;
    if (shards_->inlines(delta.indices.size())) {
      addWhole(delta, alpha, w);  // one pass in index order: the cheapest on one thread
      return;
    }
    shards_->forEach(delta.indices.size(), [&](uint32_t s) {
      for (const EntryRun& r : runs[s]) {
        (void)compression::addScaledPart(delta, alpha, r.first, r.last, sum_);
        if (senderMean_)
          for (std::size_t j = r.first; j < r.last; ++j)
            coverage_[delta.indices[j]] += w;
      }
    });
  } else {
    for (uint32_t s = 0; s < shards_->count(); ++s)
      loads_[s] += shards_->rangeSize(s);
    shards_->forRanges([&](std::size_t b, std::size_t e) {
      (void)compression::addScaledPart(delta, alpha, b, e, sum_);
      if (senderMean_)
        for (std::size_t i = b; i < e; ++i)
          coverage_[i] += w;
    });
  }
}

std::span<float> Aggregator::finish() {
  if (dpClip_ > 0) {
    // Delta = (sum_k s_k q_k + N(0, sigma^2 C^2)) / D. The noise is drawn in coordinate
    // order on this thread, so it does not depend on the shards.
    // Distributed noise: the shares of the clients the round lacks (none when M arrived).
    const double std = dpShares_ == 0
                           ? dpNoiseStd_
                           : dpNoiseStd_ * std::sqrt(double(dpShares_ - std::min<std::size_t>(dpAdded_, dpShares_)) /
                                                     double(dpShares_));
    if (noise_ && std > 0) {
      if (Status st = noise_->add(sum_, std); !st) {
        // Never release a private sum without its noise. The round is not committed,
        // so stopping here loses nothing a client was told.
        std::fprintf(stderr, "starling: %s; stopping rather than releasing an unnoised sum\n", st.message().c_str());
        std::abort();
      }
    }
    const auto scale = static_cast<float>(1.0 / denominator_);
    for (float& x : sum_)
      x *= scale;
    return sum_;
  }
  if (rule_.kind != Rule::Kind::kMean) {
    combineHeld();
    return sum_;
  }
  // Delta = (stepSum / W) * sum_k (w_k / W) q_k / steps_k: the running sum holds
  // sum_k (w_k / steps_k) q_k (see add()).
  if (weightSum_ > 0) {
    const auto scale = static_cast<float>(stepSum_ / (weightSum_ * weightSum_));
    // Element-wise, so the result does not depend on how [0, dim) is cut.
    auto scaleRange = [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i)
        sum_[i] *= scale;
      if (senderMean_)
        for (std::size_t i = b; i < e; ++i)
          if (coverage_[i] > 0) sum_[i] *= static_cast<float>(weightSum_ / coverage_[i]);
    };
    if (shards_)
      shards_->forRanges(scaleRange);
    else
      scaleRange(0, sum_.size());
  }
  return sum_;
}

void Aggregator::combineHeld() {
  if (heldCount_ == 0) return;  // sum_ is zero since begin()
  std::vector<std::span<const float>> views(held_.begin(), held_.begin() + std::ptrdiff_t(heldCount_));
  switch (rule_.kind) {
    case Rule::Kind::kMedian:
      (void)coordinateMedian(views, sum_);
      break;
    case Rule::Kind::kTrimmedMean:
      (void)trimmedMean(views, rule_.trim, sum_);
      break;
    case Rule::Kind::kMultiKrum: {
      // f defaults to the most Krum tolerates, (n - 3) / 2; fewer than f + 3 updates
      // fall back to the median, which needs no such count.
      const std::size_t n = heldCount_;
      std::size_t f = rule_.krumFaulty > 0 ? rule_.krumFaulty : (n >= 3 ? (n - 3) / 2 : 0);
      if (n < f + 3) {
        (void)coordinateMedian(views, sum_);
        break;
      }
      const std::size_t m = rule_.krumSelect > 0 ? std::min<std::size_t>(rule_.krumSelect, n) : n - f;
      (void)multiKrum(views, f, m, sum_);
      break;
    }
    case Rule::Kind::kMean:
      break;
  }
}

std::optional<double> Aggregator::spread() const {
  if (rule_.kind != Rule::Kind::kMean || dpClip_ > 0 || !(weightSum_ > 0)) return std::nullopt;
  // Each update enters Delta as a_k = (stepSum / W) q_k / steps_k with weight w_k / W:
  // sum_k (w_k / W) ||a_k||^2 = (stepSum / W)^2 normSqSum / W.
  const double unit = stepSum_ / weightSum_;
  return unit * unit * normSqSum_ / weightSum_;
}

}  // namespace starling::coordinator
