// Robust aggregation rules (coordinator/engine/robust.hpp) against references computed
// here by full sorts and explicit sums, and under attack: 20% of the updates hostile.
#include "engine/robust.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

using namespace starling::coordinator;

namespace {

std::vector<std::span<const float>> views(const std::vector<std::vector<float>>& updates) {
  return {updates.begin(), updates.end()};
}

std::vector<std::vector<float>> randomUpdates(std::size_t n, std::size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<std::vector<float>> out(n, std::vector<float>(dim));
  for (auto& u : out)
    for (float& x : u)
      x = g(rng);
  return out;
}

double distance(std::span<const float> a, std::span<const float> b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    d += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
  return std::sqrt(d);
}

}  // namespace

TEST_CASE("robust: the coordinate median and trimmed mean equal full-sort references", "[robust]") {
  for (std::size_t n : {1u, 2u, 7u, 8u, 10u}) {
    CAPTURE(n);
    const auto updates = randomUpdates(n, 64, 11 + static_cast<uint32_t>(n));
    std::vector<float> median(64), trimmed(64), mean(64);
    REQUIRE(coordinateMedian(views(updates), median).isOk());
    REQUIRE(trimmedMean(views(updates), 0.2, trimmed).isOk());
    REQUIRE(trimmedMean(views(updates), 0.0, mean).isOk());
    const std::size_t cut = static_cast<std::size_t>(std::floor(0.2 * double(n)));
    for (std::size_t i = 0; i < 64; ++i) {
      std::vector<double> column;
      for (const auto& u : updates)
        column.push_back(u[i]);
      std::sort(column.begin(), column.end());
      const double expectMedian = n % 2 ? column[n / 2] : (column[n / 2 - 1] + column[n / 2]) / 2;
      CHECK(median[i] == static_cast<float>(expectMedian));
      double kept = 0, all = 0;
      for (std::size_t k = 0; k < n; ++k) {
        all += column[k];
        if (k >= cut && k < n - cut) kept += column[k];
      }
      CHECK(trimmed[i] == Approx(kept / double(n - 2 * cut)).epsilon(1e-6).margin(1e-7));
      CHECK(mean[i] == Approx(all / double(n)).epsilon(1e-6).margin(1e-7));
    }
  }
}

TEST_CASE("robust: multi-Krum's scores on points worked by hand", "[robust]") {
  // 1-D points 0, 1, 2, 100 with f = 1: each score sums the squared distances to the
  // n - f - 2 = 1 nearest other point: 1, 1, 1 and 98^2. Krum (m = 1) keeps the first
  // of the tied; m = 3 keeps the three near ones.
  const std::vector<std::vector<float>> points = {{0.0f}, {1.0f}, {2.0f}, {100.0f}};
  auto one = multiKrumSelect(views(points), 1, 1);
  REQUIRE(one);
  CHECK(*one == std::vector<std::size_t>{0});
  std::vector<float> out(1);
  auto three = multiKrum(views(points), 1, 3, out);
  REQUIRE(three);
  CHECK(*three == std::vector<std::size_t>{0, 1, 2});
  CHECK(out[0] == 1.0f);
  // f = 0: two neighbours each: 0 -> 1 + 4, 1 -> 1 + 1, 2 -> 1 + 4, 100 -> 98^2 + 99^2.
  auto krum0 = multiKrumSelect(views(points), 0, 1);
  REQUIRE(krum0);
  CHECK(*krum0 == std::vector<std::size_t>{1});
}

