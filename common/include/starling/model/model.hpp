#pragma once
// Model: a small feed-forward network over one flat parameter vector.
//
// A model is built from a short spec string (the coordinator chooses it and sends it in
// Welcome; the client builds the same network):
//
//   mlp:784-200-200-10                     dense layers with ReLU between them
//   mlp:tanh:784-64-10                     the same with tanh (or sigmoid, relu) between them
//   linear:784-10                          one dense layer, no hidden layer
//   embedbag:262144-64-32-2                an embedding bag (the 262144 x 64 table E, a
//                                          bias and ReLU) then an mlp tail 64-32-2; on
//                                          sparse data its cost is O(nnz x 64)
//   cnn:1x28x28-c16k5-p2-c32k5-p2-f128-10  conv 5x5 (valid, stride 1) + ReLU, 2x2 max-pool,
//                                          flatten, dense 128 + ReLU, dense 10
//
// A suffix names the loss head on the last layer's outputs:
//   (none) or /ce  softmax cross-entropy over >= 2 outputs, one per class (classification)
//   /logistic      logistic loss on one output z, P(y=1) = sigmoid(z), labels 0/1 (binary)
//   /mse           squared error 0.5 (f - y)^2 on one output f (regression)
//   /huber:D       Huber loss with delta D > 0 on one output (regression)
// e.g. "linear:13-1/mse" is linear regression, "linear:30-1/logistic" logistic regression.
// The canonical spec (spec()) drops "/ce" and "relu:", so the specs and model files
// written before the heads existed stay valid and canonical. The full grammar, and the
// short forms resolveSpec() completes from the data, are in docs/model.md.
//
// Parameters live in one contiguous float vector described by a Layout (named tensors
// with offsets and shapes); layers read weights and write gradients through Eigen maps
// over that vector and over preallocated workspaces, so a training step allocates
// nothing once the workspaces have grown to the largest batch seen.
//
// Batches are row-major: example i occupies x[i * inputDim() .. (i + 1) * inputDim()),
// its features in C x H x W order for images (what data::Dataset::gather() writes).
// Models whose first layer is dense (linear, mlp, embedbag: acceptsSparse()) also take
// CSR batches (data::SparseBatch, what Dataset::gatherSparse() writes): the first
// layer then costs O(nnz x its outputs) forward and backward, and its gradient touches
// only the weights of the features present (see forwardBackwardSparse()).
//
// Thread-safety: a Model is a value (copyable, movable). Its forward passes use
// internal workspaces, so one Model may be used by one thread at a time; copies are
// independent.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "starling/data/sparse_batch.hpp"
#include "starling/data/task_kind.hpp"
#include "starling/model/metrics.hpp"
#include "starling/util/status.hpp"

namespace starling::data {
class Dataset;
}

namespace starling::model {

// The label of example i as the training calls take it: the real target of a regression
// data set, the class index as a float otherwise (exact below 2^24 classes).
float labelValue(const data::Dataset& dataset, std::size_t i);

// One named tensor inside the flat parameter vector.
struct TensorInfo {
  std::string name;        // e.g. "dense0.weight", "conv1.bias"
  std::size_t offset = 0;  // first element in the flat vector
  std::size_t size = 0;    // number of elements (product of shape)
  std::vector<int> shape;  // dense weight {out, in} row-major; conv weight {out, in, k, k}
};

// A run of count parameters from offset in the flat vector.
struct ParamRange {
  std::size_t offset = 0;
  std::size_t count = 0;
};

// The tensors of a model in the order they appear in the flat vector, without gaps.
class Layout {
 public:
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  std::size_t size() const { return size_; }  // total number of floats
  // The tensor with this name, or nullptr.
  const TensorInfo* find(std::string_view name) const;

  // Appends a tensor at the end; returns its offset.
  std::size_t add(std::string name, std::vector<int> shape);

