#pragma once
// The task: what every client is told to train with (TaskConfig, beside the engine's
// EngineConfig), and the messages made from it. The daemon's Federation and the
// simulator build their clients' Welcome and RoundAssign here, from the same code;
// nothing in this part reads files or flags (the binaries' config.hpp does).

#include <string>
#include <vector>

#include "starling/coordinator/round_engine.hpp"
#include "starling/data/load.hpp"
#include "starling/util/status.hpp"
#include "starling/wire/messages.hpp"

namespace starling::coordinator {

// What clients are told to train with, besides what the engine decides per round.
struct TaskConfig {
  std::string name = "starling";
  std::string model = "mlp:784-200-200-10";  // the architecture every client builds
  uint64_t initSeed = 1;                     // initialization of the round-0 model
  int batchSize = 32;
  float momentum = 0.0f;
  float weightDecay = 0.0f;
  float clipNorm = 0.0f;
  float uplinkErrorCap = 0.0f;  // clients' uplink memory: ||e|| <= cap ||p|| after each commit (0 = off)
  // Clients' uplink memory under partial participation (ALGORITHMS.md §2): e *= decay per
  // round missed since the client last trained, e <- 0 after resetAfter missed rounds in
  // a row (0 = never). Off by default: both drop mass.
  float uplinkMemoryDecay = 1.0f;
  uint32_t uplinkMemoryResetAfter = 0;
  float proxMu = 0.0f;            // FedProx: clients add mu/2 ||x - xhat||^2 to their local objective
  bool prioritySampling = false;  // clients sample by priority (adaptive)
  // Overlap Local-SGD (docs/simulation.md, "Overlap"): clients train the next round's
  // steps while their update goes up and the next assignment comes down, and pull their
  // model back towards the anchor by overlap (alpha in [0, 1]; 0 = off) at each
  // boundary; overlapMomentum is the anchor momentum (beta in [0, 1)).
  float overlap = 0.0f;
  float overlapMomentum = 0.0f;
  uint32_t heartbeatMs = 30'000;        // Welcome's: a quiet connection gets a heartbeat this often (the daemon's
                                        // [server] heartbeat-ms)
  std::string kind = "classification";  // classification, binary or regression (data/task_kind.hpp)
  float huberDelta = 0;                 // regression: Huber loss with this delta (0 = squared error)
  std::string testData;                 // evaluation data: a file (CSV, LIBSVM, NPY, NPZ) or IDX directory ("" = none)
  std::string dataFormat = "auto";      // its format (data/load.hpp; auto = from the name)
  std::string label;                    // its label column (CSV) or array (NPZ); "" = the default
  std::string categorical;              // CSV columns of categories, comma-separated (data/load.hpp)
  uint32_t categoricalBuckets = 16;     // one-hot slots per categorical column
  // Categorical columns one-hot over a vocabulary the statistics round agrees (value k
  // of a column's sorted vocabulary in slot k, others in the last slot; docs/data.md)
  // instead of hashed buckets. A value on fewer than vocabularyMinCount examples in
  // total goes to the last slot too, and so does every value past the
  // categoricalBuckets - 1 most frequent.
  bool categoricalVocabulary = false;
  uint64_t vocabularyMinCount = 5;
  uint32_t evalEvery = 1;  // evaluate every N committed rounds
  // Feature scaling (docs/data.md): before round 1 a statistics round collects the
  // clients' per-feature counts, sums and sums of squares; every party then scales its
  // features with the merged mean and std (z-scores; sparse data: divided by std only).
  bool standardize = false;
  uint32_t statsClients = 0;     // clients asked in the statistics round (0 = every waiting one)
  uint32_t statsMinClients = 0;  // clients waiting before it starts (0 = the engine's min-clients, or K)
  int64_t statsDeadlineMs = 0;   // its deadline from the request (0 = the round deadline, task.deadline-ms)
  std::string modelOut;          // where the final model is saved ("" = nowhere)
  // Sparse models (docs/sparse.md): a client that offers the rows its data touches
  // (starling-client --sparse-rows) trains the compact model of those rows and moves
  // only their parameters and the dense rest. false: every client trains the whole model.
  bool sparseRows = true;
  // Relays (docs/placement.md, "Applying a placement"): a file of "client ID RELAY"
  // lines (starling-coordinator placement --out), read again whenever it changes; the
  // placement is kept in the database and sent to the relays, which redirect the
  // clients placed elsewhere at their next round. "" = none.
  std::string placementFile;
  // Relays (docs/placement.md, "Recomputed on drift"): the coordinator places the
  // clients its relays report (Update.members) itself with METIS whenever the relay
  // traffic (the sum over relays of the union of their clients' rows) has drifted by more
  // than this fraction since it last did, and applies the new placement when it saves
  // more than this fraction of the traffic. 0 = never.
  double placementDrift = 0;
  // The engine's shard map (engine.shards): the "row ROW SHARD" lines of a placement
  // file (placement --shards S --out), for an embedbag model, whose first layer's rows
  // are contiguous; engine.shards must then be S. "" = ranges of equal size.
  std::string shardMapFile;
};

// Whether the task runs a statistics round before round 1 (task.standardize or
// task.categorical-vocabulary).
bool needsStatisticsRound(const TaskConfig& task);

// Checks values no single setting can (e.g. tau-min <= tau <= tau-max); the message
// names the setting by its file key's last part.
Status validateTask(const EngineConfig& engine, const TaskConfig& task);

// How the task's data is read (its format, label and task kind) for evaluation
// (test = true: an IDX directory's test split) or training. The task must have passed
// validateTask.
data::DataOptions dataOptions(const TaskConfig& task, bool test);

// The capabilities (starling/wire/capabilities.hpp) a client must list in Hello to
// take part in this task: the formats it will be sent and the features it is asked
// to use. A client lacking any is refused at Hello with an Error naming them.
std::vector<std::string> requiredCapabilities(const EngineConfig& engine, const TaskConfig& task);

// The RoundAssign the daemon sends for an assignment; deadlineInMs is the time left
// until its deadline. Its tensors are views of the assignment's (valid while `a` is).
wire::RoundAssignMsg assignmentMessage(const Assignment& a, uint32_t deadlineInMs);
// Its frame (header + body); the broadcasts and the model go straight into it. The
// simulator sizes its links with the same bytes.
wire::Frame encodeAssignment(const Assignment& a, uint32_t deadlineInMs);

// The clients a statistics round waits for before it starts (task.stats-min-clients, or
// the engine's min-clients, or K), and the answers it needs to succeed (min-goal, or
// ceil(K / 2)); at least 1.
uint32_t statsWaitFor(const EngineConfig& engine, const TaskConfig& task);
uint32_t statsMinAnswers(const EngineConfig& engine);

// The task part of every client's Welcome (model, hyper-parameters, compression,
// rounds, initial seed, heartbeat); the federation adds the client's own fields. The
// simulator sets its clients up from the same message.
wire::WelcomeMsg taskWelcome(const EngineConfig& engine, const TaskConfig& task);

}  // namespace starling::coordinator
