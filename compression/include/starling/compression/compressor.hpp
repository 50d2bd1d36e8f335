#pragma once
// The compressor interface: C(v) over a span of floats.
//
// Contract of every implementation:
// - keeps at least one element of a non-empty input (k = clamp(round(density d), 1, d));
// - an all-zero input compresses to an all-zero C(v) without error;
// - a NaN or infinite element returns kInvalidArgument naming the element; an empty
//   input returns kInvalidArgument; neither is undefined behaviour;
// - deterministic: the same input, params and options give the same output.
//
// A Compressor keeps scratch buffers between calls, so a call allocates only while
// they grow. One thread at a time per instance; use one instance per thread.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "starling/compression/compressed.hpp"
#include "starling/compression/encoding.hpp"
#include "starling/util/status.hpp"

namespace starling::compression {

// What may change from one call to the next.
struct CompressParams {
  // Fraction of elements kept by top-k and rand-k, in (0, 1]; ignored by the dense,
  // sign and QSGD compressors.
  double density = 1.0;
  // Seed of rand-k's index set, QSGD's rounding and sampled top-k's sample. Use a
  // deterministic seed per round (and per tensor) so that runs are reproducible.
  std::uint64_t seed = 0;
};

class Compressor {
 public:
  virtual ~Compressor() = default;

  // The name makeCompressor() accepts, e.g. "topk-sampled".
  virtual std::string_view name() const = 0;

  // Compresses v into out, reusing out's buffers. On error out is unspecified.
  virtual Status compress(std::span<const float> v, const CompressParams& params, Compressed& out) = 0;
};

// Options of every compressor, with the defaults makeCompressor() uses.
struct CompressorOptions {
  // Values of top-k and rand-k: kFp32 or kFp16; top-k also kSignBits (sparse ternary,
  // makeTernary in topk.hpp).
  ValueFormat values = ValueFormat::kFp32;
  // Scaled sign: elements per l1 scale. 1024 costs 1 + 32/1024 bits per element.
  std::uint32_t signBlock = 1024;
  // QSGD: the number of levels s, in [1, 255]; costs ceil(log2(s + 1)) + 1 bits.
  std::uint32_t qsgdLevels = 15;
  // QSGD: scale by 1 / (1 + omega) so that it is a contraction (use it under error
  // feedback); false keeps it unbiased.
  bool qsgdContractive = false;
  // Rand-k: multiply by d / k so that it is unbiased; false keeps it a contraction
  // (use false under error feedback).
  bool randkRescale = false;
};

// The value format of top-k and rand-k under a task's switches: sign bits (ternary,
// top-k only) over fp16 over fp32.
inline ValueFormat sparseValueFormat(bool fp16, bool ternary) {
  return ternary ? ValueFormat::kSignBits : fp16 ? ValueFormat::kFp16 : ValueFormat::kFp32;
}

// A link's compressor options under a task's switches, the same on the client, the
// coordinator and the simulator: sparse values as sparseValueFormat(); QSGD with s =
// qsgdLevels (checked by makeCompressor()), scaled by 1 / (1 + omega) under error
// feedback, which needs a contraction (ALGORITHMS.md §1), and unbiased without it.
// Rand-k stays a contraction (not rescaled by d / k) either way: unbiased rand-k at
// 1% multiplies the variance of the update by about 100.
inline CompressorOptions linkOptions(bool fp16, bool ternary, bool errorFeedback, std::uint32_t qsgdLevels) {
  CompressorOptions o;
  o.values = sparseValueFormat(fp16, ternary);
  o.qsgdLevels = qsgdLevels;
  o.qsgdContractive = errorFeedback;
  return o;
}

// Names: "identity", "fp16", "topk", "topk-sampled", "randk", "sign", "qsgd".
Result<std::unique_ptr<Compressor>> makeCompressor(std::string_view name, const CompressorOptions& options = {});

// k for a tensor of d elements at a density: clamp(round(density * d), 1, d).
// Fails on d == 0 and on a density outside (0, 1] (including NaN).
Result<std::uint32_t> selectedCount(std::size_t d, double density);

// Checks that v is non-empty, fits in 32-bit indices and holds only finite values.
// The message names the first offending element, e.g. "element 17 is NaN".
Status checkInput(std::span<const float> v);

}  // namespace starling::compression
