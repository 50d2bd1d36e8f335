#pragma once
// RoundEngine: the coordinator's decisions, with no sockets and no clock.
//
// The shell (the daemon, or the simulated federation) feeds it events stamped with
// the current time in milliseconds and carries out the actions it returns: send
// this to that client, commit this round, wake me at that time. The engine keeps the
// client table and the open round (deadlines, the minimum goal, validation of
// updates, late updates and their staleness, the verdicts) and composes the parts
// that each own one decision (coordinator/engine/, docs/coordinator.md "The engine's
// parts"): Selection (who trains), Aggregator (what the updates add up to),
// ServerOptimizer (the server's step and the served model), Downlink (the model, the
// broadcast and catch-up) and Pace (tau, lr, densities, step budgets over time).
// ALGORITHMS.md §2, §3, §5.
//
// Deterministic: the same configuration, initial model and event sequence give
// the same actions, bit for bit.
//
// Threading: one thread at a time (the daemon's engine strand). Not copyable.

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "starling/compression/compressor.hpp"
#include "starling/compression/noise.hpp"
#include "starling/compression/payload.hpp"
#include "starling/coordinator/client_rows.hpp"
#include "starling/coordinator/outcomes.hpp"
#include "starling/util/status.hpp"

namespace starling::coordinator {

// The engine's parts (coordinator/engine/, docs/coordinator.md "The engine's parts").
class Aggregator;
class ClockBound;
class Downlink;
class Pace;
class PrivacyBudget;
class Selection;
class ServerOptimizer;
class Shards;

struct EngineConfig {
  uint64_t rounds = 20;           // training ends after this many committed rounds
  uint32_t clientsPerRound = 10;  // K: the round closes when K updates are in
  double overSelection = 1.3;     // assign to ceil(K * overSelection) clients
  uint32_t minClients = 0;        // a round starts once this many are idle (0 = K)
  uint32_t minGoal = 0;           // fewer updates at the deadline abandon the round (0 = ceil(K/2))
  int64_t deadlineMs = 60'000;    // from assignment to the round's deadline
  uint32_t maxStaleness = 2;      // S: a late update from round r - s is used while s <= S

  // How rounds relate to time (docs/coordinator.md "Modes"; ALGORITHMS.md §7).
  //  "sync"   a round assigns ceil(K x overSelection) clients and closes with K updates,
  //           or at the deadline with at least minGoal.
  //  "async"  buffered asynchronous aggregation (FedBuff, Nguyen et al. 2022): up to
  //           `concurrency` clients train at once, each from the model it was given, and
  //           an idle client is assigned as soon as a slot frees. A round is a server
  //           step: it closes once K = bufferSize updates arrived since the last one,
  //           whichever round each was assigned in, each weighted by stalenessWeight of
  //           the versions it is behind; an update more than maxStaleness versions behind
  //           is discarded. An assignment unanswered after deadlineMs frees its slot (the
  //           client is recorded as a straggler). Rounds are committed as in sync.
  //  "ssp"    async gated by the SSP bound: a client is assigned again only while it has
  //           returned at most stalenessBound more updates than the slowest active client
  //           (Ho et al. 2013); every connected client is a worker unless concurrency
  //           limits them.
  //  "dssp"   ssp whose bound moves within [stalenessBound, stalenessMax] by DSSP's grants
  //           (Zhao et al. 2019) from each client's last interval (engine/staleness.hpp).
  std::string mode = "sync";
  uint32_t concurrency = 0;  // clients training at once (0: async ceil(K x overSelection), ssp/dssp all)
  uint32_t bufferSize = 0;   // async, ssp, dssp: updates per server step (0 = clientsPerRound)
  std::string stalenessWeight = "poly:0.5";  // s(tau), StalenessWeight::parse
  uint32_t stalenessBound = 2;               // ssp: s; dssp: the lowest bound s_L
  uint32_t stalenessMax = 0;                 // dssp: the highest bound (0 = stalenessBound + 4)
  // Federated evaluation: clients evaluate the model of committed round b on their
  // held-out examples when b is a multiple of this, and send the sums with their update
  // (0 = off).
  uint32_t federatedEvalEvery = 0;
  double maxNormRatio = 20.0;  // reject updates with ||q|| > ratio * median (0 = off)

