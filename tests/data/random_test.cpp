// The private generator behind the partitioners (common/data/random.hpp).
#include "random.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

using starling::data::detail::Rng;
using starling::data::detail::splitMix64;

TEST_CASE("SplitMix64 matches its reference output", "[random]") {
  // The reference implementation (Vigna, splitmix64.c) seeded with 1234567.
  uint64_t state = 1234567;
  CHECK(splitMix64(state) == 6457827717110365317ULL);
  CHECK(splitMix64(state) == 3203168211198807973ULL);
}

TEST_CASE("bounded draws are uniform and in range", "[random]") {
  Rng rng(99);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) {
    const uint64_t x = rng.below(7);
    REQUIRE(x < 7);
    ++counts[x];
  }
  for (int c : counts)
    CHECK(c == Approx(10000).epsilon(0.05));
  CHECK(rng.below(1) == 0);
}

TEST_CASE("Gamma draws have mean and variance equal to their shape", "[random]") {
  for (double shape : {0.05, 0.3, 1.0, 2.5, 30.0}) {
    Rng rng(static_cast<uint64_t>(shape * 1000));
    const int n = 200000;
    double sum = 0.0;
    double sumSquares = 0.0;
    for (int i = 0; i < n; ++i) {
      const double g = std::exp(rng.logGamma(shape));
      sum += g;
      sumSquares += g * g;
    }
    const double mean = sum / n;
    const double variance = sumSquares / n - mean * mean;
    INFO("shape " << shape);
    CHECK(mean == Approx(shape).epsilon(0.03));
    CHECK(variance == Approx(shape).epsilon(0.08));
  }
}

TEST_CASE("normal draws are standard", "[random]") {
  Rng rng(5);
  const int n = 200000;
  double sum = 0.0;
  double sumSquares = 0.0;
  for (int i = 0; i < n; ++i) {
    const double x = rng.normal();
    sum += x;
    sumSquares += x * x;
  }
  CHECK(std::fabs(sum / n) < 0.01);
  CHECK(sumSquares / n == Approx(1.0).epsilon(0.02));
}
