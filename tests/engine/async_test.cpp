// The RoundEngine's asynchronous modes (EngineConfig::mode async, ssp, dssp), driven by
// synthetic clients and a virtual clock: slots refilled as updates arrive, a server step
// every K updates whatever their round, staleness weights, expired assignments, the SSP
// gate and DSSP's grants; ssp with bound 0 is sync, bit for bit.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "starling/coordinator/round_engine.hpp"
#include "starling/util/checksum.hpp"

#include "fixtures.hpp"

using namespace starling;
using namespace starling::coordinator;
using starling::coordinator::testing::initialModel;
using starling::coordinator::testing::kDim;

namespace {

EngineConfig asyncConfig(const char* mode, uint32_t k) {
  EngineConfig c;
  c.mode = mode;
  c.rounds = 50;
  c.clientsPerRound = k;
  c.overSelection = 1.0;
  c.deadlineMs = 1000;
  c.tau = 10;
  c.stepBudgets = false;
  c.maxStaleness = 4;
  return c;
}

IncomingUpdate update(uint64_t round, uint64_t baseRound, float value) {
  return testing::update(round, baseRound, std::vector<float>(kDim, value));
}

using testing::only;

std::set<std::string> assigned(const std::vector<Action>& actions) {
  std::set<std::string> ids;
  for (const Assign& a : only<Assign>(actions))
    ids.insert(a.clientId);
  return ids;
}

// The round and base each client was last assigned.
struct Ledger {
  std::map<std::string, Assignment> last;
  void note(const std::vector<Action>& actions) {
    for (const Assign& a : only<Assign>(actions))
      last[a.clientId] = a.assignment;
  }
  IncomingUpdate from(const std::string& id, float value) const {
    const Assignment& a = last.at(id);
    return update(a.round, a.baseRound, value);
  }
};

}  // namespace

TEST_CASE("async: slots refill as updates arrive; a server step every K updates, weighted by staleness",
          "[engine][async]") {
  EngineConfig config = asyncConfig("async", 2);
  config.concurrency = 3;
  config.minClients = 3;
  auto engine = RoundEngine::create(config, initialModel()).value();
  Ledger ledger;
  std::vector<Action> acts;
  for (const char* id : {"a", "b", "c", "d"}) {
    acts = engine->clientJoined(id, 100, 0, 0, 0);
    ledger.note(acts);
  }
  // Three slots: three of the four are training, all on round 1 from the initial model.
  REQUIRE(ledger.last.size() == 3);
  std::string idle;
  for (const char* id : {"a", "b", "c", "d"})
    if (!ledger.last.count(id)) idle = id;
  std::vector<std::string> first;
  for (const auto& [id, a] : ledger.last) {
    CHECK(a.round == 1);
    CHECK(a.baseRound == 0);
    first.push_back(id);
  }
  // The first update frees a slot: the idle client is assigned at once, to the same round.
  acts = engine->updateArrived(first[0], ledger.from(first[0], 1.0f), 10);
  ledger.note(acts);
  CHECK(assigned(acts) == std::set<std::string>{idle});
  CHECK(only<RoundEnded>(acts).empty());
  // The second closes the step: two updates, K = 2.
  acts = engine->updateArrived(first[1], ledger.from(first[1], 1.0f), 20);
  ledger.note(acts);
  auto ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].summary.committed);
  CHECK(ended[0].summary.stragglers == 0);  // the two still training are not stragglers
  CHECK(engine->committedRound() == 1);
  // The next step's buffer opened; one slot was free (two still train on round 1).
  const std::set<std::string> next = assigned(acts);
  REQUIRE(next.size() == 1);
  const std::string fresh = *next.begin();
  CHECK(ledger.last.at(fresh).round == 2);
  CHECK(ledger.last.at(fresh).baseRound == 1);

  // A round-1 update arrives now: one version behind, it counts toward round 2's K.
  const std::string stale = first[2];
  const auto before = std::vector<float>(engine->model().begin(), engine->model().end());
  acts = engine->updateArrived(stale, ledger.from(stale, 3.0f), 30);
  ledger.note(acts);
  CHECK(only<RoundEnded>(acts).empty());
  CHECK(engine->heldUpdateRounds(stale) == std::vector<uint64_t>{1});
  acts = engine->updateArrived(fresh, ledger.from(fresh, 1.0f), 40);
  ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].summary.round == 2);
  // FedBuff's weights: 1 for the fresh update, 1/sqrt(2) for the stale one.
  const double w = 1.0 / std::sqrt(2.0);
  const double delta = (1.0 + 3.0 * w) / (1.0 + w);
  CHECK(engine->model()[7] == Approx(before[7] - delta).epsilon(1e-5));
  bool late = false;
  for (const auto& p : ended[0].summary.participants)
    if (p.clientId == stale) late = p.outcome == ParticipantOutcome::kLateApplied && p.staleness == 1 && p.round == 1;
  CHECK(late);
  // Both verdicts follow the RoundEnded, accepted.
  for (const Verdict& v : only<Verdict>(acts))
    CHECK(v.verdict.accepted);
}

