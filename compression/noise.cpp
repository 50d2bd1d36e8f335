#include "starling/compression/noise.hpp"

#include <algorithm>
#include <cmath>

#include "starling/compression/fp16.hpp"
#include "starling/util/gaussian.hpp"
#include "starling/util/mix.hpp"

namespace starling::compression {
namespace {

class SeededNoise final : public GaussianNoise {
 public:
  explicit SeededNoise(uint64_t seed) : state_(seed) {}

 private:
  bool words(std::span<uint64_t> out) override {
    for (uint64_t& w : out)
      w = splitmixNext(state_);
    return true;
  }
  uint64_t state_;
};

}  // namespace

Status GaussianNoise::add(std::span<float> x, double stddev) {
  constexpr std::size_t kWords = sizeof(buffer_) / sizeof(buffer_[0]);
  for (std::size_t at = 0; at < x.size(); at += kWords) {
    const std::size_t n = std::min(kWords, x.size() - at);
    if (!words(std::span<uint64_t>(buffer_, 2 * ((n + 1) / 2))))
      return Status(StatusCode::kInternal, "the noise generator failed (reseeding from the system's entropy)");
    for (std::size_t j = 0; j < n; j += 2) {
      const auto [g1, g2] = gaussianPair(buffer_[j], buffer_[j + 1]);
      x[at + j] += static_cast<float>(g1 * stddev);
      if (j + 1 < n) x[at + j + 1] += static_cast<float>(g2 * stddev);
    }
  }
  return Status::ok();
}

std::unique_ptr<GaussianNoise> seededNoise(uint64_t seed) {
  return std::make_unique<SeededNoise>(seed);
}

Status addNoise(Compressed& c, GaussianNoise& noise, double stddev) {
  if (!(stddev >= 0) || !std::isfinite(stddev))
    return Status(StatusCode::kInvalidArgument, "noise standard deviation must be finite and >= 0");
  if (c.encoding != Encoding::kDense32 && c.encoding != Encoding::kDense16)
    return Status(StatusCode::kInvalidArgument, "noise needs a dense tensor (the uplink identity or fp16)");
  if (c.values.size() != c.count) return Status(StatusCode::kInvalidArgument, "dense tensor without its values");
  if (stddev == 0) return Status::ok();
  STARLING_RETURN_IF_ERROR(noise.add(c.values, stddev));
  if (c.encoding == Encoding::kDense16) roundToHalfSaturating(c.values, c.values);
  return Status::ok();
}

}  // namespace starling::compression
