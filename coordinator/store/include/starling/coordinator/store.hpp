#pragma once
// The coordinator's durable state: one SQLite database (docs/state.md has the schema).
//
// What it holds: clients, rounds (committed or abandoned, with the reason), the
// participants of each round (accepted, straggler, dropped, rejected, late-applied,
// late-discarded, with the reason), checkpoints (global model, server error-feedback
// memory, the round engine's opaque state), the clients refused at Hello (schema
// version 3) and a small key/value meta table.
//
// Guarantees:
//   - A committed round is one SQLite transaction holding the round, its
//     participants, its checkpoint and the client rows it changed: after a crash
//     (process or power) the round is either wholly there or wholly absent.
//     commitRound() returns ok only after the transaction is durable (WAL with
//     synchronous=FULL: the WAL is fsynced at every commit).
//   - A failure (disk full, read-only file, I/O error, a constraint a record breaks)
//     leaves the database as it was before the call and returns a Status naming the
//     file and the round: "committing round 12 to 'x.db': disk full (database or disk
//     is full); the round was not recorded".
//   - Checkpoint blobs carry checksums checked on load: a corrupt checkpoint is
//     reported as kMalformed, never handed to the engine.
//
// Resume: on restart the daemon reads latestCheckpoint() (the last committed round)
// and lastRecordedRound() (the next round number is one past it, so an abandoned
// round's number is never reused).
//
// Threading: a Store is not thread-safe. It is used from one thread at a time (the
// daemon's store thread); moving it between threads between calls is fine.
//
// Ownership: the Store owns its connection; records are plain values copied in and
// out.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "starling/coordinator/outcomes.hpp"
#include "starling/util/status.hpp"

namespace starling::coordinator {

// A client as the coordinator knows it. Keyed by id (the identity from its
// certificate).
//
// The last four fields are the store's: computed from the participants of every round
// recorded (commitRound, recordAbandonedRound), in that round's transaction, in the
// order the participants are given. A new client's row starts from the values written
// with it (the defaults below for a client never measured); writing a known client's
// row again (upsertClient, a round's `clients`) keeps the figures it has.
//   - An assignment is a participant row of the round being recorded, other than
//     late-applied and late-discarded (those belong to an assignment counted before).
//     It returned unless it is a straggler or dropped (a rejected update returned).
//   - A returned update is a row with returnedMs whose outcome is not straggler or
//     dropped, of this round or late; it is measured when durationMs > 0.
struct ClientRecord {
  std::string id;
  std::string certFingerprint;  // hex SHA-256 of the client certificate
  int64_t firstSeenMs = 0;      // wall clock, ms since the Unix epoch
  int64_t lastSeenMs = 0;
  int64_t examples = 0;  // as announced in Hello
  // Examples per second of the client's returned updates (examples / durationMs), an
  // exponentially weighted average with weight 0.5 on the newest; 0 = never measured
  // (the first measurement is taken as it is).
  double speedExamplesPerS = 0;
  // Exponentially weighted average, weight 0.5 on the newest, of each assignment's
  // returned (1) or not (0); in [0, 1].
  double reliability = 1.0;
  int64_t roundsAssigned = 0;  // assignments
  int64_t roundsReturned = 0;  // assignments that returned
  // Sparse models: the row set its last Hello offered (Hello.row_set, coded) and its
  // bucket size; empty and 0 when it offered none (or the file predates version 9).
  std::vector<uint8_t> rowSet;
  uint32_t rowBucket = 0;

  bool operator==(const ClientRecord&) const = default;
};

enum class RoundStatus { kCommitted, kAbandoned };

// "committed" / "abandoned".
const char* roundStatusName(RoundStatus status);

struct RoundRecord {
  uint64_t round = 0;
  RoundStatus status = RoundStatus::kCommitted;
  std::string reason;  // why it closed (e.g. "target reached", "deadline") or was abandoned
  int64_t tau = 0;     // local steps
  double lr = 0;
  double density = 1.0;      // uplink density (fraction of coordinates sent)
  double densityDown = 1.0;  // downlink density
  int64_t selected = 0;
  int64_t returned = 0;
  int64_t accepted = 0;
  int64_t stragglers = 0;
  int64_t bytesUpRaw = 0;  // dense fp32 size of what was sent up, summed over clients
  int64_t bytesUpWire = 0;
  int64_t bytesDownRaw = 0;
  int64_t bytesDownWire = 0;
  double trainLossStart = 0;       // example-weighted mean of the clients' loss at start
  std::optional<double> testLoss;  // nullopt when the round was not evaluated
  // The task's metrics (model/metrics.hpp), each nullopt when the task has none:
  // accuracy (classification, binary), top-5 accuracy (over 5 classes), AUC (binary),
  // RMSE, MAE and R^2 (regression).
  std::optional<double> testAccuracy;
  std::optional<double> testTop5, testAuc, testRmse, testMae, testR2;
  int64_t startedMs = 0;
  int64_t endedMs = 0;
  uint64_t modelChecksum = 0;  // of the global model after this round (0 when abandoned)
  // Differential privacy (privacy.update-clip-norm): epsilon spent after this round at
  // privacy.delta, over every committed round; nullopt without privacy; infinite
  // (SQLite keeps an IEEE infinity) when the rounds had no noise.
  std::optional<double> epsilon;

