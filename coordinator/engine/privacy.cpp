#include "engine/privacy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace starling::coordinator {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log(exp(a) + exp(b)).
double logAdd(double a, double b) {
  if (a == -kInf) return b;
  if (b == -kInf) return a;
  const double hi = std::max(a, b), lo = std::min(a, b);
  return hi + std::log1p(std::exp(lo - hi));
}

// log(erfc(x)), also where erfc(x) underflows (x beyond about 26): the asymptotic
// series erfc(x) = exp(-x^2) / (x sqrt(pi)) (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + ...).
double logErfc(double x) {
  if (x < 25.0) return std::log(std::erfc(x));
  const double x2 = x * x;
  const double series = 1.0 - 1.0 / (2.0 * x2) + 3.0 / (4.0 * x2 * x2) - 15.0 / (8.0 * x2 * x2 * x2);
  return -x2 - std::log(x) - 0.5 * std::log(std::numbers::pi) + std::log(series);
}

// A sum of terms of either sign, kept as the logs of its positive and negative parts.
struct SignedLogSum {
  double pos = -kInf, neg = -kInf;
  void add(double logAbs, bool negative) {
    if (negative)
      neg = logAdd(neg, logAbs);
    else
      pos = logAdd(pos, logAbs);
  }
  // log of the sum, which must be positive (A_alpha is an expectation of a positive
  // quantity); NaN if rounding made it not so.
  double log() const {
    if (neg == -kInf) return pos;
    if (neg >= pos) return std::numeric_limits<double>::quiet_NaN();
    return pos + std::log1p(-std::exp(neg - pos));
  }
};

// log A_alpha for an integer alpha >= 2: the finite binomial sum.
double logAInteger(double q, double sigma, uint64_t alpha) {
  double out = -kInf;
  const double a = static_cast<double>(alpha);
  for (uint64_t k = 0; k <= alpha; ++k) {
    const double kd = static_cast<double>(k);
    const double logBinom = std::lgamma(a + 1.0) - std::lgamma(kd + 1.0) - std::lgamma(a - kd + 1.0);
    const double term =
        logBinom + (a - kd) * std::log1p(-q) + kd * std::log(q) + (kd * kd - kd) / (2.0 * sigma * sigma);
    out = logAdd(out, term);
  }
  return out;
}

// log A_alpha for a fractional alpha > 1: the integral split at z0, each side expanded
// in its smaller term (the header's derivation).
double logAFractional(double q, double sigma, double alpha) {
  const double s2 = sigma * sigma;
  const double z0 = s2 * std::log(1.0 / q - 1.0) + 0.5;
  const double rootTwoSigma = std::sqrt(2.0) * sigma;
  SignedLogSum sum;
  double logC = 0.0;      // log |C(alpha, i)|
  bool negative = false;  // the sign of C(alpha, i)
  for (uint64_t i = 0; i < 100'000; ++i) {
    const double id = static_cast<double>(i);
    const double j = alpha - id;
    // z < z0: (1 - q)^(alpha - i) q^i, the exponential's t = i.
    const double below = logC + j * std::log1p(-q) + id * std::log(q) + (id * id - id) / (2.0 * s2) + std::log(0.5) +
                         logErfc((id - z0) / rootTwoSigma);
    // z > z0: q^(alpha - i) (1 - q)^i, t = alpha - i.
    const double above = logC + j * std::log(q) + id * std::log1p(-q) + (j * j - j) / (2.0 * s2) + std::log(0.5) +
                         logErfc((z0 - j) / rootTwoSigma);
    sum.add(below, negative);
    sum.add(above, negative);
    // Past alpha the terms alternate and shrink; stop once they no longer count.
    if (id > alpha && std::max(below, above) < std::max(sum.pos, sum.neg) - 30.0) break;
    // C(alpha, i + 1) = C(alpha, i) (alpha - i) / (i + 1).
    logC += std::log(std::fabs(alpha - id)) - std::log(id + 1.0);
    if (alpha - id < 0) negative = !negative;
  }
  return sum.log();
}

}  // namespace

double sampledGaussianRdp(double q, double sigma, double alpha) {
  if (q <= 0.0) return 0.0;
  if (std::isinf(alpha)) return kInf;
  if (q >= 1.0) return alpha / (2.0 * sigma * sigma);
  const bool integer = alpha == std::floor(alpha) && alpha <= 1e6;
  const double logA = integer ? logAInteger(q, sigma, static_cast<uint64_t>(alpha)) : logAFractional(q, sigma, alpha);
  if (std::isnan(logA)) return kInf;  // no usable bound at this order
  return logA / (alpha - 1.0);
}

std::vector<double> PrivacyAccountant::defaultOrders() {
  std::vector<double> orders;
  for (int k = 9; k <= 96; ++k)
    orders.push_back(k / 8.0);  // 1.125 .. 12
  for (int a = 13; a <= 64; ++a)
    orders.push_back(a);
  for (double a : {80.0, 96.0, 128.0, 256.0, 512.0, 1024.0})
    orders.push_back(a);
  return orders;
}

PrivacyAccountant::PrivacyAccountant(std::vector<double> orders)
    : orders_(std::move(orders)), rdp_(orders_.size(), 0.0) {}

Status PrivacyAccountant::addRounds(double q, double sigma, uint64_t rounds) {
  if (!(q >= 0.0 && q <= 1.0))
    return Status(StatusCode::kInvalidArgument, fmt::format("sampling rate {} is outside [0, 1]", q));
  if (!(sigma > 0.0) || std::isinf(sigma))
    return Status(StatusCode::kInvalidArgument, fmt::format("noise multiplier {} must be positive and finite", sigma));
  for (std::size_t i = 0; i < orders_.size(); ++i)
    rdp_[i] += static_cast<double>(rounds) * sampledGaussianRdp(q, sigma, orders_[i]);
  rounds_ += rounds;
  return Status::ok();
}

PrivacySpent PrivacyAccountant::spent(double delta) const {
  if (rounds_ == 0) return {};
  return epsilonFromRdp(orders_, rdp_, delta);
}

PrivacySpent epsilonFromRdp(std::span<const double> orders, std::span<const double> rdp, double delta) {
  PrivacySpent best{kInf, 0.0};
  const double logInvDelta = -std::log(delta);
  for (std::size_t i = 0; i < orders.size() && i < rdp.size(); ++i) {
    if (!(orders[i] > 1.0) || !std::isfinite(rdp[i])) continue;
    const double eps = rdp[i] + logInvDelta / (orders[i] - 1.0);
    if (eps < best.epsilon) best = {eps, orders[i]};
  }
  return best;
}

}  // namespace starling::coordinator
