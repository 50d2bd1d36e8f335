// ClientRowSet (client_rows.hpp).
#include "starling/coordinator/client_rows.hpp"

#include <fmt/format.h>

#include "starling/compression/row_set.hpp"

namespace starling::coordinator {

Result<std::shared_ptr<const ClientRowSet>> ClientRowSet::create(std::shared_ptr<const model::Model> model,
                                                                 std::vector<uint8_t> bytes, uint32_t bucket) {
  if (!model || !model->acceptsSparse())
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("model {} has no first-layer rows (linear, mlp and embedbag do)",
                              model ? model->spec() : std::string("(none)")));
  if (bucket == 0 || model->inputDim() > UINT32_MAX)
    return Status(StatusCode::kInvalidArgument, fmt::format("row set with buckets of {} rows", bucket));
  std::shared_ptr<ClientRowSet> rows(new ClientRowSet());
  rows->model_ = std::move(model);
  rows->bytes_ = std::move(bytes);
  rows->bucket_ = bucket;
  auto view = rows->build();
  if (!view) return view.status();
  STARLING_RETURN_IF_ERROR((*view)->checkCompact());
  rows->viewSize_ = (*view)->size();
  rows->rows_ = (*view)->rows().size();
  return std::shared_ptr<const ClientRowSet>(std::move(rows));
}

Result<std::shared_ptr<const model::RowView>> ClientRowSet::build() const {
  const auto inputs = static_cast<uint32_t>(model_->inputDim());
  auto covered = compression::decodeCoveredRows(bytes_, bucket_, inputs);
  if (!covered) return covered.status().withContext("the client's row set");
  if (covered->empty()) return Status(StatusCode::kMalformed, "the client's row set is empty");
  return model::RowView::create(*model_, std::vector<uint32_t>(covered->rows().begin(), covered->rows().end()));
}

std::shared_ptr<const model::RowView> ClientRowSet::view() const {
  auto v = build();  // checked by create(): the same bytes build the same view
  return v ? *v : nullptr;
}

}  // namespace starling::coordinator
