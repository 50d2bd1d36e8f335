#include "starling/coordinator/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <utility>

#include "starling/coordinator/json.hpp"

namespace starling::coordinator {

namespace {

// ---- shared ---------------------------------------------------------------------------

int64_t durationMs(const RoundRecord& r) {
  return r.endedMs - r.startedMs;
}

std::optional<double> ratio(int64_t raw, int64_t wire) {
  if (wire <= 0) return std::nullopt;
  return static_cast<double>(raw) / static_cast<double>(wire);
}

// ---- table ----------------------------------------------------------------------------

std::string humanBytes(int64_t bytes) {
  return plot::humanBytes(static_cast<double>(bytes));
}

// A table cell stays on one line: line breaks and tabs become spaces, other control
// characters '?'.
std::string cell(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '\n' || c == '\r' || c == '\t') {
      c = ' ';
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      c = '?';
    }
  }
  return out;
}

std::string optionalFixed(std::optional<double> v, int digits, std::string_view suffix = "") {
  if (!v) return "-";
  return fmt::format("{:.{}f}{}", *v, digits, suffix);
}

// Columns padded to their widest cell; the first `leftAligned` columns flush left,
// the rest flush right, except the last, which is free text (reasons).
std::string renderTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                        std::size_t leftAligned) {
  std::vector<std::size_t> width(header.size(), 0);
  for (std::size_t c = 0; c < header.size(); ++c)
    width[c] = header[c].size();
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) text += "  ";
      const bool last = c + 1 == cells.size();
      if (last) {
        text += cells[c];
      } else if (c < leftAligned) {
        text += fmt::format("{:<{}}", cells[c], width[c]);
      } else {
        text += fmt::format("{:>{}}", cells[c], width[c]);
      }
    }
    while (!text.empty() && text.back() == ' ')
      text.pop_back();
    out += text;
    out += '\n';
  };
  line(header);
  std::size_t total = 0;
  for (std::size_t w : width)
    total += w + 2;
  out += std::string(total > 2 ? total - 2 : 0, '-');
  out += '\n';
  for (const auto& row : rows)
    line(row);
  return out;
}

// Epsilon as the report prints it: "inf" without noise, `none` when unset.
std::string epsilonText(std::optional<double> epsilon, std::string_view none) {
  if (!epsilon) return std::string(none);
  if (std::isinf(*epsilon)) return "inf";
  return fmt::format("{:.4g}", *epsilon);
}

// A round's headline test figure: its accuracy, with the AUC of a binary task, or the
// RMSE of a regression; "-" when it was not evaluated.
std::string testMetric(std::optional<double> accuracy, std::optional<double> auc, std::optional<double> rmse) {
  const std::string out = testFiguresText({accuracy, auc, rmse, std::nullopt});
  return out.empty() ? "-" : out;
}

}  // namespace

std::string utcTime(int64_t ms) {
  using namespace std::chrono;
  const sys_time<milliseconds> t{milliseconds(ms)};
  const sys_days day = floor<days>(t);
  const year_month_day date(day);
  const hh_mm_ss<milliseconds> time(t - day);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC", static_cast<int>(date.year()),
                     static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()), time.hours().count(),
                     time.minutes().count(), time.seconds().count());
}

std::string testFiguresText(const TestFigures& figures, std::string_view accuracyLabel) {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : " ") + part; };
  if (figures.accuracy) add(fmt::format("{}{:.2f}%", accuracyLabel, 100 * *figures.accuracy));
  if (figures.auc) add(fmt::format("auc {:.4f}", *figures.auc));
  if (figures.rmse) add(fmt::format("rmse {:.4g}", *figures.rmse));
  if (figures.r2) add(fmt::format("r2 {:.3f}", *figures.r2));
  return out;
}

