#pragma once
// Metrics of a model on a data set, per task, from sums that add up across shards.
//
// A client or a shard computes EvalStats over its examples (Model::evalStats()); the
// coordinator merges them and finalize() gives the global metrics exactly as if one
// process had seen every example (the AUC up to its binning, below):
//
//   task            loss                     metrics
//   classification  mean cross-entropy       accuracy (arg-max), top5 (when > 5 classes)
//   binary          mean logistic log-loss   accuracy (P(y=1) >= 0.5), auc
//   regression      mean head loss           rmse, mae, r2
//                   (0.5 (f-y)^2 or Huber)
//
// Binary AUC comes from histograms of P(y=1) over kAucBins equal bins of [0, 1], one for
// the positives and one for the negatives: a (positive, negative) pair in different bins
// is ordered by its bins, a pair in the same bin counts one half (as exactAuc() counts a
// tie). The error against exactAuc() is therefore at most half the fraction of
// (positive, negative) pairs that share a bin: |auc - exact| <= 0.5 sum_b P_b N_b / (P N)
// <= 0.5 max_b N_b / N. For scores that spread over [0, 1] that is of the order of
// 0.5 / kAucBins ~ 1.2e-4; the worst case (every score in one bin) is 0.5.
//
// Thread-safety: values and pure functions.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "starling/data/task_kind.hpp"
#include "starling/util/status.hpp"

namespace starling::model {

inline constexpr std::size_t kAucBins = 4096;

// The bin of a probability in [0, 1] (values outside are clamped; NaN goes to bin 0).
std::size_t aucBin(float probability);

// Sums over examples; merge() adds two of them.
struct EvalStats {
  data::TaskKind task = data::TaskKind::kClassification;
  uint32_t classes = 0;  // classification: the model's outputs (top5 is kept when > 5)
  uint64_t count = 0;
  double lossSum = 0;
  uint64_t correct = 0, top5Correct = 0;                    // classification; binary: correct at 0.5
  std::vector<uint64_t> positives, negatives;               // binary: kAucBins counts of P(y=1) each
  double sumSqErr = 0, sumAbsErr = 0, sumY = 0, sumY2 = 0;  // regression

  // Empty statistics of a task (binary: the two histograms of kAucBins zeros).
  static EvalStats empty(data::TaskKind task, uint32_t classes = 0);

  // Adds other's sums; kInvalidArgument (nothing changed) for another task, number of
  // classes or bin count.
  Status merge(const EvalStats& other);

  // Flat form for the wire and checkpoints: {version 1, task, classes, count, lossSum,
  // correct, top5Correct, sumSqErr, sumAbsErr, sumY, sumY2, bins, positives...,
  // negatives...}. Counts are exact below 2^53.
  std::vector<double> toVector() const;
  // kMalformed for a vector toVector() cannot have written.
  static Result<EvalStats> fromVector(std::span<const double> v);
};

struct Metrics {
  data::TaskKind task = data::TaskKind::kClassification;
  uint64_t examples = 0;
  double loss = 0;                 // lossSum / count (0 without examples)
  std::optional<double> accuracy;  // classification, binary
  std::optional<double> top5;      // classification with more than 5 classes
  std::optional<double> auc;       // binary, when both labels occur
  std::optional<double> rmse;      // regression
  std::optional<double> mae;       // regression
  std::optional<double> r2;        // regression, when the targets are not all equal
};

// The metrics of the sums (none but loss and examples without examples).
Metrics finalize(const EvalStats& stats);

// The sum of several clients' statistics, each as toVector() wrote it (federated
// evaluation); kMalformed when one does not parse, kInvalidArgument when they are of
// different tasks or shapes, naming which (0-based).
Result<EvalStats> mergeVectors(std::span<const std::vector<double>> vectors);

// The area under the ROC curve of scores against 0/1 labels, ties counted one half
// (the Mann-Whitney U statistic over P N); 0.5 when either class is missing. O(n log n).
double exactAuc(std::span<const float> scores, std::span<const int32_t> labels);

}  // namespace starling::model
