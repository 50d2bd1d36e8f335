// The privacy accountant (coordinator/engine/privacy.hpp) against published values, the
// closed form without sampling, and A_alpha integrated numerically here.
#include "engine/privacy.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>
#include <vector>

using namespace starling::coordinator;

namespace {

// log A_alpha by numerical integration, the definition itself:
//   A_alpha = integral mu0(z) ((1 - q) + q exp((2z - 1) / (2 sigma^2)))^alpha dz,
// composite Simpson on [-40 sigma, 40 sigma + alpha + 1] in log space (the integrand
// is summed relative to its largest value). Independent of the accountant's series.
double logAIntegrated(double q, double sigma, double alpha) {
  const double lo = -40.0 * sigma, hi = 40.0 * sigma + alpha + 1.0;
  const int n = 400'000;  // even
  const double h = (hi - lo) / n;
  std::vector<double> logf(n + 1);
  double top = -INFINITY;
  for (int i = 0; i <= n; ++i) {
    const double z = lo + h * i;
    const double logMu0 = -z * z / (2 * sigma * sigma) - std::log(sigma * std::sqrt(2 * std::numbers::pi));
    // log((1 - q) + q e^u), u = (2z - 1) / (2 sigma^2), without overflow.
    const double u = (2 * z - 1) / (2 * sigma * sigma);
    const double a = std::log1p(-q), b = std::log(q) + u;
    const double base = std::max(a, b) + std::log1p(std::exp(std::min(a, b) - std::max(a, b)));
    logf[i] = logMu0 + alpha * base;
    top = std::max(top, logf[i]);
  }
  double sum = 0;
  for (int i = 0; i <= n; ++i) {
    const double w = (i == 0 || i == n) ? 1.0 : (i % 2 == 1 ? 4.0 : 2.0);
    sum += w * std::exp(logf[i] - top);
  }
  return top + std::log(sum * h / 3.0);
}

}  // namespace

TEST_CASE("privacy: RDP of the sampled Gaussian matches published values", "[privacy]") {
  // Values published with the RDP accountant of Mironov, Talwar and Zhang (2019) in
  // TensorFlow Privacy's tests (rdp_accountant_test.py), to 5-6 decimals.
  CHECK(10 * sampledGaussianRdp(0.1, 2.0, 5.0) == Approx(0.07737).margin(5e-6));
  const std::vector<double> orders = {1.5, 2.5, 5, 50, 100};
  const std::vector<double> published = {0.00065, 0.001085, 0.00218075, 0.023846, 167.416307};
  for (std::size_t i = 0; i < orders.size(); ++i) {
    CAPTURE(orders[i]);
    CHECK(50 * sampledGaussianRdp(0.01, 2.5, orders[i]) == Approx(published[i]).margin(5e-6));
  }
  CHECK(std::isinf(sampledGaussianRdp(0.01, 2.5, INFINITY)));
}

