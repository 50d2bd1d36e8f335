#pragma once
// checksum64: a 64-bit fingerprint of a float buffer, used to prove that the
// coordinator and a client hold bit-identical models. Not cryptographic: TLS
// protects the bytes in transit; this catches divergence (a missed broadcast, a
// different float path), so it depends on every bit of every element.

#include <cstdint>
#include <span>

namespace starling {

uint64_t checksum64(std::span<const float> values);

}  // namespace starling
