#pragma once
// Sampler: chooses the minibatches of local SGD, uniformly or by priority
// (docs/model.md, ALGORITHMS.md section 4; Katharopoulos & Fleuret, ICML 2018).
//
// Priority sampling comes from one of two proposals (docs/model.md):
//
// kTable (the default): draw the b examples straight from the whole data set by the
// score table, p_i = (1 - lambda) s_i / sum(s) + lambda / N, weight each
// w_i = 1 / (N p_i) <= 1 / lambda. An example's score s_i = m + (t_i - m) ageing^age
// reverts with age to m, the running mean score, from t_i, the score its last training
// step measured (an example never scored has s_i = m). The scores come from the
// outputs of the training steps themselves (observe()) and from s = scoutFactor * b
// scouts per step: examples taken in data-set order (a sweep from a random start) and
// forwarded in the same pass as the minibatch, only for their scores (observeScouts()).
// So a prioritized step costs a uniform one plus the scouts' share of the forward pass;
// the scouts keep every score younger than N / s steps.
//
// kCandidates (ALGORITHMS.md section 4): draw B = candidateFactor * b candidates
// uniformly, score each with a forward pass, score_j = the norm of the loss gradient with
// respect to the outputs (Model::outputGradientNorm(): ||softmax(z_j) - onehot(y_j)|| for
// cross-entropy, |sigmoid(z_j) - y_j| logistic, |f_j - y_j| mse, min(|f_j - y_j|, D)
// huber), set
// p_j = (1 - lambda) score_j / sum(score) + lambda / B, draw b of them with replacement
// by p and weight each w_j = 1 / (B p_j).
//
// Either way the b draws are independent given the table (or the candidates; scouts
// only change the table of later steps), so the weighted minibatch gradient
// (1/b) sum_j w_j grad l_j is an unbiased estimate of the full-data gradient, and every
// weight is at most 1 / lambda.
//
// The adaptive mode samples by priority only while it pays: it keeps a smoothed
// estimate of the variance reduction tau_vr = (1 - ||g - u||^2 / ||g||^2)^(-1/2), with g
// the normalized scores of the latest scored examples and u uniform, and prioritizes
// while tau_vr exceeds the cost of a prioritized step relative to a uniform one. For
// kCandidates that is (B + 2b) / 3b: the drawn examples run backward from the scoring
// pass's activations, so they need no second forward pass ((B + 3b) / 3b with
// maxScoreAge > 0, when they may have missed that pass); for kTable it is
// kTableThreshold + scoutFactor / 3. While it is off it returns uniform minibatches and
// refreshes tau_vr (and, for kTable, the table) from the outputs of the training
// step itself (observe()), so the estimate costs no extra forward pass. Under kTable the
// scores of prioritized minibatches are weighted by w to estimate tau_vr over the data.
//
// With kCandidates and maxScoreAge > 0 the score table stands in for the forward pass:
// candidates scored recently enough (by a scoring pass or a training step) take their
// aged table score, and only the others are scored. Any p gives an unbiased estimate with
// w = 1 / (B p); staler scores only reduce the variance less.
//
// On a sparse data set (data::Dataset::isSparse()) minibatches come as CSR rows
// (Minibatch::sparse). The table proposal works there when forced (kPriority), without
// scouts: its scores come from the training steps' own outputs (observe()), and drawing
// needs no dense row. Otherwise every sparse minibatch is uniform (the adaptive switch
// stays off: on the sparse data sets measured, docs/model.md session 7, the table
// proposal cost steps), observe() is a no-op and tau_vr stays where it was; the
// candidate proposal's scoring passes would need dense rows, which a sparse data set of
// 2^20 features cannot afford.
//
// Ownership and threads: the Sampler borrows the Dataset (it must outlive the Sampler)
// and is used by one thread at a time. Given the same seed and the same sequence of
// calls it returns the same minibatches.

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "starling/client/score_tree.hpp"
#include "starling/data/dataset.hpp"
#include "starling/model/model.hpp"
#include "starling/util/status.hpp"

