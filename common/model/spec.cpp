// The model spec grammar (docs/model.md) and the network it builds.
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "network.hpp"

namespace starling::model::detail {
namespace {

constexpr long kMaxDim = 1 << 16;                 // any single size in a spec but a flat input
constexpr long kMaxInputDim = 1 << 24;            // a flat input ("262144"): hashed sparse features
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

// A positive integer that is the whole of s, at most max; -1 otherwise.
long number(std::string_view s, long max = kMaxDim) {
  if (s.empty()) return -1;
  long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v <= 0 || v > max) return -1;
  return v;
}

// "1x28x28", "3x128" (C x L: a 1-D series, stored C x 1 x L) or "784".
bool parseShape(std::string_view s, Shape& shape) {
  std::vector<std::string_view> parts = split(s, 'x');
  if (parts.size() > 3) return false;
  long v[3] = {1, 1, 1};
  for (std::size_t i = 0; i < parts.size(); ++i) {
    v[i] = number(parts[i], parts.size() == 1 ? kMaxInputDim : kMaxDim);
    if (v[i] < 0) return false;
  }
  if (parts.size() == 2) std::swap(v[1], v[2]);  // C x L is C x 1 x L
  shape = {static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2])};
  return shape.size() <=
         (parts.size() == 1 ? static_cast<std::size_t>(kMaxInputDim) : static_cast<std::size_t>(kMaxDim) * 64);
}

class Builder {
 public:
  explicit Builder(Network& net) : net_(net) {}

  void dense(int out, bool relu) { dense(out, relu ? LayerKind::kRelu : LayerKind::kDense); }

  // A dense layer followed by the activation `act` (kDense: none).
  void dense(int out, LayerKind act) {
    const bool relu = act == LayerKind::kRelu;
    Layer l;
    l.kind = LayerKind::kDense;
    l.in = Shape{static_cast<int>(current_.size()), 1, 1};
    l.out = Shape{out, 1, 1};
    std::string name = "dense" + std::to_string(denseCount_++);
    l.weightOffset = net_.layout.add(name + ".weight", {out, l.in.c});
    l.biasOffset = net_.layout.add(name + ".bias", {out});
    l.reluFollows = relu;
    push(l);
    if (act != LayerKind::kDense) addActivation(act);
  }

  // The embedding bag of embedbag specs: table {in, out}, bias {out}, then `act`.
  void embed(int out, LayerKind act, bool mean) {
    Layer l;
    l.kind = LayerKind::kEmbedBag;
    l.mean = mean;
    l.in = Shape{static_cast<int>(current_.size()), 1, 1};
    l.out = Shape{out, 1, 1};
    l.weightOffset = net_.layout.add("embed.weight", {l.in.c, out});
    l.biasOffset = net_.layout.add("embed.bias", {out});
    l.reluFollows = act == LayerKind::kRelu;
    push(l);
    addActivation(act);
  }

  // The GRU of gru specs over `steps` steps of the current input: W, R, B as ONNX
  // stores them (network.hpp).
  void gru(int steps, int hidden, bool resetBefore) {
    Layer l;
    l.kind = LayerKind::kGru;
    l.resetBefore = resetBefore;
    l.in = current_;
    l.out = Shape{hidden, 1, 1};
    l.steps = steps;
    const int features = current_.c / steps;
    l.weightOffset = net_.layout.add("gru.W", {1, 3 * hidden, features});
    net_.layout.add("gru.R", {1, 3 * hidden, hidden});
    l.biasOffset = net_.layout.add("gru.B", {1, 6 * hidden});
    push(l);
  }

  // A k x k convolution (1 x k on 1-D inputs) with out filters, then a ReLU unless
  // linear. The caller checked that the (padded) input holds the kernel.
  void conv(int out, int k, int stride, int pad, bool linear) {
    Layer l;
    l.kind = LayerKind::kConv;
    l.in = current_;
    l.kernel = k;
    l.kernelH = oneD_ ? 1 : k;
    l.strideW = stride;
    l.strideH = oneD_ ? 1 : stride;
    l.padW = pad;
    l.padH = oneD_ ? 0 : pad;
    l.out = Shape{out, (current_.h + 2 * l.padH - l.kernelH) / l.strideH + 1,
                  (current_.w + 2 * l.padW - l.kernel) / l.strideW + 1};
    std::string name = "conv" + std::to_string(convCount_++);
    l.weightOffset = net_.layout.add(
        name + ".weight", oneD_ ? std::vector<int>{out, current_.c, k} : std::vector<int>{out, current_.c, k, k});
    l.biasOffset = net_.layout.add(name + ".bias", {out});
    l.reluFollows = !linear;
    push(l);
    if (!linear) addRelu();
  }

