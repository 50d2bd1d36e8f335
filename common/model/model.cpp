// Model: building from a spec, initialization, the training and inference passes.
#include "starling/model/model.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cassert>
#include <cmath>
#include <random>

#include "network.hpp"

namespace starling::model {

using detail::Layer;
using detail::LayerKind;
using detail::Network;

Model::Model() : net_(std::make_unique<Network>()) {}
Model::Model(const Model& other) : net_(std::make_unique<Network>(*other.net_)), params_(other.params_) {}
Model& Model::operator=(const Model& other) {
  if (this != &other) {
    net_ = std::make_unique<Network>(*other.net_);
    params_ = other.params_;
  }
  return *this;
}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Result<Model> Model::fromSpec(std::string_view spec) {
  Result<Network> net = detail::parseSpec(spec);
  if (!net) return net.status();
  Model m;
  *m.net_ = std::move(net).value();
  m.params_.assign(m.net_->layout.size(), 0.0f);
  return m;
}

const std::string& Model::spec() const {
  return net_->spec;
}
const Layout& Model::layout() const {
  return net_->layout;
}
std::size_t Model::inputDim() const {
  return net_->input.size();
}
int Model::numClasses() const {
  return net_->classes;
}
LossKind Model::lossKind() const {
  return net_->loss;
}
float Model::huberDelta() const {
  return net_->huberDelta;
}
data::TaskKind Model::task() const {
  switch (net_->loss) {
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

Status Model::setParams(std::span<const float> values) {
  if (values.size() != params_.size())
    return {StatusCode::kInvalidArgument, "model '" + net_->spec + "' has " + std::to_string(params_.size()) +
                                              " parameters, not " + std::to_string(values.size())};
  std::copy(values.begin(), values.end(), params_.begin());
  return Status::ok();
}

void Model::initialize(uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Uniform in [-1, 1) from the top 24 bits: the same on every standard library.
  auto uniform = [&rng]() { return static_cast<float>(rng() >> 40) * (2.0f / 16777216.0f) - 1.0f; };
  std::fill(params_.begin(), params_.end(), 0.0f);
  for (const Layer& l : net_->layers) {
    if (l.kind == LayerKind::kGru) {  // every weight and bias uniform in +-1/sqrt(hidden), as PyTorch's GRU
      const float bound = 1.0f / std::sqrt(static_cast<float>(l.out.c));
      for (std::size_t i = l.weightOffset; i < l.biasOffset + static_cast<std::size_t>(6) * l.out.c; ++i)
        params_[i] = bound * uniform();
      continue;
    }
    if (l.kind == LayerKind::kBatchNorm) {  // the identity: gamma 1, beta 0, mean 0, variance 1
      std::fill_n(params_.begin() + static_cast<std::ptrdiff_t>(l.weightOffset), l.in.c, 1.0f);
      std::fill_n(params_.begin() + static_cast<std::ptrdiff_t>(l.varOffset), l.in.c, 1.0f);
      continue;
    }
    if (l.kind != LayerKind::kDense && l.kind != LayerKind::kConv && l.kind != LayerKind::kEmbedBag) continue;
    const bool flat = l.kind != LayerKind::kConv;
    const std::size_t area = static_cast<std::size_t>(l.kernelH) * l.kernel;
    const std::size_t fanIn = flat ? l.in.size() : static_cast<std::size_t>(l.in.c) * area;
    const std::size_t fanOut = flat ? l.out.size() : static_cast<std::size_t>(l.out.c) * area;
    const std::size_t count = l.biasOffset - l.weightOffset;  // the bias follows the weight
    const float bound = l.reluFollows ? std::sqrt(6.0f / static_cast<float>(fanIn))
                                      : std::sqrt(6.0f / static_cast<float>(fanIn + fanOut));
    for (std::size_t i = 0; i < count; ++i)
      params_[l.weightOffset + i] = bound * uniform();
  }
}

namespace {

// Softmax of each row of logits (batch x classes) into probs; returns the weighted
// cross-entropy summed over the rows and divided by normalizer, and when dlogits is not
// null writes its gradient there.
float softmaxCrossEntropy(const float* logits, const float* y, const float* weights, int batch, int normalizer,
                          int classes, float* probs, float* dlogits) {
  double total = 0.0;
  const float inv = 1.0f / static_cast<float>(normalizer);
  for (int i = 0; i < batch; ++i) {
    const float* z = logits + static_cast<std::size_t>(i) * classes;
    float* p = probs + static_cast<std::size_t>(i) * classes;
    const float zmax = *std::max_element(z, z + classes);
    float sum = 0.0f;
    for (int c = 0; c < classes; ++c) {
      p[c] = std::exp(z[c] - zmax);
      sum += p[c];
    }
    const float invSum = 1.0f / sum;
    for (int c = 0; c < classes; ++c)
      p[c] *= invSum;
    if (y == nullptr) continue;
    const auto label = static_cast<int32_t>(y[i]);
    assert(label >= 0 && label < classes && static_cast<float>(label) == y[i] && "label out of range");
    const float w = weights == nullptr ? 1.0f : weights[i];
    total += static_cast<double>(w) * (std::log(sum) + zmax - z[label]);
    if (dlogits != nullptr) {
      float* d = dlogits + static_cast<std::size_t>(i) * classes;
      const float scale = w * inv;
      for (int c = 0; c < classes; ++c)
        d[c] = scale * p[c];
      d[label] -= scale;
    }
  }
  return static_cast<float>(total / normalizer);
}

float sigmoid(float z) {
  return 1.0f / (1.0f + std::exp(-z));
}

// The one-output heads: logistic (outputs sigmoid(z)), squared error and Huber (outputs
// z). Same contract as softmaxCrossEntropy().
float singleOutputLoss(LossKind loss, float delta, const float* z, const float* y, const float* weights, int batch,
                       int normalizer, float* outputs, float* dz) {
  double total = 0.0;
  const float inv = 1.0f / static_cast<float>(normalizer);
  for (int i = 0; i < batch; ++i) {
    const float zi = z[i];
    outputs[i] = loss == LossKind::kLogistic ? sigmoid(zi) : zi;
    if (y == nullptr) continue;
    const float w = weights == nullptr ? 1.0f : weights[i];
    float g = 0.0f;  // d loss_i / d z_i
    double l = 0.0;
    switch (loss) {
      case LossKind::kLogistic:
        assert(y[i] >= 0.0f && y[i] <= 1.0f && "logistic label out of [0, 1]");
        l = detail::logisticLoss(zi, y[i]);
        g = outputs[i] - y[i];
        break;
      case LossKind::kSquaredError: {
        const float r = zi - y[i];
        l = 0.5 * static_cast<double>(r) * r;
        g = r;
        break;
      }
      case LossKind::kHuber: {
        const float r = zi - y[i];
        const float a = std::abs(r);
        l = a <= delta ? 0.5 * static_cast<double>(r) * r
                       : static_cast<double>(delta) * (static_cast<double>(a) - 0.5 * static_cast<double>(delta));
        g = std::clamp(r, -delta, delta);
        break;
      }
      case LossKind::kCrossEntropy:
        assert(false && "cross-entropy has its own head");
        break;
    }
    total += static_cast<double>(w) * l;
    if (dz != nullptr) dz[i] = w * inv * g;
  }
  return static_cast<float>(total / normalizer);
}

// The head of net on the last layer's outputs: fills net.probs and, when y is not null,
// returns the weighted loss and writes its gradient into dz (when not null).
float headLoss(Network& net, const float* y, const float* weights, int batch, int normalizer, float* dz) {
  const float* z = net.acts.back().data();
  if (net.loss == LossKind::kCrossEntropy)
    return softmaxCrossEntropy(z, y, weights, batch, normalizer, net.classes, net.probs.data(), dz);
  return singleOutputLoss(net.loss, net.huberDelta, z, y, weights, batch, normalizer, net.probs.data(), dz);
}

// The loss and backward pass of a batch whose forward pass is in net.acts (rows
// 0..batch) and whose inputs are x.
float lossAndBackward(Network& net, const float* params, const float* x, const float* y, const float* weights,
                      int batch, int normalizer, float* grad) {
  float* dy = net.gradA.data();
  float* dx = net.gradB.data();
  const float loss = headLoss(net, y, weights, batch, normalizer, dy);
  net.lastBatch = batch;
  for (std::size_t l = net.layers.size(); l-- > 0;) {
    const float* lin = l == 0 ? x : net.acts[l - 1].data();
    // The first layer needs no input gradient; neither does anything before the first
    // layer with parameters (a leading pool or ReLU has nothing to pass it to).
    float* target = l == 0 ? nullptr : dx;
    detail::backwardLayer(net.layers[l], params, lin, net.acts[l].data(), dy, target, grad, batch, net);
    std::swap(dy, dx);
  }
  return loss;
}

// Moves row rows[k] of a row-major buffer (rows of width floats) to row k. rows is
// ascending, so rows[k] >= k and no source is overwritten before it is read.
void compactRows(float* buffer, std::size_t width, std::span<const uint32_t> rows) {
  for (std::size_t k = 0; k < rows.size(); ++k)
    if (rows[k] != k) std::copy_n(buffer + rows[k] * width, width, buffer + k * width);
}

// Runs every layer on a batch of x into net's activations; returns the last layer's.
// A training pass normalizes with batch statistics (batch normalization) and moves the
// running statistics in params towards them.
const float* forwardLayers(Network& net, float* params, const float* x, int batch, bool training) {
  net.reserve(batch);
  net.training = training;
  const float* in = x;
  for (std::size_t l = 0; l < net.layers.size(); ++l) {
    detail::forwardLayer(net.layers[l], params, in, net.acts[l].data(), batch, net);
    in = net.acts[l].data();
  }
  if (training && !net.batchStats.empty()) detail::updateRunningStats(net, params, batch);
  return in;
}

// forwardLayers() with the first layer on a CSR batch.
void forwardLayersSparse(Network& net, float* params, const data::SparseBatch& x, bool training) {
  const int batch = static_cast<int>(x.rows());
  net.reserve(batch);
  net.training = training;
  detail::sparseForward(net.layers[0], params, x, net.acts[0].data());
  for (std::size_t l = 1; l < net.layers.size(); ++l)
    detail::forwardLayer(net.layers[l], params, net.acts[l - 1].data(), net.acts[l].data(), batch, net);
  if (training && !net.batchStats.empty()) detail::updateRunningStats(net, params, batch);
}

}  // namespace

bool Model::acceptsSparse() const {
  const LayerKind first = net_->layers.front().kind;
  return first == LayerKind::kDense || first == LayerKind::kEmbedBag;
}

std::span<const float> Model::forwardSparse(const data::SparseBatch& x) {
  assert(acceptsSparse() && x.rows() > 0);
  Network& net = *net_;
  const int batch = static_cast<int>(x.rows());
  forwardLayersSparse(net, params_.data(), x, false);
  headLoss(net, nullptr, nullptr, batch, batch, nullptr);
  net.lastBatch = batch;
  return probabilities();
}

float Model::forwardBackwardSparse(const data::SparseBatch& x, const float* y, const float* weights,
                                   std::span<float> grad, std::vector<ParamRange>* touched) {
  assert(acceptsSparse() && x.rows() > 0 && grad.size() == params_.size());
  Network& net = *net_;
  const int batch = static_cast<int>(x.rows());
  forwardLayersSparse(net, params_.data(), x, true);
  float* dy = net.gradA.data();
  float* dx = net.gradB.data();
  const float loss = headLoss(net, y, weights, batch, batch, dy);
  net.lastBatch = batch;
  for (std::size_t l = net.layers.size(); l-- > 1;) {
    detail::backwardLayer(net.layers[l], params_.data(), net.acts[l - 1].data(), net.acts[l].data(), dy, dx,
                          grad.data(), batch, net);
    std::swap(dy, dx);
  }
  const Layer& first = net.layers[0];
  if (touched == nullptr) std::fill(grad.begin(), grad.begin() + static_cast<std::ptrdiff_t>(first.biasOffset), 0.0f);
  detail::sparseBackward(first, x, dy, grad.data(), net);
  if (touched != nullptr) {
    touched->clear();
    const std::size_t out = static_cast<std::size_t>(first.out.c);
    const std::size_t in = static_cast<std::size_t>(first.in.c);
    for (uint32_t i : net.features) {
      if (first.kind == LayerKind::kEmbedBag) {
        touched->push_back({first.weightOffset + i * out, out});
      } else {
        for (std::size_t o = 0; o < out; ++o)
          touched->push_back({first.weightOffset + o * in + i, 1});
      }
    }
    touched->push_back({first.biasOffset, params_.size() - first.biasOffset});
  }
  return loss;
}

float Model::forwardBackward(const float* x, const float* y, const float* weights, int batch, std::span<float> grad) {
  assert(batch > 0 && grad.size() == params_.size());
  Network& net = *net_;
  forwardLayers(net, params_.data(), x, batch, true);
  return lossAndBackward(net, params_.data(), x, y, weights, batch, batch, grad.data());
}

float Model::backwardRows(const float* x, std::span<const uint32_t> rows, const float* y, const float* weights,
                          int normalizer, std::span<float> grad) {
  Network& net = *net_;
  assert(!rows.empty() && normalizer > 0 && grad.size() == params_.size());
  assert(std::is_sorted(rows.begin(), rows.end()) && std::adjacent_find(rows.begin(), rows.end()) == rows.end());
  assert(rows.back() < static_cast<uint32_t>(net.lastBatch) && "rows must come from the last forward pass");
  for (std::size_t l = 0; l < net.layers.size(); ++l)
    compactRows(net.acts[l].data(), net.layers[l].out.size(), rows);
  return lossAndBackward(net, params_.data(), x, y, weights, static_cast<int>(rows.size()), normalizer, grad.data());
}

std::span<const float> Model::forward(const float* x, int batch) {
  assert(batch > 0);
  Network& net = *net_;
  forwardLayers(net, params_.data(), x, batch, false);
  headLoss(net, nullptr, nullptr, batch, batch, nullptr);
  net.lastBatch = batch;
  return probabilities();
}

std::span<const float> Model::probabilities() const {
  return {net_->probs.data(), static_cast<std::size_t>(net_->lastBatch) * net_->classes};
}

float Model::outputGradientNorm(const float* outputs, float y) const {
  switch (net_->loss) {
    case LossKind::kCrossEntropy: {
      // ||p - onehot(y)||, adding the squares in class order.
      const auto label = static_cast<int32_t>(y);
      float s = 0.0f;
      for (int c = 0; c < net_->classes; ++c) {
        const float d = outputs[c] - (c == label ? 1.0f : 0.0f);
        s += d * d;
      }
      return std::sqrt(s);
    }
    case LossKind::kLogistic:
    case LossKind::kSquaredError:
      return std::abs(outputs[0] - y);
    case LossKind::kHuber:
      return std::min(std::abs(outputs[0] - y), net_->huberDelta);
  }
  return 0.0f;
}

double Model::outputLoss(const float* outputs, float y) const {
  switch (net_->loss) {
    case LossKind::kCrossEntropy:
      return -std::log(std::max(outputs[static_cast<int32_t>(y)], 1e-30f));
    case LossKind::kLogistic: {
      const double p = outputs[0];
      return -(y * std::log(std::max(p, 1e-30)) + (1.0 - y) * std::log(std::max(1.0 - p, 1e-30)));
    }
    case LossKind::kSquaredError: {
      const double r = static_cast<double>(outputs[0]) - y;
      return 0.5 * r * r;
    }
    case LossKind::kHuber: {
      const double r = std::abs(static_cast<double>(outputs[0]) - y);
      const double d = net_->huberDelta;
      return r <= d ? 0.5 * r * r : d * (r - 0.5 * d);
    }
  }
  return 0.0;
}

}  // namespace starling::model