  // How a round's accepted updates are combined (docs/privacy.md "Robust aggregation";
  // engine/robust.hpp). "mean": the weighted, step-normalized mean above, streamed.
  // "median" (coordinate-wise), "trimmed-mean" (trimFraction of each end per
  // coordinate) and "multi-krum" (the krumSelect updates of lowest Krum score with
  // krumFaulty assumed bad) hold the round's updates dense (K x the model's floats) and
  // combine them unweighted; a sparse update's unsent coordinates are zeros.
  std::string aggregation = "mean";
  double trimFraction = 0.1;  // trimmed-mean's beta, in [0, 0.5)
  uint32_t krumFaulty = 0;    // multi-krum's f (0: floor((n - 3) / 2) of the round's n updates, at least 0)
  uint32_t krumSelect = 0;    // multi-krum's m (0: n - f)
  // Server-side norm clipping: every update is scaled to L2 norm at most this before it
  // is combined, by any rule (0 = off).
  double serverClipNorm = 0;

  // Differential privacy, user-level DP-FedAvg (McMahan et al. 2018; docs/privacy.md).
  // On when clipNorm > 0: every client clips the message it sends (after compression
  // and error feedback) to L2 norm clipNorm, the engine clips it again, and the round's
  // Delta is (sum_k s(staleness_k) q_k + N(0, (noiseMultiplier x clipNorm)^2)) / D, with
  // D fixed: samplingRate x the idle clients under poisson sampling, K under fixed.
  // Examples, steps and selection weights do not weigh updates (each client's share is
  // bounded by clipNorm alone). Needs aggregation mean, no senderMean, no extrapolate,
  // no sticky sampling; the norm-ratio check is off (clipping bounds every update).
  // In sync mode late updates are discarded (their sender was sampled for an earlier
  // round) and each committed round composes into a Renyi-DP accountant
  // (engine/privacy.hpp): poisson rounds as the sampled Gaussian mechanism of rate
  // samplingRate (add/remove one client), fixed rounds as sampling m of N without
  // replacement (replace one client, sensitivity 2 clipNorm). In the asynchronous modes
  // each server step divides by the buffer's K, a client lands at most once in a step,
  // and every client's spending is accounted on its own (engine/privacy_budget.hpp).
  double clipNorm = 0;
  double noiseMultiplier = 0;  // sigma; 0 = clipping only (epsilon infinite)
  // Where the noise is added: "central", by the engine on the sum, or "distributed":
  // each client adds N(0, (sigma clipNorm)^2 / M) to every coordinate of its clipped
  // message, M = noiseShares (0: clientsPerRound), and the engine adds the shares of
  // the M a round lacks. Needs fixed sampling and a dense uplink (identity or fp16).
  std::string noisePlacement = "central";
  uint32_t noiseShares = 0;
  // Who trains: "fixed", ceil(K x overSelection) of the idle clients (the default, also
  // without privacy), or "poisson", each idle client independently with samplingRate.
  std::string sampling = "fixed";
  double samplingRate = 0;
  double privacyDelta = 1e-5;  // the delta epsilon is reported for
  // Training stops before a round would take epsilon over this (0 = no budget).
  double targetEpsilon = 0;
  // Sticky client sampling (GlueFL, He et al., MLSys 2023). 0 = off: the selected are
  // drawn uniformly from the idle clients. Otherwise the engine keeps a sticky group of
  // at most stickyClients clients: each round draws round(stickyFraction x n) of the n
  // selected from the group's idle members and the rest uniformly from the other idle
  // clients, who join the group in place of the members assigned longest ago (so the
  // group is always the stickyClients clients assigned most recently, ties in a
  // pseudo-random order of id and round).
  // Members were assigned recently: catching them up takes a few broadcasts. Each
  // update's weight is multiplied by its selection weight, (n / N) / P(selected) over
  // the N idle clients, so that the weighted sum is unbiased for uniform sampling's.
  // Must be at least ceil(K * overSelection).
  uint32_t stickyClients = 0;
  double stickyFraction = 0.8;
  // Sticky sampling: multiply each update's weight by its selection weight (above).
  // false: every update weighs by its examples alone, as under uniform sampling. The
  // round's sum is then biased toward the group, but every client passes through the
  // group alike, so over many rounds each is selected about equally often; the
  // selection weights' spread (about 0.5 for a member, 2.5 for another client at
  // 40 / 0.8 of 100) no longer lets the two or three clients from outside the group
  // carry more of the aggregate than the ten members.
  bool stickyReweight = true;

