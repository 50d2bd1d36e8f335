#pragma once
// Private: reductions over float spans with independent lanes, so that the compiler
// vectorizes them without -ffast-math. Results depend only on the input (fixed lane
// order), never on the machine's vector width.

#include <cmath>
#include <cstddef>

namespace starling::compression::detail {

inline constexpr std::size_t kLanes = 16;

// sum |x_i| in double. Infinite or NaN when some x_i is.
inline double sumAbs(const float* x, std::size_t n) {
  double acc[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t j = 0; j < kLanes; ++j)
      acc[j] += std::fabs(static_cast<double>(x[i + j]));
  }
  for (std::size_t j = 0; i < n; ++i, ++j)
    acc[j] += std::fabs(static_cast<double>(x[i]));
  double total = 0.0;
  for (double a : acc)
    total += a;
  return total;
}

// sum x_i^2 in double. Infinite or NaN when some x_i is (finite floats cannot overflow).
inline double sumSquares(const float* x, std::size_t n) {
  double acc[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t j = 0; j < kLanes; ++j) {
      const double v = x[i + j];
      acc[j] += v * v;
    }
  }
  for (std::size_t j = 0; i < n; ++i, ++j) {
    const double v = x[i];
    acc[j] += v * v;
  }
  double total = 0.0;
  for (double a : acc)
    total += a;
  return total;
}

}  // namespace starling::compression::detail