  // Max (kMaxPool) or average (kAvgPool) pooling over p x p windows (1 x p on 1-D
  // inputs) at stride p.
  void pool(int p, LayerKind kind = LayerKind::kMaxPool) {
    Layer l;
    l.kind = kind;
    l.in = current_;
    l.kernel = p;
    l.kernelH = oneD_ ? 1 : p;
    l.strideW = p;
    l.strideH = l.kernelH;
    l.out = Shape{current_.c, current_.h / l.kernelH, current_.w / p};
    push(l);
  }

  void globalPool() {
    Layer l;
    l.kind = LayerKind::kGlobalAvgPool;
    l.in = current_;
    l.out = Shape{current_.c, 1, 1};
    push(l);
  }

  // Per-channel batch normalization: gamma, beta, running mean and variance, in
  // PyTorch's names and order.
  void batchNorm(float eps) {
    Layer l;
    l.kind = LayerKind::kBatchNorm;
    l.in = current_;
    l.out = current_;
    l.eps = eps;
    const std::string name = "bn" + std::to_string(bnCount_++);
    l.weightOffset = net_.layout.add(name + ".weight", {current_.c});
    l.biasOffset = net_.layout.add(name + ".bias", {current_.c});
    l.meanOffset = net_.layout.add(name + ".running_mean", {current_.c});
    l.varOffset = net_.layout.add(name + ".running_var", {current_.c});
    l.statsOffset = net_.batchStats.size();
    net_.batchStats.resize(net_.batchStats.size() + 2 * static_cast<std::size_t>(current_.c));
    push(l);
  }

  // An activation layer; alpha and beta as in Layer (leaky slope, clip bounds).
  void addActivation(LayerKind kind, float alpha = 0.0f, float beta = 0.0f) {
    Layer r;
    r.kind = kind;
    r.in = current_;
    r.out = current_;
    r.alpha = alpha;
    r.beta = beta;
    push(r);
  }

  Shape current_;
  bool oneD_ = false;  // the input is C x L: windows are 1 x k

 private:
  void addRelu() { addActivation(LayerKind::kRelu); }
  void push(const Layer& l) {
    net_.layers.push_back(l);
    current_ = l.out;
  }

  Network& net_;
  int denseCount_ = 0;
  int convCount_ = 0;
  int bnCount_ = 0;
};

// Trims surrounding white space.
std::string_view trim(std::string_view spec) {
  while (!spec.empty() && (spec.front() == ' ' || spec.front() == '\t'))
    spec.remove_prefix(1);
  while (!spec.empty() && (spec.back() == ' ' || spec.back() == '\t' || spec.back() == '\n'))
    spec.remove_suffix(1);
  return spec;
}

// The shortest text that reads back as v.
std::string formatFloat(float v) {
  char buf[32];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, ptr) : std::to_string(v);
}

struct Head {
  LossKind loss = LossKind::kCrossEntropy;
  float delta = 0.0f;
};

