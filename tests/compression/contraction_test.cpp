// Contraction E||C(v) - v||^2 <= (1 - delta)||v||^2 for the compressors used under error
// feedback, and unbiasedness E[C(v)] = v for QSGD and rescaled rand-k.

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "starling/compression/qsgd.hpp"

#include "vectors.hpp"

using namespace starling::compression;
using namespace starling::compression::test;

namespace {

struct ErrorEstimate {
  double mean = 0;      // mean of ||C(v) - v||^2 over the trials
  double stdError = 0;  // standard error of that mean
};

ErrorEstimate squaredError(Compressor& c, const std::vector<float>& v, double density, int trials) {
  double sum = 0, sumSq = 0;
  Compressed q;
  std::vector<float> out(v.size());
  for (int t = 0; t < trials; ++t) {
    REQUIRE(c.compress(v, {density, static_cast<std::uint64_t>(1000 + t)}, q).isOk());
    REQUIRE(expand(q, out).isOk());
    double e = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double diff = static_cast<double>(out[i]) - v[i];
      e += diff * diff;
    }
    sum += e;
    sumSq += e * e;
  }
  ErrorEstimate r;
  r.mean = sum / trials;
  const double var = trials > 1 ? std::max(0.0, (sumSq - sum * sum / trials) / (trials - 1)) : 0.0;
  r.stdError = std::sqrt(var / trials);
  return r;
}

std::vector<float> input(int shape, std::size_t d, std::uint64_t seed) {
  return shape == 0 ? gaussian(d, seed) : shape == 1 ? skewed(d, seed) : flat(d, seed);
}

}  // namespace

TEST_CASE("the compressors used under error feedback are contractions", "[contraction]") {
  const std::size_t d = 20000;
  const double density = 0.01;
  const double kOverD = static_cast<double>(*selectedCount(d, density)) / d;
  for (int shape = 0; shape < 3; ++shape) {
    const auto v = input(shape, d, 40 + shape);
    const double norm2 = sqNorm(v);
    DYNAMIC_SECTION("shape " << shape) {
      SECTION("identity and fp16 lose (almost) nothing") {
        auto id = make("identity");
        auto half = make("fp16");
        CHECK(squaredError(*id, v, density, 1).mean == 0.0);
        CHECK(squaredError(*half, v, density, 1).mean <= 1e-6 * norm2);
      }
      SECTION("top-k, exact and sampled: delta = k / d") {
        for (const char* name : {"topk", "topk-sampled"}) {
          auto c = make(name);
          const auto e = squaredError(*c, v, density, 1);
          CHECK(e.mean <= (1.0 - kOverD) * norm2);
        }
      }
      SECTION("ternary top-k: ||C(v) - v||^2 = ||v||^2 - sum over blocks |B| s_B^2 < ||v||^2") {
        CompressorOptions o;
        o.values = ValueFormat::kSignBits;
        for (const char* name : {"topk", "topk-sampled"}) {
          auto c = make(name, o);
          Compressed q;
          REQUIRE(c->compress(v, {density, 1000}, q).isOk());
          double kept = 0;  // sum over blocks of |B| s_B^2
          for (std::size_t j = 0; j < q.values.size(); ++j)
            kept += static_cast<double>(q.values[j]) * q.values[j];
          const auto e = squaredError(*c, v, density, 1);
          CHECK(e.mean == Approx(norm2 - kept).epsilon(1e-4));
          CHECK(e.mean <= (1.0 - 1.0 / d) * norm2);
        }
      }
      SECTION("rand-k: E||C(v) - v||^2 = (1 - k/d) ||v||^2") {
        auto c = make("randk");
        const auto e = squaredError(*c, v, density, 400);
        CHECK(e.mean <= (1.0 - kOverD) * norm2 + 4 * e.stdError);
        CHECK(e.mean >= (1.0 - kOverD) * norm2 - 4 * e.stdError);
      }
      SECTION("scaled sign: per block delta = ||v||_1^2 / (n ||v||_2^2)") {
        CompressorOptions o;
        o.signBlock = 256;
        auto c = make("sign", o);
        double deltaMin = 1.0;
        for (std::size_t b = 0; b < d; b += 256) {
          double l1 = 0, l2 = 0;
          const std::size_t n = std::min<std::size_t>(256, d - b);
          for (std::size_t i = b; i < b + n; ++i) {
            l1 += std::fabs(v[i]);
            l2 += static_cast<double>(v[i]) * v[i];
          }
          deltaMin = std::min(deltaMin, l1 * l1 / (n * l2));
        }
        REQUIRE(deltaMin >= 1.0 / 256);  // ||v||_1 >= ||v||_2 in every block
        const auto e = squaredError(*c, v, density, 1);
        CHECK(e.mean <= (1.0 - deltaMin) * norm2 * (1 + 1e-5));
      }
      SECTION("QSGD scaled by 1 / (1 + omega): delta = 1 / (1 + omega)") {
        for (std::uint32_t s : {1u, 4u, 15u}) {
          // What a link under error feedback gets (the client, the coordinator and the simulator).
          const CompressorOptions o = linkOptions(false, false, true, s);
          REQUIRE(o.qsgdContractive);
          REQUIRE(o.qsgdLevels == s);
          REQUIRE_FALSE(linkOptions(false, false, false, s).qsgdContractive);  // unbiased without it
          auto c = make("qsgd", o);
          const double delta = 1.0 / (1.0 + qsgdOmega(d, s));
          const auto e = squaredError(*c, v, density, 100);
          CHECK(e.mean <= (1.0 - delta) * norm2 + 4 * e.stdError);
        }
      }
    }
  }
}

