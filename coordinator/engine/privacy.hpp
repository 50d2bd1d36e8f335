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

#include <cstdint>
#include <span>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::coordinator {

// RDP of one round of the sampled Gaussian mechanism at order alpha > 1: sampling rate
// q in [0, 1], noise multiplier sigma > 0 (noise standard deviation / clipping norm).
// +infinity where it diverges.
double sampledGaussianRdp(double q, double sigma, double alpha);

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
  // kInvalidArgument naming the value when q is outside [0, 1] or sigma <= 0.
  Status addRounds(double q, double sigma, uint64_t rounds = 1);

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
};

// epsilon(delta) of the given RDP curve: min over the orders of rdp + log(1/delta) / (alpha - 1).
PrivacySpent epsilonFromRdp(std::span<const double> orders, std::span<const double> rdp, double delta);

}  // namespace starling::coordinator
