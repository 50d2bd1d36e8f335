#include "engine/privacy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <span>
#include <vector>

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

// Fixed-size sampling (the header's bound). c = 1 / (2 sigma^2) throughout.

// Orders up to this use the forward differences D_k for every term; above it the terms
// j >= 3 use only 2 h(j). Integer orders above kMaxWorOrder get no bound.
constexpr uint64_t kMaxRefinedWorOrder = 1024;
constexpr double kMaxWorOrder = 1e6;
// The alternating sum for D_k is trusted while it cancels at most e^10 of its positive part.
constexpr double kMaxCancellation = 10.0;

double logBinomial(double n, double k) {
  return std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0);
}

// log E[(e^Y - 1)^k] for an even k >= 2, Y ~ N(-c, 2c), integrated numerically. On each
// side of 0 the log-integrand g(y) = -(y + c)^2 / (4c) + k log|e^y - 1| is concave, so it
// has one peak there, found by bisection on g'; Simpson's rule then covers where g is
// within 60 of that peak.
double logMomentIntegrated(double c, uint64_t k) {
  const double kd = static_cast<double>(k);
  // log|e^y - 1| without overflow: y + log(1 - e^-y) for y > 0.
  auto logAbsExpm1 = [](double y) { return y > 0.0 ? y + std::log(-std::expm1(-y)) : std::log(-std::expm1(y)); };
  auto g = [&](double y) { return -(y + c) * (y + c) / (4.0 * c) + kd * logAbsExpm1(y); };
  auto dg = [&](double y) { return -(y + c) / (2.0 * c) - kd / std::expm1(-y); };
  // The first u in (lo, hi) where pred(u) turns false, pred true at lo and false at hi.
  auto bisect = [](double lo, double hi, auto pred) {
    for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; ++i) {
      const double mid = 0.5 * (lo + hi);
      (pred(mid) ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
  };
  double out = -kInf;
  for (const double side : {-1.0, 1.0}) {
    // u = |y| on this side: side * g'(side u) is positive near 0 and negative far out.
    auto rising = [&](double u) { return side * dg(side * u) > 0.0; };
    double far = 1.0;
    while (rising(far))
      far *= 2.0;
    const double peak = bisect(0.0, far, rising);
    const double top = g(side * peak);
    auto high = [&](double u) { return g(side * u) >= top - 60.0; };
    // g falls by at least d^2 / (4c) a distance d past the peak.
    double step = std::sqrt(2.0 * c);
    while (high(peak + step))
      step *= 2.0;
    const double outer = bisect(peak, peak + step, high);
    const double inner = bisect(0.0, peak, [&](double u) { return !high(u); });
    const int n = 2000;  // even
    const double h = (outer - inner) / n;
    double sum = 0.0;
    for (int i = 0; i <= n; ++i) {
      const double w = (i == 0 || i == n) ? 1.0 : (i % 2 == 1 ? 4.0 : 2.0);
      sum += w * std::exp(g(side * (inner + h * i)) - top);
    }
    out = logAdd(out, top + std::log(sum * h / 3.0));
  }
  return out - 0.5 * std::log(4.0 * std::numbers::pi * c);
}

// log D_k = log of the k-th forward difference at 0 of h(j) = exp(c j (j - 1)), k even.
double logForwardDifference(double c, uint64_t k) {
  const double kd = static_cast<double>(k);
  double pos = -kInf, neg = -kInf;  // the even and the odd i
  for (uint64_t i = 0; i <= k; ++i) {
    const double id = static_cast<double>(i);
    const double term = logBinomial(kd, id) + c * id * (id - 1.0);
    if (i % 2 == 0)
      pos = logAdd(pos, term);
    else
      neg = logAdd(neg, term);
  }
  if (pos > neg) {
    const double diff = pos + std::log1p(-std::exp(neg - pos));
    if (pos - diff <= kMaxCancellation) return diff;
  }
  return logMomentIntegrated(c, k);
}

// log D_k at the even k up to maxK (the odd entries unused).
std::vector<double> logForwardDifferences(double c, uint64_t maxK) {
  std::vector<double> out(maxK + 1, std::numeric_limits<double>::quiet_NaN());
  for (uint64_t k = 2; k <= maxK; k += 2)
    out[k] = logForwardDifference(c, k);
  return out;
}

// The largest even k the terms of order alpha ask for (within kMaxRefinedWorOrder).
uint64_t worDifferencesNeeded(double alpha) {
  const uint64_t a = static_cast<uint64_t>(std::min(alpha, static_cast<double>(kMaxRefinedWorOrder)));
  return a + a % 2;
}

// The header's bound at order alpha, with log D_k from logDiffs where it reaches, else
// the term's 2 h(j) alone.
double worRdp(double q, double sigma, double alpha, std::span<const double> logDiffs) {
  if (std::isnan(q)) return std::numeric_limits<double>::quiet_NaN();
  if (q <= 0.0) return 0.0;
  if (!(sigma > 0.0) || !(alpha > 1.0) || std::isinf(alpha)) return kInf;
  const double c = 1.0 / (2.0 * sigma * sigma);
  if (q >= 1.0) return alpha * c;
  if (alpha != std::floor(alpha) || alpha > kMaxWorOrder) return kInf;
  const uint64_t a = static_cast<uint64_t>(alpha);
  const double logQ = std::log(q);
  double logA = 0.0;  // the leading 1
  for (uint64_t j = 2; j <= a; ++j) {
    const double jd = static_cast<double>(j);
    double bound = std::log(2.0) + c * jd * (jd - 1.0);  // 2 h(j)
    if (j == 2) {
      bound = std::min(bound, std::log(4.0) + std::log(std::expm1(2.0 * c)));
    } else {
      const uint64_t lo = j - j % 2, hi = j + j % 2;
      if (hi < logDiffs.size()) bound = std::min(bound, std::log(4.0) + 0.5 * (logDiffs[lo] + logDiffs[hi]));
    }
    logA = logAdd(logA, jd * logQ + logBinomial(alpha, jd) + bound);
  }
  return std::min(logA / (alpha - 1.0), alpha * c);
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

double sampledWithoutReplacementGaussianRdp(double q, double sigma, double alpha) {
  std::vector<double> logDiffs;
  if (q > 0.0 && q < 1.0 && sigma > 0.0 && alpha >= 3.0 && alpha <= kMaxWorOrder && alpha == std::floor(alpha))
    logDiffs = logForwardDifferences(1.0 / (2.0 * sigma * sigma), worDifferencesNeeded(alpha));
  return worRdp(q, sigma, alpha, logDiffs);
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
  if (adjacency_ == Adjacency::kReplaceOne)
    return Status(StatusCode::kInvalidArgument,
                  "this accountant holds fixed-size (replace-one) rounds; Poisson-sampled (add/remove) rounds do "
                  "not compose with them");
  for (std::size_t i = 0; i < orders_.size(); ++i)
    rdp_[i] += static_cast<double>(rounds) * sampledGaussianRdp(q, sigma, orders_[i]);
  rounds_ += rounds;
  if (rounds > 0) adjacency_ = Adjacency::kAddRemove;
  return Status::ok();
}

Status PrivacyAccountant::addRoundsWithoutReplacement(double q, double sigma, uint64_t rounds) {
  if (!(q >= 0.0 && q <= 1.0))
    return Status(StatusCode::kInvalidArgument, fmt::format("sampling rate {} is outside [0, 1]", q));
  if (!(sigma > 0.0) || std::isinf(sigma))
    return Status(StatusCode::kInvalidArgument, fmt::format("noise multiplier {} must be positive and finite", sigma));
  if (adjacency_ == Adjacency::kAddRemove)
    return Status(StatusCode::kInvalidArgument,
                  "this accountant holds Poisson-sampled (add/remove) rounds; fixed-size (replace-one) rounds do "
                  "not compose with them");
  if (rounds == 0) return Status::ok();  // 0 times an infinite order would be NaN
  // The forward differences depend on sigma alone: once for every order.
  uint64_t maxK = 0;
  for (double alpha : orders_)
    if (alpha >= 3.0 && alpha <= kMaxWorOrder && alpha == std::floor(alpha))
      maxK = std::max(maxK, worDifferencesNeeded(alpha));
  std::vector<double> logDiffs;
  if (q > 0.0 && q < 1.0 && maxK > 0) logDiffs = logForwardDifferences(1.0 / (2.0 * sigma * sigma), maxK);
  for (std::size_t i = 0; i < orders_.size(); ++i)
    rdp_[i] += static_cast<double>(rounds) * worRdp(q, sigma, orders_[i], logDiffs);
  rounds_ += rounds;
  adjacency_ = Adjacency::kReplaceOne;
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
