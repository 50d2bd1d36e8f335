#include "sqlite.hpp"

#include <fmt/format.h>

#include <climits>
#include <utility>

namespace starling::coordinator::sqlite {

Status sqliteStatus(int rc, sqlite3* db, std::string_view context) {
  const int primary = rc & 0xff;
  // sqlite3_errmsg describes the most recent failure on the connection, which is
  // the one we are reporting as long as callers map errors right away.
  std::string what = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  StatusCode code = StatusCode::kInternal;
  switch (primary) {
    case SQLITE_FULL:
      code = StatusCode::kIo;
      what = "disk full (" + what + ")";
      break;
    case SQLITE_READONLY:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
      code = StatusCode::kIo;
      break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      code = StatusCode::kMalformed;
      break;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
      code = StatusCode::kInvalidArgument;
      break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      code = StatusCode::kTimeout;
      what += " (another process holds the database)";
      break;
    default:
      break;
  }
  if (context.empty()) return {code, what};
  return {code, fmt::format("{}: {}", context, what)};
}

// ---- Database ------------------------------------------------------------------

Result<std::unique_ptr<Database>> Database::open(const std::string& path, int flags) {
  sqlite3* db = nullptr;
#ifdef SQLITE_OPEN_EXRESCODE  // SQLite >= 3.37: extended codes from the open itself
  flags |= SQLITE_OPEN_EXRESCODE;
#endif
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    Status status = sqliteStatus(rc, db, fmt::format("cannot open database '{}'", path));
    sqlite3_close_v2(db);  // a handle is returned even on failure; nullptr is fine too
    return status;
  }
  sqlite3_extended_result_codes(db, 1);
  return std::unique_ptr<Database>(new Database(db, path));
}

Database::~Database() {
  sqlite3_close_v2(db_);
}

Status Database::exec(std::string_view sql) {
  const std::string text(sql);
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return sqliteStatus(rc, db_, "");
  return Status::ok();
}

Result<std::unique_ptr<Statement>> Database::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sql.size() > static_cast<std::size_t>(INT_MAX)) {
    return Status(StatusCode::kInvalidArgument, "SQL statement too long");
  }
  const int rc =
      sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    return sqliteStatus(rc, db_, fmt::format("database '{}': preparing \"{}\"", path_, sql));
  }
  return std::unique_ptr<Statement>(new Statement(stmt, db_));
}

// ---- Statement -----------------------------------------------------------------

Statement::~Statement() {
  sqlite3_finalize(stmt_);
}

Statement& Statement::noteBind(int rc, int index) {
  if (rc != SQLITE_OK && bindError_ == SQLITE_OK) {
    bindError_ = rc;
    bindErrorIndex_ = index;
  }
  return *this;
}

Statement& Statement::bind(int index, int64_t value) {
  return noteBind(sqlite3_bind_int64(stmt_, index, value), index);
}

Statement& Statement::bind(int index, double value) {
  return noteBind(sqlite3_bind_double(stmt_, index, value), index);
}

Statement& Statement::bind(int index, std::string_view text) {
  return noteBind(sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8), index);
}

Statement& Statement::bindBlob(int index, std::span<const unsigned char> bytes) {
  // A zero-length blob is still a blob (not NULL): SQLite wants a non-null pointer.
  static const unsigned char kEmpty = 0;
  const void* data = bytes.empty() ? &kEmpty : bytes.data();
  return noteBind(sqlite3_bind_blob64(stmt_, index, data, bytes.size(), SQLITE_TRANSIENT), index);
}

Statement& Statement::bindNull(int index) {
  return noteBind(sqlite3_bind_null(stmt_, index), index);
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bindError_ = SQLITE_OK;
  bindErrorIndex_ = 0;
}

Result<bool> Statement::step() {
  if (bindError_ != SQLITE_OK) {
    Status status = sqliteStatus(bindError_, nullptr,
                                 fmt::format("binding parameter {} of \"{}\"", bindErrorIndex_, sqlite3_sql(stmt_)));
    reset();
    return status;
  }
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) {
    reset();
    return false;
  }
  Status status = sqliteStatus(rc, db_, "");
  reset();
  return status;
}

Status Statement::run() {
  while (true) {
    Result<bool> row = step();
    if (!row) return row.status();
    if (!*row) return Status::ok();
  }
}

bool Statement::isNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

int64_t Statement::int64(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

double Statement::real(int column) const {
  return sqlite3_column_double(stmt_, column);
}

std::optional<double> Statement::optionalReal(int column) const {
  if (isNull(column)) return std::nullopt;
  return real(column);
}

std::optional<int64_t> Statement::optionalInt64(int column) const {
  if (isNull(column)) return std::nullopt;
  return int64(column);
}

std::string Statement::text(int column) const {
  const auto* p = sqlite3_column_text(stmt_, column);
  const int n = sqlite3_column_bytes(stmt_, column);
  if (p == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
}

int Statement::columns() const {
  return sqlite3_column_count(stmt_);
}

std::span<const unsigned char> Statement::blob(int column) const {
  const auto* p = static_cast<const unsigned char*>(sqlite3_column_blob(stmt_, column));
  const int n = sqlite3_column_bytes(stmt_, column);
  if (p == nullptr || n <= 0) return {};
  return {p, static_cast<std::size_t>(n)};
}

// ---- Transaction ---------------------------------------------------------------

Status Transaction::begin() {
  STARLING_RETURN_IF_ERROR(db_.exec("BEGIN IMMEDIATE"));
  active_ = true;
  return Status::ok();
}

Status Transaction::commit() {
  Status status = db_.exec("COMMIT");
  // A failed COMMIT may leave the transaction open (SQLITE_BUSY) or already rolled
  // back (SQLITE_FULL, I/O errors); the destructor handles both.
  if (status) active_ = false;
  return status;
}

Transaction::~Transaction() {
  if (active_ && db_.inTransaction()) {
    // Nothing useful can be done with a failed ROLLBACK here: SQLite then rolls back
    // when the connection closes, and the hot journal is rolled back on next open.
    (void)db_.exec("ROLLBACK");
  }
}

}  // namespace starling::coordinator::sqlite
