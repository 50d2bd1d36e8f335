// Model::evaluate() and evalStats(): loss and metrics over a data set, and the checks
// that a data set fits a model. In its own file so that users of the model without data
// sets do not link the data library.
#include <algorithm>
#include <cmath>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/model/model.hpp"

#include "network.hpp"

namespace starling::model {

float labelValue(const data::Dataset& dataset, std::size_t i) {
  return dataset.isRegression() ? dataset.target(i) : static_cast<float>(dataset.label(i));
}

Status Model::checkData(const data::Dataset& dataset) const {
  auto bad = [](const std::string& why) { return Status{StatusCode::kInvalidArgument, why}; };
  if (dataset.featureDim() != inputDim())
    return bad("data set has " + std::to_string(dataset.featureDim()) + " features per example but model '" + spec() +
               "' expects " + std::to_string(inputDim()));
  const data::TaskKind t = task();
  if (t == data::TaskKind::kRegression && !dataset.isRegression())
    return bad("model '" + spec() + "' is a regression model but the data set has " +
               std::to_string(dataset.numClasses()) + " classes, not real targets");
  if (t != data::TaskKind::kRegression && dataset.isRegression())
    return bad("model '" + spec() + "' is a " + std::string(data::taskKindName(t)) +
               " model but the data set has real (regression) targets");
  if (t == data::TaskKind::kClassification && dataset.numClasses() > numClasses())
    return bad("data set has " + std::to_string(dataset.numClasses()) + " classes but model '" + spec() + "' has " +
               std::to_string(numClasses()));
  if (t == data::TaskKind::kBinary && dataset.numClasses() > 2)
    return bad("data set has " + std::to_string(dataset.numClasses()) + " classes but model '" + spec() +
               "' is binary (labels 0 and 1)");
  return Status::ok();
}

Result<EvalStats> Model::evalStats(const data::Dataset& dataset, int batchSize) {
  STARLING_RETURN_IF_ERROR(checkData(dataset));
  batchSize = std::max(1, batchSize);
  const data::TaskKind t = task();
  const int classes = numClasses();
  EvalStats st = EvalStats::empty(t, t == data::TaskKind::kClassification ? static_cast<uint32_t>(classes) : 0u);
  const std::size_t n = dataset.size();
  // A sparse data set: CSR batches for a model that takes them; otherwise densified
  // rows, no more than kMaxDensifiedBytes at a time.
  const bool sparse = dataset.isSparse() && acceptsSparse();
  if (dataset.isSparse() && !sparse) {
    const std::size_t rowBytes = inputDim() * sizeof(float);
    const std::size_t fit = std::max<std::size_t>(1, data::Dataset::kMaxDensifiedBytes / rowBytes);
    batchSize = static_cast<int>(std::min<std::size_t>(batchSize, fit));
  }
  std::vector<uint32_t> idx;
  std::vector<float> xs;
  data::SparseBatch sx;
  for (std::size_t start = 0; start < n; start += static_cast<std::size_t>(batchSize)) {
    const int b = static_cast<int>(std::min<std::size_t>(batchSize, n - start));
    idx.resize(b);
    for (int i = 0; i < b; ++i)
      idx[i] = static_cast<uint32_t>(start + i);
    std::span<const float> p;
    if (sparse) {
      dataset.gatherSparse(idx, sx);
      p = forwardSparse(sx);
    } else {
      xs.resize(static_cast<std::size_t>(b) * inputDim());
      dataset.gather(idx, xs);
      p = forward(xs.data(), b);
    }
    const float* logits = net_->acts.back().data();
    for (int i = 0; i < b; ++i) {
      const float* row = p.data() + static_cast<std::size_t>(i) * classes;
      switch (t) {
        case data::TaskKind::kClassification: {
          const int32_t label = dataset.label(start + i);
          const int best = static_cast<int>(std::max_element(row, row + classes) - row);
          st.correct += best == label ? 1 : 0;
          if (classes > 5) {
            // In the top 5 when fewer than 5 classes score higher (ties go to the label).
            int above = 0;
            for (int c = 0; c < classes; ++c)
              above += row[c] > row[label] ? 1 : 0;
            st.top5Correct += above < 5 ? 1 : 0;
          }
          st.lossSum -= std::log(std::max(row[label], 1e-30f));
          break;
        }
        case data::TaskKind::kBinary: {
          const int32_t label = dataset.label(start + i);
          const bool positive = row[0] >= 0.5f;
          st.correct += positive == (label == 1) ? 1 : 0;
          st.lossSum += detail::logisticLoss(logits[i], static_cast<float>(label));
          (label == 1 ? st.positives : st.negatives)[aucBin(row[0])] += 1;
          break;
        }
        case data::TaskKind::kRegression: {
          const float y = dataset.target(start + i);
          const double r = static_cast<double>(row[0]) - y;
          st.lossSum += outputLoss(row, y);
          st.sumSqErr += r * r;
          st.sumAbsErr += std::abs(r);
          st.sumY += y;
          st.sumY2 += static_cast<double>(y) * y;
          break;
        }
      }
    }
    st.count += static_cast<uint64_t>(b);
  }
  return st;
}

Result<Evaluation> Model::evaluate(const data::Dataset& dataset, int batchSize) {
  Result<EvalStats> st = evalStats(dataset, batchSize);
  if (!st) return st.status();
  Evaluation ev;
  ev.stats = std::move(st).value();
  ev.metrics = finalize(ev.stats);
  ev.examples = dataset.size();
  ev.loss = ev.metrics.loss;
  ev.accuracy = ev.metrics.accuracy.value_or(0.0);
  return ev;
}

}  // namespace starling::model
