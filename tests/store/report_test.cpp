// The report: the same rounds and stragglers as a table for people, CSV for
// spreadsheets and JSON for scripts; each format parses back.

#include "starling/coordinator/report.hpp"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "starling/coordinator/store.hpp"
#include "starling/util/checksum.hpp"

#include "store_fixtures.hpp"

using namespace starling;
using namespace starling::coordinator;
using namespace starling::coordinator::testing;

namespace {

void requireOk(const Status& status) {
  INFO(status.toString());
  REQUIRE(status.isOk());
}

// Three rounds: 1 committed (evaluated), 2 abandoned, 3 committed with a late update
// from round 1, a rejection and awkward characters in the reasons; and two clients
// refused at Hello.
std::unique_ptr<Store> sampleStore(const std::string& path) {
  Result<std::unique_ptr<Store>> opened = Store::open(path);
  INFO(opened.status().toString());
  REQUIRE(opened.isOk());
  std::unique_ptr<Store> store = std::move(*opened);
  const std::vector<ClientRecord> clients = {makeClient(1), makeClient(2), makeClient(3), makeClient(4)};

  RoundRecord r1 = makeRound(1);
  r1.testAccuracy = 0.625;
  r1.testLoss = 1.25;
  requireOk(store->commitRound(r1,
                               std::vector<ParticipantRecord>{
                                   makeParticipant(1, 1, ParticipantOutcome::kAccepted),
                                   makeParticipant(1, 2, ParticipantOutcome::kAccepted),
                                   makeParticipant(1, 3, ParticipantOutcome::kStraggler, "deadline passed after 30 s"),
                               },
                               makeCheckpoint(1), clients));

  RoundRecord r2 = makeRound(2);
  r2.status = RoundStatus::kAbandoned;
  r2.reason = "1 of 13 returned, minimum 5";
  r2.testAccuracy.reset();
  r2.testLoss.reset();
  requireOk(store->recordAbandonedRound(
      r2, std::vector<ParticipantRecord>{
              makeParticipant(2, 4, ParticipantOutcome::kDropped, "connection reset by peer, \"ECONNRESET\""),
          }));

  RoundRecord r3 = makeRound(3);
  r3.testAccuracy = 0.75;
  r3.testLoss = 0.875;
  ParticipantRecord late = makeParticipant(1, 3, ParticipantOutcome::kLateApplied);
  late.staleness = 2;
  requireOk(store->commitRound(
      r3,
      std::vector<ParticipantRecord>{
          makeParticipant(3, 1, ParticipantOutcome::kAccepted),
          makeParticipant(3, 2, ParticipantOutcome::kRejected, "non-finite value\nat index 7\t(\\x7f)"),
          late,
      },
      makeCheckpoint(3)));

  RefusalRecord old;
  old.clientId = "client-7";
  old.peer = "10.0.0.7:51234";
  old.atMs = 1'700'000'000'000;  // 2023-11-14 22:13:20 UTC
  old.reason =
      "this task needs capabilities the client lacks: rice-indices, xor-values (a newer "
      "starling-client has them)";
  requireOk(store->recordRefusal(old));
  RefusalRecord odd;
  odd.clientId = "client-\"8\"";
  odd.peer = "[::1]:40000";
  odd.atMs = 1'700'000'061'500;
  odd.reason = "lacks: initialize\nand more";
  requireOk(store->recordRefusal(odd));
  return store;
}

// RFC 4180 records: quoted fields may hold commas, doubled quotes and line breaks.
std::vector<std::vector<std::string>> parseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false;
  bool fieldStarted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
      fieldStarted = true;
    } else if (c == ',') {
      record.push_back(field);
      field.clear();
      fieldStarted = true;
    } else if (c == '\n') {
      if (fieldStarted || !field.empty()) record.push_back(field);
      records.push_back(record);  // an empty record is the blank separator line
      record.clear();
      field.clear();
      fieldStarted = false;
    } else {
      field += c;
      fieldStarted = true;
    }
  }
  REQUIRE_FALSE(quoted);
  return records;
}

