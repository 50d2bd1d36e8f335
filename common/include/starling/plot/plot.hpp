#pragma once
// Line plots as SVG text, for every report Starling draws: the simulator's report.svg,
// the coordinator's dashboard and `starling-coordinator report --html`. Pure functions
// (data in, text out), no files, no scripts: the SVG stands alone or inline in a page.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace starling::plot {

// One line: (x, y) points in order. A point whose x is not positive is left out of a
// log-scale panel.
struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

// How a panel's y axis is labelled.
enum class YFormat {
  kNumber,   // 3 significant digits
  kPercent,  // y is a fraction, shown in %; the axis spans tenths (0.6 .. 0.9)
  kBytes,    // B, KiB, MiB, GiB
};

struct Panel {
  std::string title;
  std::string xLabel;
  bool logX = false;  // decades, labelled 1e6, 1e7, ...
  YFormat yFormat = YFormat::kNumber;
  // A dashed horizontal line (a target accuracy); the y axis includes it.
  std::optional<double> reference;
  std::vector<Series> series;  // coloured in order: color(0), color(1), ...
  // The series' names in the panel's top-right corner (when the figure's legend does
  // not already name them).
  bool legend = false;
};

// Panels in a grid (`columns` wide, 440 x 300 each), then a legend: one coloured line
// per name, and a grey note under it ("dashed: target 85%").
struct Figure {
  std::vector<Panel> panels;
  std::size_t columns = 2;
  std::vector<std::string> legend;
  std::string note;
};

// A complete <svg> element with a white background.
std::string figureSvg(const Figure& figure);

// The colour of series k ("#1f77b4", ...), cycling through eight.
const char* color(std::size_t k);

// Text safe inside XML and HTML elements and attributes: & < > " ' escaped.
std::string escapeXml(std::string_view text);

// "512 B", "1.5 KiB", "3.2 MiB", "1.25 GiB".
std::string humanBytes(double bytes);

}  // namespace starling::plot
