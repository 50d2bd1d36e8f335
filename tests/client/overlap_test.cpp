// Overlap Local-SGD in client::Learner: the boundary's pull-back and anchor momentum
// against a double-precision computation of the formulas, the uplink memory's invariant
// over rounds with a rejected update, and the restart rule (first round, missed rounds,
// no background steps).

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "starling/client/learner.hpp"
#include "starling/compression/compressed.hpp"
#include "starling/compression/payload.hpp"
#include "starling/util/checksum.hpp"

#include "client/update_helpers.hpp"
#include "trainer/toy_data.hpp"

using namespace starling;
using namespace starling::client;
using starling::client::test::checkAuditInvariant;
using starling::client::test::sent;

namespace {

constexpr const char* kSpec = "mlp:8-16-4";

// alpha, beta; an identity uplink without error feedback sends the gap exactly.
wire::WelcomeMsg overlapTask(float alpha, float beta, bool topk = false) {
  wire::WelcomeMsg w;
  w.clientId = "client-1";
  w.task = "toy";
  w.modelSpec = kSpec;
  w.hyper = wire::HyperParameters{0.05f, 0.9f, 0.0f, 8, 5, 0.0f, false, 7, 0.0f, alpha, beta};
  w.compression = topk ? wire::CompressionSettings{"topk", 0.25f, "identity", 1.0f, true, false, 0.0f, false, 23}
                       : wire::CompressionSettings{"identity", 1.0f, "identity", 1.0f, false, false, 0.0f, false, 23};
  w.initSeed = 3;
  return w;
}

std::vector<float> initialModel() {
  model::Model m = test::toyModel(kSpec, 3);
  return {m.params().begin(), m.params().end()};
}

// The global model of round r: the round-0 model moved by a deterministic amount.
std::vector<float> globalModel(uint64_t r) {
  std::vector<float> g = initialModel();
  for (std::size_t i = 0; i < g.size(); ++i)
    g[i] += 0.01f * float(r) * std::sin(float(i) + float(r));
  return g;
}

// Round `round` on the model of round `base` (a dense catch-up).
wire::RoundAssignMsg assign(uint64_t round, uint64_t base, std::span<const float> model) {
  wire::RoundAssignMsg a{round, base, 5, 0.05f, 1.0f, 1000, {}, 0, wire::denseView(model), std::nullopt};
  a.baseChecksum = checksum64(model);
  return a;
}

}  // namespace

TEST_CASE("overlap: the boundary pulls x back towards the anchor and sends the gap", "[client][learner][overlap]") {
  const data::Dataset shard = test::blobs(64, 8, 4, 21);
  const float alpha = 0.2f;
  const float beta = GENERATE(0.0f, 0.5f);
  CAPTURE(beta);
  Learner learner(LearnerOptions{clientSeed(0, "client-1")}, nullptr);
  REQUIRE(learner.welcome(overlapTask(alpha, beta), shard).isOk());
  const std::size_t d = initialModel().size();

  // Round 1: no background steps yet, so they run in the foreground from the base.
  std::vector<float> g = globalModel(0);
  auto a = assign(1, 0, g);
  REQUIRE(learner.catchUp(a).isOk());
  auto first = learner.train(a);
  REQUIRE(first.isOk());
  CHECK_FALSE(first->overlapped);
  CHECK(learner.stats().overlapRestarts == 1);
  CHECK(first->stats.steps == 5);
  // The anchor of a restart is the base: z = g, v = 0.
  std::vector<double> z(g.begin(), g.end()), v(d, 0.0);
  learner.settle(1, true);

  for (uint64_t round = 2; round <= 4; ++round) {
    REQUIRE(learner.backgroundPending());
    auto bg = learner.advance();
    REQUIRE(bg.isOk());
    CHECK(bg->steps == 5);
    CHECK_FALSE(learner.backgroundPending());
    const std::vector<float> before(learner.localModel().begin(), learner.localModel().end());
    g = globalModel(round - 1);
    a = assign(round, round - 1, g);
    REQUIRE(learner.catchUp(a).isOk());
    auto u = learner.train(a);
    REQUIRE(u.isOk());
    CHECK(u->overlapped);
    CHECK(u->stats.steps == 5);  // the background steps' statistics
    // The formulas in double: v <- beta v + (g - z), z <- z + v (beta = 0: z = g);
    // x <- x - alpha (x - z); the gap g - x.
    double worst = 0;
    const std::vector<float> q = sent(*u, d);
    for (std::size_t i = 0; i < d; ++i) {
      if (beta > 0) {
        v[i] = double(beta) * v[i] + (double(g[i]) - z[i]);
        z[i] += v[i];
      } else {
        z[i] = g[i];
      }
      const double x = double(before[i]) - double(alpha) * (double(before[i]) - z[i]);
      worst = std::max(worst, std::fabs(x - double(learner.localModel()[i])));
      worst = std::max(worst, std::fabs((double(g[i]) - x) - double(q[i])));
    }
    CHECK(worst < 1e-5);
    learner.settle(round, true);
  }
  CHECK(learner.stats().overlapped == 3);
  CHECK(learner.stats().overlapRestarts == 1);
}

