// The coordinator's RoundEngine, driven by synthetic clients and a virtual clock.

#include "starling/coordinator/round_engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "starling/compression/compressor.hpp"
#include "starling/compression/precision.hpp"
#include "starling/compression/topk.hpp"
#include "starling/util/checksum.hpp"

#include "engine/pace.hpp"
#include "fixtures.hpp"

using namespace starling;
using namespace starling::coordinator;
using starling::coordinator::testing::dense;
using starling::coordinator::testing::filled;
using starling::coordinator::testing::initialModel;
using starling::coordinator::testing::kDim;
using starling::coordinator::testing::only;
using starling::coordinator::testing::update;

namespace {

EngineConfig smallConfig(uint32_t k) {
  EngineConfig c;
  c.rounds = 5;
  c.clientsPerRound = k;
  c.overSelection = 1.0;
  c.deadlineMs = 1000;
  c.tau = 10;
  c.stepBudgets = false;
  return c;
}

// A client's copy of the global model, kept up to date the way starling-client does.
struct ClientModel {
  std::vector<float> model;
  uint64_t round = 0;
  uint32_t mantissaBits = 23;  // the task's model precision: a broadcast's changes are rounded to it
  // The last replay's last indices: a replay's first relative tensor is coded against them.
  std::optional<std::vector<uint32_t>> lastIndices;
  // Applies an assignment's catch-up and reports whether the checksum matches.
  bool apply(const Assignment& a) {
    if (a.denseModel || a.values) lastIndices.reset();
    if (a.denseModel) model = *a.denseModel;
    if (a.values) {
      compression::Compressed v;
      REQUIRE(compression::decode(*a.values, static_cast<uint32_t>(model.size()), v).isOk());
      REQUIRE(compression::overwrite(v, model).isOk());
    }
    if (!a.broadcasts.empty()) {
      std::optional<std::vector<uint32_t>> previous = std::move(lastIndices);
      lastIndices.reset();
      for (const auto& b : a.broadcasts) {
        compression::Compressed q;
        const auto d = static_cast<uint32_t>(model.size());
        const Status st = previous ? compression::decode(*b, d, *previous, q) : compression::decode(*b, d, q);
        INFO(st.toString());
        REQUIRE(st.isOk());
        REQUIRE(compression::addScaled(q, -1.0f, model).isOk());
        REQUIRE(compression::roundChanged(q, mantissaBits, model).isOk());
        previous.reset();
        if (q.encoding == compression::Encoding::kTopK) previous = q.indices;
      }
      lastIndices = std::move(previous);
    }
    round = a.baseRound;
    return checksum64(model) == a.baseChecksum;
  }
};

}  // namespace

TEST_CASE("a round aggregates updates weighted by examples and commits", "[engine]") {
  auto engine = RoundEngine::create(smallConfig(3), initialModel()).value();
  std::vector<Action> acts;
  // The weights are the clients' numbers of examples (Hello), as FedAvg's n_k.
  for (const auto& [id, n] : {std::pair<const char*, uint64_t>{"a", 100}, {"b", 100}, {"c", 200}})
    acts = engine->clientJoined(id, n, 0, 0, 0);
  auto assigns = only<Assign>(acts);
  REQUIRE(assigns.size() == 3);
  CHECK(assigns[0].assignment.round == 1);
  CHECK(assigns[0].assignment.tau == 10);
  REQUIRE(only<WakeAt>(acts).size() == 1);

  engine->updateArrived("a", update(1, 0, filled(1.0f), 100), 10);
  engine->updateArrived("b", update(1, 0, filled(2.0f), 100), 20);
  acts = engine->updateArrived("c", update(1, 0, filled(4.0f), 200), 30);

  auto verdicts = only<Verdict>(acts);
  REQUIRE(verdicts.size() == 3);
  for (const auto& v : verdicts)
    CHECK(v.verdict.accepted);
  auto ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].summary.committed);
  CHECK(ended[0].summary.accepted == 3);
  // Delta = (100*1 + 100*2 + 200*4) / 400 = 2.75; identity downlink: x <- x - Delta.
  auto expected = initialModel();
  for (auto& x : expected)
    x -= 2.75f;
  for (std::size_t i = 0; i < kDim; ++i)
    CHECK(engine->model()[i] == Approx(expected[i]).margin(1e-6));
  CHECK(engine->committedRound() == 1);
  CHECK(engine->lastAcceptedRound("b") == 1);
  // The next round starts at once with the same clients.
  CHECK(only<Assign>(acts).size() == 3);
}

TEST_CASE("a verdict follows the RoundEnded action of the round that applied the update", "[engine][verdicts]") {
  // The shell persists the round when it carries out RoundEnded: an "accepted" verdict,
  // on which a client forgets what it sent, must not leave before that.
  auto config = smallConfig(2);
  config.overSelection = 1.5;
  config.minClients = 3;
  auto engine = RoundEngine::create(config, initialModel()).value();
  std::vector<Action> acts;
  for (const char* id : {"a", "b", "c"})
    acts = engine->clientJoined(id, 100, 0, 0, 0);
  REQUIRE(only<Assign>(acts).size() == 3);
  CHECK(only<Verdict>(engine->updateArrived("a", update(1, 0, filled(1.0f)), 10)).empty());
  CHECK(engine->heldUpdateRounds("a") == std::vector<uint64_t>{1});
  acts = engine->updateArrived("b", update(1, 0, filled(1.0f)), 20);
  // The index of the round's RoundEnded, of the verdict to `id` (acts.size() when none).
  const auto ending = [&] {
    for (std::size_t i = 0; i < acts.size(); ++i)
      if (std::holds_alternative<RoundEnded>(acts[i])) return i;
    return acts.size();
  };
  const auto verdictTo = [&](const std::string& id) {
    for (std::size_t i = 0; i < acts.size(); ++i)
      if (const auto* v = std::get_if<Verdict>(&acts[i]); v != nullptr && v->clientId == id) return i;
    return acts.size();
  };
  const std::size_t ended = ending();
  REQUIRE(ended < acts.size());
  CHECK(verdictTo("a") > ended);
  CHECK(verdictTo("b") > ended);
  CHECK(verdictTo("a") < acts.size());
  CHECK(verdictTo("b") < acts.size());
  // Round 2 waits for c, still on round 1. c's late update is held, not answered, and c
  // trains round 2 with that update still pending.
  CHECK(only<Assign>(acts).empty());
  acts = engine->updateArrived("c", update(1, 0, filled(1.0f)), 30);
  CHECK(only<Verdict>(acts).empty());
  CHECK(only<Assign>(acts).size() == 3);
  CHECK(engine->heldUpdateRounds("c") == std::vector<uint64_t>{1});
  engine->updateArrived("a", update(2, 1, filled(1.0f)), 40);
  acts = engine->updateArrived("b", update(2, 1, filled(1.0f)), 50);
  CHECK(verdictTo("c") > ending());
  CHECK(verdictTo("c") < acts.size());
  CHECK(engine->acceptedRounds("a") == std::vector<uint64_t>{1, 2});
  CHECK(engine->acceptedRounds("c") == std::vector<uint64_t>{1});
  // The accepted rounds survive a checkpoint.
  auto resumed = RoundEngine::resume(config, engine->snapshot()).value();
  CHECK(resumed->acceptedRounds("a") == std::vector<uint64_t>{1, 2});
  CHECK(resumed->acceptedRounds("c") == std::vector<uint64_t>{1});
  CHECK(resumed->lastAcceptedRound("a") == 2);
}

TEST_CASE("over-selected stragglers are recorded and their late updates applied with a staleness weight",
          "[engine][stragglers]") {
  auto config = smallConfig(2);
  config.overSelection = 1.5;  // 3 of 2
  config.minClients = 3;
  config.maxStaleness = 1;
  auto engine = RoundEngine::create(config, initialModel()).value();
  std::vector<Action> acts;
  for (const char* id : {"a", "b", "c"})
    acts = engine->clientJoined(id, 100, 0, 0, 0);
  REQUIRE(only<Assign>(acts).size() == 3);
  engine->updateArrived("a", update(1, 0, filled(1.0f)), 10);
  acts = engine->updateArrived("b", update(1, 0, filled(1.0f)), 20);
  auto ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].summary.stragglers == 1);
  bool recorded = false;
  for (const auto& p : ended[0].summary.participants)
    if (p.clientId == "c" && p.outcome == ParticipantOutcome::kStraggler) {
      recorded = true;
      CHECK(p.reason == "the round closed with the first 2 updates");  // not its deadline
    }
  CHECK(recorded);
  // Round 2 waits for 3 idle clients: c is still busy with round 1.
  CHECK(only<Assign>(acts).empty());

  // c's round-1 update arrives: one version stale, held for round 2 (no verdict yet: it
  // comes with the round that applies it), which now starts with all three.
  acts = engine->updateArrived("c", update(1, 0, filled(3.0f)), 30);
  CHECK(only<Verdict>(acts).empty());
  CHECK(only<Assign>(acts).size() == 3);
  CHECK(engine->heldUpdateRounds("c") == std::vector<uint64_t>{1});
  CHECK(engine->acceptedRounds("c").empty());
  auto before = std::vector<float>(engine->model().begin(), engine->model().end());
  engine->updateArrived("a", update(2, 1, filled(1.0f)), 40);
  acts = engine->updateArrived("b", update(2, 1, filled(1.0f)), 50);
  auto verdicts = only<Verdict>(acts);
  REQUIRE(verdicts.size() == 3);
  for (const auto& v : verdicts)
    CHECK(v.verdict.accepted);
  CHECK(verdicts[2].clientId == "c");
  CHECK(verdicts[2].verdict.round == 1);
  CHECK(engine->heldUpdateRounds("c").empty());
  CHECK(engine->acceptedRounds("c") == std::vector<uint64_t>{1});
  ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  bool late = false;
  for (const auto& p : ended[0].summary.participants)
    if (p.clientId == "c" && p.outcome == ParticipantOutcome::kLateApplied && p.staleness == 1) late = true;
  CHECK(late);
  // Weights 100, 100, 100/sqrt(2): Delta = (1 + 1 + 3/sqrt2) / (2 + 1/sqrt2).
  const double w = 1.0 / std::sqrt(2.0);
  const double delta = (2.0 + 3.0 * w) / (2.0 + w);
  CHECK(engine->model()[5] == Approx(before[5] - delta).epsilon(1e-5));
}

TEST_CASE("a round below its minimum goal at the deadline is abandoned and its updates rolled back",
          "[engine][deadline]") {
  auto config = smallConfig(4);
  config.minGoal = 3;
  config.minClients = 4;
  auto engine = RoundEngine::create(config, initialModel()).value();
  std::vector<Action> acts;
  for (const char* id : {"a", "b", "c", "d"})
    acts = engine->clientJoined(id, 100, 0, 0, 0);
  const int64_t deadline = only<WakeAt>(acts).at(0).atMs;
  engine->updateArrived("a", update(1, 0, filled(1.0f)), 10);
  engine->updateArrived("b", update(1, 0, filled(1.0f)), 20);
  CHECK(only<RoundEnded>(engine->tick(deadline - 1)).empty());
  acts = engine->tick(deadline);
  auto ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  CHECK_FALSE(ended[0].summary.committed);
  CHECK_THAT(ended[0].summary.reason, Catch::Contains("only 2 of at least 3 updates by the deadline"));
  auto verdicts = only<Verdict>(acts);
  REQUIRE(verdicts.size() == 2);
  for (const auto& v : verdicts)
    CHECK_FALSE(v.verdict.accepted);
  CHECK(engine->committedRound() == 0);
  CHECK(std::vector<float>(engine->model().begin(), engine->model().end()) == initialModel());
}