namespace {

// "none", or how the features are scaled and where the scaling came from.
std::string scalingText(const std::optional<FeatureStatisticsRecord>& s) {
  if (!s) return "none";
  return fmt::format("standardized ({}) by a statistics round of {} clients, {} examples, {} features, at {}",
                     s->centre ? "z-scores" : "sparse: divided by std, not centred", s->clients.size(), s->examples,
                     s->mean.size(), utcTime(s->atMs));
}

// One line per categorical column: its agreed values, most examples first.
std::string vocabularyText(const std::vector<CategoricalColumnRecord>& vocabulary) {
  std::string out;
  for (const CategoricalColumnRecord& c : vocabulary) {
    std::vector<std::size_t> order(c.values.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return c.counts[a] > c.counts[b]; });
    std::string values;
    for (std::size_t k = 0; k < order.size(); ++k)
      values += fmt::format("{}{} ({})", k == 0 ? "" : ", ", c.values[order[k]], c.counts[order[k]]);
    out += fmt::format("Categorical vocabulary: {}: {} values + other: {}\n", c.column, c.values.size(), values);
  }
  return out;
}

std::string formatTable(const ReportData& data, const ReportTotals& totals) {
  std::string out;
  // The privacy column only for a task with differential privacy.
  const bool privacy =
      std::any_of(data.rounds.begin(), data.rounds.end(), [](const RoundRecord& r) { return r.epsilon.has_value(); });
  out += "Feature scaling: " + scalingText(data.statistics) + "\n";
  out += vocabularyText(data.vocabulary) + "\n";
  out += "Rounds\n";
  std::vector<std::vector<std::string>> rows;
  for (const RoundRecord& r : data.rounds) {
    rows.push_back({
        fmt::format("{}", r.round),
        roundStatusName(r.status),
        fmt::format("{}", r.tau),
        fmt::format("{:.4g}", r.lr),
        fmt::format("{:.3g}", r.density),
        fmt::format("{:.3g}", r.densityDown),
        fmt::format("{}/{}", r.returned, r.selected),
        fmt::format("{}", r.stragglers),
        humanBytes(r.bytesUpWire),
        humanBytes(r.bytesDownWire),
        fmt::format("{:.4f}", r.trainLossStart),
        testMetric(r.testAccuracy, r.testAuc, r.testRmse),
        fmt::format("{:.1f}s", static_cast<double>(durationMs(r)) / 1000.0),
        cell(r.reason),
    });
    if (privacy) rows.back().insert(rows.back().end() - 1, epsilonText(r.epsilon, "-"));
  }
  std::vector<std::string> header = {"round",      "status",   "tau",        "lr",      "dens up",
                                     "dens down",  "returned", "stragglers", "up wire", "down wire",
                                     "train loss", "test",     "duration",   "reason"};
  if (privacy) header.insert(header.end() - 1, "epsilon");
  out += renderTable(header, rows, 2);

  out += "\nTotals\n";
  out += fmt::format("  rounds        {} committed, {} abandoned\n", totals.roundsCommitted, totals.roundsAbandoned);
  out += fmt::format("  up            {} raw, {} on the wire (x{})\n", humanBytes(totals.bytesUpRaw),
                     humanBytes(totals.bytesUpWire), optionalFixed(totals.compressionUp, 1));
  out += fmt::format("  down          {} raw, {} on the wire (x{})\n", humanBytes(totals.bytesDownRaw),
                     humanBytes(totals.bytesDownWire), optionalFixed(totals.compressionDown, 1));
  out += fmt::format("  compression   x{} overall (raw / wire)\n", optionalFixed(totals.compressionTotal, 1));
  out += fmt::format("  participants  {} stragglers, {} dropped, {} rejected, {} late-applied, {} late-discarded\n",
                     totals.stragglers, totals.dropped, totals.rejected, totals.lateApplied, totals.lateDiscarded);
  out += fmt::format("  refused       {} at Hello\n", totals.refused);
  if (privacy) {
    // The last round's epsilon is the privacy spent by the whole run.
    const RoundRecord& last = data.rounds.back();
    out += fmt::format("  privacy       epsilon {} after round {} (differential privacy)\n",
                       epsilonText(last.epsilon, "-"), last.round);
  }
  if (totals.lastEvaluatedRound) {
    out += fmt::format("  test          {} after round {} (test loss {})\n",
                       testMetric(totals.lastTestAccuracy, totals.lastTestAuc, totals.lastTestRmse),
                       *totals.lastEvaluatedRound, optionalFixed(totals.lastTestLoss, 4));
  } else {
    out += "  test          - (no round was evaluated)\n";
  }

  out += "\nStragglers, drops and rejections\n";
  if (data.participants.empty()) {
    out += "  none\n";
  } else {
    rows.clear();
    for (const ParticipantRecord& p : data.participants) {
      rows.push_back({
          fmt::format("{}", p.round),
          cell(p.clientId),
          participantOutcomeName(p.outcome),
          fmt::format("{}", p.staleness),
          p.reason.empty() ? "-" : cell(p.reason),
      });
    }
    out += renderTable({"round", "client", "outcome", "staleness", "reason"}, rows, 3);
  }

  out += "\nRefused at Hello\n";
  if (data.refusals.empty()) {
    out += "  none\n";
    return out;
  }
  rows.clear();
  for (const RefusalRecord& r : data.refusals) {
    rows.push_back({utcTime(r.atMs), cell(r.clientId), cell(r.peer), cell(r.reason)});
  }
  out += renderTable({"time", "client", "peer", "reason"}, rows, 3);
  return out;
}