  // Learning rate: lr_r = lr * lrDecay^(r - 1).
  double lr = 0.05;
  // The served model (evaluated each round and saved at the end): an exponential
  // moving average of the committed models, xbar <- modelEma xbar + (1 - modelEma) x
  // after each commit, starting from the first model committed after start or resume
  // (Polyak averaging; tail averaging in federated learning smooths the round-to-round
  // swings of non-IID clients). Clients still train from x. 0 = off: xbar = x.
  double modelEma = 0.0;
  double lrDecay = 1.0;
  // Server optimizer on the aggregate, before the downlink compressor:
  //   u <- serverMomentum u + Delta;  p_s = serverLr u + ebar
  // (FedAvgM, Hsu et al. 2019; serverLr 1 and serverMomentum 0 are plain FedAvg).
  // With momentumMasking, u is zeroed where the broadcast sent a coordinate (DGC's
  // momentum factor masking), so what was applied is not applied again.
  double serverLr = 1.0;
  // FedExP (Jhunjhunwala et al., ICLR 2023): the server step is extrapolated by
  //   eta_g = max(1, sum_k w_k ||Delta_k||^2 / (2 W ||Delta||^2)),
  // (W = sum_k w_k; Delta_k the step-normalized updates as received, Delta their
  // weighted mean), which is 1 when the updates agree and grows as they disagree
  // (heterogeneous clients), on top of serverLr.
  bool extrapolate = false;
  double serverMomentum = 0.0;
  bool momentumMasking = true;
  // Mean over senders: each coordinate of Delta is the weighted mean over the updates
  // that carry it (a sparse update carries its indices, a dense one every coordinate)
  // instead of over all of them, i.e. coordinate i is scaled by W / W_i with W_i the
  // weight of the updates that sent i. Sparse updates whose supports barely overlap
  // (non-IID clients) then enter at their own size instead of 1/K of it.
  bool senderMean = false;
  // Adaptive server optimizer (FedAdam / FedYogi, Reddi et al., ICLR 2021) in place of
  // serverMomentum, with Delta the pseudo-gradient:
  //   m <- b1 m + (1 - b1) Delta
  //   v <- b2 v + (1 - b2) Delta^2                   (adam)
  //   v <- v - (1 - b2) Delta^2 sign(v - Delta^2)    (yogi; v starts at eps^2)
  //   p_s = serverLr m / (sqrt(v) + eps) + ebar
  // "sgd" is the step above (serverLr, serverMomentum, extrapolate). momentumMasking
  // zeroes m where the broadcast sent a coordinate, as it does u.
  std::string serverOptimizer = "sgd";
  double serverBeta1 = 0.9;
  double serverBeta2 = 0.99;
  double serverEps = 1e-3;

  // Local steps: ADACOMM (Wang & Joshi 2019) when adaptiveTau, else tau every round.
  uint32_t tau = 50;
  bool adaptiveTau = false;
  uint32_t tauMin = 1;
  uint32_t tauMax = 1000;
  double lossSmoothing = 0.5;  // F <- s F + (1 - s) F_round
  // Per-client step budgets: a client whose measured speed cannot do tau steps in
  // budgetFraction of the deadline gets fewer (at least tauMin).
  bool stepBudgets = true;
  double budgetFraction = 0.8;
  // And, when in (0, 1], no selected client of measured speed is given more steps than
  // it can do in the time the client at this quantile of the round's measured speeds
  // (0 = the slowest, 0.5 = the median) needs for tau: the slowest devices do fewer
  // steps instead of setting the round's time (Dynamic Batch Size, Ye et al. 2020);
  // the aggregation already normalizes by steps. 0 = off: the deadline alone.
  double budgetQuantile = 0;
  // Time budgets (with budgetQuantile): a client faster than the quantile's is not
  // stopped at tau but given the steps it can do in the same time, up to
  // budgetTauFactor x tau, so every measured client trains for about the quantile's
  // time and the fast devices do more of the steps. 1 = off: tau is every client's most.
  double budgetTauFactor = 1.0;
  // Dynamic batch sizes (DBS, ALGORITHMS.md): each measured client's minibatch is the
  // task's x its speed / the mean speed (of the round's measured clients; under the
  // asynchronous modes of every measured client), within [1/32, 8], so the clients of a
  // round do the same steps in about the same time; the aggregation weights by the
  // examples processed. Clients need the capability "dynamic-batch".
  bool dynamicBatch = false;

