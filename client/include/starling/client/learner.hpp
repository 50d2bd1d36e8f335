#pragma once
// Learner: a client's local round, the one implementation that starling-client, the C
// API (both through Participant) and starling-sim use. It owns
// - the task a Welcome describes (LearnerTask: model spec, trainer options, uplink
//   compressor, error-feedback settings, the global model's precision);
// - the held global model xhat and its round, and catching it up from a RoundAssign
//   (a dense model, catch-up values, or a broadcast log replayed with relative indices),
//   checked against the assignment's checksum;
// - train(): tau steps of the Trainer with its sampler, the difference compressed with
//   error feedback (each update pending under its round: several may await verdicts);
// - settle(): commit or roll back an update on its verdict, and settleAfterReconnect():
//   what Welcome's held_rounds and accepted_rounds say about the updates in flight.
//
// Two modes:
// - holding (a device): the Learner keeps xhat and a Trainer (model, momentum, sampler)
//   across rounds; train(assignment) trains from xhat after catchUp().
// - borrowed base (the simulator, up to 10,000 clients in one process): no xhat and no
//   Trainer of its own. train(assignment, base, shard) trains from `base` (the engine's
//   model, which every caught-up client holds) with a Trainer built for the round over
//   the shared LearnerTask's model; what carries to the client's next round is small:
//   the sampler (its score table, a few floats per example of the client, and its
//   variance-reduction estimate; not its workspaces), the pending rounds and the uplink
//   error-feedback memory, which the caller may drop (dropMemory) to bound memory.
//
// Overlap Local-SGD (the task's train.overlap alpha > 0; docs/simulation.md, "Overlap
// Local-SGD"): the local model x is not reset to xhat at each round. After a round's
// boundary the Learner has the next tau steps to run from x (advance(): a device runs
// them on a worker thread while its update goes up and the next assignment comes down;
// the simulator runs them at once and charges their time to the virtual clock); the
// next train() is the boundary: x <- x - alpha (x - z) with the anchor z (xhat, or with
// anchor momentum beta > 0: v <- beta v + (xhat - z), z <- z + v), then the gap xhat - x
// goes up. x already carries what earlier uplinks left unsent, so the Learner hands the
// error-feedback memory the gap minus what it holds (and minus its updates still in
// flight): what is compressed is the gap, and sum sent + e = sum computed still holds.
// Without fresh background steps (the first assignment, after missed rounds: a base
// more than kOverlapStaleVersions versions past the last boundary's, or an evicted
// state) x restarts from xhat and the tau steps run in the foreground, with no pull-back
// (x started from this very base). Memory: x, one
// model copy (three with beta > 0: the anchor z and its velocity v), plus a copy of
// each update in flight.
//
// Seeds: the client's seed (clientSeed()) mixed with the task's, then with each round:
// the same client and round give the same minibatches and compression on a device and
// in the simulator.
//
// Threads: one thread at a time (a Participant's executor, or the simulator's loop). A
// LearnerTask shared by several Learners is used by one of them at a time. The one
// exception: advance() may run on another thread while the owner calls settle() (and
// reads model(), heldRound(), modelChecksum(), memory(), stats(), pending()); nothing
// else may be called until advance() has returned.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "starling/client/trainer.hpp"
#include "starling/compression/compressor.hpp"
#include "starling/compression/error_feedback.hpp"
#include "starling/compression/noise.hpp"
#include "starling/compression/payload.hpp"
#include "starling/data/categories.hpp"
#include "starling/data/dataset.hpp"
#include "starling/wire/messages.hpp"

namespace spdlog {
class logger;
}

