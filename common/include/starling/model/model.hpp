#pragma once
// Model: a small feed-forward network over one flat parameter vector.
//
// A model is built from a short spec string (the coordinator chooses it and sends it in
// Welcome; the client builds the same network):
//
//   mlp:784-200-200-10                     dense layers with ReLU between them
//   cnn:1x28x28-c16k5-p2-c32k5-p2-f128-10  conv 5x5 (valid, stride 1) + ReLU, 2x2 max-pool,
//                                          flatten, dense 128 + ReLU, dense 10
//
// The full grammar is in docs/model.md. Every network ends in a softmax cross-entropy
// loss over its last layer's outputs (the number of classes).
//
// Parameters live in one contiguous float vector described by a Layout (named tensors
// with offsets and shapes); layers read weights and write gradients through Eigen maps
// over that vector and over preallocated workspaces, so a training step allocates
// nothing once the workspaces have grown to the largest batch seen.
//
// Batches are row-major: example i occupies x[i * inputDim() .. (i + 1) * inputDim()),
// its features in C x H x W order for images (what data::Dataset::gather() writes).
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

#include "starling/util/status.hpp"

namespace starling::data {
class Dataset;
}

namespace starling::model {

// One named tensor inside the flat parameter vector.
struct TensorInfo {
  std::string name;        // e.g. "dense0.weight", "conv1.bias"
  std::size_t offset = 0;  // first element in the flat vector
  std::size_t size = 0;    // number of elements (product of shape)
  std::vector<int> shape;  // dense weight {out, in} row-major; conv weight {out, in, k, k}
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

// Loss and accuracy of a model over a data set.
struct Evaluation {
  double loss = 0.0;      // mean cross-entropy (natural log)
  double accuracy = 0.0;  // fraction in [0, 1] of examples whose arg-max is the label
  std::size_t examples = 0;
};

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
  int numClasses() const;

  // The flat parameter vector, numParams() floats. Views stay valid for the life of
  // the Model (they are invalidated by moving or assigning the Model).
  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  // Copies values into the parameters; kInvalidArgument when the size differs.
  Status setParams(std::span<const float> values);

  // Seeded initialization: He-uniform weights for layers followed by a ReLU,
  // Glorot-uniform for the last layer, zero biases. Same seed, same parameters, on
  // every machine (the generator is std::mt19937_64 with our own float conversion).
  void initialize(uint64_t seed);

  // One forward and backward pass over a batch. x holds batch rows of inputDim()
  // floats; y holds batch labels in [0, numClasses()); weights, when not null, holds a
  // per-example weight w_i. Returns the batch loss (1/batch) * sum_i w_i * CE_i
  // (w_i = 1 when weights is null) and writes its gradient with respect to params()
  // into grad (overwritten, numParams() floats). Labels out of range are a programmer
  // error (asserted). The softmax outputs stay readable through probabilities().
  float forwardBackward(const float* x, const int32_t* y, const float* weights, int batch, std::span<float> grad);

  // The backward pass of selected rows of the last forward() call, reusing that call's
  // activations instead of a second forward pass: rows are distinct positions in that
  // batch, ascending; x holds the inputs of those rows only (rows.size() rows of
  // inputDim() floats), y and weights (null: all 1) one entry per row. Returns
  // (1/normalizer) * sum_i w_i * CE_i and writes its gradient into grad, like
  // forwardBackward() on a batch of normalizer rows in which a row drawn k times appears
  // k times (its weight here being the sum of those k weights). The parameters must not
  // have changed since that forward() call. Afterwards the activations of the other
  // rows are gone and probabilities() holds the selected rows.
  float backwardRows(const float* x, std::span<const uint32_t> rows, const int32_t* y, const float* weights,
                     int normalizer, std::span<float> grad);

  // Forward only: returns the softmax outputs, batch rows of numClasses() floats,
  // in a view that stays valid until the next call on this Model.
  std::span<const float> forward(const float* x, int batch);

  // The softmax outputs of the last forward() or forwardBackward() call.
  std::span<const float> probabilities() const;

  // Loss and accuracy over the whole data set, batchSize examples at a time.
  // kInvalidArgument when the data set's feature dimension or classes do not fit.
  Result<Evaluation> evaluate(const data::Dataset& dataset, int batchSize = 500);

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
