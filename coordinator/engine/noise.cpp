#include "engine/noise.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/splitmix.hpp"

namespace starling::coordinator {
namespace {

// A uniform in (0, 1] from the top 53 bits of a word.
double unit(uint64_t w) {
  return (double(w >> 11) + 1.0) * 0x1.0p-53;
}

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
      // Box-Muller: r = sqrt(-2 ln u1), angle 2 pi u2; cos and sin give two values.
      const double r = std::sqrt(-2.0 * std::log(unit(buffer_[j]))) * stddev;
      const double a = 2.0 * std::numbers::pi * unit(buffer_[j + 1]);
      x[at + j] += static_cast<float>(r * std::cos(a));
      if (j + 1 < n) x[at + j + 1] += static_cast<float>(r * std::sin(a));
    }
  }
}

std::unique_ptr<GaussianNoise> seededNoise(uint64_t seed) {
  return std::make_unique<SeededNoise>(seed);
}

}  // namespace starling::coordinator