  bool operator==(const RoundRecord&) const = default;
};

// ParticipantOutcome, participantOutcomeName and parseParticipantOutcome: outcomes.hpp,
// shared with the engine.

// One client's part in one round. Keyed by (round, clientId, outcome).
//
// `round` is the round the client was assigned (its update's base round). A client
// that straggled in round r and whose update is applied late in round r + s has two
// rows for round r: "straggler" (written when r was recorded) and "late-applied" with
// staleness s (written in the transaction of round r + s).
struct ParticipantRecord {
  uint64_t round = 0;
  std::string clientId;
  ParticipantOutcome outcome = ParticipantOutcome::kAccepted;
  // Why: required for straggler, dropped, rejected and late-discarded ("deadline
  // passed", "base checksum mismatch", ...); may be empty otherwise.
  std::string reason;
  int64_t assignedMs = 0;
  std::optional<int64_t> returnedMs;  // nullopt when no update arrived
  int64_t durationMs = 0;             // as reported by the client
  int64_t steps = 0;
  int64_t examples = 0;
  double lossStart = 0;
  double lossEnd = 0;
  int64_t bytesUpRaw = 0;
  int64_t bytesUpWire = 0;
  int64_t bytesDownWire = 0;
  int64_t staleness = 0;  // rounds between the base round and the round that used or discarded it
  // Sticky client sampling (schema version 2; 0 and 1 in a version-1 file): drawn from
  // the sticky group, and the factor its aggregation weight was multiplied by.
  bool sticky = false;
  double selectionWeight = 1.0;
  // Schema version 8 (0 in older files): how long the client was idle and connected
  // before this assignment (waiting for a round to close, the staleness bound, or to
  // be selected), ms.
  int64_t waitMs = 0;

  bool operator==(const ParticipantRecord&) const = default;
};

// Everything needed to resume after `round`.
struct Checkpoint {
  uint64_t round = 0;
  std::vector<float> model;         // global model after the round
  std::vector<float> serverMemory;  // server-side error-feedback memory (may be empty)
  std::string engineState;          // opaque bytes from the round engine (controller, schedule, rng)
  // The engine's other model-sized state by name (server momentum, adaptive moments,
  // the served moving average; see coordinator::EngineSnapshot::vectors). Each is stored
  // with its own checksum (table checkpoint_vectors, schema version 2).
  std::map<std::string, std::vector<float>> vectors;
  // The engine's catch-up state (coordinator::EngineSnapshot::catchUp), opaque here;
  // stored with its own checksum (table checkpoint_catch_up, schema version 4). Empty:
  // none (nothing is stored).
  std::vector<uint8_t> catchUp;
  // 64-bit FNV-1a over the model's little-endian fp32 bytes (the same function as
  // starling::checksum64). commitRound fills it in when 0 and refuses a
  // checkpoint whose non-zero checksum does not match its model.
  uint64_t modelChecksum = 0;

  bool operator==(const Checkpoint&) const = default;
};

// A client turned away at Hello (it lacked a capability the task needs), whether or
// not it was ever recorded as a client: clientId is not a reference into the clients.
// Schema version 3 (table refusals).
// A placement of clients on relays the coordinator applied (table placements).
struct PlacementRecord {
  uint64_t version = 0;
  uint64_t round = 0;   // the last committed round when it was applied
  std::string source;   // "file" (server.placement-file) or "drift" (recomputed)
  int64_t clients = 0;  // clients placed
  int64_t relays = 0;   // relays they are placed on
  // A recomputed placement: METIS's seconds, and the relay traffic (the sum over relays
  // of their clients' rows) before it and as placed.
  std::optional<double> partitionSeconds{};
  std::optional<int64_t> rowsBefore{};
  std::optional<int64_t> rowsAfter{};
  friend bool operator==(const PlacementRecord&, const PlacementRecord&) = default;
};

struct RefusalRecord {
  std::string clientId;  // the identity from its certificate
  std::string peer;      // its network address, as the server saw it
  int64_t atMs = 0;      // wall clock, ms since the Unix epoch
  std::string reason;    // what the client was told, e.g. the capabilities it lacks; never empty

