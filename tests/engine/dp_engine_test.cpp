// Differential privacy and robust aggregation in the RoundEngine: clipping, the fixed
// denominator, the noise, Poisson sampling, the accountant's epsilon in every round,
// the budget, a resumed engine's epsilon, and the robust rules as aggregation parts.

#include <catch2/catch.hpp>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "starling/coordinator/round_engine.hpp"

#include "engine/privacy.hpp"
#include "fixtures.hpp"

using namespace starling;
using namespace starling::coordinator;
using starling::coordinator::testing::filled;
using starling::coordinator::testing::initialModel;
using starling::coordinator::testing::kDim;
using starling::coordinator::testing::only;
using starling::coordinator::testing::update;

namespace {

EngineConfig privateConfig(uint32_t k) {
  EngineConfig c;
  c.rounds = 50;
  c.clientsPerRound = k;
  c.overSelection = 1.0;
  c.deadlineMs = 1000;
  c.tau = 10;
  c.stepBudgets = false;
  c.clipNorm = 1.0;
  return c;
}

// The sample mean and standard deviation of the model's moves.
struct Spread {
  double mean = 0, sd = 0;
};
Spread spread(const std::vector<double>& moves) {
  const double n = double(moves.size());
  Spread s;
  s.mean = std::accumulate(moves.begin(), moves.end(), 0.0) / n;
  double var = 0;
  for (double m : moves)
    var += (m - s.mean) * (m - s.mean);
  s.sd = std::sqrt(var / (n - 1));
  return s;
}

std::string clientName(int i) {
  return "c" + std::to_string(1000 + i);
}

// Joins n clients; returns the actions of the last join.
std::vector<Action> joinAll(RoundEngine& e, int n, int64_t now = 0) {
  std::vector<Action> acts;
  for (int i = 0; i < n; ++i)
    acts = e.clientJoined(clientName(i), 100, 0, 0, now);
  return acts;
}

// Answers every assignment in `acts` with `delta` (same for all); returns all actions.
std::vector<Action> answerAll(RoundEngine& e, const std::vector<Action>& acts, const std::vector<float>& delta,
                              int64_t now) {
  std::vector<Action> out;
  for (const Assign& a : only<Assign>(acts)) {
    auto more = e.updateArrived(a.clientId, update(a.assignment.round, a.assignment.baseRound, delta), now);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

}  // namespace

TEST_CASE("privacy: updates are clipped, weighed alike and divided by the fixed denominator", "[engine][privacy]") {
  EngineConfig c = privateConfig(3);
  auto engine = RoundEngine::create(c, initialModel()).value();
  auto acts = joinAll(*engine, 3);
  auto assigns = only<Assign>(acts);
  REQUIRE(assigns.size() == 3);
  // Norms 0.8, 8 and 80 (kDim = 64 coordinates of 0.1, 1, 10): the first stays, the
  // others are clipped to 1. Examples differ, and do not weigh.
  const float values[] = {0.1f, 1.0f, 10.0f};
  const uint64_t examples[] = {10, 1000, 5};
  std::vector<Action> out;
  for (int i = 0; i < 3; ++i) {
    auto more = engine->updateArrived(assigns[i].clientId, update(1, 0, filled(values[i]), examples[i]), 10 + i);
    out.insert(out.end(), more.begin(), more.end());
  }
  auto ended = only<RoundEnded>(out);
  REQUIRE(ended.size() == 1);
  REQUIRE(ended[0].summary.committed);
  // Clipped: 0.1, 1/8 and 1/8 per coordinate; Delta = their sum / K = 0.35 / 3.
  const double delta = (0.1 + 0.125 + 0.125) / 3;
  for (std::size_t i = 0; i < kDim; ++i)
    CHECK(engine->model()[i] == Approx(initialModel()[i] - delta).margin(1e-6));
  // No noise: epsilon is infinite.
  REQUIRE(ended[0].summary.epsilon.has_value());
  CHECK(std::isinf(*ended[0].summary.epsilon));
}

TEST_CASE("privacy: the noise on the sum has standard deviation sigma x C over the denominator", "[engine][privacy]") {
  EngineConfig c = privateConfig(4);
  c.noiseMultiplier = 2.0;
  c.clipNorm = 0.5;
  c.rounds = 1;
  std::vector<double> moves;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    c.seed = seed;
    auto engine = RoundEngine::create(c, initialModel()).value();
    auto acts = joinAll(*engine, 4);
    answerAll(*engine, acts, filled(0.0f), 5);
    REQUIRE(engine->committedRound() == 1);
    for (std::size_t i = 0; i < kDim; ++i)
      moves.push_back(double(initialModel()[i]) - double(engine->model()[i]));
  }
  // Zero updates: the model moves by the noise alone, N(0, (2 x 0.5 / 4)^2) a coordinate.
  const auto [mean, sd] = spread(moves);
  CHECK(std::fabs(mean) < 4 * 0.25 / std::sqrt(double(moves.size())));
  CHECK(sd == Approx(0.25).epsilon(0.05));  // 3,840 samples: the sd's own error is ~1.1%
}

TEST_CASE("poisson sampling draws each idle client with the rate and waits for all it drew", "[engine][privacy]") {
  EngineConfig c = privateConfig(10);
  c.sampling = "poisson";
  c.samplingRate = 0.05;
  c.noiseMultiplier = 1.0;
  c.minClients = 400;  // the first round draws from the whole fleet
  auto engine = RoundEngine::create(c, initialModel()).value();
  auto acts = joinAll(*engine, 400);
  std::vector<double> drawn;
  int64_t now = 10;
  for (int round = 0; round < 30 && !engine->finished(); ++round) {
    auto assigns = only<Assign>(acts);
    drawn.push_back(double(assigns.size()));
    // All but the last answer: the round stays open (no K of them closes it).
    std::vector<Action> out;
    for (std::size_t i = 0; i < assigns.size(); ++i) {
      out = engine->updateArrived(assigns[i].clientId,
                                  update(assigns[i].assignment.round, assigns[i].assignment.baseRound, filled(0.01f)),
                                  now++);
      if (i + 1 < assigns.size()) REQUIRE(only<RoundEnded>(out).empty());
    }
    auto ended = only<RoundEnded>(out);
    REQUIRE(ended.size() == 1);
    CHECK(ended[0].summary.accepted == assigns.size());
    acts = out;
  }
  // 30 rounds of Binomial(400, 0.05): mean 20, sd of the mean 0.8.
  const double mean = std::accumulate(drawn.begin(), drawn.end(), 0.0) / double(drawn.size());
  CHECK(mean == Approx(20.0).margin(3.0));
  CHECK(*std::max_element(drawn.begin(), drawn.end()) > *std::min_element(drawn.begin(), drawn.end()));
  // Every round is the sampled Gaussian at q = 0.05, sigma = 1.
  PrivacyAccountant reference;
  REQUIRE(reference.addRounds(0.05, 1.0, engine->committedRound()).isOk());
  REQUIRE(engine->epsilon().has_value());
  CHECK(*engine->epsilon() == Approx(reference.spent(1e-5).epsilon).epsilon(1e-12));
}

TEST_CASE("privacy: epsilon grows each round, the budget stops training, and a resumed engine keeps it",
          "[engine][privacy]") {
  EngineConfig c = privateConfig(5);
  c.noiseMultiplier = 4.0;
  c.targetEpsilon = 3.0;
  c.rounds = 1000;
  c.minClients = 50;
  auto engine = RoundEngine::create(c, initialModel()).value();
  auto acts = joinAll(*engine, 50);
  double last = 0;
  std::optional<EngineSnapshot> mid;
  int64_t now = 10;
  bool finished = false;
  while (!finished) {
    acts = answerAll(*engine, acts, filled(0.01f), now += 10);
    for (const RoundEnded& e : only<RoundEnded>(acts)) {
      REQUIRE(e.summary.epsilon.has_value());
      CHECK(*e.summary.epsilon > last);
      CHECK(*e.summary.epsilon <= 3.0);
      last = *e.summary.epsilon;
    }
    finished = !only<Finished>(acts).empty();
    if (engine->committedRound() == 7 && !mid) mid = engine->snapshot();
    REQUIRE((finished || !only<Assign>(acts).empty()));
  }
  CHECK(engine->budgetSpent());
  // Fixed-size sampling, 5 of 50 idle: each round accounted without replacement at
  // q = 0.1 with multiplier sigma / 2 = 2 (replace-one), and one more would exceed 3.
  PrivacyAccountant reference;
  REQUIRE(reference.addRoundsWithoutReplacement(0.1, 2.0, engine->committedRound()).isOk());
  CHECK(last == Approx(reference.spent(1e-5).epsilon).epsilon(1e-12));
  REQUIRE(reference.addRoundsWithoutReplacement(0.1, 2.0, 1).isOk());
  CHECK(reference.spent(1e-5).epsilon > 3.0);

  REQUIRE(mid.has_value());
  auto resumed = RoundEngine::resume(c, *mid).value();
  PrivacyAccountant seven;
  REQUIRE(seven.addRoundsWithoutReplacement(0.1, 2.0, 7).isOk());
  REQUIRE(resumed->epsilon().has_value());
  CHECK(*resumed->epsilon() == Approx(seven.spent(1e-5).epsilon).epsilon(1e-12));
}

TEST_CASE("privacy: a late update is discarded, not applied to a round it was not sampled for", "[engine][privacy]") {
  EngineConfig c = privateConfig(2);
  c.overSelection = 1.5;  // 3 assigned, the round closes with 2
  c.minClients = 3;
  c.noiseMultiplier = 1.0;
  auto engine = RoundEngine::create(c, initialModel()).value();
  auto assigns = only<Assign>(joinAll(*engine, 3));
  REQUIRE(assigns.size() == 3);
  engine->updateArrived(assigns[0].clientId, update(1, 0, filled(0.01f)), 10);
  engine->updateArrived(assigns[1].clientId, update(1, 0, filled(0.01f)), 11);
  REQUIRE(engine->committedRound() == 1);
  auto late = engine->updateArrived(assigns[2].clientId, update(1, 0, filled(0.01f)), 12);
  auto verdicts = only<Verdict>(late);
  REQUIRE(verdicts.size() == 1);
  CHECK_FALSE(verdicts[0].verdict.accepted);
  CHECK_THAT(verdicts[0].verdict.reason, Catch::Contains("differential privacy"));
}

TEST_CASE("privacy settings that would break the guarantee are refused by name", "[engine][privacy]") {
  auto refused = [](EngineConfig c, const char* what) {
    auto e = RoundEngine::create(c, initialModel());
    REQUIRE_FALSE(e.isOk());
    CHECK_THAT(e.status().message(), Catch::Contains(what));
  };
  EngineConfig c = privateConfig(3);
  c.mode = "async";
  c.noiseMultiplier = 1;
  c.noisePlacement = "distributed";
  refused(c, "distributed noise in the asynchronous modes");
  c = privateConfig(3);
  c.stickyClients = 10;
  refused(c, "sticky");
  c = privateConfig(3);
  c.aggregation = "median";
  refused(c, "robust");
  c = privateConfig(3);
  c.senderMean = true;
  refused(c, "sender mean");
  c = privateConfig(3);
  c.sampling = "poisson";
  refused(c, "sampling rate");
  c = privateConfig(3);
  c.sampling = "bernoulli";
  refused(c, "unknown sampling");
  c = privateConfig(3);
  c.targetEpsilon = 2;
  refused(c, "target epsilon without noise");
  c = privateConfig(3);
  c.clipNorm = 0;
  c.noiseMultiplier = 1;
  refused(c, "needs a clip norm");
  c = privateConfig(3);
  c.privacyDelta = 0;
  refused(c, "delta");
  c = privateConfig(3);
  c.noiseMultiplier = 1;
  c.noisePlacement = "local";
  refused(c, "unknown noise placement");
  c.noisePlacement = "distributed";
  c.sampling = "poisson";
  c.samplingRate = 0.5;
  refused(c, "distributed noise under poisson sampling");
  c.sampling = "fixed";
  c.uplink = "topk";
  refused(c, "distributed noise over the topk uplink");
  c.uplink = "identity";
  c.noiseMultiplier = 0;
  refused(c, "distributed noise without a noise multiplier");
  c = privateConfig(3);
  c.noiseShares = 5;
  refused(c, "noise shares are for distributed noise");
  c = privateConfig(3);
  c.noiseMultiplier = 1;
  c.noisePlacement = "distributed";
  c.serverClipNorm = 2;
  refused(c, "distributed noise and server-side clipping");
  c = privateConfig(3);
  c.mode = "ssp";
  refused(c, "the ssp and dssp modes");
}

TEST_CASE("distributed noise: the engine adds only the shares a round lacks, and clips no noised message",
          "[engine][privacy]") {
  EngineConfig c = privateConfig(4);
  c.noisePlacement = "distributed";
  c.noiseMultiplier = 2.0;
  c.clipNorm = 0.5;
  c.rounds = 1;
  CHECK(noiseShares(c) == 4);
  CHECK(noiseShareStd(c) == Approx(2.0 * 0.5 / 2));
  {
    // All four shares arrived: the sum is released as it is. Their messages (norm 8,
    // a clipped update plus its noise share) are not clipped again.
    auto engine = RoundEngine::create(c, initialModel()).value();
    auto acts = joinAll(*engine, 4);
    answerAll(*engine, acts, filled(1.0f), 5);
    REQUIRE(engine->committedRound() == 1);
    for (std::size_t i = 0; i < kDim; ++i)
      CHECK(engine->model()[i] == Approx(initialModel()[i] - 1.0).margin(1e-6));
    REQUIRE(engine->epsilon().has_value());
    CHECK(std::isfinite(*engine->epsilon()));
  }
  {
    // A sparse message cannot carry a share on every coordinate: it is rejected.
    auto engine = RoundEngine::create(c, initialModel()).value();
    auto assigns = only<Assign>(joinAll(*engine, 4));
    REQUIRE(assigns.size() == 4);
    IncomingUpdate sparse = update(1, 0, filled(0.0f));
    sparse.delta.encoding = compression::Encoding::kTopK;
    sparse.delta.indices = {3};
    sparse.delta.values = {0.5f};
    auto acts = engine->updateArrived(assigns[0].clientId, std::move(sparse), 5);
    for (std::size_t i = 1; i < 4; ++i) {
      auto more = engine->updateArrived(assigns[i].clientId, update(1, 0, filled(0.0f)), 5);
      acts.insert(acts.end(), more.begin(), more.end());
    }
    auto ended = only<RoundEnded>(acts);
    REQUIRE(ended.size() == 1);
    int rejected = 0;
    for (const ParticipantResult& p : ended[0].summary.participants)
      if (p.outcome == ParticipantOutcome::kRejected) {
        ++rejected;
        CHECK_THAT(p.reason, Catch::Contains("must be dense"));
      }
    CHECK(rejected == 1);
  }
  // Two of the four return by the deadline: the engine adds the two missing shares,
  // N(0, sigma^2 C^2 x 2 / 4), before dividing by K = 4.
  std::vector<double> moves;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    c.seed = seed;
    auto engine = RoundEngine::create(c, initialModel()).value();
    auto acts = joinAll(*engine, 4);
    auto assigns = only<Assign>(acts);
    REQUIRE(assigns.size() == 4);
    for (int i = 0; i < 2; ++i)
      (void)engine->updateArrived(assigns[std::size_t(i)].clientId, update(1, 0, filled(0.0f)), 5);
    (void)engine->tick(c.deadlineMs + 10);
    REQUIRE(engine->committedRound() == 1);
    for (std::size_t i = 0; i < kDim; ++i)
      moves.push_back(double(initialModel()[i]) - double(engine->model()[i]));
  }
  const double expected = 2.0 * 0.5 * std::sqrt(2.0 / 4.0) / 4;
  CHECK(spread(moves).sd == Approx(expected).epsilon(0.05));
}

