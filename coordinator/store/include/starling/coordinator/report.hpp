#pragma once
// `starling-coordinator report`: rounds, traffic, accuracy, tau, the stragglers and
// the clients refused at Hello, read from a Store and printed as a table, CSV or JSON (docs/state.md shows each).
//
// The formatting functions are pure (records in, text out); loadReport() and the
// Store overloads read the database. Same threading rule as the Store: one thread
// at a time per Store.

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "starling/coordinator/store.hpp"
#include "starling/plot/plot.hpp"
#include "starling/util/status.hpp"

namespace starling::coordinator {

enum class ReportFormat { kTable, kCsv, kJson };

// "table", "csv" or "json"; anything else is kInvalidArgument naming the choices.
Result<ReportFormat> parseReportFormat(std::string_view name);

// What a report shows.
struct ReportData {
  std::vector<RoundRecord> rounds;              // every round, in order
  std::vector<ParticipantRecord> participants;  // every participant that was not simply accepted
  std::vector<RefusalRecord> refusals;          // every client refused at Hello, in order
  // The statistics round of a task that standardizes its features (none: the task does not).
  std::optional<FeatureStatisticsRecord> statistics;
  // The categorical vocabulary of the statistics round (empty: hashed buckets, or none).
  std::vector<CategoricalColumnRecord> vocabulary;
};

struct ReportTotals {
  int64_t roundsCommitted = 0;
  int64_t roundsAbandoned = 0;
  int64_t stragglers = 0;  // participant rows by outcome
  int64_t dropped = 0;
  int64_t rejected = 0;
  int64_t lateApplied = 0;
  int64_t lateDiscarded = 0;
  int64_t refused = 0;  // clients refused at Hello (refusal rows)
  int64_t bytesUpRaw = 0;
  int64_t bytesUpWire = 0;
  int64_t bytesDownRaw = 0;
  int64_t bytesDownWire = 0;
  // raw / wire, nullopt when nothing went over the wire.
  std::optional<double> compressionUp;
  std::optional<double> compressionDown;
  std::optional<double> compressionTotal;
  // Of the last committed round that was evaluated.
  std::optional<uint64_t> lastEvaluatedRound;
  std::optional<double> lastTestAccuracy;
  std::optional<double> lastTestLoss;
  std::optional<double> lastTestAuc, lastTestRmse;  // binary; regression
};

// The test figures of an evaluation as logs and reports print them, those present,
// space-separated: accuracyLabel + "86.12%", "auc 0.9561", "rmse 0.4123", "r2 0.871";
// "" when none is.
struct TestFigures {
  std::optional<double> accuracy, auc, rmse, r2;
};
std::string testFiguresText(const TestFigures& figures, std::string_view accuracyLabel = "");

// "2023-11-14 22:13:20 UTC": a wall-clock time given in ms since the Unix epoch.
std::string utcTime(int64_t ms);

// Adds one participant row's outcome to the counts of `counts` (ReportTotals,
// ClientTrouble: any type with the five counters); accepted rows change nothing.
template <typename Counts>
void countOutcome(Counts& counts, ParticipantOutcome outcome) {
  switch (outcome) {
    case ParticipantOutcome::kAccepted:
      break;
    case ParticipantOutcome::kStraggler:
      ++counts.stragglers;
      break;
    case ParticipantOutcome::kDropped:
      ++counts.dropped;
      break;
    case ParticipantOutcome::kRejected:
      ++counts.rejected;
      break;
    case ParticipantOutcome::kLateApplied:
      ++counts.lateApplied;
      break;
    case ParticipantOutcome::kLateDiscarded:
      ++counts.lateDiscarded;
      break;
  }
}

// A refusal as the JSON report and the dashboard write it: client_id, peer, at_ms, reason.
std::string refusalJson(const RefusalRecord& refusal);

// Reads the rounds, the non-accepted participants and the refusals.
Result<ReportData> loadReport(Store& store);

ReportTotals computeTotals(const ReportData& data);

// The report text. table: rounds, then totals, then stragglers, drops and
// rejections with their reasons, then the clients refused at Hello. csv: the rounds
// (with a header row), a blank line, the non-accepted participants (with a header
// row), a blank line, then the refusals (with a header row). json: one object
// {"rounds": [...], "participants": [...], "refused": [...], "totals": {...}}; absent
// values are null.
std::string formatReport(const ReportData& data, ReportFormat format);

// ---- plots and pages (report_html.cpp): `report --html FILE` and the dashboard ----

// The rounds' plots: the test metric (accuracy, or RMSE for a regression) against
// rounds, bytes (both ways, cumulative) and wall time, the losses against rounds and
// the test loss against bytes, the bytes per round up
// and down, round durations, participants per round, and epsilon when the task is
// private.
plot::Figure roundsFigure(const std::vector<RoundRecord>& rounds);

// The clients that missed or lost work, most troubled first: their participant rows by
// outcome, and the latest one's round and reason.
struct ClientTrouble {
  std::string clientId;
  int64_t stragglers = 0, dropped = 0, rejected = 0, lateApplied = 0, lateDiscarded = 0;
  uint64_t lastRound = 0;
  std::string lastOutcome, lastReason;
  int64_t total() const { return stragglers + dropped + rejected + lateApplied + lateDiscarded; }
};
std::vector<ClientTrouble> troubleByClient(const std::vector<ParticipantRecord>& participants);
// Adds one participant row to its client's counts (accepted rows change nothing).
void countTrouble(std::map<std::string, ClientTrouble>& byClient, const ParticipantRecord& participant);
// The `limit` most troubled clients, most first (ties by id).
std::vector<ClientTrouble> mostTroubled(const std::map<std::string, ClientTrouble>& byClient, std::size_t limit);

// The style sheet the report page and the dashboard share (no fetch: inline CSS).
std::string_view pageStyle();

// A self-contained HTML page: totals, the plots as inline SVG, the stragglers table,
// the rounds, the non-accepted participants and the refusals. `title` names the run
// (e.g. the database's path); no script, nothing fetched.
std::string formatHtml(const ReportData& data, std::string_view title);

// loadReport + formatReport.
Result<std::string> buildReport(Store& store, ReportFormat format);
Status writeReport(Store& store, ReportFormat format, std::ostream& out);

}  // namespace starling::coordinator
