#include "starling/client/learner.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "starling/client/replay.hpp"
#include "starling/compression/precision.hpp"
#include "starling/data/feature_scaling.hpp"
#include "starling/util/checksum.hpp"
#include "starling/util/gaussian.hpp"
#include "starling/util/mix.hpp"

namespace starling::client {

namespace {

uint64_t mix(uint64_t a, uint64_t b) {
  return mixSeeds(a, b);
}

}  // namespace

wire::FeatureStatsMsg shardStatistics(const data::Dataset& shard, bool categories) {
  data::FeatureSums s = data::featureSums(shard);
  wire::FeatureStatsMsg m;
  m.examples = s.examples;
  m.count = std::move(s.count);
  m.sum = std::move(s.sum);
  m.sumSquares = std::move(s.sumSquares);
  m.sparse = s.sparse;
  if (categories) {
    for (const auto& [column, counts] : data::categoryCounts(shard)) {
      wire::CategoryValuesMsg c;
      c.column = column;
      for (const auto& [value, n] : counts) {
        c.values.push_back(value);
        c.counts.push_back(n);
      }
      m.categories.push_back(std::move(c));
    }
  }
  return m;
}

data::CategoryVocabulary vocabularyOf(const std::vector<wire::CategoryValuesMsg>& columns) {
  data::CategoryVocabulary out;
  for (const wire::CategoryValuesMsg& c : columns)
    out[c.column] = c.values;
  return out;
}

uint64_t clientSeed(uint64_t seed, std::string_view clientId) {
  for (char ch : clientId)
    seed = mix(seed, static_cast<unsigned char>(ch));
  return seed;
}

std::size_t heldOutCount(std::size_t n, double fraction) {
  if (!(fraction > 0) || n < 2) return 0;
  return std::clamp<std::size_t>(static_cast<std::size_t>(std::llround(fraction * double(n))), 1, n - 1);
}

HeldOutSplit splitHeldOut(std::span<const uint32_t> rows, double fraction, uint64_t seed) {
  HeldOutSplit out;
  const std::size_t held = heldOutCount(rows.size(), fraction);
  if (held == 0) {
    out.kept.assign(rows.begin(), rows.end());
    std::sort(out.kept.begin(), out.kept.end());
    return out;
  }
  std::vector<uint32_t> order(rows.begin(), rows.end());
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  out.heldOut.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(held));
  out.kept.assign(order.begin() + static_cast<std::ptrdiff_t>(held), order.end());
  std::sort(out.heldOut.begin(), out.heldOut.end());
  std::sort(out.kept.begin(), out.kept.end());
  return out;
}

// ---- LearnerTask ---------------------------------------------------------------

