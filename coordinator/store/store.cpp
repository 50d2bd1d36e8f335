#include "starling/coordinator/store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <utility>

#include "starling/util/checksum.hpp"

#include "sqlite.hpp"

namespace starling::coordinator {

namespace {

// "STLG": marks the file as a Starling coordinator database (PRAGMA application_id).
constexpr int64_t kApplicationId = 0x53544c47;

// Schema version 1, then what each later version adds (kSchemaV2 to kSchemaV4), listed
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

// kSchemaSteps[v - 1] turns a version v - 1 database into version v (version 0 being
// the empty file). A new file runs every step; a file of an older version, opened for
// writing, runs the steps past its version, all in one transaction.
constexpr std::array<const char*, 4> kSchemaSteps = {kSchemaV1, kSchemaV2, kSchemaV3, kSchemaV4};
static_assert(kSchemaSteps.size() == Store::kSchemaVersion, "one schema step per version");

constexpr const char* kRoundColumns =
    "round, status, reason, tau, lr, density_up, density_down, selected, returned, accepted, stragglers, "
    "bytes_up_raw, bytes_up_wire, bytes_down_raw, bytes_down_wire, train_loss_start, test_loss, test_accuracy, "
    "started_ms, ended_ms, model_checksum";

#define STARLING_PARTICIPANT_COLUMNS_V1                                                                     \
  "round, client_id, outcome, reason, assigned_ms, returned_ms, duration_ms, steps, examples, loss_start, " \
  "loss_end, bytes_up_raw, bytes_up_wire, bytes_down_wire, staleness"
constexpr const char* kParticipantColumns = STARLING_PARTICIPANT_COLUMNS_V1 ", sticky, selection_weight";
// What a version-1 file (read as it is) gives for the two columns of version 2.
constexpr const char* kParticipantColumnsV1 = STARLING_PARTICIPANT_COLUMNS_V1 ", 0, 1.0";
#undef STARLING_PARTICIPANT_COLUMNS_V1

constexpr const char* kClientColumns =
    "id, cert_fingerprint, first_seen_ms, last_seen_ms, examples, speed_examples_per_s, reliability, "
    "rounds_assigned, rounds_returned";

constexpr const char* kParticipantUpdate =
    " ON CONFLICT (round, client_id, outcome) DO UPDATE SET reason = excluded.reason, "
    "assigned_ms = excluded.assigned_ms, returned_ms = excluded.returned_ms, duration_ms = excluded.duration_ms, "
    "steps = excluded.steps, examples = excluded.examples, loss_start = excluded.loss_start, "
    "loss_end = excluded.loss_end, bytes_up_raw = excluded.bytes_up_raw, bytes_up_wire = excluded.bytes_up_wire, "
    "bytes_down_wire = excluded.bytes_down_wire, staleness = excluded.staleness, sticky = excluded.sticky, "
    "selection_weight = excluded.selection_weight";

int64_t toSql(uint64_t value) {
  return std::bit_cast<int64_t>(value);
}
uint64_t fromSql(int64_t value) {
  return std::bit_cast<uint64_t>(value);
}

uint64_t fnv1a(std::span<const unsigned char> bytes) {
  constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ULL;
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t h = kOffsetBasis;
  for (unsigned char b : bytes) {
    h ^= b;
    h *= kPrime;
  }
  return h;
}

std::span<const unsigned char> asBytes(std::string_view s) {
  return {reinterpret_cast<const unsigned char*>(s.data()), s.size()};
}

// Floats as little-endian IEEE-754 fp32 bytes, whatever the host's byte order.
std::vector<unsigned char> encodeFloats(std::span<const float> values) {
  std::vector<unsigned char> out(values.size() * sizeof(float));
  if constexpr (std::endian::native == std::endian::little) {
    if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  } else {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto bits = std::bit_cast<uint32_t>(values[i]);
      for (int b = 0; b < 4; ++b)
        out[i * 4 + b] = static_cast<unsigned char>(bits >> (8 * b));
    }
  }
  return out;
}

std::vector<float> decodeFloats(std::span<const unsigned char> bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  if constexpr (std::endian::native == std::endian::little) {
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  } else {
    for (std::size_t i = 0; i < out.size(); ++i) {
      uint32_t bits = 0;
      for (int b = 0; b < 4; ++b)
        bits |= static_cast<uint32_t>(bytes[i * 4 + b]) << (8 * b);
      out[i] = std::bit_cast<float>(bits);
    }
  }
  return out;
}

// "file:<path>?immutable=1", with the characters a URI path may not hold escaped.
std::string immutableUri(const std::string& path) {
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c < 0x21 || c >= 0x7f) {
      uri += fmt::format("%{:02X}", c);
    } else {
      uri += static_cast<char>(c);
    }
  }
  return uri + "?immutable=1";
}

Status invalid(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}

// Runs a single-row query and returns its first column as an integer.
Result<int64_t> queryInt(sqlite::Database& db, std::string_view sql) {
  Result<std::unique_ptr<sqlite::Statement>> stmt = db.prepare(sql);
  if (!stmt) return stmt.status();
  Result<bool> row = (*stmt)->step();
  if (!row) return row.status();
  if (!*row) return Status(StatusCode::kInternal, fmt::format("\"{}\" returned no row", sql));
  const int64_t value = (*stmt)->int64(0);
  (*stmt)->reset();
  return value;
}

