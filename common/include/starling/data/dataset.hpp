#pragma once
// Dataset: labelled examples held in memory, compactly.
//
// Images stay as bytes (one byte per pixel, 784 bytes per Fashion-MNIST example)
// and are converted to floats only per batch, by gather(); dense tabular data (CSV,
// NPY) is held as floats; sparse data (LIBSVM) is held as CSR, compressed sparse rows:
// per example the indices of its non-zero features (ascending) and their values, so
// its memory is proportional to the non-zeros, not to examples x featureDim.
// gatherSparse() yields CSR batches for models that take them (Model::acceptsSparse());
// gather() densifies the requested rows for the others. A Dataset is immutable once
// built; gather(), gatherSparse() and label() may be called from several threads at
// once.
//
// Labels are classes (int32 in [0, numClasses)) or, for regression, real values
// (targets(), float): a regression data set has numClasses() == 1 (one output) and
// every label() 0, so code that only counts examples or classes works on both; code
// that needs the values reads targets().

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "starling/data/sparse_batch.hpp"
#include "starling/util/status.hpp"

namespace starling::data {

// The categorical CSV columns of a data set (DataOptions::categorical): which value each
// example holds, kept beside the one-hot features so that the encoding can be redone
// over a vocabulary agreed later (data/categories.hpp) and the values counted for it.
// Column c is one-hot in features [offsets[c], offsets[c] + width).
struct CategoryColumns {
  std::vector<std::string> names;                // the columns' header names, in file order
  std::vector<std::size_t> offsets;              // each column's first one-hot feature
  std::size_t width = 0;                         // one-hot slots per column
  std::vector<std::vector<std::string>> values;  // per column, its distinct values by code
  std::vector<uint32_t> codes;                   // example i, column c: codes[i * names.size() + c]

  bool empty() const { return names.empty(); }
  uint32_t code(std::size_t example, std::size_t column) const { return codes[example * names.size() + column]; }
  const std::string& value(std::size_t example, std::size_t column) const {
    return values[column][code(example, column)];
  }
};

class Dataset {
 public:
  Dataset() = default;

  // Bytes: features[i * featureDim + j] is feature j of example i; gather() yields
  // float(byte) * scale. shape describes one example, e.g. {1, 28, 28}; its product
  // must equal featureDim ({featureDim} when empty).
  static Result<Dataset> fromBytes(std::vector<uint8_t> features, std::vector<int32_t> labels, std::size_t featureDim,
                                   int numClasses, float scale = 1.0f / 255.0f, std::vector<int> shape = {});
  // Floats, same layout.
  static Result<Dataset> fromFloats(std::vector<float> features, std::vector<int32_t> labels, std::size_t featureDim,
                                    int numClasses, std::vector<int> shape = {});

  // Regression: one real target per example (finite), features as in fromFloats.
  static Result<Dataset> fromFloatTargets(std::vector<float> features, std::vector<float> targets,
                                          std::size_t featureDim, std::vector<int> shape = {});

  // Sparse (CSR): example i holds the features columnIndices[k] (0-based, strictly
  // increasing within the row, below featureDim) with the values values[k], for k in
  // [rowOffsets[i], rowOffsets[i + 1]); every other feature is 0. rowOffsets has one
  // entry per example plus one, starts at 0, never decreases and ends at
  // columnIndices.size() == values.size(). featureDim may be up to 2^32 (the index type);
  // the memory is proportional to the non-zeros. kInvalidArgument naming the first
  // offending row otherwise. Labels as in fromFloats; shape is {featureDim} when it fits
  // an int, else empty.
  static Result<Dataset> fromSparse(std::vector<uint64_t> rowOffsets, std::vector<uint32_t> columnIndices,
                                    std::vector<float> values, std::vector<int32_t> labels, std::size_t featureDim,
                                    int numClasses);
  // Regression: sparse features as in fromSparse, one real target per example (finite).
  static Result<Dataset> fromSparseTargets(std::vector<uint64_t> rowOffsets, std::vector<uint32_t> columnIndices,
                                           std::vector<float> values, std::vector<float> targets,
                                           std::size_t featureDim);

