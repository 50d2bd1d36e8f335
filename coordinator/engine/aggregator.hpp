#pragma once
// Aggregator: what one round's updates add up to. It owns the decision of each
// update's weight (examples x selection weight x s(staleness), s FedBuff's
// 1/sqrt(1 + staleness) unless EngineConfig::stalenessWeight says otherwise), FedNova's
// normalization by steps, the norm-ratio rejection (maxNormRatio x the upper median
// of the round's norms, with the first updates held until kMinNormsToJudge norms are
// in), the sender mean (senderMean: coordinate i scaled by W / W_i) and the statistics
// FedExP's extrapolation needs. ALGORITHMS.md §2 and §5; docs/coordinator.md step 5.
//
// Streaming: an accepted update is added at once to one running sum
// sum_k (w_k / steps_k) q_k and released; the aggregator holds one dense vector (two
// with senderMean) per round, not one per update. Which updates are held, and when
// they are judged, is the caller's (the engine's open round); the aggregator says
// whether a limit is known yet (limitOnTime) and judges each update it is given (add).
//
// Shards (docs/coordinator.md "Shards"): given the engine's Shards, a sparse update is
// split by the shard map and each shard adds its own coordinates (and the sender mean's
// coverage) on the pool; a dense update and finish() go by equal ranges. The sums are the same bits as
// without. shardLoads() counts the entries each shard added in the round.
//
// State: the open round's sums and norms; none of it outlives the round, and none
// of it is in a checkpoint (an open round is abandoned, not resumed).
// One thread at a time (the owner's); the shards' threads only inside add(),
// begin() and finish().

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "starling/compression/compressed.hpp"
#include "starling/coordinator/round_engine.hpp"
#include "starling/util/status.hpp"

#include "engine/staleness.hpp"

namespace starling::coordinator {

// One update as the aggregator sees it.
struct Contribution {
  compression::Compressed delta;  // released by Aggregator::add
  double norm = 0;                // ||delta||, from its compressed form
  uint64_t examples = 0;
  uint32_t steps = 0;            // > 0
  uint32_t staleness = 0;        // model versions behind
  double selectionWeight = 1.0;  // Selection::Pick::weight of its round
};

class Shards;

class Aggregator {
 public:
  // How the round's updates combine (EngineConfig::aggregation, trimFraction,
  // krumFaulty, krumSelect, serverClipNorm). The robust kinds hold each accepted
  // update dense, times s(staleness), and finish() combines them unweighted
  // (engine/robust.hpp) on the calling thread.
  struct Rule {
    enum class Kind { kMean, kMedian, kTrimmedMean, kMultiKrum };
    Kind kind = Kind::kMean;
    double trim = 0.1;
    uint32_t krumFaulty = 0, krumSelect = 0;
    double clipNorm = 0;  // server-side clipping of every update (0 = off)
  };
  // The rule of a configuration, its values checked.
  static Result<Rule> rule(const EngineConfig& config);

  // The norm check needs this many norms before a median means something.
  static constexpr std::size_t kMinNormsToJudge = 3;

  // maxNormRatio 0 = no norm check; weight: s(staleness). shards: the engine's (it
  // outlives the aggregator), or null for one shard on the calling thread.
  Aggregator(std::size_t dim, double maxNormRatio, bool senderMean, StalenessWeight weight = StalenessWeight::fedBuff(),
             Shards* shards = nullptr);

  void setRule(Rule rule) { rule_ = rule; }
  // Differential privacy (EngineConfig::clipNorm): every update is clipped to clipNorm
  // and weighed by s(staleness) alone, and finish() adds N(0, noiseStd^2) from `noise`
  // (it outlives the aggregator) to each coordinate of the sum before dividing it by the
  // round's fixed denominator. The norm-ratio check is off.
  // Distributed noise (shares = M > 0): each client added N(0, noiseStd^2 / M) to its
  // message, so the engine does not clip (that would shrink the noise) and adds only the
  // shares of the M the round lacks, N(0, noiseStd^2 max(0, M - added) / M).
  void setPrivacy(double clipNorm, double noiseStd, compression::GaussianNoise* noise, uint32_t shares = 0);
  // Updates added to the sum since begin() (under privacy), and the weight an update of
  // this staleness enters the private sum with, s(staleness) as a float.
  std::size_t added() const { return dpAdded_; }
  double privacyWeight(uint32_t staleness) const;

  // Starts a round: the sums and norms at zero. denominator: privacy's fixed D (> 0).
  void begin(double denominator = 1);
  // Records the norm of an update received on time (the median is over these).
  void noteNorm(double norm) { norms_.push_back(norm); }
  // The limit for updates received on time: nullopt while fewer than kMinNormsToJudge
  // norms are in (hold them), else maxNormRatio x their upper median (0 = no check).
  std::optional<double> limitOnTime() const;
  // The limit at the close, with the norms of late updates joining the round's; 0 (no
  // check) when even then fewer than kMinNormsToJudge are in.
  double limitAtClose(std::span<const double> lateNorms) const;
  // Judges c against limit (0 = none): over it, returns why it is rejected; else adds it
  // to the sum. Either way c.delta is released.
  std::optional<std::string> add(Contribution& c, double limit);

  // Ends the round: the sum becomes Delta, the weighted step-normalized mean
  // (stepSum / W^2) sum_k (w_k / steps_k) q_k, then with senderMean coordinate i x W / W_i;
  // under privacy (sum_k s_k q_k + noise) / D; under a robust rule the rule's result
  // over the held updates. Returns Delta (empty sum: all zeros, plus the noise under
  // privacy), valid until the next begin().
  std::span<float> finish();
  // FedExP's sum_k (w_k / W) ||a_k||^2, a_k = (stepSum / W) q_k / steps_k the updates as
  // they enter Delta; nullopt when nothing was added.
  std::optional<double> spread() const;
  double weightSum() const { return weightSum_; }
  // Entries added by each shard since begin() (one shard when there are no Shards): a
  // sparse update's indices the shard owns, a dense update's parameters in the shard's
  // range (Shards::forRanges).
  std::span<const uint64_t> shardLoads() const { return loads_; }

 private:
  // Adds delta x alpha (and w to the sender mean's coverage): on the calling thread in
  // one pass, or by shard.
  void addWhole(const compression::Compressed& delta, float alpha, float w);
  void addSharded(const compression::Compressed& delta, float alpha, float w);

  // A robust rule's Delta over held_ into sum_.
  void combineHeld();

  Rule rule_;
  double dpClip_ = 0, dpNoiseStd_ = 0, denominator_ = 1;
  uint32_t dpShares_ = 0;    // distributed noise's M (0: central)
  std::size_t dpAdded_ = 0;  // updates in this round's private sum
  compression::GaussianNoise* noise_ = nullptr;
  std::vector<std::vector<float>> held_;  // robust rules: the round's updates, dense
  std::size_t heldCount_ = 0;             // of held_, those of this round (the rest is reused memory)
  double maxNormRatio_;
  StalenessWeight weight_;
  bool senderMean_;
  std::vector<float> sum_;       // the open round's running sum, then its Delta
  std::vector<float> coverage_;  // senderMean: W_i of the open round
  std::vector<double> norms_;    // of every update received on time
  double weightSum_ = 0;         // sum of w_k
  double stepSum_ = 0;           // sum of w_k * steps_k
  double normSqSum_ = 0;         // sum of w_k * (||q_k|| / steps_k)^2, for FedExP
  Shards* shards_;               // null: one shard, no threads
  std::vector<uint64_t> loads_;  // per shard, entries added since begin()
};

}  // namespace starling::coordinator
