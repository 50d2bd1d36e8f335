// EvalStats, their merging and wire form, finalize() and the exact AUC.
#include "starling/model/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace starling::model {

std::size_t aucBin(float probability) {
  if (!(probability > 0.0f)) return 0;
  if (probability >= 1.0f) return kAucBins - 1;
  const auto bin = static_cast<std::size_t>(static_cast<double>(probability) * kAucBins);
  return std::min(bin, kAucBins - 1);
}

EvalStats EvalStats::empty(data::TaskKind task, uint32_t classes) {
  EvalStats s;
  s.task = task;
  s.classes = classes;
  if (task == data::TaskKind::kBinary) {
    s.positives.assign(kAucBins, 0);
    s.negatives.assign(kAucBins, 0);
  }
  return s;
}

Status EvalStats::merge(const EvalStats& other) {
  if (other.task != task)
    return {StatusCode::kInvalidArgument, "cannot merge " + std::string(data::taskKindName(other.task)) +
                                              " statistics into " + std::string(data::taskKindName(task)) + " ones"};
  if (other.classes != classes)
    return {StatusCode::kInvalidArgument, "cannot merge statistics of " + std::to_string(other.classes) +
                                              " classes into ones of " + std::to_string(classes)};
  if (other.positives.size() != positives.size() || other.negatives.size() != negatives.size())
    return {StatusCode::kInvalidArgument, "cannot merge statistics of " + std::to_string(other.positives.size()) +
                                              " AUC bins into ones of " + std::to_string(positives.size())};
  count += other.count;
  lossSum += other.lossSum;
  correct += other.correct;
  top5Correct += other.top5Correct;
  for (std::size_t b = 0; b < positives.size(); ++b) {
    positives[b] += other.positives[b];
    negatives[b] += other.negatives[b];
  }
  sumSqErr += other.sumSqErr;
  sumAbsErr += other.sumAbsErr;
  sumY += other.sumY;
  sumY2 += other.sumY2;
  return Status::ok();
}

namespace {
constexpr double kStatsVersion = 1.0;
constexpr std::size_t kHeader = 12;  // fields before the histograms
}  // namespace

std::vector<double> EvalStats::toVector() const {
  std::vector<double> v = {kStatsVersion,
                           static_cast<double>(static_cast<int>(task)),
                           static_cast<double>(classes),
                           static_cast<double>(count),
                           lossSum,
                           static_cast<double>(correct),
                           static_cast<double>(top5Correct),
                           sumSqErr,
                           sumAbsErr,
                           sumY,
                           sumY2,
                           static_cast<double>(positives.size())};
  v.reserve(kHeader + 2 * positives.size());
  for (uint64_t p : positives)
    v.push_back(static_cast<double>(p));
  for (uint64_t n : negatives)
    v.push_back(static_cast<double>(n));
  return v;
}

Result<EvalStats> EvalStats::fromVector(std::span<const double> v) {
  auto bad = [](const std::string& why) { return Status{StatusCode::kMalformed, "evaluation statistics: " + why}; };
  // A non-negative integer below 2^53.
  auto count = [](double x) { return x >= 0.0 && x <= 9007199254740992.0 && std::floor(x) == x; };
  if (v.size() < kHeader) return bad(std::to_string(v.size()) + " values, fewer than the header's 12");
  if (v[0] != kStatsVersion) return bad("unknown version " + std::to_string(v[0]));
  if (!(v[1] == 0.0 || v[1] == 1.0 || v[1] == 2.0)) return bad("unknown task " + std::to_string(v[1]));
  for (std::size_t i : {2, 3, 5, 6, 11})
    if (!count(v[i])) return bad("field " + std::to_string(i) + " is not a count");
  for (std::size_t i = 4; i < kHeader; ++i)
    if (!std::isfinite(v[i])) return bad("field " + std::to_string(i) + " is not finite");
  EvalStats s;
  s.task = static_cast<data::TaskKind>(static_cast<int>(v[1]));
  const auto bins = static_cast<std::size_t>(v[11]);
  const bool binary = s.task == data::TaskKind::kBinary;
  if (bins != (binary ? kAucBins : 0))
    return bad(std::to_string(bins) + " AUC bins for a " + std::string(data::taskKindName(s.task)) + " task");
  if (v.size() != kHeader + 2 * bins)
    return bad(std::to_string(v.size()) + " values where " + std::to_string(kHeader + 2 * bins) + " were expected");
  if (v[2] > 4294967295.0) return bad("too many classes");
  s.classes = static_cast<uint32_t>(v[2]);
  s.count = static_cast<uint64_t>(v[3]);
  s.lossSum = v[4];
  s.correct = static_cast<uint64_t>(v[5]);
  s.top5Correct = static_cast<uint64_t>(v[6]);
  s.sumSqErr = v[7];
  s.sumAbsErr = v[8];
  s.sumY = v[9];
  s.sumY2 = v[10];
  s.positives.resize(bins);
  s.negatives.resize(bins);
  uint64_t histogram = 0;
  for (std::size_t b = 0; b < bins; ++b) {
    const double p = v[kHeader + b];
    const double n = v[kHeader + bins + b];
    if (!count(p) || !count(n)) return bad("AUC bin " + std::to_string(b) + " is not a count");
    s.positives[b] = static_cast<uint64_t>(p);
    s.negatives[b] = static_cast<uint64_t>(n);
    histogram += s.positives[b] + s.negatives[b];
  }
  if (binary && histogram != s.count)
    return bad("the AUC bins hold " + std::to_string(histogram) + " examples, not " + std::to_string(s.count));
  if (s.correct > s.count || s.top5Correct > s.count) return bad("more correct examples than examples");
  return s;
}