namespace starling::client {

// The answer to a StatsRequest (task.standardize, task.categorical-vocabulary): the
// per-feature count, sum and sum of squares of the client's training examples
// (data::featureSums) and, when `categories`, its categorical columns' values with their
// counts (data::categoryCounts), as starling-client sends them and the simulator's
// virtual clients make them.
wire::FeatureStatsMsg shardStatistics(const data::Dataset& shard, bool categories = false);

// Welcome's categorical vocabulary as data::recodeCategories takes it.
data::CategoryVocabulary vocabularyOf(const std::vector<wire::CategoryValuesMsg>& columns);

// Overlap Local-SGD: a boundary whose base is more than this many versions past the
// last boundary's finds x stale (the client missed rounds): x restarts from xhat.
inline constexpr uint64_t kOverlapStaleVersions = 4;

// A client's seed from a configured seed and its identity.
uint64_t clientSeed(uint64_t seed, std::string_view clientId);

// Federated evaluation: of n examples, round(fraction x n) are held out of training, at
// least 1 and leaving at least 1; 0 when fraction is 0 or n < 2. Hello reports the n
// minus these, the examples the client trains on.
std::size_t heldOutCount(std::size_t n, double fraction);

// The held-out draw, the same on a device (Participant) and in starling-sim: rows
// shuffled by std::mt19937_64(seed), the first heldOutCount(rows.size(), fraction)
// held out, the rest kept for training; both returned sorted ascending.
struct HeldOutSplit {
  std::vector<uint32_t> heldOut;
  std::vector<uint32_t> kept;
};
HeldOutSplit splitHeldOut(std::span<const uint32_t> rows, double fraction, uint64_t seed);

// The task of a Welcome, set up once: the model as specified, the trainer's options,
// the uplink compressor and the settings of the uplink memory. Owns the compressor's
// scratch buffers; not synchronized.
class LearnerTask {
 public:
  // kMalformed without hyper-parameters or compression settings; kInvalidArgument for a
  // model, compressor or model precision this build cannot use.
  static Result<std::shared_ptr<LearnerTask>> create(const wire::WelcomeMsg& welcome);

  const std::string& modelSpec() const { return modelSpec_; }
  const model::Model& prototype() const { return prototype_; }
  const TrainerOptions& trainerOptions() const { return trainerOptions_; }
  compression::Compressor& uplink() { return *uplink_; }
  bool errorFeedback() const { return errorFeedback_; }
  float errorCap() const { return errorCap_; }
  // The uplink memory's staleness policy (compression::ErrorFeedbackOptions).
  float memoryDecay() const { return memoryDecay_; }
  // Differential privacy: the message sent is clipped to this L2 norm (0 = off).
  float updateClipNorm() const { return updateClipNorm_; }
  // Distributed noise: N(0, updateNoiseStd^2) is added to every coordinate of the
  // clipped message (0 = off).
  float updateNoiseStd() const { return updateNoiseStd_; }
  uint32_t memoryResetAfter() const { return memoryResetAfter_; }
  uint32_t mantissaBits() const { return mantissaBits_; }
  // Overlap Local-SGD's pull-back alpha (0 = off) and anchor momentum beta.
  float overlap() const { return overlap_; }
  float overlapMomentum() const { return overlapMomentum_; }
  uint64_t seed() const { return seed_; }
  uint64_t initSeed() const { return initSeed_; }
  std::size_t numParams() const { return prototype_.numParams(); }
  // The sums of `params` on `heldOut` (federated evaluation), in a model of the task's
  // kept for the purpose (one evaluation at a time).
  Result<std::vector<double>> evaluate(std::span<const float> params, const data::Dataset& heldOut);

 private:
  explicit LearnerTask(model::Model prototype) : prototype_(std::move(prototype)) {}