// The loss suffix without its '/': "ce", "logistic", "mse", "huber:D".
Result<Head> parseHead(std::string_view spec, std::string_view suffix) {
  if (suffix == "ce") return Head{LossKind::kCrossEntropy, 0.0f};
  if (suffix == "logistic") return Head{LossKind::kLogistic, 0.0f};
  if (suffix == "mse") return Head{LossKind::kSquaredError, 0.0f};
  if (suffix.substr(0, 6) == "huber:") {
    std::string_view d = suffix.substr(6);
    float v = 0.0f;
    auto [ptr, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
    if (d.empty() || ec != std::errc() || ptr != d.data() + d.size() || !std::isfinite(v) || !(v > 0.0f))
      return bad(spec, "'/huber:" + std::string(d) + "' needs a finite delta > 0, e.g. /huber:1");
    return Head{LossKind::kHuber, v};
  }
  return bad(spec, "unknown loss '/" + std::string(suffix) + "' (expected /ce, /logistic, /mse or /huber:D)");
}

// The canonical suffix ("" for cross-entropy).
std::string headSuffix(const Head& h) {
  switch (h.loss) {
    case LossKind::kLogistic:
      return "/logistic";
    case LossKind::kSquaredError:
      return "/mse";
    case LossKind::kHuber:
      return "/huber:" + formatFloat(h.delta);
    case LossKind::kCrossEntropy:
      break;
  }
  return "";
}

data::TaskKind headTask(LossKind loss) {
  switch (loss) {
    case LossKind::kLogistic:
      return data::TaskKind::kBinary;
    case LossKind::kSquaredError:
    case LossKind::kHuber:
      return data::TaskKind::kRegression;
    case LossKind::kCrossEntropy:
      break;
  }
  return data::TaskKind::kClassification;
}

// "relu:", "tanh:", "sigmoid:" at the start of an mlp's layers: the activation and the
// length of the prefix (kRelu and 0 when there is none).
std::pair<LayerKind, std::size_t> activationPrefix(std::string_view rest) {
  if (rest.substr(0, 5) == "relu:") return {LayerKind::kRelu, 5};
  if (rest.substr(0, 5) == "tanh:") return {LayerKind::kTanh, 5};
  if (rest.substr(0, 8) == "sigmoid:") return {LayerKind::kSigmoid, 8};
  return {LayerKind::kRelu, 0};
}

// "mean:" at the start of an embedbag's layers: its length (0 when absent).
std::size_t meanPrefix(std::string_view kind, std::string_view rest) {
  return kind == "embedbag" && rest.substr(0, 5) == "mean:" ? 5 : 0;
}

// "lbr0:" at the start of a gru's layers (the reset gate applied before R_h): its length
// (0 when absent).
std::size_t lbr0Prefix(std::string_view kind, std::string_view rest) {
  return kind == "gru" && rest.substr(0, 5) == "lbr0:" ? 5 : 0;
}

// gru:(lbr0:)<T>x<F>-<H>(-<width>)*-<outputs>: the GRU's last hidden state feeds dense
// layers with ReLU between them, as in mlp.
Status parseGru(std::string_view spec, const std::vector<std::string_view>& tokens, bool resetBefore, Network& net) {
  if (tokens.size() < 3)
    return bad(spec,
               "'gru' needs steps x features, hidden units and outputs: gru:<T>x<F>-<H>-...-<outputs>, e.g. "
               "gru:50x6-32-4");
  const std::vector<std::string_view> tf = split(tokens[0], 'x');
  const long steps = tf.size() == 2 ? number(tf[0]) : -1;
  const long features = tf.size() == 2 ? number(tf[1]) : -1;
  if (steps < 0 || features < 0 || steps * features > kMaxInputDim)
    return bad(spec,
               "the input of 'gru' must read <steps>x<features>, e.g. 50x6, not '" + std::string(tokens[0]) + "'");
  net.input = Shape{static_cast<int>(steps * features), 1, 1};
  Builder b(net);
  b.current_ = net.input;
  const std::size_t last = tokens.size() - 1;
  for (std::size_t i = 1; i <= last; ++i) {
    long n = number(tokens[i]);
    if (n < 0) return bad(spec, "layer '" + std::string(tokens[i]) + "' is not a positive width");
    if (i == 1)
      b.gru(static_cast<int>(steps), static_cast<int>(n), resetBefore);
    else
      b.dense(static_cast<int>(n), i != last ? LayerKind::kRelu : LayerKind::kDense);
  }
  return {};
}

// A float in a spec token: digits with an optional '.' and exponent, a leading 'n' for
// negative ('-' separates tokens). False unless it is the whole of s and finite.
bool tokenFloat(std::string_view s, float& v) {
  bool negative = false;
  if (!s.empty() && s[0] == 'n') {
    negative = true;
    s.remove_prefix(1);
  }
  if (s.empty() || s[0] == '-' || s[0] == '+') return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) return false;
  if (negative) v = -v;
  return true;
}

