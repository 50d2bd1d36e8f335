#pragma once
// ServerOptimizer: what the server does with a round's aggregate Delta before the
// downlink compresses it, and which model it serves. It owns the decision of the
// server step: sgd (serverLr x FedExP's extrapolation factor when extrapolate, with
// FedAvgM's momentum u <- beta u + Delta when serverMomentum > 0), adam or yogi
// (FedOpt's adaptive moments m, v), momentum factor masking after the broadcast
// (momentumMasking: m or u zeroed where the top-k broadcast sent a coordinate), and
// the served model's moving average (modelEma: xbar <- a xbar + (1 - a) x).
//
// State: u or m ("server-momentum" / "server-first-moment"), v ("server-second-moment")
// and xbar ("model-average"), each model-sized and present only when in use; a
// checkpoint carries them as EngineSnapshot::vectors.
// Shards (docs/coordinator.md "Shards"): given the engine's Shards, the element-wise
// steps (the moments, momentum, the step size, the moving average) run by shard on
// its pool, with the same bits as without; FedExP's ||Delta||^2 stays one sum in order.
// One thread at a time (the owner's); the shards' threads only inside apply() and
// modelCommitted().

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "starling/compression/compressed.hpp"
#include "starling/coordinator/round_engine.hpp"
#include "starling/util/status.hpp"

namespace starling::coordinator {

class Shards;

class ServerOptimizer {
 public:
  // Checks the settings it uses (serverLr, serverMomentum, modelEma, serverOptimizer,
  // serverBeta1/2, serverEps, extrapolate). shards: the engine's (it outlives the
  // optimizer), or null for one shard on the calling thread.
  static Result<ServerOptimizer> create(const EngineConfig& config, std::size_t dim, Shards* shards = nullptr);

  // Turns Delta into the step p_s in place. spread: the aggregator's FedExP statistic
  // (nullopt when the round added nothing). Returns the step taken on Delta, serverLr x
  // the FedExP factor (what the round summary reports).
  double apply(std::span<float> delta, std::optional<double> spread);
  // The broadcast q was applied to the model: momentum masking (top-k q only).
  void broadcastSent(const compression::Compressed& q);
  // The model after a commit: the moving average follows it (modelEma > 0).
  void modelCommitted(std::span<const float> model);
  // The moving average, empty until the first commit (or when modelEma is 0).
  std::span<const float> average() const { return average_; }

  // The vectors in use, by their checkpoint names (EngineSnapshot::vectors).
  void saveVectors(std::map<std::string, std::vector<float>>& out) const;
  // Takes from a checkpoint the vectors this configuration uses; the others are left
  // at their start. kMalformed for an unknown name or a size other than dim.
  Status restoreVectors(const std::map<std::string, std::vector<float>>& vectors);

 private:
  ServerOptimizer(const EngineConfig& config, std::size_t dim, Shards* shards);
  // fn over [0, dim): by shard on the pool, or fn(0, dim) without shards.
  void forRanges(std::size_t dim, const std::function<void(std::size_t, std::size_t)>& fn);

  enum class Rule { kSgd, kAdam, kYogi };
  std::size_t dim_;
  Rule rule_;
  double lr_, momentum_, beta1_, beta2_, eps_, ema_;
  bool extrapolate_, masking_;
  std::vector<float> velocity_;      // sgd's u or adam / yogi's m (empty when off)
  std::vector<float> secondMoment_;  // adam / yogi: v
  std::vector<float> average_;       // modelEma: xbar (empty until the first commit)
  Shards* shards_;                   // null: one shard, no threads
};

}  // namespace starling::coordinator
