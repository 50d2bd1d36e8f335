// The schema: version 1 and what each later version adds, and the creation and
// upgrade of a file (docs/state.md, "Schema").

#include <array>
#include <cstddef>

#include "store_impl.hpp"

namespace starling::coordinator {

using store_detail::kApplicationId;
using store_detail::queryInt;

namespace {

// Schema version 1, then what each later version adds (kSchemaV2 to kSchemaV5), listed
// in kSchemaSteps. docs/state.md explains every table; keep the two in step.
// Unsigned 64-bit values (rounds, checksums) are stored as the signed integer with
// the same bits.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE clients (
  id                   TEXT PRIMARY KEY,
  cert_fingerprint     TEXT NOT NULL,
  first_seen_ms        INTEGER NOT NULL,
  last_seen_ms         INTEGER NOT NULL,
  examples             INTEGER NOT NULL CHECK (examples >= 0),
  speed_examples_per_s REAL NOT NULL,
  reliability          REAL NOT NULL CHECK (reliability >= 0 AND reliability <= 1),
  rounds_assigned      INTEGER NOT NULL CHECK (rounds_assigned >= 0),
  rounds_returned      INTEGER NOT NULL CHECK (rounds_returned >= 0)
);

CREATE TABLE rounds (
  round            INTEGER PRIMARY KEY CHECK (round >= 0),
  status           TEXT NOT NULL CHECK (status IN ('committed', 'abandoned')),
  reason           TEXT NOT NULL,
  tau              INTEGER NOT NULL,
  lr               REAL NOT NULL,
  density_up       REAL NOT NULL,
  density_down     REAL NOT NULL,
  selected         INTEGER NOT NULL,
  returned         INTEGER NOT NULL,
  accepted         INTEGER NOT NULL,
  stragglers       INTEGER NOT NULL,
  bytes_up_raw     INTEGER NOT NULL,
  bytes_up_wire    INTEGER NOT NULL,
  bytes_down_raw   INTEGER NOT NULL,
  bytes_down_wire  INTEGER NOT NULL,
  train_loss_start REAL NOT NULL,
  test_loss        REAL,
  test_accuracy    REAL,
  started_ms       INTEGER NOT NULL,
  ended_ms         INTEGER NOT NULL,
  model_checksum   INTEGER NOT NULL
);

CREATE TABLE participants (
  round           INTEGER NOT NULL REFERENCES rounds (round),
  client_id       TEXT NOT NULL REFERENCES clients (id),
  outcome         TEXT NOT NULL CHECK (outcome IN ('accepted', 'straggler', 'dropped', 'rejected',
                                                   'late-applied', 'late-discarded')),
  reason          TEXT NOT NULL,
  assigned_ms     INTEGER NOT NULL,
  returned_ms     INTEGER,
  duration_ms     INTEGER NOT NULL,
  steps           INTEGER NOT NULL,
  examples        INTEGER NOT NULL,
  loss_start      REAL NOT NULL,
  loss_end        REAL NOT NULL,
  bytes_up_raw    INTEGER NOT NULL,
  bytes_up_wire   INTEGER NOT NULL,
  bytes_down_wire INTEGER NOT NULL,
  staleness       INTEGER NOT NULL CHECK (staleness >= 0),
  PRIMARY KEY (round, client_id, outcome)
) WITHOUT ROWID;
CREATE INDEX participants_by_client ON participants (client_id);

CREATE TABLE checkpoints (
  round           INTEGER PRIMARY KEY REFERENCES rounds (round),
  model           BLOB NOT NULL,
  model_checksum  INTEGER NOT NULL,
  server_memory   BLOB NOT NULL,
  memory_checksum INTEGER NOT NULL,
  engine_state    BLOB NOT NULL,
  state_checksum  INTEGER NOT NULL
);
)sql";

