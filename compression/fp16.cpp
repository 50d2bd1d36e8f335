#include "starling/compression/fp16.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstddef>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace starling::compression {

std::uint16_t floatToHalfSoftware(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity, or NaN (kept quiet, top payload bits)
    const std::uint32_t nan = magnitude > 0x7f800000u ? 0x200u | ((magnitude >> 13) & 0x3ffu) : 0u;
    return static_cast<std::uint16_t>(sign | 0x7c00u | nan);
  }
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520
  if (magnitude >= 0x38800000u) {  // a normal half (>= 2^-14): rebias, round the 13 low bits
    const std::uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
  }
  // A subnormal half: m * 2^-24 with m = round(|value| * 2^24).
  const std::uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return sign;  // below 2^-25: rounds to zero
  const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126 - exponent;  // 14 .. 24
  std::uint32_t q = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1);
  const std::uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (q & 1u))) ++q;  // may carry into 0x400: right
  return static_cast<std::uint16_t>(sign | q);
}

float halfToFloatSoftware(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  const std::uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // exact
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

std::uint16_t floatToHalf(float value) {
#if defined(__F16C__)
  return static_cast<std::uint16_t>(_cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT));
#else
  return floatToHalfSoftware(value);
#endif
}

float halfToFloat(std::uint16_t half) {
#if defined(__F16C__)
  return _cvtsh_ss(half);
#else
  return halfToFloatSoftware(half);
#endif
}

namespace {
inline float saturate(float x) {
  return std::clamp(x, -kHalfMax, kHalfMax);
}
}  // namespace

void floatsToHalvesSaturating(std::span<const float> in, std::span<std::uint16_t> out) {
  assert(out.size() >= in.size());
  std::size_t i = 0;
#if defined(__F16C__)
  const __m256 hi = _mm256_set1_ps(kHalfMax);
  const __m256 lo = _mm256_set1_ps(-kHalfMax);
  for (; i + 8 <= in.size(); i += 8) {
    const __m256 x = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(in.data() + i), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out.data() + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < in.size(); ++i)
    out[i] = floatToHalf(saturate(in[i]));
}

void halvesToFloats(std::span<const std::uint16_t> in, std::span<float> out) {
  assert(out.size() >= in.size());
  std::size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= in.size(); i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in.data() + i));
    _mm256_storeu_ps(out.data() + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < in.size(); ++i)
    out[i] = halfToFloat(in[i]);
}

void roundToHalfSaturating(std::span<const float> in, std::span<float> out) {
  assert(out.size() >= in.size());
  std::size_t i = 0;
#if defined(__F16C__)
  const __m256 hi = _mm256_set1_ps(kHalfMax);
  const __m256 lo = _mm256_set1_ps(-kHalfMax);
  for (; i + 8 <= in.size(); i += 8) {
    const __m256 x = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(in.data() + i), lo), hi);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(out.data() + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < in.size(); ++i)
    out[i] = halfToFloat(floatToHalf(saturate(in[i])));
}

}  // namespace starling::compression