namespace starling::client {

enum class SamplingMode {
  kUniform,   // plain uniform minibatches (sampling with replacement across steps)
  kAdaptive,  // priority while the variance-reduction estimate says it pays
  kPriority,  // always priority (for tests and experiments)
};

// Where a prioritized minibatch comes from.
enum class Proposal {
  // ALGORITHMS.md section 4: B = candidateFactor * b uniform candidates, scored by a
  // forward pass, b of them drawn by score.
  kCandidates,
  // The whole data set: b examples drawn straight from the score table,
  // p_i = (1 - lambda) s_i / sum(s) + lambda / N, w_i = 1 / (N p_i) <= 1 / lambda;
  // a score reverts with age to the running mean score, which an example not scored
  // yet counts with. The scores come from the training steps' own outputs
  // (observe()): no scoring pass.
  kTable,
};

struct SamplerOptions {
  SamplingMode mode = SamplingMode::kAdaptive;
  float lambda = 0.1f;        // uniform mix in (0, 1]; bounds the weights by 1 / lambda
  int candidateFactor = 3;    // B = candidateFactor * b candidates scored per step
  float tauSmoothing = 0.9f;  // a_tau: tau <- a tau + (1 - a) tau_now
  float threshold = 0.0f;     // tau_vr needed to prioritize; 0 means the cost ratio above
  float ageing = 0.999f;      // per-step factor on table scores that were not refreshed
                              // (under kTable on their distance to the mean score)
  Proposal proposal = Proposal::kTable;
  int maxScoreAge = 0;        // > 0: a candidate scored at most this many steps ago takes its
                              // aged table score instead of a forward pass (cheaper steps,
                              // staler scores; still unbiased, the weights use the same p)
  float scoutFactor = 0.75f;  // kTable: s = round(scoutFactor * b) scouts per prioritized
                              // step, forwarded with the minibatch (one forward pass over
                              // b + s rows) only to refresh their table scores; they do not
                              // enter the gradient. 0 turns them off
  bool scoutThread = false;   // kTable, dense data: the scouts run on a thread of their own
                              // (ScoutWorker, client/trainer/scout_worker.hpp) with
                              // parameters at most kScoutParamsEvery steps old, instead of in
                              // the minibatch's forward pass: the training thread no longer
                              // pays for them, at the price of a second core's time and of
                              // repeatability (which step takes a scout's score depends on
                              // timing). scoutSweep is implied
  bool scoutSweep = true;     // scouts walk the data set in order from a random start (every
                              // example rescored once per N / s steps) instead of being drawn
                              // uniformly with replacement
};

// One minibatch: b rows of features, labels, importance weights and dataset indices.
struct Minibatch {
  std::span<const uint32_t> indices;
  std::span<const float> features;  // b x featureDim, row-major; empty for a sparse data set
  // A sparse data set: the b rows as CSR (Dataset::gatherSparse()), else null.
  const data::SparseBatch* sparse = nullptr;
  std::span<const float> labels;   // model::labelValue(): class index, 0/1 or target
  std::span<const float> weights;  // all 1 for a uniform minibatch
  bool prioritized = false;

  // A prioritized minibatch whose examples were all in the scoring pass also comes as
  // its distinct examples: their rows in that pass (ascending), features, labels and
  // weights summed over the draws of each, ready for Model::backwardRows() on the model
  // that next() scored with (normalizer b). Empty otherwise.
  std::span<const uint32_t> scoredRows;
  std::span<const float> rowFeatures;
  std::span<const float> rowLabels;
  std::span<const float> rowWeights;

  // kTable with SamplerOptions::scoutFactor > 0: the scouts' count and the features of the
  // b minibatch rows followed by the scouts' rows ((b + scouts) x featureDim), for one
  // forward pass; Sampler::observeScouts() takes the scouts' outputs.
  int scouts = 0;
  std::span<const float> forwardFeatures;
};

class ScoutWorker;

class Sampler {
 public:
  Sampler(const data::Dataset& dataset, SamplerOptions options, uint64_t seed);
  ~Sampler();
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;

  // SamplerOptions::scoutThread: the worker gets the model's parameters every this
  // many steps.
  static constexpr int kScoutParamsEvery = 8;

  // Restarts the random stream (the score table and tau_vr are kept).
  void reseed(uint64_t seed);
  // Borrows `dataset` instead: the same examples in the same order (e.g. a copy of the
  // client's shard made for another round). Everything learned about them is kept.
  // kInvalidArgument when the sizes differ.
  Status rebind(const data::Dataset& dataset);
  // Frees the per-minibatch workspaces (b x features each), keeping the score table,
  // tau_vr and the counters: what a client keeps between rounds when it cannot keep
  // a Trainer (the simulator's). The next call to next() makes them again.
  void releaseWorkspaces();

  // The next minibatch of b examples. When prioritizing it runs model.forward() on
  // the B candidates (so model's probabilities() change). The returned views stay
  // valid until the next call.
  Minibatch next(model::Model& model, int b);

  // Feeds the outputs (b x model.numClasses(), as model.forward() returns them) of the
  // training step on the last minibatch (its b rows in order), refreshing the score
  // table and tau_vr; model gives the loss head that scores them
  // (Model::outputGradientNorm()). Needed after uniform minibatches, and after every
  // minibatch under kTable; a no-op after a kCandidates one (its candidates were scored
  // already).
  void observe(std::span<const float> outputs, const model::Model& model);

  // Feeds the outputs (scouts x model.numClasses()) of the last minibatch's scouts (see
  // Minibatch::scouts), before observe(): their scores go into the table and into the
  // running mean score.
  void observeScouts(std::span<const float> outputs, const model::Model& model);