TEST_CASE("robust rules combine the round's updates as their references do", "[engine][robust]") {
  // Four honest clients send 0.1, 0.2, 0.3, 0.4 in every coordinate; the fifth 1000.
  auto run = [](const std::string& rule, uint32_t krumFaulty = 0) {
    EngineConfig c = privateConfig(5);
    c.clipNorm = 0;
    c.aggregation = rule;
    c.trimFraction = 0.2;
    c.krumFaulty = krumFaulty;
    c.maxNormRatio = 0;
    auto engine = RoundEngine::create(c, initialModel()).value();
    auto assigns = only<Assign>(joinAll(*engine, 5));
    REQUIRE(assigns.size() == 5);
    const float values[] = {0.1f, 0.2f, 0.3f, 0.4f, 1000.0f};
    for (int i = 0; i < 5; ++i)
      engine->updateArrived(assigns[i].clientId, update(1, 0, filled(values[i])), 10 + i);
    REQUIRE(engine->committedRound() == 1);
    return double(initialModel()[3]) - double(engine->model()[3]);
  };
  CHECK(run("mean") == Approx(1001.0 / 5).epsilon(1e-5));
  CHECK(run("median") == Approx(0.3).epsilon(1e-5));
  // beta 0.2 of 5: one cut at each end, the mean of 0.2, 0.3, 0.4.
  CHECK(run("trimmed-mean") == Approx(0.3).epsilon(1e-5));
  // f = 1: the four honest updates score lowest, and m = n - f = 4 of them are averaged.
  CHECK(run("multi-krum", 1) == Approx(0.25).epsilon(1e-5));
  EngineConfig c = privateConfig(5);
  c.clipNorm = 0;
  c.aggregation = "krum";
  auto e = RoundEngine::create(c, initialModel());
  REQUIRE_FALSE(e.isOk());
  CHECK_THAT(e.status().message(), Catch::Contains("unknown aggregation 'krum'"));
}

