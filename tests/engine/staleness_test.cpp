// Staleness alone: FedBuff's staleness weights and the SSP / DSSP gate on scripted
// timings, against values worked out by hand from ALGORITHMS.md §7.

#include "engine/staleness.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

using namespace starling;
using namespace starling::coordinator;

namespace {

StalenessWeight weight(const char* text) {
  auto w = StalenessWeight::parse(text);
  REQUIRE(w.isOk());
  return *w;
}

using Ids = std::vector<std::string>;

}  // namespace

TEST_CASE("staleness weight: FedBuff's 1/sqrt(1 + tau), polynomial and hinge forms", "[engine][staleness]") {
  const StalenessWeight poly = weight("poly");
  CHECK(poly(0) == 1.0);
  CHECK(poly(3) == Approx(0.5));
  CHECK(poly(8) == Approx(1.0 / 3.0));
  CHECK(poly.name() == "poly:0.5");

  const StalenessWeight inverse = weight("poly:1");
  CHECK(inverse(4) == Approx(0.2));

  const StalenessWeight hinge = weight("hinge:1:2");
  CHECK(hinge(0) == 1.0);
  CHECK(hinge(2) == 1.0);
  CHECK(hinge(4) == Approx(1.0 / 3.0));  // 1 / (1 (4 - 2) + 1)
  CHECK(hinge.name() == "hinge:1:2");

  CHECK(weight("constant")(1000) == 1.0);

  // Every form reads its own name back, and none grows with staleness.
  for (const char* text : {"poly", "poly:0.25", "hinge:10:4", "constant"}) {
    const StalenessWeight w = weight(text);
    CHECK(weight(w.name().c_str()).name() == w.name());
    for (uint64_t s = 0; s < 20; ++s)
      CHECK(w(s + 1) <= w(s));
  }
}

TEST_CASE("staleness weight: malformed forms are refused naming the text", "[engine][staleness]") {
  for (const char* text : {"", "poly:", "poly:-1", "poly:x", "hinge:1", "hinge:a:2", "sqrt"}) {
    auto w = StalenessWeight::parse(text);
    REQUIRE_FALSE(w.isOk());
    CHECK(w.status().code() == StatusCode::kInvalidArgument);
    CHECK(w.status().message().find("'" + std::string(text) + "'") != std::string::npos);
  }
}

TEST_CASE("ssp: bound 0 is bulk-synchronous", "[engine][staleness]") {
  ClockBound gate = ClockBound::create({0, 0});
  gate.join("1", 0);
  gate.join("2", 0);
  ClockBound::Step a = gate.finished("1", 10);
  CHECK_FALSE(a.proceed);  // 1 is one step ahead of 2
  CHECK(gate.waiting("1"));
  ClockBound::Step b = gate.finished("2", 30);
  CHECK(b.proceed);
  CHECK(b.released == Ids{"1"});
  CHECK_FALSE(gate.waiting("1"));
  CHECK(gate.minClock() == 1);
  CHECK(gate.waits() == 1);
}

TEST_CASE("ssp: a client runs at most bound steps ahead of the slowest", "[engine][staleness]") {
  ClockBound gate = ClockBound::create({2, 0});
  gate.join("1", 0);
  gate.join("2", 0);
  CHECK(gate.finished("1", 10).proceed);        // lead 1
  CHECK(gate.finished("1", 20).proceed);        // lead 2
  CHECK_FALSE(gate.finished("1", 30).proceed);  // lead 3 > 2
  CHECK(gate.clock("1") == 3);
  // The slowest finishing its first step brings the lead back to 2.
  ClockBound::Step slow = gate.finished("2", 100);
  CHECK(slow.proceed);
  CHECK(slow.released == Ids{"1"});
}

