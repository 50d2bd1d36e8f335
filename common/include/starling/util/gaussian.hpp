#pragma once
// Two independent N(0, 1) values from two uniform 64-bit words (Box-Muller over 53-bit
// uniforms, the first in (0, 1] so its log is finite). The same values on every
// platform with IEEE arithmetic and the same libm. Used wherever Starling draws Gaussian
// noise from a word source it chooses: differential privacy's noise (seeded or from a
// cryptographic generator) and the test-only noise attack.

#include <cmath>
#include <cstdint>
#include <numbers>
#include <utility>

namespace starling {

inline std::pair<double, double> gaussianPair(std::uint64_t w1, std::uint64_t w2) {
  const double u1 = (double(w1 >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = double(w2 >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 2.0 * std::numbers::pi * u2;
  return {r * std::cos(a), r * std::sin(a)};
}

}  // namespace starling