Result<std::shared_ptr<LearnerTask>> LearnerTask::create(const wire::WelcomeMsg& w) {
  if (!w.hyper || !w.compression) return Status(StatusCode::kMalformed, "Welcome without hyper-parameters");
  const wire::HyperParameters& hyper = *w.hyper;
  const wire::CompressionSettings& comp = *w.compression;
  auto model = model::Model::fromSpec(w.modelSpec);
  if (!model) return Status(StatusCode::kInvalidArgument, "the coordinator's model: " + model.status().message());
  std::shared_ptr<LearnerTask> t(new LearnerTask(std::move(*model)));
  t->modelSpec_ = w.modelSpec;
  TrainerOptions& to = t->trainerOptions_;
  to.batchSize = static_cast<int>(hyper.batchSize);
  to.momentum = hyper.momentum;
  to.weightDecay = hyper.weightDecay;
  to.clipNorm = hyper.clipNorm;
  to.proxMu = hyper.proxMu;
  to.sampler.mode = hyper.prioritySampling ? SamplingMode::kAdaptive : SamplingMode::kUniform;
  // QSGD is contractive under error feedback, as on the coordinator's links.
  auto up = compression::makeCompressor(
      comp.uplink, compression::linkOptions(comp.fp16Values, comp.uplinkTernary, comp.errorFeedback, comp.qsgdLevels));
  if (!up) return Status(StatusCode::kInvalidArgument, "uplink compressor: " + up.status().message());
  t->uplink_ = std::move(*up);
  if (comp.modelMantissaBits == 0 || comp.modelMantissaBits > compression::kFp32MantissaBits)
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the coordinator's model precision of {} mantissa bits", comp.modelMantissaBits));
  t->mantissaBits_ = comp.modelMantissaBits;
  t->errorFeedback_ = comp.errorFeedback;
  t->errorCap_ = comp.errorCap;
  if (!(comp.memoryDecay >= 0 && comp.memoryDecay <= 1))
    return Status(StatusCode::kInvalidArgument, fmt::format("the coordinator's memory decay of {}", comp.memoryDecay));
  t->memoryDecay_ = comp.memoryDecay;
  if (!(comp.updateClipNorm >= 0) || !std::isfinite(comp.updateClipNorm))
    return Status(StatusCode::kInvalidArgument, fmt::format("the coordinator's clip norm of {}", comp.updateClipNorm));
  t->updateClipNorm_ = comp.updateClipNorm;
  if (!(comp.updateNoiseStd >= 0) || !std::isfinite(comp.updateNoiseStd) ||
      (comp.updateNoiseStd > 0 && comp.updateClipNorm == 0))
    return Status(StatusCode::kInvalidArgument, fmt::format("the coordinator's noise of {} (with clip norm {})",
                                                            comp.updateNoiseStd, comp.updateClipNorm));
  t->updateNoiseStd_ = comp.updateNoiseStd;
  if (comp.updateNoiseStd > 0 && comp.uplink != "identity" && comp.uplink != "fp16")
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("distributed noise needs a dense uplink (identity or fp16), not {}", comp.uplink));
  t->memoryResetAfter_ = comp.memoryResetAfter;
  if (!(hyper.overlap >= 0 && hyper.overlap <= 1))
    return Status(StatusCode::kInvalidArgument, fmt::format("the coordinator's overlap alpha of {}", hyper.overlap));
  if (!(hyper.overlapMomentum >= 0 && hyper.overlapMomentum < 1))
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the coordinator's overlap momentum of {}", hyper.overlapMomentum));
  t->overlap_ = hyper.overlap;
  t->overlapMomentum_ = hyper.overlap > 0 ? hyper.overlapMomentum : 0.0f;
  t->seed_ = hyper.seed;
  t->initSeed_ = w.initSeed;
  return t;
}

// ---- LocalUpdate ---------------------------------------------------------------

wire::UpdateMsg LocalUpdate::message() const {
  return wire::UpdateMsg{round,
                         baseRound,
                         stats.examples,
                         static_cast<uint32_t>(stats.steps),
                         static_cast<float>(stats.lossStart),
                         static_cast<float>(stats.lossEnd),
                         compression::viewOf(payload),
                         static_cast<uint32_t>(stats.seconds * 1000.0),
                         evalStats,
                         members};
}

Result<std::vector<double>> LearnerTask::evaluate(std::span<const float> params, const data::Dataset& heldOut) {
  if (!evaluator_) evaluator_.emplace(prototype_);
  STARLING_RETURN_IF_ERROR(evaluator_->setParams(params));
  auto e = evaluator_->evaluate(heldOut);
  if (!e) return e.status();
  return e->stats.toVector();
}

// ---- Learner -------------------------------------------------------------------

Learner::Learner(LearnerOptions options, std::shared_ptr<spdlog::logger> log)
    : options_(options), log_(std::move(log)), holding_(true) {}

Learner::Learner(std::shared_ptr<LearnerTask> task, LearnerOptions options)
    : options_(options), task_(std::move(task)), holding_(false) {
  seed_ = mix(options_.seed, task_->seed());
}

