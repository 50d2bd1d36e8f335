// The Store's contract: what goes in comes back, a round is all or nothing, resume
// reads the last committed round, and refusals are values with clear messages.

#include "starling/coordinator/store.hpp"

#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "starling/util/checksum.hpp"

#include "store_fixtures.hpp"

using namespace starling;
using namespace starling::coordinator;
using namespace starling::coordinator::testing;

namespace {

std::unique_ptr<Store> openOrFail(const std::string& path, const StoreOptions& options = {}) {
  Result<std::unique_ptr<Store>> store = Store::open(path, options);
  INFO(store.status().toString());
  REQUIRE(store.isOk());
  return std::move(*store);
}

void requireOk(const Status& status) {
  INFO(status.toString());
  REQUIRE(status.isOk());
}

// Commits round r with two accepted clients and one straggler.
void commitSimpleRound(Store& store, uint64_t r, std::size_t modelSize = 1000) {
  const std::vector<ParticipantRecord> participants = {
      makeParticipant(r, 1, ParticipantOutcome::kAccepted),
      makeParticipant(r, 2, ParticipantOutcome::kAccepted),
      makeParticipant(r, 3, ParticipantOutcome::kStraggler, "deadline passed after 30 s"),
  };
  const std::vector<ClientRecord> clients = {makeClient(1), makeClient(2), makeClient(3)};
  requireOk(store.commitRound(makeRound(r), participants, makeCheckpoint(r, modelSize), clients));
}

// PRAGMA user_version of the file, read with SQLite directly.
int fileVersion(const std::string& path) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  const int v = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

// Whether the file has a table of that name.
bool hasTable(const std::string& path, const std::string& table) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1", -1, &st, nullptr) ==
          SQLITE_OK);
  REQUIRE(sqlite3_bind_text(st, 1, table.c_str(), -1, SQLITE_TRANSIENT) == SQLITE_OK);
  const bool found = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return found;
}

// What turns a database of this build's schema back into version 1's tables (the
// caller sets the version).
// An evaluation with the given loss and metrics (pairs of a field and its value).
using Metric = std::optional<double> EvaluationRecord::*;
EvaluationRecord evaluation(double loss, std::initializer_list<std::pair<Metric, double>> metrics = {}) {
  EvaluationRecord e;
  e.loss = loss;
  for (const auto& [field, value] : metrics)
    e.*field = value;
  return e;
}

// What version 5 added: the metrics' columns of rounds.
const std::string kBackToVersion10 = "ALTER TABLE rounds DROP COLUMN epsilon; ";
const std::string kBackToVersion9 = kBackToVersion10 + "DROP TABLE placements; ";
const std::string kBackToVersion8 =
    kBackToVersion9 + "ALTER TABLE clients DROP COLUMN row_set; ALTER TABLE clients DROP COLUMN row_bucket; ";
const std::string kBackToVersion7 = kBackToVersion8 + "ALTER TABLE participants DROP COLUMN wait_ms; ";
const std::string kBackToVersion6 = kBackToVersion7 + "DROP TABLE categorical_vocabulary; ";
const std::string kBackToVersion5 = kBackToVersion6 + "DROP TABLE feature_statistics; ";
const std::string kBackToVersion4 =
    kBackToVersion5 +
    "ALTER TABLE rounds DROP COLUMN test_top5; ALTER TABLE rounds DROP COLUMN test_auc; ALTER TABLE rounds DROP "
    "COLUMN test_rmse; ALTER TABLE rounds DROP COLUMN test_mae; ALTER TABLE rounds DROP COLUMN test_r2; ";
const std::string kBackToVersion1 =
    kBackToVersion4 +
    "DROP TABLE checkpoint_catch_up; DROP TABLE refusals; DROP TABLE checkpoint_vectors; ALTER TABLE participants DROP "
    "COLUMN sticky; "
    "ALTER TABLE participants DROP COLUMN selection_weight; ";

void execOrFail(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
  INFO((error != nullptr ? error : ""));
  sqlite3_free(error);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
}

RefusalRecord makeRefusal(int client) {
  RefusalRecord r;
  r.clientId = "client-" + std::to_string(client);
  r.peer = "10.0.0." + std::to_string(client) + ":5" + std::to_string(client) + "123";
  r.atMs = 1'700'000'000'000 + client * 1'000;
  r.reason = "this task needs capabilities the client lacks: rice-indices, xor-values";
  return r;
}

}  // namespace

TEST_CASE("a new store is empty and at the current schema version", "[store]") {
  TempDir dir;
  auto store = openOrFail(dir.file("fresh.db"));
  CHECK(store->rounds()->empty());
  CHECK(store->participants()->empty());
  CHECK(store->clients()->empty());
  CHECK(store->refusals()->empty());
  CHECK_FALSE(store->latestCheckpoint()->has_value());
  CHECK_FALSE(store->lastRecordedRound()->has_value());
  CHECK_FALSE(store->meta("task")->has_value());
  requireOk(store->checkIntegrity());
  CHECK(fileVersion(dir.file("fresh.db")) == Store::kSchemaVersion);
  CHECK(Store::kSchemaVersion == 11);
  CHECK(hasTable(dir.file("fresh.db"), "refusals"));
  CHECK(hasTable(dir.file("fresh.db"), "checkpoint_catch_up"));
}

TEST_CASE("clients refused at Hello are recorded, in order, with their reason", "[store]") {
  TempDir dir;
  const std::string path = dir.file("refusals.db");
  {
    auto store = openOrFail(path);
    commitSimpleRound(*store, 1);
    // Refused clients need not be known clients: client-9 never joined.
    requireOk(store->recordRefusal(makeRefusal(9)));
    requireOk(store->recordRefusal(makeRefusal(2)));
    RefusalRecord again = makeRefusal(9);
    again.atMs += 60'000;
    again.reason = "this task needs capabilities the client lacks: initialize";
    requireOk(store->recordRefusal(again));  // a second refusal of the same client is a second row
    const std::vector<RefusalRecord> expected = {makeRefusal(9), makeRefusal(2), again};
    CHECK(*store->refusals() == expected);

    SECTION("but not without a reason") {
      RefusalRecord bare = makeRefusal(4);
      bare.reason.clear();
      const Status st = store->recordRefusal(bare);
      CHECK(st.code() == StatusCode::kInvalidArgument);
      CHECK_THAT(st.message(), Catch::Contains("client-4") && Catch::Contains("needs a reason"));
      CHECK(*store->refusals() == expected);  // nothing written
    }
    SECTION("and they survive reopening") {
      store.reset();
      StoreOptions ro;
      ro.readOnly = true;
      auto reader = openOrFail(path, ro);
      CHECK(*reader->refusals() == expected);
      CHECK(reader->clients()->size() == 3);  // no client row for a refusal
    }
  }
}

