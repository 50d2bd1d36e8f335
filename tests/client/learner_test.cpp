// client::Learner: the one local round of a device and of the simulator. A holding
// Learner (a device) and a borrowed-base one (a simulated client) with the same seed,
// task and data make the same update; verdicts and a reconnect's Welcome settle the
// pending updates by held_rounds / accepted_rounds.

#include "starling/client/learner.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "starling/compression/compressed.hpp"
#include "starling/compression/payload.hpp"
#include "starling/util/checksum.hpp"

#include "trainer/toy_data.hpp"

using namespace starling;
using namespace starling::client;

namespace {

constexpr const char* kSpec = "mlp:8-16-4";

wire::WelcomeMsg task(bool prioritySampling = true) {
  wire::WelcomeMsg w;
  w.clientId = "client-1";
  w.task = "toy";
  w.modelSpec = kSpec;
  w.hyper = wire::HyperParameters{0.05f, 0.9f, 0.0f, 8, 5, 0.0f, prioritySampling, 7, 0.0f};
  w.compression = wire::CompressionSettings{"topk", 0.25f, "identity", 1.0f, true, false, 0.0f, false, 23};
  w.initSeed = 3;
  return w;
}

// The round-0 model the coordinator would start from.
std::vector<float> initialModel() {
  model::Model m = test::toyModel(kSpec, 3);
  return {m.params().begin(), m.params().end()};
}

// Assignment of `round` from the round-0 model, caught up by a dense copy of `base`.
wire::RoundAssignMsg assign(uint64_t round, std::span<const float> base) {
  wire::RoundAssignMsg a{round, 0, 5, 0.05f, 0.25f, 1000, {}, 0, wire::denseView(base), std::nullopt};
  a.baseChecksum = checksum64(base);
  return a;
}

}  // namespace

TEST_CASE("a device's Learner and a simulated client's make the same updates", "[client][learner]") {
  const data::Dataset shard = test::blobs(64, 8, 4, 11);
  const std::vector<float> base = initialModel();
  const uint64_t seed = clientSeed(0, "client-1");

  Learner device(LearnerOptions{seed}, nullptr);
  REQUIRE(device.welcome(task(), shard).isOk());
  auto sharedTask = LearnerTask::create(task());
  REQUIRE(sharedTask.isOk());
  Learner simulated(*sharedTask, LearnerOptions{seed});

  for (uint64_t round = 1; round <= 3; ++round) {
    // Both hold `base` (the device catches up to it by a dense copy); each round's
    // verdict commits the update, so the memories evolve alike.
    const auto a = assign(round, base);
    REQUIRE(device.catchUp(a).isOk());
    auto fromDevice = device.train(a);
    auto fromSim = simulated.train(a, base, shard);
    REQUIRE(fromDevice.isOk());
    REQUIRE(fromSim.isOk());
    CHECK(fromDevice->stats.steps == 5);
    CHECK(fromDevice->stats.lossStart == fromSim->stats.lossStart);
    CHECK(fromDevice->stats.lossEnd == fromSim->stats.lossEnd);
    CHECK(fromDevice->stats.prioritizedSteps == fromSim->stats.prioritizedSteps);
    CHECK(fromDevice->payload == fromSim->payload);
    CHECK(device.pending() == std::vector<uint64_t>{round});
    device.settle(round, true);
    simulated.settle(round, true);
  }
  CHECK(device.stats().roundsAccepted == 3);
  CHECK(simulated.stats().roundsAccepted == 3);
}

TEST_CASE("an assignment's batch scale sets the round's minibatch (dynamic batch sizes)", "[client][learner][dbs]") {
  const data::Dataset shard = test::blobs(64, 8, 4, 11);
  const std::vector<float> base = initialModel();
  const uint64_t seed = clientSeed(0, "client-1");
  for (const auto& [scale, batch] : {std::pair{0.5f, 4}, std::pair{3.0f, 24}, std::pair{0.01f, 1}}) {
    INFO("scale " << scale);
    Learner device(LearnerOptions{seed}, nullptr);
    REQUIRE(device.welcome(task(), shard).isOk());
    auto sharedTask = LearnerTask::create(task());
    REQUIRE(sharedTask.isOk());
    Learner simulated(*sharedTask, LearnerOptions{seed});
    auto a = assign(1, base);
    a.batchScale = scale;
    REQUIRE(device.catchUp(a).isOk());
    auto fromDevice = device.train(a);
    auto fromSim = simulated.train(a, base, shard);
    REQUIRE(fromDevice.isOk());
    REQUIRE(fromSim.isOk());
    CHECK(fromDevice->stats.steps == 5);
    CHECK(fromDevice->stats.examples == 5u * uint64_t(batch));  // Welcome's 8 x the scale
    CHECK(fromDevice->message().examples == 5u * uint64_t(batch));
    CHECK(fromDevice->payload == fromSim->payload);
  }
}