Result<std::string> queryText(sqlite::Database& db, std::string_view sql) {
  Result<std::unique_ptr<sqlite::Statement>> stmt = db.prepare(sql);
  if (!stmt) return stmt.status();
  Result<bool> row = (*stmt)->step();
  if (!row) return row.status();
  if (!*row) return Status(StatusCode::kInternal, fmt::format("\"{}\" returned no row", sql));
  std::string value = (*stmt)->text(0);
  (*stmt)->reset();
  return value;
}

}  // namespace

const char* roundStatusName(RoundStatus status) {
  switch (status) {
    case RoundStatus::kCommitted:
      return "committed";
    case RoundStatus::kAbandoned:
      return "abandoned";
  }
  return "unknown";
}

const char* participantOutcomeName(ParticipantOutcome outcome) {
  switch (outcome) {
    case ParticipantOutcome::kAccepted:
      return "accepted";
    case ParticipantOutcome::kStraggler:
      return "straggler";
    case ParticipantOutcome::kDropped:
      return "dropped";
    case ParticipantOutcome::kRejected:
      return "rejected";
    case ParticipantOutcome::kLateApplied:
      return "late-applied";
    case ParticipantOutcome::kLateDiscarded:
      return "late-discarded";
  }
  return "unknown";
}

std::optional<ParticipantOutcome> parseParticipantOutcome(std::string_view name) {
  for (ParticipantOutcome o :
       {ParticipantOutcome::kAccepted, ParticipantOutcome::kStraggler, ParticipantOutcome::kDropped,
        ParticipantOutcome::kRejected, ParticipantOutcome::kLateApplied, ParticipantOutcome::kLateDiscarded}) {
    if (name == participantOutcomeName(o)) return o;
  }
  return std::nullopt;
}

// ---- Impl: the connection and its statements, prepared once ---------------------

struct Store::Impl {
  std::string path;
  StoreOptions options;
  // Declared first so that it is destroyed after the statements below.
  std::unique_ptr<sqlite::Database> db;
  std::unique_ptr<sqlite::Statement> insertRound;
  std::unique_ptr<sqlite::Statement> insertParticipant;  // rows of the round being recorded
  std::unique_ptr<sqlite::Statement> upsertParticipant;  // late rows for earlier rounds
  std::unique_ptr<sqlite::Statement> upsertClient;
  std::unique_ptr<sqlite::Statement> clientExists;
  std::unique_ptr<sqlite::Statement> roundStatus;
  std::unique_ptr<sqlite::Statement> setEvaluation;
  std::unique_ptr<sqlite::Statement> lastRound;
  std::unique_ptr<sqlite::Statement> insertCheckpoint;
  std::unique_ptr<sqlite::Statement> pruneCheckpoints;
  std::unique_ptr<sqlite::Statement> latestCheckpoint;
  std::unique_ptr<sqlite::Statement> insertVector;    // null on a version-1 database read as it is
  std::unique_ptr<sqlite::Statement> selectVectors;   // likewise
  std::unique_ptr<sqlite::Statement> insertRefusal;   // null on a version-1 or -2 database read as it is
  std::unique_ptr<sqlite::Statement> selectRefusals;  // likewise
  std::unique_ptr<sqlite::Statement> insertCatchUp;   // null before version 4 (read as it is)
  std::unique_ptr<sqlite::Statement> selectCatchUp;   // likewise
  // kUnsupported on an older file opened read-only (read as it is: some of its writing
  // statements are not prepared, and writing would mix versions).
  Status writable() const {
    if (version >= Store::kSchemaVersion) return Status::ok();
    return {StatusCode::kUnsupported,
            fmt::format("the database has schema version {} and was opened read-only; open it for writing to "
                        "upgrade it to version {}",
                        version, Store::kSchemaVersion)};
  }
  std::unique_ptr<sqlite::Statement> selectRounds;
  std::unique_ptr<sqlite::Statement> selectParticipants;
  std::unique_ptr<sqlite::Statement> selectParticipantsOfRound;
  std::unique_ptr<sqlite::Statement> selectClients;
  std::unique_ptr<sqlite::Statement> setMeta;
  std::unique_ptr<sqlite::Statement> getMeta;

  Status prepareAll();
  Status initialize();
  Status createSchema();
  Status upgradeFrom(int64_t from);
  int64_t version = 0;  // the file's schema version once initialized
};