namespace {

// Checks |mean_i - v_i| for every coordinate against the standard error implied by
// the compressor's variance under unbiasedness, variance(i), and the total squared
// bias against its expectation.
template <typename Variance>
bool looksUnbiased(Compressor& c, const std::vector<float>& v, double density, int trials, Variance variance) {
  const std::size_t d = v.size();
  std::vector<double> sum(d, 0.0);
  Compressed q;
  std::vector<float> out(d);
  for (int t = 0; t < trials; ++t) {
    REQUIRE(c.compress(v, {density, static_cast<std::uint64_t>(77 + t)}, q).isOk());
    REQUIRE(expand(q, out).isOk());
    for (std::size_t i = 0; i < d; ++i)
      sum[i] += out[i];
  }
  double bias2 = 0, expected = 0;
  bool ok = true;
  for (std::size_t i = 0; i < d; ++i) {
    const double mean = sum[i] / trials;
    const double se = std::sqrt(variance(i) / trials);
    bias2 += (mean - v[i]) * (mean - v[i]);
    expected += variance(i) / trials;
    if (std::fabs(mean - v[i]) > 5.5 * se + 1e-5 * std::fabs(v[i])) ok = false;
  }
  return ok && bias2 <= 1.5 * expected + 1e-9 * sqNorm(v);
}

// Var[C(v)_i] of QSGD: step^2 f (1 - f), f the fractional part of |v_i| / step.
auto qsgdVariance(const std::vector<float>& v, std::uint32_t s) {
  const double step = std::sqrt(sqNorm(v)) / s;
  return [&v, step](std::size_t i) {
    const double x = std::fabs(v[i]) / step;
    const double f = x - std::floor(x);
    return step * step * f * (1 - f);
  };
}

// Var[C(v)_i] of rand-k rescaled by d / k: v_i^2 (d / k - 1).
auto randkVariance(const std::vector<float>& v, double density) {
  return [&v, density](std::size_t i) { return static_cast<double>(v[i]) * v[i] * (1 / density - 1); };
}

}  // namespace

TEST_CASE("QSGD and rescaled rand-k are unbiased", "[unbiased]") {
  const auto v = skewed(1000, 5);
  SECTION("QSGD") {
    for (std::uint32_t s : {1u, 3u, 15u}) {
      CompressorOptions o;
      o.qsgdLevels = s;
      auto c = make("qsgd", o);
      CHECK(looksUnbiased(*c, v, 1.0, 4000, qsgdVariance(v, s)));
    }
  }
  SECTION("rand-k rescaled by d / k") {
    CompressorOptions o;
    o.randkRescale = true;
    auto c = make("randk", o);
    CHECK(looksUnbiased(*c, v, 0.1, 4000, randkVariance(v, 0.1)));
  }
  SECTION("the check detects bias: unscaled rand-k and contractive QSGD fail it") {
    auto randk = make("randk");
    CHECK_FALSE(looksUnbiased(*randk, v, 0.1, 4000, randkVariance(v, 0.1)));
    CompressorOptions o;
    o.qsgdContractive = true;
    auto qsgd = make("qsgd", o);
    CHECK_FALSE(looksUnbiased(*qsgd, v, 1.0, 4000, qsgdVariance(v, 15)));
  }
}
