// Sampler: uniform and priority minibatches, the score table and the tau_vr switch.
#include "starling/client/sampler.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "scout_worker.hpp"

namespace starling::client {
Sampler::Sampler(const data::Dataset& dataset, SamplerOptions options, uint64_t seed)
    : dataset_(&dataset), options_(options), rng_(seed), table_(dataset.size(), 0.0f), scoredAt_(dataset.size(), 0) {
  options_.candidateFactor = std::max(1, options_.candidateFactor);
  options_.lambda = std::clamp(options_.lambda, 1e-6f, 1.0f);
}

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

void Sampler::reseed(uint64_t seed) {
  rng_.seed(seed);
}

Status Sampler::rebind(const data::Dataset& dataset) {
  if (dataset.size() != table_.size())
    return Status(StatusCode::kInvalidArgument, "a sampler of " + std::to_string(table_.size()) +
                                                    " examples rebound to a data set of " +
                                                    std::to_string(dataset.size()));
  dataset_ = &dataset;
  worker_.reset();  // it reads the former data set; the next table minibatch starts another
  return Status::ok();
}

void Sampler::releaseWorkspaces() {
  worker_.reset();
  for (auto* v : {&drawn_, &rows_, &candidates_, &toScore_, &scoreRows_, &idx_})
    std::vector<uint32_t>().swap(*v);
  for (auto* v : {&drawnWeight_, &rowX_, &rowW_, &candidateX_, &scores_, &x_, &w_, &rowY_, &candidateLabels_, &y_})
    std::vector<float>().swap(*v);
  std::vector<int32_t>().swap(rowOf_);
  sparse_ = data::SparseBatch{};
  std::vector<double>().swap(cumulative_);
}

double Sampler::threshold(int /*b*/) const {
  if (options_.threshold > 0.0f) return options_.threshold;
  // Drawing from the table costs no scoring pass: its bookkeeping, a few percent of a
  // step (docs/model.md), and the scouts' share of the forward pass, a third of a step
  // for b of them.
  if (options_.proposal == Proposal::kTable)
    return kTableThreshold + (dataset_->isSparse() || options_.scoutThread
                                  ? 0.0
                                  : std::max(0.0, static_cast<double>(options_.scoutFactor)) / 3.0);
  // The cost of a prioritized step relative to a uniform one, B = candidateFactor * b,
  // counting a forward pass as a third of a training step (ALGORITHMS.md section 4):
  // the B candidates are forwarded and the b drawn ones run backward from those
  // activations, (B + 2b) / 3b. With table scores a drawn example may have missed the
  // scoring pass and then needs a forward pass of its own: (B + 3b) / 3b.
  return (options_.candidateFactor + (options_.maxScoreAge > 0 ? 3.0 : 2.0)) / 3.0;
}

bool Sampler::prioritizing() const {
  // A sparse data set: the table proposal when forced only (see the header).
  if (dataset_->isSparse()) return sparseTable();
  switch (options_.mode) {
    case SamplingMode::kUniform:
      return false;
    case SamplingMode::kPriority:
      return true;
    case SamplingMode::kAdaptive:
      return tau_ > threshold(1);
  }
  return false;
}

float Sampler::score(uint32_t i) const {
  if (i >= table_.size()) return 0.0f;
  const uint64_t age = step_ - scoredAt_[i];
  const double decay = std::pow(static_cast<double>(options_.ageing), static_cast<double>(age));
  if (options_.proposal == Proposal::kTable) {
    // What fromTable() draws by: m + (t_i - m) ageing^age, and m when never scored.
    const bool scored = !tree_.empty() && tree_.age(i) > 0.0;
    return static_cast<float>(scored ? prior_ + (table_[i] - prior_) * decay : prior_);
  }
  return table_[i] * static_cast<float>(decay);
}

void Sampler::ensure(int b) {
  // A sparse data set's minibatches are CSR (sparse_): no dense rows to hold.
  const std::size_t d = dataset_->isSparse() ? 0 : dataset_->featureDim();
  const std::size_t bb = static_cast<std::size_t>(b);
  const std::size_t big = bb * static_cast<std::size_t>(options_.candidateFactor);
  // Under kTable the scouts follow the minibatch in idx_, x_ and y_.
  const std::size_t rows = bb + static_cast<std::size_t>(scoutCount(b));
  if (idx_.size() < rows || x_.size() < rows * d) {
    idx_.resize(rows);
    x_.resize(rows * d);
    y_.resize(rows);
    w_.resize(rows);
  }
  if (candidates_.size() < big) {
    candidates_.resize(big);
    candidateLabels_.resize(big);
    candidateX_.resize(big * d);
    toScore_.resize(big);
    scoreRows_.reserve(big);
    rowOf_.resize(big);
    drawn_.resize(bb);
    drawnWeight_.assign(big, 0.0f);
    rows_.reserve(big);
    rowX_.resize(bb * d);
    rowY_.resize(bb);
    rowW_.resize(bb);
    scores_.resize(big);
    cumulative_.resize(big);
  }
}

Minibatch Sampler::next(model::Model& model, int b) {
  assert(b > 0 && dataset_->size() > 0);
  ensure(b);
  const bool table = prioritizing() && options_.proposal == Proposal::kTable;
  if (table && options_.scoutThread && !dataset_->isSparse()) takeThreadScouts(model, b);
  Minibatch mb = !prioritizing() ? uniform(b) : table ? fromTable(b) : priority(model, b);
  ++step_;
  return mb;
}

Minibatch Sampler::batch(int b, bool prioritized) const {
  const std::size_t n = static_cast<std::size_t>(b);
  Minibatch mb;
  mb.indices = {idx_.data(), n};
  if (dataset_->isSparse()) {
    mb.sparse = &sparse_;
  } else {
    mb.features = {x_.data(), n * dataset_->featureDim()};
  }
  mb.labels = {y_.data(), n};
  mb.weights = {w_.data(), n};
  mb.prioritized = prioritized;
  return mb;
}

Minibatch Sampler::uniform(int b) {
  const std::size_t d = dataset_->featureDim();
  std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(dataset_->size() - 1));
  for (int i = 0; i < b; ++i) {
    idx_[i] = pick(rng_);
    y_[i] = model::labelValue(*dataset_, idx_[i]);
    w_[i] = 1.0f;
  }
  if (dataset_->isSparse()) {
    dataset_->gatherSparse({idx_.data(), static_cast<std::size_t>(b)}, sparse_);
  } else {
    dataset_->gather({idx_.data(), static_cast<std::size_t>(b)}, {x_.data(), static_cast<std::size_t>(b) * d});
  }
  lastUniform_ = true;
  ++uniformSteps_;
  return batch(b, false);
}