TEST_CASE("server-side clipping bounds each update under the mean", "[engine][robust]") {
  EngineConfig c = privateConfig(2);
  c.clipNorm = 0;
  c.serverClipNorm = 0.8;  // norm of 64 x 0.1
  c.maxNormRatio = 0;
  auto engine = RoundEngine::create(c, initialModel()).value();
  auto assigns = only<Assign>(joinAll(*engine, 2));
  engine->updateArrived(assigns[0].clientId, update(1, 0, filled(0.1f)), 10);
  engine->updateArrived(assigns[1].clientId, update(1, 0, filled(100.0f)), 11);
  REQUIRE(engine->committedRound() == 1);
  // Both 0.1 a coordinate after clipping: the weighted mean is 0.1.
  CHECK(double(initialModel()[0]) - double(engine->model()[0]) == Approx(0.1).epsilon(1e-5));
}

TEST_CASE("privacy: a poisson draw of nobody is a round of noise, accounted like any other", "[engine][privacy]") {
  EngineConfig c = privateConfig(1);
  c.sampling = "poisson";
  c.samplingRate = 0.01;  // 3 clients: most draws are empty
  c.noiseMultiplier = 1.0;
  c.minClients = 3;
  c.rounds = 20;
  auto engine = RoundEngine::create(c, initialModel()).value();
  auto acts = joinAll(*engine, 3);
  int64_t now = 10;
  uint32_t empty = 0;
  for (int guard = 0; guard < 100 && !engine->finished(); ++guard) {
    for (const RoundEnded& e : only<RoundEnded>(acts)) {
      CHECK(e.summary.committed);
      empty += e.summary.selected == 0 ? 1 : 0;
    }
    if (!only<WakeAt>(acts).empty() && only<Assign>(acts).empty()) {
      acts = engine->tick(now += 1);  // an empty draw closes on the next tick
      continue;
    }
    acts = answerAll(*engine, acts, filled(0.01f), now += 10);
  }
  CHECK(engine->committedRound() == 20);
  CHECK(empty > 10);
  PrivacyAccountant reference;
  REQUIRE(reference.addRounds(0.01, 1.0, 20).isOk());
  CHECK(*engine->epsilon() == Approx(reference.spent(1e-5).epsilon).epsilon(1e-12));
}