Status Learner::welcome(const wire::WelcomeMsg& w, const data::Dataset& shard) {
  if (!holding_) return Status(StatusCode::kInternal, "a borrowed-base Learner takes no Welcome");
  if (!task_ || w.modelSpec != task_->modelSpec()) {
    // A new task (or the first): everything model-sized is made for it.
    auto task = LearnerTask::create(w);
    if (!task) return task.status();
    trainer_.reset();
    if (options_.trains) {
      auto trainer = Trainer::create((*task)->prototype(), shard, (*task)->trainerOptions());
      if (!trainer)
        return Status(StatusCode::kInvalidArgument,
                      "this client's data cannot train the coordinator's model: " + trainer.status().message());
      trainer_.emplace(std::move(*trainer));
    }
    task_ = std::move(*task);
    const std::size_t d = task_->numParams();
    memory_.reset();  // two model-sized buffers: only when the task uses them
    if (task_->errorFeedback()) STARLING_RETURN_IF_ERROR(makeMemory(d));
    xhat_.assign(d, 0.0f);
    delta_.assign(d, 0.0f);
    heldRound_ = 0;
    pending_.clear();
    overlapState_.reset();
    inFlight_.clear();
    seed_ = mix(options_.seed, task_->seed());
  }
  if (log_ && task_->updateClipNorm() > 0)
    log_->info(
        "differential privacy: updates clipped to L2 norm {}{}", task_->updateClipNorm(),
        task_->updateNoiseStd() > 0
            ? fmt::format(", plus this client's noise share N(0, {}^2) a coordinate, from {}", task_->updateNoiseStd(),
                          options_.noiseSeed ? "a seeded generator" : "a cryptographic generator")
            : std::string());
  // Nothing held: build the round-0 model as the coordinator did; the first assignment
  // catches up from it and its checksum proves it (or brings a dense copy).
  if (heldRound_ == 0) buildInitialModel();
  settleAfterReconnect(w);
  return Status::ok();
}

void Learner::settleAfterReconnect(const wire::WelcomeMsg& w) {
  const auto listed = [](const std::vector<uint64_t>& rounds, uint64_t r) {
    return std::find(rounds.begin(), rounds.end(), r) != rounds.end();
  };
  std::vector<uint64_t> rounds = pending_;
  for (const auto& f : inFlight_)  // (without error feedback only these are kept)
    if (std::find(rounds.begin(), rounds.end(), f.first) == rounds.end()) rounds.push_back(f.first);
  for (uint64_t r : rounds) {
    if (listed(w.heldRounds, r)) continue;
    // A coordinator that does not list its accepted rounds names the last one only.
    const bool applied = w.acceptedRounds ? listed(*w.acceptedRounds, r) : w.lastAcceptedRound >= r;
    if (!applied && log_)
      log_->warn("the update for round {} was not applied (coordinator at round {}): rolled back into memory", r,
                 w.round);
    settle(r, applied);
  }
}

Status Learner::makeMemory(std::size_t d) {
  compression::ErrorFeedbackOptions eo;
  eo.maxErrorRatio = task_->errorCap();
  eo.decayPerMissedRound = task_->memoryDecay();
  eo.resetAfterMissedRounds = task_->memoryResetAfter();
  auto mem = compression::ErrorFeedback::create(d, eo);
  if (!mem) return mem.status();
  memory_.emplace(std::move(*mem));
  return Status::ok();
}

void Learner::buildInitialModel() {
  if (trainer_) {
    trainer_->model().initialize(task_->initSeed());
    std::copy(trainer_->model().params().begin(), trainer_->model().params().end(), xhat_.begin());
  } else {  // no local data (a relay): a model of the task's for the purpose
    model::Model m = task_->prototype();
    m.initialize(task_->initSeed());
    std::copy(m.params().begin(), m.params().end(), xhat_.begin());
  }
  heldRound_ = 0;
}

uint64_t Learner::modelChecksum() const {
  return xhat_.empty() ? 0 : checksum64(xhat_);
}

