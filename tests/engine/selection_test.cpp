// Selection alone: when a round is due, uniform picks, sticky picks with their
// selection weights and the group's rotation.

#include "engine/selection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fixtures.hpp"

using namespace starling;
using namespace starling::coordinator;

namespace {

std::vector<std::string> ids(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i)
    out.push_back(fmt::format("c{}", i));
  return out;
}

Selection make(const EngineConfig& c) {
  return testing::created(Selection::create(c));
}

}  // namespace

TEST_CASE("selection: a round is due once minClients (default K) are idle", "[engine][selection]") {
  EngineConfig c;
  c.clientsPerRound = 3;
  CHECK_FALSE(make(c).due(2));
  CHECK(make(c).due(3));
  c.minClients = 5;
  CHECK_FALSE(make(c).due(4));
  CHECK(make(c).due(5));
  c.minClients = 0;
  c.clientsPerRound = 1;
  CHECK_FALSE(make(c).due(0));
}

TEST_CASE("selection: uniform picks ceil(K x over-selection) distinct idle clients, weight 1", "[engine][selection]") {
  EngineConfig c;
  c.clientsPerRound = 2;
  c.overSelection = 1.5;  // 3
  Selection a = make(c), b = make(c);
  for (uint64_t round = 1; round <= 20; ++round) {
    const auto picks = a.select(ids(7), round);
    REQUIRE(picks.size() == 3);
    std::set<std::string> distinct;
    for (const auto& p : picks) {
      distinct.insert(p.id);
      CHECK_FALSE(p.sticky);
      CHECK(p.weight == 1.0);
    }
    CHECK(distinct.size() == 3);
    // Deterministic: the same seed and inputs give the same picks.
    const auto again = b.select(ids(7), round);
    for (std::size_t i = 0; i < picks.size(); ++i)
      CHECK(again[i].id == picks[i].id);
  }
  CHECK(a.select(ids(2), 21).size() == 2);  // fewer idle than wanted: all of them
  CHECK(a.group().empty());
}

TEST_CASE("selection: sticky picks from the group and others with (n / N) / P(selected)", "[engine][selection]") {
  EngineConfig c;
  c.clientsPerRound = 2;
  c.overSelection = 1.0;  // n = 2
  c.stickyClients = 3;
  c.stickyFraction = 0.5;  // 1 of 2 from the group
  Selection s = make(c);
  // Round 1: an empty group: both from the 6 others, each weight (2/6) x 6/2 = 1.
  auto picks = s.select(ids(6), 1);
  REQUIRE(picks.size() == 2);
  for (const auto& p : picks) {
    CHECK_FALSE(p.sticky);
    CHECK(p.weight == Approx(1.0));
  }
  CHECK(s.group().size() == 2);
  // Round 2: 2 idle members, 4 others: a member weighs (2/6) x 2/1, another (2/6) x 4/1.
  const std::vector<std::string> first = s.group();
  const std::set<std::string> before(first.begin(), first.end());
  picks = s.select(ids(6), 2);
  REQUIRE(picks.size() == 2);
  CHECK(picks[0].sticky);
  CHECK(before.count(picks[0].id) == 1);
  CHECK(picks[0].weight == Approx(2.0 / 3));
  CHECK_FALSE(picks[1].sticky);
  CHECK(before.count(picks[1].id) == 0);
  CHECK(picks[1].weight == Approx(4.0 / 3));
  // The group keeps the 3 clients assigned most recently: both of round 2 and the
  // member of round 1 that was not picked again.
  const auto group = s.group();
  REQUIRE(group.size() == 3);
  std::set<std::string> expected(before.begin(), before.end());
  expected.insert(picks[1].id);
  CHECK(std::set<std::string>(group.begin(), group.end()) == expected);
  // Round 3: 3 idle members, 3 others: each weighs (2/6) x 3/1 = 1; the group stays at 3,
  // and the member assigned in round 1 only is the one that leaves when another joins.
  std::string oldest;
  for (const auto& id : before)
    if (id != picks[0].id) oldest = id;
  picks = s.select(ids(6), 3);
  for (const auto& p : picks)
    CHECK(p.weight == Approx(1.0));
  const auto after = s.group();
  CHECK(after.size() == 3);
  if (picks[0].id != oldest) {
    CHECK(std::find(after.begin(), after.end(), oldest) == after.end());
  }
}

TEST_CASE("selection: without reweighting every sticky pick weighs 1", "[engine][selection]") {
  EngineConfig c;
  c.clientsPerRound = 2;
  c.overSelection = 1.0;
  c.stickyClients = 3;
  c.stickyFraction = 0.5;
  c.stickyReweight = false;
  Selection s = make(c);
  for (uint64_t round = 1; round <= 5; ++round)
    for (const auto& p : s.select(ids(6), round))
      CHECK(p.weight == 1.0);
}

TEST_CASE("selection: the state lines restore the generator and the group", "[engine][selection]") {
  EngineConfig c;
  c.clientsPerRound = 2;
  c.overSelection = 1.0;
  c.stickyClients = 3;
  Selection s = make(c);
  (void)s.select(ids(8), 1);
  (void)s.select(ids(8), 2);
  std::ostringstream out;
  s.writeRng(out);
  out << "\n";
  s.writeGroup(out);
  Selection back = make(c);
  testing::readStateText(back, out.str());
  CHECK(back.group() == s.group());
  const auto p = s.select(ids(8), 3), q = back.select(ids(8), 3);
  REQUIRE(p.size() == q.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    CHECK(p[i].id == q[i].id);
    CHECK(p[i].weight == q[i].weight);
  }
}

TEST_CASE("selection: a sticky group smaller than a round's selection is refused", "[engine][selection]") {
  EngineConfig c;
  c.clientsPerRound = 4;
  c.overSelection = 1.5;
  c.stickyClients = 5;
  auto s = Selection::create(c);
  REQUIRE_FALSE(s.isOk());
  CHECK_THAT(s.status().message(), Catch::Contains("at least the clients selected per round (6)"));
}
