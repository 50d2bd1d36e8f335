#pragma once
// IEEE binary16 conversion, round to nearest even.
//
// The bulk functions use F16C instructions when the build targets them (__F16C__)
// and the software path otherwise; both give identical results for every finite
// float and for infinities (tests/compression/fp16_test.cpp checks this). NaN
// payloads are not preserved bit for bit; compressors never convert NaN.
// All functions are pure and thread-safe.

#include <cstdint>
#include <span>

namespace starling::compression {

// The largest finite binary16 value.
inline constexpr float kHalfMax = 65504.0f;

// Software conversions, available on every target.
std::uint16_t floatToHalfSoftware(float value);
float halfToFloatSoftware(std::uint16_t half);

// Scalar conversions (hardware when available).
std::uint16_t floatToHalf(float value);
float halfToFloat(std::uint16_t half);

// Converts in.size() floats to halves, saturating finite values beyond +-kHalfMax to
// +-kHalfMax (so a finite input never becomes infinite). out.size() must be
// >= in.size().
void floatsToHalvesSaturating(std::span<const float> in, std::span<std::uint16_t> out);

// Converts halves to floats; out.size() must be >= in.size().
void halvesToFloats(std::span<const std::uint16_t> in, std::span<float> out);

// Rounds each value to the nearest binary16 value (saturating like above) and
// stores it back as a float, which is then exactly representable in fp16.
// in and out may be the same span.
void roundToHalfSaturating(std::span<const float> in, std::span<float> out);

}  // namespace starling::compression
