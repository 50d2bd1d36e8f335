#include "starling/coordinator/task.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "starling/compression/precision.hpp"
#include "starling/data/load.hpp"
#include "starling/data/task_kind.hpp"
#include "starling/wire/capabilities.hpp"

namespace starling::coordinator {

bool needsStatisticsRound(const TaskConfig& task) {
  return task.standardize || task.categoricalVocabulary;
}

Status validateTask(const EngineConfig& e, const TaskConfig& task) {
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, m); };
  if (e.rounds == 0) return bad("rounds must be at least 1");
  if (e.clientsPerRound == 0) return bad("clients-per-round must be at least 1");
  if (e.overSelection < 1.0) return bad("over-selection must be at least 1.0");
  if (e.stickyClients > 0 &&
      e.stickyClients < static_cast<uint64_t>(std::ceil(e.clientsPerRound * e.overSelection - 1e-9)))
    return bad("sticky-clients must be 0 (off) or at least ceil(clients-per-round x over-selection)");
  if (!(e.stickyFraction >= 0 && e.stickyFraction <= 1)) return bad("sticky-fraction must be in [0, 1]");
  if (!(e.downlinkShared >= 0 && e.downlinkShared < 1)) return bad("downlink-shared must be in [0, 1)");
  if (e.downlinkShared > 0 && e.downlink != "topk" && e.downlink != "topk-sampled")
    return bad("downlink-shared needs a topk or topk-sampled downlink");
  if (e.downlinkRelativeIndices && e.downlink != "topk" && e.downlink != "topk-sampled")
    return bad("downlink-relative-indices needs a topk or topk-sampled downlink");
  if (e.tauMin == 0 || e.tauMin > e.tauMax || e.tau < e.tauMin || e.tau > e.tauMax)
    return bad(fmt::format("need 1 <= tau-min ({}) <= tau ({}) <= tau-max ({})", e.tauMin, e.tau, e.tauMax));
  if (!(e.budgetTauFactor >= 1)) return bad("budget-tau-factor must be at least 1 (1 = off)");
  if (!(e.uplinkDensity > 0 && e.uplinkDensity <= 1)) return bad("uplink-density must be in (0, 1]");
  if (!(e.downlinkDensity > 0 && e.downlinkDensity <= 1)) return bad("downlink-density must be in (0, 1]");
  if (task.batchSize < 1) return bad("batch-size must be at least 1");
  if (!(task.placementDrift >= 0 && task.placementDrift < 1))
    return bad(fmt::format("placement-drift must be in [0, 1) (0 = never), not {}", task.placementDrift));
  if (!data::parseTaskKind(task.kind))
    return bad("task '" + task.kind + "' is not one of classification, binary, regression");
  if (!data::parseDataFormat(task.dataFormat))
    return bad("data-format '" + task.dataFormat + "' is not one of auto, csv, libsvm, npy, npz, idx");
  if (!(task.huberDelta >= 0)) return bad("huber-delta must be at least 0 (0 = squared error)");
  if (task.categoricalBuckets == 0) return bad("categorical-buckets must be at least 1");
  if (task.categoricalVocabulary) {
    if (data::splitList(task.categorical).empty())
      return bad(
          "categorical-vocabulary needs eval.categorical to name the categorical columns (as the clients' "
          "--categorical)");
    if (task.categoricalBuckets < 2)
      return bad("categorical-vocabulary needs categorical-buckets of at least 2 (values + the other slot)");
    if (task.vocabularyMinCount == 0) return bad("vocabulary-min-count must be at least 1");
  }
  if (task.statsDeadlineMs < 0) return bad("stats-deadline-ms must be 0 or more");
  if (task.statsClients > 0 && task.statsClients < statsMinAnswers(e))
    return bad(fmt::format("stats-clients ({}) is below the answers a statistics round needs (min-goal: {})",
                           task.statsClients, statsMinAnswers(e)));
  if (!(task.uplinkMemoryDecay >= 0 && task.uplinkMemoryDecay <= 1))
    return bad("uplink-memory-decay must be in [0, 1] (1 = off)");
  if (!(task.overlap >= 0 && task.overlap <= 1))
    return bad(fmt::format("overlap (the pull-back alpha) must be in [0, 1] (0 = off), not {}", task.overlap));
  if (!(task.overlapMomentum >= 0 && task.overlapMomentum < 1))
    return bad(
        fmt::format("overlap-momentum (the anchor momentum beta) must be in [0, 1), not {}", task.overlapMomentum));
  if (task.overlapMomentum > 0 && task.overlap == 0)
    return bad("overlap-momentum needs overlap (the pull-back alpha) above 0");
  return Status::ok();
}

data::DataOptions dataOptions(const TaskConfig& task, bool test) {
  data::DataOptions o;
  o.format = data::parseDataFormat(task.dataFormat).value_or(data::DataFormat::kAuto);
  o.task = data::parseTaskKind(task.kind).value_or(data::TaskKind::kClassification);
  o.label = task.label;
  o.test = test;
  o.categorical = data::splitList(task.categorical);
  o.categoricalBuckets = task.categoricalBuckets;
  return o;
}

