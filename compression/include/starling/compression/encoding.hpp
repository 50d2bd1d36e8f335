#pragma once
// The vocabulary shared by compressors, the payload codec and the wire: how a
// compressed tensor was produced and how its positions and values are written.
//
// The numeric values are those of the wire schema (common/wire/starling.fbs);
// wire_codec.cpp static_asserts that they agree. A value read from a peer may be
// outside the named enumerators; decode() reports it as unknown.

#include <cstdint>
#include <string>

namespace starling::compression {

enum class Encoding : std::uint8_t {
  kDense32 = 0,     // all elements, fp32
  kDense16 = 1,     // all elements, fp16
  kTopK = 2,        // selected elements: indices + values
  kRandK = 3,       // k elements chosen by the seed: values only
  kScaledSign = 4,  // one sign bit per element + one l1 scale per block
  kQsgd = 5,        // one scale + a stochastic level in [0, s] and a sign per element
};

enum class IndexFormat : std::uint8_t {
  kNone = 0,         // dense, or derived from the seed
  kDeltaVarint = 1,  // increasing indices: the first absolute, then gaps, LEB128
  kBitmap = 2,       // one bit per element of the tensor, LSB first
  kRice = 3,         // a byte r, then each gap (first index, then index - previous - 1)
                     // Golomb-Rice coded: gap >> r in unary (ones, then a zero), then
                     // its low r bits; LSB-first bit stream, zero padding
  kRelative = 4,     // against a reference list R the receiver holds (sorted, distinct: the
                     // indices of the broadcast before this one). A byte f, then
                     //   f = 0: the kept elements of R as a bitmap over R's positions,
                     //          ceil(|R| / 8) bytes, LSB first, zero padding;
                     //   f = 1: a LEB128 varint m (kept elements), a byte r, then the m kept
                     //          positions in R coded as kRice's gaps (each below |R|), zero
                     //          padding to a byte;
                     // then the selected - m indices not in R: a byte r and their gaps over
                     // the tensor coded as kRice's, zero padding. The indices are the merge of
                     // both lists; the values are in that merged (increasing) order.
};

enum class ValueFormat : std::uint8_t {
  kFp32 = 0,      // little-endian IEEE binary32
  kFp16 = 1,      // little-endian IEEE binary16
  kLevels = 2,    // per element: `level_bits` bits of level, then one sign bit
  kSignBits = 3,  // one bit per element, 1 = negative (top-k: +-its block's scale)
  kXor32 = 4,     // top-k only: per value, its fp32 bits XOR the receiver's value at that
                  // index; a byte m (the fewest leading zeros of any word), a byte r, then
                  // per word the Golomb-Rice code (r) of its leading zeros - m and the
                  // bits below its leading one; LSB-first bit stream, zero padding
};

// "top-k", "fp16", ... or "unknown(9)" for a value outside the enumerators.
std::string encodingName(Encoding encoding);
std::string indexFormatName(IndexFormat format);
std::string valueFormatName(ValueFormat format);

}  // namespace starling::compression