  // Compression (names as compression::makeCompressor takes them).
  std::string uplink = "identity";
  std::string downlink = "identity";
  double uplinkDensity = 1.0;  // target density (top-k, rand-k)
  double downlinkDensity = 1.0;
  uint32_t warmupRounds = 0;  // DGC warm-up of both densities
  bool fp16Values = false;    // top-k / rand-k values as fp16
  // QSGD's levels s on both links, in [1, 255]; under error feedback QSGD is scaled by
  // 1 / (1 + omega) to be a contraction (compression::linkOptions).
  uint32_t qsgdLevels = 15;
  // Sparse ternary top-k values (compression::makeTernary): one sign bit per value and
  // one scale per 256 values instead of fp16/fp32; the clients' uplink and the broadcast.
  bool uplinkTernary = false;
  bool downlinkTernary = false;
  bool errorFeedback = true;  // server-side memory on the broadcast
  // GlueFL's shared mask (top-k downlink only; 0 = off, < 1): this fraction of a
  // broadcast's k coordinates are the largest among the previous broadcast's, the rest
  // the largest among the others, so that the coordinates changed over g rounds grow by
  // (1 - downlinkShared) k a round instead of up to k (cheaper catch-up by value). The
  // mask is checkpointed with the catch-up state (EngineSnapshot::catchUp).
  double downlinkShared = 0;
  // Log replays code each broadcast's indices against the previous broadcast's
  // (compression::IndexFormat::kRelative; top-k downlink only), when that is smaller:
  // with downlinkShared most of them are the previous broadcast's. Every entry of a
  // replay after the first is coded against the one before it in the same message; the
  // first is, when the client holds the indices of the broadcast before it (those of
  // the last entry of the last replay it was sent, since it last joined).
  bool downlinkRelativeIndices = false;
  // The global model's precision: after each broadcast the engine (and every client,
  // replaying it) rounds the coordinates it changed to this many mantissa bits
  // (compression::roundChanged; 23 = fp32, off), so the model's changed coordinates
  // carry 1 + 8 + modelMantissaBits bits and catch-up XORs (catchUpXorRounds) send only
  // those. The rounding error (at most 2^-(bits + 1) of a value) is dropped.
  uint32_t modelMantissaBits = 23;
  // After each commit the server memory is scaled to ||ebar|| <= cap ||p_s|| (0 = no
  // cap; see compression::ErrorFeedbackOptions::maxErrorRatio). It drops mass.
  double downlinkErrorCap = 0.0;

  uint32_t catchUpRounds = 20;  // broadcasts kept for catch-up; older clients get the dense model
  // Catch-up by value: a client that missed rounds may instead be sent the current
  // fp32 values of every coordinate changed since the model it holds, which it
  // overwrites: the same model, bit for bit, as replaying the broadcasts. The engine
  // sends whichever of the broadcast log, these values and the dense model is the
  // fewest bytes. It costs one uint32 per parameter (the round that last changed it).
  bool catchUpByValue = true;
  // Catch-up values as XORs (with catchUpByValue; 0 = off): the engine keeps, for each of
  // the last catchUpXorRounds commits, the values before it of the coordinates its
  // broadcast changed (8 bytes a coordinate; meant for sparse downlinks), so it knows
  // what a client within that many commits holds at every coordinate changed since, and
  // sends each one's fp32 bits XOR the client's instead of the bits themselves: sign,
  // exponent and top mantissa bits mostly cancel, and the words are coded by their
  // leading zeros (compression::ValueFormat::kXor32). The client XORs them into its
  // model: bit for bit the same model. Older clients, and any after a dense broadcast or
  // a resume, get the plain values.
  uint32_t catchUpXorRounds = 0;
  // Committed rounds whose model checksum is kept (16 bytes each), to recognize the
  // model a returning client holds; a client holding an older one gets the dense model.
  uint32_t checksumHistory = 100'000;
  // Clients build the round-0 model themselves (from the spec and the initialization
  // seed in Welcome): a client that says it holds nothing is taken to hold the round-0
  // model and is caught up from it like any other (log, values or dense, whichever is
  // smallest). The assignment's checksum proves it; a client whose checksum does not
  // match reports it (clientOutOfSync) and gets the dense model next time.
  bool clientsInitialize = true;
  uint64_t seed = 1;

