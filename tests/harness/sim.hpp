#pragma once
// starling-sim: a simulated federation. The coordinator's RoundEngine and the
// client runtime (Trainer, Sampler, error feedback, compressors, the payload codec
// and the Flatbuffers frames) run in one process; links are in memory and time is
// virtual: an event queue ordered by virtual microseconds. What it measures is what
// the daemon would do on the fleet it describes (docs/simulation.md).
//
// The fleet: N virtual clients, each with a partition of the training set, a device
// speed (FLOP/s), links (bandwidth each way, latency: alike, spread, or from a trace),
// a dropout probability and, optionally, an availability trace (windows when online).
// - Compute time: a deterministic cost model of the work the Trainer did (forward
//   and backward passes of its minibatches, the sampler's extra forward passes and
//   the loss probe), divided by the device's speed. Never wall-clock time.
// - Link time: latency + frame bytes x 8 / bandwidth, for the real RoundAssign and
//   Update frames (the task's assignmentMessage() and the Learner's Update, through
//   wire::encode()).
// - Dropout: a selected client drops out with probability p before it finishes
//   (the engine sees clientLeft) and rejoins later holding the model it had.
// - Availability: with a trace, a client is connected only inside its device's
//   windows; at a window's end it leaves (an update in progress is lost), at the
//   next window's start it joins again holding the model it had.
//
// Memory (docs/simulation.md, "A million clients"): every virtual client is a view of
// the fleet's index array (4 bytes an example), its link and speed figures and the run's
// seat of counters (48 bytes); a client that trained also holds (for at most
// SimSettings::learnerClients clients, least recently trained evicted first) a
// client::Learner in borrowed-base mode (the devices' local round, trained from the
// engine's model) and, under federated evaluation, a copy of its held-out examples.
// Training runs one client at a time, building a
// Trainer over that client's examples for the round; the client's sampler (score
// table and variance-reduction estimate) carries from one round to its next, as on a
// device. Uplink error-feedback memories (2 d floats each) and, under Overlap Local-SGD
// (train.overlap), the local model and anchor (d floats, 3 d with anchor momentum) are
// kept for at most SimSettings::efClients clients, least recently used evicted first:
// an evicted client restarts with an empty memory, as
// ErrorFeedbackOptions::resetAfterMissedRounds would reset it, and its local model from
// the engine's (an overlap restart).
// - Overlap Local-SGD: a client whose update left at t_send trains its next tau steps in
//   the background until t_send + compute; its next assignment arrives at t_assign +
//   download; its update leaves at the later of the two and arrives an upload later. The
//   background steps run (on the Learner, as a device's worker thread runs them) when
//   the update is made; only their time is deferred.
//
// - Tiers (TierSettings): relays between the coordinator and the clients, as
//   starling-relay runs them and with its parts: each relay is a RoundEngine with the
//   task relay::downstreamTask() makes from the coordinator's Welcome, over its own
//   clients (client i under relay i mod R), and a client::Learner in holding mode
//   towards the coordinator (catch-up from the real RoundAssign, then Learner::submit of
//   what its local rounds trained, compressed with its own uplink memory). For each
//   assignment it adopts the global model, runs its local rounds, and sends the
//   difference up, or nothing when 90% of the coordinator's deadline passes first.
// - Server links (TierSettings::coordinatorMbps and linkMbps): a server's
//   link carries one transfer at a time each way, in the order they start (a FIFO at its
//   capacity); a message arrives when both its ends' links have carried it, plus the
//   latency. Without capacities (0, the default) a message costs only its client's link.
//
// Deterministic: the same settings and seed give the same rows, bit for bit, on
// one machine. Single-threaded; under mpirun (docs/simulation.md "On MPI") the clients
// train on several processes, with the same rows (runStrategy).

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "starling/coordinator/task.hpp"
#include "starling/data/categories.hpp"
#include "starling/data/dataset.hpp"
#include "starling/data/feature_scaling.hpp"
#include "starling/data/load.hpp"
#include "starling/util/status.hpp"