  std::string modelSpec_;
  model::Model prototype_;
  TrainerOptions trainerOptions_;
  std::unique_ptr<compression::Compressor> uplink_;
  bool errorFeedback_ = true;
  float errorCap_ = 0;
  float memoryDecay_ = 1.0f;
  float updateClipNorm_ = 0;
  float updateNoiseStd_ = 0;
  uint32_t memoryResetAfter_ = 0;
  uint32_t mantissaBits_ = 23;
  float overlap_ = 0;
  float overlapMomentum_ = 0;
  uint64_t seed_ = 0;
  uint64_t initSeed_ = 0;
  std::optional<model::Model> evaluator_;  // made on the first evaluate()
};

// Test and benchmark only (docs/privacy.md "Attack models"): how a hostile client
// corrupts its round. The difference it trained is replaced before error feedback and
// compression, so the attacker's message is what any client of the task would send
// (clipped under differential privacy, compressed like the rest):
//  - sign-flip:FACTOR  -FACTOR x the difference (default 4; Li et al. 2019's RSA);
//  - scale:FACTOR      FACTOR x the difference (default 10);
//  - noise:FACTOR      Gaussian noise of FACTOR x the difference's norm (default 10);
//  - label-flip        trains honestly on labels y -> classes - 1 - y (the caller flips
//                      its data: data::Dataset::flipLabels; kind() says so).
struct Attack {
  enum class Kind { kNone, kSignFlip, kScale, kNoise, kLabelFlip };
  Attack() = default;  // none
  Attack(Kind k, double f) : kind(k), factor(f) {}
  Kind kind = Kind::kNone;
  double factor = 0;
  // "none", "sign-flip", "scale", "noise" or "label-flip", each but the first and the
  // last with an optional ":FACTOR"; kInvalidArgument naming what is wrong.
  static Result<Attack> parse(std::string_view text);
  // Corrupts `delta` (the difference trained) in place; seed: the noise's.
  void apply(std::span<float> delta, uint64_t seed) const;
};

struct LearnerOptions {
  uint64_t seed = 0;  // the client's seed (clientSeed())
  // Keep the sum of every computed difference, for writeAudit() (test-only).
  bool audit = false;
  // Updates awaiting verdicts at most; past it the oldest is taken as lost.
  std::size_t maxPending = 8;
  // Test and reference export only (TrainerOptions::batchLog): every minibatch's
  // indices are appended here. Null: nothing is recorded.
  std::vector<uint32_t>* batchLog = nullptr;
  // Holding mode without local data (a relay, whose clients train): welcome() builds no
  // Trainer; updates come from submit().
  bool trains = true;
  // Test and benchmark only: this client is hostile (Attack above).
  Attack attack{};
  // Distributed noise's source: unset, a cryptographic generator (compression::
  // secureNoise); set, seeded from this (the simulator's, reproducible: never for a
  // deployment, whoever knows the seed can subtract the noise).
  std::optional<uint64_t> noiseSeed{};
};

struct LearnerStats {
  uint64_t roundsTrained = 0;
  uint64_t roundsAccepted = 0;
  uint64_t roundsRejected = 0;
  uint64_t resyncs = 0;  // dense models received
  // Overlap Local-SGD: rounds whose steps ran before their assignment (background), and
  // rounds that restarted x from xhat and trained in the foreground.
  uint64_t overlapped = 0;
  uint64_t overlapRestarts = 0;
  uint64_t bytesUp = 0;  // update payload bytes made
  double lastLoss = 0;
};

// One trained round: the compressed difference and what the Update says about it.
struct LocalUpdate {
  uint64_t round = 0;
  uint64_t baseRound = 0;
  TrainStats stats;
  compression::Payload payload;  // the encoded difference
  std::size_t selected = 0;      // values the compressor kept
  uint64_t compressionSeed = 0;  // the seed the uplink compressor was given (rand-k's draw)
  // Overlap Local-SGD: the steps ran in the background before the assignment arrived
  // (false: in train(), after it arrived).
  bool overlapped = false;
  // The model of baseRound evaluated on the client's held-out examples, when the
  // assignment asked and the client has some (model::EvalStats::toVector).
  std::vector<double> evalStats;
  // A relay's clients and their row sets, when they changed (Update.members).
  std::optional<std::vector<wire::MemberRowsMsg>> members{};
  // The Update message; its delta is a view of `payload` (valid while this is alive).
  wire::UpdateMsg message() const;
};

class Learner {
 public:
  // Holding mode (a device). log may be null (silent).
  Learner(LearnerOptions options, std::shared_ptr<spdlog::logger> log);
  // Borrowed-base mode (the simulator) over a shared task.
  Learner(std::shared_ptr<LearnerTask> task, LearnerOptions options);

  // Holding mode: sets up the task of `welcome` over `shard` (which must outlive the
  // Learner) unless it is the task already set up (a reconnect), builds the round-0
  // model when nothing is held, then settles the updates in flight
  // (settleAfterReconnect). kInvalidArgument when the data cannot train the model.
  Status welcome(const wire::WelcomeMsg& welcome, const data::Dataset& shard);
  bool hasTask() const { return task_ != nullptr; }

  // The updates in flight when the connection ended: those in welcome.heldRounds stay
  // pending (their verdicts come later); those in acceptedRounds (or, from a coordinator
  // that does not list them, up to lastAcceptedRound) are committed; any other was lost
  // and is rolled back into the memory.
  void settleAfterReconnect(const wire::WelcomeMsg& welcome);

  // Holding mode: brings xhat to the assignment's base round (dense model, catch-up
  // values, then the broadcast log, each broadcast's changes rounded to the model's
  // precision) and checks the checksum. On a mismatch xhat goes back to the round-0
  // model and the error says so (the coordinator then sends a dense model). Any failure
  // forgets the indices kept for relative broadcasts.
  Status catchUp(const wire::RoundAssignMsg& assign);
  // A new connection: the coordinator no longer knows which broadcast this client
  // applied last, so the kept indices are forgotten.
  void forgetReplayIndices() { lastIndices_.reset(); }

