#pragma once
// Private: the value formats of the payload codec (encoding.hpp names them). The get
// functions treat the payload as hostile, as decode() does (payload.hpp): they read
// nothing out of bounds and return kMalformed naming what is wrong.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "starling/compression/compressed.hpp"
#include "starling/compression/encoding.hpp"
#include "starling/compression/payload.hpp"
#include "starling/util/status.hpp"

namespace starling::compression::detail {

// kFp32 or kFp16 (format): the values as little-endian floats or halves, the halves
// rounded with saturation. out is overwritten.
void putFloats(const std::vector<float>& values, ValueFormat format, std::vector<std::uint8_t>& out);

// The n kFp32 or kFp16 values of p (p.valueFormat says which) into out; each must be
// finite.
Status getFloats(const PayloadView& p, std::size_t n, std::vector<float>& out);

// Top-k with sign-bit values: one scale per block of values, one bit per value.
// Sets out.values, out.block and out.scales from p.
Status getTernary(const PayloadView& p, Compressed& out);

// XOR words (kXor32): a byte m, the fewest leading zeros of any word; a byte r; then
// per word the Golomb-Rice code of (its leading zeros - m) with parameter r and, for a
// nonzero word, the 31 - zeros bits below its leading one. Catch-up words of a value
// that moved little have the sign, the exponent and the top of the mantissa in common
// with the receiver's: many leading zeros. out is overwritten.
void putXorWords(const std::vector<std::uint32_t>& words, std::vector<std::uint8_t>& out);

// The p.selected XOR words of p.values into out.
Status getXorWords(const PayloadView& p, std::vector<std::uint32_t>& out);

}  // namespace starling::compression::detail