TEST_CASE("privacy: a run whose rounds bound nothing reports epsilon infinite and trains no further on a budget",
          "[engine][privacy]") {
  EngineConfig c = privateConfig(3);
  c.noiseMultiplier = 2.0;
  c.minClients = 3;
  c.rounds = 3;
  auto engine = RoundEngine::create(c, initialModel()).value();
  auto acts = joinAll(*engine, 3);
  for (int r = 0; r < 3; ++r)
    acts = answerAll(*engine, acts, filled(0.01f), 10 + r);
  REQUIRE(engine->committedRound() == 3);
  const EngineSnapshot fixed = engine->snapshot();
  SECTION("resumed with poisson sampling: the kinds mix") {
    EngineConfig p = c;
    p.rounds = 10;
    p.sampling = "poisson";
    p.samplingRate = 0.5;
    p.targetEpsilon = 100;
    auto resumed = RoundEngine::resume(p, fixed).value();
    REQUIRE(resumed->epsilon().has_value());
    CHECK(std::isinf(*resumed->epsilon()) == false);  // nothing of the new kind yet
    auto out = joinAll(*resumed, 3, 100);
    // The first poisson round would mix the kinds: refused by the budget once all are idle.
    bool finished = !only<Finished>(out).empty();
    for (int r = 0; r < 5 && !finished; ++r) {
      out = answerAll(*resumed, out, filled(0.01f), 200 + r);
      finished = !only<Finished>(out).empty();
    }
    CHECK(resumed->committedRound() == 3);
    CHECK(resumed->budgetSpent());
  }
  SECTION("privacy off for a round, then on again: epsilon infinite") {
    EngineConfig off = c;
    off.clipNorm = 0;
    off.noiseMultiplier = 0;
    off.rounds = 4;
    auto plain = RoundEngine::resume(off, fixed).value();
    auto out = joinAll(*plain, 3, 100);
    answerAll(*plain, out, filled(0.01f), 200);
    REQUIRE(plain->committedRound() == 4);
    EngineConfig on = c;
    on.rounds = 10;
    auto again = RoundEngine::resume(on, plain->snapshot()).value();
    REQUIRE(again->epsilon().has_value());
    CHECK(std::isinf(*again->epsilon()));
  }
}

