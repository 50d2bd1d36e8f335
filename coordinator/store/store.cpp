// Opening a Store: the connection's settings, the checks of the file's header, the
// statements every part prepares, and the meta table and integrity check
// (docs/state.md). The other parts: see store_impl.hpp.

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>

#include "store_impl.hpp"

namespace starling::coordinator {

using store_detail::invalid;
using store_detail::kApplicationId;
using store_detail::queryInt;
using store_detail::queryText;

namespace store_detail {

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

}  // namespace store_detail

namespace {

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

}  // namespace

Status Store::Impl::prepare(std::unique_ptr<sqlite::Statement>* target, std::string_view sql) {
  Result<std::unique_ptr<sqlite::Statement>> stmt = db->prepare(sql);
  if (!stmt) return stmt.status();
  *target = std::move(*stmt);
  return Status::ok();
}

// An older file read as it is lacks the columns and tables of the later versions:
// nothing that touches them is prepared (a write then fails in writable(), a read
// returns what such a file holds).
Status Store::Impl::prepareAll() {
  STARLING_RETURN_IF_ERROR(prepareRoundStatements());
  STARLING_RETURN_IF_ERROR(prepareClientStatements());
  STARLING_RETURN_IF_ERROR(prepareCheckpointStatements());
  STARLING_RETURN_IF_ERROR(prepareCatchUpStatements());
  STARLING_RETURN_IF_ERROR(prepareStatisticsStatements());
  STARLING_RETURN_IF_ERROR(prepareVocabularyStatements());
  STARLING_RETURN_IF_ERROR(prepare(&setMeta, "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)"));
  return prepare(&getMeta, "SELECT value FROM meta WHERE key = ?1");
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

void Store::setTestHook(std::function<void(std::string_view point)> hook) {
  impl_->testHook = std::move(hook);
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