Status Learner::catchUp(const wire::RoundAssignMsg& a) {
  if (!holding_ || !task_) return Status(StatusCode::kMalformed, "RoundAssign before Welcome");
  Status st = applyCatchUp(a);
  if (!st) lastIndices_.reset();
  return st;
}

Status Learner::applyCatchUp(const wire::RoundAssignMsg& a) {
  const auto d = static_cast<uint32_t>(xhat_.size());
  compression::Compressed c;
  if (a.model || a.values) lastIndices_.reset();
  if (a.model) {
    Status st = compression::decode(*a.model, d, c);
    if (st) st = compression::expand(c, xhat_);
    if (!st) return st.withContext("the coordinator's model");
    ++stats_.resyncs;
  }
  if (a.values) {
    // The current values of the coordinates that changed since the round we hold.
    Status st = compression::decode(*a.values, d, c);
    if (st) st = compression::overwrite(c, xhat_);
    if (!st) return st.withContext("the coordinator's catch-up values");
    if (log_)
      log_->info("catching up from round {} to {}: {} coordinates by value", heldRound_, a.baseRound, c.selected());
  }
  if (!a.broadcast.empty()) {
    // Relative indices: the first tensor's reference is the last replay's last indices.
    std::size_t relative = 0;
    for (const auto& t : a.broadcast)
      relative += t.indexFormat == compression::IndexFormat::kRelative ? 1 : 0;
    const bool firstRelative = a.broadcast.front().indexFormat == compression::IndexFormat::kRelative;
    Status st = replayBroadcasts(a.broadcast, task_->mantissaBits(), lastIndices_, xhat_);
    if (!st) return st.withContext("a broadcast");
    if (log_)
      log_->info("catching up from round {} to {}: {} broadcasts, {} with relative indices{}", heldRound_, a.baseRound,
                 a.broadcast.size(), relative, firstRelative ? " (the first against the last replay's)" : "");
  }
  heldRound_ = a.baseRound;
  const uint64_t checksum = checksum64(xhat_);
  if (checksum != a.baseChecksum) {
    // Back to a model we can name (round 0); the coordinator sends the dense one next.
    buildInitialModel();  // (catchUp forgets lastIndices_ with the failure)
    return Status(StatusCode::kMalformed,
                  fmt::format("model checksum mismatch after catching up to round {} ({:016x}, expected {:016x})",
                              a.baseRound, checksum, a.baseChecksum));
  }
  return Status::ok();
}

void Learner::makeRoom(uint64_t round) {
  while (!pending_.empty() && pending_.size() >= options_.maxPending) {
    if (log_)
      log_->warn("round {} assigned with {} updates awaiting verdicts: rolling round {} back", round, pending_.size(),
                 pending_.front());
    settle(pending_.front(), false);
  }
}

int Learner::batchFor(const wire::RoundAssignMsg& a) const {
  const int b = task_->trainerOptions().batchSize;
  if (a.batchScale == 1.0f) return b;
  return static_cast<int>(std::clamp<double>(std::lround(double(b) * double(a.batchScale)), 1.0, 1 << 20));
}

Result<LocalUpdate> Learner::train(const wire::RoundAssignMsg& a) {
  if (!holding_ || !trainer_) return Status(StatusCode::kMalformed, "RoundAssign before Welcome");
  makeRoom(a.round);
  std::vector<double> evalStats;
  if (a.evaluate && heldOut_ != nullptr && heldOut_->size() > 0) {
    auto e = task_->evaluate(xhat_, *heldOut_);
    if (!e) return e.status().withContext("evaluating on the held-out examples");
    evalStats = std::move(*e);
  }
  if (task_->overlap() > 0) return trainOverlap(a, xhat_, nullptr, std::move(evalStats));
  TrainRequest req{static_cast<int>(a.tau), a.lr, mix(seed_, a.round), batchFor(a)};
  auto stats = trainer_->run(xhat_, req, delta_);
  if (!stats) return stats.status();
  auto update = compressAndTag(a, *stats);
  if (update) update->evalStats = std::move(evalStats);
  return update;
}

