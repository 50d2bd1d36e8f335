// Model::evaluate(): loss and accuracy over a data set. In its own file so that users
// of the model without data sets do not link the data library.
#include <algorithm>
#include <cmath>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/model/model.hpp"

namespace starling::model {

Result<Evaluation> Model::evaluate(const data::Dataset& dataset, int batchSize) {
  if (dataset.featureDim() != inputDim())
    return Status{StatusCode::kInvalidArgument, "data set has " + std::to_string(dataset.featureDim()) +
                                                    " features per example but model '" + spec() + "' expects " +
                                                    std::to_string(inputDim())};
  if (dataset.numClasses() > numClasses())
    return Status{StatusCode::kInvalidArgument, "data set has " + std::to_string(dataset.numClasses()) +
                                                    " classes but model '" + spec() + "' has " +
                                                    std::to_string(numClasses())};
  batchSize = std::max(1, batchSize);
  Evaluation ev;
  const std::size_t n = dataset.size();
  std::vector<uint32_t> idx;
  std::vector<float> xs;
  double lossSum = 0.0;
  std::size_t correct = 0;
  const int classes = numClasses();
  for (std::size_t start = 0; start < n; start += static_cast<std::size_t>(batchSize)) {
    const int b = static_cast<int>(std::min<std::size_t>(batchSize, n - start));
    idx.resize(b);
    for (int i = 0; i < b; ++i)
      idx[i] = static_cast<uint32_t>(start + i);
    xs.resize(static_cast<std::size_t>(b) * inputDim());
    dataset.gather(idx, xs);
    std::span<const float> p = forward(xs.data(), b);
    for (int i = 0; i < b; ++i) {
      const float* row = p.data() + static_cast<std::size_t>(i) * classes;
      const int32_t label = dataset.label(start + i);
      const int best = static_cast<int>(std::max_element(row, row + classes) - row);
      correct += best == label ? 1 : 0;
      lossSum -= std::log(std::max(row[label], 1e-30f));
    }
  }
  ev.examples = n;
  if (n > 0) {
    ev.loss = lossSum / static_cast<double>(n);
    ev.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  }
  return ev;
}

}  // namespace starling::model
