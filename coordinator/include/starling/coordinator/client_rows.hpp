#pragma once
// ClientRowSet: the rows a client trains (sparse models, docs/sparse.md), as the
// coordinator keeps them between rounds: the row set as the client coded it in Hello
// (compression::encodeRowSet: sorted gaps, Rice-coded, or a bitmap or varints when
// smaller; about 0.65 bytes a row on hashed text) and its bucket size, plus the task's
// model shared by every client. view() expands it to the model::RowView an assignment
// or an update needs, for the moment it is needed: a coordinator with 10,000 clients
// of 5,000 rows each keeps about 35 MB of row sets instead of the views' 1.4 GB.
//
// Immutable after create(); any thread may call view().

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "starling/model/model.hpp"
#include "starling/model/row_view.hpp"
#include "starling/util/status.hpp"

namespace starling::coordinator {

class ClientRowSet {
 public:
  // The buckets of `bucket` rows coded in `bytes` over `model`'s inputs (an
  // acceptsSparse() model); kInvalidArgument for a model without first-layer rows or
  // bucket 0, kMalformed naming what is wrong with the bytes (or an empty set).
  static Result<std::shared_ptr<const ClientRowSet>> create(std::shared_ptr<const model::Model> model,
                                                            std::vector<uint8_t> bytes, uint32_t bucket);

  // The view of the covered rows (built anew from the coded set: O(rows), no model).
  std::shared_ptr<const model::RowView> view() const;
  std::size_t viewSize() const { return viewSize_; }  // the compact model's parameters
  std::size_t rows() const { return rows_; }          // covered rows
  std::span<const uint8_t> bytes() const { return bytes_; }
  uint32_t bucket() const { return bucket_; }
  // The model's parameters (what an update over the whole model has).
  std::size_t fullSize() const { return model_->numParams(); }

 private:
  ClientRowSet() = default;
  Result<std::shared_ptr<const model::RowView>> build() const;

  std::shared_ptr<const model::Model> model_;
  std::vector<uint8_t> bytes_;
  uint32_t bucket_ = 1;
  std::size_t viewSize_ = 0;
  std::size_t rows_ = 0;
};

}  // namespace starling::coordinator