Result<LocalUpdate> Learner::submit(const wire::RoundAssignMsg& a, std::span<const float> model,
                                    const TrainStats& stats, Submitted how) {
  if (!holding_ || !task_) return Status(StatusCode::kMalformed, "RoundAssign before Welcome");
  if (model.size() != xhat_.size())
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the model to submit has {} parameters, the task's {}", model.size(), xhat_.size()));
  makeRoom(a.round);
  delta_.resize(xhat_.size());
  for (std::size_t i = 0; i < xhat_.size(); ++i)
    delta_[i] = xhat_[i] - model[i];  // base - x, as a Trainer leaves it
  if (how == Submitted::kCarried) return compressGap(a, stats, true);
  return compressAndTag(a, stats);
}

Result<LocalUpdate> Learner::train(const wire::RoundAssignMsg& a, std::span<const float> base,
                                   const data::Dataset& shard, const data::Dataset* heldOut) {
  if (holding_) return Status(StatusCode::kInternal, "a holding Learner trains from its own model");
  makeRoom(a.round);
  std::vector<double> evalStats;
  if (a.evaluate && heldOut != nullptr && heldOut->size() > 0) {
    auto e = task_->evaluate(base, *heldOut);
    if (!e) return e.status().withContext("evaluating on the held-out examples");
    evalStats = std::move(*e);
  }
  if (task_->overlap() > 0) {
    auto update = trainOverlap(a, base, &shard, std::move(evalStats));
    std::vector<float>().swap(delta_);
    return update;
  }
  TrainRequest req{static_cast<int>(a.tau), a.lr, mix(seed_, a.round), batchFor(a)};
  auto stats = runSteps(base, req, &shard);
  if (!stats) return stats.status();
  auto update = compressAndTag(a, *stats);
  if (update) update->evalStats = std::move(evalStats);
  // Nothing model-sized stays with a virtual client but its memory.
  std::vector<float>().swap(delta_);  // (= {} would keep the capacity)
  return update;
}

Result<TrainStats> Learner::runSteps(std::span<const float> from, const TrainRequest& req, const data::Dataset* shard,
                                     std::span<float> x) {
  delta_.resize(from.size());
  if (holding_) {
    auto stats = trainer_->run(from, req, delta_);
    if (stats && !x.empty()) std::copy(trainer_->model().params().begin(), trainer_->model().params().end(), x.begin());
    return stats;
  }
  // The Trainer (a model copy, momentum) lives for this run only; the sampler (its
  // score table and estimate) carries to the next, as it does in a device's Trainer.
  TrainerOptions to = task_->trainerOptions();
  to.batchLog = options_.batchLog;
  auto trainer = sampler_ ? Trainer::create(task_->prototype(), *shard, to, std::move(*sampler_))
                          : Trainer::create(task_->prototype(), *shard, to);
  sampler_.reset();
  if (!trainer) return trainer.status();
  auto stats = trainer->run(from, req, delta_);
  sampler_.emplace(std::move(trainer->sampler()));
  sampler_->releaseWorkspaces();
  if (stats && !x.empty()) std::copy(trainer->model().params().begin(), trainer->model().params().end(), x.begin());
  return stats;
}

// ---- Overlap Local-SGD ---------------------------------------------------------

