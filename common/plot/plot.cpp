// Line plots as SVG text (plot.hpp).
#include "starling/plot/plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace starling::plot {

namespace {

constexpr std::array<const char*, 8> kColors = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                                "#9467bd", "#17becf", "#8c564b", "#e377c2"};

constexpr double kWidth = 440, kHeight = 300;  // one panel
constexpr double kCellWidth = 520;             // a panel and the gap to the next
constexpr double kCellHeight = kHeight + 90;   // a panel, its x label and the next title
constexpr double kLeft = 60, kTop = 50;
constexpr std::size_t kMaxPoints = 1000;  // drawn per line

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double map(double v, double from, double to) const {
    const double x = log ? std::log10(std::max(v, 1e-12)) : v;
    return from + (x - lo) / (hi - lo) * (to - from);
  }
};

std::string yTick(double v, YFormat format) {
  switch (format) {
    case YFormat::kPercent:
      return fmt::format("{:.0f}%", v * 100);
    case YFormat::kBytes:
      return humanBytes(v);
    case YFormat::kNumber:
      break;
  }
  return fmt::format("{:.3g}", v);
}

bool plotted(const Panel& panel, double x) {
  return !panel.logX || x > 0;
}

// A step of 1, 2 or 5 times a power of ten, about range / 5.
double niceStep(double range) {
  if (!(range > 0)) return 1;
  const double raw = range / 5;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / decade;
  return decade * (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10);
}

std::string panelSvg(const Panel& panel, double left, double top, double w, double h) {
  double xmin = 1e300, xmax = -1e300;
  double ymin = panel.yFormat == YFormat::kPercent ? 1 : 1e300;
  double ymax = panel.yFormat == YFormat::kPercent ? 0 : -1e300;
  for (const Series& series : panel.series)
    for (const auto& [x, y] : series.points) {
      if (!plotted(panel, x) || !std::isfinite(x) || !std::isfinite(y)) continue;
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
    }
  if (xmin > xmax) xmin = panel.logX ? 1 : 0, xmax = panel.logX ? 10 : 1;  // nothing to plot yet
  Axis ax{panel.logX ? std::floor(std::log10(xmin)) : 0.0, panel.logX ? std::ceil(std::log10(xmax)) : xmax, panel.logX};
  if (ax.hi <= ax.lo) ax.hi = ax.lo + 1;
  const double xStep = niceStep(ax.hi - ax.lo);
  if (!panel.logX) ax.hi = ax.lo + std::ceil((ax.hi - ax.lo) / xStep - 1e-9) * xStep;
  Axis ay;
  double yStep = 0.05;
  if (panel.yFormat == YFormat::kPercent) {
    if (ymin > ymax) ymin = 0, ymax = 1;  // nothing to plot yet: the whole range
    const double lo = panel.reference ? std::min(ymin, *panel.reference) : ymin;
    const double hi = panel.reference ? std::max(ymax, *panel.reference) : ymax;
    ay = Axis{std::max(0.0, std::floor(lo * 10) / 10), std::min(1.0, std::ceil(hi * 10 + 1e-9) / 10)};
    if (ay.hi <= ay.lo) {  // every value on one tenth: a tenth around it, within 0-100%
      if (ay.lo >= 1)
        ay.lo = 0.9;
      else
        ay.hi = ay.lo + 0.1;
    }
  } else {
    if (ymin > ymax) ymin = 0, ymax = 1;
    if (panel.reference) ymax = std::max(ymax, *panel.reference);
    yStep = niceStep(ymax > 0 ? ymax : 1.0);
    ay = Axis{0.0, ymax > 0 ? std::ceil(ymax / yStep - 1e-9) * yStep : 1.0};
    if (ay.hi <= ymax) ay.hi += yStep;  // room above the highest point
  }
  std::string s;
  s += fmt::format("<g class='panel'>\n");
  s += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#444'/>\n", left, top, w, h);
  s += fmt::format("<text x='{}' y='{}' text-anchor='middle' font-size='14' font-weight='bold'>{}</text>\n",
                   left + w / 2, top - 10, escapeXml(panel.title));
  s += fmt::format("<text x='{}' y='{}' text-anchor='middle' font-size='12'>{}</text>\n", left + w / 2, top + h + 36,
                   escapeXml(panel.xLabel));
  // Grid and ticks.
  for (double yv = ay.lo; yv <= ay.hi + 1e-9 * ay.hi; yv += yStep) {
    const double py = ay.map(yv, top + h, top);
    s += fmt::format("<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' stroke='#ddd'/>\n", left, py, left + w, py);
    s += fmt::format("<text x='{}' y='{:.1f}' text-anchor='end' font-size='11'>{}</text>\n", left - 4, py + 4,
                     yTick(yv, panel.yFormat));
  }
  if (panel.logX) {
    for (double e = ax.lo; e <= ax.hi + 1e-9; e += 1) {
      const double px = left + (e - ax.lo) / (ax.hi - ax.lo) * w;
      s += fmt::format("<line x1='{:.1f}' y1='{}' x2='{:.1f}' y2='{}' stroke='#ddd'/>\n", px, top, px, top + h);
      s += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle' font-size='11'>1e{:.0f}</text>\n", px,
                       top + h + 16, e);
    }
  } else {
    for (double v = ax.lo; v <= ax.hi + 1e-9 * (ax.hi - ax.lo); v += xStep) {
      const double px = ax.map(v, left, left + w);
      s += fmt::format("<line x1='{:.1f}' y1='{}' x2='{:.1f}' y2='{}' stroke='#ddd'/>\n", px, top, px, top + h);
      s += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle' font-size='11'>{:.3g}</text>\n", px, top + h + 16,
                       v);
    }
  }
  if (panel.reference) {
    const double ty = ay.map(*panel.reference, top + h, top);
    s += fmt::format("<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' stroke='#888' stroke-dasharray='6,4'/>\n", left, ty,
                     left + w, ty);
  }
  for (std::size_t k = 0; k < panel.series.size(); ++k) {
    // A line of more than kMaxPoints points is drawn through every stride-th one (and
    // the last): long runs stay a few hundred kB of SVG.
    const auto& points = panel.series[k].points;
    const std::size_t stride = std::max<std::size_t>(1, (points.size() + kMaxPoints - 1) / kMaxPoints);
    std::string pts;
    for (std::size_t i = 0; i < points.size(); ++i) {
      if (i % stride != 0 && i + 1 != points.size()) continue;
      const auto& [x, y] = points[i];
      if (!plotted(panel, x) || !std::isfinite(x) || !std::isfinite(y)) continue;
      pts += fmt::format("{:.1f},{:.1f} ", ax.map(x, left, left + w), ay.map(y, top + h, top));
    }
    s += fmt::format("<polyline fill='none' stroke='{}' stroke-width='2' points='{}'><title>{}</title></polyline>\n",
                     color(k), pts, escapeXml(panel.series[k].name));
  }
  if (panel.legend)
    for (std::size_t k = 0; k < panel.series.size(); ++k) {
      const double y = top + 18 + 16 * double(k);
      s += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='{}' stroke-width='3'/>\n", left + w - 120, y - 4,
                       left + w - 100, y - 4, color(k));
      s += fmt::format("<text x='{}' y='{}' font-size='11'>{}</text>\n", left + w - 95, y,
                       escapeXml(panel.series[k].name));
    }
  s += "</g>\n";
  return s;
}

}  // namespace