TEST_CASE("robust: under 20% attackers the robust rules stay near the honest updates", "[robust]") {
  // 20 updates of 200 values: 16 honest ones around h (noise 0.1), 4 hostile of each kind.
  const std::size_t n = 20, bad = 4, dim = 200;
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> h(dim);
  for (float& x : h)
    x = g(rng);
  const std::string attack = GENERATE(as<std::string>{}, "sign-flip", "scaled", "noise");
  CAPTURE(attack);
  std::vector<std::vector<float>> updates(n, std::vector<float>(dim));
  for (std::size_t k = 0; k < n; ++k)
    for (std::size_t i = 0; i < dim; ++i) {
      const float honest = h[i] + 0.1f * g(rng);
      if (k < n - bad)
        updates[k][i] = honest;
      else if (attack == "sign-flip")
        updates[k][i] = -10.0f * honest;
      else if (attack == "scaled")
        updates[k][i] = 10.0f * honest;
      else
        updates[k][i] = 10.0f * g(rng);
    }
  const double scale = distance(h, std::vector<float>(dim, 0.0f));
  std::vector<float> mean(dim), median(dim), trimmed(dim), krum(dim);
  REQUIRE(trimmedMean(views(updates), 0.0, mean).isOk());
  REQUIRE(coordinateMedian(views(updates), median).isOk());
  REQUIRE(trimmedMean(views(updates), 0.2, trimmed).isOk());
  auto kept = multiKrum(views(updates), bad, n - bad, krum);
  REQUIRE(kept);
  // The attack is real: the plain mean moves by more than half of h.
  CHECK(distance(mean, h) > 0.5 * scale);
  // The robust rules stay within 15% of h's norm; multi-Krum keeps exactly the honest.
  CHECK(distance(median, h) < 0.15 * scale);
  CHECK(distance(trimmed, h) < 0.15 * scale);
  CHECK(distance(krum, h) < 0.15 * scale);
  std::vector<std::size_t> honest(n - bad);
  for (std::size_t k = 0; k < n - bad; ++k)
    honest[k] = k;
  CHECK(*kept == honest);
}

TEST_CASE("robust: server-side clipping scales to the norm and leaves the rest", "[robust]") {
  std::vector<float> v = {3.0f, 4.0f};
  CHECK(clipToNorm(v, 1.0) == Approx(0.2));
  CHECK(v[0] == Approx(0.6f));
  CHECK(v[1] == Approx(0.8f));
  std::vector<float> small = {0.3f, 0.4f};
  CHECK(clipToNorm(small, 1.0) == 1.0);
  CHECK(small == std::vector<float>{0.3f, 0.4f});
}

TEST_CASE("robust: bad inputs are refused by name", "[robust]") {
  std::vector<float> out(2);
  const std::vector<std::vector<float>> none;
  CHECK_THAT(coordinateMedian(views(none), out).message(), Catch::Contains("no update"));
  const std::vector<std::vector<float>> ragged = {{1, 2}, {1, 2, 3}, {0, 0}};
  CHECK_THAT(coordinateMedian(views(ragged), out).message(), Catch::Contains("update 1 has 3 values, expected 2"));
  const std::vector<std::vector<float>> three = {{1, 2}, {3, 4}, {5, 6}};
  CHECK_THAT(trimmedMean(views(three), 0.5, out).message(), Catch::Contains("beta 0.5"));
  CHECK_THAT(multiKrumSelect(views(three), 1, 1).status().message(), Catch::Contains("f + 3 = 4"));
  CHECK_THAT(multiKrumSelect(views(three), 0, 4).status().message(), Catch::Contains("m = 4 of 3"));
}

TEST_CASE("robust: multi-Krum keeps what a pairwise reference keeps, over several blocks of coordinates", "[robust]") {
  // The reference: squared distances pair by pair, scores over the n - f - 2 nearest,
  // the m lowest kept. 3,000 coordinates span three of the Gram matrix's blocks.
  const std::size_t n = 13, dim = 3000;
  std::mt19937 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<std::vector<float>> updates(n, std::vector<float>(dim));
  for (std::size_t k = 0; k < n; ++k)
    for (float& x : updates[k])
      x = (k % 4 == 3 ? 3.0f : 1.0f) * g(rng) + 0.5f;  // every fourth update spread wider
  for (std::size_t f = 0; f + 3 <= n; f += 3)
    for (std::size_t m : {std::size_t{1}, n / 2, n - f}) {
      CAPTURE(f, m);
      std::vector<double> score(n);
      for (std::size_t a = 0; a < n; ++a) {
        std::vector<double> d;
        for (std::size_t b = 0; b < n; ++b) {
          if (b == a) continue;
          double s = 0;
          for (std::size_t i = 0; i < dim; ++i)
            s += (double(updates[a][i]) - updates[b][i]) * (double(updates[a][i]) - updates[b][i]);
          d.push_back(s);
        }
        std::sort(d.begin(), d.end());
        score[a] = std::accumulate(d.begin(), d.begin() + std::ptrdiff_t(n - f - 2), 0.0);
      }
      std::vector<std::size_t> expected(n);
      std::iota(expected.begin(), expected.end(), std::size_t{0});
      std::stable_sort(expected.begin(), expected.end(), [&](auto a, auto b) { return score[a] < score[b]; });
      expected.resize(m);
      std::sort(expected.begin(), expected.end());
      auto kept = multiKrumSelect(views(updates), f, m);
      REQUIRE(kept);
      CHECK(*kept == expected);
    }
}
