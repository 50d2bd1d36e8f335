#pragma once
// The payload codec: Compressed <-> Payload, the bytes of the wire's CompressedTensor
// table without Flatbuffers (wire_codec.hpp converts to and from the table).
//
// Encoding choices (docs/compression.md has the bit costs):
// - top-k indices: delta + LEB128 varint, Rice-coded gaps or a bitmap, whichever is
//   smallest; or, by encodeRelative(), against a reference list the receiver holds;
// - values: fp32 or fp16 as the Compressed says, or sign bits + per-block scales
//   (ternary top-k); scaled sign: sign bits + per-block scales; QSGD: packed
//   (level, sign) fields + one scale; rand-k: the seed only.
// decode(encode(c)) == c, and expand() of the two is bit-identical.
//
// decode() treats the payload as hostile: it never reads out of bounds, never
// allocates more than the expected tensor needs, and returns kMalformed naming what
// is wrong (indices out of range or not increasing, truncated varints, counts that
// disagree, non-finite values or scales), kUnsupported for unknown encodings or
// formats, kOutOfRange for a count other than the expected one.
// Pure functions; thread-safe on distinct arguments.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "starling/compression/compressed.hpp"
#include "starling/compression/encoding.hpp"
#include "starling/util/status.hpp"

namespace starling::compression {

struct Payload {
  Encoding encoding = Encoding::kDense32;
  std::uint32_t count = 0;     // elements of the full tensor
  std::uint32_t selected = 0;  // elements sent; == count for dense encodings
  IndexFormat indexFormat = IndexFormat::kNone;
  std::vector<std::uint8_t> indices;
  ValueFormat valueFormat = ValueFormat::kFp32;
  std::vector<std::uint8_t> values;
  std::uint8_t levelBits = 0;  // kQsgd: bits per level
  std::uint32_t levels = 0;    // kQsgd: s
  std::uint32_t block = 0;     // kScaledSign: elements per scale; ternary top-k: values per scale
  std::vector<float> scales;   // kScaledSign, ternary top-k: one per block; kQsgd: {scale}
  std::uint64_t seed = 0;      // kRandK, kQsgd

  // Bytes of the variable-length parts plus the scalar fields: an estimate of the wire
  // size without the Flatbuffers framing (a few dozen bytes).
  std::size_t byteSize() const;

  friend bool operator==(const Payload&, const Payload&) = default;
};

// A Payload whose variable-length parts live elsewhere (e.g. in a received frame):
// decoding from it skips the copy into a Payload. Valid while those bytes are.
struct PayloadView {
  Encoding encoding = Encoding::kDense32;
  std::uint32_t count = 0;
  std::uint32_t selected = 0;
  IndexFormat indexFormat = IndexFormat::kNone;
  std::span<const std::uint8_t> indices;
  ValueFormat valueFormat = ValueFormat::kFp32;
  std::span<const std::uint8_t> values;
  std::uint8_t levelBits = 0;
  std::uint32_t levels = 0;
  std::uint32_t block = 0;
  std::span<const float> scales;
  std::uint64_t seed = 0;

  // The same estimate as Payload::byteSize().
  std::size_t byteSize() const;
};

// A view of p's fields (valid while p is alive and unchanged).
PayloadView viewOf(const Payload& p);

// Fails (kInvalidArgument) only on a Compressed that violates its own invariants.
Status encode(const Compressed& c, Payload& out);

// Like encode(), but a top-k tensor's indices are coded against `reference`
// (IndexFormat::kRelative): sorted, distinct indices below c.count that the receiver
// holds (the previous broadcast's). kInvalidArgument for another encoding or a
// reference that is not increasing below c.count. The values are as encode() writes them.
Status encodeRelative(const Compressed& c, std::span<const std::uint32_t> reference, Payload& out);

// Decodes a payload for a tensor of expectedCount elements into out (reusing its
// buffers). On error out is unspecified. Without a reference, kRelative indices are
// kMalformed ("relative indices without a reference"); with one (possibly empty),
// they are decoded against it.
Status decode(const PayloadView& p, std::uint32_t expectedCount, Compressed& out);
Status decode(const Payload& p, std::uint32_t expectedCount, Compressed& out);
Status decode(const PayloadView& p, std::uint32_t expectedCount, std::span<const std::uint32_t> reference,
              Compressed& out);
Status decode(const Payload& p, std::uint32_t expectedCount, std::span<const std::uint32_t> reference, Compressed& out);

// Bytes of the LEB128 varint of x (1 to 5).
inline std::size_t varintSize(std::uint32_t x) {
  std::size_t n = 1;
  while (x >= 0x80) {
    x >>= 7;
    ++n;
  }
  return n;
}

}  // namespace starling::compression
