#pragma once
// Scaled sign: one sign bit per element and, per block of `block` elements, one
// scale = mean |v| of the block (the l1 scale). A contraction: per block,
// ||C(v) - v||^2 = ||v||^2 - ||v||_1^2 / n. Costs 1 + 32 / block bits per element.
// (The l2-preserving scale ||v||_2 / sqrt(n) is not a contraction; not offered.)
// A negative zero counts as negative.

#include <cstdint>

#include "starling/compression/compressor.hpp"

namespace starling::compression {

class ScaledSignCompressor final : public Compressor {
 public:
  // block >= 1; makeCompressor() checks it.
  explicit ScaledSignCompressor(std::uint32_t block = 1024) : block_(block) {}

  std::string_view name() const override { return "sign"; }
  Status compress(std::span<const float> v, const CompressParams& params, Compressed& out) override;

 private:
  std::uint32_t block_;
};

}  // namespace starling::compression