TEST_CASE("bad updates are rejected with a reason and the round goes on", "[engine][rejection]") {
  auto config = smallConfig(3);
  config.overSelection = 2.0;  // 6 assigned, 3 needed
  config.minClients = 6;
  auto engine = RoundEngine::create(config, initialModel()).value();
  std::vector<Action> acts;
  for (const char* id : {"a", "b", "c", "d", "e", "f"})
    acts = engine->clientJoined(id, 100, 0, 0, 0);
  REQUIRE(only<Assign>(acts).size() == 6);

  SECTION("NaN, wrong size, a round that is not open") {
    auto nan = filled(1.0f);
    nan[3] = std::nanf("");
    acts = engine->updateArrived("a", update(1, 0, nan), 5);
    REQUIRE(only<Verdict>(acts).size() == 1);
    CHECK_FALSE(only<Verdict>(acts)[0].verdict.accepted);
    CHECK_THAT(only<Verdict>(acts)[0].verdict.reason, Catch::Contains("NaN"));

    acts = engine->updateArrived("b", update(1, 0, std::vector<float>(kDim + 1, 1.0f)), 6);
    CHECK_THAT(only<Verdict>(acts).at(0).verdict.reason, Catch::Contains("has 65 elements, the model has 64"));

    acts = engine->updateArrived("c", update(7, 0, filled(1.0f)), 7);
    CHECK_THAT(only<Verdict>(acts).at(0).verdict.reason, Catch::Contains("not assigned"));

    engine->updateArrived("d", update(1, 0, filled(1.0f)), 8);
    engine->updateArrived("e", update(1, 0, filled(1.0f)), 9);
    acts = engine->updateArrived("f", update(1, 0, filled(1.0f)), 10);
    auto ended = only<RoundEnded>(acts);
    REQUIRE(ended.size() == 1);
    CHECK(ended[0].summary.committed);
    int rejected = 0;
    for (const auto& p : ended[0].summary.participants)
      rejected += p.outcome == ParticipantOutcome::kRejected;
    CHECK(rejected == 3);
  }
  SECTION("a norm far above the round's median") {
    engine->updateArrived("a", update(1, 0, filled(1.0f)), 8);
    engine->updateArrived("b", update(1, 0, filled(1.1f)), 9);
    acts = engine->updateArrived("c", update(1, 0, filled(1000.0f)), 10);
    auto verdicts = only<Verdict>(acts);
    REQUIRE(verdicts.size() == 3);
    for (const auto& v : verdicts) {
      if (v.clientId == "c") {
        CHECK_FALSE(v.verdict.accepted);
        CHECK_THAT(v.verdict.reason, Catch::Contains("median"));
      } else {
        CHECK(v.verdict.accepted);
      }
    }
    CHECK(engine->model()[0] == Approx(initialModel()[0] - 1.05f));
  }
}

TEST_CASE("clients catch up from the broadcast log or a dense copy, proven by checksum", "[engine][catchup]") {
  auto config = smallConfig(2);
  config.rounds = 10;
  config.overSelection = 1.5;
  config.minGoal = 1;
  config.downlink = "topk";
  // Sparse enough that the broadcasts a returning client needs are fewer bytes than
  // the dense model (the engine drops log entries beyond that).
  config.downlinkDensity = 0.1;
  auto engine = RoundEngine::create(config, initialModel()).value();
  std::map<std::string, ClientModel> models;
  int64_t now = 0;
  // Each assigned client applies its catch-up (checking the checksum) and answers.
  auto play = [&](std::vector<Action> acts, const std::set<std::string>& silent = {}) {
    std::vector<Action> all;
    for (const auto& a : only<Assign>(acts)) {
      if (silent.count(a.clientId)) continue;
      REQUIRE(models[a.clientId].apply(a.assignment));
      std::vector<float> delta(kDim);
      for (std::size_t i = 0; i < kDim; ++i)
        delta[i] = std::sin(float(i * a.assignment.round)) + 0.1f;
      for (auto& x :
           engine->updateArrived(a.clientId, update(a.assignment.round, a.assignment.baseRound, delta), ++now))
        all.push_back(x);
    }
    return all;
  };
  for (const char* id : {"a", "b"})
    models[id].model = initialModel();
  engine->clientJoined("a", 100, 0, checksum64(initialModel()), 0);
  auto acts = engine->clientJoined("b", 100, 0, checksum64(initialModel()), 0);
  for (int r = 0; r < 2; ++r) {
    for (const auto& a : only<Assign>(acts))
      CHECK(a.assignment.denseModel == nullptr);
    acts = play(acts);
  }
  // Round 3: "a" vanishes before applying its assignment, still holding round 2's model.
  const ClientModel aHeld = models["a"];
  engine->clientLeft("a", "connection lost", ++now);
  acts = play(acts, {"a"});
  REQUIRE(engine->committedRound() == 3);
  // "c" arrives holding nothing: it builds the round-0 model (clientsInitialize) and
  // is caught up from there with "b" in round 4, without the dense model.
  models["c"].model = initialModel();
  acts = engine->clientJoined("c", 100, 0, 0, ++now);
  bool sawC = false;
  for (const auto& a : only<Assign>(acts)) {
    if (a.clientId != "c") continue;
    sawC = true;
    CHECK(a.assignment.denseModel == nullptr);
    CHECK((a.assignment.values != nullptr || !a.assignment.broadcasts.empty()));
  }
  CHECK(sawC);
  acts = play(acts);
  // "a" comes back holding round 2: the log (or, when fewer bytes, the values of the
  // coordinates rounds 3 and 4 changed) brings it forward.
  models["a"] = aHeld;
  engine->clientJoined("a", 100, aHeld.round, checksum64(aHeld.model), ++now);
  acts = play(acts);
  bool sawA = false;
  for (const auto& a : only<Assign>(acts)) {
    if (a.clientId != "a") continue;
    sawA = true;
    CHECK(a.assignment.denseModel == nullptr);
    CHECK((a.assignment.broadcasts.size() >= 2 || a.assignment.values != nullptr));
  }
  // (play() already required every client's checksum to match.)
  if (!sawA) {
    acts = play(acts);
    for (const auto& a : only<Assign>(acts))
      sawA |= a.clientId == "a";
  }
  CHECK(sawA);
  CHECK(checksum64(models["c"].model) != 0);
}

TEST_CASE("server-side error feedback loses nothing: model + memory follows the exact aggregates",
          "[engine][error-feedback]") {
  auto config = smallConfig(1);
  config.rounds = 6;
  config.downlink = "topk";
  config.downlinkDensity = 0.1;
  auto engine = RoundEngine::create(config, initialModel()).value();
  auto exact = initialModel();
  auto acts = engine->clientJoined("a", 100, 0, 0, 0);
  for (int r = 1; r <= 6; ++r) {
    auto a = only<Assign>(acts).at(0).assignment;
    std::vector<float> delta(kDim);
    for (std::size_t i = 0; i < kDim; ++i)
      delta[i] = std::cos(float(i + 3 * r)) * 0.5f;
    for (std::size_t i = 0; i < kDim; ++i)
      exact[i] -= delta[i];
    acts = engine->updateArrived("a", update(a.round, a.baseRound, delta), r);
  }
  auto snap = engine->snapshot();
  for (std::size_t i = 0; i < kDim; ++i)
    CHECK(snap.model[i] - snap.serverMemory[i] == Approx(exact[i]).margin(1e-4));
}

TEST_CASE("ADACOMM lowers tau as the loss falls, and slow clients get step budgets", "[engine][adacomm]") {
  auto config = smallConfig(1);
  config.rounds = 8;
  config.tau = 16;
  config.adaptiveTau = true;
  config.lossSmoothing = 0.0;
  config.tauMin = 2;
  auto engine = RoundEngine::create(config, initialModel()).value();
  auto acts = engine->clientJoined("a", 100, 0, 0, 0);
  const float losses[] = {2.0f, 2.0f, 1.0f, 0.5f};
  for (float loss : losses) {
    auto a = only<Assign>(acts).at(0).assignment;
    acts = engine->updateArrived("a", update(a.round, a.baseRound, filled(0.01f), 100, a.tau, loss), 10);
  }
  // F/F0 = 0.5/2: tau = ceil(sqrt(0.25) * 16) = 8.
  CHECK(engine->currentTau() == 8);

  SECTION("a client that cannot do tau steps within the deadline gets fewer") {
    auto budget = smallConfig(1);
    budget.stepBudgets = true;
    budget.tau = 100;
    budget.deadlineMs = 1000;
    budget.budgetFraction = 0.5;
    auto e2 = RoundEngine::create(budget, initialModel()).value();
    auto first = only<Assign>(e2->clientJoined("slow", 100, 0, 0, 0)).at(0).assignment;
    CHECK(first.tau == 100);
    auto u = update(1, 0, filled(0.01f), 100, 100);
    u.durationMs = 5000;  // 0.02 steps per ms: 10 steps fit in half the deadline
    auto next = only<Assign>(e2->updateArrived("slow", u, 5000)).at(0).assignment;
    CHECK(next.tau == 10);
  }
  // Clients fast, mid and slow at 1, 0.5 and 0.25 steps per ms, budgets at the median
  // (which needs 200 ms for tau 100): the taus of the next round's assignments.
  auto quantileBudgets = [](double factor) {
    auto budget = smallConfig(3);
    budget.stepBudgets = true;
    budget.tau = 100;
    budget.deadlineMs = 1'000'000;  // the deadline does not bind
    budget.budgetQuantile = 0.5;
    budget.budgetTauFactor = factor;
    auto e2 = RoundEngine::create(budget, initialModel()).value();
    e2->clientJoined("fast", 100, 0, 0, 0);
    e2->clientJoined("mid", 100, 0, 0, 0);
    auto acts = e2->clientJoined("slow", 100, 0, 0, 0);
    for (const auto& a : only<Assign>(acts))
      CHECK(a.assignment.tau == 100);  // no speed measured yet: tau, not factor x tau
    auto u = [](uint32_t ms) {
      auto x = update(1, 0, filled(0.01f), 100, 100);
      x.durationMs = ms;
      return x;
    };
    e2->updateArrived("fast", u(100), 100);
    e2->updateArrived("mid", u(200), 200);
    acts = e2->updateArrived("slow", u(400), 400);
    std::map<std::string, uint32_t> tau;
    for (const auto& a : only<Assign>(acts))
      tau[a.clientId] = a.assignment.tau;
    return tau;
  };
  SECTION("with a budget quantile, slower clients get the time the quantile's client needs for tau") {
    auto tau = quantileBudgets(1.0);
    CHECK(tau["fast"] == 100);
    CHECK(tau["mid"] == 100);
    CHECK(tau["slow"] == 50);
  }
  SECTION("with a budget tau factor, faster clients use the quantile's time for more steps, up to factor x tau") {
    for (const double factor : {1.5, 3.0}) {
      auto tau = quantileBudgets(factor);
      CHECK(tau["fast"] == (factor == 1.5 ? 150u : 200u));  // 200 steps fit in 200 ms, at most factor x tau
      CHECK(tau["mid"] == 100);
      CHECK(tau["slow"] == 50);
    }
  }
}

