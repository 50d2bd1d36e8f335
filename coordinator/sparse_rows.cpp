// Sparse models at the coordinator (sparse_rows.hpp).
#include "starling/coordinator/sparse_rows.hpp"

#include <fmt/format.h>

namespace starling::coordinator {

Result<std::shared_ptr<const ClientRowSet>> offeredRows(const wire::HelloMsg& hello,
                                                        std::shared_ptr<const model::Model> model) {
  if (hello.rowSet.empty()) return std::shared_ptr<const ClientRowSet>();
  if (model && !model->acceptsSparse())
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the client offers its rows, but model {} has no first-layer rows", model->spec()));
  return ClientRowSet::create(std::move(model), hello.rowSet, hello.rowBucket);
}

std::string sparseRowsRefusal(const TaskConfig& task, bool hasVocabulary, bool centredScaling, bool distributedNoise) {
  if (!task.sparseRows) return "train.sparse-rows is off";
  if (distributedNoise) return "distributed noise needs every client's share on every coordinate";
  if (hasVocabulary) return "the categorical vocabulary re-codes the features";
  if (centredScaling) return "centred feature scaling makes every feature non-zero";
  return "";
}

Status decodeUpdate(const compression::PayloadView& payload, const model::RowView* view, uint32_t dim,
                    compression::Compressed& out) {
  if (view == nullptr) return compression::decode(payload, dim, out);
  const auto m = static_cast<uint32_t>(view->size());
  STARLING_RETURN_IF_ERROR(compression::decode(payload, m, out));
  using compression::Encoding;
  const bool indexed = out.encoding == Encoding::kTopK || out.encoding == Encoding::kRandK;
  if (!indexed || out.valueFormat == compression::ValueFormat::kXor32) {
    if (out.valueFormat == compression::ValueFormat::kXor32)
      return Status(StatusCode::kMalformed, "an update cannot carry XOR values");
    std::vector<float> dense(m, 0.0f);
    STARLING_RETURN_IF_ERROR(compression::expand(out, dense));
    out.clear();
    out.valueFormat = compression::ValueFormat::kFp32;
    out.indices.resize(m);
    for (uint32_t p = 0; p < m; ++p)
      out.indices[p] = p;
    out.values = std::move(dense);
  }
  // Rand-k's indices were drawn over the view: as placed, they are top-k's.
  out.encoding = Encoding::kTopK;
  out.seed = 0;
  out.count = dim;
  return view->toFull(out.indices);
}

}  // namespace starling::coordinator
