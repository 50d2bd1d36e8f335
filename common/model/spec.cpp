// The model spec grammar (docs/model.md) and the network it builds.
#include <charconv>
#include <string>
#include <vector>

#include "network.hpp"

namespace starling::model::detail {
namespace {

constexpr long kMaxDim = 1 << 16;                 // any single size in a spec
constexpr std::size_t kMaxParams = 1u << 28;      // 1 GiB of floats: refuse anything larger
constexpr std::size_t kMaxActivation = 1u << 22;  // floats per example in one layer's output

Status bad(std::string_view spec, const std::string& why) {
  return {StatusCode::kInvalidArgument, "model spec '" + std::string(spec) + "': " + why};
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    std::size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

// A positive integer that is the whole of s, at most kMaxDim; -1 otherwise.
long number(std::string_view s) {
  if (s.empty()) return -1;
  long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v <= 0 || v > kMaxDim) return -1;
  return v;
}

// "1x28x28" or "784".
bool parseShape(std::string_view s, Shape& shape) {
  std::vector<std::string_view> parts = split(s, 'x');
  if (parts.size() != 1 && parts.size() != 3) return false;
  long v[3] = {1, 1, 1};
  for (std::size_t i = 0; i < parts.size(); ++i) {
    v[i] = number(parts[i]);
    if (v[i] < 0) return false;
  }
  shape = {static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2])};
  return shape.size() <= static_cast<std::size_t>(kMaxDim) * 64;
}

class Builder {
 public:
  explicit Builder(Network& net) : net_(net) {}

  void dense(int out, bool relu) {
    Layer l;
    l.kind = LayerKind::kDense;
    l.in = Shape{static_cast<int>(current_.size()), 1, 1};
    l.out = Shape{out, 1, 1};
    std::string name = "dense" + std::to_string(denseCount_++);
    l.weightOffset = net_.layout.add(name + ".weight", {out, l.in.c});
    l.biasOffset = net_.layout.add(name + ".bias", {out});
    l.reluFollows = relu;
    push(l);
    if (relu) addRelu();
  }

  void conv(int out, int k) {
    Layer l;
    l.kind = LayerKind::kConv;
    l.in = current_;
    l.out = Shape{out, current_.h - k + 1, current_.w - k + 1};
    l.kernel = k;
    std::string name = "conv" + std::to_string(convCount_++);
    l.weightOffset = net_.layout.add(name + ".weight", {out, current_.c, k, k});
    l.biasOffset = net_.layout.add(name + ".bias", {out});
    l.reluFollows = true;
    push(l);
    addRelu();
  }

  void pool(int p) {
    Layer l;
    l.kind = LayerKind::kMaxPool;
    l.in = current_;
    l.out = Shape{current_.c, current_.h / p, current_.w / p};
    l.kernel = p;
    push(l);
  }

  Shape current_;

 private:
  void addRelu() {
    Layer r;
    r.kind = LayerKind::kRelu;
    r.in = current_;
    r.out = current_;
    push(r);
  }
  void push(const Layer& l) {
    net_.layers.push_back(l);
    current_ = l.out;
  }

  Network& net_;
  int denseCount_ = 0;
  int convCount_ = 0;
};

}  // namespace

Result<Network> parseSpec(std::string_view spec) {
  // Trim surrounding white space.
  while (!spec.empty() && (spec.front() == ' ' || spec.front() == '\t'))
    spec.remove_prefix(1);
  while (!spec.empty() && (spec.back() == ' ' || spec.back() == '\t' || spec.back() == '\n'))
    spec.remove_suffix(1);

  Network net;
  net.spec = std::string(spec);
  std::size_t colon = spec.find(':');
  if (colon == std::string_view::npos)
    return bad(spec,
               "expected '<kind>:<layers>' such as 'mlp:784-200-10' or "
               "'cnn:1x28x28-c16k5-p2-f128-10'");
  std::string_view kind = spec.substr(0, colon);
  std::vector<std::string_view> tokens = split(spec.substr(colon + 1), '-');
  if (tokens.size() < 2) return bad(spec, "needs an input size and a number of classes");
  if (!parseShape(tokens[0], net.input))
    return bad(spec, "input '" + std::string(tokens[0]) + "' is not a size like '784' or 'CxHxW' like '1x28x28'");
  Builder b(net);
  b.current_ = net.input;
  const std::size_t last = tokens.size() - 1;

  if (kind == "mlp") {
    for (std::size_t i = 1; i <= last; ++i) {
      long n = number(tokens[i]);
      if (n < 0) return bad(spec, "layer '" + std::string(tokens[i]) + "' is not a positive width");
      b.dense(static_cast<int>(n), i != last);
    }
  } else if (kind == "cnn") {
    bool flat = false;
    for (std::size_t i = 1; i <= last; ++i) {
      std::string_view t = tokens[i];
      std::string tok(t);
      if (i == last) {
        long n = number(t);
        if (n < 0) return bad(spec, "the last layer must be the number of classes, not '" + tok + "'");
        b.dense(static_cast<int>(n), false);
      } else if (t.size() > 1 && t[0] == 'c') {
        std::size_t kpos = t.find('k');
        long out = kpos == std::string_view::npos ? -1 : number(t.substr(1, kpos - 1));
        long k = kpos == std::string_view::npos ? -1 : number(t.substr(kpos + 1));
        if (out < 0 || k < 0) return bad(spec, "convolution '" + tok + "' must read c<filters>k<kernel>, e.g. c16k5");
        if (flat) return bad(spec, "convolution '" + tok + "' after a dense layer");
        if (k > b.current_.h || k > b.current_.w)
          return bad(spec, "kernel of '" + tok + "' is larger than its " + std::to_string(b.current_.h) + "x" +
                               std::to_string(b.current_.w) + " input");
        b.conv(static_cast<int>(out), static_cast<int>(k));
      } else if (t.size() > 1 && t[0] == 'p') {
        long p = number(t.substr(1));
        if (p < 0) return bad(spec, "pooling '" + tok + "' must read p<window>, e.g. p2");
        if (flat) return bad(spec, "pooling '" + tok + "' after a dense layer");
        if (p > b.current_.h || p > b.current_.w)
          return bad(spec, "pooling window of '" + tok + "' is larger than its input");
        b.pool(static_cast<int>(p));
      } else if (t.size() > 1 && t[0] == 'f') {
        long n = number(t.substr(1));
        if (n < 0) return bad(spec, "dense layer '" + tok + "' must read f<units>, e.g. f128");
        flat = true;
        b.dense(static_cast<int>(n), true);
      } else {
        return bad(spec, "unknown layer '" + tok + "' (expected c<f>k<k>, p<w>, f<units>)");
      }
    }
  } else {
    return bad(spec, "unknown kind '" + std::string(kind) + "' (expected 'mlp' or 'cnn')");
  }
  if (net.layout.size() > kMaxParams)
    return bad(spec,
               std::to_string(net.layout.size()) + " parameters exceed the limit of " + std::to_string(kMaxParams));
  for (const Layer& l : net.layers)
    if (l.out.size() > kMaxActivation)
      return bad(spec, "a layer's output of " + std::to_string(l.out.size()) +
                           " values per example exceeds the limit of " + std::to_string(kMaxActivation));
  net.classes = net.layers.back().out.c;
  if (net.classes < 2) return bad(spec, "needs at least 2 classes");
  net.acts.resize(net.layers.size());
  return net;
}

}  // namespace starling::model::detail
