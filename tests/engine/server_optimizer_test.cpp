// ServerOptimizer alone: the server step on Delta (sgd, FedExP, momentum and its
// masking, adam, yogi), the served moving average and its checkpoint vectors.

#include "engine/server_optimizer.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <vector>

#include "fixtures.hpp"

using namespace starling;
using namespace starling::coordinator;

namespace {

ServerOptimizer make(const EngineConfig& c, std::size_t dim) {
  return testing::created(ServerOptimizer::create(c, dim));
}

}  // namespace

TEST_CASE("server optimizer: sgd scales Delta by the server lr", "[engine][server-optimizer]") {
  EngineConfig c;
  c.serverLr = 2.0;
  ServerOptimizer o = make(c, 2);
  std::vector<float> d{1.0f, -2.0f};
  CHECK(o.apply(d, 1.0) == 2.0);
  CHECK(d == std::vector<float>{2.0f, -4.0f});
}

TEST_CASE("server optimizer: FedExP extrapolates by max(1, spread / (2 ||Delta||^2))", "[engine][server-optimizer]") {
  EngineConfig c;
  c.extrapolate = true;
  ServerOptimizer o = make(c, 4);
  // Four orthogonal updates of norm 2: spread 4, Delta = 0.5 each, ||Delta||^2 = 1: K / 2 = 2.
  std::vector<float> d(4, 0.5f);
  CHECK(o.apply(d, 4.0) == Approx(2.0));
  CHECK(d == std::vector<float>(4, 1.0f));
  // Agreeing updates: spread = ||Delta||^2: a step of 1.
  std::vector<float> same(4, 0.5f);
  CHECK(o.apply(same, 1.0) == 1.0);
  CHECK(same == std::vector<float>(4, 0.5f));
  // No update added (no spread): the server lr alone.
  CHECK(o.apply(same, std::nullopt) == 1.0);
}

TEST_CASE("server optimizer: momentum u <- beta u + Delta, masked where the broadcast sent",
          "[engine][server-optimizer]") {
  EngineConfig c;
  c.serverMomentum = 0.5;
  ServerOptimizer o = make(c, 2);
  std::vector<float> d{1.0f, 1.0f};
  (void)o.apply(d, std::nullopt);
  CHECK(d == std::vector<float>{1.0f, 1.0f});
  d = {1.0f, 1.0f};
  (void)o.apply(d, std::nullopt);
  CHECK(d == std::vector<float>{1.5f, 1.5f});
  compression::Compressed q;
  q.encoding = compression::Encoding::kTopK;
  q.count = 2;
  q.indices = {0};
  q.values = {1.5f};
  o.broadcastSent(q);  // coordinate 0 was applied: not again through u
  d = {0.0f, 0.0f};
  (void)o.apply(d, std::nullopt);
  CHECK(d == std::vector<float>{0.0f, 0.75f});
  std::map<std::string, std::vector<float>> saved;
  o.saveVectors(saved);
  REQUIRE(saved.count("server-momentum") == 1);
  CHECK(saved["server-momentum"] == std::vector<float>{0.0f, 0.75f});

  SECTION("without masking u keeps every coordinate") {
    c.momentumMasking = false;
    ServerOptimizer unmasked = make(c, 2);
    std::vector<float> e{1.0f, 1.0f};
    (void)unmasked.apply(e, std::nullopt);
    unmasked.broadcastSent(q);
    e = {0.0f, 0.0f};
    (void)unmasked.apply(e, std::nullopt);
    CHECK(e == std::vector<float>{0.5f, 0.5f});
  }
}

TEST_CASE("server optimizer: adam and yogi steps from the moments", "[engine][server-optimizer]") {
  EngineConfig c;
  c.serverBeta1 = 0.9;
  c.serverBeta2 = 0.99;
  c.serverEps = 1e-3;
  SECTION("adam: m = 0.1, v = 0.01 after one step of 1: 0.1 / (0.1 + 0.001)") {
    c.serverOptimizer = "adam";
    ServerOptimizer o = make(c, 1);
    std::vector<float> d{1.0f};
    CHECK(o.apply(d, std::nullopt) == 1.0);
    CHECK(d[0] == Approx(0.1 / 0.101).epsilon(1e-5));
    std::map<std::string, std::vector<float>> saved;
    o.saveVectors(saved);
    CHECK(saved.count("server-first-moment") == 1);
    CHECK(saved.count("server-second-moment") == 1);
  }
  SECTION("yogi: v from eps^2 moves up by (1 - b2) g^2: 0.1 / (sqrt(0.010001) + 0.001)") {
    c.serverOptimizer = "yogi";
    ServerOptimizer o = make(c, 1);
    std::vector<float> d{1.0f};
    (void)o.apply(d, std::nullopt);
    CHECK(d[0] == Approx(0.1 / (std::sqrt(0.010001) + 0.001)).epsilon(1e-5));
  }
  SECTION("momentum and extrapolate belong to sgd") {
    c.serverOptimizer = "adam";
    c.serverMomentum = 0.9;
    CHECK_FALSE(ServerOptimizer::create(c, 1).isOk());
  }
}

TEST_CASE("server optimizer: the served model is the moving average of the committed models",
          "[engine][server-optimizer]") {
  EngineConfig c;
  c.modelEma = 0.5;
  ServerOptimizer o = make(c, 1);
  CHECK(o.average().empty());
  o.modelCommitted(std::vector<float>{2.0f});
  CHECK(o.average()[0] == 2.0f);
  o.modelCommitted(std::vector<float>{4.0f});
  CHECK(o.average()[0] == 3.0f);
  c.modelEma = 0;
  ServerOptimizer off = make(c, 1);
  off.modelCommitted(std::vector<float>{2.0f});
  CHECK(off.average().empty());
}

TEST_CASE("server optimizer: restores the vectors its configuration uses and refuses others",
          "[engine][server-optimizer]") {
  EngineConfig c;
  c.serverMomentum = 0.5;
  c.modelEma = 0.5;
  ServerOptimizer o = make(c, 2);
  CHECK(o.restoreVectors({{"server-momentum", {1.0f, 2.0f}}, {"model-average", {3.0f, 4.0f}}}).isOk());
  std::map<std::string, std::vector<float>> saved;
  o.saveVectors(saved);
  CHECK(saved["server-momentum"] == std::vector<float>{1.0f, 2.0f});
  CHECK(saved["model-average"] == std::vector<float>{3.0f, 4.0f});
  // Vectors of another optimizer are known but not used: left at their start.
  ServerOptimizer fresh = make(c, 2);
  CHECK(fresh.restoreVectors({{"server-second-moment", {1.0f, 1.0f}}}).isOk());
  saved.clear();
  fresh.saveVectors(saved);
  CHECK(saved.empty());
  CHECK(fresh.restoreVectors({{"server-velocity", {1.0f, 1.0f}}}).code() == StatusCode::kMalformed);
  CHECK(fresh.restoreVectors({{"server-momentum", {1.0f}}}).code() == StatusCode::kMalformed);
}