  bool operator==(const RefusalRecord&) const = default;
};

// The statistics round of a task that standardizes (task.standardize): what every
// client scales its features with, and who took part. Schema version 6 (table
// feature_statistics, one row at most).
struct FeatureStatisticsRecord {
  std::vector<double> mean;          // per feature
  std::vector<double> std;           // per feature, never 0
  bool centre = true;                // false: sparse data, divided by std only
  std::vector<std::string> clients;  // the participants, sorted
  uint64_t examples = 0;             // their training examples
  int64_t atMs = 0;                  // wall clock, ms since the Unix epoch

  bool operator==(const FeatureStatisticsRecord&) const = default;
};

// One categorical column's vocabulary from the statistics round
// (task.categorical-vocabulary). Schema version 7 (table categorical_vocabulary).
struct CategoricalColumnRecord {
  std::string column;
  std::vector<std::string> values;  // sorted, the order of the one-hot slots
  std::vector<uint64_t> counts;     // counts[i]: the examples holding values[i]

  bool operator==(const CategoricalColumnRecord&) const = default;
};

struct StoreOptions {
  // Open for reading only (the report): no schema is created, nothing is written.
  bool readOnly = false;
  // Checkpoints kept: the last N committed rounds; older ones are pruned in the
  // transaction that adds a new one. At least 1.
  int keepCheckpoints = 3;
  // How long a statement waits for a lock held by another connection (a report
  // running alongside the daemon) before failing with kTimeout.
  int busyTimeoutMs = 5000;
  // Caps the database size (0 = no cap); a write beyond it fails like a full disk.
  // For devices with a quota, and for the tests of the disk-full path.
  int64_t maxSizeBytes = 0;
  // Test hook, empty in production: called inside the transaction of a recorded
  // round at each stage ("clients", "round", "participants", "checkpoint",
  // "before-commit"), on the calling thread. The crash tests end the process there.
  std::function<void(std::string_view stage)> faultHook;
};

// A round's evaluation: the loss and the task's metrics (RoundRecord's test_* fields).
struct EvaluationRecord {
  double loss = 0;
  std::optional<double> accuracy, top5, auc, rmse, mae, r2;
};

class Store {
 public:
  // The schema version this build writes and reads (kept in PRAGMA user_version).
  static constexpr int kSchemaVersion = 11;

  // Opens or creates the database at path (":memory:" for a private in-memory one).
  // A new file gets the schema; an existing one must be a Starling database of
  // kSchemaVersion, or of an older version (1 to 3), which opening for writing upgrades
  // to kSchemaVersion in one transaction (version 2 adds the participants' sticky
  // columns and the checkpoint_vectors table, version 3 the refusals table, version 4
  // the checkpoint_catch_up table). A read-only open reads an older file as it is:
  // version 1's checkpoints without vectors and participants not sticky, no refusals
  // before version 3, no catch-up state before version 4; every write to
  // it fails with kUnsupported. Failures: the file cannot be opened or created (kIo),
  // is read-only when opened for writing (kIo, "database 'x.db' is read-only"), is not
  // a Starling database (kMalformed), or has another schema version (kUnsupported).
  static Result<std::unique_ptr<Store>> open(const std::string& path, const StoreOptions& options = {});

  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Records a committed round in one transaction: the round row, its participants,
  // the checkpoint (pruning checkpoints beyond keepCheckpoints), `clients` (the
  // engine's current view of the clients this round touched, upserted) and the
  // participants' figures (speed, reliability, round counts; see ClientRecord).
  // Requirements (kInvalidArgument otherwise, nothing written): record.status is
  // kCommitted; record.round is greater than every recorded round; checkpoint.round ==
  // record.round; every participant's round is record.round, or an earlier recorded
  // round for late-applied / late-discarded / rejected rows; every participant's
  // client is known (upserted before, or in `clients`); stragglers, drops, rejected
  // and late-discarded rows have a reason; an abandoned round has a reason.
  Status commitRound(const RoundRecord& record, std::span<const ParticipantRecord> participants,
                     const Checkpoint& checkpoint, std::span<const ClientRecord> clients = {});

  // Records an abandoned round (status kAbandoned, reason says why) with its
  // participants and client rows, in one transaction, without a checkpoint. The same
  // requirements as commitRound.
  Status recordAbandonedRound(const RoundRecord& record, std::span<const ParticipantRecord> participants,
                              std::span<const ClientRecord> clients = {});

