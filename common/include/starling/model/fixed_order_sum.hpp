#pragma once
// Float sums whose rounding depends on the values and their count alone, not on where
// they lie in memory.
//
// Eigen's reductions over a Map (sum(), norm(), rowwise().sum() assigned to a Map) start
// their vector loop at the first SIMD-aligned element and add the elements before it one
// at a time, so the order of the additions, and with it the rounding, follows the
// buffer's address modulo the vector width: the allocator's state, which changes with
// anything else the process allocates. The model and the trainer reduce with these
// functions instead (docs/model.md, "Determinism").
//
// Thread-safety: pure functions.

#include <array>
#include <cstddef>
#include <span>

namespace starling::model {

// Partial sums per lane: lane k adds the terms of the elements i with i % kSumLanes == k
// in ascending i, then the lanes are added in lane order. 16 lanes fill an AVX-512
// register (two AVX ones); the compiler vectorizes the lane loop without reassociating
// any addition, so the order is fixed for a given length.
inline constexpr std::size_t kSumLanes = 16;

template <typename Term>
float fixedOrderReduce(std::span<const float> x, Term term) {
  std::array<float, kSumLanes> lane{};
  const std::size_t whole = x.size() - x.size() % kSumLanes;
  for (std::size_t i = 0; i < whole; i += kSumLanes)
    for (std::size_t k = 0; k < kSumLanes; ++k)
      lane[k] += term(x[i + k]);
  for (std::size_t i = whole; i < x.size(); ++i)
    lane[i - whole] += term(x[i]);
  float total = 0.0f;
  for (float v : lane)
    total += v;
  return total;
}

// The sum of x.
inline float fixedOrderSum(std::span<const float> x) {
  return fixedOrderReduce(x, [](float v) { return v; });
}

// The sum of the squares of x (the squared Euclidean norm).
inline float fixedOrderSquaredNorm(std::span<const float> x) {
  return fixedOrderReduce(x, [](float v) { return v * v; });
}

}  // namespace starling::model