Minibatch Sampler::priority(model::Model& model, int b) {
  const std::size_t d = dataset_->featureDim();
  const int big = b * options_.candidateFactor;
  const std::size_t bigN = static_cast<std::size_t>(big);
  std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(dataset_->size() - 1));
  std::size_t fresh = 0;  // candidates that need a forward pass
  for (int j = 0; j < big; ++j) {
    const uint32_t c = pick(rng_);
    candidates_[j] = c;
    candidateLabels_[j] = model::labelValue(*dataset_, c);
    const bool known = options_.maxScoreAge > 0 && table_[c] > 0.0f &&
                       step_ - scoredAt_[c] <= static_cast<uint64_t>(options_.maxScoreAge);
    if (known) {
      scores_[j] = score(c);
      rowOf_[j] = -1;
    } else {
      rowOf_[j] = static_cast<int32_t>(fresh);
      toScore_[fresh++] = static_cast<uint32_t>(j);
    }
  }
  if (fresh > 0) {
    // Gather the candidates to score, in order, and run one forward pass over them.
    scoreRows_.resize(fresh);  // within the capacity reserved by ensure(): no allocation
    for (std::size_t k = 0; k < fresh; ++k)
      scoreRows_[k] = candidates_[toScore_[k]];
    dataset_->gather(scoreRows_, {candidateX_.data(), fresh * d});
    std::span<const float> probs = model.forward(candidateX_.data(), static_cast<int>(fresh));
    const int classes = model.numClasses();
    for (std::size_t k = 0; k < fresh; ++k) {
      const int j = static_cast<int>(toScore_[k]);
      scores_[j] = model.outputGradientNorm(probs.data() + k * classes, candidateLabels_[j]);
      table_[candidates_[j]] = scores_[j];
      scoredAt_[candidates_[j]] = step_;
    }
    scoredExamples_ += fresh;
  }
  double total = 0.0;
  for (int j = 0; j < big; ++j)
    total += scores_[j];
  updateTau({scores_.data(), bigN});

  // p_j = (1 - lambda) s_j / sum(s) + lambda / B; all uniform when every score is 0.
  const double lambda = total > 0.0 ? options_.lambda : 1.0;
  double acc = 0.0;
  for (int j = 0; j < big; ++j) {
    const double p = (total > 0.0 ? (1.0 - lambda) * scores_[j] / total : 0.0) + lambda / big;
    acc += p;
    cumulative_[j] = acc;
  }
  std::uniform_real_distribution<double> u(0.0, 1.0);
  bool allScored = true;  // every drawn candidate is a row of the scoring pass
  for (int i = 0; i < b; ++i) {
    const double r = u(rng_) * acc;
    auto it = std::upper_bound(cumulative_.begin(), cumulative_.begin() + big, r);
    const int j = std::min(static_cast<int>(it - cumulative_.begin()), big - 1);
    const double p = cumulative_[j] - (j > 0 ? cumulative_[j - 1] : 0.0);
    idx_[i] = candidates_[j];
    y_[i] = candidateLabels_[j];
    w_[i] = static_cast<float>(acc / (big * p));  // acc is 1 up to rounding
    drawnWeight_[j] += w_[i];
    drawn_[i] = static_cast<uint32_t>(j);
    allScored = allScored && rowOf_[j] >= 0;
  }
  if (allScored) {
    // The scoring pass holds these features already (and in cache): copy, not gather.
    for (int i = 0; i < b; ++i)
      std::copy_n(candidateX_.data() + static_cast<std::size_t>(rowOf_[drawn_[i]]) * d, d,
                  x_.data() + static_cast<std::size_t>(i) * d);
  } else {
    dataset_->gather({idx_.data(), static_cast<std::size_t>(b)}, {x_.data(), static_cast<std::size_t>(b) * d});
  }

  // The distinct drawn candidates, in scoring-pass order, with their summed weights: the
  // weighted loss (1/b) sum_i w_i l_i only depends on these (drawnWeight_ is zeroed again
  // here for the next step).
  rows_.clear();  // within the capacity reserved by ensure(): no allocation
  for (int j = 0; j < big; ++j) {
    if (drawnWeight_[j] == 0.0f) continue;
    if (allScored) {
      const std::size_t k = rows_.size();
      rows_.push_back(static_cast<uint32_t>(rowOf_[j]));
      std::copy_n(candidateX_.data() + static_cast<std::size_t>(rowOf_[j]) * d, d, rowX_.data() + k * d);
      rowY_[k] = candidateLabels_[j];
      rowW_[k] = drawnWeight_[j];
    }
    drawnWeight_[j] = 0.0f;
  }
  lastUniform_ = lastTable_ = false;
  ++prioritizedSteps_;
  Minibatch mb = batch(b, true);
  if (allScored) {
    const std::size_t m = rows_.size();
    mb.scoredRows = {rows_.data(), m};
    mb.rowFeatures = {rowX_.data(), m * d};
    mb.rowLabels = {rowY_.data(), m};
    mb.rowWeights = {rowW_.data(), m};
  }
  return mb;
}

