#include "starling/util/checksum.hpp"

#include <cstring>

namespace starling {
namespace {

constexpr uint64_t kPrime1 = 0x9e3779b185ebca87ull;
constexpr uint64_t kPrime2 = 0xc2b2ae3d27d4eb4full;

uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

uint64_t mix(uint64_t h, uint64_t word) {
  return rotl(h ^ (word * kPrime2), 31) * kPrime1;
}

}  // namespace

uint64_t checksum64(std::span<const float> values) {
  // Four independent lanes over 64-bit words keep the multiply chains short.
  uint64_t lane[4] = {kPrime1, kPrime2, kPrime1 ^ kPrime2, kPrime1 + kPrime2};
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  const std::size_t n = values.size_bytes();
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, bytes + i + 8 * l, 8);
      lane[l] = mix(lane[l], w);
    }
  }
  uint64_t h = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18);
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    h = mix(h, w);
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, bytes + i, n - i);
    h = mix(h, w);
  }
  h ^= n;
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  return h;
}

}  // namespace starling
