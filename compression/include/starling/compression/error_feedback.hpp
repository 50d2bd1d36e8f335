#pragma once
// Error feedback: p = v + e; q = C(p); e <- p - q, with commit and rollback.
//
// The same type serves the client's uplink memory (e_k) and the coordinator's
// downlink memory (ebar); see docs/compression.md and ALGORITHMS.md §2.
//
// Lifecycle per update: compress() computes p = v + e and q = C(p), sets e <- p - q at
// once and keeps q pending under a tag (the client uses the round); the caller then
// says what the other side did with it:
//   commit(tag)   - q was applied: nothing more to do (then the cap, below);
//   rollback(tag) - q was not applied (rejected, lost with a crash, abandoned round):
//                   e <- e + q, so the update's input is carried into the next one.
// Several updates may be pending at once (a late update waiting for the round that
// applies it while the client trains the next one), resolved in any order.
// Without decay, reset or cap, after any sequence of updates
//   sum(committed q) + sum(pending q) + e == sum(all inputs v)   (up to float rounding),
// so once nothing is pending, sum(committed q) + e == sum(inputs).
// missedRounds() applies the staleness policy: e *= decay per missed round, and
// e <- 0 after `resetAfterMissedRounds` consecutive missed rounds. These, and the
// cap, deliberately drop mass; they are off by default.
//
// Owns two buffers of d floats (e and a scratch p) plus a copy of each pending q. Not
// synchronized: one thread at a time.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "starling/compression/compressed.hpp"
#include "starling/compression/compressor.hpp"
#include "starling/util/status.hpp"

namespace starling::compression {

struct ErrorFeedbackOptions {
  // Multiplies the memory once per missed round, in [0, 1]; 1 keeps it unchanged.
  float decayPerMissedRound = 1.0f;
  // Clears the memory after this many consecutive missed rounds; 0 never does.
  std::uint32_t resetAfterMissedRounds = 0;
  // On commit, scales e down so that ||e|| <= maxErrorRatio * ||p||; 0 disables the
  // cap. For a contraction ||p - q|| <= ||p|| already, so a useful cap is below 1.
  double maxErrorRatio = 0.0;
};

class ErrorFeedback {
 public:
  // d > 0 elements; options as above (validated by create()).
  static Result<ErrorFeedback> create(std::size_t d, ErrorFeedbackOptions options = {});

  std::size_t size() const { return memory_.size(); }

  // p = v + e, q = C(p) into out, e <- p - q; q stays pending under `tag`. With
  // clipNorm > 0, q is clipped to that L2 norm (clipToNorm) before e is computed, so
  // what was clipped away stays in the memory like what was compressed away. Fails,
  // changing nothing, when v.size() != size(), when `tag` is already pending, or when C
  // fails.
  Status compress(std::span<const float> v, Compressor& compressor, const CompressParams& params, Compressed& out,
                  std::uint64_t tag = 0, double clipNorm = 0);

  bool hasPending() const { return !pending_.empty(); }
  bool isPending(std::uint64_t tag) const;
  std::size_t pendingCount() const { return pending_.size(); }

  // The other side applied the pending q of `tag`. Resets the missed-round count.
  Status commit(std::uint64_t tag = 0);
  // The other side did not apply the pending q of `tag`: e <- e + q.
  Status rollback(std::uint64_t tag = 0);

  // This side took no part in n rounds. Fails while an update is pending.
  Status missedRounds(std::uint32_t n);

  // Clears the memory and any pending update.
  void reset();
  // Replaces the memory with a saved one (a checkpoint's), clearing any pending
  // update. Fails when saved.size() != size().
  Status restore(std::span<const float> saved);

  // The other side applied more than the committed q (the coordinator's model rounding
  // to `model-mantissa-bits`): e[i] += extra[j] for i = at[j] (at empty: every element,
  // extra.size() == size()), so the sum above still holds. Fails on mismatched sizes or
  // an index out of range, changing nothing.
  Status carry(std::span<const std::uint32_t> at, std::span<const float> extra);

  // e: includes p - q of the pending updates (their q is added back if rolled back).
  std::span<const float> memory() const { return memory_; }
  std::uint32_t consecutiveMissedRounds() const { return missed_; }
  // ||e|| / ||p|| after the last commit, before the cap (0 when ||p|| == 0).
  double lastErrorRatio() const { return lastRatio_; }

 private:
  ErrorFeedback(std::size_t d, ErrorFeedbackOptions options);

  struct Pending {
    std::uint64_t tag = 0;
    Compressed q;
    double norm = 0.0;  // ||p||
  };
  // Finds a pending update, or says what is wrong with the call.
  Result<std::size_t> pendingIndex(std::uint64_t tag, const char* action) const;

  ErrorFeedbackOptions options_;
  std::vector<float> memory_;     // e
  std::vector<float> corrected_;  // scratch: p while compressing
  std::vector<Pending> pending_;  // in the order compressed
  std::uint32_t missed_ = 0;
  double lastRatio_ = 0.0;
};

}  // namespace starling::compression