void Sampler::observe(std::span<const float> probabilities, const model::Model& model) {
  if (dataset_->isSparse() && !sparseTable()) return;  // uniform minibatches only: nothing to score
  const int classes = model.numClasses();
  if (options_.proposal == Proposal::kTable && (lastUniform_ || lastTable_) &&
      options_.mode != SamplingMode::kUniform) {
    const std::size_t b = probabilities.size() / static_cast<std::size_t>(classes);
    assert(b <= idx_.size());
    double weights = 0.0;
    double sum = 0.0;
    double sumSq = 0.0;
    for (std::size_t i = 0; i < b; ++i) {
      const float s = model.outputGradientNorm(probabilities.data() + i * classes, y_[i]);
      setKey(idx_[i], s, step_ - 1);
      weights += w_[i];
      sum += static_cast<double>(w_[i]) * s;
      sumSq += static_cast<double>(w_[i]) * s * s;
    }
    // The importance weights make these estimates of the mean score and the mean squared
    // score over the data (the drawn examples lean to high scores).
    // Scouts are uniform draws: weight 1 each.
    weights += static_cast<double>(scoutCount_);
    sum += scoutSum_;
    scoutCount_ = 0;
    scoutSum_ = 0.0;
    const double mean = weights > 0.0 ? sum / weights : 0.0;
    prior_ = prior_ == 0.0 ? mean : 0.9 * prior_ + 0.1 * mean;
    const double now = mean > 0.0 ? std::sqrt(sumSq / weights) / mean : 1.0;
    tau_ = options_.tauSmoothing * tau_ + (1.0 - options_.tauSmoothing) * now;
    lastUniform_ = lastTable_ = false;
    return;
  }
  if (!lastUniform_ || options_.mode == SamplingMode::kUniform) return;
  const std::size_t b = probabilities.size() / static_cast<std::size_t>(classes);
  assert(b <= idx_.size());
  for (std::size_t i = 0; i < b; ++i) {
    scores_[i] = model.outputGradientNorm(probabilities.data() + i * classes, y_[i]);
    table_[idx_[i]] = scores_[i];
    scoredAt_[idx_[i]] = step_ - 1;  // scored at the step that just ran
  }
  updateTau({scores_.data(), b});
  lastUniform_ = false;
}