// The canonical text of a token float: the shortest fixed notation that reads back as
// v, 'n' for negative.
std::string tokenFloatText(float v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, std::abs(v), std::chars_format::fixed);
  std::string text = ec == std::errc() ? std::string(buf, ptr) : formatFloat(std::abs(v));
  return (v < 0.0f ? "n" : "") + text;
}

// A cnn convolution token: c<filters>k<kernel>[s<stride>][z<padding>][l].
struct ConvToken {
  long filters = -1;
  long kernel = -1;
  long stride = 1;
  long pad = 0;
  bool linear = false;
  std::string text() const {
    std::string t = "c" + std::to_string(filters) + "k" + std::to_string(kernel);
    if (stride != 1) t += "s" + std::to_string(stride);
    if (pad != 0) t += "z" + std::to_string(pad);
    return linear ? t + "l" : t;
  }
};

bool parseConvToken(std::string_view t, ConvToken& c) {
  std::size_t pos = 1;
  auto next = [&](long& v) {
    std::size_t end = pos;
    while (end < t.size() && t[end] >= '0' && t[end] <= '9')
      ++end;
    v = number(t.substr(pos, end - pos));
    pos = end;
    return v > 0;
  };
  if (t.empty() || t[0] != 'c' || !next(c.filters)) return false;
  if (pos >= t.size() || t[pos++] != 'k' || !next(c.kernel)) return false;
  if (pos < t.size() && t[pos] == 's' && (++pos, !next(c.stride))) return false;
  if (pos < t.size() && t[pos] == 'z' && (++pos, !next(c.pad))) return false;
  if (pos < t.size() && t[pos] == 'l') {
    c.linear = true;
    ++pos;
  }
  return pos == t.size();
}

constexpr const char* kCnnLayers =
    "expected c<filters>k<kernel>[s<stride>][z<padding>][l], p<window>, a<window>, g, b, be<eps>, r, t, sg, "
    "lr<slope>, clip<lo>_<hi>, f<units>";