namespace starling::sim {

// The servers the clients talk to: the coordinator's link, and relays (docs/relay.md)
// between it and the clients, with starling-relay's settings and their links.
struct TierSettings {
  // The coordinator's own link capacity, each way, shared by every transfer to and from
  // it (0 = unlimited: only the other ends' links count).
  double coordinatorMbps = 0;
  uint32_t relays = 0;  // R; 0 = flat: every client talks to the coordinator
  // The relays' rounds with their clients (starling-relay's --clients-per-round,
  // --over-selection, --min-clients, --deadline-ms (0 = the coordinator's deadline),
  // --local-rounds).
  uint32_t clientsPerRound = 10;
  double overSelection = 1.3;
  uint32_t minClients = 0;
  int64_t deadlineMs = 0;
  uint32_t localRounds = 1;
  // Each relay's link to the coordinator: bandwidth each way and one-way latency.
  double uplinkMbps = 100, downlinkMbps = 100, latencyMs = 20;
  // Each relay's own link capacity, each way, shared by its clients' transfers and its
  // own (0 = unlimited).
  double linkMbps = 0;
  // The one-way latency between a relay and each of its clients (a relay near them, e.g.
  // in the same site or cell); 0 = the client's own latency (SimSettings::latencyMs or
  // its trace). Their bandwidths stay the clients' own.
  double clientLatencyMs = 0;
  // starling-relay --sparse-rows (docs/sparse.md "Relays"): each relay trains upstream
  // only the union of its clients' rows (the clients offer theirs: sim.row-bucket).
  bool sparseRows = false;
  // Which relay each client is under (docs/placement.md): "mod" (client i under relay
  // i mod R), or the `starling-coordinator placement` of the clients' row sets,
  // "metis" or "random" (sim.row-bucket; seed 1).
  std::string placement = "mod";
};

// Examples per client drawn with replacement when SimSettings::clientExamples is 0 and
// the clients outnumber the training examples.
inline constexpr uint32_t kDrawnExamples = 32;

// The fleet and the run, the [sim] section of a config (docs/simulation.md).
struct SimSettings {
  uint32_t clients = 100;                   // N virtual clients
  std::string partition = "dirichlet:0.5";  // iid, dirichlet:ALPHA, classes:K, by-column:NAME, files:DIR
  // Training data: a CSV, LIBSVM, NPY or NPZ file, or an IDX directory ("" = Debian's
  // Fashion-MNIST); read with the task's data format, label and kind (eval.data-format,
  // eval.label, task.task).
  std::string data;
  // Test data, in the same format (starling-sim takes it from eval.test-data, as the
  // daemon evaluates on it); "" = an IDX directory's test split, or a seeded fifth of a
  // data file held out.
  std::string testData;
  uint32_t trainExamples = 0;                    // a seeded sample of the training set (0 = all 60,000)
  uint32_t testExamples = 0;                     // a seeded sample of the test set (0 = all 10,000)
  uint64_t seed = 1;                             // partition, speeds, dropouts
  double deviceGflops = 2.0;                     // the fastest device, GFLOP/s
  std::string speedDistribution = "loguniform";  // loguniform (over speedSpread) or lognormal (speedSigma)
  double speedSpread = 10.0;                     // loguniform: fastest / slowest
  double speedSigma = 0.5;                       // lognormal: sigma of log speed (capped at the fastest)
  std::string speedTrace;                        // file: one relative speed per line, client i takes line i mod n
  double flopsPerExample = 0;                    // forward FLOPs per example (0 = 2 x the model's weights)
  double uplinkMbps = 1.0;                       // client -> coordinator
  double downlinkMbps = 5.0;                     // coordinator -> client
  double latencyMs = 100.0;                      // one way, each message
  TierSettings tiers;                            // the servers: the coordinator's link, relays (none by default)
  // Per-client links: each client's bandwidths are the above divided by f and its
  // latency the above times f, f log-uniform in [1, linkSpread] (1 = every client alike).
  double linkSpread = 1.0;
  // File: "UP_MBPS DOWN_MBPS LATENCY_MS" per line; client i takes line i mod n
  // (overrides the three figures above and the spread).
  std::string linkTrace;
  // Hostile clients (docs/privacy.md "Attack models"; client::Attack): this fraction of
  // the clients corrupt their rounds by `attack`. Fixed: each client is hostile with
  // that probability once for the run (seeded); attackVarying: anew every round it trains.
  std::string attack = "none";
  double attackers = 0;
  bool attackVarying = false;
  double dropout = 0.0;  // probability that a selected client drops out
  int64_t rejoinMs = 0;  // a dropped client is back after this (0 = the deadline)
  // File of windows when devices are online, "DEVICE START_S END_S" per line (devices
  // numbered from 0, windows of a device in order, not overlapping); client i follows
  // device i mod (largest device + 1). Outside its windows a client is offline.
  std::string availabilityTrace;
  double availabilityPeriodS = 0;  // the trace repeats every this many seconds (0 = once)
  // Federated evaluation (eval.federated-every): each client holds this fraction of its
  // examples out of training and evaluates the model on them when asked (0 = none).
  double evalFraction = 0;
  uint32_t efClients = 256;  // most clients holding uplink error-feedback memory (and overlap state)
  // Most clients holding a Learner (sampler state, updates awaiting verdicts, and with it
  // the memories above), least recently trained evicted first, never one with an update
  // unsettled: an evicted client trains its next round as a device that restarted.
  uint32_t learnerClients = 100000;
  // Examples each client draws with replacement (docs/simulation.md, "A million
  // clients"). 0: the partition splits the training set among the clients, without
  // replacement, when it has at least one example per client, and draws
  // kDrawnExamples per client with replacement when the clients outnumber the examples.
  // N > 0: every client draws N with replacement, whatever the population.
  uint32_t clientExamples = 0;
  // Sparse models (docs/sparse.md): each client offers the first-layer rows its data
  // touches in buckets of this many rows, as starling-client --sparse-rows does, and
  // trains the compact model of them where the strategy takes them (train.sparse-rows);
  // 0 = no client offers any.
  uint32_t rowBucket = 0;
  double targetAccuracy = 0.85;   // for "bytes and time to target"
  double maxVirtualHours = 1000;  // stops a strategy that never finishes
  bool stopAtTarget = false;      // end a strategy at its first round at the target
  // Clients ship with the round-0 model (an app that bundles it) and name it, with its
  // checksum, when they join; otherwise they say they hold nothing, as starling-client
  // does (it builds the round-0 model from Welcome). Under the engine's
  // clientsInitialize (the default) both are caught up from round 0 alike; without
  // it a client holding nothing downloads the dense model.
  bool preloadedModel = false;
  // Writes each strategy's inputs and results under exportDir/<strategy> for an
  // independent implementation to replay (export.hpp; "" = nothing). Full participation only.
  std::string exportDir;
};

// One strategy: the task and the engine's settings, as the daemon's [task] [train]
// [compression] sections set them (sim_config.hpp reads them from files and flags).
struct Strategy {
  std::string name;
  coordinator::EngineConfig engine;
  coordinator::TaskConfig task;
  std::optional<TierSettings> tiers;  // overrides the fleet's (SimSettings::tiers) when set
};

struct SimConfig {
  SimSettings sim;
  std::vector<Strategy> strategies;
};

// One ended round of one strategy.
struct RoundRow {
  uint64_t round = 0;
  bool committed = false;
  double virtualSeconds = 0;  // when the round ended
  uint64_t bytesUp = 0;       // frames the coordinator carried during the round, Update frames
  uint64_t bytesDown = 0;     // RoundAssign frames
  uint64_t edgeBytesUp = 0;   // with relays: frames between the relays and their clients
  uint64_t edgeBytesDown = 0;
  uint64_t totalBytes = 0;         // cumulative, both ways, both tiers, since the start
  uint64_t modelChecksum = 0;      // the engine's model when the round ended (RoundEngine::modelChecksum)
  std::optional<double> accuracy;  // on the test sample, when evaluated (classification, binary)
  std::optional<double> testLoss;
  std::optional<double> auc;       // binary
  std::optional<double> rmse, r2;  // regression
  // Federated evaluation of the round's base model by the clients (eval.federated-every):
  // accuracy (classification, binary) or RMSE (regression), and the examples it covered.
  std::optional<double> fedAccuracy, fedRmse;
  uint64_t fedExamples = 0;
  // Differential privacy (privacy.update-clip-norm): epsilon spent after the round.
  std::optional<double> epsilon;
  double trainLoss = 0;  // example-weighted loss at the shared model
  uint32_t tau = 0;
  double uplinkDensity = 1, downlinkDensity = 1;
  uint32_t selected = 0, participants = 0, stragglers = 0, dropped = 0;
  // Sticky sampling: the selected drawn from the sticky group, and the catch-up payload
  // bytes (log, values or dense model, without the frames) sent to all the selected and
  // to those drawn from the group.
  uint32_t sticky = 0;
  uint64_t payloadDown = 0, payloadDownSticky = 0;
  // Where the round's time went (docs/simulation.md, session 6): when it started, and
  // of its on-time accepted updates the steps (least, mean, most), the longest compute,
  // and the update that closed the round (the last to arrive): its compute and the rest
  // of its time from assignment to arrival (both links, their latencies).
  double startedSeconds = 0;
  uint32_t stepsMin = 0, stepsMax = 0;
  double stepsMean = 0;
  double computeMaxSeconds = 0;
  double closerComputeSeconds = 0, closerLinkSeconds = 0;
  uint32_t closerSteps = 0;
};

struct StrategyResult {
  std::string name;
  std::vector<RoundRow> rounds;
  double wallSeconds = 0;
  double cpuSeconds = 0;  // this process's CPU time over the same span (rank 0's under mpirun)
  std::string stopped;    // why it ended before its rounds, "" when it finished
  // task.standardize: the statistics round's scaling (the daemon's merge over every
  // client's training examples), its participants and their examples.
  data::FeatureScaling scaling;
  data::CategoryVocabulary vocabulary;  // task.categorical-vocabulary: the agreed one
  uint32_t statsClients = 0;
  uint64_t statsExamples = 0;
  double placementSeconds = 0;  // sim.relay-placement metis or random: placing the clients
  // The first evaluated round at or above the target accuracy.
  std::optional<RoundRow> firstAtOrAbove(double target) const;
  std::optional<double> finalAccuracy() const;
};

// The data and the fleet, shared by every strategy of a run.
class Fleet {
 public:
  // Loads the data and builds the clients. The model spec fixes the cost model.
  // A short spec ("linear", "mlp:hidden:64") is completed from the data (modelSpec()).
  // "onnx:PATH" imports an ONNX file as the coordinator does (onnxio::importOnnx, its
  // spec resolved against the training data): its weights are the round-0 model
  // (initialModel()).
  static Result<Fleet> create(const SimSettings& settings, const std::string& modelSpec,
                              const data::DataOptions& dataOptions = {}, float huberDelta = 0);
  Fleet() = default;
  Fleet(Fleet&&) = default;  // the clients' views stay on the moved index array
  Fleet& operator=(Fleet&&) = default;
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  // A client's examples are views of one index array the fleet owns (partition(); a
  // client drawn with replacement may hold an example twice).
  struct Client {
    std::span<const uint32_t> examples;  // indices into train(), ascending
    std::span<const uint32_t> heldOut;   // indices into train() held out for federated evaluation
    double flopsPerSecond = 0;
    double uplinkMbps = 0, downlinkMbps = 0, latencyMs = 0;
    int32_t device = -1;  // its device in the availability trace (-1 = always online)
  };
  // A window when a device is online, in virtual seconds: [start, end).
  struct Window {
    double start = 0, end = 0;
  };
  const SimSettings& settings() const { return settings_; }
  // The model spec completed from the data and checked against it (model::resolveSpec).
  const std::string& modelSpec() const { return modelSpec_; }
  // The round-0 model an ONNX file gave, in modelSpec()'s layout; empty when the model
  // is initialized from the task's seed.
  const std::vector<float>& initialModel() const { return initialModel_; }
  const data::Dataset& train() const { return train_; }
  const data::Dataset& test() const { return test_; }
  const std::vector<Client>& clients() const { return clients_; }
  // Whether the clients' examples were drawn with replacement (SimSettings::clientExamples).
  bool drawn() const { return drawn_; }
  double flopsPerExample() const { return flopsPerExample_; }
  // The windows of client i's device, in order (empty when it has none or there is no trace).
  const std::vector<Window>& windows(std::size_t i) const;

