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
    if (l.kind != LayerKind::kDense && l.kind != LayerKind::kConv) continue;
    const std::size_t fanIn =
        l.kind == LayerKind::kDense ? l.in.size() : static_cast<std::size_t>(l.in.c) * l.kernel * l.kernel;
    const std::size_t fanOut =
        l.kind == LayerKind::kDense ? l.out.size() : static_cast<std::size_t>(l.out.c) * l.kernel * l.kernel;
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
float softmaxCrossEntropy(const float* logits, const int32_t* y, const float* weights, int batch, int normalizer,
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
    const int32_t label = y[i];
    assert(label >= 0 && label < classes && "label out of range");
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

// The loss and backward pass of a batch whose forward pass is in net.acts (rows
// 0..batch) and whose inputs are x.
float lossAndBackward(Network& net, const float* params, const float* x, const int32_t* y, const float* weights,
                      int batch, int normalizer, float* grad) {
  float* dy = net.gradA.data();
  float* dx = net.gradB.data();
  const float loss =
      softmaxCrossEntropy(net.acts.back().data(), y, weights, batch, normalizer, net.classes, net.probs.data(), dy);
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
const float* forwardLayers(Network& net, const float* params, const float* x, int batch) {
  net.reserve(batch);
  const float* in = x;
  for (std::size_t l = 0; l < net.layers.size(); ++l) {
    detail::forwardLayer(net.layers[l], params, in, net.acts[l].data(), batch, net);
    in = net.acts[l].data();
  }
  return in;
}

}  // namespace

float Model::forwardBackward(const float* x, const int32_t* y, const float* weights, int batch, std::span<float> grad) {
  assert(batch > 0 && grad.size() == params_.size());
  Network& net = *net_;
  forwardLayers(net, params_.data(), x, batch);
  return lossAndBackward(net, params_.data(), x, y, weights, batch, batch, grad.data());
}

float Model::backwardRows(const float* x, std::span<const uint32_t> rows, const int32_t* y, const float* weights,
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
  const float* in = forwardLayers(net, params_.data(), x, batch);
  softmaxCrossEntropy(in, nullptr, nullptr, batch, batch, net.classes, net.probs.data(), nullptr);
  net.lastBatch = batch;
  return probabilities();
}

std::span<const float> Model::probabilities() const {
  return {net_->probs.data(), static_cast<std::size_t>(net_->lastBatch) * net_->classes};
}

}  // namespace starling::model
