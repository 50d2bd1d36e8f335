#pragma once
// A small private RAII wrapper over the sqlite3 C API, used by the Store only.
//
//   Database     owns one connection (sqlite3*); closed by its destructor.
//   Statement    owns one prepared statement (sqlite3_stmt*), prepared once and
//                reused: bind..., step() or run(), and it resets itself after the
//                last row or an error so it never holds a lock between uses.
//   Transaction  BEGIN IMMEDIATE on construction (via begin()); rolled back by its
//                destructor unless commit() succeeded.
//
// Errors are values: every failure becomes a Status whose message carries the
// context the caller gives and SQLite's own message (see sqliteStatus()).
//
// Threading: a Database and its Statements belong to one thread at a time; nothing
// here locks. Statements must be destroyed before their Database (the Store declares
// the Database first so that it is destroyed last).

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "starling/util/status.hpp"

namespace starling::coordinator::sqlite {

// Maps an SQLite result code to a Status: disk full, read-only, I/O errors and a
// file that cannot be opened are kIo; corruption and "not a database" kMalformed;
// constraint violations kInvalidArgument; a lock held by another process kTimeout;
// the rest kInternal. The message is "<context>: <what SQLite says>", or only what
// SQLite says when context is empty (exec() and step() leave the context to their
// callers, which know the file and the operation).
Status sqliteStatus(int rc, sqlite3* db, std::string_view context);

class Statement;

class Database {
 public:
  // Opens (flags as for sqlite3_open_v2) the file at path. On failure the message
  // names the file: "cannot open database 'x.db': unable to open database file".
  static Result<std::unique_ptr<Database>> open(const std::string& path, int flags);

  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs one or more statements that return no rows we need (DDL, PRAGMAs, BEGIN).
  Status exec(std::string_view sql);

  // Prepares a statement that lives as long as the caller keeps it (and no longer
  // than this Database).
  Result<std::unique_ptr<Statement>> prepare(std::string_view sql);

  // A status for the last error on this connection, with context.
  Status lastError(int rc, std::string_view context) const { return sqliteStatus(rc, db_, context); }

  bool inTransaction() const { return sqlite3_get_autocommit(db_) == 0; }
  bool readOnly() const { return sqlite3_db_readonly(db_, "main") == 1; }
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }

 private:
  Database(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
};

class Statement {
 public:
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Bind parameters by 1-based index. A failed bind is remembered and returned by the
  // next step()/run(), so that binds can be chained without checking each one.
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, double value);
  Statement& bind(int index, std::string_view text);                     // copied by SQLite
  Statement& bindBlob(int index, std::span<const unsigned char> bytes);  // copied
  Statement& bindNull(int index);
  Statement& bind(int index, std::optional<double> value) { return value ? bind(index, *value) : bindNull(index); }
  Statement& bind(int index, std::optional<int64_t> value) { return value ? bind(index, *value) : bindNull(index); }

  // Advances: true when a row is available, false when done. After done or an error
  // the statement is reset and its bindings cleared, ready for the next use.
  Result<bool> step();
  // Steps a statement that returns no rows to completion.
  Status run();
  // Resets and clears bindings (for a caller that stops iterating early).
  void reset();

  // Columns of the current row, 0-based; columns() of them.
  int columns() const;
  bool isNull(int column) const;
  int64_t int64(int column) const;
  double real(int column) const;
  std::optional<double> optionalReal(int column) const;
  std::optional<int64_t> optionalInt64(int column) const;
  std::string text(int column) const;
  std::span<const unsigned char> blob(int column) const;  // valid until the next step

 private:
  friend class Database;
  Statement(sqlite3_stmt* stmt, sqlite3* db) : stmt_(stmt), db_(db) {}
  Statement& noteBind(int rc, int index);

  sqlite3_stmt* stmt_;
  sqlite3* db_;
  int bindError_ = SQLITE_OK;
  int bindErrorIndex_ = 0;
};

// One explicit transaction. begin() issues BEGIN IMMEDIATE (takes the write lock at
// once, so a busy database fails here and not halfway through); the destructor rolls
// back unless commit() succeeded. A transaction that SQLite already rolled back by
// itself (after SQLITE_FULL, for instance) is not rolled back twice.
class Transaction {
 public:
  explicit Transaction(Database& db) : db_(db) {}
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  Status begin();
  Status commit();

 private:
  Database& db_;
  bool active_ = false;
};

}  // namespace starling::coordinator::sqlite