namespace {

// Drives an asynchronous private engine: assignments are answered oldest first (so
// updates arrive stale), each with `value` in every coordinate, one millisecond apart.
// Returns every RoundEnded, and whether Finished came.
struct AsyncDrive {
  std::vector<RoundSummary> steps;
  bool finished = false;
};

AsyncDrive driveAsync(RoundEngine& e, int clients, float value, int maxUpdates) {
  AsyncDrive d;
  std::deque<Assign> queue;
  int64_t now = 0;
  auto take = [&](const std::vector<Action>& acts) {
    for (const Action& a : acts) {
      if (const auto* as = std::get_if<Assign>(&a)) queue.push_back(*as);
      if (const auto* r = std::get_if<RoundEnded>(&a)) d.steps.push_back(r->summary);
      if (std::holds_alternative<Finished>(a)) d.finished = true;
    }
  };
  for (int i = 0; i < clients; ++i)
    take(e.clientJoined(clientName(i), 100, 0, 0, now));
  for (int n = 0; n < maxUpdates && !queue.empty() && !d.finished; ++n) {
    const Assign a = queue.front();
    queue.pop_front();
    take(e.updateArrived(a.clientId, update(a.assignment.round, a.assignment.baseRound, filled(value)), ++now));
  }
  return d;
}

EngineConfig asyncPrivateConfig() {
  EngineConfig c = privateConfig(3);  // buffer K = 3
  c.mode = "async";
  c.concurrency = 4;
  c.minClients = 5;
  c.maxStaleness = 10;
  c.rounds = 30;
  c.clipNorm = 0.5;
  c.noiseMultiplier = 4.0;
  return c;
}

// epsilon of a client whose updates had weights w: the Gaussian mechanism composed with
// RDP(alpha) = sum 2 w^2 alpha / sigma^2, which is q = 1 at multiplier sigma / (2 sqrt(W)).
double individualEpsilon(double sumSquaredWeights, double sigma) {
  PrivacyAccountant a;
  REQUIRE(a.addRounds(1.0, sigma / (2 * std::sqrt(sumSquaredWeights)), 1).isOk());
  return a.spent(1e-5).epsilon;
}

}  // namespace

