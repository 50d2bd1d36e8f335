// RowView and compactSpec (row_view.hpp).
#include "starling/model/row_view.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

#include "starling/util/checksum.hpp"

namespace starling::model {

namespace {

// Where a linear, mlp or embedbag spec writes its input size: [first, second).
Result<std::pair<std::size_t, std::size_t>> inputSizeAt(std::string_view spec) {
  const std::size_t colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  if (colon == std::string_view::npos || (kind != "linear" && kind != "mlp" && kind != "embedbag"))
    return Status(StatusCode::kInvalidArgument,
                  "model " + std::string(spec) + " has no first-layer rows (linear, mlp and embedbag do)");
  std::size_t start = colon + 1;
  // An activation prefix ("tanh:") comes before the sizes.
  if (start < spec.size() && std::isalpha(static_cast<unsigned char>(spec[start]))) {
    const std::size_t next = spec.find(':', start);
    if (next == std::string_view::npos)
      return Status(StatusCode::kInvalidArgument, "model " + std::string(spec) + " has no sizes");
    start = next + 1;
  }
  std::size_t end = start;
  while (end < spec.size() && std::isdigit(static_cast<unsigned char>(spec[end])))
    ++end;
  if (end == start || end - start > 12)
    return Status(StatusCode::kInvalidArgument, "model " + std::string(spec) + " has no input size");
  return std::pair(start, end);
}

}  // namespace

Result<std::string> compactSpec(std::string_view spec, std::size_t inputs) {
  if (inputs == 0) return Status(StatusCode::kInvalidArgument, "a compact model needs at least one input");
  auto at = inputSizeAt(spec);
  if (!at) return at.status();
  return std::string(spec.substr(0, at->first)) + std::to_string(inputs) + std::string(spec.substr(at->second));
}

Result<std::size_t> specInputs(std::string_view spec) {
  auto at = inputSizeAt(spec);
  if (!at) return at.status();
  return static_cast<std::size_t>(std::stoull(std::string(spec.substr(at->first, at->second - at->first))));
}

Result<std::shared_ptr<const RowView>> RowView::create(const Model& model, std::vector<uint32_t> rows) {
  if (rows.empty()) return Status(StatusCode::kInvalidArgument, "a row view needs at least one row");
  auto ranges = model.firstLayerRows(rows);
  if (!ranges) return ranges.status();
  auto spec = compactSpec(model.spec(), rows.size());
  if (!spec) return spec.status();
  std::shared_ptr<RowView> v(new RowView());
  v->ranges_ = std::move(*ranges);
  const ParamRange dense = model.denseParams();
  if (!v->ranges_.empty() && v->ranges_.back().offset + v->ranges_.back().count == dense.offset)
    v->ranges_.back().count += dense.count;
  else
    v->ranges_.push_back(dense);
  v->starts_.reserve(v->ranges_.size());
  for (const ParamRange& r : v->ranges_) {
    v->starts_.push_back(v->size_);
    v->size_ += r.count;
  }
  v->fullSize_ = model.numParams();
  v->rows_ = std::move(rows);
  v->spec_ = std::move(*spec);
  return std::shared_ptr<const RowView>(std::move(v));
}

Status RowView::checkCompact() const {
  auto compact = Model::fromSpec(spec_);
  if (!compact) return compact.status().withContext("the compact model");
  if (compact->numParams() != size_)
    return Status(StatusCode::kInternal, "the compact model " + spec_ + " has " + std::to_string(compact->numParams()) +
                                             " parameters, the view " + std::to_string(size_));
  return Status::ok();
}

void RowView::gather(std::span<const float> full, std::span<float> out) const {
  for (std::size_t k = 0; k < ranges_.size(); ++k)
    std::copy_n(full.begin() + static_cast<std::ptrdiff_t>(ranges_[k].offset), ranges_[k].count,
                out.begin() + static_cast<std::ptrdiff_t>(starts_[k]));
}

void RowView::scatter(std::span<const float> compact, std::span<float> full) const {
  for (std::size_t k = 0; k < ranges_.size(); ++k)
    std::copy_n(compact.begin() + static_cast<std::ptrdiff_t>(starts_[k]), ranges_[k].count,
                full.begin() + static_cast<std::ptrdiff_t>(ranges_[k].offset));
}

std::vector<float> RowView::gather(std::span<const float> full) const {
  std::vector<float> out(size_);
  gather(full, out);
  return out;
}

uint64_t RowView::checksum(std::span<const float> full) const {
  return checksum64(gather(full));
}

Status RowView::toFull(std::span<uint32_t> positions) const {
  std::size_t k = 0;  // the range of the current position: positions increase, so k only grows
  uint32_t previous = 0;
  for (std::size_t i = 0; i < positions.size(); ++i) {
    const uint32_t p = positions[i];
    if (p >= size_)
      return Status(StatusCode::kInvalidArgument, "compact position " + std::to_string(p) + " is past the view's " +
                                                      std::to_string(size_) + " parameters");
    if (i > 0 && p <= previous)
      return Status(StatusCode::kInvalidArgument,
                    "compact positions must increase; position " + std::to_string(i) + " does not");
    previous = p;
    while (k + 1 < starts_.size() && starts_[k + 1] <= p)
      ++k;
    positions[i] = static_cast<uint32_t>(ranges_[k].offset + (p - starts_[k]));
  }
  return Status::ok();
}

}  // namespace starling::model