  // Records, in its own transaction, an update refused after its round was recorded:
  // outcome kRejected or kLateDiscarded, for a recorded round. A second refusal of the
  // same (round, client, outcome) replaces the first. A refusal during an open round
  // belongs in that round's participants instead; an update naming a round that was
  // never recorded is not stored (the caller logs it).
  Status recordRejection(const ParticipantRecord& participant);

  // Sets the test loss and metrics of a committed round, in its own transaction: the
  // daemon evaluates the global model while the next round trains, after the round
  // itself is on disk. kInvalidArgument when no committed round has that number.
  Status recordEvaluation(uint64_t round, const EvaluationRecord& evaluation);

  // Records, in its own transaction, a client refused at Hello. kInvalidArgument when
  // the reason is empty; kUnsupported on an older file opened read-only.
  Status recordRefusal(const RefusalRecord& refusal);

  // Inserts one client row, or updates the row of a known client but for its
  // firstSeenMs, which keeps the first value recorded (a reconnecting client is seen
  // again, not first), and its speed, reliability and round counts, which the store
  // computes (ClientRecord). commitRound's and recordAbandonedRound's `clients` are
  // written the same way.
  Status upsertClient(const ClientRecord& client);

  // The checkpoint of the last committed round, or nullopt on a fresh database.
  // kMalformed when its blobs do not match their checksums.
  Result<std::optional<Checkpoint>> latestCheckpoint();

  // The highest recorded round (committed or abandoned), or nullopt when none.
  Result<std::optional<uint64_t>> lastRecordedRound();

  // All rounds, in round order.
  Result<std::vector<RoundRecord>> rounds();
  // Participants of one round, or of all rounds, ordered by round, client, outcome.
  Result<std::vector<ParticipantRecord>> participants(std::optional<uint64_t> round = std::nullopt);
  // All clients, ordered by id.
  Result<std::vector<ClientRecord>> clients();
  // Clients refused at Hello, in the order they were recorded (empty for a file older
  // than version 3 read as it is).
  Result<std::vector<RefusalRecord>> refusals();

  // Records a placement applied (its own transaction); kInvalidArgument for version 0 or
  // another source than "file" or "drift". placements(): every one, by version (none in
  // a file older than version 10 read as it is).
  Status recordPlacement(const PlacementRecord& placement);
  Result<std::vector<PlacementRecord>> placements();

  // Records the task's statistics round, in its own transaction (replacing an earlier
  // one). kInvalidArgument when mean and std differ in length or are empty.
  Status saveFeatureStatistics(const FeatureStatisticsRecord& record);
  // The recorded statistics round, or nullopt (none, or a file older than version 6
  // read as it is); kMalformed when the blobs do not match their checksum.
  Result<std::optional<FeatureStatisticsRecord>> featureStatistics();

  // Records the categorical vocabulary, replacing any earlier one, in one transaction.
  // kInvalidArgument when a column has no name, its values are not sorted and distinct,
  // or values and counts differ in length.
  Status saveCategoricalVocabulary(const std::vector<CategoricalColumnRecord>& columns);
  // The recorded vocabulary by column name (empty: none, or a file older than version 7
  // read as it is).
  Result<std::vector<CategoricalColumnRecord>> categoricalVocabulary();

  // Small key/value settings, e.g. the daemon's task specification, so that resuming
  // with a different task is refused.
  Status setMeta(std::string_view key, std::string_view value);
  Result<std::optional<std::string>> meta(std::string_view key);

  // `PRAGMA integrity_check`: ok, or kMalformed with SQLite's findings.
  Status checkIntegrity();

  const std::string& path() const;

  // Test-only: called at named points inside writes, e.g. "commit-round:mid" after the
  // round's rows are written and before the transaction commits. A test aborts the
  // process there to check that a crash loses nothing committed. Empty by default.
  // The points: "commit-round:mid" in commitRound and "abandon-round:mid" in
  // recordAbandonedRound, each after every row of the round (and its checkpoint) is
  // written and before COMMIT, on the calling thread. An exception thrown by the hook
  // leaves the call and the transaction is rolled back: nothing of the round is stored.
  void setTestHook(std::function<void(std::string_view point)> hook);

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  Status recordRound(const RoundRecord& record, std::span<const ParticipantRecord> participants,
                     const Checkpoint* checkpoint, std::span<const ClientRecord> clients);

  std::unique_ptr<Impl> impl_;
};

}  // namespace starling::coordinator