TEST_CASE("dynamic batch sizes: each client's minibatch follows its speed, the steps stay", "[engine][dbs]") {
  // Clients at 0.4, 0.1 and 0.1 steps per ms with the task's batch (scale 1): mean 0.2,
  // so the next round scales their batches by 2, 0.5 and 0.5 and keeps tau for all.
  auto config = smallConfig(3);
  config.dynamicBatch = true;
  config.tau = 40;
  config.deadlineMs = 1'000'000;
  auto engine = RoundEngine::create(config, initialModel()).value();
  engine->clientJoined("fast", 100, 0, 0, 0);
  engine->clientJoined("slow1", 100, 0, 0, 0);
  auto acts = engine->clientJoined("slow2", 100, 0, 0, 0);
  for (const auto& a : only<Assign>(acts))
    CHECK(a.assignment.batchScale == 1.0f);  // nothing measured yet
  auto timed = [](uint64_t round, uint32_t steps, uint32_t ms, uint64_t examples) {
    auto u = update(round, round - 1, std::vector<float>(kDim, 0.01f), examples, steps);
    u.durationMs = ms;
    return u;
  };
  engine->updateArrived("fast", timed(1, 40, 100, 40 * 32), 100);
  engine->updateArrived("slow1", timed(1, 40, 400, 40 * 32), 400);
  acts = engine->updateArrived("slow2", timed(1, 40, 400, 40 * 32), 400);
  std::map<std::string, Assignment> next;
  for (const auto& a : only<Assign>(acts))
    next[a.clientId] = a.assignment;
  REQUIRE(next.size() == 3);
  CHECK(next["fast"].batchScale == Approx(2.0f));
  CHECK(next["slow1"].batchScale == Approx(0.5f));
  CHECK(next["slow2"].batchScale == Approx(0.5f));
  for (auto& [id, a] : next)
    CHECK(a.tau == 40);

  // Round 2 at those scales takes each client 200 ms: the speeds at scale 1 are unchanged
  // (0.2 steps per ms at scale 2 is 0.4 at scale 1), so the scales stay.
  engine->updateArrived("fast", timed(2, 40, 200, 40 * 64), 200);
  engine->updateArrived("slow1", timed(2, 40, 200, 40 * 16), 200);
  acts = engine->updateArrived("slow2", timed(2, 40, 200, 40 * 16), 200);
  for (const auto& a : only<Assign>(acts))
    CHECK(a.assignment.batchScale == Approx(a.clientId == "fast" ? 2.0f : 0.5f));

  SECTION("the scale stays within [1/32, 8]") {
    Pace pace = Pace::create(config).value();
    CHECK(pace.batchScale(100, 1) == 8);
    CHECK(pace.batchScale(1, 100) == Approx(1.0 / 32));
    CHECK(pace.batchScale(0, 1) == 1);  // unknown speed
    const std::vector<double> speeds{0.1, 0.4, 0.2};
    CHECK(pace.referenceSpeed(speeds) == Approx(0.7 / 3));  // the mean
    config.budgetQuantile = 0.5;
    CHECK(Pace::create(config).value().referenceSpeed(speeds) == 0.2);  // the median
    config.budgetQuantile = 0;
    config.dynamicBatch = false;
    CHECK(Pace::create(config).value().batchScale(100, 1) == 1);
  }
}

TEST_CASE("each participant records how long it waited before its assignment", "[engine][wait]") {
  // fast returns at 100 ms, slow at 400: round 2 opens at 400, so fast waited 300 ms
  // and slow none; a client that joins later waits from its join.
  auto config = smallConfig(2);
  auto engine = RoundEngine::create(config, initialModel()).value();
  engine->clientJoined("fast", 100, 0, 0, 0);
  engine->clientJoined("slow", 100, 0, 0, 0);
  engine->updateArrived("fast", update(1, 0, std::vector<float>(kDim, 0.01f)), 100);
  engine->updateArrived("slow", update(1, 0, std::vector<float>(kDim, 0.01f)), 400);
  engine->updateArrived("fast", update(2, 1, std::vector<float>(kDim, 0.01f)), 450);
  auto acts = engine->updateArrived("slow", update(2, 1, std::vector<float>(kDim, 0.01f)), 500);
  const auto ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  REQUIRE(ended[0].summary.round == 2);
  std::map<std::string, int64_t> wait;
  for (const ParticipantResult& p : ended[0].summary.participants)
    wait[p.clientId] = p.waitMs;
  CHECK(wait == std::map<std::string, int64_t>{{"fast", 300}, {"slow", 0}});
}

TEST_CASE("a resumed engine continues exactly where the snapshot was taken", "[engine][resume]") {
  auto config = smallConfig(2);
  config.downlink = "topk";
  config.downlinkDensity = 0.2;
  config.adaptiveTau = true;
  auto run = [&](RoundEngine& e, std::vector<Action> acts, int rounds) {
    for (int r = 0; r < rounds; ++r) {
      auto assigns = only<Assign>(acts);
      for (const auto& a : assigns) {
        std::vector<float> delta(kDim);
        for (std::size_t i = 0; i < kDim; ++i)
          delta[i] = std::sin(float(i) + float(a.assignment.round));
        acts = e.updateArrived(
            a.clientId,
            update(a.assignment.round, a.assignment.baseRound, delta, 100, 10, 3.0f / float(a.assignment.round)),
            100 * int64_t(a.assignment.round));
      }
    }
    return acts;
  };
  auto original = RoundEngine::create(config, initialModel()).value();
  original->clientJoined("a", 100, 0, 0, 0);
  auto acts = original->clientJoined("b", 100, 0, 0, 0);
  run(*original, acts, 2);
  auto snap = original->snapshot();

  auto resumed = RoundEngine::resume(config, snap).value();
  CHECK(resumed->committedRound() == original->committedRound());
  CHECK(resumed->modelChecksum() == original->modelChecksum());
  CHECK(resumed->currentTau() == original->currentTau());
  CHECK(resumed->lastAcceptedRound("a") == original->lastAcceptedRound("a"));
  // Both continue with the same events: same models after two more rounds.
  auto reference = RoundEngine::resume(config, snap).value();
  for (auto* e : {resumed.get(), reference.get()}) {
    e->clientJoined("a", 100, snap.round, checksum64(snap.model), 1000);
    run(*e, e->clientJoined("b", 100, snap.round, checksum64(snap.model), 1000), 2);
  }
  CHECK(resumed->commits() == 4);
  CHECK(resumed->committedRound() > snap.round);
  CHECK(resumed->modelChecksum() == reference->modelChecksum());

  SECTION("a corrupt state is refused with the entry named") {
    snap.state += "bogus 1\n";
    CHECK_THAT(RoundEngine::resume(config, snap).status().message(), Catch::Contains("unknown key 'bogus'"));
  }
}

TEST_CASE("a resume keeps server momentum, adaptive moments and the moving average", "[engine][resume]") {
  auto config = smallConfig(2);
  config.rounds = 10;
  config.downlink = "topk";
  config.downlinkDensity = 0.25;
  config.modelEma = 0.5;
  const std::string optimizer = GENERATE("sgd", "adam");
  std::vector<std::string> names = {"model-average", "server-momentum"};
  if (optimizer == "sgd") {
    config.serverMomentum = 0.9;
  } else {
    config.serverOptimizer = optimizer;
    names = {"model-average", "server-first-moment", "server-second-moment"};
  }
  INFO("server optimizer " << optimizer);
  // Updates arrive in client order (the streaming sum depends on the order).
  auto run = [&](RoundEngine& e, std::vector<Action> acts, int rounds) {
    for (int r = 0; r < rounds; ++r) {
      auto assigns = only<Assign>(acts);
      std::sort(assigns.begin(), assigns.end(),
                [](const Assign& x, const Assign& y) { return x.clientId < y.clientId; });
      for (const auto& a : assigns) {
        std::vector<float> delta(kDim);
        for (std::size_t i = 0; i < kDim; ++i)
          delta[i] = std::sin(float(i) * (a.clientId == "a" ? 1.0f : 0.7f) + float(e.commits()));
        acts = e.updateArrived(a.clientId, update(a.assignment.round, a.assignment.baseRound, delta),
                               100 * int64_t(a.assignment.round));
      }
    }
    return acts;
  };
  auto original = RoundEngine::create(config, initialModel()).value();
  original->clientJoined("a", 100, 0, 0, 0);
  auto pending = run(*original, original->clientJoined("b", 100, 0, 0, 0), 3);
  const EngineSnapshot snap = original->snapshot();
  std::vector<std::string> have;
  for (const auto& [name, values] : snap.vectors) {
    have.push_back(name);
    CHECK(values.size() == kDim);
  }
  CHECK(have == names);
  // The served model is the moving average, not the global model.
  CHECK(checksum64(original->servedModel()) != original->modelChecksum());

  // The original goes on; an engine resumed from the snapshot, its clients rejoining
  // with the snapshot's model, goes through the same updates: the same models, bit for
  // bit. (Its rounds are numbered one higher: the original's round 4 was open.)
  run(*original, pending, 2);
  auto resumed = RoundEngine::resume(config, snap).value();
  CHECK(resumed->snapshot().vectors == snap.vectors);
  resumed->clientJoined("a", 100, snap.round, checksum64(snap.model), 1000);
  run(*resumed, resumed->clientJoined("b", 100, snap.round, checksum64(snap.model), 1000), 2);
  CHECK(resumed->commits() == original->commits());
  CHECK(resumed->modelChecksum() == original->modelChecksum());
  CHECK(checksum64(resumed->servedModel()) == checksum64(original->servedModel()));

  // Without the vectors (what a checkpoint held before they were stored) it diverges.
  EngineSnapshot bare = snap;
  bare.vectors.clear();
  auto forgetful = RoundEngine::resume(config, bare).value();
  forgetful->clientJoined("a", 100, snap.round, checksum64(snap.model), 1000);
  run(*forgetful, forgetful->clientJoined("b", 100, snap.round, checksum64(snap.model), 1000), 2);
  CHECK(forgetful->modelChecksum() != original->modelChecksum());

  SECTION("a vector of the wrong size or an unknown name is refused") {
    EngineSnapshot bad = snap;
    bad.vectors["model-average"].pop_back();
    CHECK_THAT(RoundEngine::resume(config, bad).status().message(), Catch::Contains("'model-average' has 63 values"));
    bad = snap;
    bad.vectors["velocity"] = snap.model;
    CHECK_THAT(RoundEngine::resume(config, bad).status().message(), Catch::Contains("unknown vector 'velocity'"));
  }
}