Result<LocalUpdate> Learner::trainOverlap(const wire::RoundAssignMsg& a, std::span<const float> base,
                                          const data::Dataset* shard, std::vector<double> evalStats) {
  const std::size_t d = base.size();
  if (!overlapState_) overlapState_.emplace();
  OverlapState& o = *overlapState_;
  const float alpha = task_->overlap();
  const float beta = task_->overlapMomentum();
  // Fresh background steps continue x; anything else restarts it from the base: the
  // first round, steps not run (or an evicted state), missed rounds (the base moved on
  // by more than kOverlapStaleVersions), a base older than the last (a restarted
  // coordinator).
  const bool stale = !o.fresh || !o.started || o.x.size() != d || a.baseRound < o.lastBase ||
                     a.baseRound > o.lastBase + kOverlapStaleVersions;
  TrainStats stats;
  if (stale) {
    if (o.started && log_)
      log_->info("overlap: round {} restarts from the model of round {} ({})", a.round, a.baseRound,
                 !o.fresh ? "no background steps" : "rounds missed since round " + std::to_string(o.lastBase));
    o.x.assign(base.begin(), base.end());
    o.anchorSet = false;
    const TrainRequest req{static_cast<int>(a.tau), a.lr, mix(seed_, a.round), batchFor(a)};
    auto run = runSteps(o.x, req, shard, o.x);
    if (!run) return run.status();
    stats = *run;
    ++stats_.overlapRestarts;
  } else {
    stats = o.stats;
    ++stats_.overlapped;
    if (log_) log_->info("overlap: round {}'s {} steps ran before its assignment came", a.round, stats.steps);
  }
  // The anchor: the base itself, or with momentum z <- z + (beta v + (base - z)).
  std::span<const float> z = base;
  if (beta > 0) {
    if (!o.anchorSet) {
      o.anchor.assign(base.begin(), base.end());
      o.velocity.assign(d, 0.0f);
      o.anchorSet = true;
    } else {
      for (std::size_t i = 0; i < d; ++i) {
        o.velocity[i] = beta * o.velocity[i] + (base[i] - o.anchor[i]);
        o.anchor[i] += o.velocity[i];
      }
    }
    z = o.anchor;
  }
  // The pull-back, and the gap to the base in delta_ (base - x, the Trainer's sign). A
  // restart started from this very base: nothing stale to correct, and pulling back
  // would only shrink its steps, so it sends its whole difference (as without overlap).
  const float pull = stale ? 0.0f : alpha;
  delta_.resize(d);
  for (std::size_t i = 0; i < d; ++i) {
    o.x[i] -= pull * (o.x[i] - z[i]);
    delta_[i] = base[i] - o.x[i];
  }
  o.fresh = false;
  o.started = true;
  o.lastBase = a.baseRound;
  o.next = TrainRequest{static_cast<int>(a.tau), a.lr, mix(seed_, a.round + 1), batchFor(a)};
  auto update = compressGap(a, stats, !stale);
  if (!update) return update;
  update->overlapped = !stale;
  update->evalStats = std::move(evalStats);
  return update;
}

Result<LocalUpdate> Learner::compressGap(const wire::RoundAssignMsg& a, const TrainStats& stats, bool carried) {
  // What is still in flight is not in this base: not sent again.
  if (carried)
    for (const auto& f : inFlight_)
      STARLING_RETURN_IF_ERROR(compression::addScaled(f.second, -1.0f, delta_));
  while (!inFlight_.empty() && inFlight_.size() >= options_.maxPending)
    inFlight_.erase(inFlight_.begin());  // (with error feedback makeRoom settled it already)
  return compressAndTag(a, stats, true, carried);
}

Result<TrainStats> Learner::advance() {
  if (!holding_ || !trainer_) return Status(StatusCode::kInternal, "advance() needs a holding Learner with a task");
  return advanceOn(nullptr);
}

Result<TrainStats> Learner::advance(const data::Dataset& shard) {
  if (holding_) return Status(StatusCode::kInternal, "a holding Learner trains on its own data");
  return advanceOn(&shard);
}