 private:
  SimSettings settings_;
  std::string modelSpec_;
  std::vector<float> initialModel_;
  data::Dataset train_;
  data::Dataset test_;
  std::vector<uint32_t> index_;  // every client's examples, then its held-out ones, client after client
  std::vector<Client> clients_;
  bool drawn_ = false;
  std::vector<std::vector<Window>> devices_;  // the availability trace's windows
  double flopsPerExample_ = 0;
};

// Reads an availability trace (the format of SimSettings::availabilityTrace): the
// windows of devices 0..max. With periodS > 0 every window must end by periodS.
Result<std::vector<std::vector<Fleet::Window>>> readAvailabilityTrace(const std::string& path, double periodS);

// Microseconds a message of `bytes` takes on a link: latency + bytes x 8 / bandwidth.
int64_t linkMicros(uint64_t bytes, double mbps, double latencyMs);

// A server's link (TierSettings::coordinatorMbps and linkMbps), one way: it
// carries one transfer at a time, in the order they start.
struct ServerLink {
  double mbps = 0;  // 0 = unlimited
  int64_t freeUs = 0;
};

// When a message of `bytes` that leaves at startUs arrives: its own link (mbps,
// latencyMs) and the server links a and b it passes (null or 0 Mbps: not limited),
// which it occupies in turn, FIFO (advancing their freeUs). The simulator's links and
// `starling-sim predict` (predict.hpp) both cost transfers with it.
int64_t transferMicros(uint64_t bytes, int64_t startUs, double mbps, double latencyMs, ServerLink* a,
                       ServerLink* b = nullptr);

// Compute seconds of one client's round on a device (the cost model above).
double computeSeconds(double flopsPerExample, uint64_t trainedExamples, uint64_t forwardOnlyExamples,
                      double flopsPerSecond);

class Ranks;  // ranks.hpp

// Runs one strategy on the fleet. onRound, when set, sees every row as it is made
// (the progress line). With `ranks` of more than one rank (mpirun; docs/simulation.md
// "On MPI") every rank calls it for every strategy, in the same order: rank 0 returns
// the rows, bit for bit those of one process; the others train their clients (client i
// on rank i mod R) and return no rows.
Result<StrategyResult> runStrategy(const Fleet& fleet, const Strategy& strategy,
                                   const std::function<void(const RoundRow&)>& onRound = {}, Ranks* ranks = nullptr);

// Output (report.cpp).
std::string roundsCsv(const StrategyResult& result);
std::string summaryTable(const std::vector<StrategyResult>& results, double targetAccuracy);
std::string reportSvg(const std::vector<StrategyResult>& results, double targetAccuracy);

}  // namespace starling::sim