// A strict JSON syntax check (RFC 8259), enough to say the text is valid JSON.
class JsonChecker {
 public:
  explicit JsonChecker(const std::string& text) : s_(text) {}
  bool valid() {
    ws();
    if (!value()) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  bool value() {
    if (i_ >= s_.size()) return false;
    switch (s_[i_]) {
      case '{':
        return object();
      case '[':
        return array();
      case '"':
        return string();
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default:
        return number();
    }
  }
  bool object() {
    ++i_;
    ws();
    if (peek('}')) return ++i_, true;
    while (true) {
      ws();
      if (!string()) return false;
      ws();
      if (!peek(':')) return false;
      ++i_;
      ws();
      if (!value()) return false;
      ws();
      if (peek(',')) {
        ++i_;
        continue;
      }
      if (peek('}')) return ++i_, true;
      return false;
    }
  }
  bool array() {
    ++i_;
    ws();
    if (peek(']')) return ++i_, true;
    while (true) {
      ws();
      if (!value()) return false;
      ws();
      if (peek(',')) {
        ++i_;
        continue;
      }
      if (peek(']')) return ++i_, true;
      return false;
    }
  }
  bool string() {
    if (!peek('"')) return false;
    ++i_;
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') return ++i_, true;
      if (c < 0x20) return false;
      if (c == '\\') {
        ++i_;
        if (i_ >= s_.size()) return false;
        const char e = s_[i_];
        if (e == 'u') {
          for (int k = 0; k < 4; ++k) {
            ++i_;
            if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) return false;
          }
        } else if (std::string("\"\\/bfnrt").find(e) == std::string::npos) {
          return false;
        }
      }
      ++i_;
    }
    return false;
  }
  bool number() {
    const std::size_t start = i_;
    if (peek('-')) ++i_;
    if (peek('0')) {
      ++i_;
    } else if (!digits()) {
      return false;
    }
    if (peek('.')) {
      ++i_;
      if (!digits()) return false;
    }
    if (peek('e') || peek('E')) {
      ++i_;
      if (peek('+') || peek('-')) ++i_;
      if (!digits()) return false;
    }
    return i_ > start;
  }
  bool digits() {
    const std::size_t start = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
      ++i_;
    return i_ > start;
  }
  bool literal(const char* word) {
    const std::string w(word);
    if (s_.compare(i_, w.size(), w) != 0) return false;
    i_ += w.size();
    return true;
  }
  bool peek(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

}  // namespace

TEST_CASE("report formats are chosen by name", "[report]") {
  CHECK(*parseReportFormat("table") == ReportFormat::kTable);
  CHECK(*parseReportFormat("csv") == ReportFormat::kCsv);
  CHECK(*parseReportFormat("json") == ReportFormat::kJson);
  auto bad = parseReportFormat("xml");
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(bad.status().message(), Catch::Contains("choose table, csv or json"));
}