// The layers of a cnn after its input (tokens[1..]) into b; returns them in canonical
// form, the input first.
Result<std::string> parseCnn(std::string_view spec, const std::vector<std::string_view>& tokens, Builder& b) {
  std::string body(tokens[0]);
  bool flat = false;
  const std::size_t last = tokens.size() - 1;
  auto size = [&b]() {
    return b.oneD_ ? std::to_string(b.current_.w) : std::to_string(b.current_.h) + "x" + std::to_string(b.current_.w);
  };
  for (std::size_t i = 1; i <= last; ++i) {
    std::string_view t = tokens[i];
    const std::string tok(t);
    std::string canon = tok;
    float a = 0.0f;
    float hi = 0.0f;
    if (t.empty()) return bad(spec, std::string("an empty layer between two '-' (") + kCnnLayers + ")");
    if (i == last) {
      long n = number(t);
      if (n < 0) return bad(spec, "the last layer must be the number of classes (outputs), not '" + tok + "'");
      b.dense(static_cast<int>(n), false);
      canon = std::to_string(n);
    } else if (t == "r" || t == "t" || t == "sg") {
      b.addActivation(t == "r" ? LayerKind::kRelu : t == "t" ? LayerKind::kTanh : LayerKind::kSigmoid);
    } else if (t.substr(0, 2) == "lr") {
      if (!tokenFloat(t.substr(2), a))
        return bad(spec, "leaky ReLU '" + tok + "' must read lr<slope>, e.g. lr0.01 (n for minus: lrn0.5)");
      b.addActivation(LayerKind::kLeakyRelu, a);
      canon = "lr" + tokenFloatText(a);
    } else if (t.substr(0, 4) == "clip") {
      const std::size_t us = t.find('_');
      if (us == std::string_view::npos || !tokenFloat(t.substr(4, us - 4), a) || !tokenFloat(t.substr(us + 1), hi) ||
          a > hi)
        return bad(spec,
                   "clip '" + tok + "' must read clip<lo>_<hi> with lo <= hi, e.g. clip0_6 (n for minus: clipn1_1)");
      b.addActivation(LayerKind::kClip, a, hi);
      canon = "clip" + tokenFloatText(a) + "_" + tokenFloatText(hi);
    } else if (t == "b" || t.substr(0, 2) == "be") {
      float eps = kBatchNormEps;
      if (t != "b" && (!tokenFloat(t.substr(2), eps) || !(eps > 0.0f)))
        return bad(spec, "batch normalization '" + tok + "' must read b, or be<eps> with eps > 0, e.g. be0.001");
      b.batchNorm(eps);
      canon = eps == kBatchNormEps ? "b" : "be" + tokenFloatText(eps);
    } else if (t == "g") {
      if (flat) return bad(spec, "global average pooling 'g' after a dense layer");
      b.globalPool();
    } else if (t[0] == 'c') {
      ConvToken c;
      if (!parseConvToken(t, c))
        return bad(spec, "convolution '" + tok +
                             "' must read c<filters>k<kernel>[s<stride>][z<padding>][l], e.g. c16k5 or c16k3s2z1l");
      if (flat) return bad(spec, "convolution '" + tok + "' after a dense layer");
      const long padH = b.oneD_ ? 0 : c.pad;
      const long kh = b.oneD_ ? 1 : c.kernel;
      if (c.pad >= c.kernel) return bad(spec, "padding of '" + tok + "' must be smaller than its kernel");
      if (kh > b.current_.h + 2 * padH || c.kernel > b.current_.w + 2 * c.pad)
        return bad(spec, "kernel of '" + tok + "' is larger than its " + size() + " input" +
                             (c.pad ? std::string(" (padded)") : std::string()));
      // A ReLU after a linear conv is the conv's own: c16k3l-r reads as c16k3.
      if (c.linear && i + 1 < last && tokens[i + 1] == "r") {
        c.linear = false;
        ++i;
      }
      b.conv(static_cast<int>(c.filters), static_cast<int>(c.kernel), static_cast<int>(c.stride),
             static_cast<int>(c.pad), c.linear);
      canon = c.text();
    } else if ((t[0] == 'p' || t[0] == 'a') && t.size() > 1) {
      const bool average = t[0] == 'a';
      long p = number(t.substr(1));
      if (p < 0)
        return bad(spec, std::string(average ? "average" : "max") + " pooling '" + tok + "' must read " +
                             (average ? "a" : "p") + "<window>, e.g. " + (average ? "a2" : "p2"));
      if (flat) return bad(spec, "pooling '" + tok + "' after a dense layer");
      if ((!b.oneD_ && p > b.current_.h) || p > b.current_.w)
        return bad(spec, "pooling window of '" + tok + "' is larger than its " + size() + " input");
      b.pool(static_cast<int>(p), average ? LayerKind::kAvgPool : LayerKind::kMaxPool);
      canon = (average ? "a" : "p") + std::to_string(p);
    } else if (t.size() > 1 && t[0] == 'f') {
      long n = number(t.substr(1));
      if (n < 0) return bad(spec, "dense layer '" + tok + "' must read f<units>, e.g. f128");
      flat = true;
      b.dense(static_cast<int>(n), true);
      canon = "f" + std::to_string(n);
    } else {
      return bad(spec, "unknown layer '" + tok + "' (" + kCnnLayers + ")");
    }
    body += "-" + canon;
  }
  return body;
}

}  // namespace

