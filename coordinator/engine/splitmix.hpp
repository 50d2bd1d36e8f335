#pragma once
// splitmix64: the engine's seeded generator (selection's shuffles, sticky tie-breaks),
// starling::splitmixNext (the project's one mixer, starling/util/mix.hpp). A pure
// function of the state it advances; any thread.

#include <cstdint>

#include "starling/util/mix.hpp"

namespace starling::coordinator {

inline uint64_t splitmix(uint64_t& state) {
  return splitmixNext(state);
}

}  // namespace starling::coordinator
