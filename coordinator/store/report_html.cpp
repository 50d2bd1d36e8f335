// The rounds' plots, the troubled clients and the self-contained HTML report
// (report.hpp): what `starling-coordinator report --html` writes and the dashboard
// draws while the task runs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "starling/coordinator/report.hpp"

namespace starling::coordinator {

namespace {

using plot::escapeXml;

bool committed(const RoundRecord& r) {
  return r.status == RoundStatus::kCommitted;
}

}  // namespace

plot::Figure roundsFigure(const std::vector<RoundRecord>& rounds) {
  bool anyAccuracy = false, anyRmse = false, anyEpsilon = false;
  for (const RoundRecord& r : rounds) {
    anyAccuracy = anyAccuracy || r.testAccuracy.has_value();
    anyRmse = anyRmse || r.testRmse.has_value();
    anyEpsilon = anyEpsilon || (r.epsilon && std::isfinite(*r.epsilon));
  }
  // A regression has no accuracy: its panels plot the RMSE.
  const bool rmse = !anyAccuracy && anyRmse;
  const char* metric = rmse ? "RMSE" : "accuracy";
  auto value = [rmse](const RoundRecord& r) { return rmse ? r.testRmse : r.testAccuracy; };

  plot::Panel byRound{fmt::format("Test {} vs round", metric),
                      "round",
                      false,
                      rmse ? plot::YFormat::kNumber : plot::YFormat::kPercent,
                      std::nullopt,
                      {},
                      false};
  plot::Panel byBytes{fmt::format("Test {} vs bytes (both ways)", metric),
                      "bytes on the wire, log scale",
                      true,
                      byRound.yFormat,
                      std::nullopt,
                      {},
                      false};
  // Time in seconds, minutes or hours, as the run's span asks.
  const int64_t start = rounds.empty() ? 0 : rounds.front().startedMs;
  const double spanS = rounds.empty() ? 0 : static_cast<double>(rounds.back().endedMs - start) / 1000.0;
  const double unitS = spanS < 120 ? 1 : spanS < 7200 ? 60 : 3600;
  const char* unit = unitS == 1 ? "seconds" : unitS == 60 ? "minutes" : "hours";
  plot::Panel byTime{fmt::format("Test {} vs time", metric),
                     fmt::format("{} since the first round started", unit),
                     false,
                     byRound.yFormat,
                     std::nullopt,
                     {},
                     false};
  plot::Panel lossByBytes{"Test loss vs bytes (both ways)",
                          "bytes on the wire, log scale",
                          true,
                          plot::YFormat::kNumber,
                          std::nullopt,
                          {},
                          false};
  plot::Panel loss{"Loss", "round", false, plot::YFormat::kNumber, std::nullopt, {}, true};
  plot::Panel bytes{"Bytes per round (wire)", "round", false, plot::YFormat::kBytes, std::nullopt, {}, true};
  plot::Panel duration{"Round duration (s)", "round", false, plot::YFormat::kNumber, std::nullopt, {}, true};
  plot::Panel people{"Participants per round", "round", false, plot::YFormat::kNumber, std::nullopt, {}, true};
  plot::Panel privacy{"Privacy spent (epsilon)", "round", false, plot::YFormat::kNumber, std::nullopt, {}, false};
  byRound.series.push_back({metric, {}});
  byBytes.series.push_back({metric, {}});
  byTime.series.push_back({metric, {}});
  lossByBytes.series.push_back({"test loss", {}});
  loss.series = {{"train (start of round)", {}}, {"test", {}}};
  bytes.series = {{"up", {}}, {"down", {}}};
  duration.series = {{"committed", {}}, {"abandoned", {}}};
  people.series = {{"selected", {}}, {"accepted", {}}, {"stragglers", {}}};
  privacy.series.push_back({"epsilon", {}});

  double cumulative = 0;
  for (const RoundRecord& r : rounds) {
    const double x = static_cast<double>(r.round);
    cumulative += static_cast<double>(r.bytesUpWire + r.bytesDownWire);
    bytes.series[0].points.emplace_back(x, static_cast<double>(r.bytesUpWire));
    bytes.series[1].points.emplace_back(x, static_cast<double>(r.bytesDownWire));
    duration.series[committed(r) ? 0 : 1].points.emplace_back(x, static_cast<double>(r.endedMs - r.startedMs) / 1000);
    people.series[0].points.emplace_back(x, static_cast<double>(r.selected));
    people.series[1].points.emplace_back(x, static_cast<double>(r.accepted));
    people.series[2].points.emplace_back(x, static_cast<double>(r.stragglers));
    if (!committed(r)) continue;
    if (const auto v = value(r)) {
      byRound.series[0].points.emplace_back(x, *v);
      byBytes.series[0].points.emplace_back(cumulative, *v);
      byTime.series[0].points.emplace_back(static_cast<double>(r.endedMs - start) / 1000.0 / unitS, *v);
    }
    loss.series[0].points.emplace_back(x, r.trainLossStart);
    if (r.testLoss) {
      loss.series[1].points.emplace_back(x, *r.testLoss);
      lossByBytes.series[0].points.emplace_back(cumulative, *r.testLoss);
    }
    if (r.epsilon && std::isfinite(*r.epsilon)) privacy.series[0].points.emplace_back(x, *r.epsilon);
  }
  plot::Figure figure;
  figure.panels = {std::move(byRound),     std::move(byBytes), std::move(byTime),   std::move(loss),
                   std::move(lossByBytes), std::move(bytes),   std::move(duration), std::move(people)};
  if (anyEpsilon) figure.panels.push_back(std::move(privacy));
  return figure;
}

void countTrouble(std::map<std::string, ClientTrouble>& byClient, const ParticipantRecord& p) {
  if (p.outcome == ParticipantOutcome::kAccepted) return;
  auto it = byClient.find(p.clientId);
  if (it == byClient.end()) {
    it = byClient.emplace(p.clientId, ClientTrouble{}).first;
    it->second.clientId = p.clientId;
  }
  ClientTrouble& c = it->second;
  countOutcome(c, p.outcome);
  if (p.round >= c.lastRound) {
    c.lastRound = p.round;
    c.lastOutcome = participantOutcomeName(p.outcome);
    c.lastReason = p.reason;
  }
}

std::vector<ClientTrouble> mostTroubled(const std::map<std::string, ClientTrouble>& byClient, std::size_t limit) {
  std::vector<const ClientTrouble*> order;
  order.reserve(byClient.size());
  for (const auto& [id, c] : byClient)
    order.push_back(&c);
  const std::size_t n = std::min(limit, order.size());
  // By id within a count: the map's order, kept by comparing ids on ties.
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [](const ClientTrouble* a, const ClientTrouble* b) {
                      return a->total() != b->total() ? a->total() > b->total() : a->clientId < b->clientId;
                    });
  std::vector<ClientTrouble> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(*order[i]);
  return out;
}

