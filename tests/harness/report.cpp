// The simulator's output: per-round CSV, the summary table and the SVG report.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "starling/plot/plot.hpp"

#include "sim.hpp"

namespace starling::sim {

std::optional<RoundRow> StrategyResult::firstAtOrAbove(double target) const {
  for (const auto& r : rounds)
    if (r.accuracy && *r.accuracy >= target) return r;
  return std::nullopt;
}

std::optional<double> StrategyResult::finalAccuracy() const {
  for (auto r = rounds.rbegin(); r != rounds.rend(); ++r)
    if (r->accuracy) return *r->accuracy;
  return std::nullopt;
}

std::string roundsCsv(const StrategyResult& result) {
  std::string out =
      "round,committed,virtual_s,bytes_up,bytes_down,total_bytes,accuracy,test_loss,train_loss,tau,density_up,"
      "density_down,selected,participants,stragglers,dropped,sticky,payload_down,payload_down_sticky,started_s,"
      "steps_min,steps_mean,steps_max,compute_max_s,closer_steps,closer_compute_s,closer_link_s,auc,rmse,r2,fed_"
      "accuracy,fed_rmse,"
      "fed_examples,edge_bytes_up,edge_bytes_down,model_checksum,epsilon\n";
  auto opt = [](const std::optional<double>& v) { return v ? fmt::format("{:.4f}", *v) : std::string(); };
  for (const auto& r : result.rounds)
    out += fmt::format(
        "{},{},{:.3f},{},{},{},{},{},{:.4f},{},{:.6g},{:.6g},{},{},{},{},{},{},{},"
        "{:.3f},{},{:.1f},{},{:.3f},{},{:.3f},{:.3f},{},{},{},{},{},{},{},{},{:016x},{}\n",
        r.round, r.committed ? 1 : 0, r.virtualSeconds, r.bytesUp, r.bytesDown, r.totalBytes, opt(r.accuracy),
        opt(r.testLoss), r.trainLoss, r.tau, r.uplinkDensity, r.downlinkDensity, r.selected, r.participants,
        r.stragglers, r.dropped, r.sticky, r.payloadDown, r.payloadDownSticky, r.startedSeconds, r.stepsMin,
        r.stepsMean, r.stepsMax, r.computeMaxSeconds, r.closerSteps, r.closerComputeSeconds, r.closerLinkSeconds,
        opt(r.auc), opt(r.rmse), opt(r.r2), opt(r.fedAccuracy), opt(r.fedRmse), r.fedExamples, r.edgeBytesUp,
        r.edgeBytesDown, r.modelChecksum,
        !r.epsilon               ? std::string()
        : std::isinf(*r.epsilon) ? std::string("inf")
                                 : fmt::format("{:.6g}", *r.epsilon));
  return out;
}

namespace {

std::string duration(double seconds) {
  if (seconds < 120) return fmt::format("{:.1f} s", seconds);
  if (seconds < 7200) return fmt::format("{:.1f} min", seconds / 60);
  return fmt::format("{:.2f} h", seconds / 3600);
}

std::string megabytes(double bytes) {
  return bytes < 1e7 ? fmt::format("{:.2f} MB", bytes / 1e6) : fmt::format("{:.0f} MB", bytes / 1e6);
}

}  // namespace

std::string summaryTable(const std::vector<StrategyResult>& results, double target) {
  std::size_t width = 22;
  for (const auto& r : results)
    width = std::max(width, r.name.size());
  std::string out = fmt::format("{:<{}} {:>6} {:>9} {:>10} {:>10} {:>12} {:>11} {:>8} {:>8}\n", "strategy", width,
                                "rounds", "final acc", "bytes", "time", "bytes@" + fmt::format("{:.0f}%", target * 100),
                                "time@" + fmt::format("{:.0f}%", target * 100), "bytes x", "time x");
  std::optional<RoundRow> base = results.empty() ? std::nullopt : results.front().firstAtOrAbove(target);
  for (const auto& r : results) {
    uint64_t committed = 0;
    for (const auto& row : r.rounds)
      committed += row.committed ? 1 : 0;
    const auto fin = r.finalAccuracy();
    const auto hit = r.firstAtOrAbove(target);
    const double bytes = r.rounds.empty() ? 0 : double(r.rounds.back().totalBytes);
    const double time = r.rounds.empty() ? 0 : r.rounds.back().virtualSeconds;
    std::string bx = "-", tx = "-";
    if (hit && base) {
      bx = fmt::format("{:.1f}", double(base->totalBytes) / double(std::max<uint64_t>(1, hit->totalBytes)));
      tx = fmt::format("{:.1f}", base->virtualSeconds / std::max(1e-9, hit->virtualSeconds));
    }
    out +=
        fmt::format("{:<{}} {:>6} {:>9} {:>10} {:>10} {:>12} {:>11} {:>8} {:>8}{}\n", r.name, width, committed,
                    fin ? fmt::format("{:.2f}%", *fin * 100) : "-", megabytes(bytes), duration(time),
                    hit ? megabytes(double(hit->totalBytes)) : "not reached", hit ? duration(hit->virtualSeconds) : "-",
                    bx, tx, r.stopped.empty() ? "" : "  (stopped: " + r.stopped + ")");
  }
  return out;
}

namespace {

// What the panels plot: test accuracy (classification, binary; with the target) or,
// for a regression, test RMSE.
struct Metric {
  const char* name;
  std::optional<double> RoundRow::*field;
  bool percent;  // accuracy: a fraction shown in %, with the target line
};

// One panel: the metric (y) against x(row) / xScale, a series per strategy.
plot::Panel panel(const std::vector<StrategyResult>& results, double target, const std::string& title,
                  const std::string& xLabel, bool logX, double xScale, double (*x)(const RoundRow&),
                  const Metric& metric) {
  plot::Panel p;
  p.title = title;
  p.xLabel = xLabel;
  p.logX = logX;
  p.yFormat = metric.percent ? plot::YFormat::kPercent : plot::YFormat::kNumber;
  if (metric.percent) p.reference = target;
  for (const auto& r : results) {
    plot::Series series{r.name, {}};
    for (const auto& row : r.rounds)
      if (row.*metric.field) series.points.emplace_back(x(row) / xScale, *(row.*metric.field));
    p.series.push_back(std::move(series));
  }
  return p;
}

}  // namespace

std::string reportSvg(const std::vector<StrategyResult>& results, double target) {
  double maxSeconds = 0;
  for (const auto& r : results)
    if (!r.rounds.empty()) maxSeconds = std::max(maxSeconds, r.rounds.back().virtualSeconds);
  const bool hours = maxSeconds > 7200;
  // A regression has no accuracy: its panels plot the RMSE.
  bool anyAccuracy = false, anyRmse = false;
  for (const auto& r : results)
    for (const auto& row : r.rounds) {
      anyAccuracy = anyAccuracy || row.accuracy.has_value();
      anyRmse = anyRmse || row.rmse.has_value();
    }
  const Metric metric =
      !anyAccuracy && anyRmse ? Metric{"RMSE", &RoundRow::rmse, false} : Metric{"accuracy", &RoundRow::accuracy, true};
  plot::Figure figure;
  figure.panels.push_back(panel(
      results, target, fmt::format("Test {} vs bytes (both ways)", metric.name), "bytes, log scale", true, 1.0,
      [](const RoundRow& r) { return double(r.totalBytes); }, metric));
  figure.panels.push_back(panel(
      results, target, fmt::format("Test {} vs virtual time", metric.name),
      hours ? "virtual time, hours" : "virtual time, minutes", false, hours ? 3600.0 : 60.0,
      [](const RoundRow& r) { return r.virtualSeconds; }, metric));
  for (const auto& r : results)
    figure.legend.push_back(r.name);
  if (metric.percent) figure.note = fmt::format("dashed: target {:.0f}%", target * 100);
  return plot::figureSvg(figure);
}

}  // namespace starling::sim