TEST_CASE("async: the staleness weight is configurable; too stale updates are discarded with the reason",
          "[engine][async]") {
  EngineConfig config = asyncConfig("async", 1);
  config.concurrency = 2;
  config.minClients = 2;
  config.maxStaleness = 1;
  config.stalenessWeight = "constant";
  auto engine = RoundEngine::create(config, initialModel()).value();
  Ledger ledger;
  ledger.note(engine->clientJoined("slow", 100, 0, 0, 0));
  ledger.note(engine->clientJoined("fast", 100, 0, 0, 0));
  REQUIRE(ledger.last.size() == 2);
  // K = 1: every update is a server step. The fast client returns three times.
  for (int i = 0; i < 3; ++i) {
    auto acts = engine->updateArrived("fast", ledger.from("fast", 1.0f), 10 * (i + 1));
    ledger.note(acts);
    REQUIRE(only<RoundEnded>(acts).size() == 1);
  }
  CHECK(engine->committedRound() == 3);
  // The slow client's round-1 update is 3 versions behind its base: more than 1.
  auto acts = engine->updateArrived("slow", ledger.from("slow", 5.0f), 100);
  auto verdicts = only<Verdict>(acts);
  REQUIRE(verdicts.size() == 1);
  CHECK_FALSE(verdicts[0].verdict.accepted);
  CHECK(verdicts[0].verdict.reason == "3 rounds stale, more than the bound of 1");
  // It is given the current model at once.
  CHECK(assigned(acts) == std::set<std::string>{"slow"});
  CHECK(ledger.last.count("slow"));

  // constant: a one-version-stale update weighs as much as a fresh one.
  EngineConfig flat = asyncConfig("async", 2);
  flat.concurrency = 3;
  flat.minClients = 3;
  flat.stalenessWeight = "constant";
  auto e2 = RoundEngine::create(flat, initialModel()).value();
  Ledger l2;
  for (const char* id : {"a", "b", "c"})
    l2.note(e2->clientJoined(id, 100, 0, 0, 0));
  e2->updateArrived("a", l2.from("a", 1.0f), 10);
  l2.note(e2->updateArrived("b", l2.from("b", 1.0f), 20));  // step 1; a or b reassigned
  const auto before = std::vector<float>(e2->model().begin(), e2->model().end());
  e2->updateArrived("c", l2.from("c", 3.0f), 30);  // stale 1
  std::string fresh = l2.last.at("a").round == 2 ? "a" : "b";
  e2->updateArrived(fresh, l2.from(fresh, 1.0f), 40);
  CHECK(e2->model()[3] == Approx(before[3] - 2.0).epsilon(1e-5));  // (1 + 3) / 2
}

TEST_CASE("async: an assignment unanswered by its deadline frees its slot and is recorded as a straggler",
          "[engine][async]") {
  EngineConfig config = asyncConfig("async", 2);
  config.concurrency = 2;
  config.minClients = 2;
  auto engine = RoundEngine::create(config, initialModel()).value();
  Ledger ledger;
  std::vector<Action> acts;
  for (const char* id : {"a", "b", "c"}) {
    acts = engine->clientJoined(id, 100, 0, 0, 0);
    ledger.note(acts);
  }
  REQUIRE(ledger.last.size() == 2);
  auto wakes = only<WakeAt>(acts);
  CHECK(!wakes.empty());
  std::string waiting = ledger.last.count("a") ? (ledger.last.count("b") ? "c" : "b") : "a";
  // Nobody answers: at the deadline both slots free and the third client is assigned.
  acts = engine->tick(1000);
  ledger.note(acts);
  CHECK(assigned(acts) == std::set<std::string>{waiting});
  // The two that expired are still training (busy): their updates still count later.
  std::vector<std::string> expired;
  for (const char* id : {"a", "b", "c"})
    if (id != waiting) expired.push_back(id);
  engine->updateArrived(expired[0], ledger.from(expired[0], 1.0f), 1100);
  acts = engine->updateArrived(expired[1], ledger.from(expired[1], 1.0f), 1200);
  auto ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].summary.committed);
  CHECK(ended[0].summary.stragglers == 2);
  int stragglers = 0;
  for (const auto& p : ended[0].summary.participants)
    if (p.outcome == ParticipantOutcome::kStraggler) {
      ++stragglers;
      CHECK(p.reason == "no update within 1000 ms");
    }
  CHECK(stragglers == 2);
}