TEST_CASE("a reconnect's Welcome settles the updates in flight", "[client][learner]") {
  const data::Dataset shard = test::blobs(64, 8, 4, 12);
  const std::vector<float> base = initialModel();
  Learner learner(LearnerOptions{1}, nullptr);
  REQUIRE(learner.welcome(task(false), shard).isOk());
  for (uint64_t round = 1; round <= 3; ++round) {
    const auto a = assign(round, base);
    REQUIRE(learner.catchUp(a).isOk());
    REQUIRE(learner.train(a).isOk());
  }
  REQUIRE(learner.pending() == std::vector<uint64_t>{1, 2, 3});

  SECTION("held stays pending, accepted commits, the rest is rolled back") {
    wire::WelcomeMsg w = task(false);
    w.round = 3;
    w.heldRounds = {3};
    w.acceptedRounds = std::vector<uint64_t>{1};
    REQUIRE(learner.welcome(w, shard).isOk());  // the same task: nothing rebuilt
    CHECK(learner.pending() == std::vector<uint64_t>{3});
    CHECK(learner.stats().roundsAccepted == 1);
    CHECK(learner.stats().roundsRejected == 1);
  }
  SECTION("a coordinator that names only its last accepted round") {
    wire::WelcomeMsg w = task(false);
    w.lastAcceptedRound = 2;
    learner.settleAfterReconnect(w);
    CHECK(learner.pending().empty());
    CHECK(learner.stats().roundsAccepted == 2);
    CHECK(learner.stats().roundsRejected == 1);
  }
}

TEST_CASE("a catch-up that ends on another checksum goes back to round 0", "[client][learner]") {
  const data::Dataset shard = test::blobs(32, 8, 4, 13);
  Learner learner(LearnerOptions{1}, nullptr);
  REQUIRE(learner.welcome(task(), shard).isOk());
  std::vector<float> base = initialModel();
  auto a = assign(4, base);
  a.baseChecksum ^= 1;
  const Status st = learner.catchUp(a);
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("checksum mismatch"));
  CHECK(learner.heldRound() == 0);
  CHECK(std::memcmp(learner.model().data(), base.data(), base.size() * sizeof(float)) == 0);  // the round-0 model
}

TEST_CASE("the uplink memory decays per missed round and is cleared after the task's limit", "[client][learner]") {
  // Three simulated clients, alike but for the policy, commit rounds 1 and 2 and are next
  // assigned round 5 (rounds 3 and 4 missed). Training depends on the seed and round only,
  // so the updates of round 5 differ by what each memory holds then.
  const data::Dataset shard = test::blobs(64, 8, 4, 13);
  const std::vector<float> base = initialModel();
  const auto make = [&](float decay, uint32_t resetAfter) {
    wire::WelcomeMsg w = task(false);
    w.compression->memoryDecay = decay;
    w.compression->memoryResetAfter = resetAfter;
    auto t = LearnerTask::create(w);
    REQUIRE(t.isOk());
    return Learner(*t, LearnerOptions{5});
  };
  Learner kept = make(1.0f, 0), halved = make(0.5f, 0), cleared = make(1.0f, 2);
  for (Learner* l : {&kept, &halved, &cleared})
    for (uint64_t round = 1; round <= 2; ++round) {
      REQUIRE(l->train(assign(round, base), base, shard).isOk());
      l->settle(round, true);
    }
  const std::vector<float> e2(kept.memory().begin(), kept.memory().end());
  REQUIRE(std::vector<float>(halved.memory().begin(), halved.memory().end()) == e2);
  double norm = 0;
  for (float x : e2)
    norm += double(x) * x;
  REQUIRE(norm > 0);
  // A fresh client's round-5 update: its memory is empty, as `cleared`'s is after 2 missed.
  Learner fresh = make(1.0f, 0);
  auto fromFresh = fresh.train(assign(5, base), base, shard);
  auto fromKept = kept.train(assign(5, base), base, shard);
  auto fromHalved = halved.train(assign(5, base), base, shard);
  auto fromCleared = cleared.train(assign(5, base), base, shard);
  REQUIRE((fromFresh.isOk() && fromKept.isOk() && fromHalved.isOk() && fromCleared.isOk()));
  CHECK(fromCleared->payload == fromFresh->payload);
  CHECK_FALSE(fromKept->payload == fromFresh->payload);
  CHECK_FALSE(fromHalved->payload == fromKept->payload);
  // e after round 5 = p - q with p = delta + (decayed e2): where neither top-k sent a
  // coordinate, e = p, so kept's and halved's memories differ there by e2 - e2 / 4.
  const auto sent = [&](const compression::Payload& payload) {
    compression::Compressed c;
    std::vector<float> q(base.size());
    REQUIRE(compression::decode(payload, static_cast<uint32_t>(base.size()), c).isOk());
    REQUIRE(compression::expand(c, q).isOk());
    return q;
  };
  const std::vector<float> qKept = sent(fromKept->payload), qHalved = sent(fromHalved->payload);
  std::size_t checked = 0;
  for (std::size_t i = 0; i < base.size(); ++i) {
    if (qKept[i] != 0 || qHalved[i] != 0 || std::fabs(e2[i]) < 1e-6f) continue;
    CHECK(kept.memory()[i] - halved.memory()[i] == Approx(0.75 * e2[i]).epsilon(1e-3).margin(1e-6));
    ++checked;
  }
  CHECK(checked > 0);
}

