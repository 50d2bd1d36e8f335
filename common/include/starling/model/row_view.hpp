#pragma once
// RowView: the parameters of some first-layer rows of a model, and the model that holds
// only them (issue 22, sparse models; docs/sparse.md).
//
// A client whose data touches the features F (ascending) of a model with one
// first-layer row per input feature (linear, mlp, embedbag: Model::acceptsSparse())
// trains, receives and sends only the parameters of those rows plus the dense rest
// (Model::firstLayerRows, Model::denseParams). Laid end to end in the order of the full
// vector, those parameters are exactly the parameter vector of the same network over
// |F| inputs, `compactSpec()`: for linear and mlp the first weight {out, in} keeps the
// columns of F, for embedbag the table {in, out} keeps the rows of F, and the rest
// follows unchanged. A client holds that compact model and its data with feature F[k]
// renamed k (data::restrictFeatures): forward, backward, optimizer, sampler, uplink
// compression and error feedback then run as for any model, at the compact size.
//
// The view maps between the two: gather() reads the compact vector out of the full one
// (what the coordinator sends and checksums), toFull() names the full positions of
// compact ones (where the coordinator adds what the client sent).
//
// Immutable after create(); any thread may use it.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "starling/model/model.hpp"
#include "starling/util/status.hpp"

namespace starling::model {

// The spec of the same network over `inputs` inputs: spec's input dimension replaced
// (linear, mlp and embedbag specs, with or without an activation prefix and head).
// kInvalidArgument for other models or inputs = 0.
Result<std::string> compactSpec(std::string_view spec, std::size_t inputs);
// The input size a linear, mlp or embedbag spec states; kInvalidArgument for others.
Result<std::size_t> specInputs(std::string_view spec);

class RowView {
 public:
  // The view of `rows` (strictly increasing, below model.inputDim(), at least one) of
  // `model` (acceptsSparse()). kInvalidArgument naming what is wrong otherwise.
  static Result<std::shared_ptr<const RowView>> create(const Model& model, std::vector<uint32_t> rows);

  std::span<const uint32_t> rows() const { return rows_; }
  std::size_t size() const { return size_; }          // the compact model's parameters
  std::size_t fullSize() const { return fullSize_; }  // the model's
  const std::string& spec() const { return spec_; }   // compactSpec(model, rows.size())

  // out[p] = full[full position of p]; full has fullSize() values, out size().
  void gather(std::span<const float> full, std::span<float> out) const;
  std::vector<float> gather(std::span<const float> full) const;
  // The inverse: full[full position of p] = compact[p]; the other values of full stay.
  void scatter(std::span<const float> compact, std::span<float> full) const;
  // checksum64 of gather(full): what a client holding the view of full computes.
  uint64_t checksum(std::span<const float> full) const;
  // Replaces each compact position (strictly increasing, below size()) by its full
  // position (strictly increasing too). kInvalidArgument for positions out of order or
  // range.
  Status toFull(std::span<uint32_t> positions) const;
  // That compactSpec()'s network has the view's parameters, one for one (it builds that
  // network: once per row set, not per use). kInternal naming both counts otherwise.
  Status checkCompact() const;
  // The full positions, in compact order: ranges of consecutive parameters.
  std::span<const ParamRange> ranges() const { return ranges_; }

 private:
  RowView() = default;

  std::vector<uint32_t> rows_;
  std::vector<ParamRange> ranges_;   // firstLayerRows(rows), then denseParams()
  std::vector<std::size_t> starts_;  // compact position of each range's first parameter
  std::size_t size_ = 0;
  std::size_t fullSize_ = 0;
  std::string spec_;
};

}  // namespace starling::model