  // Holding mode: trains from xhat. When the assignment asks (RoundAssign.evaluate) and
  // held-out examples were given (setHeldOut), evaluates xhat on them first.
  Result<LocalUpdate> train(const wire::RoundAssignMsg& assign);
  // How the model given to submit() relates to the assignment's base.
  enum class Submitted {
    // It started from this base (a relay's local rounds; ShadowSync's S-MA, whose mix
    // restarts the local model from the global one): what the last uplinks left unsent
    // is in the uplink memory only, and comes back through it.
    kFromBase,
    // It was not reset to the base (ShadowSync's S-EASGD, pulled only part of the way):
    // it still carries what earlier uplinks left unsent, as Overlap Local-SGD's x does.
    // The gap base - model minus the updates still in flight is what is compressed (the
    // memory's input is that gap minus the memory), so nothing is sent twice.
    kCarried,
  };
  // Holding mode: an update whose training happened elsewhere (a relay's local rounds
  // with its clients, the app's own steps under ShadowSync): `model` - xhat (after
  // catchUp()) compressed with error feedback and tagged like a trained round's, with
  // `stats` as its steps, examples and losses. Either way the memory's invariant holds:
  // sum sent + e = sum of the memory's inputs (writeAudit's "computed").
  Result<LocalUpdate> submit(const wire::RoundAssignMsg& assign, std::span<const float> model, const TrainStats& stats,
                             Submitted how = Submitted::kFromBase);
  // Borrowed-base mode: trains from `base` over `shard` (both outlive the call), after
  // evaluating `base` on `heldOut` when the assignment asks and it is not null.
  Result<LocalUpdate> train(const wire::RoundAssignMsg& assign, std::span<const float> base, const data::Dataset& shard,
                            const data::Dataset* heldOut = nullptr);
  // Overlap Local-SGD: the background steps the last train() left to run (tau steps from
  // x with that assignment's learning rate and minibatch). advance() runs them (holding
  // mode; borrowed-base mode over `shard`, which outlives the call) and returns their
  // statistics (steps 0 when there was nothing to run). Until they have run, a train()
  // restarts x in the foreground.
  bool backgroundPending() const { return overlapState_ && overlapState_->next.has_value(); }
  Result<TrainStats> advance();
  Result<TrainStats> advance(const data::Dataset& shard);
  // Borrowed-base mode: whether the overlap state (x, anchor) exists, and may be
  // dropped (no update in flight); dropOverlap() frees it and the next round restarts.
  bool holdsOverlap() const { return overlapState_.has_value(); }
  bool overlapDroppable() const { return overlapState_ && inFlight_.empty(); }
  void dropOverlap() { overlapState_.reset(); }
  // The local model x (empty without overlap or before the first round).
  std::span<const float> localModel() const {
    return overlapState_ ? std::span<const float>(overlapState_->x) : std::span<const float>();
  }

  // Holding mode: the client's held-out examples for federated evaluation (outlive the
  // Learner; null = none).
  void setHeldOut(const data::Dataset* heldOut) { heldOut_ = heldOut; }

  // The verdict on the update of `round`: commit or roll back its memory. Unknown
  // rounds are ignored.
  void settle(uint64_t round, bool accepted);
  // Training is over: every update still pending is rolled back.
  void settleAll(bool accepted);
  const std::vector<uint64_t>& pending() const { return pending_; }

  // Borrowed-base mode: whether the uplink memory exists and may be dropped (nothing
  // pending in it); dropMemory() frees it, and the next train() starts from an empty one.
  bool holdsMemory() const { return memory_.has_value(); }
  bool memoryDroppable() const { return memory_ && !memory_->hasPending(); }
  void dropMemory() { memory_.reset(); }

  // Test-only (ParticipantOptions::auditOut): writes "computed v0 v1 ..." (the sum of
  // every difference trained) and "memory v0 v1 ..." (the uplink memory).
  Status writeAudit(const std::string& path) const;

  // The simulator's varying attackers: the attack of the rounds trained from now on.
  void setAttack(Attack attack) { options_.attack = attack; }

