// Sparse models on the client (sparse_rows.hpp).
#include "starling/client/sparse_rows.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "starling/compression/row_set.hpp"
#include "starling/data/touched_features.hpp"
#include "starling/model/row_view.hpp"

namespace starling::client {

Result<RowOffer> offerRows(std::span<const data::Dataset* const> parts, uint32_t bucket) {
  if (bucket == 0) return Status(StatusCode::kInvalidArgument, "rows are offered in buckets of at least 1 row");
  if (parts.empty()) return Status(StatusCode::kInvalidArgument, "no data to offer rows of");
  const std::size_t dim = parts.front()->featureDim();
  if (dim == 0 || dim > UINT32_MAX)
    return Status(StatusCode::kInvalidArgument, fmt::format("{} features cannot be offered as rows", dim));
  std::vector<uint32_t> rows;
  for (const data::Dataset* part : parts) {
    if (part->featureDim() != dim)
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("the data's parts have {} and {} features", dim, part->featureDim()));
    std::vector<uint32_t> more = data::featuresTouched(*part);
    std::vector<uint32_t> merged;
    merged.reserve(rows.size() + more.size());
    std::set_union(rows.begin(), rows.end(), more.begin(), more.end(), std::back_inserter(merged));
    rows.swap(merged);
  }
  if (rows.empty()) return Status(StatusCode::kInvalidArgument, "the data touches no feature");
  RowOffer offer;
  offer.bucket = bucket;
  offer.touched = rows.size();
  const auto universe = static_cast<uint32_t>(dim);
  auto set = compression::RowSet::fromSorted(std::move(rows), universe);
  if (!set) return set.status();
  auto buckets = compression::coarsen(*set, bucket);
  if (!buckets) return buckets.status();
  auto covered = compression::coveredRows(*buckets, bucket, universe);
  if (!covered) return covered.status();
  offer.bytes = compression::encodeRowSet(*buckets);
  offer.covered.assign(covered->rows().begin(), covered->rows().end());
  return offer;
}

Result<wire::WelcomeMsg> compactWelcome(const wire::WelcomeMsg& welcome, const RowOffer& offer,
                                        std::size_t featureDim) {
  auto inputs = model::specInputs(welcome.modelSpec);
  if (!inputs) return inputs.status();
  if (*inputs != featureDim)
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("this client's data has {} features, the coordinator's model {} takes {}", featureDim,
                              welcome.modelSpec, *inputs));
  auto spec = model::compactSpec(welcome.modelSpec, offer.covered.size());
  if (!spec) return spec.status();
  wire::WelcomeMsg out = welcome;
  out.modelSpec = std::move(*spec);
  out.model.reset();  // a whole model is not the compact one's (the first assignment brings its values)
  return out;
}

}  // namespace starling::client
