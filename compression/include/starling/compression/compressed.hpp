#pragma once
// Compressed: the in-memory form of C(v), what a compressor produces and what the
// payload codec writes to and reads from the wire.
//
// decode(encode(c)) == c field for field, and expand() of both is bit-identical.
// A Compressed is a value type: it owns its buffers, and reusing one object across
// rounds reuses their capacity. Not synchronized: one thread at a time.

#include <cstdint>
#include <span>
#include <vector>

#include "starling/compression/encoding.hpp"
#include "starling/util/status.hpp"

namespace starling::compression {

struct Compressed {
  Encoding encoding = Encoding::kDense32;
  std::uint32_t count = 0;  // elements of the full tensor

  // kDense32, kDense16, kTopK, kRandK: kFp32 or kFp16; kScaledSign: kSignBits;
  // kQsgd: kLevels; kTopK may also be kSignBits (sparse ternary: entry j of `values`
  // is +scales[j / block] or -scales[j / block]) or kXor32 (`xorWords`). With kFp16
  // every entry of `values` is exactly representable in binary16 (the compressor
  // rounded it).
  ValueFormat valueFormat = ValueFormat::kFp32;

  // kTopK, kRandK: the strictly increasing positions of `values`. For kRandK they are
  // derived from `seed` and never sent.
  std::vector<std::uint32_t> indices;
  // kDense32, kDense16: `count` values; kTopK, kRandK: one per index. Empty for kXor32.
  std::vector<float> values;
  // kTopK with kXor32 (catch-up relative to a model the sender knows the receiver
  // holds): one word per index, the sender's fp32 bits XOR the receiver's current value
  // there, both shifted right by `block` bits (the low bits every sent value has clear:
  // see precision.hpp). Only overwrite() applies it; it has no values of its own to
  // expand or add.
  std::vector<std::uint32_t> xorWords;

  // kScaledSign, kQsgd: bit i of word i / 64 set = element i is negative. Bits at and
  // beyond `count` are zero; for kQsgd an element of level 0 has a clear bit.
  std::vector<std::uint64_t> signs;
  // kScaledSign: elements per block, and one scale (mean |v| of the block) per block.
  // kQsgd: scales = {scale}; element i is sign_i * scale * level_i / qsgdLevels.
  // kTopK with kSignBits: value j is +-scales[j / block]. kTopK with kXor32: the low
  // bits the sent values have clear, at most kMaxXorDroppedBits.
  std::uint32_t block = 0;
  std::vector<float> scales;
  // kQsgd: the level of each element, in [0, qsgdLevels].
  std::vector<std::uint8_t> levels;
  std::uint32_t qsgdLevels = 0;  // s

  // kRandK: the seed of the index set; kQsgd: the seed of the stochastic rounding.
  std::uint64_t seed = 0;

  // Elements sent: indices.size() for kTopK and kRandK, `count` otherwise.
  std::uint32_t selected() const;

  // Empties every buffer (keeping capacity) and resets the scalar fields.
  void clear();

  friend bool operator==(const Compressed&, const Compressed&) = default;
};

// The value of element i of a QSGD tensor. expand() and addScaled() both use it, so
// the decoded tensor is bit-identical wherever it is computed.
inline float qsgdValue(float step, std::uint8_t level, bool negative) {
  const float magnitude = step * static_cast<float>(level);
  return negative ? -magnitude : magnitude;
}

// Writes the dense tensor C(v) into out (out.size() must equal c.count).
Status expand(const Compressed& c, std::span<float> out);

// ||C(v)||_2, computed from the compressed form (sparse encodings read only their
// selected values; nothing is expanded). Accumulated in double. Fails like expand()
// on an inconsistent tensor; NaN or Inf values give a non-finite norm.
Result<double> l2Norm(const Compressed& c);

// Clips the tensor to L2 norm at most maxNorm (> 0) in its compressed form: when
// l2Norm(c) > maxNorm every value (or the scales of kScaledSign, kQsgd and sparse
// ternary) is multiplied by maxNorm / l2Norm(c), rounded toward zero (fp16 values stay
// exactly representable), so that afterwards l2Norm(c) <= maxNorm holds exactly.
// Returns the factor applied (1 when the tensor was within the norm). Differential
// privacy's clipping (docs/privacy.md): the message that leaves a client is what is
// clipped. Fails on kXor32 (no values of its own), on an inconsistent tensor, and on a
// non-finite norm.
Result<double> clipToNorm(Compressed& c, double maxNorm);

// acc[i] += alpha * C(v)[i] for every element (sparse encodings touch only their
// selected elements). acc.size() must equal c.count.
Status addScaled(const Compressed& c, float alpha, std::span<float> acc);

// One part of addScaled(): acc[i] += alpha * C(v)[i] for the elements [first, last)
// of a dense encoding (kDense32, kDense16, kScaledSign, kQsgd), or for the entries
// [first, last) of indices of a sparse one (kTopK, kRandK). The same arithmetic as
// addScaled(): a tensor added part by part, each element once, in any split and on
// any threads (disjoint parts of acc), gives acc the same bits as addScaled(). Checks
// the sizes and the part's indices only (O(last - first)). last <= c.selected().
Status addScaledPart(const Compressed& c, float alpha, std::size_t first, std::size_t last, std::span<float> acc);

// out[i] = C(v)[i] for every element the tensor sends (kTopK, kRandK: its indices;
// every other encoding: all elements, as expand()); the others are left as they are.
// Catch-up by value: the sender's current values of the coordinates that changed.
// kXor32: out[i] becomes ((bits of out[i]) >> block XOR the word sent for i) << block;
// fails (kMalformed, out unchanged) when a result would not be finite, i.e. out is not
// the model the words were made for.
constexpr std::uint32_t kMaxXorDroppedBits = 22;
Status overwrite(const Compressed& c, std::span<float> out);

}  // namespace starling::compression
