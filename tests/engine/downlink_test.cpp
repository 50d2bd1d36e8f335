// Downlink alone: the broadcast with server error feedback, the model precision, the
// staleness count, catch-up (log, values, dense) and the checkpointed catch-up state.

#include "engine/downlink.hpp"

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "starling/compression/precision.hpp"
#include "starling/util/checksum.hpp"

#include "fixtures.hpp"

using namespace starling;
using namespace starling::coordinator;
using starling::coordinator::testing::kDim;

namespace {

std::vector<float> initial() {
  return testing::initialModel();
}

EngineConfig topkConfig() {
  EngineConfig c;
  c.downlink = "topk";
  c.downlinkDensity = 4.0 / kDim;
  c.errorFeedback = true;
  return c;
}

std::unique_ptr<Downlink> make(const EngineConfig& c, std::vector<float> model = initial()) {
  return testing::created(Downlink::create(c, std::move(model)));
}

// A step whose four largest coordinates are at 4 x round .. 4 x round + 3.
std::vector<float> step(uint64_t round) {
  std::vector<float> s(kDim, 0.001f);
  for (uint64_t j = 0; j < 4; ++j)
    s[(4 * round + j) % kDim] = 0.5f + 0.1f * static_cast<float>(j);
  return s;
}

// Applies a catch-up to a client's model the way a client does.
std::vector<float> apply(std::vector<float> model, const Downlink::CatchUp& up, uint32_t bits = 23) {
  if (up.denseModel) return *up.denseModel;
  if (up.values) {
    compression::Compressed v;
    REQUIRE(compression::decode(*up.values, kDim, v).isOk());
    REQUIRE(compression::overwrite(v, model).isOk());
  }
  for (const auto& b : up.broadcasts) {
    compression::Compressed q;
    REQUIRE(compression::decode(*b, kDim, q).isOk());
    REQUIRE(compression::addScaled(q, -1.0f, model).isOk());
    REQUIRE(compression::roundChanged(q, bits, model).isOk());
  }
  return model;
}

}  // namespace

TEST_CASE("downlink: a commit sends the top-k of step + memory and keeps the rest", "[engine][downlink]") {
  auto d = make(topkConfig());
  compression::Compressed q;
  const auto s = step(1);
  REQUIRE(d->commit(s, 4.0 / kDim, 1, q).isOk());
  CHECK(q.indices == std::vector<uint32_t>{4, 5, 6, 7});
  CHECK(d->round() == 1);
  const auto x0 = initial();
  for (std::size_t i = 0; i < kDim; ++i) {
    const bool sent = i >= 4 && i < 8;
    CHECK(d->model()[i] == (sent ? x0[i] - s[i] : x0[i]));
    CHECK(d->memory()[i] == (sent ? 0.0f : s[i]));  // sent + memory = the step
  }
  CHECK(d->checksum() == checksum64(d->model()));
  CHECK(d->knows(0, checksum64(x0)));
  CHECK(d->knows(1, d->checksum()));
  CHECK_FALSE(d->knows(1, checksum64(x0)));
}

TEST_CASE("downlink: without error feedback what top-k leaves out is lost", "[engine][downlink]") {
  EngineConfig c = topkConfig();
  c.errorFeedback = false;
  auto d = make(c);
  compression::Compressed q;
  REQUIRE(d->commit(step(1), 4.0 / kDim, 1, q).isOk());
  CHECK(d->memory().empty());
}

TEST_CASE("downlink: staleness counts the commits since the update's base model", "[engine][downlink]") {
  auto d = make(topkConfig());
  compression::Compressed q;
  for (uint64_t r : {2, 3, 5})  // round numbers need not be consecutive (abandoned rounds)
    REQUIRE(d->commit(step(r), 4.0 / kDim, r, q).isOk());
  CHECK(d->commitsSince(5, 99) == 0);
  CHECK(d->commitsSince(3, 99) == 1);
  CHECK(d->commitsSince(2, 99) == 2);
  CHECK(d->commitsSince(0, 99) == 3);
  CHECK(d->commitsSince(4, 99) == 99);  // no such model
}