  // Shards (docs/coordinator.md "Shards"): the aggregation and the server optimizer run
  // in this many shards, each owning a part of the parameters, on a pool of shards - 1
  // threads and the caller. 0 = one per core (std::thread::hardware_concurrency); 1 = no
  // threads. The actions are the same, bit for bit, whatever the number.
  uint32_t shards = 1;
  // Which shard owns which parameter. rowWidth 0 (the default): shards contiguous
  // ranges of equal size. Else the model's first rowCount x rowWidth parameters are
  // the first layer's rows of rowWidth, rows[j] owned by shardOf[j] (a
  // `starling-coordinator placement` map: ShardPlacement::rows and shardOf), the rows
  // not named filling the shards short of rowCount / shards rows, and the dense rest
  // split evenly. A row is rowWidth consecutive parameters (embedbag's table), or with
  // columns a column of a {rowWidth, rowCount} row-major matrix (linear and mlp's
  // dense0.weight: row r is parameters r, r + rowCount, ...). shardRowsOf()
  // (engine/shards.hpp) fills it from a model.
  struct ShardRows {
    uint32_t rowWidth = 0;
    uint64_t rowCount = 0;
    std::vector<uint32_t> rows;
    std::vector<uint32_t> shardOf;
    bool columns = false;
  };
  ShardRows shardRows;
};

// Distributed noise (EngineConfig::noisePlacement): the M shares a round's noise is
// split into (0 when central or privacy is off), and one share's standard deviation,
// noiseMultiplier x clipNorm / sqrt(M), what each client adds to every coordinate.
uint32_t noiseShares(const EngineConfig& c);
double noiseShareStd(const EngineConfig& c);
// The asynchronous modes' K: updates per server step (bufferSize, else clientsPerRound).
uint32_t bufferSize(const EngineConfig& c);

// What a client is told to do for one round.
struct Assignment {
  uint64_t round = 0;
  uint64_t baseRound = 0;  // the model the client must hold: after round baseRound
  uint32_t tau = 0;
  float lr = 0;
  float uplinkDensity = 1;
  int64_t deadlineMs = 0;  // absolute, engine time
  // Bring the client to baseRound: either a dense model to replace its own, or the
  // current values of the coordinates changed since its round to overwrite (a sparse
  // fp32 tensor, see compression::overwrite), or the broadcasts of rounds (its round,
  // baseRound] to subtract in order, or none of them. At most one is set.
  std::shared_ptr<const std::vector<float>> denseModel;
  std::shared_ptr<const compression::Payload> values;
  std::vector<std::shared_ptr<const compression::Payload>> broadcasts;
  uint64_t baseChecksum = 0;  // checksum64 of the model after applying them
  bool evaluate = false;      // evaluate the base model first (EngineConfig::federatedEvalEvery)
  float batchScale = 1.0f;    // the client's minibatch x this (EngineConfig::dynamicBatch)
};

struct UpdateVerdict {
  uint64_t round = 0;
  bool accepted = false;
  std::string reason;  // why not, when rejected
};

// How a participant's round ended, for the store.
struct ParticipantResult {
  uint64_t round = 0;  // the round the client was assigned (a late update's own round)
  std::string clientId;
  ParticipantOutcome outcome = ParticipantOutcome::kAccepted;
  std::string reason;  // why, for every outcome but kAccepted and kLateApplied
  int64_t assignedMs = 0;
  std::optional<int64_t> returnedMs;
  uint32_t steps = 0;
  uint64_t examples = 0;
  float lossStart = 0;
  float lossEnd = 0;
  uint64_t bytesUpRaw = 0;
  uint64_t bytesUpWire = 0;
  uint64_t bytesDownWire = 0;
  uint32_t staleness = 0;
  uint32_t durationMs = 0;
  // How long the client was idle and connected before this assignment: since it joined
  // or its previous update arrived (waiting for the round to close, for the staleness
  // bound, or to be selected), in engine ms.
  int64_t waitMs = 0;
  // Sticky sampling: drawn from the sticky group, and the factor its aggregation weight
  // is multiplied by (1 under uniform sampling; see EngineConfig::stickyClients).
  bool sticky = false;
  double selectionWeight = 1.0;
};

struct RoundSummary {
  uint64_t round = 0;
  bool committed = false;
  std::string reason;  // why abandoned
  uint32_t tau = 0;
  double lr = 0;
  double uplinkDensity = 1;
  double downlinkDensity = 1;
  uint32_t selected = 0;
  uint32_t returned = 0;
  uint32_t accepted = 0;
  uint32_t stragglers = 0;
  uint64_t bytesUpRaw = 0, bytesUpWire = 0, bytesDownRaw = 0, bytesDownWire = 0;
  double trainLossStart = 0;  // example-weighted loss at the shared model
  double serverStep = 1;      // the server's step on the aggregate: serverLr x the FedExP factor
  int64_t startedMs = 0, endedMs = 0;
  uint64_t modelChecksum = 0;
  std::vector<ParticipantResult> participants;
  // Federated evaluation (committed rounds): the model of round evalBaseRound evaluated
  // by the clients that trained from it, one statistics vector each
  // (model::EvalStats::toVector; empty when none were asked or sent).
  uint64_t evalBaseRound = 0;
  std::vector<std::vector<double>> evalStats;
  // Entries the aggregation added per shard (EngineConfig::shards; one entry without
  // shards): a sparse update's indices the shard owns, a dense update's parameters in
  // the shard's equal range. Logged at debug by the daemon; not stored.
  std::vector<uint64_t> shardLoads;
  // Differential privacy (EngineConfig::clipNorm): epsilon spent at privacyDelta after
  // this round (every committed round so far); unset without privacy.
  std::optional<double> epsilon;
};

// The things for the shell to do, carried out in the order the engine returns them.
// Send `assignment` to `clientId`.
struct Assign {
  std::string clientId;
  Assignment assignment;
};
// Send `verdict` (RoundResult) to `clientId`.
struct Verdict {
  std::string clientId;
  UpdateVerdict verdict;
};
// Persist `summary` (and, when committed, a checkpoint) before carrying out any later
// action: the verdicts on the updates the round applied follow it, and an "accepted"
// verdict must not leave before the round that applied the update is durable.
struct RoundEnded {
  RoundSummary summary;
};
// Call tick() at `atMs`.
struct WakeAt {
  int64_t atMs = 0;
};
// Training is complete: tell every client and stop.
struct Finished {};
using Action = std::variant<Assign, Verdict, RoundEnded, WakeAt, Finished>;

// An update as it arrived, decoded and validated by the wire layer.
struct IncomingUpdate {
  uint64_t round = 0;
  uint64_t baseRound = 0;
  uint64_t examples = 0;
  uint32_t steps = 0;
  float lossStart = 0;
  float lossEnd = 0;
  uint32_t durationMs = 0;
  compression::Compressed delta;
  uint64_t bytesWire = 0;
  std::vector<double> evalStats;  // the client's evaluation of the base model, when asked
};

// The engine state a checkpoint carries besides the model and the memory.
struct EngineSnapshot {
  uint64_t round = 0;  // last committed round
  std::vector<float> model;
  std::vector<float> serverMemory;
  std::string state;  // controller and schedule, as text (see serializeState)
  // The other model-sized state, by name, present only when in use: "server-momentum"
  // (sgd's u), "server-first-moment" and "server-second-moment" (adam / yogi's m, v) and
  // "model-average" (modelEma's xbar). resume() takes those its configuration uses
  // and starts the others from zero, as a fresh engine does.
  std::map<std::string, std::vector<float>> vectors;
  // The catch-up state: the broadcast log, the XOR undo log, which round last changed
  // each coordinate, the recent (round, checksum) pairs and the shared mask, as a
  // Flatbuffer (coordinator/catch_up.fbs). With it a resumed engine brings a client
  // that missed rounds forward exactly as the engine it was taken from would have;
  // empty (a checkpoint from before it was kept), such a client gets the dense model.
  std::vector<uint8_t> catchUp;
};

class RoundEngine {
 public:
  // initialModel: the round-0 global model (its size fixes every tensor's size).
  static Result<std::unique_ptr<RoundEngine>> create(EngineConfig config, std::vector<float> initialModel);
  // Resumes after the last committed round of a checkpoint.
  static Result<std::unique_ptr<RoundEngine>> resume(EngineConfig config, const EngineSnapshot& snapshot);

