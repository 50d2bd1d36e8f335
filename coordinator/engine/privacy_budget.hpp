#pragma once
// PrivacyBudget: what each round spends of differential privacy, and when the budget
// stops training (EngineConfig::clipNorm and the settings after it; docs/privacy.md).
// It owns the checks of the privacy settings, the rate each round is accounted at
// (poisson: samplingRate; fixed: the m assigned over the N idle clients it drew from),
// the composition of committed rounds (engine/privacy.hpp's accountant) and the
// budget's decision (allows: the next round keeps epsilon within targetEpsilon).
//
// The asynchronous modes (async, ssp, dssp) are accounted per client instead: a client
// trains when it is free, not by a coin, so there is no sampling to amplify. Each server
// step is the Gaussian mechanism on the buffer's sum; swapping one client's data for
// another's (replace-one, the buffer's make-up fixed by timing alone) moves it by at most
// 2 w C, w = s(staleness) <= 1 its update's weight, and the engine lets a client land at
// most once in a step. So the step costs that client RDP(alpha) = 2 w^2 alpha / sigma^2
// and costs nothing to a client not in it; over its steps a client has spent
// rho alpha, rho = the sum over its steps of 2 w^2 / sigma^2 (individual Renyi
// accounting, Feldman and Zrnic, NeurIPS 2021, "Individual Privacy Accounting via a
// Renyi Filter"). epsilon is the largest client's, and the budget is their individual
// filter: a client whose next update could take it over the target trains no more,
// which keeps every client's guarantee under adaptive composition. Stale updates cost
// less (w^2).
//
// State: the committed rounds by kind, rate and noise, as the engine state's "privacy"
// lines ("privacy poisson|fixed Q SIGMA ROUNDS", consecutive equal rounds merged); the
// accountant is rebuilt from them, so a resumed engine reports the same epsilon. Under
// the asynchronous modes, one "privacy-client ID RHO" line per client.
// One thread at a time (the owner's).

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "starling/coordinator/round_engine.hpp"
#include "starling/util/status.hpp"

#include "engine/privacy.hpp"

namespace starling::coordinator {

class PrivacyBudget {
 public:
  // Checks the privacy settings against the rest of the configuration.
  static Result<PrivacyBudget> create(const EngineConfig& config);

  bool on() const { return clipNorm_ > 0; }
  bool poisson() const { return poisson_; }
  double clipNorm() const { return clipNorm_; }
  // The standard deviation of the noise on the round's sum: sigma x C.
  double noiseStd() const { return sigma_ * clipNorm_; }
  // Distributed noise: the M shares the sum's noise is split into (0: central), and
  // the standard deviation of one client's share, sigma x C / sqrt(M).
  uint32_t noiseShares() const { return shares_; }
  // The rate a round is accounted at: poisson's, or assigned / idle under fixed sampling.
  double rate(std::size_t assigned, std::size_t idle) const;
  // The round's fixed denominator D: rate x idle under poisson, K under fixed sampling,
  // the buffer's K in the asynchronous modes.
  double denominator(std::size_t idle) const;
  // Whether one more round at `rate` keeps epsilon within the target (always without one).
  bool allows(double rate) const;
  // A round at `rate` was committed: it composes. (The asynchronous modes under privacy
  // call stepReleased instead.)
  void committed(double rate);

  // The asynchronous modes' per-client accounting (above).
  bool individual() const { return individual_; }
  // Whether client `id` may train once more: one more update of weight 1 keeps its
  // epsilon within the target (always without a target).
  bool clientAllowed(const std::string& id) const;
  // A server step was released holding these clients' updates, of weight s(staleness)
  // in (0, 1] (a client's updates in the step add up).
  void stepReleased(const std::vector<std::pair<std::string, double>>& updates);
  // Epsilon at the configured delta over the committed rounds (0 before any; infinite
  // when a round had no noise, or when rounds of both samplings were committed).
  double epsilon() const;

  void writeState(std::ostream& out) const;
  // Reads the value of `key` when it is this part's ("privacy"): true when the key is
  // this part's (ok then says whether its value parsed).
  bool readState(const std::string& key, std::istream& in, bool& ok);

 private:
  explicit PrivacyBudget(const EngineConfig& config);
  struct Segment {
    bool poisson = true;
    double rate = 0, sigma = 0;
    uint64_t rounds = 0;
  };

  double clipNorm_, sigma_, rate_, delta_, target_;
  bool poisson_;
  uint32_t clientsPerRound_;
  uint32_t bufferSize_;  // the asynchronous modes' K
  uint32_t shares_ = 0;
  std::vector<Segment> segments_;
  PrivacyAccountant accountant_;
  // Individual accounting: each client's rho (its RDP at order alpha is rho alpha), the
  // largest, and the largest rho whose epsilon is within the target.
  bool individual_ = false;
  std::map<std::string, double> rho_;
  double maxRho_ = 0;
  double targetRho_ = 0;
  double epsilonOfRho(double rho) const;
};

}  // namespace starling::coordinator