  // Whether the next minibatch will be prioritized.
  bool prioritizing() const;
  double tauVr() const { return tau_; }
  // Restores the smoothed estimate (e.g. in a test); a client whose Trainer is rebuilt
  // per round carries its whole Sampler instead (rebind(), releaseWorkspaces()).
  void setTauVr(double tau) { tau_ = tau; }
  double threshold(int b) const;

  // The score of example i in the table, aged by the steps since it was scored: under
  // kTable the score it is drawn by, m + (t_i - m) ageing^age, reverting to m =
  // meanScore() (m for an example never scored); under kCandidates t_i ageing^age
  // (0 for an example never scored).
  float score(uint32_t i) const;
  // kTable: m, the running mean score that ageing scores revert to (0 before the first
  // observe()).
  double meanScore() const { return prior_; }

  // The threshold of the table proposal without scouts: tau_vr >= 1 always, so it
  // prioritizes once the scores differ by a little more than the bookkeeping costs.
  // Scouts add scoutFactor / 3 (a forward pass is a third of a step).
  static constexpr double kTableThreshold = 1.05;

  // Counters since construction.
  uint64_t prioritizedSteps() const { return prioritizedSteps_; }
  uint64_t uniformSteps() const { return uniformSteps_; }
  uint64_t scoredExamples() const { return scoredExamples_; }  // extra forward-pass examples

 private:
  Minibatch batch(int b, bool prioritized) const;  // views of the first b rows of the workspaces
  Minibatch uniform(int b);
  Minibatch priority(model::Model& model, int b);
  Minibatch fromTable(int b);
  void setKey(uint32_t i, float score, uint64_t at);
  void rebase();
  // A sparse data set is drawn from the table (kTable and kPriority both set).
  bool sparseTable() const { return options_.proposal == Proposal::kTable && options_.mode == SamplingMode::kPriority; }
  void takeThreadScouts(const model::Model& model, int b);  // scoutThread: post credit, take scores
  void updateTau(std::span<const float> scores);
  void ensure(int b);
  int scoutCount(int b) const;  // s for a minibatch of b

  const data::Dataset* dataset_;
  SamplerOptions options_;
  std::mt19937_64 rng_;
  double tau_ = 0.0;
  uint64_t step_ = 0;
  bool lastUniform_ = false;
  uint64_t prioritizedSteps_ = 0;
  uint64_t uniformSteps_ = 0;
  uint64_t scoredExamples_ = 0;

  // kTable: per example key_i = table_[i] ageing^-(scoredAt_[i] - keyBase_) and
  // age_i = ageing^-(scoredAt_[i] - keyBase_) (both 0 while unscored), in a sum tree
  // (fromTable() has the formula): O(log N) to set one and to draw one.
  bool lastTable_ = false;
  uint64_t keyBase_ = 0;
  double prior_ = 0.0;  // m: running weighted mean of observed scores
  ScoreTree tree_;
  uint64_t upAt_ = ~uint64_t{0};  // setKey()'s ageing^-(at - keyBase_), cached for one `at`
  double up_ = 1.0;
  int lastScouts_ = 0;  // scouts of the last minibatch, rows lastBatch_.. of x_ and idx_
  int lastBatch_ = 0;
  double scoutSum_ = 0.0;  // their summed scores and count, for observe()'s mean
  std::size_t scoutCount_ = 0;
  std::unique_ptr<ScoutWorker> worker_;  // scoutThread: started by the first table minibatch
  std::vector<std::pair<uint32_t, float>> threadScores_;
  bool sweepStarted_ = false;  // scoutSweep: the next scout, in data-set order
  std::size_t sweepAt_ = 0;

  std::vector<float> table_;        // latest score per example
  std::vector<uint64_t> scoredAt_;  // step of that score, for ageing

  // Workspaces, grown to the largest b seen.
  std::vector<int32_t> rowOf_;      // per candidate: its row in the scoring pass, or -1
  std::vector<float> drawnWeight_;  // per candidate: summed weight of its draws (0: not drawn)
  std::vector<uint32_t> drawn_;     // per minibatch slot: the candidate drawn
  std::vector<uint32_t> rows_;      // distinct drawn candidates' rows in the scoring pass
  std::vector<float> rowX_;
  std::vector<float> rowY_;
  std::vector<float> rowW_;
  std::vector<uint32_t> candidates_;
  std::vector<float> candidateLabels_;
  std::vector<float> candidateX_;    // features of the candidates that need a forward pass
  std::vector<uint32_t> toScore_;    // their positions among the candidates
  std::vector<uint32_t> scoreRows_;  // their dataset indices
  std::vector<float> scores_;
  std::vector<double> cumulative_;
  std::vector<uint32_t> idx_;
  std::vector<float> x_;
  std::vector<float> y_;
  std::vector<float> w_;
  data::SparseBatch sparse_;  // the minibatch of a sparse data set
};

}  // namespace starling::client
