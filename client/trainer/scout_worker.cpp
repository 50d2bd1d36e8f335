// ScoutWorker: scouts forwarded on a second thread with recently posted parameters.
#include "scout_worker.hpp"

#include <algorithm>

namespace starling::client {
namespace {
constexpr std::size_t kChunk = 64;  // examples forwarded at once (one GEMM per layer)
}  // namespace

ScoutWorker::ScoutWorker(const data::Dataset& dataset, const model::Model& model, std::size_t start)
    : dataset_(&dataset), model_(model), next_(start % std::max<std::size_t>(1, dataset.size())) {
  thread_ = std::thread([this] { run(); });
}

ScoutWorker::~ScoutWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void ScoutWorker::post(std::size_t examples, std::span<const float> params) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // At most one sweep of backlog: a thread that falls behind (no free core) skips
    // ahead rather than scoring with ever older parameters after training has moved on.
    credit_ = std::min(credit_ + examples, std::max(dataset_->size(), kChunk));
    if (!params.empty()) {
      staged_.assign(params.begin(), params.end());
      fresh_ = true;
    }
  }
  wake_.notify_one();
}

void ScoutWorker::take(std::vector<std::pair<uint32_t, float>>& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  out.insert(out.end(), done_.begin(), done_.end());
  done_.clear();
}

void ScoutWorker::run() {
  const std::size_t n = dataset_->size();
  const std::size_t d = dataset_->featureDim();
  const int classes = model_.numClasses();
  std::vector<uint32_t> rows;
  std::vector<float> x(kChunk * d);
  std::vector<float> labels(kChunk);
  std::vector<std::pair<uint32_t, float>> scored;
  std::vector<float> params;
  for (;;) {
    bool newParams = false;
    std::size_t k = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || credit_ >= kChunk; });
      if (stop_) return;
      k = std::min(credit_, kChunk);
      credit_ -= k;
      if (fresh_) {
        params.swap(staged_);
        fresh_ = false;
        newParams = true;
      }
    }
    if (newParams) (void)model_.setParams(params);  // the size is the model's: it came from a copy
    rows.resize(k);
    for (std::size_t j = 0; j < k; ++j) {
      rows[j] = static_cast<uint32_t>(next_);
      labels[j] = model::labelValue(*dataset_, rows[j]);
      next_ = next_ + 1 == n ? 0 : next_ + 1;
    }
    dataset_->gather(rows, {x.data(), k * d});
    std::span<const float> p = model_.forward(x.data(), static_cast<int>(k));
    scored.clear();
    for (std::size_t j = 0; j < k; ++j)
      scored.emplace_back(rows[j], model_.outputGradientNorm(p.data() + j * classes, labels[j]));
    std::lock_guard<std::mutex> lock(mutex_);
    done_.insert(done_.end(), scored.begin(), scored.end());
  }
}

}  // namespace starling::client