std::vector<std::string> requiredCapabilities(const EngineConfig& e, const TaskConfig& t) {
  std::vector<std::string> need;
  auto add = [&](bool when, std::string_view name) {
    if (when) need.emplace_back(name);
  };
  const bool sparseDown = e.downlink == "topk" || e.downlink == "topk-sampled";
  add(sparseDown || e.catchUpByValue, wire::kCapRiceIndices);
  add(e.uplinkTernary || e.downlinkTernary, wire::kCapTernaryValues);
  add(e.catchUpByValue, wire::kCapCatchUpValues);
  add(e.catchUpByValue && e.catchUpXorRounds > 0, wire::kCapXorValues);
  add(e.modelMantissaBits < compression::kFp32MantissaBits, wire::kCapModelPrecision);
  add(e.downlinkRelativeIndices, wire::kCapRelativeIndices);
  add(e.clientsInitialize, wire::kCapInitialize);
  add(t.prioritySampling, wire::kCapPrioritySampling);
  add(t.proxMu > 0, wire::kCapProx);
  add(t.uplinkErrorCap > 0, wire::kCapErrorCap);
  add(e.federatedEvalEvery > 0, wire::kCapFederatedEval);
  add(e.clipNorm > 0, wire::kCapDpClip);
  add(e.clipNorm > 0 && e.noisePlacement == "distributed", wire::kCapDpNoise);
  add(needsStatisticsRound(t), wire::kCapFeatureStats);
  add(t.categoricalVocabulary, wire::kCapCategoricalVocabulary);
  add(e.dynamicBatch, wire::kCapDynamicBatch);
  add(t.overlap > 0, wire::kCapOverlap);
  return need;
}

uint32_t statsWaitFor(const EngineConfig& e, const TaskConfig& t) {
  if (t.statsMinClients > 0) return t.statsMinClients;
  return std::max<uint32_t>(1, e.minClients > 0 ? e.minClients : e.clientsPerRound);
}

uint32_t statsMinAnswers(const EngineConfig& e) {
  return std::max<uint32_t>(1, e.minGoal > 0 ? e.minGoal : (e.clientsPerRound + 1) / 2);
}

namespace {
// The clip norm as the clients get it: a float no larger than the configured double, so
// that what they clip to is within the norm the coordinator accounts for.
float clipNormFloat(double c) {
  float f = static_cast<float>(c);
  if (double(f) > c) f = std::nextafter(f, 0.0f);
  return f;
}
// A noise share's standard deviation as the clients get it: a float no smaller than
// the configured one, so the round carries at least the noise it is accounted with.
float noiseStdFloat(double s) {
  float f = static_cast<float>(s);
  if (double(f) < s) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}

}  // namespace

wire::WelcomeMsg taskWelcome(const EngineConfig& ec, const TaskConfig& task) {
  wire::WelcomeMsg w;
  w.task = task.name;
  w.modelSpec = task.model;
  w.hyper = wire::HyperParameters{static_cast<float>(ec.lr),
                                  task.momentum,
                                  task.weightDecay,
                                  static_cast<uint32_t>(task.batchSize),
                                  ec.tau,
                                  task.clipNorm,
                                  task.prioritySampling,
                                  ec.seed,
                                  task.proxMu,
                                  task.overlap,
                                  task.overlapMomentum};
  w.compression = wire::CompressionSettings{ec.uplink,
                                            static_cast<float>(ec.uplinkDensity),
                                            ec.downlink,
                                            static_cast<float>(ec.downlinkDensity),
                                            ec.errorFeedback,
                                            ec.fp16Values,
                                            task.uplinkErrorCap,
                                            ec.uplinkTernary,
                                            static_cast<uint8_t>(ec.modelMantissaBits),
                                            ec.qsgdLevels,
                                            task.uplinkMemoryDecay,
                                            task.uplinkMemoryResetAfter,
                                            clipNormFloat(ec.clipNorm),
                                            noiseStdFloat(noiseShareStd(ec))};
  w.heartbeatMs = task.heartbeatMs;
  w.rounds = ec.rounds;
  w.initSeed = task.initSeed;
  return w;
}

wire::RoundAssignMsg assignmentMessage(const Assignment& a, uint32_t deadlineInMs) {
  wire::RoundAssignMsg m;
  m.round = a.round;
  m.baseRound = a.baseRound;
  m.tau = a.tau;
  m.lr = a.lr;
  m.density = a.uplinkDensity;
  m.deadlineMs = deadlineInMs;
  m.broadcast.reserve(a.broadcasts.size());
  for (const auto& p : a.broadcasts)
    m.broadcast.push_back(compression::viewOf(*p));
  m.baseChecksum = a.baseChecksum;
  if (a.denseModel) m.model = wire::denseView(*a.denseModel);
  if (a.values) m.values = compression::viewOf(*a.values);
  m.evaluate = a.evaluate;
  m.batchScale = a.batchScale;
  return m;
}

wire::Frame encodeAssignment(const Assignment& a, uint32_t deadlineInMs) {
  return wire::encode(assignmentMessage(a, deadlineInMs));
}

}  // namespace starling::coordinator
