#pragma once
// Privacy accounting for DP-FedAvg (ALGORITHMS.md §10; docs/privacy.md): the Rényi
// differential privacy of the sampled Gaussian mechanism, composed over rounds, and its
// conversion to (epsilon, delta).
//
// A round of DP-FedAvg is the sampled Gaussian mechanism: each client takes part with
// probability q (Poisson sampling), its update is clipped to L2 norm C, and the sum gets
// N(0, sigma^2 C^2) noise. Its Rényi divergence of order alpha (Mironov, Talwar and Zhang
// 2019, "Rényi Differential Privacy of the Sampled Gaussian Mechanism") is
//   RDP(alpha) = log(A_alpha) / (alpha - 1),
//   A_alpha = E_{z ~ mu0} [((1 - q) + q exp((2z - 1) / (2 sigma^2)))^alpha],
// mu0 = N(0, sigma^2). For an integer alpha the binomial expansion is finite:
//   A_alpha = sum_{k=0..alpha} C(alpha, k) (1 - q)^(alpha - k) q^k exp((k^2 - k) / (2 sigma^2)).
// For a fractional alpha the integral is split where the two terms of the base are
// equal, z0 = sigma^2 log(1/q - 1) + 1/2, and each side expanded in the smaller term
// (an alternating series, summed until its terms are below exp(-30) of the sum): the
// terms are the same exponentials times Gaussian tails, erfc(.) / 2. Without sampling
// (q = 1) RDP(alpha) = alpha / (2 sigma^2) exactly.
//
// Rounds compose by adding their RDP order by order, so rounds of different q and sigma
// mix. epsilon(delta) = min over the orders of RDP(alpha) + log(1/delta) / (alpha - 1)
// (Mironov 2017, Proposition 3), the conversion the published tables use.
//
// All in log space (log-sum-exp), so large orders and small q do not overflow.
//
// Fixed-size sampling (m of N clients drawn uniformly without replacement, q = m / N) is
// accounted as such, under REPLACE-ONE adjacency (N is public; a neighbouring population
// has one client's data swapped for another's): sampledWithoutReplacementGaussianRdp is
// the upper bound of Wang, Balle and Kasiviswanathan (AISTATS 2019, "Subsampled Rényi
// Differential Privacy and Analytical Moments Accountant", Theorem 9, refined with
// forward differences as in Theorem 27 of arXiv:1808.00087, the bound TensorFlow
// Privacy's and dp_accounting's _compute_rdp_sample_wor_gaussian implement). For an
// integer alpha >= 2, with c = 1 / (2 sigma^2), the base mechanism's RDP eps(j) = j c,
// h(j) = exp((j - 1) eps(j)) = exp(c j (j - 1)) and D_k = the k-th forward difference of
// h at 0:
//   A_alpha <= 1 + sum_{j=2..alpha} q^j C(alpha, j) min(4 sqrt(D_{2 floor(j/2)} D_{2 ceil(j/2)}), 2 h(j)),
//   RDP(alpha) = min(log(A_alpha) / (alpha - 1), alpha c).
// (For j = 2 the minimum is Theorem 9's min(4 (e^{2c} - 1), 2 e^{2c}).) The cap alpha c
// is the unsampled mechanism's RDP, which the sampled one never exceeds (joint convexity
// of exp((alpha - 1) D_alpha) over the coupled samples). For an even k, D_k =
// E[(e^Y - 1)^k] with Y ~ N(-c, 2c), which is positive: it is taken from the alternating
// binomial sum where that loses at most e^10 to cancellation, else by integrating that
// expectation numerically (its log-integrand is concave on each side of 0). Above order
// 1024 the terms j >= 3 use only 2 h(j) (Theorem 9 itself), as the reference does above
// 256. Fractional orders have no bound here (+infinity; the reference interpolates).
//
// A fixed-size round's noise multiplier is relative to the replace-one sensitivity: with
// updates clipped to L2 norm C, swapping one client's update for another's moves the sum
// by up to 2C, so noise N(0, sigma_0^2 C^2) (sigma_0 the multiplier addRounds takes)
// means sigma = sigma_0 / 2 here. The caller passes the halved one.

#include <cstdint>
#include <span>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::coordinator {

// RDP of one round of the sampled Gaussian mechanism at order alpha > 1: sampling rate
// q in [0, 1], noise multiplier sigma > 0 (noise standard deviation / clipping norm).
// +infinity where it diverges.
double sampledGaussianRdp(double q, double sigma, double alpha);

// RDP of one round of the Gaussian mechanism on a fixed-size sample (replace-one
// adjacency; the bound above) at order alpha: sampling rate q = m / N in [0, 1], noise
// multiplier sigma > 0 relative to the replace-one sensitivity (noise standard deviation
// / 2C for updates clipped to C). q = 0 gives 0 and q = 1 alpha / (2 sigma^2) at any
// order; otherwise only integer orders 2 .. 10^6 have a bound, every other order gives
// +infinity.
double sampledWithoutReplacementGaussianRdp(double q, double sigma, double alpha);

struct PrivacySpent {
  double epsilon = 0;  // +infinity when no order gives a finite bound
  double order = 0;    // the order that gave it
};

class PrivacyAccountant {
 public:
  // The orders it tracks: 1.125 to 12 in steps of 1/8, 13 to 64, then 80, 96, 128, 256,
  // 512 and 1024 (a finer grid does not move epsilon by 0.5% in the ranges tested).
  static std::vector<double> defaultOrders();

  explicit PrivacyAccountant(std::vector<double> orders = defaultOrders());

  // Composes `rounds` rounds of sampling rate q and noise multiplier sigma.
  // kInvalidArgument naming the value when q is outside [0, 1] or sigma <= 0, and when
  // the accountant already holds fixed-size rounds (addRoundsWithoutReplacement).
  Status addRounds(double q, double sigma, uint64_t rounds = 1);

  // Composes `rounds` rounds of fixed-size sampling (m of N clients without replacement,
  // q = m / N), accounted under replace-one adjacency by sampledWithoutReplacementGaussianRdp:
  // sigma is relative to the replace-one sensitivity 2C (the noise standard deviation over
  // 2C). The orders it has no bound at (the fractional ones) become +infinity, which
  // spent() skips. kInvalidArgument naming the value when q is outside [0, 1] or sigma <= 0,
  // and when the accountant already holds rounds of addRounds: the two adjacencies
  // (add/remove, replace-one) do not compose into a guarantee for either.
  Status addRoundsWithoutReplacement(double q, double sigma, uint64_t rounds = 1);

  // epsilon for delta in (0, 1) over everything composed so far (0 before any round).
  PrivacySpent spent(double delta) const;

  std::span<const double> orders() const { return orders_; }
  // The composed RDP at each of orders().
  std::span<const double> rdp() const { return rdp_; }
  uint64_t rounds() const { return rounds_; }

 private:
  std::vector<double> orders_;
  std::vector<double> rdp_;
  uint64_t rounds_ = 0;
  // The adjacency of the rounds composed so far, once there are any.
  enum class Adjacency { kNone, kAddRemove, kReplaceOne };
  Adjacency adjacency_ = Adjacency::kNone;
};

// epsilon(delta) of the given RDP curve: min over the orders of rdp + log(1/delta) / (alpha - 1).
PrivacySpent epsilonFromRdp(std::span<const double> orders, std::span<const double> rdp, double delta);

}  // namespace starling::coordinator
