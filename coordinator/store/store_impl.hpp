#pragma once
// The Store's private parts, shared by the files that implement it:
//
//   store.cpp            opening (PRAGMAs, version checks), preparing statements, meta, integrity
//   schema.cpp           the schema versions and the upgrades between them
//   rounds.cpp           rounds, participants, evaluations, abandoned rounds, late refusals
//   clients.cpp          clients and the clients refused at Hello
//   checkpoints.cpp      checkpoints and their vectors, pruning, the latest checkpoint
//   catch_up_state.cpp   the engine's catch-up state kept with a checkpoint
//   statistics.cpp       the statistics round of a task that standardizes its features
//
// Store::Impl owns the connection and every prepared statement. Each file prepares the
// statements it uses (prepare*Statements, called by prepareAll) and reaches the others'
// tables only through Impl's methods.

#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "starling/coordinator/store.hpp"

#include "sqlite.hpp"

namespace starling::coordinator {

namespace store_detail {

// "STLG": marks the file as a Starling coordinator database (PRAGMA application_id).
inline constexpr int64_t kApplicationId = 0x53544c47;

// Unsigned 64-bit values (rounds, checksums) are stored as the signed integer with the
// same bits.
inline int64_t toSql(uint64_t value) {
  return std::bit_cast<int64_t>(value);
}
inline uint64_t fromSql(int64_t value) {
  return std::bit_cast<uint64_t>(value);
}

// 64-bit FNV-1a: the checksum of every checkpoint blob but the model's.
inline uint64_t fnv1a(std::span<const unsigned char> bytes) {
  constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ULL;
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t h = kOffsetBasis;
  for (unsigned char b : bytes) {
    h ^= b;
    h *= kPrime;
  }
  return h;
}

inline Status invalid(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}

// kMalformed for a checkpoint blob whose checksum is not the one stored with it.
inline Status corruptCheckpoint(std::string_view context, uint64_t round, std::string_view what, uint64_t stored,
                                uint64_t computed) {
  return {StatusCode::kMalformed,
          fmt::format("{}: checkpoint of round {} is corrupt: {} checksum {:#018x}, stored {:#018x}", context, round,
                      what, computed, stored)};
}

// Runs a single-row query and returns its first column as an integer (queryText: as
// text). kInternal when it returns no row.
Result<int64_t> queryInt(sqlite::Database& db, std::string_view sql);
Result<std::string> queryText(sqlite::Database& db, std::string_view sql);

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

// A checkpoint's model and server memory as stored, made before the transaction that
// writes them (checkpoints.cpp).
struct EncodedCheckpoint {
  std::vector<unsigned char> model;
  std::vector<unsigned char> memory;
  uint64_t modelChecksum = 0;  // checksum64 of the model
};

// kInvalidArgument when the checkpoint's non-zero checksum does not match its model.
Result<EncodedCheckpoint> encodeCheckpoint(const Checkpoint& checkpoint);

}  // namespace store_detail

// ---- Impl: the connection and its statements, prepared once ---------------------

struct Store::Impl {
  std::string path;
  StoreOptions options;
  // Store::setTestHook; empty unless a test sets it.
  std::function<void(std::string_view point)> testHook;
  // Declared first so that it is destroyed after the statements below.
  std::unique_ptr<sqlite::Database> db;
  // rounds.cpp
  std::unique_ptr<sqlite::Statement> insertRound;
  std::unique_ptr<sqlite::Statement> insertParticipant;  // rows of the round being recorded
  std::unique_ptr<sqlite::Statement> upsertParticipant;  // late rows for earlier rounds
  std::unique_ptr<sqlite::Statement> roundStatus;
  std::unique_ptr<sqlite::Statement> setEvaluation;
  std::unique_ptr<sqlite::Statement> lastRound;
  std::unique_ptr<sqlite::Statement> selectRounds;
  std::unique_ptr<sqlite::Statement> selectParticipants;
  std::unique_ptr<sqlite::Statement> selectParticipantsOfRound;
  // clients.cpp
  std::unique_ptr<sqlite::Statement> upsertClient;
  std::unique_ptr<sqlite::Statement> clientExists;
  std::unique_ptr<sqlite::Statement> selectClients;
  std::unique_ptr<sqlite::Statement> selectClientFigures;
  std::unique_ptr<sqlite::Statement> updateClientFigures;
  std::unique_ptr<sqlite::Statement> insertRefusal;     // null on a version-1 or -2 database read as it is
  std::unique_ptr<sqlite::Statement> selectRefusals;    // likewise
  std::unique_ptr<sqlite::Statement> insertPlacement;   // null on a database older than version 10 read as it is
  std::unique_ptr<sqlite::Statement> selectPlacements;  // likewise
  // checkpoints.cpp
  std::unique_ptr<sqlite::Statement> insertCheckpoint;
  std::unique_ptr<sqlite::Statement> pruneCheckpoints;
  std::unique_ptr<sqlite::Statement> latestCheckpoint;
  std::unique_ptr<sqlite::Statement> insertVector;   // null on a version-1 database read as it is
  std::unique_ptr<sqlite::Statement> selectVectors;  // likewise
  // catch_up_state.cpp
  std::unique_ptr<sqlite::Statement> insertCatchUp;  // null before version 4 (read as it is)
  std::unique_ptr<sqlite::Statement> selectCatchUp;  // likewise
  // statistics.cpp
  std::unique_ptr<sqlite::Statement> saveStatistics;    // null before version 6 (read as it is)
  std::unique_ptr<sqlite::Statement> selectStatistics;  // likewise
  // vocabulary.cpp
  std::unique_ptr<sqlite::Statement> insertVocabulary;  // null before version 7 (read as it is)
  std::unique_ptr<sqlite::Statement> selectVocabulary;  // likewise
  // store.cpp
  std::unique_ptr<sqlite::Statement> setMeta;
  std::unique_ptr<sqlite::Statement> getMeta;