TEST_CASE("dssp: a fast client is granted the extra steps that remove its wait; ssp makes it wait",
          "[engine][staleness]") {
  // Client 2 takes 100 ms a step, client 1 20 ms (after its first step of 110 ms).
  auto script = [](ClockBound& gate, std::vector<bool>& proceeds) {
    gate.join("1", 0);
    gate.join("2", 0);
    proceeds.push_back(gate.finished("2", 100).proceed);  // 2: clock 1, lead 1
    proceeds.push_back(gate.finished("1", 110).proceed);  // 1: clock 1
    proceeds.push_back(gate.finished("1", 130).proceed);  // 1: clock 2, lead 1
    proceeds.push_back(gate.finished("1", 150).proceed);  // 1: clock 3, lead 2 > bound 1
  };
  std::vector<bool> ssp;
  ClockBound fixed = ClockBound::create({1, 0});
  script(fixed, ssp);
  CHECK(ssp == std::vector<bool>{true, true, true, false});

  std::vector<bool> dssp;
  ClockBound dynamic = ClockBound::create({1, 3});
  script(dynamic, dssp);
  // At 150 the slowest (2, at clock 1, last finish 100, interval 100) is predicted to
  // finish at 200: r = ceil((200 - 150) / 20) = 3 extra steps, and the room is
  // bound + extraMax - lead + 1 = 1 + 3 - 2 + 1 = 3: granted, this step the first.
  CHECK(dssp == std::vector<bool>{true, true, true, true});
  CHECK(dynamic.grants() == 1);
  CHECK(dynamic.extraLeft("1") == 2);
  CHECK(dynamic.finished("1", 170).proceed);  // clock 4, lead 3: the grant's second step
  CHECK(dynamic.finished("1", 190).proceed);  // clock 5, lead 4: its third
  CHECK(dynamic.extraLeft("1") == 0);
  CHECK(dynamic.finished("2", 200).proceed);  // the slowest finishes as predicted
  // At 210 (clock 6, lead 4): the slowest's next finish is predicted at 300, r = 5,
  // room = 1 + 3 - 4 + 1 = 1: no grant can remove the wait, so client 1 waits.
  CHECK_FALSE(dynamic.finished("1", 210).proceed);
  CHECK(dynamic.waiting("1"));
  CHECK(dynamic.grants() == 1);
  CHECK(dynamic.waits() == 1);
  // The slowest at 300 (clock 3, lead 3): r = ceil((400 - 300) / 20) = 5 > room 2: still waits.
  ClockBound::Step s300 = dynamic.finished("2", 300);
  CHECK(s300.released.empty());
  // At 400 (clock 4, lead 2): r = 5 > room 3; at 500 (clock 5, lead 1 <= bound): starts.
  CHECK(dynamic.finished("2", 400).released.empty());
  CHECK(dynamic.finished("2", 500).released == Ids{"1"});

  // The fast client never ran more than bound + extraMax = 4 steps ahead at a step's start.
  ClockBound check = ClockBound::create({1, 3});
  std::vector<bool> again;
  script(check, again);
  for (int64_t t = 170; t <= 1000; t += 20) {
    if (check.waiting("1")) break;
    check.finished("1", t);
    CHECK(check.clock("1") - check.minClock() <= 5);  // lead after a finish: at most one past the start's 4
  }
}

TEST_CASE("dssp: no grant without a prediction, nor when the slowest is overdue", "[engine][staleness]") {
  ClockBound gate = ClockBound::create({0, 4});
  gate.join("1", 0);
  gate.join("2", 0);
  // The slowest has never finished a step: its interval is unknown.
  CHECK_FALSE(gate.finished("1", 10).proceed);
  CHECK(gate.grants() == 0);
  CHECK(gate.finished("2", 100).released == Ids{"1"});
  // Client 2 is now ahead (clock 2, client 1 at 1 with last finish 10 and interval 10:
  // predicted at 20, long overdue at 200): 2 waits rather than run on.
  CHECK_FALSE(gate.finished("2", 200).proceed);
  CHECK(gate.waiting("2"));
}

TEST_CASE("clock bound: a client that leaves no longer holds the others back; joiners start at the slowest",
          "[engine][staleness]") {
  ClockBound gate = ClockBound::create({1, 0});
  gate.join("1", 0);
  gate.join("2", 0);
  gate.join("3", 0);
  CHECK(gate.finished("1", 10).proceed);
  CHECK_FALSE(gate.finished("1", 20).proceed);  // lead 2
  CHECK(gate.finished("2", 30).proceed);
  CHECK_FALSE(gate.finished("2", 40).proceed);  // 2 at clock 2 too: lead 2 > 1
  CHECK(gate.activeCount() == 3);
  // Client 3 never finished; it vanishes: the minimum is now 2 and both run.
  const Ids released = gate.leave("3", 50);
  CHECK(released == Ids{"1", "2"});
  CHECK(gate.minClock() == 2);
  gate.join("4", 60);
  CHECK(gate.clock("4") == 2);
  // A returning client keeps a clock above the minimum.
  gate.finished("1", 70);
  gate.finished("1", 80);
  const uint64_t before = gate.clock("1");
  gate.leave("1", 90);
  gate.join("1", 100, before);
  CHECK(gate.clock("1") == before);
  gate.join("5", 110, 1);  // a returning client whose clock is below the minimum starts there
  CHECK(gate.clock("5") == gate.minClock());
}
