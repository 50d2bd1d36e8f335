// The task a relay runs for its clients, read back from the Welcome the coordinator
// makes of its own task (coordinator::taskWelcome): the same model, training and
// compression; the relay's own rounds.
#include "task.hpp"

#include <catch2/catch.hpp>

using namespace starling;

TEST_CASE("relay: the downstream task is the coordinator's, with the relay's rounds", "[relay]") {
  coordinator::EngineConfig e;
  e.lr = 0.03;
  e.tau = 4000;  // above the default tau-max
  e.tauMax = 5000;
  e.seed = 9;
  e.uplink = "topk-sampled";
  e.uplinkDensity = 0.02;
  e.downlink = "topk";
  e.downlinkDensity = 0.05;
  e.errorFeedback = true;
  e.fp16Values = true;
  e.uplinkTernary = true;
  e.modelMantissaBits = 10;
  e.qsgdLevels = 7;
  coordinator::TaskConfig t;
  t.name = "spam";
  t.model = "linear:8-1/logistic";
  t.initSeed = 5;
  t.batchSize = 16;
  t.momentum = 0.5f;
  t.weightDecay = 1e-4f;
  t.clipNorm = 2.0f;
  t.proxMu = 0.01f;
  t.overlap = 0.2f;
  t.overlapMomentum = 0.5f;
  t.prioritySampling = true;
  t.uplinkErrorCap = 3.0f;
  t.uplinkMemoryDecay = 0.9f;
  t.uplinkMemoryResetAfter = 4;
  relay::RelayRounds rounds;
  rounds.clientsPerRound = 7;
  rounds.overSelection = 1.5;
  rounds.minClients = 8;
  rounds.deadlineMs = 12'000;
  rounds.localRounds = 3;

  auto made = relay::downstreamTask(coordinator::taskWelcome(e, t), rounds);
  INFO(made.status().message());
  REQUIRE(made.isOk());
  const auto& [de, dt] = *made;
  CHECK(dt.name == "spam");
  CHECK(dt.model == "linear:8-1/logistic");
  CHECK(dt.kind == "binary");  // from the model's loss
  CHECK(dt.initSeed == 5);
  CHECK(dt.batchSize == 16);
  CHECK(dt.momentum == 0.5f);
  CHECK(dt.weightDecay == 1e-4f);
  CHECK(dt.clipNorm == 2.0f);
  CHECK(dt.proxMu == 0.01f);
  CHECK(dt.overlap == 0.2f);
  CHECK(dt.overlapMomentum == 0.5f);
  CHECK(dt.prioritySampling);
  CHECK(dt.uplinkErrorCap == 3.0f);
  CHECK(dt.uplinkMemoryDecay == 0.9f);
  CHECK(dt.uplinkMemoryResetAfter == 4);
  CHECK(dt.evalEvery == 0);
  CHECK(de.lr == Approx(0.03));
  CHECK(de.tau == 4000);
  CHECK(de.tauMax >= 4000);
  CHECK(de.seed == 9);
  CHECK(de.uplink == "topk-sampled");
  CHECK(de.uplinkDensity == Approx(0.02));
  CHECK(de.downlink == "topk");
  CHECK(de.downlinkDensity == Approx(0.05));
  CHECK(de.errorFeedback);
  CHECK(de.fp16Values);
  CHECK(de.uplinkTernary);
  CHECK(de.modelMantissaBits == 10);
  CHECK(de.qsgdLevels == 7);
  // The relay's own rounds.
  CHECK(de.clientsPerRound == 7);
  CHECK(de.overSelection == 1.5);
  CHECK(de.minClients == 8);
  CHECK(de.deadlineMs == 12'000);
  CHECK(de.rounds > 1'000'000);  // ends with the coordinator's task, not by itself
}

TEST_CASE("relay: tasks it cannot pass on are refused, saying why", "[relay]") {
  coordinator::EngineConfig e;
  coordinator::TaskConfig t;
  t.model = "mlp:4-8-3";
  wire::WelcomeMsg w = coordinator::taskWelcome(e, t);

  SECTION("a statistics round's scaling") {
    w.featureMean = {0, 0, 0, 0};
    w.featureStd = {1, 1, 1, 1};
    auto r = relay::downstreamTask(w, {});
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kUnsupported);
    CHECK_THAT(r.status().message(), Catch::Contains("relays do not pass statistics rounds on"));
  }
  SECTION("a walking-skeleton Welcome without settings") {
    w.hyper.reset();
    auto r = relay::downstreamTask(w, {});
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kMalformed);
  }
  SECTION("no local rounds") {
    relay::RelayRounds rounds;
    rounds.localRounds = 0;
    auto r = relay::downstreamTask(w, rounds);
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains("--local-rounds"));
  }
  SECTION("a model spec the relay cannot build") {
    w.modelSpec = "mlp:hidden:64";  // a short form: only a coordinator with data completes it
    auto r = relay::downstreamTask(w, {});
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains("the coordinator's model spec"));
  }
}
