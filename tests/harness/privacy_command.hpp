#pragma once
// `starling-sim privacy`: the privacy a plan spends, before deploying it (docs/privacy.md).
//
//   starling-sim privacy --sampling-rate Q --rounds T [--sampling poisson|fixed] [--delta D]
//       (--noise-multiplier SIGMA [--order A] | --target-epsilon E)
//   starling-sim privacy --sampling individual --rounds U ...   (one client's U updates in
//       the asynchronous modes, accounted per client: engine/privacy_budget.hpp)
//
// With a noise multiplier: prints the epsilon T rounds spend. With a target: the smallest
// noise multiplier (to 3 significant digits, rounded up) whose T rounds stay within it.
// --order: also the rounds' Renyi DP at order A (the figure published tables give).
// The same accountant as the engine's (engine/privacy.hpp): poisson rounds as the sampled
// Gaussian mechanism, fixed-size rounds without replacement at multiplier sigma / 2.
// One line of key=value figures.

#include <CLI/CLI.hpp>
#include <string>

namespace starling::sim {

struct PrivacyCommand {
  std::string sampling = "poisson";
  double rate = 0;
  uint64_t rounds = 0;
  double delta = 1e-5;
  double noiseMultiplier = 0;
  double targetEpsilon = 0;
  double order = 0;  // > 0: also print the RDP of the rounds at this order
};

CLI::App* addPrivacyCommand(CLI::App& app, PrivacyCommand& command);
int runPrivacyCommand(const PrivacyCommand& command);

}  // namespace starling::sim
