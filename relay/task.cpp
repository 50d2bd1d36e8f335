#include "task.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "starling/model/model.hpp"

namespace starling::relay {

Result<std::pair<coordinator::EngineConfig, coordinator::TaskConfig>> downstreamTask(const wire::WelcomeMsg& w,
                                                                                     const RelayRounds& rounds) {
  if (!w.hyper || !w.compression)
    return Status(StatusCode::kMalformed, "the coordinator's Welcome names no training or compression settings");
  if (!w.featureMean.empty() || !w.categoricalVocabulary.empty())
    return Status(StatusCode::kUnsupported,
                  fmt::format("task '{}' scales features or one-hots over a vocabulary from a statistics round: "
                              "relays do not pass statistics rounds on; connect its clients to the coordinator",
                              w.task));
  if (rounds.localRounds == 0) return Status(StatusCode::kInvalidArgument, "--local-rounds must be at least 1");
  if (rounds.clientsPerRound == 0)
    return Status(StatusCode::kInvalidArgument, "--clients-per-round must be at least 1");
  const wire::HyperParameters& h = *w.hyper;
  const wire::CompressionSettings& c = *w.compression;
  // A relay sends one aggregate of many clients: clipping it to C would bound a group,
  // not a client, and the coordinator's accounting assumes one client per update.
  if (c.updateClipNorm > 0)
    return Status(StatusCode::kInvalidArgument,
                  "the task has differential privacy (privacy.update-clip-norm), which relays do not support: "
                  "connect the clients to the coordinator");

  coordinator::EngineConfig e;
  // The relay's federation ends when the coordinator's does (Federation::complete).
  e.rounds = std::numeric_limits<uint32_t>::max();
  e.clientsPerRound = rounds.clientsPerRound;
  e.overSelection = rounds.overSelection;
  e.minClients = rounds.minClients;
  e.deadlineMs = rounds.deadlineMs;
  e.lr = h.lr;
  e.tau = h.tau;
  e.tauMax = std::max(e.tauMax, h.tau);
  e.adaptiveTau = false;
  e.seed = h.seed;
  e.uplink = c.uplink;
  e.uplinkDensity = c.uplinkDensity;
  e.downlink = c.downlink;
  e.downlinkDensity = c.downlinkDensity;
  e.errorFeedback = c.errorFeedback;
  e.fp16Values = c.fp16Values;
  e.uplinkTernary = c.uplinkTernary;
  e.modelMantissaBits = c.modelMantissaBits;
  e.qsgdLevels = c.qsgdLevels;

  // The Welcome's model spec is complete (its loss included): the task's kind follows.
  auto model = model::Model::fromSpec(w.modelSpec);
  if (!model) return model.status().withContext("the coordinator's model spec");
  coordinator::TaskConfig t;
  t.name = w.task;
  t.model = w.modelSpec;
  t.kind = std::string(data::taskKindName(model->task()));
  t.initSeed = w.initSeed;
  t.batchSize = static_cast<int>(h.batchSize);
  t.momentum = h.momentum;
  t.weightDecay = h.weightDecay;
  t.clipNorm = h.clipNorm;
  t.prioritySampling = h.prioritySampling;
  t.proxMu = h.proxMu;
  t.overlap = h.overlap;
  t.overlapMomentum = h.overlapMomentum;
  t.uplinkErrorCap = c.errorCap;
  t.uplinkMemoryDecay = c.memoryDecay;
  t.uplinkMemoryResetAfter = c.memoryResetAfter;
  t.heartbeatMs = rounds.heartbeatMs;
  t.evalEvery = 0;  // the coordinator evaluates the global model
  STARLING_RETURN_IF_ERROR(coordinator::validateTask(e, t));
  return std::pair{std::move(e), std::move(t)};
}

}  // namespace starling::relay