TEST_CASE("totals add up the traffic and count the outcomes", "[report]") {
  TempDir dir;
  auto store = sampleStore(dir.file("totals.db"));
  auto data = loadReport(*store);
  REQUIRE(data.isOk());
  CHECK(data->rounds.size() == 3);
  CHECK(data->participants.size() == 4);  // the accepted ones are left out
  REQUIRE(data->refusals.size() == 2);
  CHECK(data->refusals[0].clientId == "client-7");
  CHECK(data->refusals[1].peer == "[::1]:40000");
  const ReportTotals t = computeTotals(*data);
  CHECK(t.roundsCommitted == 2);
  CHECK(t.roundsAbandoned == 1);
  CHECK(t.stragglers == 1);
  CHECK(t.dropped == 1);
  CHECK(t.rejected == 1);
  CHECK(t.lateApplied == 1);
  CHECK(t.lateDiscarded == 0);
  CHECK(t.refused == 2);
  CHECK(t.bytesUpRaw == int64_t{3} * 4'000'000);
  CHECK(t.bytesUpWire == int64_t{3} * 80'000);
  CHECK(t.bytesDownWire == int64_t{3} * 520'000);
  CHECK(*t.compressionUp == Approx(50.0));
  CHECK(*t.compressionDown == Approx(10.0));
  CHECK(*t.lastEvaluatedRound == 3);
  CHECK(*t.lastTestAccuracy == 0.75);
}

TEST_CASE("the table shows rounds, totals and the stragglers with their reasons", "[report]") {
  TempDir dir;
  auto store = sampleStore(dir.file("table.db"));
  auto text = buildReport(*store, ReportFormat::kTable);
  REQUIRE(text.isOk());
  INFO(*text);
  CHECK_THAT(*text, Catch::Contains("round") && Catch::Contains("tau") && Catch::Contains("test") &&
                        Catch::Contains("62.50%"));
  CHECK_THAT(*text, Catch::Contains("abandoned") && Catch::Contains("1 of 13 returned, minimum 5"));
  CHECK_THAT(*text, Catch::Contains("62.50%") && Catch::Contains("75.00%"));
  CHECK_THAT(*text, Catch::Contains("2 committed, 1 abandoned"));
  CHECK_THAT(*text, Catch::Contains("x50.0"));
  CHECK_THAT(*text, Catch::Contains("Stragglers, drops and rejections"));
  CHECK_THAT(*text, Catch::Contains("client-3") && Catch::Contains("straggler") &&
                        Catch::Contains("deadline passed after 30 s"));
  CHECK_THAT(*text, Catch::Contains("dropped") && Catch::Contains("ECONNRESET"));
  CHECK_THAT(*text, Catch::Contains("late-applied"));
  CHECK_THAT(*text, Catch::Contains("rejected") && Catch::Contains("non-finite value at index 7 (\\x7f)"));
  CHECK_THAT(*text, Catch::Contains("refused       2 at Hello"));
  CHECK_THAT(*text, Catch::Contains("\nRefused at Hello\n"));
  CHECK_THAT(*text, Catch::Contains("2023-11-14 22:13:20 UTC  client-7    10.0.0.7:51234  this task needs capabilities "
                                    "the client lacks: rice-indices, xor-values"));
  CHECK_THAT(*text,
             Catch::Contains("2023-11-14 22:14:21 UTC  client-\"8\"  [::1]:40000     lacks: initialize and more"));

  SECTION("and says so when nothing went wrong") {
    auto empty = Store::open(":memory:");
    REQUIRE(empty.isOk());
    auto none = buildReport(**empty, ReportFormat::kTable);
    REQUIRE(none.isOk());
    CHECK_THAT(*none, Catch::Contains("0 committed, 0 abandoned"));
    CHECK_THAT(*none, Catch::Contains("Stragglers, drops and rejections\n  none\n"));
    CHECK_THAT(*none, Catch::Contains("refused       0 at Hello"));
    CHECK_THAT(*none, Catch::EndsWith("Refused at Hello\n  none\n"));
  }
}

TEST_CASE("a task with differential privacy shows epsilon per round and in the totals", "[report]") {
  auto opened = Store::open(":memory:");
  REQUIRE(opened.isOk());
  Store& store = **opened;
  const double epsilons[] = {0.5, 0.8125, std::numeric_limits<double>::infinity()};
  for (uint64_t r = 1; r <= 3; ++r) {
    RoundRecord round = makeRound(r);
    round.epsilon = epsilons[r - 1];
    requireOk(store.commitRound(round, std::vector<ParticipantRecord>{}, makeCheckpoint(r)));
  }
  auto table = buildReport(store, ReportFormat::kTable);
  REQUIRE(table.isOk());
  INFO(*table);
  CHECK_THAT(*table, Catch::Contains("epsilon") && Catch::Contains("0.8125") && Catch::Contains(" inf "));
  CHECK_THAT(*table, Catch::Contains("privacy       epsilon inf after round 3"));
  auto csv = buildReport(store, ReportFormat::kCsv);
  REQUIRE(csv.isOk());
  const auto records = parseCsv(*csv);
  REQUIRE(records.size() >= 4);
  CHECK(records[0].back() == "epsilon");
  CHECK(records[1].back() == "0.5");
  CHECK(records[3].back() == "inf");
  auto json = buildReport(store, ReportFormat::kJson);
  REQUIRE(json.isOk());
  CHECK_THAT(*json, Catch::Contains("\"epsilon\": 0.8125") && Catch::Contains("\"epsilon\": 1e999"));
  SECTION("and none without it") {
    auto plain = Store::open(":memory:");
    REQUIRE(plain.isOk());
    requireOk((*plain)->commitRound(makeRound(1), std::vector<ParticipantRecord>{}, makeCheckpoint(1)));
    auto text = buildReport(**plain, ReportFormat::kTable);
    REQUIRE(text.isOk());
    CHECK_THAT(*text, !Catch::Contains("epsilon") && !Catch::Contains("privacy"));
  }
}

TEST_CASE("the CSV is three tables with a fixed number of columns", "[report]") {
  TempDir dir;
  auto store = sampleStore(dir.file("csv.db"));
  auto text = buildReport(*store, ReportFormat::kCsv);
  REQUIRE(text.isOk());
  INFO(*text);
  const auto records = parseCsv(*text);

  // rounds header + 3 rounds, a blank line, participants header + 4 rows, a blank line,
  // refusals header + 2 rows
  REQUIRE(records.size() == 1 + 3 + 1 + 1 + 4 + 1 + 1 + 2);
  CHECK(records[4].empty());
  CHECK(records[10].empty());
  const std::size_t roundColumns = records[0].size();
  const std::size_t participantColumns = records[5].size();
  CHECK(roundColumns == 27);
  CHECK(participantColumns == 16);
  for (std::size_t i = 1; i <= 3; ++i)
    CHECK(records[i].size() == roundColumns);
  for (std::size_t i = 6; i < 10; ++i)
    CHECK(records[i].size() == participantColumns);
  CHECK(records[11] == std::vector<std::string>{"client_id", "peer", "at_ms", "reason"});
  CHECK(records[12] ==
        std::vector<std::string>{"client-7", "10.0.0.7:51234", "1700000000000",
                                 "this task needs capabilities the client lacks: rice-indices, xor-values (a newer "
                                 "starling-client has them)"});
  CHECK(records[13] ==
        std::vector<std::string>{"client-\"8\"", "[::1]:40000", "1700000061500", "lacks: initialize\nand more"});

  CHECK(records[0][0] == "round");
  CHECK(records[2][1] == "abandoned");
  CHECK(records[2][2] == "1 of 13 returned, minimum 5");  // quoted because of the comma
  CHECK(records[1][12] == "80000");                       // bytes_up_wire
  CHECK(records[1][17] == "0.625");                       // test_accuracy
  CHECK(records[2][17].empty());                          // not evaluated
  CHECK(records[1][20] == "7250");                        // duration_ms
  CHECK(records[5][1] == "client_id");
  CHECK(records[5][13] == "sticky");
  CHECK(records[5][14] == "selection_weight");
  for (std::size_t i = 6; i < 10; ++i)
    CHECK(((records[i][13] == "1" && records[i][14] == "0.625") || (records[i][13] == "0" && records[i][14] == "2.5")));
  bool sawRejection = false;
  for (std::size_t i = 6; i < 10; ++i) {
    if (records[i][2] == "rejected") {
      sawRejection = true;
      CHECK(records[i][3] == "non-finite value\nat index 7\t(\\x7f)");
    }
    if (records[i][2] == "dropped") CHECK(records[i][3] == "connection reset by peer, \"ECONNRESET\"");
  }
  CHECK(sawRejection);
}

TEST_CASE("the JSON is valid and holds the numbers", "[report]") {
  TempDir dir;
  auto store = sampleStore(dir.file("json.db"));
  std::ostringstream out;
  requireOk(writeReport(*store, ReportFormat::kJson, out));
  const std::string text = out.str();
  INFO(text);
  CHECK(JsonChecker(text).valid());
  CHECK_THAT(text, Catch::StartsWith(
                       "{\n  \"feature_statistics\": null,\n  \"categorical_vocabulary\": {},\n  \"rounds\": ["));
  CHECK_THAT(text, Catch::Contains("\"participants\": [") && Catch::Contains("\"totals\": {"));
  CHECK_THAT(text,
             Catch::Contains("\n  ],\n  \"refused\": [\n    {\"client_id\": \"client-7\", \"peer\": "
                             "\"10.0.0.7:51234\", \"at_ms\": 1700000000000, \"reason\": \"this task needs "
                             "capabilities the client lacks: rice-indices, xor-values (a newer starling-client has "
                             "them)\"},\n"));
  CHECK_THAT(text, Catch::Contains(R"({"client_id": "client-\"8\"", "peer": "[::1]:40000", "at_ms": 1700000061500, )"
                                   R"("reason": "lacks: initialize\nand more"}
  ],
  "totals": {)"));
  CHECK_THAT(text, Catch::Contains("\"late_discarded\": 0, \"refused\": 2, "));
  CHECK_THAT(text, Catch::Contains("\"round\": 2, \"status\": \"abandoned\""));
  CHECK_THAT(text, Catch::Contains("\"bytes_up_wire\": 80000"));
  CHECK_THAT(text, Catch::Contains("\"test_accuracy\": 0.625"));
  CHECK_THAT(text, Catch::Contains("\"test_accuracy\": null"));
  CHECK_THAT(text, Catch::Contains("\"tau\": 8"));
  CHECK_THAT(text, Catch::Contains("\"rounds_abandoned\": 1"));
  CHECK_THAT(text, Catch::Contains("\"compression_up\": 50"));
  CHECK_THAT(text, Catch::Contains("\"returned_ms\": null"));
  CHECK_THAT(text, Catch::Contains("\"sticky\": true, \"selection_weight\": 0.625"));
  CHECK_THAT(text, Catch::Contains("\"sticky\": false, \"selection_weight\": 2.5"));
  // 64-bit checksums as hex strings: JSON numbers lose precision beyond 2^53.
  CHECK_THAT(text, Catch::Contains(
                       fmt::format("\"model_checksum\": \"{:#018x}\"", starling::checksum64(makeCheckpoint(1).model))));
  // Escapes: quotes, backslash, newline, tab.
  CHECK_THAT(text, Catch::Contains(R"("connection reset by peer, \"ECONNRESET\"")"));
  CHECK_THAT(text, Catch::Contains(R"x("non-finite value\nat index 7\t(\\x7f)")x"));

  SECTION("non-finite numbers become null") {
    ReportData data;
    RoundRecord r = makeRound(1);
    r.trainLossStart = std::numeric_limits<double>::quiet_NaN();
    r.testLoss = std::numeric_limits<double>::infinity();
    data.rounds.push_back(r);
    const std::string odd = formatReport(data, ReportFormat::kJson);
    INFO(odd);
    CHECK(JsonChecker(odd).valid());
    CHECK_THAT(odd, Catch::Contains("\"train_loss_start\": null"));
    CHECK_THAT(odd, Catch::Contains("\"test_loss\": null"));
  }
  SECTION("an empty database is still a valid document") {
    auto empty = Store::open(":memory:");
    REQUIRE(empty.isOk());
    auto none = buildReport(**empty, ReportFormat::kJson);
    REQUIRE(none.isOk());
    CHECK(JsonChecker(*none).valid());
    CHECK_THAT(*none, Catch::Contains("\"refused\": [],\n"));
  }
}

TEST_CASE("test figures read alike in the coordinator's log and the report", "[report]") {
  CHECK(testFiguresText({0.86124, std::nullopt, std::nullopt, std::nullopt}) == "86.12%");
  CHECK(testFiguresText({0.912, 0.95614, std::nullopt, std::nullopt}, "accuracy ") == "accuracy 91.20% auc 0.9561");
  CHECK(testFiguresText({std::nullopt, std::nullopt, 0.41234, 0.8714}) == "rmse 0.4123 r2 0.871");
  CHECK(testFiguresText({std::nullopt, std::nullopt, std::nullopt, std::nullopt}).empty());
}