TEST_CASE("downlink: catch-up sends the fewest bytes: log, values or dense model", "[engine][downlink]") {
  EngineConfig c = topkConfig();
  c.catchUpByValue = false;
  auto d = make(c);
  compression::Compressed q;
  for (uint64_t r = 1; r <= 3; ++r)
    REQUIRE(d->commit(step(r), 4.0 / kDim, r, q).isOk());
  const std::vector<float> x = {d->model().begin(), d->model().end()};
  SECTION("a client at round 1 replays the broadcasts of rounds 2 and 3") {
    std::vector<float> client = initial();
    // It holds round 1's model: replay round 1 from the log too, then ask from there.
    const auto all = d->catchUp(0, std::nullopt);
    REQUIRE(all.broadcasts.size() == 3);
    CHECK(all.indicesRound == std::optional<uint64_t>(3));
    CHECK(apply(client, all) == x);
    const auto two = d->catchUp(1, std::nullopt);
    CHECK(two.broadcasts.size() == 2);
    CHECK(!two.denseModel);
    CHECK(!two.values);
  }
  SECTION("an unknown model gets the dense one") {
    const auto up = d->catchUp(std::nullopt, std::nullopt);
    REQUIRE(up.denseModel);
    CHECK(*up.denseModel == x);
    CHECK(up.broadcasts.empty());
    CHECK(!up.indicesRound);
  }
  SECTION("by value: the current values of the changed coordinates, bit for bit the replayed model") {
    c.catchUpByValue = true;
    auto v = make(c);
    for (uint64_t r = 1; r <= 3; ++r)
      REQUIRE(v->commit(step(r), 4.0 / kDim, r, q).isOk());
    const auto up = v->catchUp(0, std::nullopt);
    REQUIRE(up.values);  // 12 coordinates once instead of three broadcasts with headers
    CHECK(up.broadcasts.empty());
    compression::Compressed values;
    REQUIRE(compression::decode(*up.values, kDim, values).isOk());
    CHECK(values.indices == std::vector<uint32_t>{4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
    CHECK(checksum64(apply(initial(), up)) == v->checksum());
  }
}

TEST_CASE("downlink: the model's changed coordinates are rounded to its precision, the error into the memory",
          "[engine][downlink]") {
  EngineConfig c = topkConfig();
  c.modelMantissaBits = 8;
  auto d = make(c);
  compression::Compressed q;
  const auto s = step(1);
  REQUIRE(d->commit(s, 4.0 / kDim, 1, q).isOk());
  const auto x0 = initial();
  for (uint32_t i : q.indices) {
    CHECK((std::bit_cast<uint32_t>(d->model()[i]) & ((1u << 15) - 1)) == 0);  // 23 - 8 low bits clear
    // x1 = x0 - s + (rounded - unrounded); the memory took the rounding: x0 - x1 + e = s.
    CHECK(double(x0[i]) - d->model()[i] + d->memory()[i] == Approx(s[i]).margin(1e-6));
  }
}

TEST_CASE("downlink: the catch-up state round-trips through a checkpoint", "[engine][downlink]") {
  EngineConfig c = topkConfig();
  c.catchUpXorRounds = 2;
  c.downlinkShared = 0.5;
  c.downlinkRelativeIndices = true;
  auto d = make(c);
  compression::Compressed q;
  for (uint64_t r = 1; r <= 3; ++r)
    REQUIRE(d->commit(step(r), 4.0 / kDim, r, q).isOk());
  const std::vector<uint8_t> bytes = d->serialize();
  const std::vector<float> memory = {d->memory().begin(), d->memory().end()};

  auto back = make(c, {d->model().begin(), d->model().end()});
  REQUIRE(back->resume(3, memory, bytes).isOk());
  CHECK(back->checksum() == d->checksum());
  CHECK(back->serialize() == bytes);
  for (uint64_t held : {0, 1, 2}) {
    const auto a = d->catchUp(held, std::nullopt), b = back->catchUp(held, std::nullopt);
    CHECK(a.broadcasts.size() == b.broadcasts.size());
    REQUIRE(bool(a.values) == bool(b.values));
    if (a.values) CHECK(a.values->byteSize() == b.values->byteSize());
  }
  // The next broadcast (shared mask included) is the same from either.
  compression::Compressed q1, q2;
  REQUIRE(d->commit(step(5), 4.0 / kDim, 4, q1).isOk());
  REQUIRE(back->commit(step(5), 4.0 / kDim, 4, q2).isOk());
  CHECK(q1.indices == q2.indices);
  CHECK(d->checksum() == back->checksum());

  SECTION("a checkpoint without catch-up state: a client behind it gets the dense model") {
    auto old = make(c, {d->model().begin(), d->model().end()});
    REQUIRE(old->resume(4, {}, {}).isOk());
    CHECK(old->catchUp(2, std::nullopt).denseModel);
    CHECK(old->knows(4, d->checksum()));
  }
  SECTION("a catch-up state of another round is refused") {
    auto other = make(c, initial());
    CHECK(other->resume(3, memory, bytes).code() == StatusCode::kMalformed);
  }
}
