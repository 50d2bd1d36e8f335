#pragma once
// Pace: how much work each round asks for, over time. It owns the decision of the
// local steps (tau, with ADACOMM when EngineConfig::adaptiveTau), the learning rate
// (lr x lrDecay^commits), the link densities (DGC warm-up of the uplink and downlink
// densities) and each client's step budget from its measured speed (stepBudgets,
// budgetQuantile, budgetTauFactor). ALGORITHMS.md §3 and §1 (warm-up).
//
// State: the current tau and ADACOMM's smoothed losses (F0, F), which a checkpoint
// carries as the engine state's "tau", "loss0", "loss" and "haveLoss" lines. The
// schedules are functions of the number of committed rounds, which the caller passes.
//
// Deterministic; no clock. One thread at a time (the owner's).

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "starling/compression/schedule.hpp"
#include "starling/coordinator/round_engine.hpp"
#include "starling/util/status.hpp"

namespace starling::coordinator {

class Pace {
 public:
  // Checks the settings it uses (tau, tauMin, tauMax, budgetTauFactor, the densities).
  static Result<Pace> create(const EngineConfig& config);

  // The local steps a round asks of a client of unknown speed.
  uint32_t tau() const { return tau_; }
  // lr_r = lr x lrDecay^commits, or the upstream's lr once follow() set one.
  double lr(uint64_t commits) const;
  // A relay's local rounds train with the upstream assignment's tau and lr: tau (within
  // [tauMin, tauMax]) and lr from now on, until the next follow().
  void follow(uint32_t tau, double lr);
  // The link densities after `commits` committed rounds (DGC warm-up); 1 when the
  // link's compressor takes no density (identity, fp16, sign, QSGD).
  double uplinkDensity(uint64_t commits) const;
  double downlinkDensity(uint64_t commits) const;
  // budgetQuantile: the compute time per client of a round whose selected clients'
  // measured speeds (steps per ms, > 0) are `speeds`: tau / the speed at the quantile.
  // Infinity when off or when no selected client was measured.
  double roundBudgetMs(std::span<const double> speeds) const;
  // The steps for a client of measured speed stepsPerMs (0 = unknown: tau) in a round
  // with budgetMs (roundBudgetMs()): what it can do in min(budgetMs, budgetFraction x
  // deadline), within [tauMin, tau] (up to budgetTauFactor x tau with a finite budgetMs).
  uint32_t stepsFor(double stepsPerMs, double budgetMs) const;
  // dynamicBatch: the minibatch scale of a client of measured speed stepsPerMs (at
  // scale 1) among clients of mean speed meanSpeed: stepsPerMs / meanSpeed within
  // [kMinBatchScale, kMaxBatchScale]; 1 when off or either speed is unknown (0).
  double batchScale(double stepsPerMs, double meanSpeed) const;
  // dynamicBatch: the speed a scale of 1 stands for among the measured `speeds`: their
  // mean, or with budgetQuantile in (0, 1] the speed at that quantile (the clients
  // faster than it get larger minibatches in the same time). 0 when off or empty.
  double referenceSpeed(std::span<const double> speeds) const;
  static constexpr double kMinBatchScale = 1.0 / 32, kMaxBatchScale = 8;

  // ADACOMM, after a committed round (commits: the count including it) whose
  // example-weighted loss at the start was roundLoss: tau = ceil(sqrt((lr0 / lr) F / F0) tau0),
  // clamped to [tauMin, tauMax]. The first call only sets F0. No-op unless adaptiveTau.
  void roundCommitted(double roundLoss, uint64_t commits);

  // The engine state's lines this part owns ("tau", "loss0", "loss", "haveLoss").
  void writeState(std::ostream& out) const;
  // Reads the value of `key` when it is one of those lines: true when the key is
  // this part's (ok then says whether its value parsed), false otherwise.
  bool readState(const std::string& key, std::istream& in, bool& ok);

 private:
  Pace(const EngineConfig& config, std::unique_ptr<compression::DensitySchedule> up,
       std::unique_ptr<compression::DensitySchedule> down);

  double lr_, lrDecay_, budgetFraction_, budgetQuantile_, budgetTauFactor_, lossSmoothing_;
  double deadlineMs_;
  uint32_t tau0_, tauMin_, tauMax_;
  bool adaptive_, stepBudgets_, dynamicBatch_, upDensity_, downDensity_;
  std::unique_ptr<compression::DensitySchedule> up_, down_;
  uint32_t tau_;
  std::optional<double> followedLr_;  // follow()
  double lossF0_ = 0;                 // smoothed loss at the first adaptation
  double lossF_ = 0;                  // smoothed loss
  bool haveLoss_ = false;
};

}  // namespace starling::coordinator
