#pragma once
// Shared by the engine's tests: the model they start from, and a part taken out of
// the Result its create() returns (the test fails when it is an error).

#include <catch2/catch.hpp>
#include <cstddef>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "starling/coordinator/round_engine.hpp"
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

// An update of `v` in every coordinate.
inline std::vector<float> filled(float v) {
  return std::vector<float>(kDim, v);
}

inline compression::Compressed dense(const std::vector<float>& v) {
  compression::Compressed c;
  c.encoding = compression::Encoding::kDense32;
  c.count = static_cast<uint32_t>(v.size());
  c.values = v;
  return c;
}

inline IncomingUpdate update(uint64_t round, uint64_t baseRound, std::vector<float> delta, uint64_t examples = 100,
                             uint32_t steps = 10, float loss = 1.0f) {
  IncomingUpdate u;
  u.round = round;
  u.baseRound = baseRound;
  u.examples = examples;
  u.steps = steps;
  u.lossStart = loss;
  u.lossEnd = loss * 0.9f;
  u.durationMs = 100;
  u.delta = dense(delta);
  u.bytesWire = delta.size() * 4;
  return u;
}

// The actions of one kind, in order.
template <typename T>
std::vector<T> only(const std::vector<Action>& actions) {
  std::vector<T> out;
  for (const auto& a : actions)
    if (const T* t = std::get_if<T>(&a)) out.push_back(*t);
  return out;
}

}  // namespace starling::coordinator::testing