Result<Network> parseSpec(std::string_view spec) {
  spec = trim(spec);
  Network net;
  // The loss suffix: everything after the first '/'.
  const std::size_t slash = spec.find('/');
  std::string_view body = spec.substr(0, slash);
  Head head;
  if (slash != std::string_view::npos) {
    Result<Head> h = parseHead(spec, spec.substr(slash + 1));
    if (!h) return h.status();
    head = *h;
  }
  std::size_t colon = body.find(':');
  if (colon == std::string_view::npos)
    return bad(spec,
               "expected '<kind>:<layers>' such as 'mlp:784-200-10', 'linear:784-10', "
               "'embedbag:262144-16-2' or 'cnn:1x28x28-c16k5-p2-f128-10'");
  std::string_view kind = body.substr(0, colon);
  std::string_view rest = body.substr(colon + 1);
  LayerKind act = LayerKind::kRelu;
  const bool mean = meanPrefix(kind, rest) > 0;
  rest.remove_prefix(meanPrefix(kind, rest));
  const bool resetBefore = lbr0Prefix(kind, rest) > 0;
  rest.remove_prefix(lbr0Prefix(kind, rest));
  if (kind == "mlp" || kind == "embedbag") {
    auto [a, skip] = activationPrefix(rest);
    act = a;
    rest.remove_prefix(skip);
  }
  std::vector<std::string_view> tokens = split(rest, '-');
  if (tokens.size() < 2) return bad(spec, "needs an input size and a number of classes (outputs)");
  if (kind != "gru" && !parseShape(tokens[0], net.input))
    return bad(spec, "input '" + std::string(tokens[0]) +
                         "' is not a size like '784', 'CxHxW' like '1x28x28' or 'CxL' like '3x128'");
  Builder b(net);
  b.current_ = net.input;
  b.oneD_ = kind == "cnn" && split(tokens[0], 'x').size() == 2;
  const std::size_t last = tokens.size() - 1;
  std::string cnnBody;  // a cnn's layers in canonical form

  if (kind == "embedbag") {
    if (tokens.size() < 3)
      return bad(spec,
                 "'embedbag' needs an input size, an embedding width and outputs: embedbag:<inputs>-<width>-...-"
                 "<outputs>, e.g. embedbag:262144-16-2");
    if (tokens[0].find('x') != std::string_view::npos)
      return bad(spec, "the input of 'embedbag' is a number of features, not a shape");
    for (std::size_t i = 1; i <= last; ++i) {
      long n = number(tokens[i]);
      if (n < 0) return bad(spec, "layer '" + std::string(tokens[i]) + "' is not a positive width");
      if (i == 1)
        b.embed(static_cast<int>(n), act, mean);
      else
        b.dense(static_cast<int>(n), i != last ? act : LayerKind::kDense);
    }
  } else if (kind == "gru") {
    STARLING_RETURN_IF_ERROR(parseGru(spec, tokens, resetBefore, net));
  } else if (kind == "mlp" || kind == "linear") {
    if (kind == "linear" && tokens.size() != 2)
      return bad(spec, "'linear' is one dense layer: linear:<inputs>-<outputs>, e.g. linear:784-10");
    for (std::size_t i = 1; i <= last; ++i) {
      long n = number(tokens[i]);
      if (n < 0) return bad(spec, "layer '" + std::string(tokens[i]) + "' is not a positive width");
      b.dense(static_cast<int>(n), i != last ? act : LayerKind::kDense);
    }
  } else if (kind == "cnn") {
    Result<std::string> layers = parseCnn(spec, tokens, b);
    if (!layers) return layers.status();
    cnnBody = std::move(layers).value();
  } else {
    return bad(spec, "unknown kind '" + std::string(kind) + "' (expected 'mlp', 'linear', 'embedbag', 'gru' or 'cnn')");
  }
  if (net.layout.size() > kMaxParams)
    return bad(spec,
               std::to_string(net.layout.size()) + " parameters exceed the limit of " + std::to_string(kMaxParams));
  for (const Layer& l : net.layers)
    if (l.out.size() > kMaxActivation)
      return bad(spec, "a layer's output of " + std::to_string(l.out.size()) +
                           " values per example exceeds the limit of " + std::to_string(kMaxActivation));
  net.classes = net.layers.back().out.c;
  const std::string suffix = headSuffix(head);
  if (head.loss == LossKind::kCrossEntropy) {
    if (net.classes < 2)
      return bad(spec,
                 "needs at least 2 classes for softmax cross-entropy (one output takes '/logistic', "
                 "'/mse' or '/huber:D')");
  } else if (net.classes != 1) {
    return bad(spec, "'" + suffix + "' needs one output, not " + std::to_string(net.classes));
  }
  net.loss = head.loss;
  net.huberDelta = head.delta;
  // Canonical: without "relu:" (the default) and "/ce"; huber's delta in shortest form.
  std::string canonical = std::string(kind) + ":";
  if (mean) canonical += "mean:";
  if (resetBefore) canonical += "lbr0:";
  if (act == LayerKind::kTanh) canonical += "tanh:";
  if (act == LayerKind::kSigmoid) canonical += "sigmoid:";
  net.spec = canonical + (kind == "cnn" ? cnnBody : std::string(rest)) + suffix;
  net.acts.resize(net.layers.size());
  return net;
}

}  // namespace starling::model::detail