TEST_CASE("a committed round's evaluation is recorded after the round", "[store]") {
  TempDir dir;
  auto store = openOrFail(dir.file("eval.db"));
  RoundRecord round = makeRound(1);
  round.testLoss.reset();
  round.testAccuracy.reset();
  requireOk(
      store->commitRound(round, std::vector<ParticipantRecord>{}, makeCheckpoint(1), std::vector<ClientRecord>{}));
  RoundRecord expected = (*store->rounds())[0];
  REQUIRE_FALSE(expected.testAccuracy.has_value());

  requireOk(store->recordEvaluation(
      1, evaluation(0.375, {{&EvaluationRecord::accuracy, 0.8125}, {&EvaluationRecord::top5, 0.96875}})));
  expected.testLoss = 0.375;
  expected.testAccuracy = 0.8125;
  expected.testTop5 = 0.96875;
  CHECK((*store->rounds())[0] == expected);  // and nothing else changed

  SECTION("refused for a round never recorded, and for an abandoned one") {
    Status missing = store->recordEvaluation(2, evaluation(0.5, {{&EvaluationRecord::accuracy, 0.5}}));
    CHECK(missing.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(missing.message(), Catch::Contains("round 2") && Catch::Contains("no committed round"));
    RoundRecord abandoned = makeRound(2);
    abandoned.status = RoundStatus::kAbandoned;
    abandoned.reason = "deadline";
    requireOk(store->recordAbandonedRound(abandoned, std::vector<ParticipantRecord>{}));
    CHECK(store->recordEvaluation(2, evaluation(0.5, {{&EvaluationRecord::accuracy, 0.5}})).code() ==
          StatusCode::kInvalidArgument);
    CHECK((*store->rounds())[0].testAccuracy == 0.8125);
  }
}

TEST_CASE("a regression round's metrics are recorded without an accuracy", "[store]") {
  TempDir dir;
  auto store = openOrFail(dir.file("regression.db"));
  RoundRecord round = makeRound(1);
  round.testLoss.reset();
  round.testAccuracy.reset();
  requireOk(
      store->commitRound(round, std::vector<ParticipantRecord>{}, makeCheckpoint(1), std::vector<ClientRecord>{}));
  requireOk(store->recordEvaluation(1, evaluation(0.125, {{&EvaluationRecord::rmse, 0.5},
                                                          {&EvaluationRecord::mae, 0.375},
                                                          {&EvaluationRecord::r2, 0.875}})));
  const RoundRecord got = (*store->rounds())[0];
  CHECK(got.testLoss == 0.125);
  CHECK_FALSE(got.testAccuracy.has_value());
  CHECK_FALSE(got.testAuc.has_value());
  CHECK(got.testRmse == 0.5);
  CHECK(got.testMae == 0.375);
  CHECK(got.testR2 == 0.875);
}

FeatureStatisticsRecord makeStatistics() {
  FeatureStatisticsRecord r;
  r.mean = {0.5, -1250.25, 3.0};
  r.std = {0.125, 980.5, 1.0};
  r.centre = true;
  r.clients = {"client-a", "client-b", "client-c"};
  r.examples = 1200;
  r.atMs = 1'700'000'000'123;
  return r;
}

TEST_CASE("the statistics round is stored once and read back bit for bit", "[store]") {
  TempDir dir;
  const std::string path = dir.file("stats.db");
  {
    auto store = openOrFail(path);
    CHECK_FALSE(store->featureStatistics()->has_value());
    requireOk(store->saveFeatureStatistics(makeStatistics()));
    FeatureStatisticsRecord bad = makeStatistics();
    bad.std.pop_back();
    CHECK(store->saveFeatureStatistics(bad).code() == StatusCode::kInvalidArgument);
  }
  auto store = openOrFail(path);  // a restart reads what the first run stored
  auto got = store->featureStatistics();
  REQUIRE(got.isOk());
  REQUIRE(got->has_value());
  CHECK(**got == makeStatistics());

  SECTION("a corrupt blob is refused") {
    execOrFail(path, "UPDATE feature_statistics SET std = zeroblob(24)");
    auto corrupt = store->featureStatistics();
    CHECK(corrupt.status().code() == StatusCode::kMalformed);
    CHECK_THAT(corrupt.status().message(), Catch::Contains("feature statistics are corrupt"));
  }
}

TEST_CASE("a version-5 database has no statistics and is upgraded when opened for writing", "[store]") {
  TempDir dir;
  const std::string path = dir.file("v5.db");
  {
    auto store = openOrFail(path);
    commitSimpleRound(*store, 1);
  }
  execOrFail(path, (kBackToVersion5 + "PRAGMA user_version = 5").c_str());
  {
    StoreOptions ro;
    ro.readOnly = true;
    auto reader = openOrFail(path, ro);
    auto none = reader->featureStatistics();
    REQUIRE(none.isOk());
    CHECK_FALSE(none->has_value());
    CHECK(reader->saveFeatureStatistics(makeStatistics()).code() == StatusCode::kUnsupported);
  }
  CHECK(fileVersion(path) == 5);
  auto store = openOrFail(path);
  CHECK(fileVersion(path) == Store::kSchemaVersion);
  requireOk(store->saveFeatureStatistics(makeStatistics()));
  CHECK(**store->featureStatistics() == makeStatistics());
  CHECK(store->rounds()->size() == 1);
}

TEST_CASE("epsilon is stored per round, infinite included, and a version-10 file reads none", "[store]") {
  TempDir dir;
  const std::string path = dir.file("epsilon.db");
  {
    auto store = openOrFail(path);
    RoundRecord noisy = makeRound(1);
    noisy.epsilon = 0.125;
    requireOk(store->commitRound(noisy, {}, makeCheckpoint(1), {}));
    RoundRecord clipped = makeRound(2);
    clipped.epsilon = std::numeric_limits<double>::infinity();
    requireOk(store->commitRound(clipped, {}, makeCheckpoint(2), {}));
    commitSimpleRound(*store, 3);
    auto rounds = store->rounds();
    REQUIRE(rounds.isOk());
    REQUIRE(rounds->size() == 3);
    CHECK((*rounds)[0].epsilon == 0.125);
    REQUIRE((*rounds)[1].epsilon.has_value());
    CHECK(std::isinf(*(*rounds)[1].epsilon));
    CHECK_FALSE((*rounds)[2].epsilon.has_value());
  }
  execOrFail(path, (kBackToVersion10 + "PRAGMA user_version = 10").c_str());
  {
    StoreOptions ro;
    ro.readOnly = true;
    auto reader = openOrFail(path, ro);
    auto rounds = reader->rounds();
    REQUIRE(rounds.isOk());
    REQUIRE(rounds->size() == 3);
    CHECK_FALSE((*rounds)[0].epsilon.has_value());
  }
  auto store = openOrFail(path);
  CHECK(fileVersion(path) == Store::kSchemaVersion);
  RoundRecord next = makeRound(4);
  next.epsilon = 1.5;
  requireOk(store->commitRound(next, {}, makeCheckpoint(4), {}));
  CHECK(store->rounds()->back().epsilon == 1.5);
}

TEST_CASE("the categorical vocabulary is stored, replaced and refused when malformed", "[store]") {
  TempDir dir;
  const std::string path = dir.file("vocabulary.db");
  auto store = openOrFail(path);
  CHECK(store->categoricalVocabulary()->empty());
  std::vector<CategoricalColumnRecord> vocabulary(2);
  vocabulary[0].column = "city";
  vocabulary[0].values = {"Bergen", "Oslo", "Z\u00fcrich"};
  vocabulary[0].counts = {5, 90, 7};
  vocabulary[1].column = "browser";  // sorted by name when read back
  requireOk(store->saveCategoricalVocabulary(vocabulary));
  auto got = store->categoricalVocabulary();
  REQUIRE(got.isOk());
  REQUIRE(got->size() == 1);  // a column with no value has no row
  CHECK((*got)[0] == vocabulary[0]);
  vocabulary[0].values = {"Oslo"};
  vocabulary[0].counts = {90};
  requireOk(store->saveCategoricalVocabulary(vocabulary));
  CHECK((*store->categoricalVocabulary())[0] == vocabulary[0]);

  vocabulary[0].values = {"Oslo", "Bergen"};
  vocabulary[0].counts = {1, 2};
  CHECK_THAT(store->saveCategoricalVocabulary(vocabulary).message(), Catch::Contains("not sorted and distinct"));
  vocabulary[0].values = {"Oslo"};
  CHECK_THAT(store->saveCategoricalVocabulary(vocabulary).message(), Catch::Contains("1 values and 2 counts"));
  CHECK((*store->categoricalVocabulary())[0].values == std::vector<std::string>{"Oslo"});  // unchanged

  SECTION("a version-6 file has none and is upgraded when opened for writing") {
    store.reset();
    execOrFail(path, (kBackToVersion6 + "PRAGMA user_version = 6").c_str());
    {
      StoreOptions ro;
      ro.readOnly = true;
      auto reader = openOrFail(path, ro);
      CHECK(reader->categoricalVocabulary()->empty());
      CHECK(reader->saveCategoricalVocabulary({}).code() == StatusCode::kUnsupported);
    }
    auto upgraded = openOrFail(path);
    CHECK(fileVersion(path) == Store::kSchemaVersion);
    CHECK(upgraded->categoricalVocabulary()->empty());
  }
}

TEST_CASE("a version-4 database is read without metrics and upgraded when opened for writing", "[store]") {
  TempDir dir;
  const std::string path = dir.file("v4.db");
  {
    auto store = openOrFail(path);
    commitSimpleRound(*store, 1);
  }
  execOrFail(path, (kBackToVersion4 + "PRAGMA user_version = 4").c_str());
  {
    StoreOptions ro;
    ro.readOnly = true;
    auto reader = openOrFail(path, ro);
    auto rounds = reader->rounds();
    REQUIRE(rounds.isOk());
    REQUIRE(rounds->size() == 1);
    CHECK_FALSE((*rounds)[0].testRmse.has_value());
    const Status refused = reader->recordEvaluation(1, evaluation(0.5, {{&EvaluationRecord::accuracy, 0.5}}));
    CHECK(refused.code() == StatusCode::kUnsupported);
    CHECK_THAT(refused.message(), Catch::Contains("schema version 4"));
  }
  CHECK(fileVersion(path) == 4);
  auto store = openOrFail(path);
  CHECK(fileVersion(path) == Store::kSchemaVersion);
  requireOk(store->recordEvaluation(1, evaluation(0.5, {{&EvaluationRecord::auc, 0.75}})));
  CHECK((*store->rounds())[0].testAuc == 0.75);
  commitSimpleRound(*store, 2);
  CHECK(store->rounds()->size() == 2);
  requireOk(store->checkIntegrity());
}

TEST_CASE("every record comes back as it was stored", "[store]") {
  TempDir dir;
  auto store = openOrFail(dir.file("trip.db"));

  const ClientRecord c1 = makeClient(1);
  const ClientRecord c2 = makeClient(2);
  const ClientRecord c3 = makeClient(3);
  requireOk(store->upsertClient(c1));

  RoundRecord round = makeRound(4);
  round.testLoss = 0.4321;
  round.testAccuracy = 0.8765;
  round.testTop5 = 0.9875;
  round.testAuc = 0.625;
  round.testRmse = 1.5;
  round.testMae = 1.25;
  round.testR2 = -0.25;
  round.epsilon = 2.71828;
  round.reason = "deadline, 11 of 13 returned";
  const std::vector<ParticipantRecord> participants = {
      makeParticipant(4, 1, ParticipantOutcome::kAccepted),
      makeParticipant(4, 2, ParticipantOutcome::kRejected, "base checksum mismatch"),
      makeParticipant(4, 3, ParticipantOutcome::kDropped, "connection closed: peer reset"),
  };
  Checkpoint cp = makeCheckpoint(4);
  requireOk(store->commitRound(round, participants, cp, std::vector<ClientRecord>{c2, c3}));

  SECTION("rounds, with the model checksum filled in") {
    auto rounds = store->rounds();
    REQUIRE(rounds.isOk());
    REQUIRE(rounds->size() == 1);
    RoundRecord expected = round;
    expected.modelChecksum = starling::checksum64(cp.model);
    CHECK((*rounds)[0] == expected);
  }
  SECTION("participants, of one round or of all") {
    auto all = store->participants();
    REQUIRE(all.isOk());
    CHECK(*all == participants);  // ordered by client id, as given
    CHECK(*store->participants(4) == participants);
    CHECK(store->participants(5)->empty());
  }
  SECTION("clients, in id order, with round 4 folded into their figures") {
    auto clients = store->clients();
    REQUIRE(clients.isOk());
    REQUIRE(clients->size() == 3);
    // client-1 accepted (160 examples in 2.901 s: 55.1534/s), client-2 rejected (an
    // update that returned: 160 in 2.902 s, 55.1344/s), client-3 dropped.
    std::vector<ClientRecord> expected = {c1, c2, c3};
    CHECK((*clients)[0].speedExamplesPerS == Approx((1501.5 + 55.153395) / 2));
    CHECK((*clients)[1].speedExamplesPerS == Approx((1502.5 + 55.134390) / 2));
    CHECK((*clients)[2].speedExamplesPerS == 1503.5);
    expected[0].reliability = 0.875;  // 0.75 / 2 + 1 / 2
    expected[1].reliability = 0.875;
    expected[2].reliability = 0.375;  // 0.75 / 2 + 0 / 2
    expected[0].roundsAssigned = 12;
    expected[1].roundsAssigned = 13;
    expected[2].roundsAssigned = 14;
    expected[0].roundsReturned = 10;
    expected[1].roundsReturned = 11;
    expected[2].roundsReturned = 11;
    for (std::size_t i = 0; i < expected.size(); ++i)
      expected[i].speedExamplesPerS = (*clients)[i].speedExamplesPerS;  // checked above
    CHECK(*clients == expected);
  }
  SECTION("the checkpoint, bit for bit") {
    auto latest = store->latestCheckpoint();
    REQUIRE(latest.isOk());
    REQUIRE(latest->has_value());
    const Checkpoint& got = **latest;
    CHECK(got.round == 4);
    REQUIRE(got.model.size() == cp.model.size());
    CHECK(std::memcmp(got.model.data(), cp.model.data(), cp.model.size() * sizeof(float)) == 0);
    CHECK(std::signbit(got.model[0]));
    CHECK(got.serverMemory == cp.serverMemory);
    CHECK(got.engineState == cp.engineState);  // with its embedded NUL
    CHECK(got.modelChecksum == starling::checksum64(cp.model));
    CHECK(got.vectors == cp.vectors);
    CHECK(got.catchUp == cp.catchUp);
  }
  SECTION("abandoned rounds, with their reason and no checkpoint") {
    RoundRecord abandoned = makeRound(5);
    abandoned.status = RoundStatus::kAbandoned;
    abandoned.reason = "only 2 of 13 returned by the deadline; the minimum is 5";
    abandoned.testLoss.reset();
    abandoned.testAccuracy.reset();
    const std::vector<ParticipantRecord> late = {
        makeParticipant(5, 1, ParticipantOutcome::kStraggler, "deadline passed"),
    };
    requireOk(store->recordAbandonedRound(abandoned, late));
    auto rounds = store->rounds();
    REQUIRE(rounds->size() == 2);
    CHECK((*rounds)[1] == abandoned);
    CHECK(*store->participants(5) == late);
    CHECK((*store->latestCheckpoint())->round == 4);
    CHECK(**store->lastRecordedRound() == 5);
  }
  SECTION("meta values, replaced by a second set") {
    requireOk(store->setMeta("task", "{\"model\": \"mlp\"}"));
    CHECK(**store->meta("task") == "{\"model\": \"mlp\"}");
    requireOk(store->setMeta("task", "other"));
    CHECK(**store->meta("task") == "other");
  }
  SECTION("an upserted client takes what its Hello says and keeps the store's figures") {
    const ClientRecord stored = (*store->clients())[0];
    ClientRecord changed = stored;
    changed.certFingerprint = "ef:01:1";
    changed.lastSeenMs += 1000;
    changed.examples += 5;
    changed.speedExamplesPerS = 0;  // as a Hello's record has them
    changed.reliability = 1.0;
    changed.roundsAssigned = 0;
    changed.roundsReturned = 0;
    requireOk(store->upsertClient(changed));
    ClientRecord expected = stored;
    expected.certFingerprint = changed.certFingerprint;
    expected.lastSeenMs = changed.lastSeenMs;
    expected.examples = changed.examples;
    CHECK((*store->clients())[0] == expected);
  }
  SECTION("and its row set, replaced by the next Hello's, or cleared when it offers none") {
    ClientRecord offered = (*store->clients())[0];
    offered.rowSet = {3, 0x81, 0x02, 0xff};
    offered.rowBucket = 16;
    requireOk(store->upsertClient(offered));
    CHECK((*store->clients())[0].rowSet == offered.rowSet);
    CHECK((*store->clients())[0].rowBucket == 16);
    offered.rowSet.clear();
    offered.rowBucket = 0;
    requireOk(store->upsertClient(offered));
    CHECK((*store->clients())[0].rowSet.empty());
    CHECK((*store->clients())[0].rowBucket == 0);
  }
  SECTION("and keeps when it was first seen") {
    const ClientRecord stored = (*store->clients())[0];
    ClientRecord again = stored;
    again.firstSeenMs = stored.firstSeenMs + 60'000;  // as a reconnecting client's Hello sets it
    again.lastSeenMs = stored.lastSeenMs + 60'000;
    requireOk(store->upsertClient(again));
    const ClientRecord got = (*store->clients())[0];
    CHECK(got.firstSeenMs == stored.firstSeenMs);
    CHECK(got.lastSeenMs == stored.lastSeenMs + 60'000);
    again.firstSeenMs = stored.firstSeenMs;
    CHECK(got == again);
  }
}

TEST_CASE("a late update is recorded against the round it was assigned in", "[store]") {
  TempDir dir;
  auto store = openOrFail(dir.file("late.db"));
  commitSimpleRound(*store, 1);  // client-3 straggles in round 1

  ParticipantRecord late = makeParticipant(1, 3, ParticipantOutcome::kLateApplied);
  late.staleness = 1;
  const std::vector<ParticipantRecord> participants = {makeParticipant(2, 1, ParticipantOutcome::kAccepted), late};
  requireOk(store->commitRound(makeRound(2), participants, makeCheckpoint(2)));

  auto ofRound1 = store->participants(1);
  REQUIRE(ofRound1->size() == 4);
  CHECK((*ofRound1)[2].outcome == ParticipantOutcome::kLateApplied);
  CHECK((*ofRound1)[2].staleness == 1);
  CHECK((*ofRound1)[3].outcome == ParticipantOutcome::kStraggler);
}

TEST_CASE("an update refused after its round closed is recorded with its reason", "[store]") {
  TempDir dir;
  auto store = openOrFail(dir.file("reject.db"));
  commitSimpleRound(*store, 1);

  ParticipantRecord rejected = makeParticipant(1, 3, ParticipantOutcome::kLateDiscarded, "staleness 4 exceeds 2");
  rejected.staleness = 4;
  requireOk(store->recordRejection(rejected));
  rejected.reason = "staleness 5 exceeds 2";
  requireOk(store->recordRejection(rejected));  // a resend replaces the first
  auto rows = store->participants(1);
  REQUIRE(rows->size() == 4);
  CHECK((*rows)[2] == rejected);

  SECTION("but not for a round that was never recorded") {
    ParticipantRecord bogus = makeParticipant(99, 3, ParticipantOutcome::kRejected, "no such round");
    Status s = store->recordRejection(bogus);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("never recorded"));
  }
  SECTION("but not without a reason") {
    Status s = store->recordRejection(makeParticipant(1, 3, ParticipantOutcome::kRejected, ""));
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("needs a reason"));
  }
  SECTION("and only refusals go this way") {
    Status s = store->recordRejection(makeParticipant(1, 3, ParticipantOutcome::kAccepted));
    CHECK(s.code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("a round is recorded whole or not at all", "[store]") {
  TempDir dir;
  const std::string path = dir.file("atomic.db");
  auto store = openOrFail(path);
  commitSimpleRound(*store, 1);

  std::vector<ParticipantRecord> participants = {makeParticipant(2, 1, ParticipantOutcome::kAccepted)};
  std::vector<ClientRecord> clients = {makeClient(7)};  // would be inserted before the failure
  SECTION("a participant that is not a known client") {
    participants.push_back(makeParticipant(2, 42, ParticipantOutcome::kAccepted));
    Status s = store->commitRound(makeRound(2), participants, makeCheckpoint(2), clients);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("committing round 2 to '" + path + "'"));
    CHECK_THAT(s.message(), Catch::Contains("'client-42' is not a known client"));
    CHECK_THAT(s.message(), Catch::Contains("the round was not recorded"));
  }
  SECTION("a participant listed twice violates the key") {
    participants.push_back(participants.front());
    Status s = store->commitRound(makeRound(2), participants, makeCheckpoint(2), clients);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("UNIQUE constraint failed"));
  }
  SECTION("a reliability outside [0, 1] violates a check") {
    clients.push_back(makeClient(8));
    clients.back().reliability = 1.5;
    Status s = store->commitRound(makeRound(2), participants, makeCheckpoint(2), clients);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("client 'client-8'"));
  }
  SECTION("a round number that does not increase") {
    Status s = store->commitRound(makeRound(1), {}, makeCheckpoint(1));
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("round 1 is already recorded"));
    clients.clear();
  }
  SECTION("a checkpoint whose checksum does not match its model") {
    Checkpoint cp = makeCheckpoint(2);
    cp.modelChecksum = starling::checksum64(cp.model) ^ 1;
    Status s = store->commitRound(makeRound(2), participants, cp, clients);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("does not match its model"));
  }
  SECTION("a straggler without a reason") {
    participants.push_back(makeParticipant(2, 2, ParticipantOutcome::kStraggler, ""));
    Status s = store->commitRound(makeRound(2), participants, makeCheckpoint(2), clients);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("'client-2' is straggler without a reason"));
  }
  SECTION("an abandoned round without a reason") {
    RoundRecord abandoned = makeRound(2);
    abandoned.status = RoundStatus::kAbandoned;
    abandoned.reason.clear();
    Status s = store->recordAbandonedRound(abandoned, participants, clients);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("an abandoned round needs a reason"));
  }
  SECTION("a checkpoint of another round") {
    Status s = store->commitRound(makeRound(2), participants, makeCheckpoint(3), clients);
    CHECK(s.code() == StatusCode::kInvalidArgument);
  }

  // Nothing of round 2 is there, and the store still works.
  CHECK(store->rounds()->size() == 1);
  CHECK(store->participants(2)->empty());
  CHECK((*store->latestCheckpoint())->round == 1);
  const auto clientsAfter = store->clients();
  for (const ClientRecord& c : *clientsAfter)
    CHECK(c.id != "client-7");
  requireOk(store->checkIntegrity());
  commitSimpleRound(*store, 2);
  CHECK(store->rounds()->size() == 2);
}