TEST_CASE("privacy in the asynchronous modes: each step clipped and noised over K, accounted per client",
          "[engine][privacy][async]") {
  EngineConfig c = asyncPrivateConfig();
  auto engine = RoundEngine::create(c, initialModel()).value();
  const AsyncDrive d = driveAsync(*engine, 5, 1.0f, 60);
  REQUIRE(d.steps.size() >= 10);
  std::map<std::string, double> weights;  // each client's sum of w^2 = s(staleness)^2
  bool stale = false;
  for (const RoundSummary& s : d.steps) {
    REQUIRE(s.committed);
    std::set<std::string> inStep;
    for (const ParticipantResult& p : s.participants) {
      if (p.outcome != ParticipantOutcome::kAccepted && p.outcome != ParticipantOutcome::kLateApplied) continue;
      CHECK(inStep.insert(p.clientId).second);  // at most once per step
      // poly:0.5, as it enters the float sum
      const double w = double(static_cast<float>(1.0 / std::pow(1.0 + p.staleness, 0.5)));
      weights[p.clientId] += w * w;
      stale = stale || p.staleness > 0;
    }
    double most = 0;
    for (const auto& [id, w] : weights)
      most = std::max(most, w);
    REQUIRE(s.epsilon.has_value());
    CHECK(*s.epsilon == Approx(individualEpsilon(most, 4.0)).epsilon(1e-9));
  }
  CHECK(stale);  // stale updates were applied (and cost less)
  // The state carries every client's spending: a resumed engine reports the same epsilon.
  auto resumed = RoundEngine::resume(c, engine->snapshot()).value();
  REQUIRE(resumed->epsilon().has_value());
  CHECK(*resumed->epsilon() == *engine->epsilon());
}