Metrics finalize(const EvalStats& s) {
  Metrics m;
  m.task = s.task;
  m.examples = s.count;
  if (s.count == 0) return m;
  const double n = static_cast<double>(s.count);
  m.loss = s.lossSum / n;
  switch (s.task) {
    case data::TaskKind::kClassification:
      m.accuracy = static_cast<double>(s.correct) / n;
      if (s.classes > 5) m.top5 = static_cast<double>(s.top5Correct) / n;
      break;
    case data::TaskKind::kBinary: {
      m.accuracy = static_cast<double>(s.correct) / n;
      // Mann-Whitney over the bins: each positive beats the negatives in lower bins and
      // ties the ones in its own bin.
      double pos = 0.0;
      double neg = 0.0;
      double wins = 0.0;
      for (std::size_t b = 0; b < s.positives.size(); ++b) {
        const double p = static_cast<double>(s.positives[b]);
        const double q = static_cast<double>(s.negatives[b]);
        wins += p * (neg + 0.5 * q);
        pos += p;
        neg += q;
      }
      if (pos > 0.0 && neg > 0.0) m.auc = wins / (pos * neg);
      break;
    }
    case data::TaskKind::kRegression: {
      m.rmse = std::sqrt(s.sumSqErr / n);
      m.mae = s.sumAbsErr / n;
      const double total = s.sumY2 - s.sumY * s.sumY / n;  // sum (y - mean)^2
      if (total > 0.0) m.r2 = 1.0 - s.sumSqErr / total;
      break;
    }
  }
  return m;
}

double exactAuc(std::span<const float> scores, std::span<const int32_t> labels) {
  const std::size_t n = std::min(scores.size(), labels.size());
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  // Walk the groups of equal scores in ascending order: a positive beats every negative
  // of the groups below and ties the negatives of its own group.
  double wins = 0.0;
  double negBelow = 0.0;
  double pos = 0.0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    double p = 0.0;
    double q = 0.0;
    while (j < n && scores[order[j]] == scores[order[i]]) {
      (labels[order[j]] != 0 ? p : q) += 1.0;
      ++j;
    }
    wins += p * (negBelow + 0.5 * q);
    negBelow += q;
    pos += p;
    i = j;
  }
  if (pos == 0.0 || negBelow == 0.0) return 0.5;
  return wins / (pos * negBelow);
}

Result<EvalStats> mergeVectors(std::span<const std::vector<double>> vectors) {
  if (vectors.empty()) return Status(StatusCode::kInvalidArgument, "no statistics to merge");
  std::optional<EvalStats> sum;
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    auto one = EvalStats::fromVector(vectors[i]);
    if (!one) return one.status().withContext("statistics " + std::to_string(i));
    if (!sum) {
      sum.emplace(std::move(*one));
    } else if (Status st = sum->merge(*one); !st) {
      return st.withContext("statistics " + std::to_string(i));
    }
  }
  return std::move(*sum);
}

}  // namespace starling::model