// ---- csv ------------------------------------------------------------------------------

// RFC 4180: a field with a comma, a quote or a line break is quoted, quotes doubled.
std::string csvField(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

// Shortest text that reads back as the same double; empty for absent or non-finite.
std::string csvNumber(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return "";
  return fmt::format("{}", *v);
}

std::string formatCsv(const ReportData& data) {
  std::string out =
      "round,status,reason,tau,lr,density_up,density_down,selected,returned,accepted,stragglers,bytes_up_raw,"
      "bytes_up_wire,bytes_down_raw,bytes_down_wire,train_loss_start,test_loss,test_accuracy,started_ms,ended_ms,"
      "duration_ms,test_top5,test_auc,test_rmse,test_mae,test_r2,epsilon\n";
  for (const RoundRecord& r : data.rounds) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.round,
                       roundStatusName(r.status), csvField(r.reason), r.tau, csvNumber(r.lr), csvNumber(r.density),
                       csvNumber(r.densityDown), r.selected, r.returned, r.accepted, r.stragglers, r.bytesUpRaw,
                       r.bytesUpWire, r.bytesDownRaw, r.bytesDownWire, csvNumber(r.trainLossStart),
                       csvNumber(r.testLoss), csvNumber(r.testAccuracy), r.startedMs, r.endedMs, durationMs(r),
                       csvNumber(r.testTop5), csvNumber(r.testAuc), csvNumber(r.testRmse), csvNumber(r.testMae),
                       csvNumber(r.testR2), epsilonText(r.epsilon, ""));
  }
  out += "\n";
  out +=
      "round,client_id,outcome,reason,staleness,assigned_ms,returned_ms,duration_ms,steps,examples,bytes_up_raw,"
      "bytes_up_wire,bytes_down_wire,sticky,selection_weight,wait_ms\n";
  for (const ParticipantRecord& p : data.participants) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", p.round, csvField(p.clientId),
                       participantOutcomeName(p.outcome), csvField(p.reason), p.staleness, p.assignedMs,
                       p.returnedMs ? fmt::format("{}", *p.returnedMs) : std::string(), p.durationMs, p.steps,
                       p.examples, p.bytesUpRaw, p.bytesUpWire, p.bytesDownWire, p.sticky ? 1 : 0,
                       csvNumber(p.selectionWeight), p.waitMs);
  }
  out += "\n";
  out += "client_id,peer,at_ms,reason\n";
  for (const RefusalRecord& r : data.refusals) {
    out += fmt::format("{},{},{},{}\n", csvField(r.clientId), csvField(r.peer), r.atMs, csvField(r.reason));
  }
  return out;
}

// ---- json -----------------------------------------------------------------------------

// `  "name": [` then one object per item, each on its own line, then `],` (an empty
// array stays on one line).
template <typename T, typename ToObject>
std::string jsonArray(std::string_view name, const std::vector<T>& items, ToObject toObject) {
  std::string out = fmt::format("  \"{}\": [", name);
  for (std::size_t i = 0; i < items.size(); ++i)
    out += (i == 0 ? "\n    " : ",\n    ") + toObject(items[i]);
  out += items.empty() ? "],\n" : "\n  ],\n";
  return out;
}

}  // namespace

std::string refusalJson(const RefusalRecord& r) {
  return JsonObject()
      .str("client_id", r.clientId)
      .str("peer", r.peer)
      .num("at_ms", r.atMs)
      .str("reason", r.reason)
      .done();
}