TEST_CASE("privacy in the asynchronous modes: a client whose next update could pass the target trains no more",
          "[engine][privacy][async]") {
  EngineConfig c = asyncPrivateConfig();
  // Room for three updates of weight 1 per client, not four.
  c.targetEpsilon = individualEpsilon(3.0, 4.0) * 1.0001;
  auto engine = RoundEngine::create(c, initialModel()).value();
  const AsyncDrive d = driveAsync(*engine, 5, 1.0f, 200);
  CHECK(d.finished);
  CHECK(engine->budgetSpent());
  REQUIRE_FALSE(d.steps.empty());
  CHECK(engine->committedRound() < 30);
  std::map<std::string, int> updates;
  for (const RoundSummary& s : d.steps) {
    for (const ParticipantResult& p : s.participants)
      if (p.outcome == ParticipantOutcome::kAccepted || p.outcome == ParticipantOutcome::kLateApplied)
        ++updates[p.clientId];
    REQUIRE(s.epsilon.has_value());
    CHECK(*s.epsilon <= c.targetEpsilon);
  }
  REQUIRE(updates.size() == 5);
  for (const auto& [id, n] : updates) {
    INFO(id);
    CHECK(n >= 3);  // stale updates weigh less, so some fit a fourth
  }
}

TEST_CASE("privacy in the asynchronous modes: a buffer only spent clients could fill is released as it is",
          "[engine][privacy][async]") {
  // K = 2 of three clients, each with room for one update. a and b fill step 1; c's
  // update is then alone in step 2's buffer and nobody else may train: step 2 is
  // released with it (over K = 2), and training ends.
  EngineConfig c = asyncPrivateConfig();
  c.clientsPerRound = 2;
  c.concurrency = 3;
  c.minClients = 3;
  c.targetEpsilon = individualEpsilon(1.0, 4.0) * 1.0001;
  auto engine = RoundEngine::create(c, initialModel()).value();
  const AsyncDrive d = driveAsync(*engine, 3, 0.0f, 20);
  CHECK(d.finished);
  CHECK(engine->budgetSpent());
  REQUIRE(d.steps.size() == 2);
  CHECK(d.steps[0].accepted == 2);
  CHECK(d.steps[1].accepted == 1);
  CHECK(d.steps[1].committed);
}

