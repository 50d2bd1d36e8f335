#pragma once
// Private to common/model: the layers of a network, their shapes, and the workspaces a
// Model's forward and backward passes run in.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "starling/model/model.hpp"

namespace starling::model::detail {

// The shape of one example's activations: channels x height x width (a vector is
// {n, 1, 1}).
struct Shape {
  int c = 0;
  int h = 1;
  int w = 1;
  std::size_t size() const { return static_cast<std::size_t>(c) * h * w; }
};

// kEmbedBag: the first layer of embedbag specs, y = E^T x + b with the table E stored
// {in, out} row-major (feature i's embedding is contiguous), the transpose of kDense's
// {out, in}. On a sparse batch y is the value-weighted sum of the rows of E of the
// features present (divided by the sum of its values when `mean` is set).
// kGru: one GRU layer over `steps` time steps of in.c / steps features (an example is
// time-major: step t's features contiguous); its output is the last hidden state.
// Parameters as ONNX stores them, gates in the order z, r, h: W {1, 3H, F} at
// weightOffset, R {1, 3H, H} right after it, B {1, 6H} (W's biases, then R's) at
// biasOffset.
//
// Kinds after kEmbedBag (cnn specs): kAvgPool (window = stride, no padding),
// kGlobalAvgPool (C x H x W -> C), kBatchNorm (per channel: gamma at weightOffset, beta
// at biasOffset, running mean and variance at meanOffset and varOffset), kLeakyRelu
// (slope alpha), kClip (clamp to [alpha, beta]). New kinds are appended: the order is
// not part of any file format, but other branches add kinds too.
enum class LayerKind {
  kDense,
  kRelu,
  kConv,
  kMaxPool,
  kTanh,
  kSigmoid,
  kEmbedBag,
  kAvgPool,
  kGlobalAvgPool,
  kBatchNorm,
  kLeakyRelu,
  kClip,
  kGru,
};

// Batch normalization's fixed hyperparameters (PyTorch's): the running statistics move
// by kBatchNormMomentum of the batch's towards it in each training forward pass.
constexpr float kBatchNormMomentum = 0.1f;
constexpr float kBatchNormEps = 1e-5f;

struct Layer {
  LayerKind kind = LayerKind::kDense;
  Shape in;
  Shape out;
  int kernel = 0;                // conv kernel or pool window: its width (and height unless kernelH says)
  std::size_t weightOffset = 0;  // dense and conv only
  std::size_t biasOffset = 0;
  bool reluFollows = false;  // chooses He (true) or Glorot (false: tanh, sigmoid, none) initialization
  // Conv and pools: the window's height (1 on 1-D inputs, else kernel), the strides
  // (pools: the window) and the symmetric zero padding of each side (conv only).
  int kernelH = 0;
  int strideH = 1;
  int strideW = 1;
  int padH = 0;
  int padW = 0;
  float alpha = 0.0f;           // kLeakyRelu: the slope below 0; kClip: the lower bound
  float beta = 0.0f;            // kClip: the upper bound
  float eps = kBatchNormEps;    // kBatchNorm
  std::size_t meanOffset = 0;   // kBatchNorm: running mean and variance (not trained:
  std::size_t varOffset = 0;    // their gradient is 0)
  std::size_t statsOffset = 0;  // kBatchNorm: its 2 x channels floats in Network::batchStats
  int steps = 0;                // kGru: time steps
  bool resetBefore = false;     // kGru: the reset gate scales h before R_h (gru.cpp)
  bool mean = false;            // kEmbedBag: the mean of the rows rather than their sum
};

// Layers plus their workspaces. Copying copies the workspaces too (they hold no
// pointers), so a copied Model is independent.
struct Network {
  std::string spec;
  Layout layout;
  Shape input;
  int classes = 0;  // outputs of the last layer
  LossKind loss = LossKind::kCrossEntropy;
  float huberDelta = 0.0f;
  std::vector<Layer> layers;

  // Workspaces, grown by reserve() and never shrunk.
  int capacity = 0;                      // largest batch the buffers fit
  std::vector<std::vector<float>> acts;  // acts[l]: output of layer l, batch x out
  std::vector<float> gradA;              // ping-pong buffers for activation gradients
  std::vector<float> gradB;
  std::vector<float> probs;  // the head's outputs (Model::forward()), batch x classes
  std::vector<float> col;    // conv im2col scratch, one example
  std::vector<float> dcol;
  std::vector<float> seq;  // kGru: the gates and hidden states of every step (backward)
  int lastBatch = 0;       // rows of probs that are valid
  // Set by the training passes before their forward pass: batch normalization then
  // normalizes with the batch's statistics (and their backward pass), and records them
  // in batchStats at the layer's statsOffset (mean, then biased variance, per channel)
  // for updateRunningStats(). Clear: the running statistics.
  bool training = false;
  std::vector<float> batchStats;

  // Sparse passes: per input feature the pass that last touched it (seenAt, grown to
  // the input size on first use), and the distinct features of the current batch.
  std::vector<uint32_t> seenAt;
  uint32_t pass = 0;
  std::vector<uint32_t> features;

  void reserve(int batch);
};

// The logistic loss of logit z with label y in [0, 1]: softplus(z) - y z, without
// overflow.
inline double logisticLoss(float z, float y) {
  const double zd = z;
  return std::max(zd, 0.0) - static_cast<double>(y) * zd + std::log1p(std::exp(-std::abs(zd)));
}

// Builds the layers and layout of a spec; kInvalidArgument with a message on failure.
Result<Network> parseSpec(std::string_view spec);

// Moves the running statistics of every batch-normalization layer towards the last
// training forward pass's batch statistics (PyTorch's rule: unbiased variance).
void updateRunningStats(const Network& net, float* params, int batch);

// Layer kernels. x and y hold batch examples of in.size() / out.size() floats.
// Backward writes (overwrites) the layer's parameter gradients at the layer's offsets
// in grad, and the input gradient into dx unless dx is null.
void forwardLayer(const Layer& layer, const float* params, const float* x, float* y, int batch, Network& net);
void backwardLayer(const Layer& layer, const float* params, const float* x, const float* y, const float* dy, float* dx,
                   float* grad, int batch, Network& net);

// kGru's kernels (gru.cpp), with forwardLayer()'s and backwardLayer()'s contracts.
void gruForward(const Layer& layer, const float* params, const float* x, float* y, int batch);
void gruBackward(const Layer& layer, const float* params, const float* x, const float* dy, float* dx, float* grad,
                 int batch, Network& net);

// A mean embedding bag's factor for one example: 1 / (the sum of its values), 0 for an
// empty bag or values summing to 0. The values are added in order.
float bagScale(const float* values, std::size_t count);

// The first layer (kDense or kEmbedBag) on a CSR batch: O(nnz * out).
void sparseForward(const Layer& layer, const float* params, const data::SparseBatch& x, float* y);
// Its parameter gradients from a CSR batch: the weights of the features present in x
// (the distinct ones land in net.features, in order of first appearance) and the bias
// are overwritten; no other entry of grad is written. O(nnz * out).
void sparseBackward(const Layer& layer, const data::SparseBatch& x, const float* dy, float* grad, Network& net);

}  // namespace starling::model::detail