const char* color(std::size_t k) {
  return kColors[k % kColors.size()];
}

std::string escapeXml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string humanBytes(double bytes) {
  if (bytes < 1024) return fmt::format("{:.0f} B", bytes);
  if (bytes < 1024.0 * 1024.0) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < 1024.0 * 1024.0 * 1024.0) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0));
  return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

std::string figureSvg(const Figure& figure) {
  const std::size_t columns = std::max<std::size_t>(1, std::min(figure.columns, figure.panels.size()));
  const std::size_t rows = (figure.panels.size() + columns - 1) / columns;
  const double legendTop = kTop + double(rows) * kCellHeight - 30;
  const double width = kLeft + double(columns) * kCellWidth;
  const double height =
      legendTop + 20 * double(figure.legend.size()) + (figure.note.empty() ? 0 : 20) + (rows == 0 ? 0 : 10);
  std::string s = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' viewBox='0 0 {} {}' font-family='sans-serif'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n",
      width, height, width, height);
  for (std::size_t i = 0; i < figure.panels.size(); ++i)
    s += panelSvg(figure.panels[i], kLeft + double(i % columns) * kCellWidth, kTop + double(i / columns) * kCellHeight,
                  kWidth, kHeight);
  double y = legendTop;
  for (std::size_t k = 0; k < figure.legend.size(); ++k, y += 20) {
    s += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='{}' stroke-width='3'/>\n", kLeft, y - 4, kLeft + 30,
                     y - 4, color(k));
    s += fmt::format("<text x='{}' y='{}' font-size='12'>{}</text>\n", kLeft + 38, y, escapeXml(figure.legend[k]));
  }
  if (!figure.note.empty())
    s += fmt::format("<text x='{}' y='{}' font-size='12' fill='#666'>{}</text>\n", kLeft, y, escapeXml(figure.note));
  s += "</svg>\n";
  return s;
}

}  // namespace starling::plot
