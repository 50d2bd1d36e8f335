#pragma once
// Seeded randomness that gives the same numbers on every platform (private to data/).
//
// SplitMix64 expands a seed; xoshiro256** (Blackman and Vigna) draws. Integers are exact
// everywhere; the real-valued samplers use only IEEE arithmetic plus std::log and
// std::sqrt. One Rng per thread: an Rng is not safe to share.

#include <cmath>
#include <cstdint>
#include <vector>

namespace starling::data::detail {

inline uint64_t splitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t s = seed;
    for (uint64_t& word : s_)
      word = splitMix64(s);
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, bound), bound >= 1, without modulo bias (rejects the short last block).
  uint64_t below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const uint64_t x = next();
      if (x >= threshold) return x % bound;
    }
  }

  // Uniform in the open interval (0, 1), 53 bits.
  double openUnit() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }

  // Standard normal, Marsaglia's polar method (no trigonometry).
  double normal() {
    if (haveSpare_) {
      haveSpare_ = false;
      return spare_;
    }
    for (;;) {
      const double u = 2.0 * openUnit() - 1.0;
      const double v = 2.0 * openUnit() - 1.0;
      const double s = u * u + v * v;
      if (s >= 1.0 || s == 0.0) continue;
      const double m = std::sqrt(-2.0 * std::log(s) / s);
      spare_ = v * m;
      haveSpare_ = true;
      return u * m;
    }
  }

  // log of a Gamma(shape, 1) draw, shape > 0. Returned as a logarithm because for small
  // shapes the draw itself underflows to 0 (Gamma(0.01) is below 1e-300 half the time).
  // Marsaglia and Tsang's method; shapes below 1 use Gamma(a) = Gamma(a + 1) * U^(1/a).
  double logGamma(double shape) {
    if (shape < 1.0) return logGamma(shape + 1.0) + std::log(openUnit()) / shape;
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x = 0.0;
      double v = 0.0;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = openUnit();
      if (u < 1.0 - 0.0331 * (x * x) * (x * x)) return std::log(d * v);
      if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return std::log(d * v);
    }
  }

  // Fisher-Yates shuffle.
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) {
      const std::size_t j = static_cast<std::size_t>(below(i));
      std::swap(v[i - 1], v[j]);
    }
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t s_[4];
  double spare_ = 0.0;
  bool haveSpare_ = false;
};

}  // namespace starling::data::detail