  // A client connected. heldRound/heldChecksum: the model it says it holds (0 = none).
  // lastAcceptedRound is returned so the client can settle its uplink memory. rows: the
  // client trains the compact model of these rows (client_rows.hpp, sparse_rows.hpp):
  // its assignments bring its view's values (the whole view on the first after
  // joining), and its updates arrive placed at full positions; null: the whole model.
  std::vector<Action> clientJoined(const std::string& id, uint64_t examples, uint64_t heldRound, uint64_t heldChecksum,
                                   int64_t nowMs, std::shared_ptr<const ClientRowSet> rows = nullptr);
  std::vector<Action> clientLeft(const std::string& id, const std::string& reason, int64_t nowMs);
  std::vector<Action> updateArrived(const std::string& id, IncomingUpdate update, int64_t nowMs);
  // An update that could not be decoded: recorded as rejected, the client rolls back.
  std::vector<Action> updateRejected(const std::string& id, uint64_t round, const std::string& reason, int64_t nowMs);
  // The client reported that its model did not match the assignment's checksum (or
  // that it could not apply the assignment): it is dropped from the open round with
  // `reason`, is free to be selected again and will get the dense model next time.
  std::vector<Action> clientOutOfSync(const std::string& id, const std::string& reason, int64_t nowMs);
  std::vector<Action> tick(int64_t nowMs);
  // Stops: a round in flight is abandoned with `reason` (its updates rolled back)
  // and no new round starts.
  std::vector<Action> shutdown(const std::string& reason, int64_t nowMs);
  // Round numbers up to `round` are taken (by rounds recorded after the snapshot,
  // e.g. abandoned ones): the next round gets a higher number.
  void reserveRoundsThrough(uint64_t round) { nextRound_ = std::max(nextRound_, round + 1); }
  // Starts the first round if enough clients are idle (call after resuming, too).
  std::vector<Action> start(int64_t nowMs);

