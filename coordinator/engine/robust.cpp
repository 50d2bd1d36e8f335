#include "engine/robust.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

// gcc 12 reports -Wmaybe-uninitialized false positives inside Eigen's GEMM kernels at
// -O3 (as for common/model); silenced for this file, the engine's only Eigen user.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

namespace starling::coordinator {

namespace {

Status checkShapes(UpdateViews updates, std::size_t dim, const char* rule) {
  if (updates.empty()) return Status(StatusCode::kInvalidArgument, fmt::format("{} of no update", rule));
  for (std::size_t k = 0; k < updates.size(); ++k)
    if (updates[k].size() != dim)
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("{}: update {} has {} values, expected {}", rule, k, updates[k].size(), dim));
  return Status::ok();
}

// The values of coordinate i across the updates, into column (resized to n).
void gather(UpdateViews updates, std::size_t i, std::vector<float>& column) {
  column.resize(updates.size());
  for (std::size_t k = 0; k < updates.size(); ++k)
    column[k] = updates[k][i];
}

}  // namespace

Status coordinateMedian(UpdateViews updates, std::span<float> out) {
  if (Status s = checkShapes(updates, out.size(), "coordinate median"); !s) return s;
  const std::size_t n = updates.size(), mid = n / 2;
  std::vector<float> column;
  for (std::size_t i = 0; i < out.size(); ++i) {
    gather(updates, i, column);
    std::nth_element(column.begin(), column.begin() + static_cast<std::ptrdiff_t>(mid), column.end());
    const double upper = column[mid];
    if (n % 2 == 1) {
      out[i] = static_cast<float>(upper);
    } else {
      // The lower middle is the largest of the values before mid.
      const double lower = *std::max_element(column.begin(), column.begin() + static_cast<std::ptrdiff_t>(mid));
      out[i] = static_cast<float>((lower + upper) / 2.0);
    }
  }
  return Status::ok();
}

Status trimmedMean(UpdateViews updates, double beta, std::span<float> out) {
  if (!(beta >= 0.0 && beta < 0.5))
    return Status(StatusCode::kInvalidArgument, fmt::format("trimmed mean: beta {} is outside [0, 0.5)", beta));
  if (Status s = checkShapes(updates, out.size(), "trimmed mean"); !s) return s;
  const std::size_t n = updates.size();
  const auto cut = static_cast<std::size_t>(std::floor(beta * static_cast<double>(n)));
  std::vector<float> column;
  for (std::size_t i = 0; i < out.size(); ++i) {
    gather(updates, i, column);
    if (cut > 0) std::sort(column.begin(), column.end());
    double sum = 0;
    for (std::size_t k = cut; k < n - cut; ++k)
      sum += column[k];
    out[i] = static_cast<float>(sum / static_cast<double>(n - 2 * cut));
  }
  return Status::ok();
}

Result<std::vector<std::size_t>> multiKrumSelect(UpdateViews updates, std::size_t f, std::size_t m) {
  if (updates.empty()) return Status(StatusCode::kInvalidArgument, "multi-Krum of no update");
  const std::size_t n = updates.size();
  if (n < f + 3)
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("multi-Krum needs at least f + 3 = {} updates, has {}", f + 3, n));
  if (m < 1 || m > n)
    return Status(StatusCode::kInvalidArgument, fmt::format("multi-Krum keeps m = {} of {} updates", m, n));
  if (Status s = checkShapes(updates, updates[0].size(), "multi-Krum"); !s) return s;
  // Squared distances from the Gram matrix, ||a - b||^2 = ||a||^2 + ||b||^2 - 2 <a, b>:
  // the n^2 d multiply-adds run as one matrix product per block of coordinates (Eigen's
  // blocked, vectorized kernel) instead of a scalar loop per pair, about 10x faster at
  // n = 100. In double, so the cancellation costs ~1e-16 of the norms.
  const std::size_t dim = updates[0].size();
  constexpr std::size_t kBlock = 1024;
  Eigen::MatrixXd gram = Eigen::MatrixXd::Zero(Eigen::Index(n), Eigen::Index(n));
  Eigen::MatrixXd block(Eigen::Index(n), Eigen::Index(std::min(kBlock, dim)));
  for (std::size_t start = 0; start < dim; start += kBlock) {
    const std::size_t len = std::min(kBlock, dim - start);
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t i = 0; i < len; ++i)
        block(Eigen::Index(k), Eigen::Index(i)) = updates[k][start + i];
    gram.selfadjointView<Eigen::Lower>().rankUpdate(block.leftCols(Eigen::Index(len)));
  }
  std::vector<double> dist(n * n, 0.0);
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = 0; b < a; ++b) {
      const auto ia = Eigen::Index(a), ib = Eigen::Index(b);
      const double d = std::max(0.0, gram(ia, ia) + gram(ib, ib) - 2 * gram(ia, ib));
      dist[a * n + b] = dist[b * n + a] = d;
    }
  const std::size_t neighbours = n - f - 2;
  std::vector<double> score(n), row;
  for (std::size_t a = 0; a < n; ++a) {
    row.clear();
    for (std::size_t b = 0; b < n; ++b)
      if (b != a) row.push_back(dist[a * n + b]);
    std::partial_sort(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(neighbours), row.end());
    score[a] = std::accumulate(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(neighbours), 0.0);
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return score[a] < score[b]; });
  order.resize(m);
  std::sort(order.begin(), order.end());
  return order;
}

Result<std::vector<std::size_t>> multiKrum(UpdateViews updates, std::size_t f, std::size_t m, std::span<float> out) {
  if (Status s = checkShapes(updates, out.size(), "multi-Krum"); !s) return s;
  auto kept = multiKrumSelect(updates, f, m);
  if (!kept) return kept.status();
  for (std::size_t i = 0; i < out.size(); ++i) {
    double sum = 0;
    for (std::size_t k : *kept)
      sum += updates[k][i];
    out[i] = static_cast<float>(sum / static_cast<double>(kept->size()));
  }
  return kept;
}

double clipToNorm(std::span<float> v, double c) {
  double sq = 0;
  for (float x : v)
    sq += double(x) * double(x);
  const double norm = std::sqrt(sq);
  if (!(norm > c)) return 1.0;
  const double scale = c / norm;
  for (float& x : v)
    x = static_cast<float>(double(x) * scale);
  return scale;
}

}  // namespace starling::coordinator
