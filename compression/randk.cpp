#include "starling/compression/randk.hpp"

#include <bit>
#include <cassert>

#include "starling/compression/fp16.hpp"

#include "random.hpp"

namespace starling::compression {

void randKIndices(std::uint64_t seed, std::uint32_t d, std::uint32_t k, std::vector<std::uint64_t>& bitmap,
                  std::vector<std::uint32_t>& out) {
  assert(k >= 1 && k <= d);
  const std::size_t words = (static_cast<std::size_t>(d) + 63) / 64;
  bitmap.assign(words, 0);
  auto test = [&](std::uint64_t i) { return (bitmap[i >> 6] >> (i & 63)) & 1u; };
  auto set = [&](std::uint64_t i) { bitmap[i >> 6] |= std::uint64_t{1} << (i & 63); };
  // Floyd's algorithm: for j = d - k .. d - 1 draw t in [0, j]; take t, or j if t is
  // already taken. Every k-subset is equally likely.
  detail::SplitMix64 rng(detail::mix64(seed ^ detail::kStreamRandK));
  for (std::uint64_t j = d - k; j < d; ++j) {
    const std::uint64_t t = rng.below(j + 1);
    if (test(t)) {
      set(j);
    } else {
      set(t);
    }
  }
  out.resize(k);
  std::size_t m = 0;
  for (std::size_t w = 0; w < words; ++w) {
    std::uint64_t bits = bitmap[w];
    while (bits != 0) {
      out[m++] = static_cast<std::uint32_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(bits)));
      bits &= bits - 1;
    }
  }
  assert(m == k);
}

Status RandKCompressor::compress(std::span<const float> v, const CompressParams& params, Compressed& out) {
  STARLING_RETURN_IF_ERROR(checkInput(v));
  Result<std::uint32_t> k = selectedCount(v.size(), params.density);
  if (!k) return k.status();
  const auto d = static_cast<std::uint32_t>(v.size());
  out.clear();
  out.encoding = Encoding::kRandK;
  out.count = d;
  out.valueFormat = options_.values;
  out.seed = params.seed;
  randKIndices(params.seed, d, *k, bitmap_, out.indices);
  out.values.resize(*k);
  const float scale = options_.rescale ? static_cast<float>(static_cast<double>(d) / static_cast<double>(*k)) : 1.0f;
  for (std::size_t j = 0; j < out.indices.size(); ++j)
    out.values[j] = v[out.indices[j]] * scale;
  if (options_.values == ValueFormat::kFp16) roundToHalfSaturating(out.values, out.values);
  return Status::ok();
}

}  // namespace starling::compression