namespace {

std::string formatJson(const ReportData& data, const ReportTotals& totals) {
  std::string out = "{\n";
  out += "  \"feature_statistics\": ";
  if (const auto& st = data.statistics) {
    std::string clients = "[";
    for (const std::string& c : st->clients)
      clients += (clients.size() > 1 ? ", " : "") + jsonString(c);
    out += JsonObject()
               .str("scaling", st->centre ? "z-scores" : "std")
               .unum("participants", st->clients.size())
               .add("clients", clients + "]")
               .unum("examples", st->examples)
               .unum("features", st->mean.size())
               .num("at_ms", st->atMs)
               .done();
  } else {
    out += "null";
  }
  out += ",\n  \"categorical_vocabulary\": {";
  for (std::size_t i = 0; i < data.vocabulary.size(); ++i) {
    const CategoricalColumnRecord& c = data.vocabulary[i];
    std::string values;
    for (std::size_t k = 0; k < c.values.size(); ++k)
      values += fmt::format("{}{}: {}", k == 0 ? "" : ", ", jsonString(c.values[k]), c.counts[k]);
    out += fmt::format("{}{}: {{{}}}", i == 0 ? "" : ", ", jsonString(c.column), values);
  }
  out += "}";
  out += ",\n";
  out += jsonArray("rounds", data.rounds, [](const RoundRecord& r) {
    return JsonObject()
        .unum("round", r.round)
        .str("status", roundStatusName(r.status))
        .str("reason", r.reason)
        .num("tau", r.tau)
        .real("lr", r.lr)
        .real("density_up", r.density)
        .real("density_down", r.densityDown)
        .num("selected", r.selected)
        .num("returned", r.returned)
        .num("accepted", r.accepted)
        .num("stragglers", r.stragglers)
        .num("bytes_up_raw", r.bytesUpRaw)
        .num("bytes_up_wire", r.bytesUpWire)
        .num("bytes_down_raw", r.bytesDownRaw)
        .num("bytes_down_wire", r.bytesDownWire)
        .real("train_loss_start", r.trainLossStart)
        .real("test_loss", r.testLoss)
        .real("test_accuracy", r.testAccuracy)
        .real("test_top5", r.testTop5)
        .real("test_auc", r.testAuc)
        .real("test_rmse", r.testRmse)
        .real("test_mae", r.testMae)
        .real("test_r2", r.testR2)
        .add("epsilon", jsonNumberOrInfinity(r.epsilon))
        .num("started_ms", r.startedMs)
        .num("ended_ms", r.endedMs)
        .num("duration_ms", durationMs(r))
        .str("model_checksum", fmt::format("{:#018x}", r.modelChecksum))
        .done();
  });
  out += jsonArray("participants", data.participants, [](const ParticipantRecord& p) {
    return JsonObject()
        .unum("round", p.round)
        .str("client_id", p.clientId)
        .str("outcome", participantOutcomeName(p.outcome))
        .str("reason", p.reason)
        .num("staleness", p.staleness)
        .num("assigned_ms", p.assignedMs)
        .add("returned_ms", p.returnedMs ? fmt::format("{}", *p.returnedMs) : "null")
        .num("duration_ms", p.durationMs)
        .num("steps", p.steps)
        .num("examples", p.examples)
        .num("bytes_up_raw", p.bytesUpRaw)
        .num("bytes_up_wire", p.bytesUpWire)
        .num("bytes_down_wire", p.bytesDownWire)
        .add("sticky", p.sticky ? "true" : "false")
        .real("selection_weight", p.selectionWeight)
        .num("wait_ms", p.waitMs)
        .done();
  });
  out += jsonArray("refused", data.refusals, refusalJson);
  out += "  \"totals\": ";
  out += JsonObject()
             .num("rounds_committed", totals.roundsCommitted)
             .num("rounds_abandoned", totals.roundsAbandoned)
             .num("stragglers", totals.stragglers)
             .num("dropped", totals.dropped)
             .num("rejected", totals.rejected)
             .num("late_applied", totals.lateApplied)
             .num("late_discarded", totals.lateDiscarded)
             .num("refused", totals.refused)
             .num("bytes_up_raw", totals.bytesUpRaw)
             .num("bytes_up_wire", totals.bytesUpWire)
             .num("bytes_down_raw", totals.bytesDownRaw)
             .num("bytes_down_wire", totals.bytesDownWire)
             .real("compression_up", totals.compressionUp)
             .real("compression_down", totals.compressionDown)
             .real("compression_total", totals.compressionTotal)
             .add("last_evaluated_round",
                  totals.lastEvaluatedRound ? fmt::format("{}", *totals.lastEvaluatedRound) : "null")
             .real("last_test_accuracy", totals.lastTestAccuracy)
             .real("last_test_loss", totals.lastTestLoss)
             .real("last_test_auc", totals.lastTestAuc)
             .real("last_test_rmse", totals.lastTestRmse)
             .done();
  out += "\n}\n";
  return out;
}

}  // namespace