TEST_CASE("a resumed engine catches up clients that missed rounds as the engine it was taken from would",
          "[engine][resume][catchup]") {
  auto config = smallConfig(1);
  config.rounds = 100;
  config.downlink = "topk";
  config.downlinkDensity = 0.2;
  config.catchUpXorRounds = 20;
  config.modelMantissaBits = 10;
  config.downlinkRelativeIndices = true;
  config.downlinkShared = 0.5;
  // By value (the XORs are the fewest bytes here), or from the broadcast log only.
  config.catchUpByValue = GENERATE(true, false);
  INFO("catch-up by value: " << config.catchUpByValue);
  constexpr uint64_t kRounds = 12;
  // Client "a" trains every round, kRounds commits, and is assigned round kRounds + 1.
  // held[r]: the model a client that stopped after round r holds.
  auto build = [&](std::map<uint64_t, ClientModel>* held) {
    auto e = RoundEngine::create(config, initialModel()).value();
    ClientModel a;
    a.model = initialModel();
    a.mantissaBits = config.modelMantissaBits;
    auto acts = e->clientJoined("a", 100, 0, 0, 0);
    for (uint64_t r = 1;; ++r) {
      const Assignment assign = only<Assign>(acts).at(0).assignment;
      REQUIRE(a.apply(assign));
      if (held != nullptr) (*held)[assign.baseRound] = a;
      if (r > kRounds) break;
      std::vector<float> delta(kDim);
      for (std::size_t i = 0; i < kDim; ++i)
        delta[i] = std::sin(1.3f * float(i) + 0.7f * float(r)) * float(1 + i % 5);
      acts = e->updateArrived("a", update(assign.round, assign.baseRound, delta), int64_t(10 * r));
    }
    REQUIRE(e->committedRound() == kRounds);
    return e;
  };
  std::map<uint64_t, ClientModel> held;
  const EngineSnapshot snap = build(&held)->snapshot();
  REQUIRE(held.size() == kRounds + 1);
  REQUIRE_FALSE(snap.catchUp.empty());

  // Client "c" comes back holding round r, to the original engine ("a" gone, its round
  // abandoned) and to one resumed from the snapshot: the same catch-up, bit for bit,
  // which brings c's model to the checksum the engine names.
  auto catchUp = [&](RoundEngine& e, uint64_t r) {
    auto acts = e.clientJoined("c", 100, r, checksum64(held[r].model), 5000);
    return only<Assign>(acts).at(0).assignment;
  };
  auto same = [](const std::shared_ptr<const compression::Payload>& x,
                 const std::shared_ptr<const compression::Payload>& y) { return x && y ? *x == *y : x == y; };
  int byLog = 0, byXor = 0;
  for (uint64_t r = 0; r <= kRounds; ++r) {
    INFO("client holding round " << r);
    auto original = build(nullptr);
    original->clientLeft("a", "gone", 4000);
    auto resumed = RoundEngine::resume(config, snap).value();
    const Assignment want = catchUp(*original, r);
    const Assignment got = catchUp(*resumed, r);
    CHECK(got.round == want.round);
    CHECK(got.baseChecksum == want.baseChecksum);
    CHECK(bool(got.denseModel) == bool(want.denseModel));
    CHECK(same(got.values, want.values));
    REQUIRE(got.broadcasts.size() == want.broadcasts.size());
    for (std::size_t i = 0; i < got.broadcasts.size(); ++i)
      CHECK(same(got.broadcasts[i], want.broadcasts[i]));
    ClientModel c = held[r];
    c.lastIndices.reset();  // a new connection: no indices to code against
    CHECK(c.apply(got));
    byLog += got.broadcasts.empty() ? 0 : 1;
    byXor += got.values && got.values->valueFormat == compression::ValueFormat::kXor32 ? 1 : 0;

    // Both then commit c's update the same way: the restored shared mask and server
    // memory pick the same coordinates.
    if (r == kRounds) {
      for (auto* e : {original.get(), resumed.get()})
        e->updateArrived("c", update(got.round, got.baseRound, filled(0.25f)), 6000);
      CHECK(resumed->committedRound() == kRounds + 2);
      CHECK(resumed->modelChecksum() == original->modelChecksum());
    }
  }
  if (config.catchUpByValue) {
    CHECK(byXor > 0);
  } else {
    CHECK(byLog > 0);
    CHECK(byXor == 0);
  }

  SECTION("without the catch-up state a client behind gets the dense model") {
    EngineSnapshot bare = snap;
    bare.catchUp.clear();
    auto forgetful = RoundEngine::resume(config, bare).value();
    CHECK(catchUp(*forgetful, kRounds - 1).denseModel);
  }
  SECTION("under another downlink format the log and the undo values are dropped, the stamps kept") {
    EngineSnapshot same = snap;
    auto otherConfig = config;
    otherConfig.modelMantissaBits = 12;  // replays would round differently
    auto other = RoundEngine::resume(otherConfig, same).value();
    const Assignment a = catchUp(*other, kRounds - 2);
    CHECK(a.broadcasts.empty());
    if (config.catchUpByValue) {
      REQUIRE(a.values);
      CHECK(a.values->valueFormat == compression::ValueFormat::kFp32);  // plain values, not XORs
      CHECK_FALSE(a.denseModel);
    } else {
      CHECK(a.denseModel);
    }
    ClientModel c = held[kRounds - 2];
    c.lastIndices.reset();
    CHECK(c.apply(a));
  }
  SECTION("a state of another round, or damaged, is refused with what was wrong") {
    EngineSnapshot other = snap;
    other.catchUp = build(nullptr)->snapshot().catchUp;  // same round: accepted
    CHECK(RoundEngine::resume(config, other).isOk());
    other.model[3] += 1.0f;
    CHECK_THAT(RoundEngine::resume(config, other).status().message(),
               Catch::Contains("catch-up state") && Catch::Contains("of round 12"));
    EngineSnapshot damaged = snap;
    damaged.catchUp.resize(damaged.catchUp.size() / 2);
    CHECK_THAT(RoundEngine::resume(config, damaged).status().message(),
               Catch::Contains("catch-up state") && Catch::Contains("not a CatchUpState"));
  }
}

TEST_CASE("the model EMA is the average of the committed models and is what is served", "[engine]") {
  auto config = smallConfig(1);
  config.modelEma = 0.75;
  auto engine = RoundEngine::create(config, initialModel()).value();
  CHECK(checksum64(engine->servedModel()) == engine->modelChecksum());  // nothing committed yet
  auto acts = engine->clientJoined("a", 100, 0, 0, 0);
  std::vector<float> expected;
  for (int r = 1; r <= 3; ++r) {
    auto a = only<Assign>(acts).at(0).assignment;
    acts = engine->updateArrived("a", update(a.round, a.baseRound, filled(0.5f * float(r))), 10 * r);
    const auto model = engine->model();
    if (expected.empty())
      expected.assign(model.begin(), model.end());
    else
      for (std::size_t i = 0; i < kDim; ++i)
        expected[i] = 0.75f * expected[i] + 0.25f * model[i];
  }
  const auto served = engine->servedModel();
  REQUIRE(served.size() == kDim);
  for (std::size_t i = 0; i < kDim; ++i)
    CHECK(served[i] == expected[i]);
  CHECK(checksum64(served) != engine->modelChecksum());

  config.modelEma = 1.0;
  CHECK_THAT(RoundEngine::create(config, initialModel()).status().message(), Catch::Contains("EMA"));
}

TEST_CASE("training finishes after the configured number of committed rounds", "[engine]") {
  auto config = smallConfig(1);
  config.rounds = 2;
  auto engine = RoundEngine::create(config, initialModel()).value();
  auto acts = engine->clientJoined("a", 100, 0, 0, 0);
  for (int r = 0; r < 2; ++r) {
    auto a = only<Assign>(acts).at(0).assignment;
    acts = engine->updateArrived("a", update(a.round, a.baseRound, filled(0.1f)), r);
  }
  CHECK(engine->finished());
  CHECK(only<Finished>(acts).size() == 1);
  CHECK(only<Assign>(acts).empty());
}

TEST_CASE("shutting down abandons the round in flight and starts no other", "[engine]") {
  auto engine = RoundEngine::create(smallConfig(2), initialModel()).value();
  engine->clientJoined("a", 100, 0, 0, 0);
  engine->clientJoined("b", 100, 0, 0, 0);
  engine->updateArrived("a", update(1, 0, filled(1.0f)), 10);
  auto acts = engine->shutdown("signal 15", 20);
  auto ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  CHECK_FALSE(ended[0].summary.committed);
  CHECK_THAT(ended[0].summary.reason, Catch::Contains("signal 15"));
  REQUIRE(only<Verdict>(acts).size() == 1);
  CHECK_FALSE(only<Verdict>(acts)[0].verdict.accepted);
  CHECK(only<Assign>(acts).empty());
  CHECK(only<Assign>(engine->clientJoined("c", 100, 0, 0, 30)).empty());
}

TEST_CASE("updates weigh by their clients' examples, not by the examples trained this round", "[engine]") {
  // Two clients with 100 and 300 examples each train 10 steps of the same batch size:
  // FedAvg's mean weighs them 1 : 3 (ALGORITHMS.md §2), whatever each update reports.
  auto engine = RoundEngine::create(smallConfig(2), initialModel()).value();
  engine->clientJoined("a", 100, 0, 0, 0);
  engine->clientJoined("b", 300, 0, 0, 0);
  engine->updateArrived("a", update(1, 0, filled(1.0f), 320, 10), 10);
  auto acts = engine->updateArrived("b", update(1, 0, filled(5.0f), 320, 10), 20);
  REQUIRE(only<RoundEnded>(acts).size() == 1);
  CHECK(engine->model()[3] == Approx(initialModel()[3] - (100 * 1.0 + 300 * 5.0) / 400).epsilon(1e-6));
}

