#pragma once
// Shared by the engine's tests: the model they start from, and a part taken out of
// the Result its create() returns (the test fails when it is an error).

#include <catch2/catch.hpp>
#include <cstddef>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::coordinator::testing {

constexpr std::size_t kDim = 64;

inline std::vector<float> initialModel() {
  std::vector<float> m(kDim);
  for (std::size_t i = 0; i < kDim; ++i)
    m[i] = 0.01f * static_cast<float>(i) - 0.3f;
  return m;
}

template <typename T>
T created(Result<T> made) {
  REQUIRE(made.isOk());
  return std::move(*made);
}

// Feeds every entry of a part's state text to its readState(): each must be the
// part's own key and parse.
template <typename Part>
void readStateText(Part& part, const std::string& text) {
  std::istringstream in(text);
  for (std::string key; in >> key;) {
    bool ok = false;
    REQUIRE(part.readState(key, in, ok));
    REQUIRE(ok);
  }
}

}  // namespace starling::coordinator::testing
