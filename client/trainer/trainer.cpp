// Trainer: local SGD with momentum, weight decay and clipping over sampled minibatches.
#include "starling/client/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "starling/model/fixed_order_sum.hpp"

namespace starling::client {

Result<Trainer> Trainer::create(model::Model model, const data::Dataset& dataset, TrainerOptions options) {
  auto bad = [](const std::string& why) { return Status{StatusCode::kInvalidArgument, why}; };
  if (dataset.featureDim() != model.inputDim())
    return bad("model '" + model.spec() + "' takes " + std::to_string(model.inputDim()) +
               " inputs but the data set has " + std::to_string(dataset.featureDim()) + " features per example");
  STARLING_RETURN_IF_ERROR(model.checkData(dataset));
  if (dataset.size() == 0) return bad("the data set is empty");
  if (options.batchSize < 1) return bad("batch size must be at least 1");
  if (!(options.momentum >= 0.0f && options.momentum < 1.0f)) return bad("momentum must be in [0, 1)");
  if (!(options.weightDecay >= 0.0f)) return bad("weight decay must be >= 0");
  if (!(options.clipNorm >= 0.0f)) return bad("clip norm must be >= 0 (0 turns clipping off)");
  if (!(options.proxMu >= 0.0f) || !std::isfinite(options.proxMu))
    return bad("proximal mu must be finite and >= 0 (0 turns FedProx off)");
  if (!(options.sampler.lambda > 0.0f && options.sampler.lambda <= 1.0f))
    return bad("sampler lambda must be in (0, 1]");
  if (options.sampler.candidateFactor < 1) return bad("sampler candidate factor must be >= 1");
  if (!(options.sampler.scoutFactor >= 0.0f && options.sampler.scoutFactor <= 64.0f))
    return bad("sampler scout factor must be in [0, 64]");
  if (options.lossProbe < 0) return bad("loss probe must be >= 0");
  if (dataset.isSparse() && !model.acceptsSparse()) {
    const double bytes = static_cast<double>(options.batchSize) * static_cast<double>(dataset.featureDim()) * 4.0;
    if (bytes > static_cast<double>(data::Dataset::kMaxDensifiedBytes))
      return bad("model '" + model.spec() + "' takes dense rows, and a minibatch of " +
                 std::to_string(options.batchSize) + " examples of this sparse data set (" +
                 std::to_string(dataset.featureDim()) + " features) densifies to " +
                 std::to_string(static_cast<uint64_t>(bytes)) + " bytes, over the limit of " +
                 std::to_string(data::Dataset::kMaxDensifiedBytes) +
                 " (Dataset::kMaxDensifiedBytes); use a model that takes sparse input (linear, mlp, embedbag) or "
                 "a smaller batch");
  }
  Sampler sampler(dataset, options.sampler, 0);
  return Trainer(std::move(model), dataset, options, std::move(sampler));
}

Result<Trainer> Trainer::create(model::Model model, const data::Dataset& dataset, TrainerOptions options,
                                Sampler carried) {
  STARLING_RETURN_IF_ERROR(carried.rebind(dataset));
  auto fresh = create(std::move(model), dataset, options);
  if (!fresh) return fresh.status();
  fresh->sampler_ = std::move(carried);
  return fresh;
}

Trainer::Trainer(model::Model model, const data::Dataset& dataset, TrainerOptions options, Sampler sampler)
    : model_(std::move(model)),
      dataset_(&dataset),
      options_(options),
      sampler_(std::move(sampler)),
      grad_(model_.numParams(), 0.0f),
      momentum_(model_.numParams(), 0.0f),
      firstRows_(static_cast<std::size_t>(std::max(1, options.batchSize))) {
  for (std::size_t i = 0; i < firstRows_.size(); ++i)
    firstRows_[i] = static_cast<uint32_t>(i);
}

double Trainer::probeLoss(std::span<const uint32_t> probe) {
  const int n = static_cast<int>(probe.size());
  if (dataset_->isSparse()) {
    // CSR rows for a sparse model; densified ones, a minibatch at a time, otherwise.
    const bool sparse = model_.acceptsSparse();
    const std::size_t chunk = sparse ? probe.size() : static_cast<std::size_t>(options_.batchSize);
    const int classes = model_.numClasses();
    double loss = 0.0;
    for (std::size_t start = 0; start < probe.size(); start += chunk) {
      const std::size_t m = std::min(chunk, probe.size() - start);
      std::span<const float> p;
      if (sparse) {
        dataset_->gatherSparse(probe.subspan(start, m), probeSparse_);
        p = model_.forwardSparse(probeSparse_);
      } else {
        denseX_.resize(m * dataset_->featureDim());
        dataset_->gather(probe.subspan(start, m), denseX_);
        p = model_.forward(denseX_.data(), static_cast<int>(m));
      }
      for (std::size_t i = 0; i < m; ++i)
        loss += model_.outputLoss(p.data() + i * classes, probeY_[start + i]);
    }
    return loss / n;
  }
  std::span<const float> p = model_.forward(probeX_.data(), n);
  const int classes = model_.numClasses();
  double loss = 0.0;
  for (int i = 0; i < n; ++i)
    loss += model_.outputLoss(p.data() + static_cast<std::size_t>(i) * classes, probeY_[i]);
  return loss / n;
}

Result<TrainStats> Trainer::run(std::span<const float> base, const TrainRequest& request, std::span<float> delta) {
  const auto started = std::chrono::steady_clock::now();
  const std::size_t d = model_.numParams();
  if (base.size() != d || delta.size() != d)
    return Status{StatusCode::kInvalidArgument, "trainer for '" + model_.spec() + "' needs " + std::to_string(d) +
                                                    " parameters; got a base of " + std::to_string(base.size()) +
                                                    " and a delta of " + std::to_string(delta.size())};
  if (request.steps < 0) return Status{StatusCode::kInvalidArgument, "steps must be >= 0"};
  if (!std::isfinite(request.lr) || request.lr < 0.0f)
    return Status{StatusCode::kInvalidArgument, "learning rate must be finite and >= 0"};

  STARLING_RETURN_IF_ERROR(model_.setParams(base));
  if (options_.resetMomentum) std::fill(momentum_.begin(), momentum_.end(), 0.0f);
  sampler_.reseed(request.seed);

  // The loss probe: the same examples at the start and at the end of the run, drawn
  // from a stream of its own so that it does not change the minibatches.
  const int probeSize = static_cast<int>(std::min<std::size_t>(options_.lossProbe, dataset_->size()));
  if (probeSize > 0) {
    std::mt19937_64 probeRng(request.seed ^ 0x9e3779b97f4a7c15ULL);
    std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(dataset_->size() - 1));
    probe_.resize(probeSize);
    probeY_.resize(probeSize);
    for (int i = 0; i < probeSize; ++i) {
      probe_[i] = pick(probeRng);
      probeY_[i] = model::labelValue(*dataset_, probe_[i]);
    }
    if (!dataset_->isSparse()) {  // sparse data: probeLoss() gathers as it goes
      probeX_.resize(static_cast<std::size_t>(probeSize) * dataset_->featureDim());
      dataset_->gather(probe_, probeX_);
    }
  }

