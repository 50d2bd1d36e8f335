// The simulator's output: per-round CSV, the summary table and the SVG report.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

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

constexpr std::array<const char*, 8> kColors = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                                "#9467bd", "#17becf", "#8c564b", "#e377c2"};

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double map(double v, double from, double to) const {
    const double x = log ? std::log10(std::max(v, 1e-12)) : v;
    return from + (x - lo) / (hi - lo) * (to - from);
  }
};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// What the panels plot: test accuracy (classification, binary; with the target) or,
// for a regression, test RMSE.
struct Metric {
  const char* name;
  std::optional<double> RoundRow::*field;
  bool percent;  // accuracy: a fraction shown in %, with the target line
};

// One panel: the metric (y) against x(row), at (left, top) of size w x h.
std::string panel(const std::vector<StrategyResult>& results, double target, const std::string& title,
                  const std::string& xLabel, bool logX, double xScale, double left, double top, double w, double h,
                  double (*x)(const RoundRow&), const Metric& metric) {
  double xmin = 1e300, xmax = -1e300, ymin = metric.percent ? 1 : 1e300, ymax = metric.percent ? 0 : -1e300;
  for (const auto& r : results)
    for (const auto& row : r.rounds)
      if (row.*metric.field) {
        const double v = x(row) / xScale;
        if (logX && v <= 0) continue;
        xmin = std::min(xmin, v);
        xmax = std::max(xmax, v);
        ymin = std::min(ymin, *(row.*metric.field));
        ymax = std::max(ymax, *(row.*metric.field));
      }
  if (xmin > xmax) xmin = logX ? 1 : 0, xmax = logX ? 10 : 1;  // nothing to plot (a task without accuracy)
  Axis ax{logX ? std::floor(std::log10(xmin)) : 0.0, logX ? std::ceil(std::log10(xmax)) : xmax, logX};
  if (ax.hi <= ax.lo) ax.hi = ax.lo + 1;
  Axis ay;
  double yStep = 0.05;
  if (metric.percent) {
    ay = Axis{std::max(0.0, std::floor(std::min(ymin, target) * 10) / 10),
              std::min(1.0, std::ceil(std::max(ymax, target) * 10 + 1e-9) / 10)};
    if (ay.hi <= ay.lo) ay.hi = ay.lo + 0.1;
  } else {
    if (ymin > ymax) ymin = 0, ymax = 1;
    ay = Axis{0.0, ymax > 0 ? ymax * 1.05 : 1.0};
    yStep = ay.hi / 5;
  }
  std::string s;
  s += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#444'/>\n", left, top, w, h);
  s += fmt::format("<text x='{}' y='{}' text-anchor='middle' font-size='14' font-weight='bold'>{}</text>\n",
                   left + w / 2, top - 10, escape(title));
  s += fmt::format("<text x='{}' y='{}' text-anchor='middle' font-size='12'>{}</text>\n", left + w / 2, top + h + 36,
                   escape(xLabel));
  // Grid and ticks.
  for (double yv = ay.lo; yv <= ay.hi + 1e-9 * ay.hi; yv += yStep) {
    const double py = ay.map(yv, top + h, top);
    s += fmt::format("<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' stroke='#ddd'/>\n", left, py, left + w, py);
    s += fmt::format("<text x='{}' y='{:.1f}' text-anchor='end' font-size='11'>{}</text>\n", left - 4, py + 4,
                     metric.percent ? fmt::format("{:.0f}%", yv * 100) : fmt::format("{:.3g}", yv));
  }
  if (logX) {
    for (double e = ax.lo; e <= ax.hi + 1e-9; e += 1) {
      const double px = left + (e - ax.lo) / (ax.hi - ax.lo) * w;
      s += fmt::format("<line x1='{:.1f}' y1='{}' x2='{:.1f}' y2='{}' stroke='#ddd'/>\n", px, top, px, top + h);
      s += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle' font-size='11'>1e{:.0f}</text>\n", px,
                       top + h + 16, e);
    }
  } else {
    for (int i = 0; i <= 5; ++i) {
      const double v = ax.lo + (ax.hi - ax.lo) * i / 5;
      const double px = left + w * i / 5;
      s += fmt::format("<line x1='{:.1f}' y1='{}' x2='{:.1f}' y2='{}' stroke='#ddd'/>\n", px, top, px, top + h);
      s += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle' font-size='11'>{:.3g}</text>\n", px, top + h + 16,
                       v);
    }
  }
  if (metric.percent) {
    const double ty = ay.map(target, top + h, top);
    s += fmt::format("<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' stroke='#888' stroke-dasharray='6,4'/>\n", left, ty,
                     left + w, ty);
  }
  for (std::size_t k = 0; k < results.size(); ++k) {
    std::string pts;
    for (const auto& row : results[k].rounds) {
      if (!(row.*metric.field)) continue;
      const double v = x(row) / xScale;
      if (logX && v <= 0) continue;
      pts += fmt::format("{:.1f},{:.1f} ", ax.map(v, left, left + w), ay.map(*(row.*metric.field), top + h, top));
    }
    s += fmt::format("<polyline fill='none' stroke='{}' stroke-width='2' points='{}'/>\n", kColors[k % kColors.size()],
                     pts);
  }
  return s;
}

}  // namespace

std::string reportSvg(const std::vector<StrategyResult>& results, double target) {
  const double w = 440, h = 300, top = 50, left1 = 60, left2 = 580;
  double maxSeconds = 0;
  for (const auto& r : results)
    if (!r.rounds.empty()) maxSeconds = std::max(maxSeconds, r.rounds.back().virtualSeconds);
  const bool hours = maxSeconds > 7200;
  std::string s = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='1060' height='{}' font-family='sans-serif'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n",
      top + h + 60 + 20 * results.size());
  // A regression has no accuracy: its panels plot the RMSE.
  bool anyAccuracy = false, anyRmse = false;
  for (const auto& r : results)
    for (const auto& row : r.rounds) {
      anyAccuracy = anyAccuracy || row.accuracy.has_value();
      anyRmse = anyRmse || row.rmse.has_value();
    }
  const Metric metric =
      !anyAccuracy && anyRmse ? Metric{"RMSE", &RoundRow::rmse, false} : Metric{"accuracy", &RoundRow::accuracy, true};
  s += panel(
      results, target, fmt::format("Test {} vs bytes (both ways)", metric.name), "bytes, log scale", true, 1.0, left1,
      top, w, h, [](const RoundRow& r) { return double(r.totalBytes); }, metric);
  s += panel(
      results, target, fmt::format("Test {} vs virtual time", metric.name),
      hours ? "virtual time, hours" : "virtual time, minutes", false, hours ? 3600.0 : 60.0, left2, top, w, h,
      [](const RoundRow& r) { return r.virtualSeconds; }, metric);
  for (std::size_t k = 0; k < results.size(); ++k) {
    const double y = top + h + 60 + 20 * double(k);
    s += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='{}' stroke-width='3'/>\n", left1, y - 4, left1 + 30,
                     y - 4, kColors[k % kColors.size()]);
    s += fmt::format("<text x='{}' y='{}' font-size='12'>{}</text>\n", left1 + 38, y, escape(results[k].name));
  }
  if (metric.percent)
    s += fmt::format("<text x='{}' y='{}' font-size='12' fill='#666'>dashed: target {:.0f}%</text>\n", left2,
                     top + h + 60, target * 100);
  s += "</svg>\n";
  return s;
}

}  // namespace starling::sim
