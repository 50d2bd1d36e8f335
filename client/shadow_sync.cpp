#include "starling/client/shadow_sync.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "starling/model/fixed_order_sum.hpp"

namespace starling::client {

void mixElastic(std::span<float> x, std::span<const float> center, float alpha) {
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] -= alpha * (x[i] - center[i]);
}

void mixAverage(std::span<float> x, std::span<const float> center, std::span<const float> snapshot) {
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = center[i] + (x[i] - snapshot[i]);
}

Result<std::unique_ptr<ShadowSync>> ShadowSync::create(const ShadowSyncOptions& options) {
  if (!(options.alpha > 0.0f && options.alpha <= 1.0f))
    return Status(StatusCode::kInvalidArgument, fmt::format("alpha is {}, not in (0, 1]", options.alpha));
  if (options.featureDim == 0) return Status(StatusCode::kInvalidArgument, "feature_dim must be at least 1");
  if (options.numClasses < 2) return Status(StatusCode::kInvalidArgument, "num_classes must be at least 2");
  if (options.maxWait.count() < 0) return Status(StatusCode::kInvalidArgument, "the longest wait is negative");
  return std::unique_ptr<ShadowSync>(new ShadowSync(options));
}

Status ShadowSync::welcome(const wire::WelcomeMsg& w) {
  if (!w.hyper) return Status(StatusCode::kMalformed, "Welcome without hyper-parameters");
  if (!spec_.empty()) {
    if (w.modelSpec == spec_) return Status::ok();  // a reconnect: x goes on
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the coordinator's model is now {}, the app trains {}: start again", w.modelSpec, spec_));
  }
  if (!w.featureMean.empty() || !w.categoricalVocabulary.empty())
    return Status(StatusCode::kInvalidArgument,
                  "the task scales features or encodes categorical columns, which background training cannot do to "
                  "the app's own examples");
  auto m = model::Model::fromSpec(w.modelSpec);
  if (!m) return Status(StatusCode::kInvalidArgument, "the coordinator's model: " + m.status().message());
  if (m->task() == data::TaskKind::kRegression)
    return Status(
        StatusCode::kInvalidArgument,
        fmt::format("the coordinator's model {} is a regression; background training takes class labels", w.modelSpec));
  const int outputs = m->task() == data::TaskKind::kBinary ? 2 : m->numClasses();
  if (m->inputDim() != options_.featureDim || outputs != options_.numClasses)
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the coordinator's model {} takes {} features and {} classes; the app's examples have "
                              "{} features and {} classes",
                              w.modelSpec, m->inputDim(), outputs, options_.featureDim, options_.numClasses));
  std::lock_guard lock(mu_);
  spec_ = w.modelSpec;
  momentum_ = w.hyper->momentum;
  weightDecay_ = w.hyper->weightDecay;
  clipNorm_ = w.hyper->clipNorm;
  grad_.assign(m->numParams(), 0.0f);
  velocity_.assign(momentum_ > 0 ? m->numParams() : 0, 0.0f);
  snapshot_.assign(m->numParams(), 0.0f);
  model_.emplace(std::move(*m));
  return Status::ok();
}