 private:
  std::vector<TensorInfo> tensors_;
  std::size_t size_ = 0;
};

// Loss and metrics of a model over a data set.
struct Evaluation {
  double loss = 0.0;      // mean loss of the model's head: cross-entropy or logistic log-loss
                          // (natural log), 0.5 (f - y)^2 or Huber for regression
  double accuracy = 0.0;  // classification: fraction in [0, 1] of examples whose arg-max is
                          // the label; binary: correct at P(y=1) >= 0.5; regression: 0
  std::size_t examples = 0;
  Metrics metrics;  // every metric of the task (metrics.hpp)
  EvalStats stats;  // the sums behind them, to add across shards or clients
};

// The loss head at the end of a network (the spec's suffix).
enum class LossKind { kCrossEntropy, kLogistic, kSquaredError, kHuber };

// Completes a spec from the data: the short forms
//   "linear"                        -> "linear:IN-OUT/LOSS"
//   "mlp:hidden:64-32"              -> "mlp:IN-64-32-OUT/LOSS"
//   "mlp:tanh:hidden:64-32"         -> "mlp:tanh:IN-64-32-OUT/LOSS" (sigmoid, relu alike)
//   "embedbag:hidden:16-32"         -> "embedbag:IN-16-32-OUT/LOSS" (16: the embedding width;
//                                      activation prefixes as for mlp)
// with IN = inputDim, OUT = numClasses for classification and 1 for binary and regression,
// LOSS = the task's head (classification: none, i.e. cross-entropy; binary: logistic;
// regression: mse, or huber:D when huberDelta > 0). Full forms (mlp, linear, cnn) are
// checked against inputDim and OUT (the error names both; embedbag too) and get the task's loss when
// they have no suffix; a spec that has a suffix must agree with the task. Returns the
// canonical spec; kInvalidArgument with a message otherwise.
Result<std::string> resolveSpec(std::string_view spec, data::TaskKind task, std::size_t inputDim, int numClasses,
                                float huberDelta = 0);

namespace detail {
struct Network;  // layers and workspaces; private to common/model
}

class Model {
 public:
  // Parses a spec (see above and docs/model.md). An unusable spec is kInvalidArgument
  // with a message that names the offending part. Parameters start at zero: call
  // initialize() or assign params().
  static Result<Model> fromSpec(std::string_view spec);

  Model(const Model& other);
  Model& operator=(const Model& other);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // The spec in canonical form (the string fromSpec() was given, trimmed).
  const std::string& spec() const;
  const Layout& layout() const;
  std::size_t numParams() const { return params_.size(); }
  std::size_t inputDim() const;
  // The number of outputs of the last layer: the classes for cross-entropy, 1 for the
  // logistic, squared-error and Huber heads.
  int numClasses() const;
  // The task the loss head implies: cross-entropy -> classification, logistic -> binary,
  // mse and huber -> regression.
  data::TaskKind task() const;
  LossKind lossKind() const;
  float huberDelta() const;  // D of /huber:D, 0 for the other heads

  // The flat parameter vector, numParams() floats. Views stay valid for the life of
  // the Model (they are invalidated by moving or assigning the Model).
  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  // Copies values into the parameters; kInvalidArgument when the size differs.
  Status setParams(std::span<const float> values);

  // Seeded initialization: He-uniform weights for layers followed by a ReLU,
  // Glorot-uniform for layers followed by tanh or sigmoid and for the last layer, zero
  // biases. Same seed, same parameters, on
  // every machine (the generator is std::mt19937_64 with our own float conversion).
  void initialize(uint64_t seed);

  // One forward and backward pass over a batch. x holds batch rows of inputDim()
  // floats; y holds batch labels, one float per example: the class index in
  // [0, numClasses()) for cross-entropy, 0 or 1 for logistic, the real target for mse
  // and huber (labelValue() reads one from a data set). weights, when not null, holds a
  // per-example weight w_i. Returns the batch loss (1/batch) * sum_i w_i * L_i
  // (w_i = 1 when weights is null, L_i the head's loss) and writes its gradient with
  // respect to params() into grad (overwritten, numParams() floats). Labels out of
  // range are a programmer error (asserted). The outputs stay readable through
  // probabilities().
  float forwardBackward(const float* x, const float* y, const float* weights, int batch, std::span<float> grad);

  // The backward pass of selected rows of the last forward() call, reusing that call's
  // activations instead of a second forward pass: rows are distinct positions in that
  // batch, ascending; x holds the inputs of those rows only (rows.size() rows of
  // inputDim() floats), y and weights (null: all 1) one entry per row. Returns
  // (1/normalizer) * sum_i w_i * CE_i and writes its gradient into grad, like
  // forwardBackward() on a batch of normalizer rows in which a row drawn k times appears
  // k times (its weight here being the sum of those k weights). The parameters must not
  // have changed since that forward() call. Afterwards the activations of the other
  // rows are gone and probabilities() holds the selected rows.
  float backwardRows(const float* x, std::span<const uint32_t> rows, const float* y, const float* weights,
                     int normalizer, std::span<float> grad);

  // Forward only: returns the outputs, batch rows of numClasses() floats, in a view that
  // stays valid until the next call on this Model. Per head: the softmax probabilities
  // (cross-entropy), P(y=1) = sigmoid(z) (logistic), the prediction f (mse, huber).
  std::span<const float> forward(const float* x, int batch);

