// ScoreTree: the table proposal's sum tree draws by mass exactly, follows updates, and
// its sums take any mean score and ageing at query time.
#include "starling/client/score_tree.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

using starling::client::ScoreTree;

namespace {

// The reference: masses entry by entry, m + down (key - m age), clamped at 0.
std::vector<double> masses(const ScoreTree& tree, double m, double down) {
  std::vector<double> out(tree.size());
  for (std::size_t i = 0; i < tree.size(); ++i)
    out[i] = std::max(0.0, m + down * (tree.key(i) - m * tree.age(i)));
  return out;
}

// The entry a linear scan over the cumulative masses gives for r.
std::size_t scan(const std::vector<double>& mass, double r) {
  for (std::size_t i = 0; i < mass.size(); ++i) {
    if (r < mass[i]) return i;
    r -= mass[i];
  }
  return mass.size() - 1;
}

// Pearson's statistic of counts against probabilities p (summing to 1) over `draws`.
double chiSquare(const std::vector<int>& counts, const std::vector<double>& p, int draws) {
  double x2 = 0.0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double expected = p[i] * draws;
    x2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return x2;
}

}  // namespace

TEST_CASE("the sum tree finds the same entry as a scan of the cumulative masses", "[score_tree]") {
  for (std::size_t n : {1u, 2u, 7u, 64u, 100u, 1000u}) {
    CAPTURE(n);
    std::mt19937_64 rng(n);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    ScoreTree tree(n);
    // Scored entries (key = score x age) and unscored ones (0, 0), mixed; as in the
    // sampler, down x age <= 1 (an age counts the steps since the base, down those since
    // the base until now), so no mass is negative.
    for (std::size_t i = 0; i < n; ++i)
      if (i % 3 != 1) {
        const double age = 1.0 + 0.6 * u(rng);
        tree.set(i, 2.0 * u(rng) * age, age);
      }
    for (double m : {0.0, 0.3}) {
      for (double down : {0.6, 0.45}) {
        const std::vector<double> mass = masses(tree, m, down);
        const double total = std::accumulate(mass.begin(), mass.end(), 0.0);
        CHECK(tree.total(m, down) == Approx(total).epsilon(1e-12));
        for (std::size_t i = 0; i < n; ++i)
          CHECK(tree.mass(i, m, down) == Approx(mass[i]).margin(1e-15));
        for (int k = 0; k < 500; ++k) {
          const double r = u(rng) * total;
          REQUIRE(tree.find(r, m, down) == scan(mass, r));
        }
        // At or past the total (rounding): the last entry with mass.
        const std::size_t last = tree.find(total * (1 + 1e-9), m, down);
        CHECK(mass[last] > 0.0);
        for (std::size_t i = last + 1; i < n; ++i)
          CHECK(mass[i] == 0.0);
      }
    }
  }
}

TEST_CASE("draws from the sum tree follow the exact probabilities (chi-square)", "[score_tree][statistical]") {
  const std::size_t n = 50;
  ScoreTree tree(n);
  std::vector<double> score(n);
  for (std::size_t i = 0; i < n; ++i) {
    score[i] = 0.05 + static_cast<double>((i * 37) % 11);  // ratios up to about 200
    tree.set(i, score[i], 1.0);
  }
  const int draws = 200000;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto check = [&](double m, double down) {
    const std::vector<double> mass = masses(tree, m, down);
    const double total = tree.total(m, down);
    std::vector<double> p(n);
    for (std::size_t i = 0; i < n; ++i)
      p[i] = mass[i] / total;
    std::vector<int> counts(n, 0);
    for (int k = 0; k < draws; ++k)
      ++counts[tree.find(u(rng) * total, m, down)];
    // 49 degrees of freedom: the 99.9% quantile is 85.4.
    CHECK(chiSquare(counts, p, draws) < 85.4);
  };
  check(0.0, 1.0);
  // Updates move the distribution: the first ten entries ten times their score.
  for (std::size_t i = 0; i < 10; ++i)
    tree.set(i, 10.0 * score[i], 1.0);
  check(0.0, 1.0);
  // Ageing halfway back to a mean of 2 (down = 0.5): every score s becomes 1 + s / 2.
  check(2.0, 0.5);
  const std::vector<double> aged = masses(tree, 2.0, 0.5);
  CHECK(aged[20] == Approx(1.0 + score[20] / 2.0));
}

TEST_CASE("rescaling the sum tree keeps the masses and drops accumulated rounding", "[score_tree]") {
  const std::size_t n = 300;
  ScoreTree tree(n);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  // Many updates of widely different sizes, as keys grow with ageing^-t.
  for (int k = 0; k < 20000; ++k) {
    const double age = std::pow(1.001, k / 4);
    tree.set(static_cast<std::size_t>(k * 7919 % n), u(rng) * age, age);
  }
  const double m = 0.4;
  const double down = std::pow(0.999, 5000);
  const std::vector<double> before = masses(tree, m, down);
  // Rescaling by down moves the base: the masses at down' = 1 are the same.
  tree.rescale(down);
  const std::vector<double> after = masses(tree, m, 1.0);
  for (std::size_t i = 0; i < n; ++i)
    REQUIRE(after[i] == Approx(before[i]).epsilon(1e-12));
  CHECK(tree.total(m, 1.0) == Approx(std::accumulate(after.begin(), after.end(), 0.0)).epsilon(1e-14));
}
