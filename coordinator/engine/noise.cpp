#include "engine/noise.hpp"

#include <algorithm>
#include <cmath>

#include "starling/util/gaussian.hpp"

#include "engine/splitmix.hpp"

namespace starling::coordinator {
namespace {

class SeededNoise final : public GaussianNoise {
 public:
  explicit SeededNoise(uint64_t seed) : state_(seed) {}

 private:
  void words(std::span<uint64_t> out) override {
    for (uint64_t& w : out)
      w = splitmix(state_);
  }
  uint64_t state_;
};

}  // namespace

void GaussianNoise::add(std::span<float> x, double stddev) {
  constexpr std::size_t kWords = sizeof(buffer_) / sizeof(buffer_[0]);
  for (std::size_t at = 0; at < x.size(); at += kWords) {
    const std::size_t n = std::min(kWords, x.size() - at);
    words(std::span<uint64_t>(buffer_, 2 * ((n + 1) / 2)));
    for (std::size_t j = 0; j < n; j += 2) {
      const auto [g1, g2] = gaussianPair(buffer_[j], buffer_[j + 1]);
      x[at + j] += static_cast<float>(g1 * stddev);
      if (j + 1 < n) x[at + j + 1] += static_cast<float>(g2 * stddev);
    }
  }
}

std::unique_ptr<GaussianNoise> seededNoise(uint64_t seed) {
  return std::make_unique<SeededNoise>(seed);
}

}  // namespace starling::coordinator
