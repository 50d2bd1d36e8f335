#include "starling/compression/precision.hpp"

#include <bit>
#include <cmath>
#include <string>

namespace starling::compression {

float roundMantissa(float x, std::uint32_t bits) {
  if (bits >= kFp32MantissaBits || bits == 0 || !std::isfinite(x)) return x;
  const std::uint32_t drop = kFp32MantissaBits - bits;
  const std::uint32_t mask = (std::uint32_t{1} << drop) - 1, half = std::uint32_t{1} << (drop - 1);
  const auto u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t low = u & mask, truncated = u & ~mask;
  if (low < half || (low == half && ((truncated >> drop) & 1u) == 0)) return std::bit_cast<float>(truncated);
  const float up = std::bit_cast<float>(truncated + (std::uint32_t{1} << drop));  // a carry may raise the exponent
  return std::isfinite(up) ? up : std::bit_cast<float>(truncated);
}

Status roundChanged(const Compressed& c, std::uint32_t bits, std::span<float> model) {
  if (bits == 0 || bits > kFp32MantissaBits) {
    return {StatusCode::kInvalidArgument, "model mantissa bits " + std::to_string(bits) + " outside 1 to 23"};
  }
  if (model.size() != c.count) {
    return {StatusCode::kInvalidArgument,
            "model of " + std::to_string(model.size()) + " elements for a tensor of " + std::to_string(c.count)};
  }
  if (bits == kFp32MantissaBits) return Status::ok();
  if (c.encoding == Encoding::kTopK || c.encoding == Encoding::kRandK) {
    for (std::uint32_t i : c.indices) {
      if (i >= model.size()) return {StatusCode::kInvalidArgument, "index out of range"};
      model[i] = roundMantissa(model[i], bits);
    }
    return Status::ok();
  }
  for (float& x : model)
    x = roundMantissa(x, bits);
  return Status::ok();
}

}  // namespace starling::compression
