#include "engine/statistics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace starling::coordinator {

Status checkFeatureSums(const data::FeatureSums& s, std::size_t featureDim) {
  auto bad = [](std::string why) { return Status(StatusCode::kMalformed, "feature statistics: " + std::move(why)); };
  if (s.sum.size() != featureDim)
    return bad(fmt::format("{} features, the task's model has {}", s.sum.size(), featureDim));
  if (s.count.size() != featureDim || s.sumSquares.size() != featureDim)
    return bad(
        fmt::format("{} counts, {} sums and {} sums of squares", s.count.size(), s.sum.size(), s.sumSquares.size()));
  for (std::size_t j = 0; j < featureDim; ++j) {
    if (!std::isfinite(s.count[j]) || s.count[j] < 0 || s.count[j] > double(s.examples))
      return bad(fmt::format("feature {}: count {} of {} examples", j, s.count[j], s.examples));
    if (!std::isfinite(s.sum[j]) || !std::isfinite(s.sumSquares[j]) || s.sumSquares[j] < 0)
      return bad(fmt::format("feature {}: sum {}, sum of squares {}", j, s.sum[j], s.sumSquares[j]));
  }
  return Status::ok();
}

data::FeatureSums featureSumsOf(const wire::FeatureStatsMsg& m) {
  data::FeatureSums s;
  s.count = m.count;
  s.sum = m.sum;
  s.sumSquares = m.sumSquares;
  s.examples = m.examples;
  s.sparse = m.sparse;
  return s;
}

Result<StatisticsResult> mergeFeatureSums(const std::map<std::string, data::FeatureSums>& byClient) {
  if (byClient.empty()) return Status(StatusCode::kInvalidArgument, "no client sent feature statistics");
  const std::size_t dim = byClient.begin()->second.features();
  std::vector<double> count(dim, 0.0), sum(dim, 0.0), squares(dim, 0.0);
  StatisticsResult r;
  bool centre = true;
  for (const auto& [id, s] : byClient) {  // id order: the same bits whatever the arrival order
    if (s.features() != dim || s.count.size() != dim || s.sumSquares.size() != dim)
      return Status(StatusCode::kInvalidArgument, fmt::format("client '{}' sent statistics of {} features, '{}' of {}",
                                                              id, s.features(), byClient.begin()->first, dim));
    for (std::size_t j = 0; j < dim; ++j) {
      count[j] += s.count[j];
      sum[j] += s.sum[j];
      squares[j] += s.sumSquares[j];
    }
    centre = centre && !s.sparse;
    r.clients.push_back(id);
    r.examples += s.examples;
  }
  r.scaling.centre = centre;
  r.scaling.mean.resize(dim);
  r.scaling.std.resize(dim);
  for (std::size_t j = 0; j < dim; ++j) {
    const double mean = count[j] > 0 ? sum[j] / count[j] : 0.0;
    const double var = count[j] > 0 ? std::max(0.0, squares[j] / count[j] - mean * mean) : 0.0;
    const double sd = std::sqrt(var);
    r.scaling.mean[j] = mean;
    r.scaling.std[j] = sd > 0 ? sd : 1.0;
  }
  return r;
}

}  // namespace starling::coordinator
