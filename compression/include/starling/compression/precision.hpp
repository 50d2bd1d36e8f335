#pragma once
// The global model's precision (the coordinator's `model-mantissa-bits`): after each
// broadcast the coordinator and every client round the coordinates it changed to that
// many mantissa bits, the same way, so both hold the same model bit for bit, and a
// catch-up value needs only the bits above the cleared ones (ValueFormat::kXor32's
// `block`).
//
// Pure functions; thread-safe on distinct arguments.

#include <cstdint>
#include <span>

#include "starling/compression/compressed.hpp"
#include "starling/util/status.hpp"

namespace starling::compression {

constexpr std::uint32_t kFp32MantissaBits = 23;

// x rounded to `bits` (1 to 23) mantissa bits: to nearest, ties to even; toward zero
// where rounding up would overflow to infinity. 23 (or a NaN or infinite x): x itself.
float roundMantissa(float x, std::uint32_t bits);

// Rounds to `bits` mantissa bits the elements of `model` that c changes (kTopK, kRandK:
// its indices; every other encoding: all of them). Fails on bits outside 1 to 23, or an
// index or size c does not fit.
Status roundChanged(const Compressed& c, std::uint32_t bits, std::span<float> model);

}  // namespace starling::compression