TEST_CASE("privacy in the asynchronous modes: a budget no client can afford ends training, also after a restart",
          "[engine][privacy][async]") {
  EngineConfig c = asyncPrivateConfig();
  SECTION("a target below one update's cost: nobody trains") {
    c.targetEpsilon = individualEpsilon(1.0, 4.0) * 0.9;
    auto engine = RoundEngine::create(c, initialModel()).value();
    const AsyncDrive d = driveAsync(*engine, 5, 1.0f, 10);
    CHECK(d.finished);
    CHECK(d.steps.empty());
    CHECK(engine->budgetSpent());
  }
  SECTION("a restart after the budget is spent trains no further") {
    c.targetEpsilon = individualEpsilon(2.0, 4.0) * 1.0001;
    auto engine = RoundEngine::create(c, initialModel()).value();
    const AsyncDrive d = driveAsync(*engine, 5, 1.0f, 200);
    REQUIRE(d.finished);
    auto resumed = RoundEngine::resume(c, engine->snapshot()).value();
    CHECK(*resumed->epsilon() == *engine->epsilon());
    const AsyncDrive again = driveAsync(*resumed, 5, 1.0f, 10);
    CHECK(again.finished);
    CHECK(again.steps.empty());
    CHECK(resumed->committedRound() == engine->committedRound());
  }
}

TEST_CASE("privacy in the asynchronous modes: a client whose update was refused is assigned again under a new number",
          "[engine][privacy][async]") {
  // One client, one slot, K = 1: its malformed update (no steps) is refused, the buffer
  // is empty and nobody else could fill it. The step is renumbered and the client
  // trains again instead of the run stalling.
  EngineConfig c = asyncPrivateConfig();
  c.clientsPerRound = 1;
  c.concurrency = 1;
  c.minClients = 1;
  auto engine = RoundEngine::create(c, initialModel()).value();
  auto first = only<Assign>(engine->clientJoined(clientName(0), 100, 0, 0, 0));
  REQUIRE(first.size() == 1);
  IncomingUpdate bad = update(first[0].assignment.round, first[0].assignment.baseRound, filled(0.0f));
  bad.steps = 0;
  auto again = only<Assign>(engine->updateArrived(first[0].clientId, std::move(bad), 5));
  REQUIRE(again.size() == 1);
  CHECK(again[0].clientId == first[0].clientId);
  CHECK(again[0].assignment.round > first[0].assignment.round);
  // Its next update closes a step.
  auto acts = engine->updateArrived(again[0].clientId,
                                    update(again[0].assignment.round, again[0].assignment.baseRound, filled(0.1f)), 10);
  CHECK(only<RoundEnded>(acts).size() == 1);
  CHECK(engine->committedRound() == again[0].assignment.round);  // the step's new number
}