TEST_CASE("overlap: alpha 1 pulls x onto the base, leaving nothing to send", "[client][learner][overlap]") {
  // x <- z = the base at every boundary: the gap is 0 up to rounding (the background
  // steps are thrown away), the formula's extreme.
  const data::Dataset shard = test::blobs(64, 8, 4, 22);
  Learner learner(LearnerOptions{1}, nullptr);
  REQUIRE(learner.welcome(overlapTask(1.0f, 0.0f), shard).isOk());
  std::vector<float> g = globalModel(0);
  auto a = assign(1, 0, g);
  REQUIRE(learner.catchUp(a).isOk());
  REQUIRE(learner.train(a).isOk());
  learner.settle(1, true);
  REQUIRE(learner.advance().isOk());
  g = globalModel(1);
  a = assign(2, 1, g);
  REQUIRE(learner.catchUp(a).isOk());
  auto u = learner.train(a);
  REQUIRE(u.isOk());
  for (float q : sent(*u, g.size()))
    CHECK(std::fabs(q) < 1e-6f);
}

TEST_CASE("overlap: a device's Learner and a simulated client's make the same updates", "[client][learner][overlap]") {
  const data::Dataset shard = test::blobs(64, 8, 4, 23);
  const uint64_t seed = clientSeed(0, "client-1");
  const wire::WelcomeMsg w = overlapTask(0.2f, 0.3f, true);
  Learner device(LearnerOptions{seed}, nullptr);
  REQUIRE(device.welcome(w, shard).isOk());
  auto sharedTask = LearnerTask::create(w);
  REQUIRE(sharedTask.isOk());
  Learner simulated(*sharedTask, LearnerOptions{seed});
  for (uint64_t round = 1; round <= 4; ++round) {
    const std::vector<float> g = globalModel(round - 1);
    const auto a = assign(round, round - 1, g);
    REQUIRE(device.catchUp(a).isOk());
    auto fromDevice = device.train(a);
    auto fromSim = simulated.train(a, g, shard);
    REQUIRE((fromDevice.isOk() && fromSim.isOk()));
    CHECK(fromDevice->overlapped == (round > 1));
    CHECK(fromDevice->payload == fromSim->payload);
    device.settle(round, true);
    simulated.settle(round, true);
    auto b1 = device.advance();
    auto b2 = simulated.advance(shard);
    REQUIRE((b1.isOk() && b2.isOk()));
    CHECK(b1->lossEnd == b2->lossEnd);
  }
}

TEST_CASE(
    "overlap: the uplink memory's invariant holds over rounds with a rejected update, and the gap is what is "
    "compressed",
    "[client][learner][overlap]") {
  const data::Dataset shard = test::blobs(64, 8, 4, 24);
  LearnerOptions lo{9};
  lo.audit = true;
  Learner learner(lo, nullptr);
  REQUIRE(learner.welcome(overlapTask(0.2f, 0.0f, true), shard).isOk());
  const std::size_t d = initialModel().size();
  std::vector<double> applied(d, 0.0);
  for (uint64_t round = 1; round <= 6; ++round) {
    if (round > 1) REQUIRE(learner.advance().isOk());
    const std::vector<float> g = globalModel(round - 1);
    const auto a = assign(round, round - 1, g);
    REQUIRE(learner.catchUp(a).isOk());
    auto u = learner.train(a);
    REQUIRE(u.isOk());
    const std::vector<float> q = sent(*u, d);
    if (round > 1) {
      // p = q + e (nothing in flight): the gap g - x, not the gap plus the memory again.
      double worst = 0;
      for (std::size_t i = 0; i < d; ++i)
        worst = std::max(worst, std::fabs(double(q[i]) + double(learner.memory()[i]) -
                                          (double(g[i]) - double(learner.localModel()[i]))));
      CHECK(worst < 1e-5);
    }
    const bool accepted = round != 3;
    learner.settle(round, accepted);
    if (accepted)
      for (std::size_t i = 0; i < d; ++i)
        applied[i] += q[i];
  }
  CHECK(learner.stats().roundsRejected == 1);
  checkAuditInvariant(learner, applied);
}