  std::size_t size() const { return labels_.size(); }
  // A natural grouping of the examples (e.g. by user or device: a CSV column named by
  // partition "by-column:NAME", not a feature): group ids from 0, one per example, or
  // empty. withGroups() sets them (kInvalidArgument unless one per example).
  std::span<const uint32_t> groups() const { return groups_; }
  Status withGroups(std::vector<uint32_t> groups);
  // The categorical columns' values (empty unless a CSV file named some).
  // withCategories() sets them: kInvalidArgument unless the columns fit in the features
  // (dense data only), there is one code per example and column, and every code names a
  // value.
  const CategoryColumns& categories() const { return categories_; }
  Status withCategories(CategoryColumns categories);
  // True when the features are held as CSR (fromSparse, fromSparseTargets, LIBSVM).
  bool isSparse() const { return sparse_; }
  // Stored non-zeros: of a sparse data set its CSR entries, of a dense one
  // size() * featureDim() (every stored value, zero or not).
  std::size_t nnz() const;
  // True when the labels are real values (fromFloatTargets).
  bool isRegression() const { return regression_; }
  // The real targets of a regression data set (empty otherwise).
  std::span<const float> targets() const { return targets_; }
  float target(std::size_t i) const { return targets_[i]; }
  std::size_t featureDim() const { return featureDim_; }
  int numClasses() const { return numClasses_; }
  const std::vector<int>& shape() const { return shape_; }
  int32_t label(std::size_t i) const { return labels_[i]; }
  std::span<const int32_t> labels() const { return labels_; }

  // Writes the features of examples idx[0..n) as the rows of out, row-major:
  // out[r * featureDim() + j]. out.size() must be idx.size() * featureDim(). A sparse
  // data set densifies the requested rows only (zeros, then its non-zeros): the caller
  // sizes out, so the limit is the caller's (the Trainer refuses minibatches above
  // kMaxDensifiedBytes; Model::evaluate() densifies fewer rows at a time).
  void gather(std::span<const uint32_t> idx, std::span<float> out) const;

  // The features of examples idx[0..n) as a CSR batch (out is overwritten; its buffers
  // are reused, so a batch of the same size allocates nothing): row r is example idx[r].
  // A dense data set yields its non-zero values, so any Dataset can feed a sparse model.
  void gatherSparse(std::span<const uint32_t> idx, SparseBatch& out) const;

  // The most bytes a densified batch of a sparse data set may take where Starling
  // densifies on its own (Trainer minibatches of a dense model on sparse data): 256 MiB.
  static constexpr std::size_t kMaxDensifiedBytes = std::size_t(1) << 28;

  // A copy holding only the examples idx, in that order.
  Dataset subset(std::span<const uint32_t> idx) const;

  // Test and benchmark only (the label-flipping attack, client::Attack): every class y
  // becomes numClasses() - 1 - y; a regression target t becomes -t.
  void flipLabels();

  // The examples of parts, one after the other (part 0's first). The parts must agree in
  // how they are stored (bytes, floats or CSR), featureDim, numClasses, regression or not,
  // whether they carry groups (group ids are then made distinct per part) and their
  // categorical columns (names, offsets and width; the values are merged);
  // kInvalidArgument naming the first part that differs (from 0) otherwise.
  static Result<Dataset> concat(std::span<const Dataset> parts);

  // Bytes of memory the features and labels occupy.
  std::size_t memoryBytes() const;

 private:
  // No examples, the rest (dimensions, classes, scale, shape, storage kind) as this one.
  Dataset emptyLike() const;

  std::vector<uint8_t> bytes_;  // when stored as bytes
  std::vector<float> floats_;   // when stored as floats
  // When stored as CSR (sparse_): row i is [offsets_[i], offsets_[i + 1]) of indices_
  // and floats_ (the values).
  bool sparse_ = false;
  std::vector<uint64_t> offsets_;
  std::vector<uint32_t> indices_;
  std::vector<int32_t> labels_;
  std::vector<float> targets_;    // regression only
  std::vector<uint32_t> groups_;  // optional, one per example
  CategoryColumns categories_;    // optional
  bool regression_ = false;       // also when it holds no example
  std::size_t featureDim_ = 0;
  int numClasses_ = 0;
  float scale_ = 1.0f;
  std::vector<int> shape_;
};

}  // namespace starling::data