TEST_CASE("privacy: epsilon of DP-SGD's MNIST setting is Abadi et al.'s 1.26", "[privacy]") {
  // q = 0.01, sigma = 4, 10,000 steps, delta = 1e-5, orders 2..32: 1.258575 at order 20
  // (TensorFlow Privacy's test; Abadi et al. 2016, section 3.1, give 1.26).
  std::vector<double> orders;
  for (int a = 2; a <= 32; ++a)
    orders.push_back(a);
  PrivacyAccountant acc(orders);
  REQUIRE(acc.addRounds(0.01, 4.0, 10'000).isOk());
  const PrivacySpent s = acc.spent(1e-5);
  CHECK(s.epsilon == Approx(1.258575).margin(5e-6));
  CHECK(s.order == 20);
  // The default orders are finer: never worse, and within 1% here.
  PrivacyAccountant fine;
  REQUIRE(fine.addRounds(0.01, 4.0, 10'000).isOk());
  CHECK(fine.spent(1e-5).epsilon <= s.epsilon + 1e-9);
  CHECK(fine.spent(1e-5).epsilon == Approx(1.258575).epsilon(0.01));
  CHECK(fine.rounds() == 10'000);
}

TEST_CASE("privacy: rounds of different rates and noise compose", "[privacy]") {
  // 10,000 rounds of (0.01, 4) then 100 of (0.1, 2): 3.276237 at order 8 (TensorFlow
  // Privacy's test, these orders).
  PrivacyAccountant acc(
      {1.25, 1.5, 1.75, 2., 2.5, 3., 4., 5., 6., 7., 8., 10., 12., 14., 16., 20., 24., 28., 32., 64., 256.});
  REQUIRE(acc.addRounds(0.01, 4.0, 10'000).isOk());
  const double first = acc.spent(1e-5).epsilon;
  REQUIRE(acc.addRounds(0.1, 2.0, 100).isOk());
  const PrivacySpent s = acc.spent(1e-5);
  CHECK(s.epsilon == Approx(3.276237).margin(5e-6));
  CHECK(s.order == 8);
  CHECK(s.epsilon > first);
  CHECK(acc.rounds() == 10'100);
}

TEST_CASE("privacy: without sampling, the Gaussian mechanism's closed form", "[privacy]") {
  // q = 1: RDP(alpha) = alpha / (2 sigma^2); over T rounds epsilon(delta) = min over
  // alpha of T alpha / (2 sigma^2) + log(1/delta) / (alpha - 1), whose continuous
  // minimum is at alpha* = 1 + sigma sqrt(2 log(1/delta) / T):
  //   T / (2 sigma^2) + sqrt(2 T log(1/delta)) / sigma.
  for (double alpha : {1.5, 2.0, 7.25, 64.0})
    CHECK(sampledGaussianRdp(1.0, 3.0, alpha) == Approx(alpha / 18.0).epsilon(1e-12));
  for (auto [sigma, rounds] : {std::pair{1.0, 1ull}, std::pair{5.0, 100ull}, std::pair{20.0, 1000ull}}) {
    CAPTURE(sigma, rounds);
    const double t = static_cast<double>(rounds), logInvDelta = std::log(1e5);
    const double closed = t / (2 * sigma * sigma) + std::sqrt(2 * t * logInvDelta) / sigma;
    PrivacyAccountant acc;
    REQUIRE(acc.addRounds(1.0, sigma, rounds).isOk());
    const double eps = acc.spent(1e-5).epsilon;
    CHECK(eps >= closed - 1e-9);                  // a grid cannot beat the continuous minimum
    CHECK(eps == Approx(closed).epsilon(0.005));  // and the default grid is close to it
  }
}

TEST_CASE("privacy: the series equals A_alpha integrated numerically", "[privacy]") {
  struct Case {
    double q, sigma, alpha;
  };
  // Integer and fractional orders, small and large q and sigma.
  const std::vector<Case> cases = {{0.01, 0.5, 2.0},   {0.01, 0.5, 2.5},   {0.1, 1.0, 5.0},   {0.1, 1.0, 5.5},
                                   {0.5, 2.0, 32.5},   {0.001, 1.1, 12.0}, {0.3, 4.0, 1.125}, {0.05, 0.8, 3.75},
                                   {0.999, 10.0, 7.0}, {0.02, 1.5, 20.25}};
  for (const Case& c : cases) {
    CAPTURE(c.q, c.sigma, c.alpha);
    const double integrated = logAIntegrated(c.q, c.sigma, c.alpha);
    CHECK(sampledGaussianRdp(c.q, c.sigma, c.alpha) * (c.alpha - 1) == Approx(integrated).epsilon(1e-6).margin(1e-12));
  }
}

TEST_CASE("privacy: more noise or fewer clients spend less; no sampling spends nothing", "[privacy]") {
  auto eps = [](double q, double sigma, uint64_t rounds) {
    PrivacyAccountant acc;
    REQUIRE(acc.addRounds(q, sigma, rounds).isOk());
    return acc.spent(1e-5).epsilon;
  };
  CHECK(eps(0.01, 2.0, 100) > eps(0.01, 4.0, 100));
  CHECK(eps(0.05, 2.0, 100) > eps(0.01, 2.0, 100));
  CHECK(eps(0.01, 2.0, 1000) > eps(0.01, 2.0, 100));
  CHECK(sampledGaussianRdp(0.0, 1.0, 4.0) == 0.0);
  PrivacyAccountant none;
  CHECK(none.spent(1e-5).epsilon == 0.0);
}

TEST_CASE("privacy: a bad rate or noise multiplier is refused by name", "[privacy]") {
  PrivacyAccountant acc;
  auto st = acc.addRounds(1.5, 1.0);
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("sampling rate 1.5"));
  st = acc.addRounds(0.1, 0.0);
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("noise multiplier 0"));
  CHECK(acc.rounds() == 0);
}

TEST_CASE("privacy: fixed-size sampling matches TensorFlow Privacy's published values", "[privacy]") {
  // TensorFlow Privacy, tensorflow_privacy/privacy/analysis/rdp_accountant_test.py,
  // test_compute_rdp_sequence_without_replacement (commit 245fd069, December 2021, until
  // the file's removal in 2022): 50 rounds at q = 0.01, sigma = 2.5, rtol 1e-4. Its
  // fractional orders (1.001, 1.5, 2.5) are interpolated there and have no bound here.
  const std::vector<double> orders = {5, 50, 100, 256, 512, 1024};
  const std::vector<double> published = {8.7634e-3, 9.8474e-2, 1.6776e2, 7.9297e2, 1.8174e3, 3.8656e3};
  // The test's first version (commit 09270afe, May 2021) gave more digits; its order 256
  // value (792.838516) was replaced by the above, which the bound in exact arithmetic
  // (below) confirms: 50 * 15.859488547324 = 792.97443.
  const std::vector<double> moreDigits = {0.0087633, 0.098474, 167.766388, 0, 1817.35871, 3865.55029};
  for (std::size_t i = 0; i < orders.size(); ++i) {
    CAPTURE(orders[i]);
    const double rdp = 50 * sampledWithoutReplacementGaussianRdp(0.01, 2.5, orders[i]);
    CHECK(rdp == Approx(published[i]).epsilon(1e-4));
    if (moreDigits[i] > 0) CHECK(rdp == Approx(moreDigits[i]).epsilon(1e-5));
  }
}

TEST_CASE("privacy: fixed-size sampling equals its bound in exact arithmetic", "[privacy]") {
  // The header's bound evaluated with 3000-digit arithmetic (mpmath: the forward
  // differences as plain alternating binomial sums, no cancellation issue at that
  // precision), for small and large q, sigma and orders. The large sigmas take the
  // forward differences from the numerical integral, where the alternating sum in
  // double precision cancels to nothing.
  struct Case {
    double q, sigma, alpha, rdp;
  };
  const std::vector<Case> cases = {
      {0.01, 2.5, 5, 1.75267210383834e-4},    {0.01, 2.5, 50, 1.96948300594107e-3}, {0.001, 1, 12, 3.34676391023538e-5},
      {0.05, 5, 32, 7.15154791885392e-3},     {0.1, 10, 64, 1.26679821091231e-2},   {0.3, 2, 8, 0.338733898711146},
      {0.5, 20, 100, 5.10215788002051e-2},    {0.9, 3, 20, 1.08891666162807},       {0.01, 0.5, 7, 8.74282598417821},
      {0.0001, 50, 256, 2.04901073843383e-9}, {0.2, 8, 128, 7.38314071014121e-2},   {0.01, 2.5, 256, 15.859488547324}};
  for (const Case& c : cases) {
    CAPTURE(c.q, c.sigma, c.alpha);
    CHECK(sampledWithoutReplacementGaussianRdp(c.q, c.sigma, c.alpha) == Approx(c.rdp).epsilon(1e-9));
  }
}

TEST_CASE("privacy: fixed-size sampling's edges: all clients, none, fractional orders", "[privacy]") {
  // q = 1 is the unsampled Gaussian mechanism, alpha / (2 sigma^2), at any order.
  for (double alpha : {1.5, 2.0, 7.25, 64.0, 1024.0})
    CHECK(sampledWithoutReplacementGaussianRdp(1.0, 3.0, alpha) == Approx(alpha / 18.0).epsilon(1e-12));
  // And no q gives more (the bound is capped there; near q = 1 the raw bound is above it).
  for (double alpha : {2.0, 3.0, 10.0, 64.0})
    for (double q : {0.5, 0.9, 0.999}) {
      CAPTURE(alpha, q);
      CHECK(sampledWithoutReplacementGaussianRdp(q, 3.0, alpha) <= alpha / 18.0);
    }
  CHECK(sampledWithoutReplacementGaussianRdp(0.0, 1.0, 4.0) == 0.0);
  CHECK(sampledWithoutReplacementGaussianRdp(0.0, 1.0, 4.5) == 0.0);
  // Sampled, only integer orders have a bound.
  CHECK(std::isinf(sampledWithoutReplacementGaussianRdp(0.01, 2.5, 2.5)));
  CHECK(std::isinf(sampledWithoutReplacementGaussianRdp(0.01, 2.5, 1.0)));
  CHECK(std::isinf(sampledWithoutReplacementGaussianRdp(0.01, 2.5, INFINITY)));
  CHECK(std::isfinite(sampledWithoutReplacementGaussianRdp(0.01, 2.5, 2.0)));
  // Tiny q and huge orders stay finite and non-negative.
  CHECK(sampledWithoutReplacementGaussianRdp(1e-9, 0.5, 1024.0) >= 0.0);
  CHECK(std::isfinite(sampledWithoutReplacementGaussianRdp(0.5, 0.5, 4096.0)));
}

TEST_CASE("privacy: fixed-size sampling spends more with more clients, less with more noise", "[privacy]") {
  const std::vector<double> qs = {1e-4, 0.001, 0.01, 0.05, 0.2, 0.5, 0.9, 1.0};
  const std::vector<double> sigmas = {0.5, 1.0, 2.5, 5.0, 20.0};
  for (double alpha : {2.0, 3.0, 8.0, 33.0, 128.0}) {
    for (double sigma : sigmas)
      for (std::size_t i = 1; i < qs.size(); ++i) {
        CAPTURE(alpha, sigma, qs[i]);
        CHECK(sampledWithoutReplacementGaussianRdp(qs[i - 1], sigma, alpha) <=
              sampledWithoutReplacementGaussianRdp(qs[i], sigma, alpha));
      }
    for (double q : qs)
      for (std::size_t i = 1; i < sigmas.size(); ++i) {
        CAPTURE(alpha, q, sigmas[i]);
        CHECK(sampledWithoutReplacementGaussianRdp(q, sigmas[i - 1], alpha) >=
              sampledWithoutReplacementGaussianRdp(q, sigmas[i], alpha));
      }
  }
}

TEST_CASE("privacy: the accountant composes fixed-size rounds", "[privacy]") {
  PrivacyAccountant acc;
  REQUIRE(acc.addRoundsWithoutReplacement(0.01, 2.5, 30).isOk());
  REQUIRE(acc.addRoundsWithoutReplacement(0.01, 2.5, 20).isOk());
  CHECK(acc.rounds() == 50);
  // Order by order, 50 times one round; the fractional orders stay +infinity.
  for (std::size_t i = 0; i < acc.orders().size(); ++i) {
    const double alpha = acc.orders()[i];
    CAPTURE(alpha);
    if (alpha == std::floor(alpha))
      CHECK(acc.rdp()[i] == Approx(50 * sampledWithoutReplacementGaussianRdp(0.01, 2.5, alpha)).epsilon(1e-12));
    else
      CHECK(std::isinf(acc.rdp()[i]));
  }
  // epsilon is finite, from an integer order, and the minimum over those orders.
  const PrivacySpent s = acc.spent(1e-5);
  REQUIRE(std::isfinite(s.epsilon));
  CHECK(s.order == std::floor(s.order));
  for (std::size_t i = 0; i < acc.orders().size(); ++i)
    if (std::isfinite(acc.rdp()[i]) && acc.orders()[i] > 1)
      CHECK(s.epsilon <= acc.rdp()[i] + std::log(1e5) / (acc.orders()[i] - 1) + 1e-12);
  // Zero rounds change nothing (0 times the infinite orders is not NaN).
  REQUIRE(acc.addRoundsWithoutReplacement(0.01, 2.5, 0).isOk());
  CHECK(acc.spent(1e-5).epsilon == s.epsilon);
  // Another rate and noise add on; more rounds spend more.
  REQUIRE(acc.addRoundsWithoutReplacement(0.05, 5.0, 10).isOk());
  CHECK(acc.spent(1e-5).epsilon > s.epsilon);
  // All clients every round: the unsampled Gaussian's closed form on the integer orders.
  PrivacyAccountant all;
  REQUIRE(all.addRoundsWithoutReplacement(1.0, 5.0, 100).isOk());
  const double closed = 100 / 50.0 + std::sqrt(2 * 100 * std::log(1e5)) / 5.0;
  CHECK(all.spent(1e-5).epsilon >= closed - 1e-9);
  CHECK(all.spent(1e-5).epsilon == Approx(closed).epsilon(0.005));
}

TEST_CASE("privacy: fixed-size rounds refuse bad arguments and Poisson rounds", "[privacy]") {
  PrivacyAccountant acc;
  auto st = acc.addRoundsWithoutReplacement(1.5, 1.0);
  REQUIRE_FALSE(st.isOk());
  CHECK(st.code() == starling::StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("sampling rate 1.5"));
  st = acc.addRoundsWithoutReplacement(-0.1, 1.0);
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("sampling rate -0.1"));
  st = acc.addRoundsWithoutReplacement(NAN, 1.0);
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("sampling rate nan"));
  st = acc.addRoundsWithoutReplacement(0.1, 0.0);
  REQUIRE_FALSE(st.isOk());
  CHECK(st.code() == starling::StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("noise multiplier 0"));
  st = acc.addRoundsWithoutReplacement(0.1, -2.0);
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("noise multiplier -2"));
  st = acc.addRoundsWithoutReplacement(0.1, INFINITY);
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("noise multiplier inf"));
  CHECK(acc.rounds() == 0);
  CHECK(acc.spent(1e-5).epsilon == 0.0);
  // The two adjacencies do not compose, in either order.
  REQUIRE(acc.addRoundsWithoutReplacement(0.1, 2.0).isOk());
  st = acc.addRounds(0.1, 2.0);
  REQUIRE_FALSE(st.isOk());
  CHECK(st.code() == starling::StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("replace-one"));
  CHECK(acc.rounds() == 1);
  PrivacyAccountant poisson;
  REQUIRE(poisson.addRounds(0.1, 2.0).isOk());
  st = poisson.addRoundsWithoutReplacement(0.1, 2.0);
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("add/remove"));
  CHECK(poisson.rounds() == 1);
}