  int64_t version = 0;  // the file's schema version once initialized

  // kUnsupported on an older file opened read-only (read as it is: some of its writing
  // statements are not prepared, and writing would mix versions).
  Status writable() const {
    if (version >= Store::kSchemaVersion) return Status::ok();
    return {StatusCode::kUnsupported,
            fmt::format("the database has schema version {} and was opened read-only; open it for writing to "
                        "upgrade it to version {}",
                        version, Store::kSchemaVersion)};
  }

  // store.cpp: opening.
  Status initialize();
  Status prepareAll();
  // Prepares sql into *target.
  Status prepare(std::unique_ptr<sqlite::Statement>* target, std::string_view sql);

  // schema.cpp
  Status createSchema();
  Status upgradeFrom(int64_t from);

  // rounds.cpp
  Status prepareRoundStatements();

  // clients.cpp
  Status prepareClientStatements();
  // Inserts or updates one client row (Store::upsertClient's contract).
  Status writeClient(const ClientRecord& client);
  // Whether a client row with that id exists.
  Result<bool> clientKnown(std::string_view clientId);
  // Folds the participants of the round being recorded (`round`) into their clients'
  // speed, reliability and round counts (ClientRecord), inside the caller's
  // transaction; every participant's client must be known.
  Status updateFigures(uint64_t round, std::span<const ParticipantRecord> participants);

  // checkpoints.cpp
  Status prepareCheckpointStatements();
  // Writes the checkpoint (encoded holds its model and memory), its vectors and its
  // catch-up state, then prunes beyond keepCheckpoints; inside the caller's
  // transaction. A failure's context names what failed ("checkpoint", "pruning old
  // checkpoints").
  Status writeCheckpoint(const Checkpoint& checkpoint, const store_detail::EncodedCheckpoint& encoded);

  // statistics.cpp
  Status prepareStatisticsStatements();
  Status prepareVocabularyStatements();

  // catch_up_state.cpp
  Status prepareCatchUpStatements();
  // Writes the catch-up state of the checkpoint of `round` (nothing when empty).
  Status writeCatchUp(uint64_t round, std::span<const uint8_t> state);
  // Reads into cp.catchUp the catch-up state of cp's round (left empty when none, or
  // on a file older than version 4 read as it is); kMalformed when its checksum fails.
  Status readCatchUp(Checkpoint& cp, std::string_view context);
};

}  // namespace starling::coordinator
