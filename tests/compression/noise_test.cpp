// Differential privacy's noise sources (seeded and cryptographic) and distributed
// noise on a message (compression::addNoise).

#include "starling/compression/noise.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "starling/compression/compressor.hpp"
#include "starling/compression/fp16.hpp"

using namespace starling::compression;

namespace {

struct Moments {
  double mean = 0, variance = 0, kurtosis = 0;
};

Moments moments(const std::vector<float>& x) {
  const double n = double(x.size());
  double sum = 0;
  for (float v : x)
    sum += v;
  Moments m;
  m.mean = sum / n;
  double sq = 0, fourth = 0;
  for (float v : x) {
    const double d = double(v) - m.mean;
    sq += d * d;
    fourth += d * d * d * d;
  }
  m.variance = sq / n;
  m.kurtosis = fourth / n / (m.variance * m.variance);
  return m;
}

// Checks that x looks like n draws of N(0, s^2): mean, variance and kurtosis.
void checkGaussian(const std::vector<float>& x, double s) {
  const Moments m = moments(x);
  CHECK(std::fabs(m.mean) < 4 * s / std::sqrt(double(x.size())));
  CHECK(m.variance == Approx(s * s).epsilon(0.03));
  CHECK(m.kurtosis == Approx(3.0).epsilon(0.1));
}

}  // namespace

TEST_CASE("the seeded noise source is N(0, s^2), reproducible from its seed", "[noise]") {
  std::vector<float> a(20001, 0.0f), b(20001, 0.0f), c(20001, 0.0f);
  REQUIRE(seededNoise(7)->add(a, 3.0).isOk());
  REQUIRE(seededNoise(7)->add(b, 3.0).isOk());
  REQUIRE(seededNoise(8)->add(c, 3.0).isOk());
  CHECK(a == b);
  CHECK(a != c);
  checkGaussian(a, 3.0);
}

TEST_CASE("the cryptographic noise source is N(0, s^2) and never repeats", "[noise]") {
  auto first = secureNoise();
  auto second = secureNoise();
  REQUIRE(first.isOk());
  REQUIRE(second.isOk());
  // More than one generator request (1,024 bytes) per call.
  std::vector<float> a(20001, 0.0f), b(20001, 0.0f);
  REQUIRE((*first)->add(a, 0.5).isOk());
  REQUIRE((*second)->add(b, 0.5).isOk());
  CHECK(a != b);
  checkGaussian(a, 0.5);
}

TEST_CASE("addNoise noises every coordinate of a dense message, and refuses sparse ones", "[noise]") {
  const std::vector<float> update(4000, 0.25f);
  auto noise = seededNoise(11);
  SECTION("fp32") {
    Compressed q;
    REQUIRE(makeCompressor("identity").value()->compress(update, CompressParams{1.0, 0}, q).isOk());
    REQUIRE(addNoise(q, *noise, 0.1).isOk());
    REQUIRE(q.values.size() == update.size());
    std::vector<float> diff(update.size());
    for (std::size_t i = 0; i < diff.size(); ++i)
      diff[i] = q.values[i] - update[i];
    const Moments m = moments(diff);
    CHECK(std::fabs(m.mean) < 4 * 0.1 / std::sqrt(4000.0));
    CHECK(std::sqrt(m.variance) == Approx(0.1).epsilon(0.05));
  }
  SECTION("fp16: the noised values are binary16 again") {
    Compressed q;
    REQUIRE(makeCompressor("fp16").value()->compress(update, CompressParams{1.0, 0}, q).isOk());
    REQUIRE(addNoise(q, *noise, 0.1).isOk());
    std::size_t moved = 0;
    for (float v : q.values) {
      CHECK(halfToFloat(floatToHalf(v)) == v);
      moved += v != 0.25f;
    }
    CHECK(moved > 3900);
  }
  SECTION("zero noise leaves the message as it was") {
    Compressed q;
    REQUIRE(makeCompressor("identity").value()->compress(update, CompressParams{1.0, 0}, q).isOk());
    REQUIRE(addNoise(q, *noise, 0.0).isOk());
    CHECK(q.values == update);
  }
  SECTION("top-k is refused") {
    Compressed q;
    REQUIRE(makeCompressor("topk").value()->compress(update, CompressParams{0.01, 0}, q).isOk());
    auto st = addNoise(q, *noise, 0.1);
    REQUIRE_FALSE(st.isOk());
    CHECK_THAT(st.message(), Catch::Contains("dense"));
  }
  SECTION("a negative deviation is refused") {
    Compressed q;
    REQUIRE(makeCompressor("identity").value()->compress(update, CompressParams{1.0, 0}, q).isOk());
    CHECK_FALSE(addNoise(q, *noise, -1.0).isOk());
  }
}
