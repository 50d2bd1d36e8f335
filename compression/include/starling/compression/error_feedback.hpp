#pragma once
// Error feedback: p = v + e; q = C(p); e <- p - q, with commit and rollback.
//
// The same type serves the client's uplink memory (e_k) and the coordinator's
// downlink memory (ebar); see docs/compression.md and ALGORITHMS.md §2.
//
// Lifecycle per round: compress() computes p and q and keeps them pending; the memory
// changes only when the caller learns what the other side did:
//   commit()   - q was applied: e <- p - q (then the cap, below);
//   rollback() - q was not applied (rejected or abandoned round): e <- p, so the
//                round's input is carried into the next round rather than lost.
// Without decay, reset or cap, after any sequence of rounds
//   sum(committed q) + e == sum(all inputs v)   (up to float rounding).
// missedRounds() applies the staleness policy: e *= decay per missed round, and
// e <- 0 after `resetAfterMissedRounds` consecutive missed rounds. These, and the
// cap, deliberately drop mass; they are off by default.
//
// Owns two buffers of d floats (e and p) plus a copy of the pending q. Not
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

  // p = v + e, q = C(p) into out; p and q stay pending. Fails, changing nothing, when
  // v.size() != size(), when an update is already pending, or when C fails.
  Status compress(std::span<const float> v, Compressor& compressor, const CompressParams& params, Compressed& out);

  bool hasPending() const { return pending_; }

  // The other side applied the pending q. Resets the missed-round count.
  Status commit();
  // The other side did not apply the pending q; its p becomes the memory.
  Status rollback();

  // This side took no part in n rounds. Fails while an update is pending.
  Status missedRounds(std::uint32_t n);

  // Clears the memory and any pending update.
  void reset();
  // Replaces the memory with a saved one (a checkpoint's), clearing any pending
  // update. Fails when saved.size() != size().
  Status restore(std::span<const float> saved);

  // The other side applied more than the committed q (the coordinator's model rounding
  // to `model-mantissa-bits`): e[i] += extra[j] for i = at[j] (at empty: every element,
  // extra.size() == size()), so the sum above still holds. Fails while an update is
  // pending, on mismatched sizes or an index out of range, changing nothing.
  Status carry(std::span<const std::uint32_t> at, std::span<const float> extra);

  std::span<const float> memory() const { return memory_; }
  std::uint32_t consecutiveMissedRounds() const { return missed_; }
  // ||e|| / ||p|| after the last commit, before the cap (0 when ||p|| == 0).
  double lastErrorRatio() const { return lastRatio_; }

 private:
  ErrorFeedback(std::size_t d, ErrorFeedbackOptions options);

  ErrorFeedbackOptions options_;
  std::vector<float> memory_;     // e
  std::vector<float> corrected_;  // p of the pending update
  Compressed pendingQ_;
  double pendingNorm_ = 0.0;  // ||p||
  bool pending_ = false;
  std::uint32_t missed_ = 0;
  double lastRatio_ = 0.0;
};

}  // namespace starling::compression