  // The round whose aggregate produced the current model (0 = the initial model).
  // Round numbers only grow; an abandoned round's number is not reused.
  uint64_t committedRound() const;
  uint64_t commits() const { return commits_; }
  // Places the first layer's rows on the engine's shards from now on, as
  // EngineConfig::shardRows does at the start (a shard map applied mid-run). It decides
  // which thread adds which entries, never the results. kInvalidArgument with one shard
  // or for a map ShardMap::fromRows refuses; the engine then keeps its map.
  Status setShardRows(EngineConfig::ShardRows rows);
  uint64_t lastAcceptedRound(const std::string& id) const;
  // The rounds of this client's updates that the engine holds undecided (received on
  // time in the open round, or late and waiting for the next aggregation). Their
  // verdicts come with the round that applies or refuses them; a client that reconnects
  // meanwhile keeps those updates pending.
  std::vector<uint64_t> heldUpdateRounds(const std::string& id) const;
  // The last kAcceptedKept rounds whose update from this client was applied (and, once
  // the round's RoundEnded was carried out, is durable), increasing.
  std::vector<uint64_t> acceptedRounds(const std::string& id) const;
  static constexpr std::size_t kAcceptedKept = 16;
  bool finished() const { return commits_ >= config_.rounds || budgetSpent_; }
  // Differential privacy (EngineConfig::clipNorm): epsilon spent so far at privacyDelta
  // (nullopt without privacy), and whether the budget (targetEpsilon) ended training.
  std::optional<double> epsilon() const;
  bool budgetSpent() const { return budgetSpent_; }
  // Where the privacy noise comes from. The engine starts with seededNoise(seed): the
  // simulator's, reproducible; the daemon sets a cryptographic source
  // (compression::secureNoise) before start().
  void setNoise(std::unique_ptr<compression::GaussianNoise> noise);

  // Relays (starling-relay) run local rounds between two exchanges with the coordinator.
  // holdAfter(n): no round starts (and, in the asynchronous modes, no client is assigned)
  // once n rounds are committed; the engine is then held() until adopt() releases it.
  // Updates of a round open when the hold begins still close it.
  void holdAfter(uint64_t commits) { holdAfter_ = commits; }
  bool held() const { return holdAfter_ && commits_ >= *holdAfter_; }
  // Commits a round without participants whose step takes the model to `target` (the
  // coordinator's newest model): the step goes through the downlink like an aggregate's
  // (compressed, with the server memory, so model + memory moves by exactly target -
  // model; broadcast to the clients in their next catch-up), bypassing the server
  // optimizer; then holds after `holdAfter` commits and starts the next round. With
  // `upstream`, the rounds from then on ask for its tau (within [tauMin, tauMax]) and lr:
  // the coordinator's assignment's, so that its ADACOMM and learning-rate decay reach a
  // relay's clients.
  // kInvalidArgument while a sync round is open, for a target of another size or not
  // finite, or an upstream tau of 0 or lr that is not positive.
  struct UpstreamPace {
    uint32_t tau = 0;
    double lr = 0;
  };
  Result<std::vector<Action>> adopt(std::span<const float> target, uint64_t holdAfter, int64_t nowMs,
                                    std::optional<UpstreamPace> upstream = std::nullopt);
  // Whether a round (a sync round, or the asynchronous modes' current step) is open.
  bool roundOpen() const;
  // Abandons the open sync round with `reason` (recorded; its updates refused, its
  // outstanding clients stragglers), as at a deadline with too few updates: a relay whose
  // next assignment came before its local round closed. Nothing when none is open or the
  // mode is asynchronous.
  std::vector<Action> abandonOpenRound(const std::string& reason, int64_t nowMs);
  std::span<const float> model() const;
  // The model to evaluate and to save: the moving average (EngineConfig::modelEma)
  // once there is one, else model().
  std::span<const float> servedModel() const;
  uint64_t modelChecksum() const;
  EngineSnapshot snapshot() const;
  const EngineConfig& config() const { return config_; }
  uint32_t currentTau() const;
  // The sticky group (EngineConfig::stickyClients), ordered by id; empty when off.
  std::vector<std::string> stickyGroup() const;

  ~RoundEngine();
  RoundEngine(const RoundEngine&) = delete;
  RoundEngine& operator=(const RoundEngine&) = delete;