Status Store::Impl::prepareAll() {
  struct Entry {
    std::unique_ptr<sqlite::Statement>* target;
    std::string sql;
  };
  const std::string participantInsert = fmt::format(
      "INSERT INTO participants ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
      "?14, ?15, ?16, ?17)",
      kParticipantColumns);
  const char* participantColumns = version >= 2 ? kParticipantColumns : kParticipantColumnsV1;
  const std::vector<Entry> entries = {
      {&insertRound, fmt::format("INSERT INTO rounds ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
                                 "?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
                                 kRoundColumns)},
      {&upsertClient,
       fmt::format("INSERT OR REPLACE INTO clients ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)", kClientColumns)},
      {&clientExists, "SELECT 1 FROM clients WHERE id = ?1"},
      {&roundStatus, "SELECT status FROM rounds WHERE round = ?1"},
      {&setEvaluation,
       "UPDATE rounds SET test_loss = ?2, test_accuracy = ?3 WHERE round = ?1 AND status = 'committed' "
       "RETURNING round"},
      {&lastRound, "SELECT max(round) FROM rounds"},
      {&insertCheckpoint,
       "INSERT INTO checkpoints (round, model, model_checksum, server_memory, memory_checksum, engine_state, "
       "state_checksum) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"},
      {&pruneCheckpoints,
       "DELETE FROM checkpoints WHERE round NOT IN (SELECT round FROM checkpoints ORDER BY round DESC LIMIT ?1)"},
      {&latestCheckpoint,
       "SELECT round, model, model_checksum, server_memory, memory_checksum, engine_state, state_checksum "
       "FROM checkpoints ORDER BY round DESC LIMIT 1"},
      {&selectRounds, fmt::format("SELECT {} FROM rounds ORDER BY round", kRoundColumns)},
      {&selectParticipants,
       fmt::format("SELECT {} FROM participants ORDER BY round, client_id, outcome", participantColumns)},
      {&selectParticipantsOfRound,
       fmt::format("SELECT {} FROM participants WHERE round = ?1 ORDER BY client_id, outcome", participantColumns)},
      {&selectClients, fmt::format("SELECT {} FROM clients ORDER BY id", kClientColumns)},
      {&setMeta, "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)"},
      {&getMeta, "SELECT value FROM meta WHERE key = ?1"},
  };
  std::vector<Entry> all = entries;
  // An older file read as it is lacks the columns and tables of the later versions:
  // nothing that touches them is prepared (a write then fails in writable(), a read
  // returns what such a file holds).
  if (version >= 2) {
    all.push_back({&insertParticipant, participantInsert});
    all.push_back({&upsertParticipant, participantInsert + kParticipantUpdate});
    all.push_back(
        {&insertVector, "INSERT INTO checkpoint_vectors (round, name, data, checksum) VALUES (?1, ?2, ?3, ?4)"});
    all.push_back(
        {&selectVectors, "SELECT name, data, checksum FROM checkpoint_vectors WHERE round = ?1 ORDER BY name"});
  }
  if (version >= 3) {
    all.push_back({&insertRefusal, "INSERT INTO refusals (client_id, peer, at_ms, reason) VALUES (?1, ?2, ?3, ?4)"});
    all.push_back({&selectRefusals, "SELECT client_id, peer, at_ms, reason FROM refusals ORDER BY id"});
  }
  if (version >= 4) {
    all.push_back({&insertCatchUp, "INSERT INTO checkpoint_catch_up (round, data, checksum) VALUES (?1, ?2, ?3)"});
    all.push_back({&selectCatchUp, "SELECT data, checksum FROM checkpoint_catch_up WHERE round = ?1"});
  }
  for (const Entry& e : all) {
    Result<std::unique_ptr<sqlite::Statement>> stmt = db->prepare(e.sql);
    if (!stmt) return stmt.status();
    *e.target = std::move(*stmt);
  }
  return Status::ok();
}

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

Status Store::Impl::initialize() {
  const std::string where = fmt::format("cannot open database '{}'", path);
  auto fail = [&](const Status& s) {
    std::string message = fmt::format("{}: {}", where, s.message());
    if (s.code() == StatusCode::kIo && !options.readOnly) {
      message += " (SQLite needs to write the file and create '-wal' and '-shm' files next to it)";
    }
    return Status(s.code(), std::move(message));
  };

  if (Status s = db->exec(fmt::format("PRAGMA busy_timeout = {}", std::max(0, options.busyTimeoutMs))); !s) {
    return fail(s);
  }
  if (Status s = db->exec("PRAGMA foreign_keys = ON"); !s) return fail(s);

  // The first read of the file: a file that is not a database fails here.
  Result<int64_t> version = queryInt(*db, "PRAGMA user_version");
  if (!version) return fail(version.status());
  Result<int64_t> appId = queryInt(*db, "PRAGMA application_id");
  if (!appId) return fail(appId.status());
  Result<int64_t> tables = queryInt(*db, "SELECT count(*) FROM sqlite_schema");
  if (!tables) return fail(tables.status());

  const bool fresh = *version == 0 && *appId == 0 && *tables == 0;
  if (!fresh && *appId != kApplicationId) {
    return {StatusCode::kMalformed,
            fmt::format("database '{}' is not a Starling coordinator database (application id {:#x})", path, *appId)};
  }
  if (!fresh && (*version < 1 || *version > kSchemaVersion)) {
    return {
        StatusCode::kUnsupported,
        fmt::format("database '{}' has schema version {}; this build of starling-coordinator reads versions 1 to {}",
                    path, *version, kSchemaVersion)};
  }
  this->version = *version;
  if (options.readOnly) {
    if (fresh) {
      return {StatusCode::kNotFound, fmt::format("database '{}' holds no Starling state (empty file)", path)};
    }
    return Status::ok();
  }
  if (db->readOnly()) {
    return {StatusCode::kIo, fmt::format("database '{}' is read-only (file permissions or a read-only file "
                                         "system); the coordinator needs to write it",
                                         path)};
  }

  // WAL: readers (a report) never block the daemon's commits and a commit appends to
  // the WAL instead of rewriting pages in place. synchronous=FULL fsyncs the WAL at
  // every commit, so a committed round survives power loss as well as a crash; NORMAL
  // would only risk the last rounds on power loss, but the daemon tells clients a
  // round is committed, and one fsync per round costs nothing next to a round.
  Result<std::string> mode = queryText(*db, "PRAGMA journal_mode = WAL");
  if (!mode) return fail(mode.status());
  if (*mode != "wal" && *mode != "memory") {
    return {StatusCode::kIo, fmt::format("{}: cannot switch to WAL journaling (journal mode is '{}')", where, *mode)};
  }
  if (Status s = db->exec("PRAGMA synchronous = FULL"); !s) return fail(s);

  if (!fresh && *version < kSchemaVersion) {
    if (Status s = upgradeFrom(*version); !s) {
      return fail(s.withContext(fmt::format("upgrading schema version {} to {}", *version, kSchemaVersion)));
    }
    Result<int64_t> v = queryInt(*db, "PRAGMA user_version");
    if (!v) return fail(v.status());
    if (*v != kSchemaVersion) {
      return {StatusCode::kMalformed,
              fmt::format("database '{}' was changed by another program while being upgraded", path)};
    }
    this->version = *v;
  }
  if (fresh) {
    Status created = createSchema();
    if (!created) return fail(created);
    // Re-check what is there now (another process may have created the schema).
    Result<int64_t> v = queryInt(*db, "PRAGMA user_version");
    if (!v) return fail(v.status());
    Result<int64_t> a = queryInt(*db, "PRAGMA application_id");
    if (!a) return fail(a.status());
    if (*a != kApplicationId || *v != kSchemaVersion) {
      return {StatusCode::kMalformed,
              fmt::format("database '{}' was changed by another program while being created", path)};
    }
    this->version = *v;
  }

  if (options.maxSizeBytes > 0) {
    Result<int64_t> pageSize = queryInt(*db, "PRAGMA page_size");
    if (!pageSize) return fail(pageSize.status());
    const int64_t pages = std::max<int64_t>(1, options.maxSizeBytes / std::max<int64_t>(1, *pageSize));
    Result<int64_t> set = queryInt(*db, fmt::format("PRAGMA max_page_count = {}", pages));
    if (!set) return fail(set.status());
  }
  return Status::ok();
}