TEST_CASE("the streaming sum equals the batch formula for sparse updates of unequal examples and steps",
          "[engine][streaming]") {
  auto config = smallConfig(5);
  config.maxNormRatio = 0;  // no check: every update is summed on arrival
  auto engine = RoundEngine::create(config, initialModel()).value();
  std::vector<Action> acts;
  const uint64_t examples[] = {100, 250, 40, 600, 10};  // each client's n_k, as in its Hello
  {
    int j = 0;
    for (const char* id : {"a", "b", "c", "d", "e"})
      acts = engine->clientJoined(id, examples[j++], 0, 0, 0);
  }
  REQUIRE(only<Assign>(acts).size() == 5);
  // Batch: Delta = (sum_k n_k steps_k / N) * sum_k (n_k / N) q_k / steps_k, N = sum_k n_k.
  std::vector<double> q(kDim * 5, 0.0);
  const uint32_t steps[] = {10, 25, 4, 7, 60};
  double n = 0, stepsWeighted = 0;
  for (int k = 0; k < 5; ++k) {
    n += double(examples[k]);
    stepsWeighted += double(examples[k]) * steps[k];
  }
  int k = 0;
  for (const char* id : {"a", "b", "c", "d", "e"}) {
    // A sparse update: every third coordinate, shifted per client, so the supports overlap in part.
    compression::Compressed c;
    c.encoding = compression::Encoding::kTopK;
    c.count = kDim;
    for (uint32_t i = static_cast<uint32_t>(k); i < kDim; i += 3) {
      c.indices.push_back(i);
      c.values.push_back(std::sin(float(i + 7 * k)) * float(k + 1));
      q[k * kDim + i] = c.values.back();
    }
    IncomingUpdate u = update(1, 0, filled(0.0f), examples[k], steps[k]);
    u.delta = c;
    acts = engine->updateArrived(id, std::move(u), 10 + k);
    ++k;
  }
  REQUIRE(only<RoundEnded>(acts).size() == 1);
  REQUIRE(only<RoundEnded>(acts)[0].summary.accepted == 5);
  auto expected = initialModel();
  for (std::size_t i = 0; i < kDim; ++i) {
    double delta = 0;
    for (int j = 0; j < 5; ++j)
      delta += double(examples[j]) / n * q[j * kDim + i] / steps[j];
    delta *= stepsWeighted / n;
    CHECK(engine->model()[i] == Approx(double(expected[i]) - delta).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("the norm check judges early updates once three norms are in, later ones on arrival",
          "[engine][rejection][streaming]") {
  auto config = smallConfig(5);
  auto engine = RoundEngine::create(config, initialModel()).value();
  for (const char* id : {"a", "b", "c", "d", "e"})
    engine->clientJoined(id, 100, 0, 0, 0);
  // The outlier arrives first: held until the median of three norms can judge it.
  engine->updateArrived("a", update(1, 0, filled(500.0f)), 1);
  engine->updateArrived("b", update(1, 0, filled(1.0f)), 2);
  engine->updateArrived("c", update(1, 0, filled(2.0f)), 3);
  engine->updateArrived("e", update(1, 0, filled(3.0f)), 4);
  // Another outlier arrives last: judged on arrival against the median of the five norms.
  auto acts = engine->updateArrived("d", update(1, 0, filled(900.0f)), 5);
  auto ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  std::map<std::string, ParticipantOutcome> outcome;
  for (const auto& p : ended[0].summary.participants)
    outcome[p.clientId] = p.outcome;
  CHECK(outcome["a"] == ParticipantOutcome::kRejected);
  CHECK(outcome["d"] == ParticipantOutcome::kRejected);
  CHECK(outcome["b"] == ParticipantOutcome::kAccepted);
  CHECK(ended[0].summary.accepted == 3);
  for (const auto& v : only<Verdict>(acts))
    CHECK(v.verdict.accepted == (v.clientId != "a" && v.clientId != "d"));
  // Delta = mean(1, 2, 3) = 2.
  CHECK(engine->model()[0] == Approx(initialModel()[0] - 2.0f));
}

TEST_CASE("uncompressed broadcasts keep one log entry; staleness is still counted past the log",
          "[engine][catchup][stragglers]") {
  auto config = smallConfig(2);
  config.rounds = 10;
  config.overSelection = 1.5;  // 3 of 2
  config.minClients = 3;
  config.maxStaleness = 2;
  auto engine = RoundEngine::create(config, initialModel()).value();
  engine->clientJoined("a", 100, 0, 0, 0);
  engine->clientJoined("b", 100, 0, 0, 0);
  auto acts = engine->clientJoined("c", 100, 0, 0, 0);
  REQUIRE(only<Assign>(acts).size() == 3);
  // Round 1 commits with a and b; c keeps training on round 1's assignment.
  engine->updateArrived("a", update(1, 0, filled(0.1f)), 1);
  acts = engine->updateArrived("b", update(1, 0, filled(0.1f)), 2);
  REQUIRE(only<RoundEnded>(acts).size() == 1);
  // d joins: round 2 runs with a, b and d, and commits with a and b.
  acts = engine->clientJoined("d", 100, 0, 0, 3);
  REQUIRE(only<Assign>(acts).size() == 3);
  engine->updateArrived("a", update(2, 1, filled(0.1f)), 4);
  acts = engine->updateArrived("b", update(2, 1, filled(0.1f)), 5);
  REQUIRE(only<RoundEnded>(acts).size() == 1);
  REQUIRE(engine->committedRound() == 2);
  // c's round-1 update is two commits stale: held (its verdict comes with round 3), and
  // round 3 starts with a, b, c.
  acts = engine->updateArrived("c", update(1, 0, filled(0.3f)), 6);
  CHECK(only<Verdict>(acts).empty());
  // c holds round 0: two dense broadcasts are more bytes than the model, and only the
  // newest is kept, so c is sent the dense model.
  bool sawC = false;
  for (const auto& a : only<Assign>(acts)) {
    if (a.clientId != "c") continue;
    sawC = true;
    CHECK(a.assignment.denseModel != nullptr);
    CHECK(a.assignment.broadcasts.empty());
  }
  CHECK(sawC);
  engine->updateArrived("a", update(3, 2, filled(0.1f)), 7);
  acts = engine->updateArrived("b", update(3, 2, filled(0.1f)), 8);
  auto ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  bool late = false;
  for (const auto& p : ended[0].summary.participants)
    late |= p.clientId == "c" && p.outcome == ParticipantOutcome::kLateApplied && p.staleness == 2;
  CHECK(late);
}

TEST_CASE("catch-up by value: the changed coordinates' current values, bit for bit the replayed model",
          "[engine][catchup]") {
  auto config = smallConfig(2);
  config.rounds = 40;
  config.minGoal = 1;
  config.downlink = "topk";
  config.downlinkDensity = 0.05;  // 3 of 64 coordinates a round
  config.catchUpRounds = 4;       // the log cannot reach back far
  auto engine = RoundEngine::create(config, initialModel()).value();
  int64_t now = 0;
  // Two clients train every round; their deltas touch different coordinates each round.
  auto train = [&](std::vector<Action> acts, std::map<std::string, ClientModel>& models) {
    std::vector<Action> all;
    for (const auto& a : only<Assign>(acts)) {
      REQUIRE(models[a.clientId].apply(a.assignment));
      CHECK(models[a.clientId].model == std::vector<float>(engine->model().begin(), engine->model().end()));
      std::vector<float> delta(kDim, 0.0f);
      for (std::size_t i = 0; i < 4; ++i)
        delta[(a.assignment.round * 5 + i * 7) % kDim] = 0.5f + 0.1f * float(i);
      for (auto& x :
           engine->updateArrived(a.clientId, update(a.assignment.round, a.assignment.baseRound, delta), ++now))
        all.push_back(x);
    }
    return all;
  };
  std::map<std::string, ClientModel> models;
  models["a"].model = models["b"].model = initialModel();
  engine->clientJoined("a", 100, 0, 0, 0);
  auto acts = engine->clientJoined("b", 100, 0, 0, 0);
  ClientModel atRound3;
  for (int r = 0; r < 12; ++r) {
    acts = train(acts, models);
    if (models["a"].round == 3) atRound3 = models["a"];
  }
  REQUIRE(engine->committedRound() == 12);
  REQUIRE(atRound3.round == 3);
  // a and b leave between rounds; c (holding nothing) and d (holding round 3) join.
  engine->clientLeft("a", "bye", ++now);
  engine->clientLeft("b", "bye", ++now);
  std::map<std::string, ClientModel> late;
  late["c"].model = initialModel();
  late["d"] = atRound3;
  engine->clientJoined("c", 100, 0, 0, ++now);
  acts = engine->clientJoined("d", 100, 3, checksum64(atRound3.model), ++now);
  auto assigns = only<Assign>(acts);
  REQUIRE(assigns.size() == 2);
  for (const auto& a : assigns) {
    INFO(a.clientId);
    // The log holds the last 4 broadcasts only: the values bring them forward, in
    // fewer bytes than the dense model, and the model is the engine's to the bit.
    CHECK(a.assignment.denseModel == nullptr);
    CHECK(a.assignment.broadcasts.empty());
    REQUIRE(a.assignment.values != nullptr);
    CHECK(a.assignment.values->byteSize() < kDim * sizeof(float));
  }
  acts = train(acts, late);  // apply() requires the checksum; train() the exact model
  // A client naming a model with a wrong checksum is not trusted: the dense model.
  engine->clientJoined("a", 100, 11, 0, ++now);
  late["a"].model = initialModel();  // (what it holds does not matter)
  late["a"].round = 11;
  bool sawA = false;
  for (int r = 0; r < 6 && !sawA; ++r) {
    for (const auto& a : only<Assign>(acts))
      if (a.clientId == "a") {
        sawA = true;
        CHECK(a.assignment.denseModel != nullptr);
      }
    acts = train(acts, late);
  }
  CHECK(sawA);

  SECTION("a client that reports a checksum mismatch gets the dense model") {
    auto e2 = RoundEngine::create(config, initialModel()).value();
    e2->clientJoined("x", 100, 0, 0, 0);
    auto acts2 = e2->clientJoined("y", 100, 0, 0, 0);
    REQUIRE(only<Assign>(acts2).size() == 2);
    for (const auto& a : only<Assign>(acts2))
      CHECK(a.assignment.denseModel == nullptr);  // round 1: both build the round-0 model
    // x does not train on what it could not apply: it leaves the round at once (not
    // busy until its deadline or a reconnect), y's update closes the round, and x is
    // selected again with the dense model.
    CHECK(e2->clientOutOfSync("x", "checksum mismatch", 1).empty());
    acts2 = e2->updateArrived("y", update(1, 0, filled(0.1f)), 2);
    const auto ended = only<RoundEnded>(acts2);
    REQUIRE(ended.size() == 1);
    bool droppedX = false;
    for (const auto& p : ended[0].summary.participants)
      if (p.clientId == "x") {
        droppedX = p.outcome == ParticipantOutcome::kDropped && p.reason == "out of sync: checksum mismatch";
      }
    CHECK(droppedX);
    bool sawX = false;
    for (const auto& a : only<Assign>(acts2)) {
      if (a.clientId != "x") continue;
      sawX = true;
      CHECK(a.assignment.denseModel != nullptr);
    }
    CHECK(sawX);
    SECTION("the last outstanding participant falling out of sync decides the round") {
      auto acts3 = e2->clientOutOfSync("x", "checksum mismatch", 3);
      CHECK(acts3.empty());  // y is still training round 2
      acts3 = e2->clientOutOfSync("y", "checksum mismatch", 4);
      CHECK(only<RoundEnded>(acts3).size() == 1);  // abandoned: nobody can deliver
      CHECK(only<Assign>(acts3).size() == 2);      // both free again, both dense
      for (const auto& a : only<Assign>(acts3))
        CHECK(a.assignment.denseModel != nullptr);
    }
  }
  SECTION("without clientsInitialize, a client holding nothing gets the dense model") {
    auto c2 = config;
    c2.clientsInitialize = false;
    auto e2 = RoundEngine::create(c2, initialModel()).value();
    e2->clientJoined("x", 100, 0, 0, 0);
    auto acts2 = e2->clientJoined("y", 100, 0, 0, 0);
    for (const auto& a : only<Assign>(acts2))
      CHECK(a.assignment.denseModel != nullptr);
  }
}

namespace {

std::string clientName(uint32_t j) {
  std::string s = "c";
  s.push_back(static_cast<char>('0' + j));
  return s;
}

// One round of k clients "c0".."c(k-1)"; client j sends delta(j). Returns the summary.
RoundSummary runOneRound(RoundEngine& engine, uint32_t k, uint64_t round,
                         const std::function<std::vector<float>(uint32_t)>& delta) {
  std::vector<Action> acts;
  for (uint32_t j = 0; j < k; ++j)
    acts = engine.updateArrived(clientName(j), update(round, round - 1, delta(j)), int64_t(round * 100 + j));
  auto ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  return ended[0].summary;
}

std::unique_ptr<RoundEngine> engineOf(EngineConfig config, uint32_t k) {
  config.maxNormRatio = 0;
  auto engine = RoundEngine::create(config, initialModel()).value();
  for (uint32_t j = 0; j < k; ++j)
    engine->clientJoined(clientName(j), 100, 0, 0, 0);
  return engine;
}

}  // namespace

TEST_CASE("FedExP: agreeing updates take a step of 1, orthogonal ones of K / 2", "[engine][server-optimizer]") {
  auto config = smallConfig(4);
  config.extrapolate = true;
  SECTION("identical updates: the plain mean") {
    auto engine = engineOf(config, 4);
    auto s = runOneRound(*engine, 4, 1, [](uint32_t) { return filled(0.5f); });
    CHECK(s.serverStep == Approx(1.0));
    for (std::size_t i = 0; i < kDim; ++i)
      CHECK(engine->model()[i] == Approx(initialModel()[i] - 0.5f));
  }
  SECTION("disjoint supports of equal norm: sum ||a_k||^2 / (2 K ||mean||^2) = K / 2") {
    auto engine = engineOf(config, 4);
    auto s = runOneRound(*engine, 4, 1, [](uint32_t j) {
      std::vector<float> v(kDim, 0.0f);
      for (std::size_t i = j; i < kDim; i += 4)
        v[i] = 1.0f;
      return v;
    });
    CHECK(s.serverStep == Approx(2.0));
    // Each coordinate: mean 1/4, times 2.
    for (std::size_t i = 0; i < kDim; ++i)
      CHECK(engine->model()[i] == Approx(initialModel()[i] - 0.5f));
  }
  SECTION("off: the mean, step 1") {
    config.extrapolate = false;
    auto engine = engineOf(config, 4);
    auto s = runOneRound(*engine, 4, 1, [](uint32_t j) {
      std::vector<float> v(kDim, 0.0f);
      v[j] = 1.0f;
      return v;
    });
    CHECK(s.serverStep == Approx(1.0));
    CHECK(engine->model()[0] == Approx(initialModel()[0] - 0.25f));
  }
}

TEST_CASE("server lr and momentum scale the aggregate; masking drops momentum where a coordinate was sent",
          "[engine][server-optimizer]") {
  auto config = smallConfig(2);
  config.serverMomentum = 0.5;
  config.serverLr = 2.0;
  SECTION("dense broadcast: u = 0.5 u + Delta, the model moves by 2 u") {
    auto engine = engineOf(config, 2);
    runOneRound(*engine, 2, 1, [](uint32_t) { return filled(1.0f); });
    CHECK(engine->model()[3] == Approx(initialModel()[3] - 2.0f));
    runOneRound(*engine, 2, 2, [](uint32_t) { return filled(1.0f); });
    CHECK(engine->model()[3] == Approx(initialModel()[3] - 2.0f - 3.0f));
  }
  SECTION("top-k broadcast with masking: a coordinate that was sent starts its momentum again") {
    config.downlink = "topk";
    config.downlinkDensity = 1.0 / double(kDim);  // one coordinate a round
    config.serverLr = 1.0;
    auto engine = engineOf(config, 2);
    auto grow = [](uint32_t) {
      std::vector<float> v(kDim, 0.0f);
      v[5] = 1.0f;
      return v;
    };
    runOneRound(*engine, 2, 1, grow);
    CHECK(engine->model()[5] == Approx(initialModel()[5] - 1.0f));
    runOneRound(*engine, 2, 2, grow);  // u was zeroed at 5: u = 1 again, not 1.5
    CHECK(engine->model()[5] == Approx(initialModel()[5] - 2.0f));
  }
  SECTION("invalid settings are refused") {
    config.serverMomentum = 1.0;
    CHECK(!RoundEngine::create(config, initialModel()));
    config.serverMomentum = 0;
    config.serverLr = 0;
    CHECK(!RoundEngine::create(config, initialModel()));
  }
}

namespace {

// 20 clients c00..c19, 4 updates a round, all selected at once (minClients 20),
// a sticky group of 6 with 3 of the 4 drawn from it.
EngineConfig stickyConfig() {
  auto config = smallConfig(4);
  config.rounds = 1000;
  config.minClients = 20;
  config.stickyClients = 6;
  config.stickyFraction = 0.75;
  return config;
}

std::string clientName(int i) {
  return fmt::format("c{:02d}", i);
}

std::vector<Action> joinAll(RoundEngine& e, uint64_t heldRound = 0, uint64_t heldChecksum = 0) {
  std::vector<Action> acts;
  for (int i = 0; i < 20; ++i)
    acts = e.clientJoined(clientName(i), 100, heldRound, heldChecksum, 0);
  return acts;
}

// Every assigned client answers at once with filled(its number + 1): returns the round's summary.
RoundSummary answer(RoundEngine& e, std::vector<Action>& acts) {
  auto assigns = only<Assign>(acts);
  REQUIRE(!assigns.empty());
  for (const auto& a : assigns) {
    const float v = float(std::stoi(a.clientId.substr(1)) + 1);
    acts = e.updateArrived(a.clientId, update(a.assignment.round, a.assignment.baseRound, filled(v)), 10);
  }
  auto ended = only<RoundEnded>(acts);
  REQUIRE(ended.size() == 1);
  return ended[0].summary;
}

}  // namespace

TEST_CASE("sticky sampling: counts from each group, rotation, weights in the aggregate", "[engine][sticky]") {
  auto engine = RoundEngine::create(stickyConfig(), initialModel()).value();
  auto acts = joinAll(*engine);
  std::map<std::string, uint64_t> lastAssigned;
  std::set<std::string> everMember;
  std::vector<std::string> group;  // as of the previous round's selection
  for (int r = 1; r <= 40; ++r) {
    const std::vector<std::string> before = group;
    group = engine->stickyGroup();
    auto assigns = only<Assign>(acts);
    REQUIRE(assigns.size() == 4);
    for (const auto& a : assigns)
      lastAssigned[a.clientId] = a.assignment.round;
    const float modelBefore = engine->model()[0];
    const RoundSummary s = answer(*engine, acts);
    REQUIRE(s.committed);
    uint32_t sticky = 0;
    double wSum = 0, wvSum = 0;
    for (const auto& p : s.participants) {
      const bool wasMember = std::find(before.begin(), before.end(), p.clientId) != before.end();
      CHECK(p.sticky == wasMember);
      sticky += p.sticky ? 1 : 0;
      // n / N = 4 / 20 over (drawn / available) of its part.
      const double expected = p.sticky ? 0.2 * double(before.size()) / 3.0 : 0.2 * double(20 - before.size()) / 1.0;
      CHECK(p.selectionWeight == Approx(r == 1 ? 1.0 : expected));
      wSum += p.selectionWeight;
      wvSum += p.selectionWeight * (std::stoi(p.clientId.substr(1)) + 1);
    }
    // Round 1: no group yet, 4 uniform draws; then 3 members and 1 other.
    CHECK(sticky == (r == 1 ? 0u : 3u));
    // Equal examples and steps: Delta is the selection-weighted mean of the updates.
    CHECK(engine->model()[0] == Approx(modelBefore - wvSum / wSum).epsilon(1e-5));
    // The group is 6 of the clients assigned most recently: no client outside it was
    // assigned after one inside (ties among those of one round broken by the engine).
    CHECK(group.size() == std::min<std::size_t>(6, lastAssigned.size()));
    uint64_t oldestInside = UINT64_MAX, newestOutside = 0;
    for (const auto& [id, round] : lastAssigned)
      if (std::find(group.begin(), group.end(), id) != group.end())
        oldestInside = std::min(oldestInside, round);
      else
        newestOutside = std::max(newestOutside, round);
    CHECK(newestOutside <= oldestInside);
    // Once full (round 4 on), one member a round leaves and the new one joins.
    if (r >= 4) {
      std::vector<std::string> kept;
      std::set_intersection(before.begin(), before.end(), group.begin(), group.end(), std::back_inserter(kept));
      CHECK(kept.size() == 5);
    }
    everMember.insert(group.begin(), group.end());
  }
  CHECK(everMember.size() >= 15);  // 6 + 37 draws from the 14 outside: it rotates through the fleet
}

TEST_CASE("sticky sampling: given the group, E[selected x weight] is uniform sampling's n / N for every client",
          "[engine][sticky]") {
  auto engine = RoundEngine::create(stickyConfig(), initialModel()).value();
  auto acts = joinAll(*engine);
  for (int r = 0; r < 10; ++r)
    answer(*engine, acts);
  const auto snap = engine->snapshot();
  const auto group = engine->stickyGroup();
  REQUIRE(group.size() == 6);
  // Resume the same state with different random draws.
  const auto rngAt = snap.state.find("\nrng ");
  REQUIRE(rngAt != std::string::npos);
  const auto rngEnd = snap.state.find('\n', rngAt + 1);
  constexpr int kDraws = 4000;
  std::map<std::string, double> weighted, selected;
  for (int i = 0; i < kDraws; ++i) {
    EngineSnapshot s = snap;
    s.state = snap.state.substr(0, rngAt) + fmt::format("\nrng {}", 1000 + i) + snap.state.substr(rngEnd);
    auto e = RoundEngine::resume(stickyConfig(), s).value();
    REQUIRE(e->stickyGroup() == group);
    auto a = joinAll(*e, snap.round, checksum64(snap.model));
    for (const auto& p : answer(*e, a).participants) {
      weighted[p.clientId] += p.selectionWeight;
      selected[p.clientId] += 1;
    }
  }
  for (int i = 0; i < 20; ++i) {
    const std::string id = clientName(i);
    const bool member = std::find(group.begin(), group.end(), id) != group.end();
    INFO(id << (member ? " (member)" : ""));
    // Sampling is far from uniform: members 3/6, the others 1/14 ...
    CHECK(selected[id] / kDraws == Approx(member ? 0.5 : 1.0 / 14).margin(0.03));
    // ... and the weights make up for it (sd of the mean: 0.0032 members, 0.011 others).
    CHECK(weighted[id] / kDraws == Approx(0.2).margin(0.045));
  }
}

TEST_CASE("sticky sampling without reweighting: updates weigh by examples, and every client takes its turn",
          "[engine][sticky]") {
  auto config = stickyConfig();
  constexpr int kRounds = 5000;
  config.rounds = kRounds;
  config.stickyReweight = false;
  auto engine = RoundEngine::create(config, initialModel()).value();
  auto acts = joinAll(*engine);
  std::map<std::string, int> selected;
  uint32_t sticky = 0;
  for (int r = 1; r <= kRounds; ++r) {
    const float modelBefore = engine->model()[0];
    const RoundSummary s = answer(*engine, acts);
    REQUIRE(s.committed);
    double sum = 0;
    for (const auto& p : s.participants) {
      CHECK(p.selectionWeight == 1.0);
      sticky += p.sticky ? 1 : 0;
      sum += std::stoi(p.clientId.substr(1)) + 1;
      ++selected[p.clientId];
    }
    // Equal examples and steps: Delta is the plain mean of the updates.
    CHECK(engine->model()[0] == Approx(modelBefore - sum / double(s.participants.size())).epsilon(1e-5));
  }
  // Still sticky: 3 of every 4 from the group after the first round ...
  CHECK(sticky == 3u * (kRounds - 1));
  // ... and over many rounds each of the 20 clients was selected about 4 / 20 of them:
  // the group rotates through the fleet. Membership comes in bursts, so the counts
  // spread more than independent draws' would (sd about 60 of 1000 here); by id the
  // lower and upper halves get the same share (with ties leaving by id, the smallest
  // first, the lower half got 933 a client and the upper 1067).
  REQUIRE(selected.size() == 20);
  double lower = 0, upper = 0;
  for (const auto& [id, n] : selected) {
    INFO(id);
    CHECK(n == Approx(kRounds * 4 / 20).margin(kRounds * 4 / 20 / 4));
    (std::stoi(id.substr(1)) < 10 ? lower : upper) += n;
  }
  CHECK(lower / upper == Approx(1.0).margin(0.04));
}

TEST_CASE("sticky sampling is deterministic for a seed and resumes with its group", "[engine][sticky][resume]") {
  auto trace = [](uint64_t seed, int rounds) {
    auto config = stickyConfig();
    config.seed = seed;
    auto e = RoundEngine::create(config, initialModel()).value();
    auto acts = joinAll(*e);
    std::vector<std::string> out;
    for (int r = 0; r < rounds; ++r) {
      for (const auto& a : only<Assign>(acts))
        out.push_back(a.clientId);
      answer(*e, acts);
    }
    return out;
  };
  CHECK(trace(1, 15) == trace(1, 15));
  CHECK(trace(1, 15) != trace(2, 15));

  auto engine = RoundEngine::create(stickyConfig(), initialModel()).value();
  auto acts = joinAll(*engine);
  for (int r = 0; r < 8; ++r)
    answer(*engine, acts);
  const auto snap = engine->snapshot();
  auto resumed = RoundEngine::resume(stickyConfig(), snap).value();
  CHECK(resumed->stickyGroup() == engine->stickyGroup());
  CHECK(resumed->snapshot().state == snap.state);
  // Both resumed copies go on alike, drawing members from the restored group.
  auto other = RoundEngine::resume(stickyConfig(), snap).value();
  const auto group = resumed->stickyGroup();
  std::vector<std::string> a, b;
  for (auto* e : {resumed.get(), other.get()}) {
    auto act = joinAll(*e, snap.round, checksum64(snap.model));
    auto& out = e == resumed.get() ? a : b;
    for (int r = 0; r < 5; ++r) {
      const RoundSummary s = answer(*e, act);
      for (const auto& p : s.participants) {
        out.push_back(p.clientId);
        if (r == 0) CHECK(p.sticky == (std::find(group.begin(), group.end(), p.clientId) != group.end()));
      }
    }
  }
  CHECK(a == b);

  SECTION("invalid settings are refused") {
    auto config = stickyConfig();
    config.stickyClients = 3;  // fewer than the 4 selected
    CHECK_FALSE(RoundEngine::create(config, initialModel()).isOk());
    config.stickyClients = 6;
    config.stickyFraction = 1.5;
    CHECK_FALSE(RoundEngine::create(config, initialModel()).isOk());
  }
}

// The engine of runFiveClients' tests: rounds of 2 of 5 clients, a top-k downlink of 16
// of the 64 coordinates.
EngineConfig fiveClientConfig(uint64_t rounds) {
  auto config = smallConfig(2);
  config.rounds = rounds;
  config.downlink = "topk";
  config.downlinkDensity = 0.25;  // 16 of 64
  config.minClients = 5;          // 2 of 5 a round: clients miss rounds and catch up
  return config;
}

// Five clients a..e join an engine that runs rounds of 2, so clients miss rounds and
// catch up. For `rounds` rounds each assigned client is shown to inspect(assignment),
// applies its assignment (the checksum must match) and sends a delta of sin(i * 7 + 3 r
// + its name); afterRound(r) runs once each round has ended.
template <typename Inspect, typename AfterRound>
void runFiveClients(RoundEngine& engine, int rounds, Inspect inspect, AfterRound afterRound) {
  std::map<std::string, ClientModel> clients;
  std::vector<Action> acts;
  for (const char* id : {"a", "b", "c", "d", "e"}) {
    clients[id].model = initialModel();
    clients[id].mantissaBits = engine.config().modelMantissaBits;
    acts = engine.clientJoined(id, 100, 0, 0, 0);
  }
  for (int r = 1; r <= rounds; ++r) {
    auto assigns = only<Assign>(acts);
    REQUIRE(assigns.size() == 2);
    for (const auto& a : assigns) {
      inspect(a.assignment);
      CHECK(clients[a.clientId].apply(a.assignment));  // checksum of the caught-up model
      std::vector<float> delta(kDim);
      for (std::size_t i = 0; i < kDim; ++i)
        delta[i] = std::sin(float(i * 7 + 3 * r) + float(a.clientId[0]));
      acts = engine.updateArrived(a.clientId, update(a.assignment.round, a.assignment.baseRound, delta), 10 * r);
    }
    REQUIRE(only<RoundEnded>(acts).size() == 1);
    afterRound(r);
  }
}

TEST_CASE("downlink shared mask: each broadcast keeps 3/4 of the previous one's coordinates, catch-up stays exact",
          "[engine][shared-mask]") {
  auto config = fiveClientConfig(12);
  config.fp16Values = true;
  config.downlinkShared = 0.75;  // 12 kept, 4 new
  auto engine = RoundEngine::create(config, initialModel()).value();
  std::set<std::size_t> previous, touched;
  std::vector<float> before(engine->model().begin(), engine->model().end());
  runFiveClients(
      *engine, 12, [](const Assignment&) {},
      [&](int r) {
        std::set<std::size_t> changed;
        for (std::size_t i = 0; i < kDim; ++i)
          if (engine->model()[i] != before[i]) changed.insert(i);
        before.assign(engine->model().begin(), engine->model().end());
        CHECK(changed.size() <= 16);
        if (r > 1) {
          std::size_t shared = 0;
          for (std::size_t i : changed)
            shared += previous.count(i);
          CHECK(shared >= 12);
        }
        previous = changed;
        touched.insert(changed.begin(), changed.end());
      });
  CHECK(touched.size() <= 16 + 11 * 4);

  SECTION("only with a top-k downlink") {
    config.downlink = "identity";
    CHECK_FALSE(RoundEngine::create(config, initialModel()).isOk());
  }
}

TEST_CASE("ternary downlink: every broadcast value is +-s, clients catch up exactly, config checked",
          "[engine][compression]") {
  auto config = fiveClientConfig(6);
  config.downlinkTernary = true;
  config.catchUpByValue = false;  // clients catch up from the log
  auto engine = RoundEngine::create(config, initialModel()).value();
  std::size_t broadcasts = 0;
  runFiveClients(
      *engine, 6,
      [&](const Assignment& a) {
        for (const auto& b : a.broadcasts) {
          CHECK(b->valueFormat == compression::ValueFormat::kSignBits);
          REQUIRE(b->scales.size() == (b->selected + compression::kTernaryBlock - 1) / compression::kTernaryBlock);
          CHECK(b->values.size() == (b->selected + 7) / 8);
          ++broadcasts;
        }
      },
      [](int) {});
  CHECK(broadcasts > 0);

  SECTION("only on top-k links") {
    config.downlink = "identity";
    CHECK_FALSE(RoundEngine::create(config, initialModel()).isOk());
    config.downlink = "topk";
    config.uplinkTernary = true;
    config.uplink = "randk";
    CHECK_FALSE(RoundEngine::create(config, initialModel()).isOk());
    config.uplink = "topk-sampled";
    CHECK(RoundEngine::create(config, initialModel()).isOk());
  }
}

TEST_CASE("catch-up values as XORs with the client's model: bit for bit, plain values beyond the window",
          "[engine][catchup][xor]") {
  auto config = fiveClientConfig(16);
  config.downlinkShared = 0.75;
  config.catchUpRounds = 1;  // the log reaches back one round: the others catch up by value
  const auto count = [&](uint32_t xorRounds) {
    config.catchUpXorRounds = xorRounds;
    auto engine = RoundEngine::create(config, initialModel()).value();
    std::map<compression::ValueFormat, int> formats;
    // runFiveClients checks each client's checksum after its catch-up.
    runFiveClients(
        *engine, 16,
        [&](const Assignment& a) {
          if (a.values) ++formats[a.values->valueFormat];
        },
        [](int) {});
    return formats;
  };
  const auto all = count(100);
  CHECK(all.count(compression::ValueFormat::kFp32) == 0);
  CHECK(all.count(compression::ValueFormat::kXor32) == 1);
  // A window of 2 commits: a client further behind gets the plain values.
  const auto some = count(2);
  CHECK(some.count(compression::ValueFormat::kFp32) == 1);
  const auto none = count(0);
  CHECK(none.count(compression::ValueFormat::kXor32) == 0);
  CHECK(none.count(compression::ValueFormat::kFp32) == 1);

  SECTION("with the model rounded to 10 mantissa bits: the XORs drop the 13 cleared bits, still exact") {
    config.modelMantissaBits = 10;
    config.catchUpXorRounds = 100;
    auto engine = RoundEngine::create(config, initialModel()).value();
    const auto initial = initialModel();
    int xors = 0;
    runFiveClients(
        *engine, 16,
        [&](const Assignment& a) {
          if (!a.values || a.values->valueFormat != compression::ValueFormat::kXor32) return;
          CHECK(a.values->block == 13);
          ++xors;
        },
        [&](int) {
          // Every changed coordinate has its 13 low bits clear.
          for (std::size_t i = 0; i < kDim; ++i)
            if (engine->model()[i] != initial[i]) CHECK((std::bit_cast<uint32_t>(engine->model()[i]) & 0x1fffu) == 0);
        });
    CHECK(xors > 0);
    config.modelMantissaBits = 0;
    CHECK_FALSE(RoundEngine::create(config, initialModel()).isOk());
    config.modelMantissaBits = 24;
    CHECK_FALSE(RoundEngine::create(config, initialModel()).isOk());
  }
}

TEST_CASE("the model's rounding goes into the server memory: applied steps + memory are the same at any precision",
          "[engine][precision]") {
  // The clients' deltas do not depend on the model, so every run aggregates the same
  // updates; error feedback makes (x_0 - x_r) + e_r their sum whatever was rounded.
  struct Run {
    std::vector<float> model, total;
  };
  const auto run = [](uint32_t bits) {
    auto config = fiveClientConfig(20);
    config.modelMantissaBits = bits;
    auto engine = RoundEngine::create(config, initialModel()).value();
    runFiveClients(
        *engine, 20, [](const Assignment&) {}, [](int) {});
    const auto memory = engine->snapshot().serverMemory;
    REQUIRE(memory.size() == kDim);
    const auto initial = initialModel();
    Run out;
    out.model.assign(engine->model().begin(), engine->model().end());
    for (std::size_t i = 0; i < kDim; ++i)
      out.total.push_back(initial[i] - out.model[i] + memory[i]);
    return out;
  };
  const Run exact = run(23);
  const Run coarse = run(4);  // 2^-5 relative: residuals far above float rounding
  double modelGap = 0, totalGap = 0;
  for (std::size_t i = 0; i < kDim; ++i) {
    modelGap = std::max(modelGap, double(std::fabs(exact.model[i] - coarse.model[i])));
    totalGap = std::max(totalGap, double(std::fabs(exact.total[i] - coarse.total[i])));
  }
  CHECK(modelGap > 1e-3);  // the rounding changed the model
  CHECK(totalGap < 1e-4);  // and nothing was lost
}

TEST_CASE("mean over senders: each coordinate is averaged over the updates that carry it",
          "[engine][server-optimizer]") {
  auto config = smallConfig(3);
  config.senderMean = true;
  config.maxNormRatio = 0;
  // a: sparse {0: 1, 1: 2}, 100 examples, 10 steps; b: sparse {1: 4, 2: 3}, 300
  // examples, 20 steps; c: dense 0.5 everywhere, 100 examples, 10 steps. Returns the
  // actions of the last arrival.
  auto runRound = [](RoundEngine& e) {
    for (const auto& [id, n] : {std::pair<const char*, uint64_t>{"a", 100}, {"b", 300}, {"c", 100}})
      e.clientJoined(id, n, 0, 0, 0);
    auto sparse = [](std::vector<uint32_t> idx, std::vector<float> val) {
      compression::Compressed c;
      c.encoding = compression::Encoding::kTopK;
      c.count = kDim;
      c.indices = std::move(idx);
      c.values = std::move(val);
      return c;
    };
    IncomingUpdate ua = update(1, 0, filled(0.0f), 100, 10);
    ua.delta = sparse({0, 1}, {1.0f, 2.0f});
    IncomingUpdate ub = update(1, 0, filled(0.0f), 300, 20);
    ub.delta = sparse({1, 2}, {4.0f, 3.0f});
    e.updateArrived("a", std::move(ua), 10);
    e.updateArrived("b", std::move(ub), 11);
    return e.updateArrived("c", update(1, 0, filled(0.5f), 100, 10), 12);
  };
  auto engine = RoundEngine::create(config, initialModel()).value();
  auto acts = runRound(*engine);
  REQUIRE(only<RoundEnded>(acts).size() == 1);
  // By hand: W = 500, stepSum = 100*10 + 300*20 + 100*10 = 8000, unit = stepSum / W = 16.
  // Coordinate i: unit * sum_{k sent i} w_k q_ki / steps_k / W_i.
  const double unit = 16.0;
  const double d0 = unit * (100 * 1.0 / 10 + 100 * 0.5 / 10) / 200;                   // a, c
  const double d1 = unit * (100 * 2.0 / 10 + 300 * 4.0 / 20 + 100 * 0.5 / 10) / 500;  // a, b, c
  const double d2 = unit * (300 * 3.0 / 20 + 100 * 0.5 / 10) / 400;                   // b, c
  const double d3 = unit * (100 * 0.5 / 10) / 100;                                    // c only
  const auto m0 = initialModel();
  CHECK(engine->model()[0] == Approx(m0[0] - d0).epsilon(1e-5));
  CHECK(engine->model()[1] == Approx(m0[1] - d1).epsilon(1e-5));
  CHECK(engine->model()[2] == Approx(m0[2] - d2).epsilon(1e-5));
  CHECK(engine->model()[3] == Approx(m0[3] - d3).epsilon(1e-5));
  // Off, coordinate 0 is averaged over all three: unit * (1 + 0.5) * 10 / 500.
  SECTION("off: the mean over all updates") {
    config.senderMean = false;
    auto plain = RoundEngine::create(config, initialModel()).value();
    REQUIRE(only<RoundEnded>(runRound(*plain)).size() == 1);
    CHECK(plain->model()[0] == Approx(m0[0] - unit * 15.0 / 500).epsilon(1e-5));
    CHECK(plain->model()[0] != Approx(engine->model()[0]).epsilon(1e-4));
  }
}

TEST_CASE("FedAdam and FedYogi: the server step follows the hand-computed moments", "[engine][server-optimizer]") {
  auto config = smallConfig(2);
  config.serverLr = 0.1;
  config.serverBeta1 = 0.9;
  config.serverBeta2 = 0.5;
  config.serverEps = 1e-3;
  // Two rounds: Delta = 1 everywhere, then 0.1 (both clients send the same, steps 10:
  // the step-normalized mean is the update itself).
  const double deltas[] = {1.0, 0.1};
  for (const char* opt : {"adam", "yogi"}) {
    DYNAMIC_SECTION(opt) {
      config.serverOptimizer = opt;
      const bool yogi = std::string(opt) == "yogi";
      auto engine = engineOf(config, 2);
      double m = 0, v = yogi ? 1e-6 : 0, x = initialModel()[7];
      for (int r = 0; r < 2; ++r) {
        const double g = deltas[r];
        m = 0.9 * m + 0.1 * g;
        if (yogi)
          v -= 0.5 * g * g * (v > g * g ? 1.0 : -1.0);
        else
          v = 0.5 * v + 0.5 * g * g;
        x -= 0.1 * m / (std::sqrt(v) + 1e-3);
        runOneRound(*engine, 2, uint64_t(r + 1), [&](uint32_t) { return filled(float(g)); });
        CHECK(engine->model()[7] == Approx(x).epsilon(1e-5));
      }
      // Adam's v fell to 0.255 in round 2, Yogi's only to 0.495: the two differ.
      CHECK(v == Approx(yogi ? 0.495001 : 0.255).epsilon(1e-6));
    }
  }
  SECTION("refused with sgd-only settings or bad betas") {
    config.serverOptimizer = "adam";
    config.serverMomentum = 0.5;
    CHECK(!RoundEngine::create(config, initialModel()));
    config.serverMomentum = 0;
    config.serverBeta2 = 1.0;
    CHECK(!RoundEngine::create(config, initialModel()));
    config.serverBeta2 = 0.99;
    config.serverOptimizer = "lamb";
    CHECK(!RoundEngine::create(config, initialModel()));
  }
}

TEST_CASE("downlink-error-cap scales the server memory to cap x ||p|| after a commit", "[engine][compression]") {
  auto config = smallConfig(1);
  config.downlink = "topk";
  config.downlinkDensity = 1.0 / double(kDim);  // one coordinate a round
  auto memoryNorm = [](const RoundEngine& e) {
    double s = 0;
    for (float x : e.snapshot().serverMemory)
      s += double(x) * double(x);
    return std::sqrt(s);
  };
  // Delta = 1 everywhere: ||p|| = 8 (64 ones); top-1 sends one, the memory keeps 63.
  for (double cap : {0.0, 0.5}) {
    DYNAMIC_SECTION("cap " << cap) {
      config.downlinkErrorCap = cap;
      auto engine = engineOf(config, 1);
      runOneRound(*engine, 1, 1, [](uint32_t) { return filled(1.0f); });
      CHECK(memoryNorm(*engine) == Approx(cap > 0 ? 0.5 * 8.0 : std::sqrt(63.0)).epsilon(1e-5));
    }
  }
}

TEST_CASE("relative downlink indices: replays are coded against the previous broadcast, bit for bit the same model",
          "[engine][catchup][relative]") {
  // 82 of 4,096 coordinates a broadcast, 80% of them the previous broadcast's; rounds of
  // 2 of 5 clients, caught up from the log.
  constexpr std::size_t d = 4096;
  auto config = smallConfig(2);
  config.rounds = 24;
  config.downlink = "topk";
  config.downlinkDensity = 0.02;
  config.downlinkShared = 0.8;
  config.catchUpByValue = false;
  config.minClients = 5;
  std::vector<float> start(d);
  for (std::size_t i = 0; i < d; ++i)
    start[i] = 0.001f * static_cast<float>(i % 97) - 0.05f;

  struct Outcome {
    uint64_t bytesDown = 0;
    uint64_t checksum = 0;
    int relativeFirst = 0;  // replays whose first tensor is relative
    int relativeLater = 0;  // relative tensors after a replay's first
    int standaloneLater = 0;
    bool rejoinChecked = false;
  };
  const std::vector<std::string> ids = {"a", "b", "c", "d", "e"};
  auto run = [&](bool relative) {
    config.downlinkRelativeIndices = relative;
    auto engine = RoundEngine::create(config, start).value();
    Outcome out;
    std::map<std::string, ClientModel> clients;
    std::vector<Action> acts;
    for (const auto& id : ids) {
      clients[id].model = start;
      acts = engine->clientJoined(id, 100, 0, 0, 0);
    }
    std::string rejoined;  // left and joined again after round 8: its next replay starts standalone
    for (int r = 1; r <= 24; ++r) {
      const auto assigns = only<Assign>(acts);
      REQUIRE(assigns.size() == 2);
      for (const auto& a : assigns) {
        const auto& b = a.assignment.broadcasts;
        for (std::size_t j = 0; j < b.size(); ++j) {
          const bool rel = b[j]->indexFormat == compression::IndexFormat::kRelative;
          CHECK((relative || !rel));
          if (j == 0) out.relativeFirst += rel ? 1 : 0;
          if (j > 0) (rel ? out.relativeLater : out.standaloneLater) += 1;
        }
        if (a.clientId == rejoined && !b.empty()) {
          CHECK(b[0]->indexFormat != compression::IndexFormat::kRelative);
          out.rejoinChecked = true;
          rejoined.clear();
        }
        CHECK(clients[a.clientId].apply(a.assignment));  // the coordinator's checksum
        std::vector<float> delta(d);
        for (std::size_t i = 0; i < d; ++i)
          delta[i] = std::sin(float(i * 7 + 3 * r) + float(a.clientId[0])) * (i % 5 == 0 ? 3.0f : 0.1f);
        acts = engine->updateArrived(a.clientId, update(a.assignment.round, a.assignment.baseRound, delta), 10 * r);
      }
      const auto ended = only<RoundEnded>(acts);
      REQUIRE(ended.size() == 1);
      out.bytesDown += ended[0].summary.bytesDownWire;
      if (r == 8) {
        // A client in neither the round just ended nor the one just assigned: it holds an
        // older model, reconnects (forgetting its indices) and is caught up later.
        std::set<std::string> busy;
        for (const auto& x : assigns)
          busy.insert(x.clientId);
        for (const auto& x : only<Assign>(acts))
          busy.insert(x.clientId);
        for (const auto& id : ids)
          if (busy.count(id) == 0) rejoined = id;
        REQUIRE(!rejoined.empty());
        ClientModel& c = clients[rejoined];
        engine->clientLeft(rejoined, "connection lost", 10 * r);
        c.lastIndices.reset();
        CHECK(only<Assign>(engine->clientJoined(rejoined, 100, c.round, checksum64(c.model), 10 * r)).empty());
      }
    }
    out.checksum = engine->modelChecksum();
    return out;
  };
  const Outcome plain = run(false);
  const Outcome coded = run(true);
  INFO("bytes down: " << plain.bytesDown << " standalone, " << coded.bytesDown << " relative");
  CHECK(coded.checksum == plain.checksum);  // only the coding changes
  CHECK(plain.relativeFirst + plain.relativeLater == 0);
  CHECK(coded.relativeFirst > 0);
  CHECK(coded.relativeLater > 0);
  CHECK(coded.standaloneLater == 0);
  CHECK(coded.rejoinChecked);
  CHECK(coded.bytesDown < plain.bytesDown);

  SECTION("only with a top-k downlink") {
    config.downlinkRelativeIndices = true;
    config.downlinkShared = 0;
    config.downlink = "identity";
    const auto refused = RoundEngine::create(config, start);
    REQUIRE_FALSE(refused.isOk());
    CHECK_THAT(refused.status().message(), Catch::Contains("relative downlink indices need a topk"));
  }
}

// Relays: local rounds between exchanges with the coordinator.
TEST_CASE("engine: held after n commits, no round starts; adopt() takes the model to the target and releases it",
          "[engine][relay]") {
  for (const bool topk : {false, true}) {
    DYNAMIC_SECTION((topk ? "top-k downlink with error feedback" : "dense downlink")) {
      EngineConfig c = smallConfig(2);
      c.rounds = 10;
      if (topk) {
        c.downlink = "topk";
        c.downlinkDensity = 0.25;
        c.errorFeedback = true;
      }
      auto engine = RoundEngine::create(c, initialModel()).value();
      engine->holdAfter(2);
      int64_t now = 0;
      std::map<std::string, ClientModel> clients;
      std::vector<Action> actions;
      for (const char* id : {"a", "b"}) {
        clients[id].model = initialModel();
        for (auto& a : engine->clientJoined(id, 100, 0, checksum64(initialModel()), now))
          actions.push_back(std::move(a));
      }
      // Two rounds, each closed by both clients.
      for (uint64_t round = 1; round <= 2; ++round) {
        auto assigns = only<Assign>(actions);
        REQUIRE(assigns.size() == 2);
        actions.clear();
        for (const Assign& a : assigns) {
          REQUIRE(a.assignment.round == round);
          REQUIRE(clients[a.clientId].apply(a.assignment));
          std::vector<float> delta(kDim, 0.01f * float(round));
          for (auto& x : engine->updateArrived(a.clientId, update(round, a.assignment.baseRound, delta), now += 10))
            actions.push_back(std::move(x));
        }
        REQUIRE(only<RoundEnded>(actions).size() == 1);
        CHECK(only<RoundEnded>(actions)[0].summary.committed);
      }
      // Held: both clients idle, yet nothing is assigned, not even on a tick.
      CHECK(engine->held());
      CHECK(only<Assign>(actions).empty());
      CHECK(only<Assign>(engine->tick(now += 5000)).empty());
      CHECK(engine->commits() == 2);

      // The coordinator's model: the target.
      std::vector<float> target = initialModel();
      for (std::size_t i = 0; i < kDim; ++i)
        target[i] += 0.05f * std::sin(float(i));
      const std::vector<float> memoryBefore(engine->snapshot().serverMemory);
      const std::vector<float> modelBefore(engine->model().begin(), engine->model().end());
      auto adopted = engine->adopt(target, 4, now += 10);
      REQUIRE(adopted.isOk());
      auto ended = only<RoundEnded>(*adopted);
      REQUIRE(ended.size() == 1);
      CHECK(ended[0].summary.round == 3);
      CHECK(ended[0].summary.committed);
      CHECK(ended[0].summary.participants.empty());
      CHECK(engine->commits() == 3);
      CHECK_FALSE(engine->held());
      // model + memory moved by exactly target - model (the memory before included).
      const std::vector<float> memoryAfter(engine->snapshot().serverMemory);
      for (std::size_t i = 0; i < kDim; ++i) {
        const float before = modelBefore[i] - (memoryBefore.empty() ? 0.f : memoryBefore[i]);
        const float after = engine->model()[i] - (memoryAfter.empty() ? 0.f : memoryAfter[i]);
        INFO(i);
        CHECK(after - before == Approx(target[i] - modelBefore[i]).margin(1e-6));
        if (!topk) CHECK(engine->model()[i] == Approx(target[i]).margin(1e-6));
      }
      // Round 4 goes out at once; its catch-up brings each client to the adopted model.
      auto assigns = only<Assign>(*adopted);
      REQUIRE(assigns.size() == 2);
      for (const Assign& a : assigns) {
        CHECK(a.assignment.round == 4);
        CHECK(a.assignment.baseRound == 3);
        CHECK(clients[a.clientId].apply(a.assignment));
        CHECK(clients[a.clientId].model == std::vector<float>(engine->model().begin(), engine->model().end()));
      }
    }
  }
}

TEST_CASE("engine: adopt() with the upstream's pace: the local rounds ask for its tau and lr", "[engine][relay]") {
  EngineConfig config = smallConfig(1);
  config.tau = 5;
  config.tauMax = 40;
  config.lr = 0.1;
  auto engine = RoundEngine::create(config, initialModel()).value();
  engine->holdAfter(0);
  CHECK(only<Assign>(engine->clientJoined("a", 100, 0, checksum64(initialModel()), 0)).empty());  // held
  // Refused before anything commits.
  CHECK(engine->adopt(initialModel(), 2, 0, RoundEngine::UpstreamPace{0, 0.1}).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(engine->adopt(initialModel(), 2, 0, RoundEngine::UpstreamPace{7, -1}).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(engine->commits() == 0);
  auto actions = engine->adopt(initialModel(), 2, 10, RoundEngine::UpstreamPace{12, 0.025});
  REQUIRE(actions);
  auto assigned = only<Assign>(*actions);
  REQUIRE(assigned.size() == 1);
  CHECK(assigned[0].assignment.tau == 12);
  CHECK(assigned[0].assignment.lr == Approx(0.025));
  // An upstream tau past tauMax is clamped to it; without a pace the last one stays.
  engine->holdAfter(engine->commits());  // as Federation::cancelLocalRounds
  engine->abandonOpenRound("next assignment", 20);
  engine->clientLeft("a", "said goodbye", 21);
  CHECK(only<Assign>(engine->clientJoined("a", 100, 0, 0, 22)).empty());
  actions = engine->adopt(initialModel(), engine->commits() + 2, 30, RoundEngine::UpstreamPace{100, 0.05});
  REQUIRE(actions);
  assigned = only<Assign>(*actions);
  REQUIRE(assigned.size() == 1);
  CHECK(assigned[0].assignment.tau == 40);
  CHECK(assigned[0].assignment.lr == Approx(0.05));
}

TEST_CASE("engine: adopt() refuses a target of another size, a non-finite one, and an open sync round",
          "[engine][relay]") {
  auto engine = RoundEngine::create(smallConfig(1), initialModel()).value();
  CHECK(engine->adopt(std::vector<float>(kDim + 1), 1, 0).status().code() == StatusCode::kInvalidArgument);
  std::vector<float> bad = initialModel();
  bad[3] = std::nanf("");
  auto refused = engine->adopt(bad, 1, 0);
  REQUIRE_FALSE(refused.isOk());
  CHECK_THAT(refused.status().message(), Catch::Contains("non-finite parameter 3"));
  CHECK(only<Assign>(engine->clientJoined("a", 100, 0, checksum64(initialModel()), 0)).size() == 1);
  auto open = engine->adopt(initialModel(), 1, 10);
  REQUIRE_FALSE(open.isOk());
  CHECK_THAT(open.status().message(), Catch::Contains("round 1 is still open"));
  CHECK(engine->commits() == 0);
}