std::vector<ClientTrouble> troubleByClient(const std::vector<ParticipantRecord>& participants) {
  std::map<std::string, ClientTrouble> byClient;
  for (const ParticipantRecord& p : participants)
    countTrouble(byClient, p);
  return mostTroubled(byClient, byClient.size());
}

std::string_view pageStyle() {
  return R"css(
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
.sub { color: #666; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; }
th { background: #f3f3f3; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.cards { display: flex; flex-wrap: wrap; gap: 0.8em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.5em 0.9em; min-width: 9em; }
.card b { display: block; font-size: 1.3em; }
.ok { color: #2ca02c; } .bad { color: #d62728; } .late { color: #ff7f0e; }
svg { max-width: 100%; height: auto; }
)css";
}

namespace {

std::string td(std::string_view text) {
  return "<td>" + escapeXml(text) + "</td>";
}
std::string tdn(std::string_view text) {
  return "<td class='n'>" + escapeXml(text) + "</td>";
}
template <typename T>
std::string tdNumber(T number) {
  return tdn(fmt::format("{}", number));
}
std::string header(std::initializer_list<std::string_view> names) {
  std::string out = "<tr>";
  for (std::string_view n : names)
    out += "<th>" + escapeXml(n) + "</th>";
  return out + "</tr>\n";
}
std::string card(std::string_view label, std::string_view value) {
  return fmt::format("<div class='card'>{}<b>{}</b></div>\n", escapeXml(label), escapeXml(value));
}
std::string optionalText(std::optional<double> v, const char* format) {
  return v && std::isfinite(*v) ? fmt::format(fmt::runtime(format), *v) : std::string("-");
}

// At most this many rows of the long tables: the newest, with a note of the rest.
constexpr std::size_t kMaxRows = 500;

}  // namespace

std::string formatHtml(const ReportData& data, std::string_view title) {
  const ReportTotals t = computeTotals(data);
  std::string out = "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>\n";
  out += fmt::format("<title>Starling report: {}</title>\n<style>{}</style>\n</head><body>\n", escapeXml(title),
                     pageStyle());
  out += fmt::format("<h1>Starling report</h1>\n<p class='sub'>{}</p>\n", escapeXml(title));
  out += "<div class='cards'>\n";
  out += card("rounds committed", fmt::format("{}", t.roundsCommitted));
  out += card("rounds abandoned", fmt::format("{}", t.roundsAbandoned));
  if (t.lastTestAccuracy)
    out += card(fmt::format("test accuracy (round {})", t.lastEvaluatedRound.value_or(0)),
                fmt::format("{:.2f}%", 100 * *t.lastTestAccuracy));
  else if (t.lastTestRmse)
    out += card(fmt::format("test RMSE (round {})", t.lastEvaluatedRound.value_or(0)),
                fmt::format("{:.4g}", *t.lastTestRmse));
  out +=
      card("up (wire / raw)", plot::humanBytes(double(t.bytesUpWire)) + " / " + plot::humanBytes(double(t.bytesUpRaw)));
  out += card("down (wire / raw)",
              plot::humanBytes(double(t.bytesDownWire)) + " / " + plot::humanBytes(double(t.bytesDownRaw)));
  out += card("compression, both ways", optionalText(t.compressionTotal, "x{:.1f}"));
  out += card("stragglers / dropped / rejected", fmt::format("{} / {} / {}", t.stragglers, t.dropped, t.rejected));
  out += card("refused at Hello", fmt::format("{}", t.refused));
  if (!data.rounds.empty() && data.rounds.back().epsilon)
    out += card("epsilon spent", optionalText(data.rounds.back().epsilon, "{:.4g}"));
  out += "</div>\n<h2>Plots</h2>\n";
  out += plot::figureSvg(roundsFigure(data.rounds));

  out += "<h2>Stragglers, drops and rejections by client</h2>\n";
  const std::vector<ClientTrouble> troubled = troubleByClient(data.participants);
  if (troubled.empty()) {
    out += "<p>None: every assigned client's update was accepted in its round.</p>\n";
  } else {
    out += "<table id='stragglers'>\n" + header({"client", "straggler", "dropped", "rejected", "late applied",
                                                 "late discarded", "last round", "last outcome", "its reason"});
    for (std::size_t i = 0; i < troubled.size() && i < kMaxRows; ++i) {
      const ClientTrouble& c = troubled[i];
      out += "<tr>" + td(c.clientId) + tdNumber(c.stragglers) + tdNumber(c.dropped) + tdNumber(c.rejected) +
             tdNumber(c.lateApplied) + tdNumber(c.lateDiscarded) + tdNumber(c.lastRound) + td(c.lastOutcome) +
             td(c.lastReason) + "</tr>\n";
    }
    out += "</table>\n";
    if (troubled.size() > kMaxRows) out += fmt::format("<p>and {} more clients</p>\n", troubled.size() - kMaxRows);
  }

  out += "<h2>Rounds</h2>\n<table id='rounds'>\n" +
         header({"round", "status", "reason", "selected", "returned", "accepted", "stragglers", "up", "down",
                 "duration", "train loss", "test loss", "test metric", "epsilon"});
  const std::size_t firstRound = data.rounds.size() > kMaxRows ? data.rounds.size() - kMaxRows : 0;
  if (firstRound > 0) out += fmt::format("<tr><td colspan='14'>{} earlier rounds left out</td></tr>\n", firstRound);
  for (std::size_t i = firstRound; i < data.rounds.size(); ++i) {
    const RoundRecord& r = data.rounds[i];
    out += "<tr>" + tdNumber(r.round) + td(roundStatusName(r.status)) + td(r.reason) + tdNumber(r.selected) +
           tdNumber(r.returned) + tdNumber(r.accepted) + tdNumber(r.stragglers) +
           tdn(plot::humanBytes(double(r.bytesUpWire))) + tdn(plot::humanBytes(double(r.bytesDownWire))) +
           tdn(fmt::format("{:.2f} s", double(r.endedMs - r.startedMs) / 1000)) +
           tdn(fmt::format("{:.4f}", r.trainLossStart)) + tdn(optionalText(r.testLoss, "{:.4f}")) +
           td(testFiguresText({r.testAccuracy, r.testAuc, r.testRmse, r.testR2})) +
           tdn(r.epsilon && std::isinf(*r.epsilon) ? std::string("inf") : optionalText(r.epsilon, "{:.4g}")) +
           "</tr>\n";
  }
  out += "</table>\n";

  out += "<h2>Participants not accepted</h2>\n";
  if (data.participants.empty()) {
    out += "<p>None.</p>\n";
  } else {
    out += "<table id='participants'>\n" + header({"round", "client", "outcome", "reason", "staleness"});
    const std::size_t first = data.participants.size() > kMaxRows ? data.participants.size() - kMaxRows : 0;
    if (first > 0) out += fmt::format("<tr><td colspan='5'>{} earlier rows left out</td></tr>\n", first);
    for (std::size_t i = first; i < data.participants.size(); ++i) {
      const ParticipantRecord& p = data.participants[i];
      out += "<tr>" + tdNumber(p.round) + td(p.clientId) + td(participantOutcomeName(p.outcome)) + td(p.reason) +
             tdNumber(p.staleness) + "</tr>\n";
    }
    out += "</table>\n";
  }

  out += "<h2>Clients refused at Hello</h2>\n";
  if (data.refusals.empty()) {
    out += "<p>None.</p>\n";
  } else {
    out += "<table id='refused'>\n" + header({"at", "client", "from", "reason"});
    for (const RefusalRecord& r : data.refusals)
      out += "<tr>" + td(utcTime(r.atMs)) + td(r.clientId) + td(r.peer) + td(r.reason) + "</tr>\n";
    out += "</table>\n";
  }
  out += "</body></html>\n";
  return out;
}

}  // namespace starling::coordinator