// ---- Store ---------------------------------------------------------------------------

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

const std::string& Store::path() const {
  return impl_->path;
}

Result<std::unique_ptr<Store>> Store::open(const std::string& path, const StoreOptions& options) {
  if (options.keepCheckpoints < 1) {
    return invalid(fmt::format("keepCheckpoints must be at least 1 (got {})", options.keepCheckpoints));
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->options = options;
  const int flags = options.readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  Result<std::unique_ptr<sqlite::Database>> db = sqlite::Database::open(path, flags);
  if (!db) return db.status();
  impl->db = std::move(*db);
  Status initialized = impl->initialize();
  std::error_code ec;
  if (!initialized && options.readOnly && initialized.code() == StatusCode::kIo &&
      !std::filesystem::exists(path + "-wal", ec) && !ec) {
    // Reading a WAL database needs its '-shm' file, which cannot be created in a
    // read-only directory. Without a '-wal' file every committed round is in the main
    // file and no writer is active (a writer would have created it), so the file can
    // be read as immutable.
    impl->db.reset();
    Result<std::unique_ptr<sqlite::Database>> immutable =
        sqlite::Database::open(immutableUri(path), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
    if (!immutable) return initialized;
    impl->db = std::move(*immutable);
    initialized = impl->initialize();
  }
  STARLING_RETURN_IF_ERROR(initialized);
  Status prepared = impl->prepareAll();
  if (!prepared) return prepared.withContext(fmt::format("database '{}'", path));
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

Status Store::commitRound(const RoundRecord& record, std::span<const ParticipantRecord> participants,
                          const Checkpoint& checkpoint, std::span<const ClientRecord> clients) {
  if (record.status != RoundStatus::kCommitted) {
    return invalid(fmt::format("commitRound: round {} is marked {}; use recordAbandonedRound", record.round,
                               roundStatusName(record.status)));
  }
  if (checkpoint.round != record.round) {
    return invalid(
        fmt::format("commitRound: the checkpoint is of round {} but the round is {}", checkpoint.round, record.round));
  }
  return recordRound(record, participants, &checkpoint, clients);
}

Status Store::recordAbandonedRound(const RoundRecord& record, std::span<const ParticipantRecord> participants,
                                   std::span<const ClientRecord> clients) {
  if (record.status != RoundStatus::kAbandoned) {
    return invalid(
        fmt::format("recordAbandonedRound: round {} is marked {}", record.round, roundStatusName(record.status)));
  }
  return recordRound(record, participants, nullptr, clients);
}

namespace {

void bindParticipant(sqlite::Statement& s, const ParticipantRecord& p) {
  s.bind(1, toSql(p.round))
      .bind(2, std::string_view(p.clientId))
      .bind(3, std::string_view(participantOutcomeName(p.outcome)))
      .bind(4, std::string_view(p.reason))
      .bind(5, p.assignedMs)
      .bind(6, p.returnedMs)
      .bind(7, p.durationMs)
      .bind(8, p.steps)
      .bind(9, p.examples)
      .bind(10, p.lossStart)
      .bind(11, p.lossEnd)
      .bind(12, p.bytesUpRaw)
      .bind(13, p.bytesUpWire)
      .bind(14, p.bytesDownWire)
      .bind(15, p.staleness)
      .bind(16, int64_t{p.sticky ? 1 : 0})
      .bind(17, p.selectionWeight);
}

void bindClient(sqlite::Statement& s, const ClientRecord& c) {
  s.bind(1, std::string_view(c.id))
      .bind(2, std::string_view(c.certFingerprint))
      .bind(3, c.firstSeenMs)
      .bind(4, c.lastSeenMs)
      .bind(5, c.examples)
      .bind(6, c.speedExamplesPerS)
      .bind(7, c.reliability)
      .bind(8, c.roundsAssigned)
      .bind(9, c.roundsReturned);
}

// Every straggler, drop and refusal is recorded with its reason.
bool needsReason(ParticipantOutcome o) {
  return o == ParticipantOutcome::kStraggler || o == ParticipantOutcome::kDropped ||
         o == ParticipantOutcome::kRejected || o == ParticipantOutcome::kLateDiscarded;
}

bool isLateOutcome(ParticipantOutcome o) {
  return o == ParticipantOutcome::kLateApplied || o == ParticipantOutcome::kLateDiscarded ||
         o == ParticipantOutcome::kRejected;
}

}  // namespace

Status Store::recordRound(const RoundRecord& record, std::span<const ParticipantRecord> participants,
                          const Checkpoint* checkpoint, std::span<const ClientRecord> clients) {
  Impl& d = *impl_;
  const std::string verb = checkpoint != nullptr ? "committing" : "recording abandoned";
  const std::string context = fmt::format("{} round {} to '{}'", verb, record.round, d.path);
  auto fail = [&](const Status& s) {
    return Status(s.code(), fmt::format("{}: {}; the round was not recorded", context, s.message()));
  };
  if (Status w = d.writable(); !w) return fail(w);

  // Checks that need no database, before any write.
  if (record.round > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return fail(invalid("the round number does not fit in 63 bits"));
  }
  if (record.status == RoundStatus::kAbandoned && record.reason.empty()) {
    return fail(invalid("an abandoned round needs a reason"));
  }
  for (const ParticipantRecord& p : participants) {
    if (needsReason(p.outcome) && p.reason.empty()) {
      return fail(invalid(
          fmt::format("participant '{}' is {} without a reason", p.clientId, participantOutcomeName(p.outcome))));
    }
    if (p.round > record.round || (p.round < record.round && !isLateOutcome(p.outcome))) {
      return fail(
          invalid(fmt::format("participant '{}' is {} in round {}: only late-applied, late-discarded "
                              "and rejected rows may name an earlier round",
                              p.clientId, participantOutcomeName(p.outcome), p.round)));
    }
  }
  std::vector<unsigned char> modelBytes;
  std::vector<unsigned char> memoryBytes;
  uint64_t modelChecksum = 0;
  if (checkpoint != nullptr) {
    modelBytes = encodeFloats(checkpoint->model);
    memoryBytes = encodeFloats(checkpoint->serverMemory);
    modelChecksum = checksum64(checkpoint->model);
    if (checkpoint->modelChecksum != 0 && checkpoint->modelChecksum != modelChecksum) {
      return fail(invalid(fmt::format("the checkpoint's checksum {:#018x} does not match its model ({:#018x})",
                                      checkpoint->modelChecksum, modelChecksum)));
    }
  }

  auto stage = [&](std::string_view name) {
    if (d.options.faultHook) d.options.faultHook(name);
  };
  sqlite::Transaction tx(*d.db);
  if (Status s = tx.begin(); !s) return fail(s);

  Result<bool> last = d.lastRound->step();
  if (!last) return fail(last.status());
  if (*last && !d.lastRound->isNull(0)) {
    const uint64_t lastRound = fromSql(d.lastRound->int64(0));
    d.lastRound->reset();
    if (record.round <= lastRound) {
      return fail(invalid(fmt::format("round numbers must increase, and round {} is already recorded", lastRound)));
    }
  } else {
    d.lastRound->reset();
  }

  for (const ClientRecord& c : clients) {
    bindClient(*d.upsertClient, c);
    if (Status s = d.upsertClient->run(); !s) return fail(s.withContext(fmt::format("client '{}'", c.id)));
  }

  stage("clients");

  RoundRecord stored = record;
  if (checkpoint != nullptr && stored.modelChecksum == 0) stored.modelChecksum = modelChecksum;
  sqlite::Statement& r = *d.insertRound;
  r.bind(1, toSql(stored.round))
      .bind(2, std::string_view(roundStatusName(stored.status)))
      .bind(3, std::string_view(stored.reason))
      .bind(4, stored.tau)
      .bind(5, stored.lr)
      .bind(6, stored.density)
      .bind(7, stored.densityDown)
      .bind(8, stored.selected)
      .bind(9, stored.returned)
      .bind(10, stored.accepted)
      .bind(11, stored.stragglers)
      .bind(12, stored.bytesUpRaw)
      .bind(13, stored.bytesUpWire)
      .bind(14, stored.bytesDownRaw)
      .bind(15, stored.bytesDownWire)
      .bind(16, stored.trainLossStart)
      .bind(17, stored.testLoss)
      .bind(18, stored.testAccuracy)
      .bind(19, stored.startedMs)
      .bind(20, stored.endedMs)
      .bind(21, toSql(stored.modelChecksum));
  if (Status s = r.run(); !s) return fail(s);
  stage("round");

  for (const ParticipantRecord& p : participants) {
    // A clear message for the mistake a foreign key would only call "failed".
    d.clientExists->bind(1, std::string_view(p.clientId));
    Result<bool> known = d.clientExists->step();
    if (!known) return fail(known.status());
    d.clientExists->reset();
    if (!*known) return fail(invalid(fmt::format("participant '{}' is not a known client", p.clientId)));
    if (p.round < record.round) {
      d.roundStatus->bind(1, toSql(p.round));
      Result<bool> recorded = d.roundStatus->step();
      if (!recorded) return fail(recorded.status());
      d.roundStatus->reset();
      if (!*recorded) {
        return fail(
            invalid(fmt::format("participant '{}' names round {}, which was never recorded", p.clientId, p.round)));
      }
    }
    sqlite::Statement& s = p.round == record.round ? *d.insertParticipant : *d.upsertParticipant;
    bindParticipant(s, p);
    if (Status st = s.run(); !st) {
      return fail(st.withContext(fmt::format("participant '{}' ({})", p.clientId, participantOutcomeName(p.outcome))));
    }
  }

  stage("participants");

  if (checkpoint != nullptr) {
    sqlite::Statement& c = *d.insertCheckpoint;
    c.bind(1, toSql(checkpoint->round))
        .bindBlob(2, modelBytes)
        .bind(3, toSql(modelChecksum))
        .bindBlob(4, memoryBytes)
        .bind(5, toSql(fnv1a(memoryBytes)))
        .bindBlob(6, asBytes(checkpoint->engineState))
        .bind(7, toSql(fnv1a(asBytes(checkpoint->engineState))));
    if (Status s = c.run(); !s) return fail(s.withContext("checkpoint"));
    for (const auto& [name, values] : checkpoint->vectors) {
      const std::vector<unsigned char> bytes = encodeFloats(values);
      d.insertVector->bind(1, toSql(checkpoint->round)).bind(2, name).bindBlob(3, bytes).bind(4, toSql(fnv1a(bytes)));
      if (Status s = d.insertVector->run(); !s) return fail(s.withContext(fmt::format("checkpoint vector '{}'", name)));
    }
    if (!checkpoint->catchUp.empty()) {
      const std::span<const unsigned char> bytes(checkpoint->catchUp);
      d.insertCatchUp->bind(1, toSql(checkpoint->round)).bindBlob(2, bytes).bind(3, toSql(fnv1a(bytes)));
      if (Status s = d.insertCatchUp->run(); !s) return fail(s.withContext("checkpoint catch-up state"));
    }
    d.pruneCheckpoints->bind(1, static_cast<int64_t>(d.options.keepCheckpoints));
    if (Status s = d.pruneCheckpoints->run(); !s) return fail(s.withContext("pruning old checkpoints"));
    stage("checkpoint");
  }
  stage("before-commit");

  if (Status s = tx.commit(); !s) return fail(s);
  return Status::ok();
}

Status Store::recordRejection(const ParticipantRecord& participant) {
  Impl& d = *impl_;
  const std::string context =
      fmt::format("recording the {} update of client '{}' for round {} in '{}'",
                  participantOutcomeName(participant.outcome), participant.clientId, participant.round, d.path);
  auto fail = [&](const Status& s) { return Status(s.code(), fmt::format("{}: {}", context, s.message())); };
  if (Status w = d.writable(); !w) return fail(w);
  if (participant.outcome != ParticipantOutcome::kRejected &&
      participant.outcome != ParticipantOutcome::kLateDiscarded) {
    return fail(invalid("only rejected and late-discarded updates are recorded outside a round"));
  }
  if (participant.reason.empty()) return fail(invalid("a refusal needs a reason"));
  if (participant.round > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return fail(invalid("the round number does not fit in 63 bits"));
  }
  sqlite::Transaction tx(*d.db);
  if (Status s = tx.begin(); !s) return fail(s);
  d.roundStatus->bind(1, toSql(participant.round));
  Result<bool> recorded = d.roundStatus->step();
  if (!recorded) return fail(recorded.status());
  d.roundStatus->reset();
  if (!*recorded) return fail(invalid("the round was never recorded"));
  d.clientExists->bind(1, std::string_view(participant.clientId));
  Result<bool> known = d.clientExists->step();
  if (!known) return fail(known.status());
  d.clientExists->reset();
  if (!*known) return fail(invalid("the client is not known"));
  bindParticipant(*d.upsertParticipant, participant);
  if (Status s = d.upsertParticipant->run(); !s) return fail(s);
  if (Status s = tx.commit(); !s) return fail(s);
  return Status::ok();
}

Status Store::recordEvaluation(uint64_t round, double testLoss, double testAccuracy) {
  Impl& d = *impl_;
  auto fail = [&](const Status& s) {
    return Status(s.code(),
                  fmt::format("recording the evaluation of round {} in '{}': {}", round, d.path, s.message()));
  };
  if (round > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return fail(invalid("the round number does not fit in 63 bits"));
  // A single statement is its own transaction.
  d.setEvaluation->bind(1, toSql(round)).bind(2, testLoss).bind(3, testAccuracy);
  Result<bool> updated = d.setEvaluation->step();
  d.setEvaluation->reset();
  if (!updated) return fail(updated.status());
  if (!*updated) return fail(invalid("no committed round has that number"));
  return Status::ok();
}

Status Store::recordRefusal(const RefusalRecord& refusal) {
  Impl& d = *impl_;
  auto fail = [&](const Status& s) {
    return Status(s.code(), fmt::format("recording the refusal of client '{}' in '{}': {}", refusal.clientId, d.path,
                                        s.message()));
  };
  if (Status w = d.writable(); !w) return fail(w);
  if (refusal.reason.empty()) return fail(invalid("a refusal needs a reason"));
  // A single statement is its own transaction.
  d.insertRefusal->bind(1, std::string_view(refusal.clientId))
      .bind(2, std::string_view(refusal.peer))
      .bind(3, refusal.atMs)
      .bind(4, std::string_view(refusal.reason));
  if (Status s = d.insertRefusal->run(); !s) return fail(s);
  return Status::ok();
}

Status Store::upsertClient(const ClientRecord& client) {
  Impl& d = *impl_;
  bindClient(*d.upsertClient, client);
  // A single statement is its own transaction.
  if (Status s = d.upsertClient->run(); !s) {
    return s.withContext(fmt::format("recording client '{}' in '{}'", client.id, d.path));
  }
  return Status::ok();
}

Result<std::optional<Checkpoint>> Store::latestCheckpoint() {
  Impl& d = *impl_;
  const std::string context = fmt::format("reading the latest checkpoint from '{}'", d.path);
  sqlite::Statement& s = *d.latestCheckpoint;
  Result<bool> row = s.step();
  if (!row) return row.status().withContext(context);
  if (!*row) return std::optional<Checkpoint>();
  Checkpoint cp;
  cp.round = fromSql(s.int64(0));
  const std::span<const unsigned char> model = s.blob(1);
  const uint64_t modelSum = fromSql(s.int64(2));
  const std::span<const unsigned char> memory = s.blob(3);
  const uint64_t memorySum = fromSql(s.int64(4));
  const std::span<const unsigned char> state = s.blob(5);
  const uint64_t stateSum = fromSql(s.int64(6));
  auto corrupt = [&](std::string_view what, uint64_t stored, uint64_t computed) {
    return Status(StatusCode::kMalformed,
                  fmt::format("{}: checkpoint of round {} is corrupt: {} checksum {:#018x}, stored {:#018x}", context,
                              cp.round, what, computed, stored));
  };
  Status bad;
  if (model.size() % sizeof(float) != 0 || memory.size() % sizeof(float) != 0) {
    bad = Status(StatusCode::kMalformed,
                 fmt::format("{}: checkpoint of round {} is corrupt: a float blob of {} or {} bytes", context, cp.round,
                             model.size(), memory.size()));
  } else if (const uint64_t sum = checksum64(decodeFloats(model)); sum != modelSum) {
    bad = corrupt("model", modelSum, sum);
  } else if (fnv1a(memory) != memorySum) {
    bad = corrupt("server memory", memorySum, fnv1a(memory));
  } else if (fnv1a(state) != stateSum) {
    bad = corrupt("engine state", stateSum, fnv1a(state));
  } else {
    cp.model = decodeFloats(model);
    cp.serverMemory = decodeFloats(memory);
    cp.engineState.assign(reinterpret_cast<const char*>(state.data()), state.size());
    cp.modelChecksum = modelSum;
  }
  s.reset();
  if (!bad.isOk()) return bad;
  if (d.selectVectors) {
    sqlite::Statement& v = *d.selectVectors;
    v.bind(1, toSql(cp.round));
    while (true) {
      Result<bool> more = v.step();
      if (!more) {
        v.reset();
        return more.status().withContext(context);
      }
      if (!*more) break;
      std::string name(v.text(0));
      const std::span<const unsigned char> data = v.blob(1);
      const uint64_t stored = fromSql(v.int64(2));
      if (data.size() % sizeof(float) != 0) {
        bad = Status(StatusCode::kMalformed,
                     fmt::format("{}: checkpoint of round {} is corrupt: vector '{}' is a float blob of {} bytes",
                                 context, cp.round, name, data.size()));
        break;
      }
      if (fnv1a(data) != stored) {
        bad = corrupt(fmt::format("vector '{}'", name), stored, fnv1a(data));
        break;
      }
      cp.vectors.emplace(std::move(name), decodeFloats(data));
    }
    v.reset();
    if (!bad.isOk()) return bad;
  }
  if (d.selectCatchUp) {
    sqlite::Statement& c = *d.selectCatchUp;
    c.bind(1, toSql(cp.round));
    Result<bool> found = c.step();
    if (!found) {
      c.reset();
      return found.status().withContext(context);
    }
    if (*found) {
      const std::span<const unsigned char> data = c.blob(0);
      const uint64_t stored = fromSql(c.int64(1));
      if (fnv1a(data) != stored)
        bad = corrupt("catch-up state", stored, fnv1a(data));
      else
        cp.catchUp.assign(data.begin(), data.end());
    }
    c.reset();
    if (!bad.isOk()) return bad;
  }
  return std::optional<Checkpoint>(std::move(cp));
}

Result<std::optional<uint64_t>> Store::lastRecordedRound() {
  Impl& d = *impl_;
  Result<bool> row = d.lastRound->step();
  if (!row) return row.status().withContext(fmt::format("reading rounds from '{}'", d.path));
  std::optional<uint64_t> last;
  if (*row && !d.lastRound->isNull(0)) last = fromSql(d.lastRound->int64(0));
  d.lastRound->reset();
  return last;
}

namespace {

// Steps s to its end, one record per row as read(s) makes it; `what` names the rows
// in an error.
template <typename T, typename Read>
Result<std::vector<T>> readAll(sqlite::Statement& s, const std::string& path, std::string_view what, Read read) {
  std::vector<T> out;
  while (true) {
    Result<bool> row = s.step();
    if (!row) return row.status().withContext(fmt::format("reading {} from '{}'", what, path));
    if (!*row) return out;
    out.push_back(read(s));
  }
}

}  // namespace

Result<std::vector<RoundRecord>> Store::rounds() {
  Impl& d = *impl_;
  return readAll<RoundRecord>(*d.selectRounds, d.path, "rounds", [](sqlite::Statement& s) {
    RoundRecord r;
    r.round = fromSql(s.int64(0));
    r.status = s.text(1) == "abandoned" ? RoundStatus::kAbandoned : RoundStatus::kCommitted;
    r.reason = s.text(2);
    r.tau = s.int64(3);
    r.lr = s.real(4);
    r.density = s.real(5);
    r.densityDown = s.real(6);
    r.selected = s.int64(7);
    r.returned = s.int64(8);
    r.accepted = s.int64(9);
    r.stragglers = s.int64(10);
    r.bytesUpRaw = s.int64(11);
    r.bytesUpWire = s.int64(12);
    r.bytesDownRaw = s.int64(13);
    r.bytesDownWire = s.int64(14);
    r.trainLossStart = s.real(15);
    r.testLoss = s.optionalReal(16);
    r.testAccuracy = s.optionalReal(17);
    r.startedMs = s.int64(18);
    r.endedMs = s.int64(19);
    r.modelChecksum = fromSql(s.int64(20));
    return r;
  });
}

Result<std::vector<ParticipantRecord>> Store::participants(std::optional<uint64_t> round) {
  Impl& d = *impl_;
  sqlite::Statement& s = round ? *d.selectParticipantsOfRound : *d.selectParticipants;
  if (round) s.bind(1, toSql(*round));
  std::vector<ParticipantRecord> out;
  while (true) {
    Result<bool> row = s.step();
    if (!row) return row.status().withContext(fmt::format("reading participants from '{}'", d.path));
    if (!*row) break;
    ParticipantRecord p;
    p.round = fromSql(s.int64(0));
    p.clientId = s.text(1);
    const std::string outcome = s.text(2);
    const std::optional<ParticipantOutcome> parsed = parseParticipantOutcome(outcome);
    if (!parsed) {
      s.reset();
      return Status(StatusCode::kMalformed,
                    fmt::format("reading participants from '{}': unknown outcome '{}'", d.path, outcome));
    }
    p.outcome = *parsed;
    p.reason = s.text(3);
    p.assignedMs = s.int64(4);
    p.returnedMs = s.optionalInt64(5);
    p.durationMs = s.int64(6);
    p.steps = s.int64(7);
    p.examples = s.int64(8);
    p.lossStart = s.real(9);
    p.lossEnd = s.real(10);
    p.bytesUpRaw = s.int64(11);
    p.bytesUpWire = s.int64(12);
    p.bytesDownWire = s.int64(13);
    p.staleness = s.int64(14);
    p.sticky = s.int64(15) != 0;
    p.selectionWeight = s.real(16);
    out.push_back(std::move(p));
  }
  return out;
}

Result<std::vector<ClientRecord>> Store::clients() {
  Impl& d = *impl_;
  return readAll<ClientRecord>(*d.selectClients, d.path, "clients", [](sqlite::Statement& s) {
    ClientRecord c;
    c.id = s.text(0);
    c.certFingerprint = s.text(1);
    c.firstSeenMs = s.int64(2);
    c.lastSeenMs = s.int64(3);
    c.examples = s.int64(4);
    c.speedExamplesPerS = s.real(5);
    c.reliability = s.real(6);
    c.roundsAssigned = s.int64(7);
    c.roundsReturned = s.int64(8);
    return c;
  });
}

Result<std::vector<RefusalRecord>> Store::refusals() {
  Impl& d = *impl_;
  if (!d.selectRefusals) return std::vector<RefusalRecord>{};  // a file older than version 3, read as it is
  return readAll<RefusalRecord>(*d.selectRefusals, d.path, "refusals", [](sqlite::Statement& s) {
    RefusalRecord r;
    r.clientId = s.text(0);
    r.peer = s.text(1);
    r.atMs = s.int64(2);
    r.reason = s.text(3);
    return r;
  });
}

Status Store::setMeta(std::string_view key, std::string_view value) {
  Impl& d = *impl_;
  d.setMeta->bind(1, key).bind(2, value);
  if (Status s = d.setMeta->run(); !s) return s.withContext(fmt::format("setting '{}' in '{}'", key, d.path));
  return Status::ok();
}

Result<std::optional<std::string>> Store::meta(std::string_view key) {
  Impl& d = *impl_;
  d.getMeta->bind(1, key);
  Result<bool> row = d.getMeta->step();
  if (!row) return row.status().withContext(fmt::format("reading '{}' from '{}'", key, d.path));
  if (!*row) return std::optional<std::string>();
  std::string value = d.getMeta->text(0);
  d.getMeta->reset();
  return std::optional<std::string>(std::move(value));
}

Status Store::checkIntegrity() {
  Impl& d = *impl_;
  Result<std::unique_ptr<sqlite::Statement>> stmt = d.db->prepare("PRAGMA integrity_check");
  if (!stmt) return stmt.status();
  std::string findings;
  while (true) {
    Result<bool> row = (*stmt)->step();
    if (!row) return row.status().withContext(fmt::format("checking '{}'", d.path));
    if (!*row) break;
    const std::string line = (*stmt)->text(0);
    if (line == "ok") continue;
    if (!findings.empty()) findings += "; ";
    findings += line;
  }
  if (!findings.empty()) {
    return {StatusCode::kMalformed, fmt::format("database '{}' fails its integrity check: {}", d.path, findings)};
  }
  return Status::ok();
}

}  // namespace starling::coordinator
