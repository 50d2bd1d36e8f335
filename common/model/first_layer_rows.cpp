// Model::firstLayerRows and Model::denseParams: which parameters a row of the first
// layer owns (model.hpp), for sparse pull and push.
#include <string>

#include "network.hpp"

namespace starling::model {

Result<std::vector<ParamRange>> Model::firstLayerRows(std::span<const uint32_t> rows) const {
  if (!acceptsSparse()) {
    return Status(StatusCode::kInvalidArgument,
                  "model " + spec() + " has no first-layer rows (linear, mlp and embedbag do)");
  }
  const detail::Layer& first = net_->layers.front();
  const std::size_t in = static_cast<std::size_t>(first.in.c);
  const std::size_t out = static_cast<std::size_t>(first.out.c);
  for (std::size_t k = 0; k < rows.size(); ++k) {
    if (rows[k] >= in || (k > 0 && rows[k] <= rows[k - 1])) {
      return Status(StatusCode::kInvalidArgument, "first-layer rows must increase and lie below the model's " +
                                                      std::to_string(in) + " inputs; position " + std::to_string(k) +
                                                      " (row " + std::to_string(rows[k]) + ") does not");
    }
  }
  std::vector<ParamRange> ranges;
  // Appends [offset, offset + count), merging it into the last range when adjacent.
  auto add = [&ranges](std::size_t offset, std::size_t count) {
    if (!ranges.empty() && ranges.back().offset + ranges.back().count == offset) {
      ranges.back().count += count;
    } else {
      ranges.push_back({offset, count});
    }
  };
  if (first.kind == detail::LayerKind::kEmbedBag) {
    for (uint32_t j : rows)
      add(first.weightOffset + j * out, out);
  } else {
    // dense0.weight is {out, in}: row j is a column, one float per output.
    for (std::size_t o = 0; o < out; ++o) {
      const std::size_t base = first.weightOffset + o * in;
      for (uint32_t j : rows)
        add(base + j, 1);
    }
  }
  return ranges;
}

ParamRange Model::denseParams() const {
  if (!acceptsSparse()) return {0, params_.size()};
  const std::size_t bias = net_->layers.front().biasOffset;
  return {bias, params_.size() - bias};
}

}  // namespace starling::model