TEST_CASE("reopening a database resumes from the last committed round", "[store]") {
  TempDir dir;
  const std::string path = dir.file("resume.db");
  {
    auto store = openOrFail(path);
    requireOk(store->setMeta("task", "fashion-mnist mlp"));
    for (uint64_t r = 1; r <= 5; ++r)
      commitSimpleRound(*store, r, 20'000);
    RoundRecord abandoned = makeRound(6);
    abandoned.status = RoundStatus::kAbandoned;
    abandoned.reason = "deadline: 1 of 13 returned";
    requireOk(store->recordAbandonedRound(abandoned, {}));
  }
  auto store = openOrFail(path);
  auto latest = store->latestCheckpoint();
  REQUIRE(latest.isOk());
  REQUIRE(latest->has_value());
  const Checkpoint expected = makeCheckpoint(5, 20'000);
  CHECK((*latest)->round == 5);
  CHECK(std::memcmp((*latest)->model.data(), expected.model.data(), expected.model.size() * sizeof(float)) == 0);
  CHECK((*latest)->serverMemory == expected.serverMemory);
  CHECK((*latest)->engineState == expected.engineState);
  CHECK((*latest)->vectors == expected.vectors);
  CHECK(**store->lastRecordedRound() == 6);
  CHECK(**store->meta("task") == "fashion-mnist mlp");
  CHECK(store->rounds()->size() == 6);
  requireOk(store->checkIntegrity());
}

TEST_CASE("only the last checkpoints are kept", "[store]") {
  TempDir dir;
  StoreOptions options;
  options.keepCheckpoints = 2;
  auto store = openOrFail(dir.file("prune.db"), options);
  for (uint64_t r = 1; r <= 6; ++r)
    commitSimpleRound(*store, r);
  CHECK(store->rounds()->size() == 6);
  CHECK((*store->latestCheckpoint())->round == 6);

  // Count them through a second, read-only connection.
  StoreOptions ro;
  ro.readOnly = true;
  auto reader = openOrFail(dir.file("prune.db"), ro);
  CHECK((*reader->latestCheckpoint())->round == 6);
  // Pruning a checkpoint deletes its vectors too.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(dir.file("prune.db").c_str(), &db) == SQLITE_OK);
  auto count = [&](const char* sql) {
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    const int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return n;
  };
  CHECK(count("SELECT count(*) FROM checkpoints") == 2);
  CHECK(count("SELECT count(*) FROM checkpoint_vectors") == 4);
  CHECK(count("SELECT count(*) FROM checkpoint_vectors WHERE round < 5") == 0);
  CHECK(count("SELECT count(*) FROM checkpoint_catch_up") == 2);
  CHECK(count("SELECT count(*) FROM checkpoint_catch_up WHERE round < 5") == 0);
  sqlite3_close(db);

  SECTION("keepCheckpoints must be at least one") {
    StoreOptions none;
    none.keepCheckpoints = 0;
    CHECK(Store::open(dir.file("other.db"), none).status().code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("a corrupt checkpoint is reported, not loaded", "[store]") {
  TempDir dir;
  const std::string path = dir.file("corrupt.db");
  {
    auto store = openOrFail(path);
    commitSimpleRound(*store, 1);
    commitSimpleRound(*store, 2);
  }
  // Flip one byte of the model blob of round 2 behind the store's back.
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    const char* sql = GENERATE("UPDATE checkpoints SET model = CAST(zeroblob(4000) AS BLOB) WHERE round = 2",
                               "UPDATE checkpoints SET engine_state = CAST('tampered' AS BLOB) WHERE round = 2",
                               "UPDATE checkpoints SET server_memory = substr(server_memory, 1, 3998) WHERE round = 2",
                               "UPDATE checkpoint_vectors SET data = CAST(zeroblob(4000) AS BLOB) WHERE round = 2",
                               "UPDATE checkpoint_vectors SET data = substr(data, 1, 3998) WHERE round = 2",
                               "UPDATE checkpoint_catch_up SET data = substr(data, 1, 299) WHERE round = 2");
    REQUIRE(sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = openOrFail(path);
  auto latest = store->latestCheckpoint();
  REQUIRE_FALSE(latest.isOk());
  CHECK(latest.status().code() == StatusCode::kMalformed);
  CHECK_THAT(latest.status().message(), Catch::Contains("checkpoint of round 2 is corrupt"));
  // The rest of the store still reads.
  CHECK(store->rounds()->size() == 2);
}

TEST_CASE("a version-1 database is read as it is and upgraded when opened for writing", "[store]") {
  TempDir dir;
  const std::string path = dir.file("v1.db");
  {
    auto store = openOrFail(path);
    commitSimpleRound(*store, 1);
  }
  // What a version-1 build left: no checkpoint_vectors or refusals table, no sticky columns.
  execOrFail(path, (kBackToVersion1 + "PRAGMA user_version = 1").c_str());
  auto version = [&] { return fileVersion(path); };
  {
    StoreOptions ro;
    ro.readOnly = true;
    auto reader = openOrFail(path, ro);
    auto latest = reader->latestCheckpoint();
    REQUIRE(latest.isOk());
    CHECK((*latest)->round == 1);
    CHECK((*latest)->vectors.empty());
    CHECK(reader->rounds()->size() == 1);
    // Participants of a version-1 file: not sticky, weight 1.
    auto participants = reader->participants();
    REQUIRE(participants.isOk());
    REQUIRE(participants->size() == 3);
    for (const ParticipantRecord& p : *participants) {
      CHECK_FALSE(p.sticky);
      CHECK(p.selectionWeight == 1.0);
    }
    CHECK(reader->recordRejection(makeParticipant(1, 4, ParticipantOutcome::kRejected, "bad")).code() ==
          StatusCode::kUnsupported);
    // No refusals table before version 3: none to read, and none can be written.
    auto refusals = reader->refusals();
    REQUIRE(refusals.isOk());
    CHECK(refusals->empty());
    const Status refused = reader->recordRefusal(makeRefusal(4));
    CHECK(refused.code() == StatusCode::kUnsupported);
    CHECK_THAT(refused.message(), Catch::Contains("schema version 1"));
    // Nor placements before version 10.
    CHECK(reader->placements()->empty());
  }
  CHECK(version() == 1);  // reading changed nothing
  CHECK_FALSE(hasTable(path, "refusals"));
  auto store = openOrFail(path);
  CHECK(version() == 11);
  CHECK(version() == Store::kSchemaVersion);
  CHECK(store->refusals()->empty());
  CHECK(store->placements()->empty());
  requireOk(store->recordRefusal(makeRefusal(4)));
  CHECK(*store->refusals() == std::vector<RefusalRecord>{makeRefusal(4)});
  CHECK((*store->latestCheckpoint())->vectors.empty());
  CHECK((*store->latestCheckpoint())->catchUp.empty());
  commitSimpleRound(*store, 2);
  CHECK((*store->latestCheckpoint())->vectors == makeCheckpoint(2).vectors);
  CHECK((*store->latestCheckpoint())->catchUp == makeCheckpoint(2).catchUp);
  CHECK(*store->participants(2) ==
        std::vector<ParticipantRecord>{
            makeParticipant(2, 1, ParticipantOutcome::kAccepted), makeParticipant(2, 2, ParticipantOutcome::kAccepted),
            makeParticipant(2, 3, ParticipantOutcome::kStraggler, "deadline passed after 30 s")});
  CHECK_FALSE((*store->participants(1))[0].sticky);  // rows of version 1: the defaults
  CHECK(store->rounds()->size() == 2);
  requireOk(store->checkIntegrity());
}

TEST_CASE("a version-2 database is read as it is and upgraded when opened for writing", "[store]") {
  TempDir dir;
  const std::string path = dir.file("v2.db");
  {
    auto store = openOrFail(path);
    commitSimpleRound(*store, 1);
    commitSimpleRound(*store, 2);
  }
  // What a version-2 build left: everything but the refusals and catch-up tables.
  execOrFail(
      path, (kBackToVersion4 + "DROP TABLE checkpoint_catch_up; DROP TABLE refusals; PRAGMA user_version = 2").c_str());
  REQUIRE(fileVersion(path) == 2);
  {
    StoreOptions ro;
    ro.readOnly = true;
    auto reader = openOrFail(path, ro);
    CHECK(reader->rounds()->size() == 2);
    CHECK((*reader->latestCheckpoint())->vectors == makeCheckpoint(2).vectors);
    CHECK((*reader->participants(1))[0].sticky);  // version 2 has the sticky columns
    auto refusals = reader->refusals();
    REQUIRE(refusals.isOk());
    CHECK(refusals->empty());
    const Status refused = reader->recordRefusal(makeRefusal(4));
    CHECK(refused.code() == StatusCode::kUnsupported);
    CHECK_THAT(refused.message(), Catch::Contains("schema version 2") && Catch::Contains("read-only"));
    CHECK(reader->recordRejection(makeParticipant(1, 3, ParticipantOutcome::kRejected, "bad")).code() ==
          StatusCode::kUnsupported);
  }
  CHECK(fileVersion(path) == 2);  // reading changed nothing
  CHECK_FALSE(hasTable(path, "refusals"));

  auto store = openOrFail(path);
  CHECK(fileVersion(path) == Store::kSchemaVersion);
  CHECK(hasTable(path, "refusals"));
  // The rounds, participants and checkpoint of version 2 are all still there.
  const std::vector<RoundRecord> rounds = *store->rounds();
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[0].round == 1);
  CHECK(rounds[1].round == 2);
  CHECK(store->participants()->size() == 6);
  CHECK((*store->latestCheckpoint())->model == makeCheckpoint(2).model);
  CHECK(store->refusals()->empty());
  requireOk(store->recordRefusal(makeRefusal(5)));
  commitSimpleRound(*store, 3);
  CHECK(*store->refusals() == std::vector<RefusalRecord>{makeRefusal(5)});
  CHECK(*store->lastRecordedRound() == std::optional<uint64_t>(3));
  requireOk(store->checkIntegrity());
}

TEST_CASE("a version-3 database is read as it is and upgraded when opened for writing", "[store]") {
  TempDir dir;
  const std::string path = dir.file("v3.db");
  {
    auto store = openOrFail(path);
    commitSimpleRound(*store, 1);
    requireOk(store->recordRefusal(makeRefusal(2)));
  }
  // What a version-3 build left: everything but the catch-up table.
  execOrFail(path, (kBackToVersion4 + "DROP TABLE checkpoint_catch_up; PRAGMA user_version = 3").c_str());
  {
    StoreOptions ro;
    ro.readOnly = true;
    auto reader = openOrFail(path, ro);
    auto latest = reader->latestCheckpoint();
    REQUIRE(latest.isOk());
    CHECK((*latest)->vectors == makeCheckpoint(1).vectors);
    CHECK((*latest)->catchUp.empty());  // none before version 4
    CHECK(*reader->refusals() == std::vector<RefusalRecord>{makeRefusal(2)});
  }
  CHECK(fileVersion(path) == 3);
  CHECK_FALSE(hasTable(path, "checkpoint_catch_up"));

  auto store = openOrFail(path);
  CHECK(fileVersion(path) == Store::kSchemaVersion);
  CHECK((*store->latestCheckpoint())->catchUp.empty());  // round 1 was written without one
  commitSimpleRound(*store, 2);
  CHECK((*store->latestCheckpoint())->catchUp == makeCheckpoint(2).catchUp);
  CHECK(*store->refusals() == std::vector<RefusalRecord>{makeRefusal(2)});
  requireOk(store->checkIntegrity());
}

TEST_CASE("a failed upgrade leaves the old file as it was", "[store]") {
  TempDir dir;
  const std::string path = dir.file("v1-clash.db");
  {
    auto store = openOrFail(path);
    commitSimpleRound(*store, 1);
  }
  // A version-1 file that somehow already has a table named like version 3's: the
  // upgrade fails at version 3's step, and what version 2's step did must be undone too.
  execOrFail(path, (kBackToVersion1 + "CREATE TABLE refusals (x); PRAGMA user_version = 1").c_str());
  auto store = Store::open(path);
  REQUIRE_FALSE(store.isOk());
  CHECK_THAT(store.status().message(), Catch::Contains("upgrading schema version 1 to 11"));
  CHECK(fileVersion(path) == 1);
  CHECK_FALSE(hasTable(path, "checkpoint_vectors"));
}

TEST_CASE("a file that is not a Starling database is refused", "[store]") {
  TempDir dir;
  SECTION("not SQLite at all") {
    const std::string path = dir.file("junk.db");
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    const std::string junk(8192, 'x');
    std::fwrite(junk.data(), 1, junk.size(), f);
    std::fclose(f);
    auto store = Store::open(path);
    REQUIRE_FALSE(store.isOk());
    CHECK(store.status().code() == StatusCode::kMalformed);
    CHECK_THAT(store.status().message(), Catch::Contains("cannot open database '" + path + "'"));
    CHECK_THAT(store.status().message(), Catch::Contains("not a database"));
  }
  SECTION("another program's SQLite database") {
    const std::string path = dir.file("other.db");
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "CREATE TABLE t (x)", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    auto store = Store::open(path);
    CHECK(store.status().code() == StatusCode::kMalformed);
    CHECK_THAT(store.status().message(), Catch::Contains("not a Starling coordinator database"));
  }
  SECTION("a newer schema version") {
    const std::string path = dir.file("newer.db");
    { auto store = openOrFail(path); }
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "PRAGMA user_version = 12", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    auto store = Store::open(path);
    CHECK(store.status().code() == StatusCode::kUnsupported);
    CHECK_THAT(store.status().message(), Catch::Contains("schema version 12"));
  }
  SECTION("a directory that does not exist") {
    const std::string path = dir.file("no/such/dir/x.db");
    auto store = Store::open(path);
    CHECK(store.status().code() == StatusCode::kIo);
    CHECK_THAT(store.status().message(), Catch::Contains("cannot open database '" + path + "'"));
  }
  SECTION("reading a database that does not exist") {
    StoreOptions ro;
    ro.readOnly = true;
    auto store = Store::open(dir.file("missing.db"), ro);
    CHECK_FALSE(store.isOk());
    CHECK_FALSE(std::filesystem::exists(dir.file("missing.db")));
  }
}

TEST_CASE("an in-memory store behaves like a file", "[store]") {
  auto store = openOrFail(":memory:");
  commitSimpleRound(*store, 1);
  commitSimpleRound(*store, 2);
  CHECK((*store->latestCheckpoint())->round == 2);
  CHECK(store->participants()->size() == 6);
}

TEST_CASE("the test hook fires inside a round's transaction, and a throw there stores nothing", "[store]") {
  TempDir dir;
  const std::string path = dir.file("hook.db");
  auto store = openOrFail(path);
  std::vector<std::string> points;
  store->setTestHook([&](std::string_view point) { points.emplace_back(point); });
  RoundRecord abandoned = makeRound(2);
  abandoned.status = RoundStatus::kAbandoned;
  abandoned.reason = "deadline: 0 of 1 returned";
  const std::vector<ParticipantRecord> straggler = {
      makeParticipant(2, 1, ParticipantOutcome::kStraggler, "deadline passed")};
  commitSimpleRound(*store, 1);
  requireOk(store->recordAbandonedRound(abandoned, straggler));
  commitSimpleRound(*store, 3);
  CHECK(points == std::vector<std::string>{"commit-round:mid", "abandon-round:mid", "commit-round:mid"});

  const std::vector<ClientRecord> clientsBefore = *store->clients();
  const std::string thrownAt = GENERATE("commit-round:mid", "abandon-round:mid");
  CAPTURE(thrownAt);
  store->setTestHook([&](std::string_view point) {
    if (point == thrownAt) throw std::runtime_error("crash at " + std::string(point));
  });
  RoundRecord next = makeRound(4);
  const std::vector<ParticipantRecord> participants = {
      makeParticipant(4, 1, ParticipantOutcome::kAccepted),
      makeParticipant(4, 2, ParticipantOutcome::kDropped, "connection closed"),
  };
  const std::vector<ClientRecord> newClient = {makeClient(9)};
  if (thrownAt == "commit-round:mid") {
    CHECK_THROWS_WITH(store->commitRound(next, participants, makeCheckpoint(4), newClient),
                      "crash at commit-round:mid");
  } else {
    next.status = RoundStatus::kAbandoned;
    next.reason = "deadline: 1 of 2 returned";
    CHECK_THROWS_WITH(store->recordAbandonedRound(next, participants, newClient), "crash at abandon-round:mid");
  }

  // The file, read by a new connection, is as it was after round 3.
  auto reader = openOrFail(path);
  CHECK(reader->rounds()->size() == 3);
  CHECK(**reader->lastRecordedRound() == 3);
  CHECK(reader->participants(4)->empty());
  CHECK((*reader->latestCheckpoint())->round == 3);
  CHECK(*reader->clients() == clientsBefore);  // no client-9, no client row changed
  requireOk(reader->checkIntegrity());
  reader.reset();

  // And the store that threw goes on.
  store->setTestHook({});
  requireOk(store->commitRound(makeRound(4), participants, makeCheckpoint(4), newClient));
  CHECK(**store->lastRecordedRound() == 4);
}

TEST_CASE("a client's speed and reliability are computed from the rounds it took part in", "[store]") {
  TempDir dir;
  const std::string path = dir.file("figures.db");
  auto store = openOrFail(path);
  // As the daemon records a Hello: no figures yet (speed 0, reliability 1, no rounds).
  auto hello = [](int i, int64_t atMs) {
    ClientRecord c;
    c.id = "client-" + std::to_string(i);
    c.certFingerprint = "ab:cd:" + std::to_string(i);
    c.firstSeenMs = atMs;
    c.lastSeenMs = atMs;
    c.examples = 600;
    return c;
  };
  requireOk(store->upsertClient(hello(1, 1'000)));
  requireOk(store->upsertClient(hello(2, 1'000)));
  auto update = [](uint64_t round, int client, ParticipantOutcome outcome, int64_t examples, int64_t durationMs,
                   std::string reason = "") {
    ParticipantRecord p = makeParticipant(round, client, outcome, std::move(reason));
    p.examples = examples;
    p.durationMs = durationMs;
    return p;
  };
  auto figures = [&](int i) {
    const std::vector<ClientRecord> all = *store->clients();
    REQUIRE(all.size() == 2);
    return all[static_cast<std::size_t>(i - 1)];
  };

  // Round 1: client-1 returns 100 examples in 2 s (50/s); client-2 straggles.
  requireOk(store->commitRound(makeRound(1),
                               std::vector<ParticipantRecord>{
                                   update(1, 1, ParticipantOutcome::kAccepted, 100, 2'000),
                                   update(1, 2, ParticipantOutcome::kStraggler, 0, 0, "deadline passed"),
                               },
                               makeCheckpoint(1)));
  CHECK(figures(1).speedExamplesPerS == 50.0);  // the first measurement, as it is
  CHECK(figures(1).reliability == 1.0);         // 1 / 2 + 1 / 2
  CHECK(figures(1).roundsAssigned == 1);
  CHECK(figures(1).roundsReturned == 1);
  CHECK(figures(2).speedExamplesPerS == 0.0);  // never measured
  CHECK(figures(2).reliability == 0.5);        // 1 / 2 + 0 / 2
  CHECK(figures(2).roundsAssigned == 1);
  CHECK(figures(2).roundsReturned == 0);

  // Round 2, abandoned: client-1 drops; client-2 returns 60 examples in 1 s (60/s).
  RoundRecord abandoned = makeRound(2);
  abandoned.status = RoundStatus::kAbandoned;
  abandoned.reason = "1 of 2 returned; the minimum is 2";
  requireOk(store->recordAbandonedRound(abandoned, std::vector<ParticipantRecord>{
                                                       update(2, 1, ParticipantOutcome::kDropped, 0, 0, "peer reset"),
                                                       update(2, 2, ParticipantOutcome::kAccepted, 60, 1'000),
                                                   }));
  CHECK(figures(1).speedExamplesPerS == 50.0);  // a drop measures nothing
  CHECK(figures(1).reliability == 0.5);         // 1 / 2 + 0 / 2
  CHECK(figures(1).roundsAssigned == 2);
  CHECK(figures(1).roundsReturned == 1);
  CHECK(figures(2).speedExamplesPerS == 60.0);
  CHECK(figures(2).reliability == 0.75);  // 0.5 / 2 + 1 / 2
  CHECK(figures(2).roundsAssigned == 2);
  CHECK(figures(2).roundsReturned == 1);

  // Round 3: client-1 returns 100 examples in 1 s (100/s). client-2's round-1 update
  // arrives late (100 in 4 s: 25/s, not an assignment of its own), then its round-3
  // update (80 in 2 s: 40/s) is rejected, which still counts as returned.
  ParticipantRecord late = update(1, 2, ParticipantOutcome::kLateApplied, 100, 4'000);
  late.staleness = 2;
  requireOk(store->commitRound(makeRound(3),
                               std::vector<ParticipantRecord>{
                                   update(3, 1, ParticipantOutcome::kAccepted, 100, 1'000),
                                   late,
                                   update(3, 2, ParticipantOutcome::kRejected, 80, 2'000, "non-finite values"),
                               },
                               makeCheckpoint(3)));
  CHECK(figures(1).speedExamplesPerS == 75.0);  // 50 / 2 + 100 / 2
  CHECK(figures(1).reliability == 0.75);        // 0.5 / 2 + 1 / 2
  CHECK(figures(1).roundsAssigned == 3);
  CHECK(figures(1).roundsReturned == 2);
  CHECK(figures(2).speedExamplesPerS == 41.25);  // (60 / 2 + 25 / 2) / 2 + 40 / 2
  CHECK(figures(2).reliability == 0.875);        // 0.75 / 2 + 1 / 2
  CHECK(figures(2).roundsAssigned == 3);
  CHECK(figures(2).roundsReturned == 2);

  // A reconnect's Hello does not reset them, and they are on disk.
  requireOk(store->upsertClient(hello(1, 9'000)));
  store.reset();
  StoreOptions ro;
  ro.readOnly = true;
  store = openOrFail(path, ro);
  const ClientRecord c1 = figures(1);
  CHECK(c1.firstSeenMs == 1'000);
  CHECK(c1.lastSeenMs == 9'000);
  CHECK(c1.speedExamplesPerS == 75.0);
  CHECK(c1.reliability == 0.75);
  CHECK(c1.roundsAssigned == 3);
  CHECK(c1.roundsReturned == 2);
}

TEST_CASE("placements applied are recorded with their source, partition time and traffic", "[store]") {
  TempDir dir;
  const std::string path = dir.file("placements.db");
  auto store = openOrFail(path);
  PlacementRecord file;
  file.version = 1;
  file.round = 4;
  file.source = "file";
  file.clients = 4;
  file.relays = 2;
  PlacementRecord drift = file;
  drift.version = 2;
  drift.round = 9;
  drift.source = "drift";
  drift.partitionSeconds = 0.25;
  drift.rowsBefore = 3000;
  drift.rowsAfter = 1800;
  requireOk(store->recordPlacement(file));
  requireOk(store->recordPlacement(drift));
  CHECK(*store->placements() == std::vector<PlacementRecord>{file, drift});
  PlacementRecord bad = file;
  bad.version = 0;
  CHECK(store->recordPlacement(bad).code() == StatusCode::kInvalidArgument);
  bad = file;
  bad.source = "guess";
  const Status refused = store->recordPlacement(bad);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.message(), Catch::Contains("'guess'"));
  store.reset();
  // Kept across a reopen, read-only too.
  StoreOptions ro;
  ro.readOnly = true;
  auto reader = openOrFail(path, ro);
  CHECK(*reader->placements() == std::vector<PlacementRecord>{file, drift});
}
