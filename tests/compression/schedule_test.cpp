#include "starling/compression/schedule.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <thread>

using namespace starling;
using namespace starling::compression;

TEST_CASE("warm-up falls geometrically to the target over W rounds (DGC)", "[schedule]") {
  auto s = WarmupDensity::create(0.001, 4);
  REQUIRE(s.isOk());
  const auto& w = **s;
  CHECK(w.density(0) == Approx(std::pow(0.001, 1.0 / 5)));  // 25%
  CHECK(w.density(0) == Approx(0.2512).epsilon(1e-3));
  CHECK(w.density(1) == Approx(0.0631).epsilon(1e-3));
  CHECK(w.density(2) == Approx(0.01585).epsilon(1e-3));
  CHECK(w.density(3) == Approx(0.00398).epsilon(1e-3));
  CHECK(w.density(4) == 0.001);
  CHECK(w.density(1000000) == 0.001);
  SECTION("W = 0 is the constant target") {
    auto none = WarmupDensity::create(0.01, 0);
    REQUIRE(none.isOk());
    CHECK((*none)->density(0) == 0.01);
  }
}

TEST_CASE("constant density is the same every round", "[schedule]") {
  auto s = ConstantDensity::create(0.02);
  REQUIRE(s.isOk());
  CHECK((*s)->density(0) == 0.02);
  CHECK((*s)->density(99) == 0.02);
}

TEST_CASE("controlled density returns what the controller set last", "[schedule]") {
  auto s = ControlledDensity::create(0.01);
  REQUIRE(s.isOk());
  auto& c = **s;
  CHECK(c.density(3) == 0.01);
  REQUIRE(c.set(0.004).isOk());
  CHECK(c.density(4) == 0.004);
  CHECK(c.set(0.0).code() == StatusCode::kInvalidArgument);
  CHECK(c.set(std::numeric_limits<double>::quiet_NaN()).code() == StatusCode::kInvalidArgument);
  CHECK(c.density(5) == 0.004);
  SECTION("set and density may run on different threads") {
    // Catch2 v2 assertions are not thread-safe: the writer only counts its failures
    // and the test thread checks the count once the writer has joined.
    int failedSets = 0;
    std::thread writer([&] {
      for (int i = 1; i <= 1000; ++i)
        if (!c.set(i / 1000.0).isOk()) ++failedSets;
    });
    int outOfRange = 0;
    for (int i = 0; i < 1000; ++i) {
      const double d = c.density(0);
      if (!(d > 0.0 && d <= 1.0)) ++outOfRange;
    }
    writer.join();
    CHECK(failedSets == 0);
    CHECK(outOfRange == 0);
    CHECK(c.density(0) == 1.0);
  }
}

TEST_CASE("schedules reject densities outside (0, 1]", "[schedule]") {
  CHECK_FALSE(ConstantDensity::create(0.0).isOk());
  CHECK_FALSE(ConstantDensity::create(1.5).isOk());
  CHECK_FALSE(WarmupDensity::create(-1.0, 3).isOk());
  CHECK_FALSE(ControlledDensity::create(std::numeric_limits<double>::infinity()).isOk());
}
