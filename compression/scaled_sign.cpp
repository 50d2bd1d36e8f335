#include "starling/compression/scaled_sign.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "reduce.hpp"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace starling::compression {

namespace {

// Bit j of the result = sign bit of x[j], for 64 floats.
inline std::uint64_t signWord(const float* x) {
#if defined(__AVX2__)
  std::uint64_t word = 0;
  for (int j = 0; j < 8; ++j) {
    const auto m = static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_loadu_ps(x + 8 * j)));
    word |= static_cast<std::uint64_t>(m) << (8 * j);
  }
  return word;
#else
  std::uint64_t word = 0;
  for (int j = 0; j < 64; ++j) {
    word |= static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(x[j]) >> 31) << j;
  }
  return word;
#endif
}

}  // namespace

Status ScaledSignCompressor::compress(std::span<const float> v, const CompressParams&, Compressed& out) {
  if (v.empty() || v.size() > std::numeric_limits<std::uint32_t>::max()) return checkInput(v);
  const std::size_t d = v.size();
  out.clear();
  out.encoding = Encoding::kScaledSign;
  out.count = static_cast<std::uint32_t>(d);
  out.valueFormat = ValueFormat::kSignBits;
  out.block = block_;
  const std::size_t blocks = (d + block_ - 1) / block_;
  out.scales.resize(blocks);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * block_;
    const std::size_t n = std::min<std::size_t>(block_, d - begin);
    const double l1 = detail::sumAbs(v.data() + begin, n);
    if (!std::isfinite(l1)) return checkInput(v);  // names the element
    out.scales[b] = static_cast<float>(l1 / static_cast<double>(n));
  }
  const std::size_t words = (d + 63) / 64;
  out.signs.resize(words);
  const std::size_t fullWords = d / 64;
  for (std::size_t w = 0; w < fullWords; ++w)
    out.signs[w] = signWord(v.data() + 64 * w);
  if (fullWords < words) {
    std::uint64_t word = 0;
    for (std::size_t i = fullWords * 64, j = 0; i < d; ++i, ++j) {
      word |= static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(v[i]) >> 31) << j;
    }
    out.signs[words - 1] = word;
  }
  return Status::ok();
}

}  // namespace starling::compression