TEST_CASE("ssp with bound 0 is sync: the same models, bit for bit", "[engine][ssp]") {
  // Four clients, K = 4: every client trains every round. Each update is a function of
  // the client and its round, so both engines see the same updates.
  auto value = [](const std::string& id, uint64_t round) {
    return 0.01f * static_cast<float>(id[0] - 'a' + 1) + 0.001f * static_cast<float>(round);
  };
  auto run = [&](EngineConfig config) {
    config.rounds = 6;
    auto engine = RoundEngine::create(config, initialModel()).value();
    Ledger ledger;
    std::vector<uint64_t> checksums;
    for (const char* id : {"a", "b", "c", "d"})
      ledger.note(engine->clientJoined(id, 100, 0, 0, 0));
    int64_t now = 0;
    for (int pass = 0; pass < 100 && !engine->finished(); ++pass) {
      // Every assigned client returns, in a fixed order (d first: the order of arrival differs from the ids').
      std::vector<std::string> order = {"d", "b", "a", "c"};
      for (const std::string& id : order) {
        if (!ledger.last.count(id)) continue;
        const Assignment a = ledger.last.at(id);
        ledger.last.erase(id);
        now += 10;
        auto acts = engine->updateArrived(id, update(a.round, a.baseRound, value(id, a.round)), now);
        ledger.note(acts);
        for (const RoundEnded& e : only<RoundEnded>(acts))
          checksums.push_back(e.summary.modelChecksum);
      }
    }
    return checksums;
  };
  EngineConfig sync = asyncConfig("sync", 4);
  EngineConfig ssp = asyncConfig("ssp", 4);
  ssp.stalenessBound = 0;
  const std::vector<uint64_t> a = run(sync);
  const std::vector<uint64_t> b = run(ssp);
  REQUIRE(a.size() == 6);
  CHECK(a == b);
  // With a looser bound and a server step every 2 updates, clients run ahead: other models.
  EngineConfig loose = asyncConfig("ssp", 4);
  loose.stalenessBound = 3;
  loose.bufferSize = 2;
  const std::vector<uint64_t> c = run(loose);
  CHECK(c != a);
}

TEST_CASE("dssp grants a fast client the steps that remove its wait; ssp holds it back", "[engine][dssp]") {
  auto script = [](EngineConfig config) {
    config.clientsPerRound = 1;  // every update is a server step
    config.stalenessBound = 0;
    config.stalenessMax = 4;
    config.maxStaleness = 10;
    auto engine = RoundEngine::create(config, initialModel()).value();
    Ledger ledger;
    ledger.note(engine->clientJoined("fast", 100, 0, 0, 0));
    ledger.note(engine->clientJoined("slow", 100, 0, 0, 0));
    // The fast client finishes at 20 and must wait: the slow one's pace is not known yet.
    auto acts = engine->updateArrived("fast", ledger.from("fast", 0.1f), 20);
    ledger.note(acts);
    CHECK(assigned(acts).empty());
    // The slow one finishes at 100 (interval 100): both train again.
    acts = engine->updateArrived("slow", ledger.from("slow", 0.1f), 100);
    ledger.note(acts);
    CHECK(assigned(acts) == std::set<std::string>{"fast", "slow"});
    // The fast one finishes at 120 (interval 20), one ahead; the slow one is due at 200:
    // r = ceil(80 / 20) = 4 extra steps <= 4 remove its wait under dssp.
    acts = engine->updateArrived("fast", ledger.from("fast", 0.1f), 120);
    return assigned(acts);
  };
  CHECK(script(asyncConfig("dssp", 1)) == std::set<std::string>{"fast"});
  CHECK(script(asyncConfig("ssp", 1)).empty());
}

TEST_CASE("asynchronous settings are checked", "[engine][async]") {
  EngineConfig bad = asyncConfig("fedbuff", 2);
  auto e = RoundEngine::create(bad, initialModel());
  REQUIRE_FALSE(e.isOk());
  CHECK(e.status().message() == "unknown mode 'fedbuff' (sync, async, ssp or dssp)");
  EngineConfig weight = asyncConfig("async", 2);
  weight.stalenessWeight = "sqrt";
  auto w = RoundEngine::create(weight, initialModel());
  REQUIRE_FALSE(w.isOk());
  CHECK(w.status().message().find("staleness weight 'sqrt'") != std::string::npos);
  EngineConfig range = asyncConfig("dssp", 2);
  range.stalenessBound = 3;
  range.stalenessMax = 2;
  auto r = RoundEngine::create(range, initialModel());
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().message() == "staleness-max (2) is below staleness-bound (3)");
}