TEST_CASE("distributed noise: the clipped update plus this client's share, seeded alike on both sides",
          "[client][learner][privacy]") {
  const data::Dataset shard = test::blobs(64, 8, 4, 11);
  const std::vector<float> base = initialModel();
  const uint64_t seed = clientSeed(0, "client-1");
  auto privateTask = [](float noiseStd, const char* uplink) {
    wire::WelcomeMsg w = task();
    w.compression = wire::CompressionSettings{uplink, 0.25f, "identity", 1.0f, true, false, 0.0f, false, 23};
    w.compression->updateClipNorm = 0.5f;
    w.compression->updateNoiseStd = noiseStd;
    return w;
  };
  auto sent = [&](const LocalUpdate& u) {
    compression::Compressed q;
    REQUIRE(compression::decode(u.payload, uint32_t(base.size()), q).isOk());
    std::vector<float> v(base.size());
    REQUIRE(compression::expand(q, v).isOk());
    return v;
  };
  LearnerOptions noisy{seed};
  noisy.noiseSeed = 9;
  Learner clipped(LearnerOptions{seed}, nullptr);
  Learner device(noisy, nullptr);
  REQUIRE(clipped.welcome(privateTask(0.0f, "identity"), shard).isOk());
  REQUIRE(device.welcome(privateTask(0.2f, "identity"), shard).isOk());
  auto sharedTask = LearnerTask::create(privateTask(0.2f, "identity"));
  REQUIRE(sharedTask.isOk());
  Learner simulated(*sharedTask, noisy);
  const auto a = assign(1, base);
  REQUIRE(clipped.catchUp(a).isOk());
  REQUIRE(device.catchUp(a).isOk());
  auto plain = clipped.train(a);
  auto fromDevice = device.train(a);
  auto fromSim = simulated.train(a, base, shard);
  REQUIRE(plain.isOk());
  REQUIRE(fromDevice.isOk());
  REQUIRE(fromSim.isOk());
  CHECK(fromDevice->payload == fromSim->payload);  // the same seed, the same share
  const std::vector<float> p = sent(*plain), n = sent(*fromDevice);
  double norm = 0, mean = 0, var = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    norm += double(p[i]) * p[i];
    mean += double(n[i]) - p[i];
  }
  mean /= double(p.size());
  for (std::size_t i = 0; i < p.size(); ++i)
    var += (double(n[i]) - p[i] - mean) * (double(n[i]) - p[i] - mean);
  CHECK(std::sqrt(norm) <= 0.5 + 1e-6);  // clipped, before the share
  // The share: N(0, 0.2^2) on each of the 212 coordinates (the sd's own error ~5%).
  CHECK(std::fabs(mean) < 4 * 0.2 / std::sqrt(double(p.size())));
  CHECK(std::sqrt(var / double(p.size() - 1)) == Approx(0.2).epsilon(0.2));
  // A sparse uplink cannot carry a noised message: the task is refused at once.
  Learner sparse(noisy, nullptr);
  const Status refused = sparse.welcome(privateTask(0.2f, "topk"), shard);
  REQUIRE_FALSE(refused.isOk());
  CHECK_THAT(refused.message(), Catch::Contains("distributed noise needs a dense uplink (identity or fp16), not topk"));
}
