#pragma once
// Staleness: the decisions of asynchronous and stale-synchronous training that do not
// depend on how updates are summed (ALGORITHMS.md §7):
//  - StalenessWeight: the factor s(tau) by which buffered asynchronous aggregation
//    (FedBuff, Nguyen et al. 2022) weighs an update computed tau versions ago;
//  - ClockBound: which clients may start their next step under stale-synchronous
//    parallel (SSP, Ho et al. 2013) and its dynamic variant (DSSP, Zhao et al. 2019).
//
// Deterministic; no clock: times are passed in, in milliseconds. One thread at a time.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::coordinator {

// s(tau), the weight of an update of staleness tau (versions between the model it was
// computed from and the model it is applied to). Written as
//   "constant"    1
//   "poly:A"      1 / (1 + tau)^A, A >= 0 ("poly" alone is A = 0.5: FedBuff's 1/sqrt(1 + tau))
//   "hinge:A:B"   1 for tau <= B, else 1 / (A (tau - B) + 1), A >= 0 (FedAsync, Xie et al. 2019)
// Every s is 1 at tau = 0 and does not increase with tau.
class StalenessWeight {
 public:
  // kInvalidArgument naming the text when it is none of the above.
  static Result<StalenessWeight> parse(std::string_view text);

  // FedBuff's 1 / sqrt(1 + tau) ("poly:0.5").
  static StalenessWeight fedBuff() { return StalenessWeight(Kind::kPoly, 0.5, 0); }

  double operator()(uint64_t staleness) const { return 1.0 / inverse(staleness); }
  // 1 / s(tau), what an update's weight is divided by (sqrt(1 + tau) for FedBuff's).
  double inverse(uint64_t staleness) const;
  // The canonical text ("poly:0.5", "hinge:10:4", "constant"), which parse() reads back.
  std::string name() const;

 private:
  enum class Kind { kConstant, kPoly, kHinge };
  StalenessWeight(Kind kind, double a, double b) : kind_(kind), a_(a), b_(b) {}
  Kind kind_;
  double a_;
  double b_;
};

// The stale-synchronous gate over the active clients' clocks (a clock counts the steps,
// i.e. the updates, a client has finished).
//
// SSP (extraMax = 0): a client that finished its step and whose clock c has
// lead = c - min_q c_q <= bound starts its next step at once; otherwise it waits until
// the slowest catch up. bound 0 is bulk-synchronous, a very large bound asynchronous.
//
// DSSP (extraMax = r_max > 0): the bound moves within [bound, bound + extraMax]. When a
// client p finishes with lead > bound and no extra steps left, the gate predicts when
// the slowest client will next finish, t_slow = max over the clients at the minimum
// clock of (their last finish + their last interval), and grants p the smallest r >= 1
// extra steps with now + r T_p >= t_slow (T_p: p's last interval), i.e. enough that p
// does not wait, provided its lead at the start of the last of them stays within
// bound + extraMax (lead + r - 1 <= bound + extraMax). Otherwise, or when an interval is
// not known yet, or when the slowest is already overdue (t_slow <= now), p waits. After
// every finish and leave, each waiting client starts if its lead is within bound, or is
// given the grant rule again at that time.
class ClockBound {
 public:
  struct Options {
    uint32_t bound = 2;     // s (SSP), s_L (DSSP)
    uint32_t extraMax = 0;  // r_max; 0 = SSP
  };
  static ClockBound create(const Options& options) { return ClockBound(options); }

  // The client becomes active at clock max(clock, the slowest active client's clock)
  // (0 when none is active): a client that left and returns passes the clock it had.
  // It is not waiting; its interval is unknown until it finishes a step.
  void join(const std::string& client, int64_t nowMs, uint64_t clock = 0);
  // The client is no longer active (it vanished or finished training): it no longer
  // holds the others back. Returns the clients this releases (see finished()).
  std::vector<std::string> leave(const std::string& client, int64_t nowMs);

  struct Step {
    bool proceed = false;               // the client starts its next step now
    std::vector<std::string> released;  // waiting clients that may start now, by id
  };
  // The client finished a step at nowMs: its clock advances by one. An inactive client
  // is joined first.
  Step finished(const std::string& client, int64_t nowMs);

  bool active(const std::string& client) const { return clients_.count(client) != 0; }
  bool waiting(const std::string& client) const;
  uint64_t clock(const std::string& client) const;
  uint64_t minClock() const;
  // The extra steps a DSSP grant still allows the client (0 under SSP).
  uint32_t extraLeft(const std::string& client) const;
  std::size_t activeCount() const { return clients_.size(); }
  // Grants made so far (DSSP) and the times a client had to wait: for the records.
  uint64_t grants() const { return grants_; }
  uint64_t waits() const { return waits_; }

 private:
  struct ClientClock {
    uint64_t clock = 0;
    int64_t lastFinishMs = 0;
    int64_t intervalMs = -1;  // -1: not known yet
    uint32_t extraLeft = 0;
    bool waiting = false;
  };
  explicit ClockBound(const Options& options) : options_(options) {}
  // Whether client p (just finished, or waiting) may start now; consumes or makes a grant.
  bool mayStart(const std::string& id, ClientClock& p, int64_t nowMs);
  // After the minimum clock may have risen: the waiting clients that may start now.
  std::vector<std::string> release(int64_t nowMs);

  Options options_;
  std::map<std::string, ClientClock> clients_;
  uint64_t grants_ = 0;
  uint64_t waits_ = 0;
};

}  // namespace starling::coordinator
