// Conformance runners of the sequence and embedding ops (conformance.hpp): GRU through
// kGru, Gather as an embedding lookup and ReduceSum/ReduceMean over the token axis
// through kEmbedBag (sum and mean).
#include <cmath>

#include "conformance.hpp"

namespace starling::conformance {
namespace {

using model::detail::Layer;
using model::detail::LayerKind;
using model::detail::Shape;

// GRU: Starling's kGru on X [T, N, F] (layout 0) or [N, T, F] (layout 1); the output
// compared is the graph's first: Y_h, the last hidden state, or Y, every step's.
Outcome runGru(const NodeCase& c) {
  const onnx::NodeProto& n = c.node();
  if (std::string u = unknownAttributes(n, {"hidden_size", "layout", "linear_before_reset", "direction"}); !u.empty())
    return Outcome::skip(u);
  if (attrString(n, "direction", "forward") != "forward") return Outcome::skip("a direction other than forward");
  if (c.input(4)) return Outcome::skip("sequence_lens (Starling's sequences have all their steps)");
  if (const Tensor* h0 = c.input(5))
    for (float v : h0->values)
      if (v != 0.0f) return Outcome::skip("a non-zero initial_h");
  const std::string& expected = c.model.graph().output(0).name();
  const bool wantY = n.output_size() > 0 && n.output(0) == expected;  // else Y_h
  if (!wantY && (n.output_size() < 2 || n.output(1) != expected))
    return Outcome::skip("the expected output is neither Y nor Y_h");
  const Tensor* x = c.input(0);
  const Tensor* w = c.input(1);
  const Tensor* r = c.input(2);
  const Tensor* b = c.input(3);
  const bool batchFirst = attrInt(n, "layout", 0) == 1;
  const int steps = static_cast<int>(x->dim(batchFirst ? 1 : 0));
  const int batch = static_cast<int>(x->dim(batchFirst ? 0 : 1));
  const int features = static_cast<int>(x->dim(2));
  const int hidden = static_cast<int>(attrInt(n, "hidden_size", 0));
  Layer l;
  l.kind = LayerKind::kGru;
  l.in = Shape{steps * features, 1, 1};
  l.out = Shape{hidden, 1, 1};
  l.steps = steps;
  l.resetBefore = attrInt(n, "linear_before_reset", 0) == 0;  // gru:lbr0:
  l.weightOffset = 0;
  std::vector<float> params = w->values;
  params.insert(params.end(), r->values.begin(), r->values.end());
  l.biasOffset = params.size();
  if (b)
    params.insert(params.end(), b->values.begin(), b->values.end());
  else
    params.resize(params.size() + static_cast<std::size_t>(6) * hidden, 0.0f);
  // Starling's examples are step-major: example i's step t at (i * T + t) * F.
  std::vector<float> examples(x->values.size());
  for (int i = 0; i < batch; ++i)
    for (int t = 0; t < steps; ++t)
      for (int f = 0; f < features; ++f) {
        const std::size_t from = batchFirst ? (static_cast<std::size_t>(i) * steps + t) * features + f
                                            : (static_cast<std::size_t>(t) * batch + i) * features + f;
        examples[(static_cast<std::size_t>(i) * steps + t) * features + f] = x->values[from];
      }
  Tensor y;
  if (!wantY) {
    y.dims = batchFirst ? std::vector<int64_t>{batch, 1, hidden} : std::vector<int64_t>{1, batch, hidden};
    y.values = runLayer(l, params, examples, batch);
    return Outcome::output(std::move(y));
  }
  // Y, every step: step t's hidden state is the last state of the layer run over the
  // first t + 1 steps of each example.
  y.dims = batchFirst ? std::vector<int64_t>{batch, steps, 1, hidden} : std::vector<int64_t>{steps, 1, batch, hidden};
  y.values.resize(static_cast<std::size_t>(steps) * batch * hidden);
  for (int t = 0; t < steps; ++t) {
    Layer prefix = l;
    prefix.steps = t + 1;
    prefix.in = Shape{(t + 1) * features, 1, 1};
    std::vector<float> part;
    for (int i = 0; i < batch; ++i) {
      const auto from = examples.begin() + static_cast<std::ptrdiff_t>(i) * steps * features;
      part.insert(part.end(), from, from + static_cast<std::ptrdiff_t>(t + 1) * features);
    }
    const std::vector<float> h = runLayer(prefix, params, part, batch);
    for (int i = 0; i < batch; ++i)
      for (int k = 0; k < hidden; ++k) {
        const std::size_t to = batchFirst ? (static_cast<std::size_t>(i) * steps + t) * hidden + k
                                          : (static_cast<std::size_t>(t) * batch + i) * hidden + k;
        y.values[to] = h[static_cast<std::size_t>(i) * hidden + k];
      }
  }
  return Outcome::output(std::move(y));
}

// Rows of a table as a sum embedding bag: example k is the one-hot bag of ids[k].
std::vector<float> lookUp(const std::vector<float>& table, int rows, int width, const std::vector<int>& ids, bool mean,
                          const std::vector<float>& counts) {
  Layer l;
  l.kind = LayerKind::kEmbedBag;
  l.in = Shape{rows, 1, 1};
  l.out = Shape{width, 1, 1};
  l.mean = mean;
  l.weightOffset = 0;
  l.biasOffset = table.size();
  std::vector<float> params = table;
  params.resize(params.size() + static_cast<std::size_t>(width), 0.0f);
  std::vector<float> x;
  if (counts.empty()) {
    x.assign(ids.size() * static_cast<std::size_t>(rows), 0.0f);
    for (std::size_t k = 0; k < ids.size(); ++k)
      x[k * static_cast<std::size_t>(rows) + static_cast<std::size_t>(ids[k])] = 1.0f;
  } else {
    x = counts;
  }
  return runLayer(l, params, x, static_cast<int>(x.size() / static_cast<std::size_t>(rows)));
}

// Gather(axis 0) of rows of a table by non-negative ids: one example per id.
Outcome runGather(const NodeCase& c) {
  const onnx::NodeProto& n = c.node();
  if (attrInt(n, "axis", 0) != 0) return Outcome::skip("axis != 0: not an embedding lookup (rows of a table)");
  const Tensor* data = c.input(0);
  const Tensor* indices = c.input(1);
  if (data->rank() < 2) return Outcome::skip("a table of rank 1 (an embedding table has rows)");
  std::vector<int> ids;
  for (float v : indices->values) {
    if (v < 0) return Outcome::skip("negative indices (token ids are >= 0)");
    ids.push_back(static_cast<int>(v));
  }
  const int rows = static_cast<int>(data->dim(0));
  const int width = static_cast<int>(data->count() / static_cast<std::size_t>(rows));
  Tensor y;
  y.dims = indices->dims;
  y.dims.insert(y.dims.end(), data->dims.begin() + 1, data->dims.end());
  y.values = lookUp(data->values, rows, width, ids, false, {});
  return Outcome::output(std::move(y));
}

// ReduceSum/ReduceMean over axis 1 of N x L x E: per example the L rows as a table and
// a bag of every row once.
Outcome reduceTokens(const NodeCase& c, bool mean) {
  const onnx::NodeProto& n = c.node();
  const Tensor* data = c.input(0);
  std::vector<int64_t> axes = attrInts(n, "axes");
  if (const Tensor* a = c.input(1))
    for (float v : a->values)
      axes.push_back(static_cast<int64_t>(v));
  if (data->rank() != 3) return Outcome::skip("data of rank != 3 (an embedding bag reduces N x tokens x width)");
  if (axes.size() != 1 || (axes[0] != 1 && axes[0] != -2))
    return Outcome::skip("axes other than the token axis (1) of N x tokens x width");
  const int batch = static_cast<int>(data->dim(0));
  const int tokens = static_cast<int>(data->dim(1));
  const int width = static_cast<int>(data->dim(2));
  Tensor y;
  y.dims = attrInt(n, "keepdims", 1) ? std::vector<int64_t>{batch, 1, width} : std::vector<int64_t>{batch, width};
  const std::vector<float> ones(static_cast<std::size_t>(tokens), 1.0f);
  for (int i = 0; i < batch; ++i) {
    const auto from = data->values.begin() + static_cast<std::ptrdiff_t>(i) * tokens * width;
    const std::vector<float> table(from, from + static_cast<std::ptrdiff_t>(tokens) * width);
    const std::vector<float> bag = lookUp(table, tokens, width, {}, mean, ones);
    y.values.insert(y.values.end(), bag.begin(), bag.end());
  }
  return Outcome::output(std::move(y));
}

Outcome runReduceSum(const NodeCase& c) {
  if (std::string u = unknownAttributes(c.node(), {"keepdims", "noop_with_empty_axes"}); !u.empty())
    return Outcome::skip(u);
  return reduceTokens(c, false);
}
Outcome runReduceMean(const NodeCase& c) {
  if (std::string u = unknownAttributes(c.node(), {"keepdims", "axes"}); !u.empty()) return Outcome::skip(u);
  return reduceTokens(c, true);
}

const Register kGru("GRU", runGru);
const Register kGather("Gather", runGather);
const Register kReduceSum("ReduceSum", runReduceSum);
const Register kReduceMean("ReduceMean", runReduceMean);

}  // namespace
}  // namespace starling::conformance