// Version 2: each participant's sticky flag and selection weight (sticky client
// sampling), and the engine's other model-sized vectors of a checkpoint, by name (server
// momentum, adaptive moments, the served moving average). Pruning a checkpoint deletes
// its vectors.
constexpr const char* kSchemaV2 = R"sql(
ALTER TABLE participants ADD COLUMN sticky INTEGER NOT NULL DEFAULT 0;
ALTER TABLE participants ADD COLUMN selection_weight REAL NOT NULL DEFAULT 1;
CREATE TABLE checkpoint_vectors (
  round    INTEGER NOT NULL REFERENCES checkpoints (round) ON DELETE CASCADE,
  name     TEXT NOT NULL,
  data     BLOB NOT NULL,
  checksum INTEGER NOT NULL,
  PRIMARY KEY (round, name)
) WITHOUT ROWID;
)sql";

// Version 3: the clients refused at Hello (a capability the task needs was missing).
// client_id is deliberately not a reference to clients: a refused client is never
// recorded there.
constexpr const char* kSchemaV3 = R"sql(
CREATE TABLE refusals (
  id        INTEGER PRIMARY KEY,
  client_id TEXT NOT NULL,
  peer      TEXT NOT NULL,
  at_ms     INTEGER NOT NULL,
  reason    TEXT NOT NULL CHECK (reason <> '')
);
)sql";

// Version 4: the round engine's catch-up state of a checkpoint (its broadcast log, XOR
// undo log, change stamps; coordinator/catch_up.fbs), one blob per checkpoint, deleted
// with it.
constexpr const char* kSchemaV4 = R"sql(
CREATE TABLE checkpoint_catch_up (
  round    INTEGER PRIMARY KEY REFERENCES checkpoints (round) ON DELETE CASCADE,
  data     BLOB NOT NULL,
  checksum INTEGER NOT NULL
) WITHOUT ROWID;
)sql";

// Version 5: the metrics of tasks other than classification (and top-5 accuracy), per
// evaluated round; NULL where the task has no such metric.
constexpr const char* kSchemaV5 = R"sql(
ALTER TABLE rounds ADD COLUMN test_top5 REAL;
ALTER TABLE rounds ADD COLUMN test_auc REAL;
ALTER TABLE rounds ADD COLUMN test_rmse REAL;
ALTER TABLE rounds ADD COLUMN test_mae REAL;
ALTER TABLE rounds ADD COLUMN test_r2 REAL;
)sql";

// Version 6: the statistics round of a task that standardizes its features
// (task.standardize): at most one row, the merged mean and standard deviation per
// feature as little-endian doubles with their checksum, and who took part, so that a
// restarted coordinator reuses them instead of asking again.
constexpr const char* kSchemaV6 = R"sql(
CREATE TABLE feature_statistics (
  id           INTEGER PRIMARY KEY CHECK (id = 1),
  at_ms        INTEGER NOT NULL,
  features     INTEGER NOT NULL,
  centre       INTEGER NOT NULL,
  participants TEXT NOT NULL,
  examples     INTEGER NOT NULL,
  mean         BLOB NOT NULL,
  std          BLOB NOT NULL,
  checksum     INTEGER NOT NULL
);
)sql";

// Version 7: the categorical vocabulary of the statistics round
// (task.categorical-vocabulary): per categorical column its agreed values in order
// (position 0, 1, ...) with their merged counts, so that a restarted coordinator
// encodes over the same vocabulary instead of asking again.
constexpr const char* kSchemaV7 = R"sql(
CREATE TABLE categorical_vocabulary (
  column_name TEXT NOT NULL,
  position    INTEGER NOT NULL,
  value       TEXT NOT NULL,
  count       INTEGER NOT NULL,
  PRIMARY KEY (column_name, position)
) WITHOUT ROWID;
)sql";

