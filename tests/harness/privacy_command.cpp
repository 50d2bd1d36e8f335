#include "privacy_command.hpp"

#include <fmt/format.h>

#include <cmath>
#include <iostream>

#include "engine/privacy.hpp"

namespace starling::sim {
namespace {

// Epsilon of `rounds` rounds, or the error.
Result<coordinator::PrivacySpent> spend(const PrivacyCommand& c, double sigma) {
  coordinator::PrivacyAccountant a;
  // individual: one client's updates in the asynchronous modes, each a Gaussian
  // mechanism of sensitivity 2C (replace-one), RDP 2 alpha / sigma^2 (weight 1).
  const Status st = c.sampling == "fixed"        ? a.addRoundsWithoutReplacement(c.rate, sigma / 2, c.rounds)
                    : c.sampling == "individual" ? a.addRounds(1.0, sigma / 2, c.rounds)
                                                 : a.addRounds(c.rate, sigma, c.rounds);
  if (!st) return st;
  return a.spent(c.delta);
}

}  // namespace

CLI::App* addPrivacyCommand(CLI::App& app, PrivacyCommand& c) {
  CLI::App* sub = app.add_subcommand("privacy", "the epsilon a plan spends, or the noise a target needs");
  sub->add_option("--sampling", c.sampling,
                  "poisson or fixed (task.sampling), or individual: one client's updates in the asynchronous modes "
                  "(--rounds: its updates; no sampling rate)")
      ->check(CLI::IsMember({"poisson", "fixed", "individual"}));
  sub->add_option("--sampling-rate", c.rate, "q: the rate, or clients per round / idle clients under fixed");
  sub->add_option("--rounds", c.rounds, "committed rounds (individual: the client's updates)")->required();
  sub->add_option("--delta", c.delta, "the delta epsilon is for");
  auto* sigma = sub->add_option("--noise-multiplier", c.noiseMultiplier, "sigma (privacy.noise-multiplier)");
  auto* target = sub->add_option("--target-epsilon", c.targetEpsilon, "find the sigma that keeps epsilon within this");
  sigma->excludes(target);
  sub->add_option("--order", c.order, "also print the rounds' RDP at this order (with --noise-multiplier)");
  return sub;
}

int runPrivacyCommand(const PrivacyCommand& c) {
  auto fail = [](const std::string& m) {
    std::cerr << "starling-sim privacy: " << m << "\n";
    return 1;
  };
  if (!(c.delta > 0 && c.delta < 1)) return fail(fmt::format("--delta {} is not in (0, 1)", c.delta));
  if (c.sampling != "individual" && !(c.rate > 0)) return fail("--sampling-rate is required (in (0, 1])");
  if (c.sampling == "individual" && c.rate > 0) return fail("--sampling individual takes no --sampling-rate");
  if (c.targetEpsilon > 0) {
    // epsilon falls as sigma grows: bisect on log sigma.
    double lo = 0.05, hi = 1000;
    auto at = spend(c, hi);
    if (!at) return fail(at.status().message());
    if (at->epsilon > c.targetEpsilon)
      return fail(fmt::format("even sigma {} spends epsilon {:.4g} > {}", hi, at->epsilon, c.targetEpsilon));
    for (int i = 0; i < 60; ++i) {
      const double mid = std::sqrt(lo * hi);
      auto e = spend(c, mid);
      if (!e) return fail(e.status().message());
      (e->epsilon > c.targetEpsilon ? lo : hi) = mid;
    }
    // Three significant digits, rounded up (never over the target).
    const double scale = std::pow(10.0, std::floor(std::log10(hi)) - 2);
    const double sigma = std::ceil(hi / scale - 1e-9) * scale;
    auto e = spend(c, sigma);
    if (!e) return fail(e.status().message());
    fmt::print("noise_multiplier={:.4g} epsilon={:.4g} order={:g} sampling={} rate={:g} rounds={} delta={:g}\n", sigma,
               e->epsilon, e->order, c.sampling, c.rate, c.rounds, c.delta);
    return 0;
  }
  if (!(c.noiseMultiplier > 0)) return fail("give --noise-multiplier (> 0) or --target-epsilon");
  auto e = spend(c, c.noiseMultiplier);
  if (!e) return fail(e.status().message());
  std::string rdp;
  if (c.order > 0) {
    const double one = c.sampling == "fixed"
                           ? coordinator::sampledWithoutReplacementGaussianRdp(c.rate, c.noiseMultiplier / 2, c.order)
                       : c.sampling == "individual"
                           ? coordinator::sampledGaussianRdp(1.0, c.noiseMultiplier / 2, c.order)
                           : coordinator::sampledGaussianRdp(c.rate, c.noiseMultiplier, c.order);
    rdp = fmt::format(" rdp_at_order={:.9g}", one * double(c.rounds));
  }
  fmt::print("epsilon={:.4g} order={:g} noise_multiplier={:g} sampling={} rate={:g} rounds={} delta={:g}{}\n",
             e->epsilon, e->order, c.noiseMultiplier, c.sampling, c.rate, c.rounds, c.delta, rdp);
  return 0;
}

}  // namespace starling::sim