void Sampler::setKey(uint32_t i, float score, uint64_t at) {
  if (tree_.empty()) rebase();  // first use: every example unscored
  table_[i] = score;
  scoredAt_[i] = at;
  if (at != upAt_) {  // one pow per step: observe() and observeScouts() share `at`
    up_ = std::pow(static_cast<double>(options_.ageing), -static_cast<double>(at) + static_cast<double>(keyBase_));
    upAt_ = at;
  }
  tree_.set(i, score * up_, up_);
}

void Sampler::rebase() {
  if (tree_.empty()) {
    tree_.reset(dataset_->size());
    keyBase_ = step_;
    upAt_ = ~uint64_t{0};
    return;
  }
  // Keys and ages count from keyBase_ = step_ now: scaled by ageing^(step_ - old base),
  // and the tree summed afresh (which also drops the rounding its updates accumulated).
  tree_.rescale(std::pow(static_cast<double>(options_.ageing), static_cast<double>(step_ - keyBase_)));
  keyBase_ = step_;
  upAt_ = ~uint64_t{0};
}

Minibatch Sampler::fromTable(int b) {
  const std::size_t d = dataset_->featureDim();
  const std::size_t n = dataset_->size();
  if (tree_.empty()) rebase();
  // Example i's score: m + (s_i - m) ageing^(t - t_i), m the running mean score (an
  // example never scored has s_i = m). With key_i = s_i ageing^-(t_i - t0) and
  // age_i = ageing^-(t_i - t0) (both 0 when never scored) and down = ageing^(t - t0),
  // that is m + down (key_i - m age_i): the tree's sums stay valid as t moves on.
  double down = std::pow(static_cast<double>(options_.ageing), static_cast<double>(step_ - keyBase_));
  if (down < 1e-6) {
    rebase();
    down = 1.0;
  }
  const double m = prior_;
  const double total = tree_.total(m, down);
  const double lambda = total > 0.0 ? options_.lambda : 1.0;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(n - 1));
  for (int j = 0; j < b; ++j) {
    const uint32_t i = u(rng_) < lambda ? pick(rng_) : static_cast<uint32_t>(tree_.find(u(rng_) * total, m, down));
    const double p =
        (total > 0.0 ? (1.0 - lambda) * tree_.mass(i, m, down) / total : 0.0) + lambda / static_cast<double>(n);
    idx_[j] = i;
    y_[j] = model::labelValue(*dataset_, i);
    w_[j] = static_cast<float>(1.0 / (static_cast<double>(n) * p));
  }
  // The scouts: rows b.. of the same buffers, forwarded with the minibatch only to
  // refresh their scores (they take no part in the draws above nor in the gradient).
  const int scouts = scoutCount(b);
  for (int k = 0; k < scouts; ++k) {
    uint32_t i = 0;
    if (options_.scoutSweep) {
      // In data-set order from a random start: sequential reads for gather().
      if (!sweepStarted_) {
        sweepAt_ = pick(rng_);
        sweepStarted_ = true;
      }
      i = static_cast<uint32_t>(sweepAt_);
      sweepAt_ = sweepAt_ + 1 == n ? 0 : sweepAt_ + 1;
    } else {
      i = pick(rng_);
    }
    idx_[b + k] = i;
    y_[b + k] = model::labelValue(*dataset_, i);
    w_[b + k] = 0.0f;
  }
  const std::size_t rows = static_cast<std::size_t>(b + scouts);
  if (dataset_->isSparse()) {
    dataset_->gatherSparse({idx_.data(), rows}, sparse_);  // no scouts: rows == b
  } else {
    dataset_->gather({idx_.data(), rows}, {x_.data(), rows * d});
  }
  lastTable_ = true;
  lastUniform_ = false;
  lastScouts_ = scouts;
  lastBatch_ = b;
  ++prioritizedSteps_;
  Minibatch mb = batch(b, true);
  if (scouts > 0) {
    mb.scouts = scouts;
    mb.forwardFeatures = {x_.data(), rows * d};
  }
  return mb;
}