TEST_CASE("overlap: a client that missed rounds or ran no background steps restarts from the base",
          "[client][learner][overlap]") {
  const data::Dataset shard = test::blobs(64, 8, 4, 25);
  const wire::WelcomeMsg w = overlapTask(0.2f, 0.0f);
  Learner learner(LearnerOptions{4}, nullptr);
  REQUIRE(learner.welcome(w, shard).isOk());
  std::vector<float> g = globalModel(0);
  auto a = assign(1, 0, g);
  REQUIRE(learner.catchUp(a).isOk());
  REQUIRE(learner.train(a).isOk());
  learner.settle(1, true);

  uint64_t round = 0, base = 0;
  SECTION("rounds missed: the base moved on by more than kOverlapStaleVersions") {
    REQUIRE(learner.advance().isOk());
    round = 10;
    base = 1 + kOverlapStaleVersions + 1;
  }
  SECTION("no background steps ran") {
    round = 2;
    base = 1;
  }
  g = globalModel(base);
  a = assign(round, base, g);
  REQUIRE(learner.catchUp(a).isOk());
  auto u = learner.train(a);
  REQUIRE(u.isOk());
  CHECK_FALSE(u->overlapped);
  CHECK(learner.stats().overlapRestarts == 2);
  // The same as a client's first round: tau steps from the base, x pulled back to it.
  Learner fresh(LearnerOptions{4}, nullptr);
  REQUIRE(fresh.welcome(w, shard).isOk());
  REQUIRE(fresh.catchUp(a).isOk());
  auto f = fresh.train(a);
  REQUIRE(f.isOk());
  CHECK(f->payload == u->payload);
}

TEST_CASE("overlap: the coordinator's alpha and beta are checked", "[client][learner][overlap]") {
  wire::WelcomeMsg w = overlapTask(1.5f, 0.0f);
  auto t = LearnerTask::create(w);
  REQUIRE_FALSE(t.isOk());
  CHECK_THAT(t.status().message(), Catch::Contains("overlap alpha"));
  w = overlapTask(0.2f, 1.0f);
  t = LearnerTask::create(w);
  REQUIRE_FALSE(t.isOk());
  CHECK_THAT(t.status().message(), Catch::Contains("overlap momentum"));
}

TEST_CASE("overlap: the uplink memory's decay for a missed round does not change what is compressed",
          "[client][learner][overlap]") {
  // Rounds 1 and 2, then round 4 on the next base (round 3 missed by number, the base
  // within kOverlapStaleVersions): the memory decays by half, and still p = q + e is
  // the gap, since the gap re-measures what the coordinator lacks.
  const data::Dataset shard = test::blobs(64, 8, 4, 26);
  wire::WelcomeMsg w = overlapTask(0.2f, 0.0f, true);
  w.compression->memoryDecay = 0.5f;
  Learner learner(LearnerOptions{6}, nullptr);
  REQUIRE(learner.welcome(w, shard).isOk());
  const std::size_t d = initialModel().size();
  for (uint64_t round : {1u, 2u, 4u}) {
    if (round > 1) REQUIRE(learner.advance().isOk());
    const uint64_t base = round == 4 ? 2 : round - 1;
    const std::vector<float> g = globalModel(base);
    const auto a = assign(round, base, g);
    REQUIRE(learner.catchUp(a).isOk());
    auto u = learner.train(a);
    REQUIRE(u.isOk());
    CHECK(u->overlapped == (round > 1));
    const std::vector<float> q = sent(*u, d);
    double worst = 0;
    for (std::size_t i = 0; i < d; ++i)
      worst = std::max(worst, std::fabs(double(q[i]) + double(learner.memory()[i]) -
                                        (double(g[i]) - double(learner.localModel()[i]))));
    CHECK(worst < 1e-5);
    learner.settle(round, true);
  }
}