namespace starling::model {

Result<std::string> resolveSpec(std::string_view spec, data::TaskKind task, std::size_t inputDim, int numClasses,
                                float huberDelta) {
  using detail::bad;
  spec = detail::trim(spec);
  const std::string_view task_name = data::taskKindName(task);
  const bool classification = task == data::TaskKind::kClassification;
  if (classification && numClasses < 2)
    return bad(spec, "a classification task needs at least 2 classes, not " + std::to_string(numClasses));
  if (inputDim == 0) return bad(spec, "the data has no features");
  const int outputs = classification ? numClasses : 1;

  const std::size_t slash = spec.find('/');
  std::string_view body = spec.substr(0, slash);
  std::string suffix;
  if (slash != std::string_view::npos) {
    Result<detail::Head> h = detail::parseHead(spec, spec.substr(slash + 1));
    if (!h) return h.status();
    if (detail::headTask(h->loss) != task)
      return bad(spec, "loss '" + std::string(spec.substr(slash)) + "' is for " +
                           std::string(data::taskKindName(detail::headTask(h->loss))) + " but the task is " +
                           std::string(task_name));
    suffix = std::string(spec.substr(slash));
  } else if (task == data::TaskKind::kBinary) {
    suffix = "/logistic";
  } else if (task == data::TaskKind::kRegression) {
    if (huberDelta < 0.0f || !std::isfinite(huberDelta))
      return bad(spec,
                 "the Huber delta must be finite and >= 0 (0: squared error), not " + detail::formatFloat(huberDelta));
    suffix = huberDelta > 0.0f ? "/huber:" + detail::formatFloat(huberDelta) : "/mse";
  }

  const std::string in = std::to_string(inputDim);
  const std::string out = std::to_string(outputs);
  std::string full;
  if (body == "linear") {
    full = "linear:" + in + "-" + out;
  } else if (body.substr(0, 4) == "mlp:" || body.substr(0, 9) == "embedbag:") {
    const std::string_view kind = body.substr(0, body.find(':') + 1);
    std::string_view rest = body.substr(kind.size());
    const std::size_t meanSkip = detail::meanPrefix(kind.substr(0, kind.size() - 1), rest);
    auto [act, skip] = detail::activationPrefix(rest.substr(meanSkip));
    std::string_view prefix = rest.substr(0, meanSkip + skip);
    rest.remove_prefix(meanSkip + skip);
    if (rest.substr(0, 7) == "hidden:") {
      std::string_view widths = rest.substr(7);
      if (widths.empty()) return bad(spec, "'hidden:' needs layer widths, e.g. mlp:hidden:64-32");
      full = std::string(kind) + std::string(prefix) + in + "-" + std::string(widths) + "-" + out;
    }
  }
  if (body.substr(0, 11) == "gru:hidden:")
    return bad(spec, "the sequence length cannot be known from the data's " + in +
                         " features per example: write the full form gru:<steps>x<features>-<hidden>-...-<outputs> "
                         "with steps x features = " +
                         in);
  if (full.empty()) full = std::string(body);
  full += suffix;

  Result<detail::Network> net = detail::parseSpec(full);
  if (!net) {
    // A body whose outputs do not suit the task's head: report the outputs against the
    // task rather than the head's own complaint (parse it with a head that fits it).
    Result<detail::Network> shape = detail::parseSpec(std::string(body) + "/mse");
    if (!shape) shape = detail::parseSpec(body);
    if (!shape || (shape->input.size() == inputDim && shape->classes == outputs)) return net.status();
    net = std::move(shape);
  }
  if (net->input.size() != inputDim)
    return bad(spec, "takes " + std::to_string(net->input.size()) + " inputs but the data has " + in +
                         " features per example");
  if (net->classes != outputs)
    return bad(spec, "has " + std::to_string(net->classes) + " outputs but the " + std::string(task_name) +
                         " task needs " + out + (classification ? " (one per class)" : ""));
  return net->spec;
}

}  // namespace starling::model
