#pragma once
// splitmix64: the engine's seeded generator (selection's shuffles, sticky tie-breaks).
// A pure function of the state it advances; any thread.

#include <cstdint>

namespace starling::coordinator {

inline uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace starling::coordinator