 private:
  struct Client;
  struct Pending;
  struct OpenRound;
  RoundEngine(EngineConfig config);
  // Checks the engine's own settings and creates the parts around `model`.
  Status init(std::vector<float> model);
  void maybeStartRound(int64_t nowMs, std::vector<Action>& out);
  // Opens round nextRound_ (its tau, lr, densities and deadline; the aggregator's sums at 0).
  // denominator: privacy's fixed D for the round (PrivacyBudget::denominator).
  void openRound(int64_t nowMs, double denominator = 1);
  // Assigns the open round to client `id` (a Selection pick).
  void assignPick(const std::string& id, bool sticky, double weight, int64_t nowMs, std::vector<Action>& out);
  // Connected clients that are not training, not held back by the SSP gate and (the
  // asynchronous modes) not yet assigned the open round, by id.
  std::vector<const std::string*> idleClients() const;  // pointers to clients_'s keys
  bool async() const { return mode_ != Mode::kSync; }
  // The asynchronous modes: fills the free slots with idle clients, then asks to be woken
  // at the earliest assignment deadline.
  void topUp(int64_t nowMs, std::vector<Action>& out);
  // The asynchronous modes: assignments past their deadline free their slots (recorded
  // as stragglers; the client stays busy until its update arrives or it leaves).
  void expireAssignments(int64_t nowMs);
  // The asynchronous modes: K updates arrived since the last server step.
  bool bufferFull() const;
  // The asynchronous modes under privacy with a target: no connected client may train
  // once more (PrivacyBudget::clientAllowed).
  bool privacyBudgetSpent() const;
  // The SSP/DSSP gate: the client finished a step (its update arrived, or was refused).
  void stepFinished(const std::string& id, int64_t nowMs);
  static RoundSummary summaryOf(const OpenRound& r, int64_t nowMs);
  void closeRound(int64_t nowMs, std::vector<Action>& out);
  void abandonRound(const std::string& reason, int64_t nowMs, std::vector<Action>& out);
  // Hands p to the aggregator against limit (0 = none): added to the open round's sum
  // or rejected (its record says which); its delta is released.
  void settle(Pending& p, double limit);
  // Settles the open round's held on-time updates once there are enough norms to judge them.
  void settleReceived();
  Assignment makeAssignment(Client& c, uint64_t round, int64_t nowMs);
  // Pace::referenceSpeed of every measured client (dynamicBatch under the
  // asynchronous modes); 0 when none is measured or dynamicBatch is off.
  double fleetReferenceSpeed() const;
  // Records an outstanding participant of the open round as dropped; closes or
  // abandons the round when nobody else can still deliver.
  void dropOutstanding(const std::string& id, const std::string& reason, int64_t nowMs, std::vector<Action>& out);
  uint32_t minGoal() const;
  std::string serializeState() const;
  // Reads the engine state text; `committed` gets its committed round.
  Status restoreState(const std::string& state, uint64_t& committed);

  EngineConfig config_;
  std::unique_ptr<Shards> shards_;  // EngineConfig::shards > 1; the parts below hold a pointer
  // The parts (coordinator/engine/): each owns one decision and its state.
  std::unique_ptr<Selection> selection_;
  std::unique_ptr<Aggregator> aggregator_;
  std::unique_ptr<ServerOptimizer> optimizer_;
  std::unique_ptr<Downlink> downlink_;  // the model, its round and checksum, and catch-up
  std::unique_ptr<Pace> pace_;
  std::unique_ptr<PrivacyBudget> privacy_;
  std::unique_ptr<compression::GaussianNoise> noise_;
  bool budgetSpent_ = false;  // targetEpsilon reached: no more rounds
  enum class Mode { kSync, kAsync, kSsp, kDssp };
  Mode mode_ = Mode::kSync;
  std::unique_ptr<ClockBound> gate_;  // ssp, dssp
  // The asynchronous modes: assignments of rounds already closed whose update has not
  // arrived (they still hold their slots), by client.
  std::map<std::string, ParticipantResult> inflight_;
  bool asyncStarted_ = false;  // the asynchronous modes: a buffer was opened (min-clients met)
  uint64_t nextRound_ = 1;
  uint64_t commits_ = 0;
  std::map<std::string, std::unique_ptr<Client>> clients_;  // ordered: deterministic iteration
  std::unique_ptr<OpenRound> open_;
  std::vector<std::unique_ptr<Pending>> late_;  // late updates waiting for the next aggregation
  std::vector<ParticipantResult> orphans_;      // records to attach to the next round
  bool stopping_ = false;
  std::optional<uint64_t> holdAfter_;  // holdAfter(); none: rounds run until finished()
};

}  // namespace starling::coordinator
