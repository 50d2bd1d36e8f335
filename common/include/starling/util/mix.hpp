#pragma once
// The one 64-bit mixer of Starling's seeds and seeded generators: SplitMix64's
// finalizer (Steele, Lea & Flood, OOPSLA 2014), a bijection of 64-bit words, and what
// is built on it. Rand-k's index sets and QSGD's levels are regenerated from seeds on
// both ends of the wire, so these functions are part of the protocol: changing them
// changes what a seed means. Pure functions; any thread.

#include <cstdint>

namespace starling {

inline constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ull;  // 2^64 / the golden ratio

inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A seed derived from two: order matters (mixSeeds(a, b) != mixSeeds(b, a)).
inline std::uint64_t mixSeeds(std::uint64_t a, std::uint64_t b) {
  return mix64(a ^ mix64(b + kGolden));
}

// The next number of a sequential SplitMix64 generator whose state is `state`.
inline std::uint64_t splitmixNext(std::uint64_t& state) {
  state += kGolden;
  return mix64(state);
}

}  // namespace starling