int Sampler::scoutCount(int b) const {
  // No scouts on sparse data: the minibatch's CSR rows go through their own pass. With
  // scoutThread they are not in the minibatch's pass either (takeThreadScouts()).
  if (options_.proposal != Proposal::kTable || !(options_.scoutFactor > 0.0f) || dataset_->isSparse() ||
      options_.scoutThread)
    return 0;
  return static_cast<int>(std::lround(static_cast<double>(options_.scoutFactor) * b));
}

void Sampler::takeThreadScouts(const model::Model& model, int b) {
  const auto s = static_cast<std::size_t>(std::lround(static_cast<double>(options_.scoutFactor) * b));
  if (s == 0) return;
  if (worker_ == nullptr) {
    std::uniform_int_distribution<std::size_t> pick(0, dataset_->size() - 1);
    worker_ = std::make_unique<ScoutWorker>(*dataset_, model, pick(rng_));
  }
  // The scores the thread finished since the last step: as fresh as a scout's of the
  // previous step (their parameters are at most kScoutParamsEvery steps older).
  threadScores_.clear();
  worker_->take(threadScores_);
  if (step_ > 0 && !threadScores_.empty()) {
    for (const auto& [i, score] : threadScores_) {
      setKey(i, score, step_ - 1);
      scoutSum_ += score;
    }
    scoutCount_ += threadScores_.size();
    scoredExamples_ += threadScores_.size();
  }
  const bool sendParams = step_ % kScoutParamsEvery == 0;
  worker_->post(s, sendParams ? model.params() : std::span<const float>{});
}

void Sampler::observeScouts(std::span<const float> probabilities, const model::Model& model) {
  const int classes = model.numClasses();
  if (!lastTable_ || lastScouts_ == 0) return;
  const std::size_t s = probabilities.size() / static_cast<std::size_t>(classes);
  assert(s == static_cast<std::size_t>(lastScouts_));
  const std::size_t b = static_cast<std::size_t>(lastBatch_);
  for (std::size_t k = 0; k < s; ++k) {
    const float score = model.outputGradientNorm(probabilities.data() + k * classes, y_[b + k]);
    setKey(idx_[b + k], score, step_ - 1);
    scoutSum_ += score;
  }
  scoutCount_ += s;
  scoredExamples_ += s;
}

void Sampler::updateTau(std::span<const float> scores) {
  // With g = s / sum(s) and u = 1/n: ||g - u||^2 / ||g||^2 = 1 - mean(s)^2 / mean(s^2),
  // so tau_vr = sqrt(mean(s^2)) / mean(s).
  double sum = 0.0;
  double sumSq = 0.0;
  for (float s : scores) {
    sum += s;
    sumSq += static_cast<double>(s) * s;
  }
  double now = 1.0;
  if (sum > 0.0) {
    const double n = static_cast<double>(scores.size());
    now = std::sqrt(sumSq / n) / (sum / n);
  }
  const double a = options_.tauSmoothing;
  tau_ = a * tau_ + (1.0 - a) * now;
}

}  // namespace starling::client