  // Whether the first layer takes CSR batches (linear, mlp and embedbag; not cnn).
  bool acceptsSparse() const;

  // forwardBackward() on a CSR batch of x.rows() examples (acceptsSparse() models,
  // indices below inputDim()): the same loss and gradient as on the densified rows, up
  // to float rounding. The first layer costs O(nnz x its outputs). When touched is null,
  // grad is overwritten whole (numParams() floats, zero outside the support: that fill
  // is O(numParams())). When touched is not null, only the ranges listed there are
  // written: the first layer's weights of the features present in x (one range per
  // feature for embedbag, one per feature and output for linear and mlp), then one
  // range from the first layer's bias to the end (the rest of the network); the
  // gradient is zero everywhere else and those entries of grad are left as they were
  // (a caller that keeps grad zero outside them, as the Trainer does, pays O(nnz)).
  float forwardBackwardSparse(const data::SparseBatch& x, const float* y, const float* weights, std::span<float> grad,
                              std::vector<ParamRange>* touched = nullptr);
  // forward() on a CSR batch (acceptsSparse() models).
  std::span<const float> forwardSparse(const data::SparseBatch& x);

  // The parameters of first-layer rows (issue 22, sparse models; acceptsSparse()
  // models). Row j is input feature j; its parameters are, for embedbag, row j of the
  // table "embed.weight" {in, out} (out contiguous floats from offset + j * out), and
  // for linear and mlp, column j of "dense0.weight" {out, in} (one float per output,
  // at offset + o * in + j). rows: strictly increasing, below inputDim(). Returns the
  // ranges sorted by offset, disjoint, adjacent ones merged (a run of consecutive rows
  // is one range for embedbag, one range per output for linear and mlp), covering
  // exactly the rows' parameters. kInvalidArgument for rows out of order or range, or a
  // model without such a first layer (cnn, gru).
  Result<std::vector<ParamRange>> firstLayerRows(std::span<const uint32_t> rows) const;
  // The parameters that belong to no row, which every client holds whole: from the
  // first layer's bias to the end (what forwardBackwardSparse() lists last). For a
  // model without rows (cnn, gru), every parameter.
  ParamRange denseParams() const;

  // The outputs (as forward() returns them) of the last forward(), forwardBackward() or
  // backwardRows() call (or of their sparse forms).
  std::span<const float> probabilities() const;

  // The norm of the gradient of the loss with respect to the network's last-layer
  // outputs, for one row of outputs (as forward() returns them) with label y: the
  // Sampler's score. Cross-entropy ||p - onehot(y)||, logistic |p - y|, mse |f - y|,
  // huber min(|f - y|, D).
  float outputGradientNorm(const float* outputs, float y) const;
  // The head's loss of one row of outputs (as forward() returns them) with label y, as
  // evaluate() and the Trainer's loss probe count it (probabilities clamped at 1e-30).
  double outputLoss(const float* outputs, float y) const;

  // Whether the data set fits the model: its feature dimension, and labels of the
  // model's task (classes no more than the outputs for cross-entropy, at most 2 classes
  // for logistic, real targets for mse and huber). kInvalidArgument naming both.
  Status checkData(const data::Dataset& dataset) const;

  // Loss and metrics over the whole data set, batchSize examples at a time (loss,
  // accuracy and examples as before the heads existed; metrics and stats per task).
  // A sparse data set goes through forwardSparse() when acceptsSparse(); otherwise its
  // rows are densified, at most data::Dataset::kMaxDensifiedBytes at a time.
  // kInvalidArgument when the data set does not fit (checkData()).
  Result<Evaluation> evaluate(const data::Dataset& dataset, int batchSize = 500);
  // The summable statistics alone (what evaluate() finalizes).
  Result<EvalStats> evalStats(const data::Dataset& dataset, int batchSize = 500);

  // Model file: magic "STRLMDL\0", u32 version (1), u32 spec length, spec bytes,
  // u64 parameter count, the parameters as little-endian float32, u64 checksum of the
  // parameters. save() writes to path + ".tmp" and renames over path.
  Status save(const std::string& path) const;
  // Missing file: kNotFound; truncated or inconsistent contents or wrong checksum:
  // kMalformed; another version: kUnsupported.
  static Result<Model> load(const std::string& path);

 private:
  Model();
  std::unique_ptr<detail::Network> net_;
  std::vector<float> params_;
};

}  // namespace starling::model