Result<TrainStats> Learner::advanceOn(const data::Dataset* shard) {
  if (!overlapState_ || !overlapState_->next) return TrainStats{};
  OverlapState& o = *overlapState_;
  const TrainRequest req = *o.next;
  o.next.reset();
  // runSteps' scratch is delta_, which train() and the caller's update no longer use.
  auto stats = runSteps(o.x, req, shard, o.x);
  if (!holding_) std::vector<float>().swap(delta_);
  if (!stats) return stats;
  o.stats = *stats;
  o.fresh = true;
  return stats;
}

Result<Attack> Attack::parse(std::string_view text) {
  Attack a;
  const std::size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  if (name == "sign-flip")
    a = Attack(Kind::kSignFlip, 4);
  else if (name == "scale")
    a = Attack(Kind::kScale, 10);
  else if (name == "noise")
    a = Attack(Kind::kNoise, 10);
  else if (name == "label-flip")
    a = Attack(Kind::kLabelFlip, 0);
  else if (name != "none")
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("unknown attack '{}' (none, sign-flip, scale, noise or label-flip)", name));
  if (colon != std::string_view::npos) {
    if (a.kind == Kind::kNone || a.kind == Kind::kLabelFlip)
      return Status(StatusCode::kInvalidArgument, fmt::format("attack '{}' takes no factor", name));
    const std::string number(text.substr(colon + 1));
    char* end = nullptr;
    a.factor = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !(a.factor > 0) || !std::isfinite(a.factor))
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("attack '{}': factor '{}' is not a positive number", name, number));
  }
  return a;
}

void Attack::apply(std::span<float> delta, uint64_t seed) const {
  switch (kind) {
    case Kind::kSignFlip:
    case Kind::kScale: {
      const auto f = static_cast<float>(kind == Kind::kSignFlip ? -factor : factor);
      for (float& x : delta)
        x *= f;
      break;
    }
    case Kind::kNoise: {
      double sq = 0;
      for (float x : delta)
        sq += double(x) * double(x);
      const double std = factor * std::sqrt(sq / double(std::max<std::size_t>(1, delta.size())));
      uint64_t state = seed;
      for (std::size_t i = 0; i < delta.size(); i += 2) {
        const uint64_t w1 = splitmixNext(state);
        const auto [g1, g2] = gaussianPair(w1, splitmixNext(state));
        delta[i] = static_cast<float>(g1 * std);
        if (i + 1 < delta.size()) delta[i + 1] = static_cast<float>(g2 * std);
      }
      break;
    }
    case Kind::kNone:
    case Kind::kLabelFlip:
      break;
  }
}