  TrainStats stats;
  const uint64_t scoredBefore = sampler_.scoredExamples();
  if (probeSize > 0) stats.lossStart = probeLoss(probe_);

  const int b = request.batchSize > 0 ? request.batchSize : options_.batchSize;
  if (firstRows_.size() < static_cast<std::size_t>(b)) {
    firstRows_.resize(static_cast<std::size_t>(b));
    std::iota(firstRows_.begin(), firstRows_.end(), 0u);
  }
  if (dataset_->isSparse() && !model_.acceptsSparse() &&
      double(b) * double(dataset_->featureDim()) * 4.0 > double(data::Dataset::kMaxDensifiedBytes))
    return Status(StatusCode::kInvalidArgument, "a minibatch of " + std::to_string(b) +
                                                    " examples of this sparse data set is over the densify limit");
  const float mu = options_.momentum;
  const float wd = options_.weightDecay;
  const float prox = options_.proxMu;
  const float eta = request.lr;
  double lastLoss = 0.0;
  for (int step = 0; step < request.steps; ++step) {
    Minibatch mb = sampler_.next(model_, b);
    if (options_.batchLog != nullptr)
      options_.batchLog->insert(options_.batchLog->end(), mb.indices.begin(), mb.indices.end());
    // A prioritized minibatch was forwarded already, as rows of the scoring pass on
    // model_: only its distinct rows run backward, from those activations.
    float loss = 0.0f;
    bool sparseStep = false;  // grad_ holds the gradient on touched_ only
    if (mb.sparse != nullptr) {
      // Sparse data: uniform minibatches, or the table proposal's (weighted, no scouts).
      const float* weights = mb.prioritized ? mb.weights.data() : nullptr;
      if (model_.acceptsSparse()) {
        loss = model_.forwardBackwardSparse(*mb.sparse, mb.labels.data(), weights, grad_, &touched_);
        sparseStep = true;
      } else {
        denseX_.resize(static_cast<std::size_t>(b) * dataset_->featureDim());
        dataset_->gather(mb.indices, denseX_);
        loss = model_.forwardBackward(denseX_.data(), mb.labels.data(), weights, b, grad_);
      }
    } else if (mb.scouts > 0) {
      // Scouts ride along in the forward pass (b + scouts rows); only the b minibatch
      // rows, the first ones, run backward.
      const int classes = model_.numClasses();
      std::span<const float> probs = model_.forward(mb.forwardFeatures.data(), b + mb.scouts);
      sampler_.observeScouts(probs.subspan(static_cast<std::size_t>(b) * classes), model_);
      loss = model_.backwardRows(mb.features.data(), {firstRows_.data(), static_cast<std::size_t>(b)}, mb.labels.data(),
                                 mb.weights.data(), b, grad_);
    } else if (!mb.scoredRows.empty()) {
      loss = model_.backwardRows(mb.rowFeatures.data(), mb.scoredRows, mb.rowLabels.data(), mb.rowWeights.data(), b,
                                 grad_);
    } else {
      loss = model_.forwardBackward(mb.features.data(), mb.labels.data(), mb.prioritized ? mb.weights.data() : nullptr,
                                    b, grad_);
    }
    // The step's own outputs refresh the score table (the sampler ignores them
    // when it scored these examples already).
    if (mb.scoredRows.empty()) sampler_.observe(model_.probabilities(), model_);
    if (step == 0 && probeSize == 0) stats.lossStart = loss;
    lastLoss = loss;
    stats.prioritizedSteps += mb.prioritized ? 1 : 0;

    float scale = 1.0f;
    if (options_.clipNorm > 0.0f) {
      float norm = 0.0f;
      if (sparseStep) {
        double sq = 0.0;
        for (const model::ParamRange& r : touched_)
          for (std::size_t i = r.offset; i < r.offset + r.count; ++i)
            sq += static_cast<double>(grad_[i]) * grad_[i];
        norm = static_cast<float>(std::sqrt(sq));
      } else {
        norm = std::sqrt(model::fixedOrderSquaredNorm(grad_));
      }
      if (norm > options_.clipNorm) scale = options_.clipNorm / norm;
    }
    if (sparseStep && mu == 0.0f && wd == 0.0f && prox == 0.0f) {
      sparseUpdate(eta, scale);
      continue;
    }
    // m <- mu m + g;  x <- x - eta (m + wd x), in one pass over the three vectors (the
    // update is memory-bound: two passes cost a third of a step for the MLP). With
    // FedProx, g also holds the proximal term's gradient prox (x - xhat).
    float* xs = model_.params().data();
    float* ms = momentum_.data();
    const float* gs = grad_.data();
    if (prox > 0.0f) {
      const float* bs = base.data();
      for (std::size_t i = 0; i < d; ++i) {
        const float mi = mu * ms[i] + scale * gs[i] + prox * (xs[i] - bs[i]);
        ms[i] = mi;
        xs[i] -= eta * (mi + wd * xs[i]);
      }
    } else {
      for (std::size_t i = 0; i < d; ++i) {
        const float mi = mu * ms[i] + scale * gs[i];
        ms[i] = mi;
        xs[i] -= eta * (mi + wd * xs[i]);
      }
    }
    if (sparseStep) {
      // Back to zero outside the next step's ranges.
      for (const model::ParamRange& r : touched_)
        std::fill_n(grad_.begin() + static_cast<std::ptrdiff_t>(r.offset), r.count, 0.0f);
    }
  }
  stats.steps = request.steps;
  stats.examples = static_cast<uint64_t>(request.steps) * static_cast<uint64_t>(b);
  stats.lossEnd = probeSize > 0 ? probeLoss(probe_) : lastLoss;
  if (request.steps == 0 && probeSize == 0) stats.lossEnd = stats.lossStart = 0.0;

  for (std::size_t i = 0; i < d; ++i)
    delta[i] = base[i] - model_.params()[i];
  stats.scoredExamples = sampler_.scoredExamples() - scoredBefore;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return stats;
}

void Trainer::sparseUpdate(float eta, float scale) {
  // mu = 0: m is scale g (not kept: nothing reads it); wd = 0 and no FedProx, so the
  // parameters outside touched_ do not move.
  float* xs = model_.params().data();
  for (const model::ParamRange& r : touched_) {
    for (std::size_t i = r.offset; i < r.offset + r.count; ++i) {
      xs[i] -= eta * (scale * grad_[i]);
      grad_[i] = 0.0f;
    }
  }
}

}  // namespace starling::client
