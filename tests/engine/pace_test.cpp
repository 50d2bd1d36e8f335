// Pace alone: tau (ADACOMM), the learning rate, the density warm-up and step budgets,
// against values computed by hand.

#include "engine/pace.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "fixtures.hpp"

using namespace starling;
using namespace starling::coordinator;

namespace {

EngineConfig paceConfig() {
  EngineConfig c;
  c.lr = 0.1;
  c.tau = 50;
  c.tauMin = 1;
  c.tauMax = 1000;
  c.deadlineMs = 1000;
  c.budgetFraction = 0.8;
  c.stepBudgets = true;
  return c;
}

Pace make(const EngineConfig& c) {
  return testing::created(Pace::create(c));
}

}  // namespace

TEST_CASE("pace: the learning rate decays geometrically with the committed rounds", "[engine][pace]") {
  EngineConfig c = paceConfig();
  c.lrDecay = 0.5;
  const Pace pace = make(c);
  CHECK(pace.lr(0) == Approx(0.1));
  CHECK(pace.lr(1) == Approx(0.05));
  CHECK(pace.lr(3) == Approx(0.0125));
}

TEST_CASE("pace: densities follow DGC's warm-up on links that take a density, 1 on others", "[engine][pace]") {
  EngineConfig c = paceConfig();
  c.uplink = "topk";
  c.uplinkDensity = 0.001;
  c.downlink = "identity";
  c.downlinkDensity = 0.5;
  c.warmupRounds = 4;
  const Pace pace = make(c);
  // rho^((w + 1) / (W + 1)): 0.001^(1/5) = 0.2512, 0.001^(4/5) = 0.00398, then rho.
  CHECK(pace.uplinkDensity(0) == Approx(0.251189).epsilon(1e-4));
  CHECK(pace.uplinkDensity(3) == Approx(0.0039811).epsilon(1e-4));
  CHECK(pace.uplinkDensity(4) == Approx(0.001));
  CHECK(pace.uplinkDensity(100) == Approx(0.001));
  CHECK(pace.downlinkDensity(0) == 1.0);  // identity takes no density
}

TEST_CASE("pace: step budgets from measured speed, the round's quantile and time budgets", "[engine][pace]") {
  EngineConfig c = paceConfig();
  const double inf = std::numeric_limits<double>::infinity();
  SECTION("80% of the deadline at the measured speed, within [tauMin, tau]") {
    c.tauMin = 10;
    const Pace pace = make(c);
    CHECK(pace.stepsFor(0, inf) == 50);                          // not measured: tau
    CHECK(pace.stepsFor(1.0, inf) == 50);                        // 800 affordable: tau
    CHECK(pace.stepsFor(1.0 / 64, inf) == 12);                   // 800 / 64 = 12.5
    CHECK(pace.stepsFor(0.005, inf) == 10);                      // 4 affordable: tauMin
    CHECK(pace.roundBudgetMs(std::vector<double>{0.1}) == inf);  // budgetQuantile off
  }
  SECTION("off: every client gets tau") {
    c.stepBudgets = false;
    CHECK(make(c).stepsFor(0.001, inf) == 50);
  }
  SECTION("budgetQuantile: the time the client at the quantile needs for tau") {
    c.budgetQuantile = 0.5;
    const Pace pace = make(c);
    // Sorted 1/16, 1/8, 1/4; the quantile's index floor(0.5 x 2) = 1: 50 / (1/8) = 400 ms.
    const double budget = pace.roundBudgetMs(std::vector<double>{0.25, 0.0625, 0.125});
    CHECK(budget == 400);
    CHECK(pace.roundBudgetMs(std::vector<double>{}) == inf);
    CHECK(pace.stepsFor(0.0625, budget) == 25);  // 400 / 16, not 800 / 16
    CHECK(pace.stepsFor(0.25, budget) == 50);    // could do 100; tau is the most
  }
  SECTION("budgetTauFactor: a fast client fills the quantile's time, up to factor x tau") {
    c.budgetQuantile = 0.5;
    c.budgetTauFactor = 3;
    const Pace pace = make(c);
    CHECK(pace.stepsFor(0.25, 400) == 100);  // 400 / 4
    CHECK(pace.stepsFor(1.0, 400) == 150);   // 400 affordable, 3 x 50 the most
  }
}

TEST_CASE("pace: ADACOMM sets tau from the smoothed loss and the learning rate", "[engine][pace]") {
  EngineConfig c = paceConfig();
  c.adaptiveTau = true;
  c.lossSmoothing = 0.5;
  SECTION("constant lr: tau = ceil(sqrt(F / F0) tau0)") {
    Pace pace = make(c);
    pace.roundCommitted(2.0, 1);  // F0 = F = 2
    CHECK(pace.tau() == 50);
    pace.roundCommitted(1.0, 2);  // F = 0.5 x 2 + 0.5 x 1 = 1.5: ceil(sqrt(0.75) x 50) = ceil(43.30)
    CHECK(pace.tau() == 44);
  }
  SECTION("a decayed lr raises tau by sqrt(lr0 / lr), clamped to tauMax") {
    c.lrDecay = 0.5;
    c.tauMax = 80;
    Pace pace = make(c);
    pace.roundCommitted(2.0, 1);
    pace.roundCommitted(1.0, 2);  // ratio 4 x 0.75 = 3: ceil(1.732 x 50) = 87, clamped to 80
    CHECK(pace.tau() == 80);
  }
  SECTION("off: tau stays") {
    c.adaptiveTau = false;
    Pace pace = make(c);
    pace.roundCommitted(2.0, 1);
    pace.roundCommitted(0.1, 2);
    CHECK(pace.tau() == 50);
  }
  SECTION("the state lines carry tau and the losses") {
    Pace pace = make(c);
    pace.roundCommitted(2.0, 1);
    pace.roundCommitted(1.0, 2);
    std::ostringstream out;
    out.precision(17);
    pace.writeState(out);
    CHECK(out.str() == "\ntau 44\nloss0 2\nloss 1.5\nhaveLoss 1");
    Pace back = make(c);
    testing::readStateText(back, out.str());
    CHECK(back.tau() == 44);
    back.roundCommitted(1.5, 3);  // F = 1.5 either way: the same tau as the original would give
    pace.roundCommitted(1.5, 3);
    CHECK(back.tau() == pace.tau());
    bool ok = true;
    std::istringstream other("5");
    CHECK_FALSE(back.readState("rng", other, ok));
  }
}

TEST_CASE("pace: refuses inconsistent settings", "[engine][pace]") {
  EngineConfig c = paceConfig();
  c.tauMin = 20;
  c.tauMax = 10;
  CHECK_FALSE(Pace::create(c).isOk());
  c = paceConfig();
  c.budgetTauFactor = 0.5;
  CHECK_FALSE(Pace::create(c).isOk());
}