Result<LocalUpdate> Learner::compressAndTag(const wire::RoundAssignMsg& a, const TrainStats& stats,
                                            bool overlapInFlight, bool gapInput) {
  options_.attack.apply(delta_, mix(seed_, a.round ^ 0xa77acull));
  if (task_->errorFeedback() && !memory_) STARLING_RETURN_IF_ERROR(makeMemory(delta_.size()));
  // The rounds since this client last trained went by without it: the staleness policy
  // (off unless the task sets it). Round numbers count abandoned rounds too. Skipped
  // while an update is pending (a late one waiting for its round): decaying then would
  // also scale what a rollback adds back.
  if (memory_ && lastTrained_ > 0 && a.round > lastTrained_ + 1 && !memory_->hasPending())
    (void)memory_->missedRounds(static_cast<uint32_t>(std::min<uint64_t>(a.round - lastTrained_ - 1, UINT32_MAX)));
  lastTrained_ = std::max(lastTrained_, a.round);
  // Overlap: x carries what earlier uplinks left unsent, and the memory holds the same
  // (after its staleness policy, just applied): the memory's input is the gap minus the
  // memory, so that what is compressed is the gap.
  if (gapInput && memory_)
    for (std::size_t i = 0; i < delta_.size(); ++i)
      delta_[i] -= memory_->memory()[i];
  if (options_.audit) {
    computed_.resize(delta_.size(), 0.0);
    for (std::size_t i = 0; i < delta_.size(); ++i)
      computed_[i] += delta_[i];
  }
  LocalUpdate out;
  out.round = a.round;
  out.baseRound = a.baseRound;
  out.stats = stats;
  {
    // The compressed form and its encoding are each model-sized when the uplink is
    // dense: the first is freed once the second is made.
    compression::Compressed q;
    const compression::CompressParams params{a.density > 0 ? a.density : 1.0, mix(seed_, a.round + 1)};
    // Differential privacy clips the message itself, after compression and error
    // feedback: the memory keeps what was clipped away (docs/privacy.md).
    const double clip = task_->updateClipNorm();
    if (task_->updateNoiseStd() > 0 && !noise_) {
      // Distributed noise's source, made before the memory records anything.
      if (options_.noiseSeed) {
        noise_ = compression::seededNoise(*options_.noiseSeed);
      } else {
        auto secure = compression::secureNoise();
        if (!secure) return secure.status().withContext("distributed noise");
        noise_ = std::move(*secure);
      }
    }
    Status st = memory_ ? memory_->compress(delta_, task_->uplink(), params, q, a.round, clip)
                        : task_->uplink().compress(delta_, params, q);
    if (st && !memory_ && clip > 0) st = compression::clipToNorm(q, clip).status();
    if (!st) return st.withContext(fmt::format("compressing the update of round {}", a.round));
    // Distributed noise: this client's share, on the clipped message only. Neither the
    // memory nor Overlap's record of what is in flight holds any of it: the next
    // message must not feed this noise back (docs/privacy.md).
    std::optional<compression::Compressed> noiseless;
    if (task_->updateNoiseStd() > 0) {
      if (overlapInFlight) noiseless = q;
      st = compression::addNoise(q, *noise_, task_->updateNoiseStd());
      if (!st) {
        if (memory_ && memory_->isPending(a.round)) (void)memory_->rollback(a.round);
        return st.withContext(fmt::format("adding the noise share of round {}", a.round));
      }
    }
    STARLING_RETURN_IF_ERROR(compression::encode(q, out.payload));
    out.selected = q.selected();
    out.compressionSeed = params.seed;
    if (overlapInFlight) inFlight_.emplace_back(a.round, noiseless ? std::move(*noiseless) : std::move(q));
  }
  if (memory_) pending_.push_back(a.round);
  ++stats_.roundsTrained;
  stats_.bytesUp += out.payload.byteSize();
  stats_.lastLoss = stats.lossEnd;
  if (log_)
    log_->info("round {}: {} steps, loss {:.4f} -> {:.4f}, sent {} of {} values ({} bytes)", a.round, stats.steps,
               stats.lossStart, stats.lossEnd, out.selected, delta_.size(), out.payload.byteSize());
  return out;
}

void Learner::settle(uint64_t round, bool accepted) {
  std::erase_if(inFlight_, [round](const auto& f) { return f.first == round; });
  auto it = std::find(pending_.begin(), pending_.end(), round);
  if (it == pending_.end()) return;
  pending_.erase(it);
  if (memory_ && memory_->isPending(round)) (void)(accepted ? memory_->commit(round) : memory_->rollback(round));
  if (accepted)
    ++stats_.roundsAccepted;
  else
    ++stats_.roundsRejected;
}

void Learner::settleAll(bool accepted) {
  for (uint64_t r : std::vector<uint64_t>(pending_))
    settle(r, accepted);
  inFlight_.clear();
}

Status Learner::writeAudit(const std::string& path) const {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Status(StatusCode::kIo, fmt::format("cannot write the audit to '{}'", path));
  fmt::print(f, "computed");
  for (double v : computed_)
    fmt::print(f, " {:.9g}", v);
  fmt::print(f, "\nmemory");
  if (memory_)
    for (float v : memory_->memory())
      fmt::print(f, " {:.9g}", v);
  fmt::print(f, "\n");
  return std::fclose(f) == 0 ? Status::ok() : Status(StatusCode::kIo, "writing the audit to " + path);
}

}  // namespace starling::client