  std::span<const float> model() const { return xhat_; }
  // The uplink memory e (empty without error feedback or before the first update).
  std::span<const float> memory() const { return memory_ ? memory_->memory() : std::span<const float>(); }
  uint64_t heldRound() const { return heldRound_; }
  uint64_t modelChecksum() const;  // of xhat (0 before a task); computed over the model at each call
  const LearnerStats& stats() const { return stats_; }

 private:
  Status applyCatchUp(const wire::RoundAssignMsg& assign);
  void buildInitialModel();          // xhat_ <- the round-0 model; holds round 0
  Status makeMemory(std::size_t d);  // an empty uplink memory of d floats
  // Rolls back the oldest pending updates past maxPending - 1 (room for one more).
  void makeRoom(uint64_t round);
  // Overlap (trainOverlap): overlapInFlight keeps the sent q in inFlight_ until its
  // verdict; gapInput: delta_ is the gap, which already holds what the memory holds.
  Result<LocalUpdate> compressAndTag(const wire::RoundAssignMsg& assign, const TrainStats& stats,
                                     bool overlapInFlight = false, bool gapInput = false);
  // delta_ holds the gap base - x of a model that was not reset to the base (overlap,
  // Submitted::kCarried): with `carried`, the updates in flight are taken out of it and
  // the memory's input is the gap minus the memory; the sent update is kept in flight.
  Result<LocalUpdate> compressGap(const wire::RoundAssignMsg& assign, const TrainStats& stats, bool carried);
  // This round's minibatch: the task's x assign.batchScale, rounded, at least 1.
  int batchFor(const wire::RoundAssignMsg& assign) const;
  // Runs `request` from `from` into delta_ (from - x): holding mode with its Trainer,
  // borrowed-base mode with one built over `shard` for the run (the sampler carried).
  // With `x` set, the trained model is copied there.
  Result<TrainStats> runSteps(std::span<const float> from, const TrainRequest& request, const data::Dataset* shard,
                              std::span<float> x = {});
  // Overlap Local-SGD's boundary (the class comment) for an assignment of base `base`:
  // leaves the compressor's input in delta_ and the next background steps in
  // overlapState_->next.
  Result<TrainStats> advanceOn(const data::Dataset* shard);
  Result<LocalUpdate> trainOverlap(const wire::RoundAssignMsg& assign, std::span<const float> base,
                                   const data::Dataset* shard, std::vector<double> evalStats);

  LearnerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<LearnerTask> task_;
  const bool holding_;
  std::optional<Trainer> trainer_;  // holding mode only
  const data::Dataset* heldOut_ = nullptr;
  std::optional<compression::ErrorFeedback> memory_;
  std::unique_ptr<compression::GaussianNoise> noise_;  // distributed noise's, made when first needed
  uint64_t seed_ = 0;                                  // the client's seed mixed with the task's
  uint64_t lastTrained_ = 0;                           // the last round this client trained (missed rounds since)
  std::optional<Sampler> sampler_;                     // borrowed-base mode: the sampler between rounds (no workspaces)
  std::vector<float> xhat_;                            // holding mode: the shared global model
  std::vector<float> delta_;                           // scratch: base - x
  std::vector<double> computed_;                       // audit: the sum of every delta_
  uint64_t heldRound_ = 0;                             // 0 = nothing held (or the round-0 model)
  // The indices of the last broadcast applied as the last of a log replay in this
  // session: what a replay's first tensor with relative indices is coded against.
  std::optional<std::vector<uint32_t>> lastIndices_;
  // Rounds of the updates awaiting a verdict (with error feedback, each pending in
  // memory_ under its round), oldest first.
  std::vector<uint64_t> pending_;
  LearnerStats stats_;
  // Overlap Local-SGD (task overlap > 0), made at the first round.
  struct OverlapState {
    std::vector<float> x;                 // the local model
    std::vector<float> anchor, velocity;  // beta > 0: z and v
    bool anchorSet = false;               // z and v hold an earlier boundary's
    bool fresh = false;                   // x is the background steps past the last boundary
    bool started = false;                 // a boundary happened
    uint64_t lastBase = 0;                // the base round of the last boundary
    std::optional<TrainRequest> next;     // the background steps still to run
    TrainStats stats;                     // of the last background run
  };
  std::optional<OverlapState> overlapState_;
  // Overlap: the updates sent and not yet settled (their verdict unknown), which the
  // coordinator has not applied to the base of the next assignment; each boundary
  // subtracts them from the gap so that they are not sent twice.
  std::vector<std::pair<uint64_t, compression::Compressed>> inFlight_;
};

}  // namespace starling::client
