#pragma once
// Private: the deterministic pseudo-random numbers of the seeded compressors.
// Both ends of the wire regenerate rand-k's index set from a seed, so these
// functions are part of the protocol: changing them changes what a seed means.

#include <cstdint>

#include "starling/util/mix.hpp"

namespace starling::compression::detail {

using starling::kGolden;
using starling::mix64;

// Separate streams per use of a seed, so that rand-k and QSGD never share numbers.
inline constexpr std::uint64_t kStreamRandK = 0x72616e646b000001ull;
inline constexpr std::uint64_t kStreamQsgd = 0x7173676400000002ull;
inline constexpr std::uint64_t kStreamTopKSample = 0x746f706b00000003ull;

// The i-th number of a counter-based stream: independent of evaluation order, so
// loops over it vectorize.
inline std::uint64_t hashAt(std::uint64_t key, std::uint64_t i) {
  return mix64(key + (i + 1) * kGolden);
}

// A uniform float in [0, 1) with 24 random bits.
inline float unitFloat(std::uint64_t bits) {
  return static_cast<float>(bits >> 40) * 0x1p-24f;
}

// A sequential SplitMix64 generator.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() { return splitmixNext(state_); }

  // Uniform in [0, n) for 1 <= n <= 2^32, by Lemire's multiply-shift on 64 random
  // bits; the bias is below n / 2^64 (< 2^-32), negligible here. The high 64 bits of
  // the 128-bit product x * n, from 32-bit halves of x (32-bit ARM has no 128-bit
  // integers): with n <= 2^32 neither partial product nor their sum overflows, and
  // the result is the same bits on every target.
  std::uint32_t below(std::uint64_t n) {
    const std::uint64_t x = next();
    const std::uint64_t high = (x >> 32) * n + (((x & 0xffffffffu) * n) >> 32);
    return static_cast<std::uint32_t>(high >> 32);
  }

 private:
  std::uint64_t state_;
};

}  // namespace starling::compression::detail
