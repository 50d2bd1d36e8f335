#pragma once
// Trainer: the client's local SGD engine (ALGORITHMS.md section 2, docs/model.md).
//
// It trains whatever task the model's loss head names (classification, binary or
// regression: Model::task()), with labels from model::labelValue().
//
// Given the shared model xhat, it runs tau steps of minibatch SGD with momentum,
// weight decay and gradient clipping on the client's data set, minibatches chosen by
// the Sampler, and returns the difference xhat - x plus statistics. Compression and
// error feedback are the caller's business (compression/ works on the returned span).
//
// Sparse data (data::Dataset::isSparse()): a model that takes sparse input
// (Model::acceptsSparse(): linear, mlp, embedbag) trains on CSR minibatches, and its
// gradient covers only the features present; without momentum, weight decay and
// FedProx the update then touches only those parameters too, so a step costs
// O(nnz x the first layer's outputs + the rest of the network). With any of them the
// update is a pass over all parameters per step. A model that does not take sparse input
// (cnn) trains on densified minibatches, refused when b x featureDim floats exceed
// data::Dataset::kMaxDensifiedBytes. Minibatches of sparse data are uniform, or drawn
// from the score table when forced (kPriority, kTable; no scouts; see the Sampler).
//
// A pure engine: no sockets, no threads (but the Sampler's opt-in scout thread), no
// clock beyond measuring its own duration. The same seeds and calls give bit-identical
// results on one machine (not with SamplerOptions::scoutThread).
//
// Ownership and threads: the Trainer owns its Model copy, momentum buffer and Sampler;
// it borrows the Dataset, which must outlive it. One thread at a time.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "starling/client/sampler.hpp"
#include "starling/data/dataset.hpp"
#include "starling/model/model.hpp"
#include "starling/util/status.hpp"

namespace starling::client {

struct TrainerOptions {
  int batchSize = 32;         // b
  float momentum = 0.9f;      // mu; 0 disables momentum
  float weightDecay = 0.0f;   // wd, applied as x <- x - eta (m + wd x)
  float clipNorm = 0.0f;      // clip each minibatch gradient to this global L2 norm; 0 = off
  float proxMu = 0.0f;        // FedProx (Li et al. 2020): mu (x - xhat) is added to each
                              // (clipped) minibatch gradient; 0 = off
  bool resetMomentum = true;  // start every run() with m = 0 (else keep it across runs)
  int lossProbe = 256;        // examples (fixed per run) to measure loss at start and end;
                              // 0 = use the first and the last minibatch losses instead
  SamplerOptions sampler;
  // When set, run() appends each step's minibatch (b example indices into the data set,
  // in the order the gradient takes them) here, e.g. to replay the batch order in
  // another implementation (starling-sim --export-dir). Not owned; must outlive the
  // Trainer's runs. Null (the default) records nothing.
  std::vector<uint32_t>* batchLog = nullptr;
};

struct TrainRequest {
  int steps = 1;      // tau
  float lr = 0.05f;   // eta
  uint64_t seed = 0;  // seeds the sampler (and the loss probe) for this run
  int batchSize = 0;  // this run's minibatch (0 = TrainerOptions::batchSize)
};

struct TrainStats {
  int steps = 0;
  uint64_t examples = 0;        // examples in minibatches (steps * b)
  double lossStart = 0.0;       // loss at xhat (on the probe, or the first minibatch)
  double lossEnd = 0.0;         // loss at the final x, measured the same way
  double seconds = 0.0;         // wall-clock duration of run()
  int prioritizedSteps = 0;     // steps whose minibatch was drawn by priority
  uint64_t scoredExamples = 0;  // extra forward-pass examples the sampler spent
};

class Trainer {
 public:
  // kInvalidArgument when the model does not fit the data set (Model::checkData(): input
  // size, and labels of the model's task: classes, 0/1 or real targets),
  // or the options are unusable (batch < 1, lambda outside (0, 1], ...).
  static Result<Trainer> create(model::Model model, const data::Dataset& dataset, TrainerOptions options = {});
  // The same with a Sampler carried from an earlier Trainer of this client over the same
  // examples (rebound to `dataset`): its score table and tau_vr continue.
  static Result<Trainer> create(model::Model model, const data::Dataset& dataset, TrainerOptions options,
                                Sampler carried);

  // Runs request.steps steps of local SGD starting from base (the shared model,
  // numParams() floats) and writes base - x into delta (numParams() floats).
  // kInvalidArgument when the sizes differ, steps < 0 or lr is not finite.
  Result<TrainStats> run(std::span<const float> base, const TrainRequest& request, std::span<float> delta);

  // The model as left by the last run (x), e.g. to evaluate it.
  model::Model& model() { return model_; }
  const Sampler& sampler() const { return sampler_; }
  Sampler& sampler() { return sampler_; }
  const TrainerOptions& options() const { return options_; }

 private:
  Trainer(model::Model model, const data::Dataset& dataset, TrainerOptions options, Sampler sampler);
  double probeLoss(std::span<const uint32_t> probe);
  // The update x <- x - eta (m + wd x) with m <- mu m + scale g (+ FedProx) over the
  // parameters listed in touched_ only (sparse steps without momentum, weight decay and
  // FedProx).
  void sparseUpdate(float eta, float scale);

  model::Model model_;
  const data::Dataset* dataset_;
  TrainerOptions options_;
  Sampler sampler_;
  std::vector<float> grad_;
  std::vector<float> momentum_;
  std::vector<uint32_t> probe_;
  std::vector<float> probeX_;
  std::vector<float> probeY_;
  std::vector<uint32_t> firstRows_;  // 0, 1, ..., b - 1: the minibatch rows of a pass with scouts
  // Sparse data: the gradient's ranges of the last sparse step (grad_ is zero elsewhere),
  // the probe's CSR rows, and densified rows for a model without sparse input.
  std::vector<model::ParamRange> touched_;
  data::SparseBatch probeSparse_;
  std::vector<float> denseX_;
};

}  // namespace starling::client