Result<LocalUpdate> ShadowSync::work(Learner& learner, const wire::RoundAssignMsg& a) {
  const auto started = std::chrono::steady_clock::now();
  const std::span<const float> center = learner.model();  // x_c, the Learner's, this thread's
  TrainStats stats;
  {
    std::unique_lock lock(mu_);
    if (stopped_) return Status(StatusCode::kClosed, "background training stopped");
    if (!model_ || model_->numParams() != center.size())
      return Status(StatusCode::kInternal, "an assignment before background training knew the task");
    std::span<float> x = model_->params();
    // The first assignment starts x from the global model; later ones mix it in.
    if (stats_.mixes == 0) {
      std::copy(center.begin(), center.end(), x.begin());
    } else if (options_.variant == SyncVariant::kEasgd) {
      mixElastic(x, center, options_.alpha);
    } else {
      mixAverage(x, center, snapshot_);
    }
    ++stats_.mixes;
    // S-MA's reference should this round send nothing: x as mixed.
    std::copy(x.begin(), x.end(), snapshot_.begin());
    lr_ = a.lr;
    stepsSinceMix_ = 0;
    examplesSinceMix_ = 0;

    // The app's tau steps, or the round's time budget.
    std::chrono::milliseconds budget = options_.maxWait;
    if (a.deadlineMs > 0) {
      const std::chrono::milliseconds fromDeadline(uint64_t(a.deadlineMs) * 9 / 10);
      budget = budget.count() > 0 ? std::min(budget, fromDeadline) : fromDeadline;
    }
    const auto enough = [&] { return stopped_ || stepsSinceMix_ >= std::max<uint32_t>(a.tau, 1); };
    if (budget.count() > 0)
      stepped_.wait_until(lock, started + budget, enough);
    else
      stepped_.wait(lock, enough);
    if (stopped_) return Status(StatusCode::kClosed, "background training stopped");
    if (stepsSinceMix_ == 0) {
      ++stats_.emptyRounds;
      stats_.lastError = fmt::format("round {}: the app made no training step within {} ms: no update this time",
                                     a.round, budget.count());
      return Status(StatusCode::kTimeout, stats_.lastError);
    }
    std::copy(x.begin(), x.end(), snapshot_.begin());
    stats.steps = static_cast<int>(std::min<uint64_t>(stepsSinceMix_, INT32_MAX));
    stats.examples = examplesSinceMix_;
    stats.lossStart = lossAtMix_;
    stats.lossEnd = stats_.lastLoss;
  }
  // The snapshot is this thread's own: compressed and sent without the lock.
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  auto update = learner.submit(
      a, snapshot_, stats,
      options_.variant == SyncVariant::kEasgd ? Learner::Submitted::kCarried : Learner::Submitted::kFromBase);
  std::lock_guard lock(mu_);
  if (update)
    ++stats_.syncs;
  else
    stats_.lastError = update.status().message();
  return update;
}

void ShadowSync::stop() {
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  stepped_.notify_all();
}

bool ShadowSync::ready() const {
  std::lock_guard lock(mu_);
  return model_.has_value() && stats_.mixes > 0;
}

Result<double> ShadowSync::step(const float* features, const int32_t* labels, std::size_t n) {
  if (n == 0 || features == nullptr || labels == nullptr)
    return Status(StatusCode::kInvalidArgument, "a step needs at least one example (features and labels not NULL)");
  if (n > (1u << 24)) return Status(StatusCode::kInvalidArgument, fmt::format("a step of {} examples is too large", n));
  const int classes = options_.numClasses;
  for (std::size_t i = 0; i < n; ++i)
    if (labels[i] < 0 || labels[i] >= classes)
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("label {} of example {} is not a class 0 .. {}", labels[i], i, classes - 1));
  double loss = 0;
  {
    std::unique_lock lock(mu_, std::try_to_lock);
    std::chrono::nanoseconds waited{-1};
    if (!lock.owns_lock()) {
      const auto asked = std::chrono::steady_clock::now();
      lock.lock();
      waited = std::chrono::steady_clock::now() - asked;
    }
    if (waited.count() >= 0) {
      ++stats_.lockWaits;
      stats_.longestLockWait = std::max(stats_.longestLockWait, waited);
    }
    if (!model_ || stats_.mixes == 0)
      return Status(StatusCode::kClosed, "no model yet: background training has not had its first assignment");
    yScratch_.resize(n);
    for (std::size_t i = 0; i < n; ++i)
      yScratch_[i] = static_cast<float>(labels[i]);
    loss = model_->forwardBackward(features, yScratch_.data(), nullptr, static_cast<int>(n), grad_);
    // The Trainer's step: m <- mu m + g (clipped); x <- x - eta (m + wd x).
    float scale = 1.0f;
    if (clipNorm_ > 0.0f) {
      const float norm = std::sqrt(model::fixedOrderSquaredNorm(grad_));
      if (norm > clipNorm_) scale = clipNorm_ / norm;
    }
    std::span<float> x = model_->params();
    const float eta = lr_, wd = weightDecay_, mu = momentum_;
    for (std::size_t i = 0; i < x.size(); ++i) {
      float g = scale * grad_[i];
      if (mu > 0.0f) g = velocity_[i] = mu * velocity_[i] + g;
      x[i] -= eta * (g + wd * x[i]);
    }
    if (stepsSinceMix_ == 0) lossAtMix_ = loss;
    ++stepsSinceMix_;
    examplesSinceMix_ += n;
    ++stats_.steps;
    stats_.lastLoss = loss;
  }
  stepped_.notify_one();
  return loss;
}

std::size_t ShadowSync::copyModel(std::span<float> out) const {
  std::lock_guard lock(mu_);
  if (!model_ || stats_.mixes == 0) return 0;
  const std::span<const float> x = model_->params();
  std::copy_n(x.begin(), std::min(out.size(), x.size()), out.begin());
  return x.size();
}

ShadowSyncStats ShadowSync::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace starling::client