Result<ReportFormat> parseReportFormat(std::string_view name) {
  if (name == "table") return ReportFormat::kTable;
  if (name == "csv") return ReportFormat::kCsv;
  if (name == "json") return ReportFormat::kJson;
  return Status(StatusCode::kInvalidArgument,
                fmt::format("unknown report format '{}': choose table, csv or json", name));
}

Result<ReportData> loadReport(Store& store) {
  ReportData data;
  Result<std::vector<RoundRecord>> rounds = store.rounds();
  if (!rounds) return rounds.status();
  data.rounds = std::move(*rounds);
  Result<std::vector<ParticipantRecord>> participants = store.participants();
  if (!participants) return participants.status();
  for (ParticipantRecord& p : *participants) {
    if (p.outcome != ParticipantOutcome::kAccepted) data.participants.push_back(std::move(p));
  }
  Result<std::vector<RefusalRecord>> refusals = store.refusals();
  if (!refusals) return refusals.status();
  data.refusals = std::move(*refusals);
  Result<std::optional<FeatureStatisticsRecord>> statistics = store.featureStatistics();
  if (!statistics) return statistics.status();
  data.statistics = std::move(*statistics);
  Result<std::vector<CategoricalColumnRecord>> vocabulary = store.categoricalVocabulary();
  if (!vocabulary) return vocabulary.status();
  data.vocabulary = std::move(*vocabulary);
  return data;
}

ReportTotals computeTotals(const ReportData& data) {
  ReportTotals t;
  for (const RoundRecord& r : data.rounds) {
    (r.status == RoundStatus::kCommitted ? t.roundsCommitted : t.roundsAbandoned) += 1;
    t.bytesUpRaw += r.bytesUpRaw;
    t.bytesUpWire += r.bytesUpWire;
    t.bytesDownRaw += r.bytesDownRaw;
    t.bytesDownWire += r.bytesDownWire;
    if (r.status == RoundStatus::kCommitted && r.testLoss) {
      t.lastEvaluatedRound = r.round;
      t.lastTestAccuracy = r.testAccuracy;
      t.lastTestLoss = r.testLoss;
      t.lastTestAuc = r.testAuc;
      t.lastTestRmse = r.testRmse;
    }
  }
  for (const ParticipantRecord& p : data.participants)
    countOutcome(t, p.outcome);
  t.refused = static_cast<int64_t>(data.refusals.size());
  t.compressionUp = ratio(t.bytesUpRaw, t.bytesUpWire);
  t.compressionDown = ratio(t.bytesDownRaw, t.bytesDownWire);
  t.compressionTotal = ratio(t.bytesUpRaw + t.bytesDownRaw, t.bytesUpWire + t.bytesDownWire);
  return t;
}

std::string formatReport(const ReportData& data, ReportFormat format) {
  switch (format) {
    case ReportFormat::kTable:
      return formatTable(data, computeTotals(data));
    case ReportFormat::kCsv:
      return formatCsv(data);
    case ReportFormat::kJson:
      return formatJson(data, computeTotals(data));
  }
  return {};
}

Result<std::string> buildReport(Store& store, ReportFormat format) {
  Result<ReportData> data = loadReport(store);
  if (!data) return data.status();
  return formatReport(*data, format);
}

Status writeReport(Store& store, ReportFormat format, std::ostream& out) {
  Result<std::string> text = buildReport(store, format);
  if (!text) return text.status();
  out << *text;
  out.flush();
  if (!out) return {StatusCode::kIo, "writing the report failed"};
  return Status::ok();
}

}  // namespace starling::coordinator
