#pragma once
// Rand-k: k coordinates chosen uniformly without replacement by a seed both sides
// know; only the values and the seed are sent. Unscaled it is a contraction in
// expectation (delta = k / d); rescaled by d / k it is unbiased instead.

#include <cstdint>
#include <vector>

#include "starling/compression/compressor.hpp"

namespace starling::compression {

struct RandKOptions {
  ValueFormat values = ValueFormat::kFp32;  // kFp32 or kFp16
  bool rescale = false;                     // multiply by d / k (unbiased)
};

// The index set of rand-k: k distinct indices in [0, d), uniformly chosen by seed,
// in increasing order (Floyd's algorithm over a bitmap of d bits, O(k + d / 64)).
// Requires 1 <= k <= d. bitmap is scratch, resized as needed. Both ends call this,
// so it must never change for a given (seed, d, k): the wire depends on it.
void randKIndices(std::uint64_t seed, std::uint32_t d, std::uint32_t k, std::vector<std::uint64_t>& bitmap,
                  std::vector<std::uint32_t>& out);

class RandKCompressor final : public Compressor {
 public:
  explicit RandKCompressor(RandKOptions options = {}) : options_(options) {}

  std::string_view name() const override { return "randk"; }
  Status compress(std::span<const float> v, const CompressParams& params, Compressed& out) override;

 private:
  RandKOptions options_;
  std::vector<std::uint64_t> bitmap_;
};

}  // namespace starling::compression