// Version 8: each participant's wait before its assignment (task.mode ssp / dssp hold
// fast clients back; sync rounds make them wait for the round to close).
constexpr const char* kSchemaV8 = R"sql(
ALTER TABLE participants ADD COLUMN wait_ms INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 9: the row set a client offered in its last Hello (sparse models,
// docs/sparse.md: the buckets of row_bucket first-layer rows its data touches, coded by
// compression::encodeRowSet), for `starling-coordinator placement --db`; NULL and 0
// when it offered none.
constexpr const char* kSchemaV9 = R"sql(
ALTER TABLE clients ADD COLUMN row_set BLOB;
ALTER TABLE clients ADD COLUMN row_bucket INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 10: the placements of clients on relays applied (docs/placement.md): from
// server.placement-file ('file') or recomputed on drift ('drift', with the partition's
// time and the relay traffic in rows a round before and as placed).
constexpr const char* kSchemaV10 = R"sql(
CREATE TABLE placements (
  version     INTEGER PRIMARY KEY CHECK (version > 0),
  round       INTEGER NOT NULL,
  source      TEXT NOT NULL CHECK (source IN ('file', 'drift')),
  clients     INTEGER NOT NULL,
  relays      INTEGER NOT NULL,
  partition_s REAL,
  rows_before INTEGER,
  rows_after  INTEGER
);
)sql";

// Version 11: the privacy spent (docs/privacy.md): epsilon at privacy.delta after each
// round, over every committed round so far; NULL without differential privacy.
constexpr const char* kSchemaV11 = R"sql(
ALTER TABLE rounds ADD COLUMN epsilon REAL;
)sql";

// kSchemaSteps[v - 1] turns a version v - 1 database into version v (version 0 being
// the empty file). A new file runs every step; a file of an older version, opened for
// writing, runs the steps past its version, all in one transaction.
constexpr std::array<const char*, 11> kSchemaSteps = {kSchemaV1, kSchemaV2, kSchemaV3, kSchemaV4,  kSchemaV5, kSchemaV6,
                                                      kSchemaV7, kSchemaV8, kSchemaV9, kSchemaV10, kSchemaV11};
static_assert(kSchemaSteps.size() == Store::kSchemaVersion, "one schema step per version");

}  // namespace

Status Store::Impl::createSchema() {
  sqlite::Transaction tx(*db);
  STARLING_RETURN_IF_ERROR(tx.begin());
  // Checked again inside the write lock: another process may have created it.
  Result<int64_t> tables = queryInt(*db, "SELECT count(*) FROM sqlite_schema");
  if (!tables) return tables.status();
  if (*tables != 0) return Status::ok();  // rolled back; initialize() re-reads the header
  for (const char* step : kSchemaSteps)
    STARLING_RETURN_IF_ERROR(db->exec(step));
  STARLING_RETURN_IF_ERROR(db->exec(fmt::format("PRAGMA application_id = {}", kApplicationId)));
  STARLING_RETURN_IF_ERROR(db->exec(fmt::format("PRAGMA user_version = {}", kSchemaVersion)));
  return tx.commit();
}

// Runs the schema steps past version `from` and sets kSchemaVersion, in one
// transaction: the file is either upgraded whole or left as it was.
Status Store::Impl::upgradeFrom(int64_t from) {
  sqlite::Transaction tx(*db);
  STARLING_RETURN_IF_ERROR(tx.begin());
  // Checked again inside the write lock: another process may have upgraded it.
  Result<int64_t> v = queryInt(*db, "PRAGMA user_version");
  if (!v) return v.status();
  if (*v != from) return Status::ok();  // rolled back; the caller re-reads the version
  for (std::size_t step = static_cast<std::size_t>(from); step < kSchemaSteps.size(); ++step)
    STARLING_RETURN_IF_ERROR(db->exec(kSchemaSteps[step]));
  STARLING_RETURN_IF_ERROR(db->exec(fmt::format("PRAGMA user_version = {}", kSchemaVersion)));
  return tx.commit();
}

}  // namespace starling::coordinator
