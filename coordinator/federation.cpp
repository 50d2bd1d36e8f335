#include "starling/coordinator/federation.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <asio/post.hpp>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <set>
#include <thread>

#include "starling/compression/noise.hpp"
#include "starling/compression/precision.hpp"
#include "starling/compression/row_set.hpp"
#include "starling/coordinator/report.hpp"
#include "starling/coordinator/sparse_rows.hpp"
#include "starling/data/loaders.hpp"
#include "starling/net/certificates.hpp"
#include "starling/onnx/onnx.hpp"
#include "starling/util/checksum.hpp"
#include "starling/wire/capabilities.hpp"

#include "engine/shards.hpp"
#include "engine/statistics.hpp"
#include "engine/vocabulary.hpp"
#include "placement.hpp"

namespace starling::coordinator {
namespace fb = wire::fb;

namespace {

EvaluationRecord evaluationRecord(const model::Metrics& m) {
  EvaluationRecord r;
  r.loss = m.loss;
  r.accuracy = m.accuracy;
  r.top5 = m.top5;
  r.auc = m.auc;
  r.rmse = m.rmse;
  r.mae = m.mae;
  r.r2 = m.r2;
  return r;
}

// "accuracy 86.12%", "accuracy 91.20% auc 0.9561" or "rmse 0.4123 r2 0.871".
std::string evaluationText(const model::Metrics& m) {
  const std::string out = testFiguresText({m.accuracy, m.auc, m.rmse, m.r2}, "accuracy ");
  return out.empty() ? fmt::format("test loss {:.4f}", m.loss) : out;
}

Frame share(wire::Frame frame) {
  return std::make_shared<const wire::Frame>(std::move(frame));
}

std::string megabytes(uint64_t bytes) {
  return fmt::format("{:.2f} MB", double(bytes) / 1e6);
}

ParticipantRecord toRecord(const ParticipantResult& p, int64_t wallEpochMs) {
  ParticipantRecord r;
  r.round = p.round;
  r.clientId = p.clientId;
  r.outcome = p.outcome;
  r.reason = p.reason;
  r.assignedMs = wallEpochMs + p.assignedMs;
  if (p.returnedMs) r.returnedMs = wallEpochMs + *p.returnedMs;
  r.durationMs = p.durationMs;
  r.steps = p.steps;
  r.examples = static_cast<int64_t>(p.examples);
  r.lossStart = p.lossStart;
  r.lossEnd = p.lossEnd;
  r.bytesUpRaw = static_cast<int64_t>(p.bytesUpRaw);
  r.bytesUpWire = static_cast<int64_t>(p.bytesUpWire);
  r.bytesDownWire = static_cast<int64_t>(p.bytesDownWire);
  r.staleness = p.staleness;
  r.sticky = p.sticky;
  r.selectionWeight = p.selectionWeight;
  r.waitMs = p.waitMs;
  return r;
}

constexpr std::string_view kAuditPrefix = "audit:";

}  // namespace

Federation::Federation(asio::io_context& io, TaskConfig task, std::unique_ptr<Store> store,
                       std::shared_ptr<spdlog::logger> log)
    : io_(io),
      strand_(asio::make_strand(io)),
      task_(std::move(task)),
      store_(std::move(store)),
      log_(std::move(log)),
      statsTimer_(strand_),
      timer_(strand_),
      epoch_(std::chrono::steady_clock::now()),
      wallEpochMs_(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count()) {}

Result<std::shared_ptr<Federation>> Federation::create(asio::io_context& io, EngineConfig engine, TaskConfig task,
                                                       std::unique_ptr<Store> store,
                                                       std::shared_ptr<spdlog::logger> log) {
  std::shared_ptr<Federation> f(new Federation(io, std::move(task), std::move(store), std::move(log)));
  // The evaluation data first: a short model spec ("linear", "mlp:hidden:64") is
  // completed from it, and a full one checked against it.
  const data::TaskKind kind = data::parseTaskKind(f->task_.kind).value_or(data::TaskKind::kClassification);
  // "onnx:PATH": the architecture and the round-0 weights come from an ONNX file. The
  // task's spec becomes the Starling spec read from it (with the task's head), which is
  // what clients are sent and what the store records, so a restart with the same file
  // resumes; clients cannot build these weights from a seed, so they get them dense.
  std::optional<onnxio::ImportedModel> imported;
  const std::string modelSource = f->task_.model;
  if (modelSource.starts_with("onnx:")) {
    auto imp = onnxio::importOnnx(modelSource.substr(5));
    if (!imp) return imp.status().withContext("task.model");
    for (const auto& note : imp->notes)
      f->log_->info("ONNX import: {}", note);
    imported = std::move(*imp);
    engine.clientsInitialize = false;
  }
  if (!f->task_.testData.empty()) {
    auto test = data::loadData(f->task_.testData, dataOptions(f->task_, true));
    if (!test) return test.status().withContext("evaluation data");
    auto resolved =
        imported
            ? onnxio::resolveImported(*imported, kind, test->featureDim(), test->numClasses(), f->task_.huberDelta)
            : model::resolveSpec(f->task_.model, kind, test->featureDim(), test->numClasses(), f->task_.huberDelta);
    if (!resolved) return resolved.status().withContext("model spec");
    f->task_.model = *resolved;
    f->testSet_.emplace(std::move(*test));
  } else if (imported) {
    auto resolved = onnxio::resolveImported(*imported, kind, 0, 0, f->task_.huberDelta);
    if (!resolved) return resolved.status().withContext("model spec of " + modelSource);
    f->task_.model = *resolved;
  }
  if (!f->testSet_ && f->task_.model.find('/') == std::string::npos && kind != data::TaskKind::kClassification) {
    // A full spec without a loss, and no data to complete it from: the task's loss.
    f->task_.model += kind == data::TaskKind::kBinary ? "/logistic"
                      : f->task_.huberDelta > 0       ? fmt::format("/huber:{}", f->task_.huberDelta)
                                                      : "/mse";
  }
  auto model = model::Model::fromSpec(f->task_.model);
  if (!model)
    return model.status().withContext(f->task_.testData.empty()
                                          ? "model spec (a short form needs eval.test-data to be completed from)"
                                          : "model spec");
  f->log_->info("task '{}': {} with model {}{} ({} parameters){}", f->task_.name, data::taskKindName(kind),
                f->task_.model, imported ? " imported from " + modelSource : "", model->numParams(),
                f->testSet_ ? fmt::format(", evaluated on {} examples", f->testSet_->size()) : "");
  if (model->task() != kind)
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("model '{}' is a {} model but the task is {} (task.task)", f->task_.model,
                              data::taskKindName(model->task()), data::taskKindName(kind)));

  // A store belongs to one task: refuse to resume another one.
  for (const auto& [key, value] :
       {std::pair<std::string, std::string>{"task", f->task_.name}, {"model", f->task_.model}}) {
    auto saved = f->store_->meta(key);
    if (!saved) return saved.status();
    if (*saved && **saved != value)
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("database '{}' belongs to {} '{}', not '{}': use another --db", f->store_->path(), key,
                                **saved, value));
    if (!*saved) STARLING_RETURN_IF_ERROR(f->store_->setMeta(key, value));
  }

  if (!f->task_.shardMapFile.empty()) {
    // One row per input feature: a row of an embedbag table, a column of a linear or
    // mlp model's dense0.weight (shardRowsOf).
    if (!model->acceptsSparse())
      return Status(
          StatusCode::kInvalidArgument,
          fmt::format("engine.shard-map needs a model with first-layer rows (linear, mlp or embedbag), not {}",
                      f->task_.model));
    auto shape = shardRowsOf(*model, {}, {});
    if (!shape) return shape.status().withContext("engine.shard-map");
    f->shardShape_ = std::move(*shape);
    // The map applied before a restart (kept in the database), then the file's if it
    // has changed since; either must fit engine.shards.
    auto fits = [&](const RowShards& map, const std::string& where) {
      if (engine.shards == map.shards) return Status::ok();
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("{} places rows on {} shards; engine.shards is {}", where, map.shards, engine.shards));
    };
    auto saved = f->store_->meta("shard-map");
    if (!saved) return saved.status();
    if (*saved) {
      auto map = RowShards::parse(**saved);
      if (!map) return map.status().withContext("database '" + f->store_->path() + "'");
      if (Status st = fits(*map, "the database's shard map"); !st)
        f->log_->warn("{}: the file's is used", st.message());
      else
        f->shardMap_ = std::move(*map);
      if (f->shardMap_.version > 0)
        f->log_->info("shard map version {} from the database: {} rows on {} shards", f->shardMap_.version,
                      f->shardMap_.rows.size(), f->shardMap_.shards);
    }
    auto changed = f->changedShardMap();
    if (!changed) return changed.status();
    if (*changed) {
      if (Status st = fits(**changed, f->task_.shardMapFile); !st) return st;
      (*changed)->version = f->shardMap_.version + 1;
      STARLING_RETURN_IF_ERROR(f->store_->setMeta("shard-map", (*changed)->text()));
      f->shardMap_ = std::move(**changed);
      f->log_->info("shard map version {} from {}: {} rows on {} shards", f->shardMap_.version, f->task_.shardMapFile,
                    f->shardMap_.rows.size(), engine.shards);
    }
    if (f->shardMap_.version == 0)
      return Status(StatusCode::kInvalidArgument, "engine.shard-map: no map in " + f->task_.shardMapFile);
    engine.shardRows = f->shardShape_;
    engine.shardRows.rows = f->shardMap_.rows;
    engine.shardRows.shardOf = f->shardMap_.shardOf;
  }

  auto checkpoint = f->store_->latestCheckpoint();
  if (!checkpoint) return checkpoint.status();
  if (*checkpoint) {
    Checkpoint& cp = **checkpoint;
    // The test audit's sums (FederationTestHooks::auditOut) are the federation's, not the engine's.
    for (auto it = cp.vectors.begin(); it != cp.vectors.end();) {
      if (!it->first.starts_with(kAuditPrefix)) {
        ++it;
        continue;
      }
      f->auditApplied_[it->first.substr(kAuditPrefix.size())].assign(it->second.begin(), it->second.end());
      it = cp.vectors.erase(it);
    }
    if (cp.model.size() != model->numParams())
      return Status(StatusCode::kMalformed, fmt::format("checkpoint of round {} has {} parameters, '{}' has {}",
                                                        cp.round, cp.model.size(), f->task_.model, model->numParams()));
    auto engineR =
        RoundEngine::resume(engine, {cp.round, cp.model, cp.serverMemory, cp.engineState, cp.vectors, cp.catchUp});
    if (!engineR) return engineR.status().withContext(fmt::format("resuming from round {}", cp.round));
    f->engine_ = std::move(*engineR);
    if (f->engine_->modelChecksum() != cp.modelChecksum && cp.modelChecksum != 0)
      return Status(StatusCode::kMalformed,
                    fmt::format("checkpoint of round {} does not match its checksum", cp.round));
    auto last = f->store_->lastRecordedRound();
    if (!last) return last.status();
    if (*last) f->engine_->reserveRoundsThrough(**last);
    f->resumedFrom_ = cp.round;
  } else {
    if (imported) {
      STARLING_RETURN_IF_ERROR(model->setParams(imported->params));
    } else {
      model->initialize(f->task_.initSeed);
    }
    auto engineR = RoundEngine::create(engine, std::vector<float>(model->params().begin(), model->params().end()));
    if (!engineR) return engineR.status();
    f->engine_ = std::move(*engineR);
  }

  if (engine.clipNorm > 0) {
    // Differential privacy's noise from a cryptographic generator (the engine's own is
    // seeded, for the simulator).
    auto noise = compression::secureNoise();
    if (!noise) return noise.status();
    f->engine_->setNoise(std::move(*noise));
  }
  f->required_ = requiredCapabilities(f->engine_->config(), f->task_);
  if (needsStatisticsRound(f->task_)) {
    // A restart reuses the statistics round of the first run: no second round. A round
    // stored in part (a crash between its two records) is run again.
    std::optional<FeatureStatisticsRecord> stats;
    data::CategoryVocabulary vocabulary;
    bool stored = true;
    if (f->task_.standardize) {
      auto r = f->store_->featureStatistics();
      if (!r) return r.status();
      if (*r && (*r)->mean.size() != model->inputDim())
        return Status(StatusCode::kMalformed,
                      fmt::format("database '{}' holds feature statistics of {} features, the model takes {}",
                                  f->store_->path(), (*r)->mean.size(), model->inputDim()));
      stats = std::move(*r);
      stored = stored && stats.has_value();
    }
    if (f->task_.categoricalVocabulary) {
      auto r = f->store_->categoricalVocabulary();
      if (!r) return r.status();
      for (const CategoricalColumnRecord& c : *r)
        vocabulary[c.column] = c.values;
      stored = stored && !vocabulary.empty();
      // A column none of whose values was kept has no row: all its values are "other".
      for (const std::string& column : data::splitList(f->task_.categorical))
        vocabulary.try_emplace(column);
    }
    if (stored) {
      STARLING_RETURN_IF_ERROR(f->adoptStatistics(
          vocabulary, stats ? data::FeatureScaling{stats->mean, stats->std, stats->centre} : data::FeatureScaling{}));
      f->log_->info("using the stored statistics round{}; no statistics round",
                    stats ? fmt::format(" of {} clients ({} examples)", stats->clients.size(), stats->examples) : "");
    }
  }
  f->evalModel_.emplace(std::move(*model));
  if (f->resumedFrom_ > 0)
    f->log_->info("resumed from round {} (model checksum {:016x}, {} rounds committed)", f->resumedFrom_,
                  f->engine_->modelChecksum(), f->engine_->commits());
  // The placement of clients on relays kept by an earlier run, then the file's.
  auto placement = f->store_->meta("placement");
  if (!placement) return placement.status();
  if (*placement) {
    auto map = RelayPlacementMap::parse(**placement);
    if (!map) return map.status().withContext("database '" + f->store_->path() + "'");
    f->placement_ = std::move(*map);
    f->log_->info("placement version {} from the database: {} clients on relays", f->placement_.version,
                  f->placement_.clients.size());
  }
  f->refreshPlacement();
  return f;
}

Result<std::optional<RowShards>> Federation::changedShardMap() {
  std::error_code ec;
  const auto written = std::filesystem::last_write_time(task_.shardMapFile, ec);
  if (ec) {
    if (shardMap_.version > 0) return std::optional<RowShards>();  // the database's stays
    return Status(StatusCode::kNotFound, "cannot read the shard map '" + task_.shardMapFile + "'");
  }
  if (shardMapRead_ && *shardMapRead_ == written) return std::optional<RowShards>();
  shardMapRead_ = written;  // a file that does not parse is reported once, until it changes
  auto map = readRowShards(task_.shardMapFile);
  if (!map) return map.status();
  if (shardMap_.version > 0 && map->samePlacement(shardMap_)) return std::optional<RowShards>();
  return std::optional<RowShards>(std::move(*map));
}

void Federation::refreshShardMap(uint64_t round) {
  if (task_.shardMapFile.empty()) return;
  auto changed = changedShardMap();
  if (!changed) {
    log_->warn("shard map not applied: {}", changed.status().message());
    return;
  }
  if (!*changed) return;
  RowShards& map = **changed;
  EngineConfig::ShardRows rows = shardShape_;
  rows.rows = map.rows;
  rows.shardOf = map.shardOf;
  if (Status st = engine_->setShardRows(std::move(rows)); !st) {
    log_->warn("shard map not applied: {}: {}", task_.shardMapFile, st.message());
    return;
  }
  map.version = shardMap_.version + 1;
  // The engine uses it whether or not it is recorded: a map decides which thread adds
  // which entries, never the model.
  if (Status st = store_->setMeta("shard-map", map.text()); !st)
    log_->warn("shard map version {}: recording it: {}", map.version, st.message());
  shardMap_ = std::move(map);
  log_->info("shard map version {} from {}: {} rows on {} shards, applied after round {}", shardMap_.version,
             task_.shardMapFile, shardMap_.rows.size(), shardMap_.shards, round);
}

void Federation::refreshPlacement() {
  if (task_.placementFile.empty()) return;
  std::error_code ec;
  const auto written = std::filesystem::last_write_time(task_.placementFile, ec);
  if (ec || (placementRead_ && *placementRead_ == written)) return;  // none yet, or read already
  auto clients = readRelayPlacement(task_.placementFile);
  if (!clients) {
    log_->warn("placement not applied: {}", clients.status().message());
    return;
  }
  placementRead_ = written;
  if (*clients == placement_.clients) return;
  RelayPlacementMap next{placement_.version + 1, std::move(*clients)};
  if (Status st = store_->setMeta("placement", next.text()); !st) {
    log_->warn("placement not applied: recording it: {}", st.message());
    return;
  }
  placement_ = std::move(next);
  std::map<std::string, int> perRelay;
  for (const auto& [client, relay] : placement_.clients)
    ++perRelay[relay];
  PlacementRecord record;
  record.version = placement_.version;
  record.round = engine_->committedRound();
  record.source = "file";
  record.clients = static_cast<int64_t>(placement_.clients.size());
  record.relays = static_cast<int64_t>(perRelay.size());
  if (Status st = store_->recordPlacement(record); !st) log_->warn("{}", st.message());
  log_->info("placement version {} from {}: {} clients on {} relays; the relays apply it at their next round",
             placement_.version, task_.placementFile, placement_.clients.size(), perRelay.size());
}

void Federation::takeMembers(const std::string& relay, const std::vector<wire::MemberRowsMsg>& members) {
  if (task_.placementDrift <= 0) return;
  auto inputs = model::specInputs(task_.model);
  if (!inputs) return;  // a model without first-layer rows: nothing to place by
  std::vector<MemberRows> list;
  for (const wire::MemberRowsMsg& m : members) {
    if (m.rowSet.empty()) continue;  // it trains the whole model: placed anywhere alike
    auto rows = compression::decodeCoveredRows(m.rowSet, m.rowBucket, static_cast<uint32_t>(*inputs));
    if (!rows) {
      log_->warn("{}'s report of the rows of {}: {}", relay, m.client, rows.status().message());
      continue;
    }
    list.push_back({m.client, std::vector<uint32_t>(rows->rows().begin(), rows->rows().end())});
  }
  log_->debug("{} reports {} clients ({} with rows)", relay, members.size(), list.size());
  relayMembers_[relay] = std::move(list);
}

void Federation::maybeRecomputePlacement(uint64_t round) {
  if (task_.placementDrift <= 0) return;
  if (recomputing_.valid()) {
    if (recomputing_.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
      applyRecomputed(recomputing_.get(), round);
    return;
  }
  auto inputs = model::specInputs(task_.model);
  if (!inputs) return;
  // The relays connected now that reported their clients, and those clients where they
  // train (a client reported by two relays, as it moves, counts at the first).
  std::vector<std::string> relays;
  std::vector<ClientRows> clients;
  std::vector<uint32_t> relayOf;
  std::set<std::string> seen;
  for (const auto& [relay, members] : relayMembers_) {
    if (!sessions_.contains(relay) || !relayAddress_.contains(relay)) continue;
    const auto r = static_cast<uint32_t>(relays.size());
    relays.push_back(relay);
    for (const MemberRows& m : members)
      if (seen.insert(m.id).second) {
        clients.push_back({m.id, m.rows});
        relayOf.push_back(r);
      }
  }
  if (relays.size() < 2 || clients.size() < relays.size()) return;
  auto now = evaluateRelays(clients, *inputs, relayOf, static_cast<uint32_t>(relays.size()));
  if (!now) {
    log_->warn("the relays' traffic: {}", now.status().message());
    return;
  }
  const double drift = task_.placementDrift;
  const uint64_t traffic = now->trafficRows;
  if (computedTraffic_ > 0 && double(traffic) <= double(computedTraffic_) * (1 + drift) &&
      double(traffic) >= double(computedTraffic_) * (1 - drift))
    return;
  log_->info("relay traffic {} rows a round ({}): placing {} clients on {} relays", traffic,
             computedTraffic_ > 0 ? fmt::format("{} at the last placement", computedTraffic_) : "first placement",
             clients.size(), relays.size());
  // METIS on a worker: the rounds go on meanwhile; the result is applied after the first
  // round that ends once it is ready.
  recomputing_ = std::async(std::launch::async,
                            [clients = std::move(clients), relayOf = std::move(relayOf), relays = std::move(relays),
                             universe = *inputs, traffic]() -> Result<Recomputed> {
                              RelayPlacementOptions options;
                              options.relays = static_cast<uint32_t>(relays.size());
                              auto placed = placeClients(clients, universe, options);
                              if (!placed) return placed.status();
                              auto kept = keepRelays(placed->relayOf, relayOf, options.relays);
                              if (!kept) return kept.status();
                              Recomputed out;
                              for (std::size_t i = 0; i < clients.size(); ++i)
                                out.clients.emplace_back(clients[i].id, relays[(*kept)[i]]);
                              std::sort(out.clients.begin(), out.clients.end());
                              out.rowsBefore = traffic;
                              out.rowsAfter = placed->trafficRows;
                              out.relays = options.relays;
                              out.seconds = placed->seconds;
                              return out;
                            });
}

void Federation::applyRecomputed(Result<Recomputed> r, uint64_t round) {
  if (!r) {
    log_->warn("placement not recomputed: {}", r.status().message());
    return;
  }
  const double drift = task_.placementDrift;
  const bool saves = double(r->rowsAfter) < double(r->rowsBefore) * (1 - drift);
  computedTraffic_ = saves ? r->rowsAfter : r->rowsBefore;
  // What a row costs each way: its first-layer parameters as fp32.
  if (!rowsModel_)
    if (auto m = model::Model::fromSpec(task_.model)) rowsModel_ = std::make_shared<const model::Model>(std::move(*m));
  uint64_t rowBytes = 0;
  const uint32_t firstRow = 0;
  if (rowsModel_)
    if (auto ranges = rowsModel_->firstLayerRows(std::span<const uint32_t>(&firstRow, 1)))
      for (const auto& range : *ranges)
        rowBytes += 4 * range.count;
  const std::string against =
      fmt::format("the partition took {:.3f} s; relay traffic {} -> {} rows a round ({} bytes a round each way)",
                  r->seconds, r->rowsBefore, r->rowsAfter,
                  r->rowsBefore >= r->rowsAfter ? fmt::format("saves {}", (r->rowsBefore - r->rowsAfter) * rowBytes)
                                                : fmt::format("costs {}", (r->rowsAfter - r->rowsBefore) * rowBytes));
  if (!saves || r->clients == placement_.clients) {
    log_->info("placement recomputed, not applied (it saves under {:.0f}% of the traffic): {}", 100 * drift, against);
    return;
  }
  RelayPlacementMap next{placement_.version + 1, std::move(r->clients)};
  if (Status st = store_->setMeta("placement", next.text()); !st) {
    log_->warn("placement not applied: recording it: {}", st.message());
    return;
  }
  placement_ = std::move(next);
  PlacementRecord record;
  record.version = placement_.version;
  record.round = round;
  record.source = "drift";
  record.clients = static_cast<int64_t>(placement_.clients.size());
  record.relays = r->relays;
  record.partitionSeconds = r->seconds;
  record.rowsBefore = static_cast<int64_t>(r->rowsBefore);
  record.rowsAfter = static_cast<int64_t>(r->rowsAfter);
  if (Status st = store_->recordPlacement(record); !st) log_->warn("{}", st.message());
  log_->info(
      "placement version {} recomputed on drift: {} clients on {} relays; {}; the relays apply it at their "
      "next round",
      placement_.version, placement_.clients.size(), r->relays, against);
}

Frame Federation::relayAssignFrame(const Assignment& a) {
  wire::RoundAssignMsg m = assignmentMessage(a, static_cast<uint32_t>(std::max<int64_t>(0, a.deadlineMs - nowMs())));
  if (placement_.version > 0) {
    m.placementVersion = placement_.version;
    // Only the clients of relays connected now: a client placed on a relay that is down
    // (or has not said its address since this coordinator started) may train where it
    // is, and the relays send it back when a later assignment lists its relay again
    // (they apply an entry list that differs even at the same version).
    for (const auto& [client, relay] : placement_.clients)
      if (auto at = relayAddress_.find(relay); at != relayAddress_.end() && sessions_.contains(relay))
        m.placement.push_back({client, relay, at->second});
  }
  return share(wire::encode(m));
}

void Federation::applyPlacement(std::string self, std::vector<wire::PlacedClientMsg> placement, uint64_t version) {
  asio::post(strand_, [f = shared_from_this(), self = std::move(self), placement = std::move(placement), version] {
    // The same version may come with more addresses (relays the coordinator heard from
    // since): applied again when anything differs.
    if (version == 0 || (version == f->appliedPlacement_ && placement == f->appliedEntries_)) return;
    f->appliedPlacement_ = version;
    f->appliedEntries_ = placement;
    f->placedElsewhere_.clear();
    for (const auto& p : placement)
      if (p.relay != self) f->placedElsewhere_[p.client] = p.address;
    f->log_->info("placement version {}: {} of {} placed clients belong to other relays", version,
                  f->placedElsewhere_.size(), placement.size());
    std::vector<std::shared_ptr<Session>> sessions;
    for (const auto& [id, session] : f->sessions_)
      sessions.push_back(session);
    for (const auto& session : sessions)
      f->redirectIfPlacedElsewhere(session);
  });
}

bool Federation::redirectIfPlacedElsewhere(const std::shared_ptr<Session>& session) {
  const auto it = placedElsewhere_.find(session->clientId());
  if (it == placedElsewhere_.end()) return false;
  log_->info("{} is placed on the relay at {} (placement version {}): redirected", session->clientId(), it->second,
             appliedPlacement_);
  session->send(
      share(wire::encode(wire::ByeMsg{fmt::format("placed on the relay at {}", it->second), false, it->second})));
  session->close();
  return true;
}

int64_t Federation::nowMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - epoch_).count();
}

void Federation::onMessage(const std::shared_ptr<Session>& session, wire::Message message) {
  asio::post(strand_, [self = shared_from_this(), session, msg = std::move(message)] { self->handle(session, msg); });
}

void Federation::onClosed(const std::shared_ptr<Session>& session, const Status& why) {
  asio::post(strand_, [self = shared_from_this(), session, why] {
    const std::string& id = session->clientId();
    auto it = self->sessions_.find(id);
    if (it == self->sessions_.end() || it->second != session) return;  // replaced by a newer connection
    self->sessions_.erase(it);
    if (self->observer_) self->observer_->clientLeft(id, why.message(), self->wallEpochMs_ + self->nowMs());
    if (self->parked_.erase(id) > 0) return;  // waiting for the relay's rows: the engine does not know it
    if (self->waiting_.erase(id) > 0) {       // never welcomed: the engine does not know it
      if (self->statsOpen_ && !self->statsReceived_.contains(id) && self->statsAsked_.erase(id) > 0 &&
          self->statsReceived_.size() == self->statsAsked_.size())
        self->closeStatistics();
      return;
    }
    if (!self->done_) self->perform(self->engine_->clientLeft(id, why.message(), self->nowMs()));
  });
}

void Federation::handle(const std::shared_ptr<Session>& session, const wire::Message& msg) {
  if (done_) return;
  switch (msg.type()) {
    case fb::Body::Hello:
      if (auto h = wire::parseHello(msg)) return hello(session, *h);
      break;
    case fb::Body::Update:
      if (auto u = wire::parseUpdate(msg)) return update(session, *u);
      break;
    case fb::Body::FeatureStats:
      if (auto fs = wire::parseFeatureStats(msg)) return featureStats(session, *fs);
      break;
    case fb::Body::Heartbeat:
      return;  // the answer to ours: it kept the connection alive
    case fb::Body::Error:
      if (auto err = wire::parseError(msg)) {
        log_->warn("{} reports: {}", session->clientId(), err->message);
        if (err->code == fb::ErrorCode::Unexpected)
          perform(engine_->clientOutOfSync(session->clientId(), err->message, nowMs()));
        return;
      }
      break;
    default:
      break;
  }
  const std::string why = fmt::format("unexpected {} message from a client", msg.typeName());
  log_->warn("closing {}: {}", session->clientId(), why);
  session->send(share(wire::encode(wire::ErrorMsg{fb::ErrorCode::Unexpected, why})));
  session->close();
}

void Federation::hello(const std::shared_ptr<Session>& session, const wire::HelloMsg& h) {
  const std::string& id = session->clientId();
  // Clients and relays train for the task; any other role a certificate of the task's CA
  // may state (one that also authenticates clients) does not.
  const net::Role role = net::roleFromOu(session->peer().role, net::Role::kClient);
  if (role != net::Role::kClient && role != net::Role::kRelay) {
    const std::string why =
        fmt::format("a certificate with the role '{}' cannot take part in training (only clients and relays)",
                    session->peer().role);
    log_->warn("refused {} from {}: {}", id, session->peer().address, why);
    recordRefusal(*session, why);
    session->send(share(wire::encode(wire::ErrorMsg{fb::ErrorCode::Unauthenticated, why})));
    session->close();
    return;
  }
  if (auto missing = wire::missingCapabilities(required_, h.capabilities); !missing.empty()) {
    const std::string why =
        fmt::format("this task needs capabilities the client lacks: {} (a newer starling-client has them)",
                    fmt::join(missing, ", "));
    log_->warn("refused {} from {}: {}", id, session->peer().address, why);
    // Recorded before the client is told, so that the refusal is on disk by the time it
    // reads the error. Not being able to record it does not change the answer.
    recordRefusal(*session, why);
    session->send(share(wire::encode(wire::ErrorMsg{fb::ErrorCode::Unsupported, why})));
    session->close();
    return;
  }
  if (auto old = sessions_.find(id); old != sessions_.end() && old->second != session) {
    log_->info("{} reconnected; closing its previous connection", id);
    old->second->close();
    perform(engine_->clientLeft(id, "replaced by a new connection", nowMs()));
  }
  if (redirectIfPlacedElsewhere(session)) return;
  sessions_[id] = session;
  if (role == net::Role::kRelay && !h.listen.empty()) relayAddress_[id] = h.listen;
  const int64_t wallNow = wallEpochMs_ + nowMs();
  ClientRecord rec;
  rec.id = id;
  rec.certFingerprint = session->peer().fingerprint;
  rec.firstSeenMs = wallNow;
  rec.lastSeenMs = wallNow;
  rec.examples = static_cast<int64_t>(h.numExamples);
  rec.rowSet = h.rowSet;  // what it offered, taken or not (starling-coordinator placement --db)
  rec.rowBucket = h.rowBucket;
  if (Status st = store_->upsertClient(rec); !st) log_->warn("recording client {}: {}", id, st.message());
  if (statsPending()) {
    // Welcomed once the statistics round has given the scaling and vocabulary.
    waiting_[id] = h;
    log_->info("{} joined from {} ({} examples); waiting for the statistics round", id, session->peer().address,
               h.numExamples);
    if (statsOpen_ && statsAsked_.contains(id) && !statsReceived_.contains(id)) {
      // Asked on the connection this one replaced: ask again.
      session->send(share(
          wire::encode(wire::StatsRequestMsg{static_cast<uint32_t>(statsDeadlineMs()), task_.categoricalVocabulary})));
    }
    maybeStartStatistics();
    return;
  }
  welcomeClient(session, h);
}

void Federation::welcomeClient(const std::shared_ptr<Session>& session, const wire::HelloMsg& h) {
  const std::string& id = session->clientId();
  wire::WelcomeMsg welcome = taskWelcome(engine_->config(), task_);
  welcome.clientId = id;
  welcome.round = engine_->committedRound();
  welcome.modelChecksum = engine_->modelChecksum();
  welcome.lastAcceptedRound = engine_->lastAcceptedRound(id);
  welcome.heldRounds = engine_->heldUpdateRounds(id);
  welcome.acceptedRounds = engine_->acceptedRounds(id);
  welcome.featureMean = scaling_.mean;
  welcome.featureStd = scaling_.std;
  welcome.featureCentre = scaling_.centre;
  for (const auto& [column, values] : vocabulary_)
    welcome.categoricalVocabulary.push_back(wire::CategoryValuesMsg{column, values, {}});
  std::shared_ptr<const ClientRowSet> rows = clientRows(id, h);
  welcome.sparseRows = rows != nullptr;
  rows_[id] = rows;
  session->send(share(wire::encode(welcome)));
  if (observer_)
    observer_->clientJoined(id, net::roleName(net::roleFromOu(session->peer().role, net::Role::kClient)),
                            session->peer().address, h.numExamples, wallEpochMs_ + nowMs());
  log_->info("{}{} joined from {} ({} examples, holds round {}{})", id,
             net::roleFromOu(session->peer().role, net::Role::kClient) == net::Role::kRelay ? " (a relay)" : "",
             session->peer().address, h.numExamples, h.lastRound,
             session->peer().resumed ? ", resumed TLS session" : "");
  if (rows)
    log_->info("{} trains the compact model of {} rows ({} of {} parameters; its row set {} bytes)", id, rows->rows(),
               rows->viewSize(), rows->fullSize(), rows->bytes().size());
  if (!coveredUpstream(rows)) {
    parked_[id] = Parked{h.numExamples, h.lastRound, h.modelChecksum};
    log_->info("{} waits until this relay's coordinator takes its rows", id);
    return;
  }
  parked_.erase(id);
  perform(engine_->clientJoined(id, h.numExamples, h.lastRound, h.modelChecksum, nowMs(), std::move(rows)));
}

bool Federation::coveredUpstream(const std::shared_ptr<const ClientRowSet>& rows) const {
  if (!upstreamRows_) return true;
  if (!rows) return false;
  auto view = rows->view();
  return view && std::includes(upstreamRows_->begin(), upstreamRows_->end(), view->rows().begin(), view->rows().end());
}

void Federation::setUpstreamRows(std::optional<std::vector<uint32_t>> rows) {
  asio::post(strand_, [self = shared_from_this(), rows = std::move(rows)]() mutable {
    self->upstreamRows_ = std::move(rows);
    if (self->done_) return;
    for (auto it = self->parked_.begin(); it != self->parked_.end();) {
      const auto r = self->rows_.find(it->first);
      const std::shared_ptr<const ClientRowSet> clientRows = r != self->rows_.end() ? r->second : nullptr;
      if (!self->sessions_.contains(it->first) || !self->coveredUpstream(clientRows)) {
        ++it;
        continue;
      }
      const std::string id = it->first;
      const Parked p = it->second;
      it = self->parked_.erase(it);
      self->log_->info("{} joins the rounds: this relay's coordinator takes its rows now", id);
      self->perform(
          self->engine_->clientJoined(id, p.examples, p.heldRound, p.heldChecksum, self->nowMs(), clientRows));
    }
  });
}

void Federation::fillClientRows(LocalRounds& out) const {
  std::vector<uint32_t> all;
  for (const auto& [id, session] : sessions_) {
    if (waiting_.contains(id)) continue;  // not welcomed yet
    const auto r = rows_.find(id);
    const std::shared_ptr<const ClientRowSet> rows = r != rows_.end() ? r->second : nullptr;
    LocalRounds::Member m;
    m.id = id;
    if (rows) {
      m.rowSet.assign(rows->bytes().begin(), rows->bytes().end());
      m.rowBucket = rows->bucket();
      if (auto view = rows->view()) all.insert(all.end(), view->rows().begin(), view->rows().end());
    } else {
      out.anyDense = true;
    }
    out.members.push_back(std::move(m));
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  out.clientRows = std::move(all);
}

std::shared_ptr<const ClientRowSet> Federation::clientRows(const std::string& id, const wire::HelloMsg& h) {
  if (h.rowSet.empty()) return nullptr;
  // The rows are of the features as the client holds them: a vocabulary re-codes them,
  // and centred scaling makes every feature non-zero.
  std::string why = sparseRowsRefusal(task_, !vocabulary_.empty(), !scaling_.mean.empty() && scaling_.centre,
                                      noiseShares(engine_->config()) > 0);
  if (why.empty()) {
    if (!rowsModel_) {
      auto m = model::Model::fromSpec(task_.model);
      if (!m) {
        why = m.status().message();
      } else {
        rowsModel_ = std::make_shared<const model::Model>(std::move(*m));
      }
    }
  }
  if (why.empty()) {
    auto rows = offeredRows(h, rowsModel_);
    if (rows) return *rows;
    why = rows.status().message();
  }
  log_->info("{} offered its rows; it trains the whole model: {}", id, why);
  return nullptr;
}

void Federation::update(const std::shared_ptr<Session>& session, const wire::UpdateMsg& u) {
  const std::string& id = session->clientId();
  if (observer_) observer_->updateArrived(id, u.round, wallEpochMs_ + nowMs());
  if (u.members && net::roleFromOu(session->peer().role, net::Role::kClient) == net::Role::kRelay)
    takeMembers(id, *u.members);
  const auto d = static_cast<uint32_t>(engine_->model().size());
  // Decoded straight from the received frame: no intermediate Payload copy.
  IncomingUpdate in;
  const auto rows = rows_.find(id);
  const std::shared_ptr<const model::RowView> view =
      rows != rows_.end() && rows->second ? rows->second->view() : nullptr;
  Status st = u.delta ? decodeUpdate(*u.delta, view.get(), d, in.delta)
                      : Status(StatusCode::kMalformed, "compressed tensor is missing");
  if (!st) {
    log_->warn("rejected the update of {} for round {}: {}", id, u.round, st.message());
    perform(engine_->updateRejected(id, u.round, st.message(), nowMs()));
    return;
  }
  in.round = u.round;
  in.baseRound = u.baseRound;
  in.examples = u.examples;
  in.steps = u.steps;
  in.lossStart = u.lossStart;
  in.lossEnd = u.lossEnd;
  in.durationMs = u.durationMs;
  in.bytesWire = u.delta->byteSize();
  in.evalStats = u.evalStats;
  if (!hooks_.auditOut.empty()) {
    std::vector<float> dense(d, 0.0f);
    if (compression::expand(in.delta, dense)) auditHeld_[{id, in.round}] = std::move(dense);
  }
  perform(engine_->updateArrived(id, std::move(in), nowMs()));
}

void Federation::recordRefusal(const Session& session, const std::string& why) {
  RefusalRecord refusal;
  refusal.clientId = session.clientId();
  refusal.peer = session.peer().address;
  refusal.atMs = wallEpochMs_ + nowMs();
  refusal.reason = why;
  if (Status st = store_->recordRefusal(refusal); !st)
    log_->warn("recording the refusal of {}: {}", refusal.clientId, st.message());
  if (observer_) observer_->clientRefused(refusal);
}

int64_t Federation::statsDeadlineMs() const {
  return task_.statsDeadlineMs > 0 ? task_.statsDeadlineMs : engine_->config().deadlineMs;
}

void Federation::maybeStartStatistics() {
  if (!statsPending() || statsOpen_ || done_) return;
  if (waiting_.size() < statsWaitFor(engine_->config(), task_)) return;
  statsOpen_ = true;
  ++statsAttempts_;
  statsAsked_.clear();
  statsReceived_.clear();
  statsCategories_.clear();
  const int64_t deadline = statsDeadlineMs();
  auto request =
      share(wire::encode(wire::StatsRequestMsg{static_cast<uint32_t>(deadline), task_.categoricalVocabulary}));
  for (const auto& [id, hello] : waiting_) {  // by id: the first stats-clients of them
    if (task_.statsClients > 0 && statsAsked_.size() >= task_.statsClients) break;
    statsAsked_.insert(id);
    sendTo(id, request);
  }
  log_->info("statistics round (attempt {}): asked {} of {} waiting clients for their feature sums, deadline {} ms",
             statsAttempts_, statsAsked_.size(), waiting_.size(), deadline);
  statsTimer_.expires_after(std::chrono::milliseconds(deadline));
  statsTimer_.async_wait([self = shared_from_this()](const std::error_code& ec) {
    if (!ec && !self->done_ && self->statsOpen_) self->closeStatistics();
  });
}

void Federation::featureStats(const std::shared_ptr<Session>& session, const wire::FeatureStatsMsg& m) {
  const std::string& id = session->clientId();
  if (!statsOpen_ || !statsAsked_.contains(id) || statsReceived_.contains(id)) {
    log_->warn("ignored feature statistics from {}: not asked in an open statistics round", id);
    return;
  }
  data::FeatureSums sums = featureSumsOf(m);
  Status st = checkFeatureSums(sums, evalModel_->inputDim());
  data::CategoryCounts categories;
  if (st && task_.categoricalVocabulary) {
    auto counts = categoryCountsOf(m.categories);
    st = counts ? checkCategoryCounts(*counts, data::splitList(task_.categorical), m.examples) : counts.status();
    if (counts) categories = std::move(*counts);
  }
  if (!st) {
    // Like a bad update: refused, recorded, and the client is not asked again on this connection.
    const std::string why = "statistics round: " + st.message();
    log_->warn("rejected the feature statistics of {}: {}", id, st.message());
    recordRefusal(*session, why);
    statsAsked_.erase(id);
    waiting_.erase(id);
    sessions_.erase(id);
    session->send(share(wire::encode(wire::ErrorMsg{fb::ErrorCode::Malformed, why})));
    session->close();
  } else {
    statsReceived_[id] = std::move(sums);
    if (task_.categoricalVocabulary) statsCategories_[id] = std::move(categories);
  }
  if (statsReceived_.size() == statsAsked_.size()) closeStatistics();
}

void Federation::closeStatistics() {
  statsOpen_ = false;
  statsTimer_.cancel();
  const uint32_t need = statsMinAnswers(engine_->config());
  if (statsReceived_.size() < need) {
    log_->warn("statistics round (attempt {}): {} answers from {} clients asked, {} needed; asking again",
               statsAttempts_, statsReceived_.size(), statsAsked_.size(), need);
    statsAsked_.clear();
    statsReceived_.clear();
    statsCategories_.clear();
    maybeStartStatistics();
    return;
  }
  data::CategoryVocabulary vocabulary;
  if (task_.categoricalVocabulary) {
    // Saved before the scaling; a restart reuses the round only when both are stored.
    auto merged = mergeCategoryCounts(
        statsCategories_, VocabularyOptions{task_.vocabularyMinCount, task_.categoricalBuckets - std::size_t{1}});
    if (!merged) return finish(merged.status().withContext("statistics round"));
    std::vector<CategoricalColumnRecord> records;
    for (const auto& [column, v] : *merged) {
      records.push_back(CategoricalColumnRecord{column, v.values, v.counts});
      log_->info(
          "statistics round: column '{}' one-hot over {} values (+ the other slot); {} examples' values "
          "below vocabulary-min-count {} or past the {} most frequent stay in the other slot",
          column, v.values.size(), v.dropped, task_.vocabularyMinCount, task_.categoricalBuckets - 1);
    }
    if (Status st = store_->saveCategoricalVocabulary(records); !st) return finish(st);
    vocabulary = vocabularyValues(*merged);
  }
  data::FeatureScaling scaling;
  if (task_.standardize) {
    auto merged = mergeFeatureSums(statsReceived_);
    if (!merged) return finish(merged.status().withContext("statistics round"));
    FeatureStatisticsRecord rec;
    rec.mean = merged->scaling.mean;
    rec.std = merged->scaling.std;
    rec.centre = merged->scaling.centre;
    rec.clients = merged->clients;
    rec.examples = merged->examples;
    rec.atMs = wallEpochMs_ + nowMs();
    if (Status st = store_->saveFeatureStatistics(rec); !st) return finish(st);
    log_->info("statistics round: {} clients, {} examples, {} features{}", rec.clients.size(), rec.examples,
               rec.mean.size(),
               rec.centre ? "; features become z-scores"
                          : "; sparse data: features are divided by their std, not centred (centring would make "
                            "them dense)");
    scaling = merged->scaling;
  }
  statsAsked_.clear();
  statsReceived_.clear();
  statsCategories_.clear();
  if (Status st = adoptStatistics(vocabulary, scaling); !st) return finish(st);
}

Status Federation::adoptStatistics(const data::CategoryVocabulary& vocabulary, const data::FeatureScaling& scaling) {
  if (testSet_ && !vocabulary.empty()) {
    auto recoded = data::recodeCategories(*testSet_, vocabulary);
    if (!recoded) return recoded.status().withContext("evaluation data");
    testSet_.emplace(std::move(*recoded));
  }
  if (testSet_ && !scaling.empty()) {
    auto scaled = data::scaleFeatures(*testSet_, scaling);
    if (!scaled) return scaled.status().withContext("evaluation data");
    testSet_.emplace(std::move(*scaled));
  }
  scaling_ = scaling;
  vocabulary_ = vocabulary;
  statsDone_ = true;
  for (const auto& [id, hello] : std::exchange(waiting_, {})) {
    auto it = sessions_.find(id);
    if (it != sessions_.end()) welcomeClient(it->second, hello);
  }
  return Status::ok();
}

Frame Federation::assignFrame(const Assignment& a) {
  return share(encodeAssignment(a, static_cast<uint32_t>(std::max<int64_t>(0, a.deadlineMs - nowMs()))));
}

void Federation::sendTo(const std::string& clientId, Frame frame) {
  auto it = sessions_.find(clientId);
  if (it != sessions_.end()) it->second->send(std::move(frame));
}

void Federation::holdForUpstream() {
  engine_->holdAfter(engine_->commits());
}

void Federation::trainLocalRounds(std::vector<float> upstreamModel, uint32_t localRounds,
                                  std::optional<RoundEngine::UpstreamPace> pace,
                                  std::function<void(Result<LocalRounds>)> held) {
  asio::post(strand_, [self = shared_from_this(), model = std::move(upstreamModel), localRounds, pace,
                       held = std::move(held)]() mutable {
    if (self->done_) return held(Status(StatusCode::kClosed, "the relay's federation has ended"));
    if (self->relayHeld_) return held(Status(StatusCode::kInvalidArgument, "local rounds are already running"));
    if (self->engine_->roundOpen())
      self->perform(self->engine_->abandonOpenRound("the coordinator's next assignment came first", self->nowMs()));
    auto actions = self->engine_->adopt(model, self->engine_->commits() + 1 + localRounds, self->nowMs(), pace);
    if (!actions) return held(actions.status());
    self->relayHeld_ = std::move(held);
    self->relayRounds_.reset();
    self->log_->info("adopted the upstream model (checksum {:016x}); {} local round(s) next", checksum64(model),
                     localRounds);
    self->perform(std::move(*actions));
  });
}

void Federation::cancelLocalRounds() {
  asio::post(strand_, [self = shared_from_this()] {
    self->relayHeld_ = nullptr;
    self->engine_->holdAfter(self->engine_->commits());
  });
}

void Federation::complete() {
  asio::post(strand_, [self = shared_from_this()] {
    if (self->relayHeld_) {
      auto cb = std::move(self->relayHeld_);
      self->relayHeld_ = nullptr;
      cb(Status(StatusCode::kClosed, "training is complete"));
    }
    self->finish(Status::ok());
  });
}

void Federation::relayCheckHeld() {
  if (!relayHeld_ || done_ || !engine_->held()) return;
  auto cb = std::move(relayHeld_);
  relayHeld_ = nullptr;
  LocalRounds rounds = relayRounds_.take(engine_->model());
  fillClientRows(rounds);
  cb(std::move(rounds));
}

void Federation::perform(std::vector<Action> actions) {
  performActions(std::move(actions));
  relayCheckHeld();
}

void Federation::performActions(std::vector<Action> actions) {
  static_assert(std::variant_size_v<Action> == 5, "perform() handles every kind of action");
  for (auto& act : actions) {
    if (done_) return;
    if (auto* assign = std::get_if<coordinator::Assign>(&act)) {
      if (afterRound_ && crashPoint("assigning")) return;
      afterRound_ = false;
      verdictsSinceRound_ = 0;
      const auto session = sessions_.find(assign->clientId);
      const bool relay = session != sessions_.end() &&
                         net::roleFromOu(session->second->peer().role, net::Role::kClient) == net::Role::kRelay;
      sendTo(assign->clientId, relay ? relayAssignFrame(assign->assignment) : assignFrame(assign->assignment));
      if (observer_)
        observer_->assigned(assign->clientId, assign->assignment.round, wallEpochMs_ + nowMs(),
                            wallEpochMs_ + assign->assignment.deadlineMs);
    } else if (auto* verdict = std::get_if<coordinator::Verdict>(&act)) {
      const UpdateVerdict& v = verdict->verdict;
      sendTo(verdict->clientId, share(wire::encode(wire::RoundResultMsg{v.round, v.accepted, v.reason})));
      if (observer_) observer_->verdict(verdict->clientId, v.round, v.accepted, v.reason);
      ++verdictsSinceRound_;
      if (!hooks_.crashAt.empty() && crashPoint(fmt::format("verdict-{}", verdictsSinceRound_))) return;
    } else if (auto* wake = std::get_if<coordinator::WakeAt>(&act)) {
      wakeAt(wake->atMs);
    } else if (auto* ended = std::get_if<coordinator::RoundEnded>(&act)) {
      RoundSummary& s = ended->summary;
      if (s.committed && crashPoint("aggregated")) return;
      // The round and its checkpoint go to disk before the verdicts on its updates and
      // the next round's assignments (which follow this action) go out; the
      // evaluation runs meanwhile.
      if (!hooks_.auditOut.empty()) auditRound(s);
      if (!persist(s)) return;
      refreshPlacement();
      refreshShardMap(s.round);
      if (s.committed) maybeRecomputePlacement(s.round);
      if (relayHeld_) relayRounds_.count(s);
      if (s.committed) {
        if (crashPoint("persisted")) return;
        afterRound_ = true;
        verdictsSinceRound_ = 0;
      }
      if (s.committed && testSet_ && task_.evalEvery > 0 && engine_->commits() % task_.evalEvery == 0)
        startEvaluation(std::move(s));
      else {
        finishEvaluation();  // rounds are reported in order
        report(s, std::nullopt);
      }
    } else if (std::holds_alternative<coordinator::Finished>(act)) {
      finish(Status::ok());
      return;
    }
  }
}

bool Federation::persist(const RoundSummary& s) {
  RoundRecord r;
  r.round = s.round;
  r.status = s.committed ? RoundStatus::kCommitted : RoundStatus::kAbandoned;
  r.reason = s.reason;
  r.tau = s.tau;
  r.lr = s.lr;
  r.density = s.uplinkDensity;
  r.densityDown = s.downlinkDensity;
  r.selected = s.selected;
  r.returned = s.returned;
  r.accepted = s.accepted;
  r.stragglers = s.stragglers;
  r.bytesUpRaw = static_cast<int64_t>(s.bytesUpRaw);
  r.bytesUpWire = static_cast<int64_t>(s.bytesUpWire);
  r.bytesDownRaw = static_cast<int64_t>(s.bytesDownRaw);
  r.bytesDownWire = static_cast<int64_t>(s.bytesDownWire);
  r.trainLossStart = s.trainLossStart;
  r.startedMs = wallEpochMs_ + s.startedMs;
  r.endedMs = wallEpochMs_ + s.endedMs;
  r.modelChecksum = s.committed ? s.modelChecksum : 0;
  r.epsilon = s.epsilon;
  std::vector<ParticipantRecord> participants;
  for (const auto& p : s.participants)
    participants.push_back(toRecord(p, wallEpochMs_));
  Status st;
  if (s.committed) {
    EngineSnapshot snap = engine_->snapshot();
    Checkpoint cp{snap.round,
                  std::move(snap.model),
                  std::move(snap.serverMemory),
                  std::move(snap.state),
                  std::move(snap.vectors),
                  std::move(snap.catchUp),
                  engine_->modelChecksum()};
    for (const auto& [id, sum] : auditApplied_)
      cp.vectors[std::string(kAuditPrefix) + id].assign(sum.begin(), sum.end());
    st = store_->commitRound(r, participants, cp);
  } else {
    st = store_->recordAbandonedRound(r, participants);
  }
  if (!st) {
    // The engine moved on but the round is not on disk: stop rather than diverge.
    log_->error("cannot record round {}: {}", s.round, st.message());
    finish(st.withContext(fmt::format("recording round {}", s.round)));
    return false;
  }
  if (observer_) observer_->roundRecorded(r, participants);
  return true;
}

void Federation::report(const RoundSummary& s, const std::optional<model::Evaluation>& evaluation) {
  if (s.committed) {
    if (evaluation) {
      const EvaluationRecord record = evaluationRecord(evaluation->metrics);
      if (Status st = store_->recordEvaluation(s.round, record); !st)
        log_->error("{}", st.message());  // the round itself is on disk
      else if (observer_)
        observer_->evaluated(s.round, record);
    }
    if (!s.evalStats.empty()) reportFederatedEvaluation(s);
    log_->info(
        "round {:>3} committed: {}loss {:.4f} | up {} down {} | tau {} | density {:.4g}/{:.4g} | "
        "server step {:.3g} | {}/{} returned, {} stragglers{}",
        s.round, evaluation ? evaluationText(evaluation->metrics) + " " : "", s.trainLossStart,
        megabytes(s.bytesUpWire), megabytes(s.bytesDownWire), s.tau, s.uplinkDensity, s.downlinkDensity, s.serverStep,
        s.returned, s.selected, s.stragglers, s.epsilon ? fmt::format(" | epsilon {:.4g}", *s.epsilon) : std::string());
    if (s.shardLoads.size() > 1) {
      uint64_t most = 0, total = 0;
      for (uint64_t load : s.shardLoads) {
        most = std::max(most, load);
        total += load;
      }
      const double mean = double(total) / double(s.shardLoads.size());
      log_->debug("round {:>3} shard loads (entries added) {} | max/mean {:.3f}", s.round, s.shardLoads,
                  mean > 0 ? double(most) / mean : 1.0);
    }
  } else {
    log_->warn("round {:>3} abandoned: {}", s.round, s.reason);
  }
  if (roundCallback_) roundCallback_({s, evaluation});
}

void Federation::reportFederatedEvaluation(const RoundSummary& s) {
  auto merged = model::mergeVectors(s.evalStats);
  if (!merged) {
    log_->warn("round {}: the clients' evaluation statistics do not add up: {}", s.round, merged.status().message());
    return;
  }
  const model::Metrics m = model::finalize(*merged);
  log_->info("federated evaluation of round {}'s model: {} on {} held-out examples of {} clients", s.evalBaseRound,
             evaluationText(m), m.examples, s.evalStats.size());
  // The coordinator's own test set, when it has one, is what the round's metrics are;
  // without one, they are the clients'.
  if (testSet_ || s.evalBaseRound == 0 || m.examples == 0) return;
  const EvaluationRecord record = evaluationRecord(m);
  if (Status st = store_->recordEvaluation(s.evalBaseRound, record); !st)
    log_->error("{}", st.message());
  else if (observer_)
    observer_->evaluated(s.evalBaseRound, record);
}

void Federation::startEvaluation(RoundSummary summary) {
  finishEvaluation();  // one at a time: the worker owns evalModel_ until it is done
  std::vector<float> params(engine_->servedModel().begin(), engine_->servedModel().end());
  const uint64_t round = summary.round;
  evaluating_.emplace(std::move(summary));
  std::weak_ptr<Federation> weak = weak_from_this();
  // The worker touches only evalModel_, testSet_ and its own copy of the model; the
  // strand takes the result when it posts back (or earlier, waiting, when it must).
  evaluation_ =
      std::async(std::launch::async, [this, weak, round, params = std::move(params)]() -> Result<model::Evaluation> {
        Status st = evalModel_->setParams(params);
        Result<model::Evaluation> e = st ? evalModel_->evaluate(*testSet_) : Result<model::Evaluation>(st);
        asio::post(strand_, [weak, round] {
          auto self = weak.lock();
          // Only if the strand has not taken this result already (a later round's
          // evaluation may be in flight by now: waiting for it here would stall the strand).
          if (self && self->evaluating_ && self->evaluating_->round == round) self->finishEvaluation();
        });
        return e;
      });
}

void Federation::finishEvaluation() {
  if (!evaluation_.valid()) return;
  Result<model::Evaluation> e = evaluation_.get();
  RoundSummary s = std::move(*evaluating_);
  evaluating_.reset();
  if (!e) log_->error("evaluating the model of round {}: {}", s.round, e.status().message());
  report(s, e ? std::optional<model::Evaluation>(*e) : std::nullopt);
}

void Federation::wakeAt(int64_t atMs) {
  timer_.expires_at(epoch_ + std::chrono::milliseconds(atMs));
  timer_.async_wait([self = shared_from_this()](const std::error_code& ec) {
    if (ec || self->done_) return;
    self->perform(self->engine_->tick(self->nowMs()));
  });
}

void Federation::finish(const Status& status) {
  if (done_) return;
  finishEvaluation();  // the last round's accuracy is recorded before the end
  done_ = true;
  timer_.cancel();
  if (status.isOk()) {
    if (!task_.modelOut.empty()) {
      (void)evalModel_->setParams(engine_->servedModel());
      if (Status st = evalModel_->save(task_.modelOut); !st)
        log_->error("saving the final model: {}", st.message());
      else
        log_->info("final model (round {}{}, checksum {:016x}) saved to {}", engine_->committedRound(),
                   engine_->config().modelEma > 0 ? ", moving average" : "", checksum64(engine_->servedModel()),
                   task_.modelOut);
    }
    if (!hooks_.auditOut.empty())
      if (Status st = writeAudit(); !st) log_->error("writing the audit: {}", st.message());
    auto bye = share(wire::encode(wire::ByeMsg{"training complete", true, {}}));
    for (auto& [id, session] : sessions_) {
      session->send(bye);
      session->close();
    }
    if (engine_->budgetSpent())
      log_->info(
          "training complete: {} rounds committed; the privacy budget is spent (epsilon {:.4g}, another "
          "round would pass privacy.target-epsilon {:g})",
          engine_->commits(), engine_->epsilon().value_or(0), engine_->config().targetEpsilon);
    else
      log_->info("training complete: {} rounds committed", engine_->commits());
  }
  if (observer_) observer_->finished(status.isOk() ? "training complete" : status.message());
  if (finished_) finished_(status);
}

void Federation::shutdown(const std::string& reason) {
  asio::post(strand_, [self = shared_from_this(), reason] {
    if (self->done_) return;
    self->finishEvaluation();
    self->log_->info("shutting down: {}", reason);
    // A round in flight is abandoned and recorded; its participants roll back.
    self->perform(self->engine_->shutdown("coordinator stopping (" + reason + ")", self->nowMs()));
    self->done_ = true;
    self->timer_.cancel();
    auto bye = share(wire::encode(wire::ByeMsg{"coordinator stopping: " + reason, false, {}}));
    for (auto& [id, session] : self->sessions_) {
      session->send(bye);
      session->close();
    }
    if (self->observer_) self->observer_->finished("stopped: " + reason);
    if (self->finished_) self->finished_(Status(StatusCode::kClosed, reason));
  });
}

Status Federation::setTestHooks(FederationTestHooks hooks) {
  if (!hooks.crashAt.empty()) {
    // POINT or POINT@N: a named point, verdict-K with K >= 1, N >= 1.
    const auto positive = [](std::string_view digits) {
      return !digits.empty() && digits.front() != '0' && digits.size() <= 9 &&
             digits.find_first_not_of("0123456789") == std::string_view::npos;
    };
    const std::string_view spec = hooks.crashAt;
    const auto at = spec.find('@');
    const std::string_view name = spec.substr(0, at);
    const bool named = name == "aggregated" || name == "mid-persist" || name == "persisted" || name == "assigning" ||
                       (name.starts_with("verdict-") && positive(name.substr(8)));
    if (!named || (at != std::string_view::npos && !positive(spec.substr(at + 1))))
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("--test-crash-at '{}': not a crash point", hooks.crashAt));
  }
  hooks_ = std::move(hooks);
  if (hooks_.crashAt.starts_with("mid-persist")) {
    // Inside the round's transaction: exit at once, as a crash there would.
    store_->setTestHook([this](std::string_view point) {
      if (point == "commit-round:mid" && crashPoint("mid-persist")) std::_Exit(kTestCrashExitCode);
    });
  }
  return Status::ok();
}

bool Federation::crashPoint(const std::string& point) {
  if (hooks_.crashAt.empty()) return false;
  const auto at = hooks_.crashAt.find('@');
  const std::string name = hooks_.crashAt.substr(0, at);
  const uint32_t nth = at == std::string::npos ? 1 : static_cast<uint32_t>(std::stoul(hooks_.crashAt.substr(at + 1)));
  if (name != point || ++crashCounts_[point] != nth) return false;
  log_->warn("test crash at '{}'", hooks_.crashAt);
  log_->flush();
  // Freeze (no further action, message or timer is acted on) and let the frames already
  // queued leave, as a process killed a moment later would have sent them.
  done_ = true;
  timer_.cancel();
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::_Exit(kTestCrashExitCode);
  }).detach();
  return true;
}

void Federation::auditRound(const RoundSummary& s) {
  for (const auto& p : s.participants) {
    auto held = auditHeld_.find({p.clientId, p.round});
    // A straggler's update may still arrive.
    if (held == auditHeld_.end() || p.outcome == ParticipantOutcome::kStraggler) continue;
    const bool applied = p.outcome == ParticipantOutcome::kAccepted || p.outcome == ParticipantOutcome::kLateApplied;
    if (s.committed && applied) {
      auto& sum = auditApplied_[p.clientId];
      sum.resize(held->second.size(), 0.0);
      for (std::size_t i = 0; i < sum.size(); ++i)
        sum[i] += held->second[i];
    }
    auditHeld_.erase(held);
  }
}

Status Federation::writeAudit() const {
  std::FILE* f = std::fopen(hooks_.auditOut.c_str(), "w");
  if (f == nullptr) return Status(StatusCode::kIo, fmt::format("cannot write '{}'", hooks_.auditOut));
  for (const auto& [id, sum] : auditApplied_) {
    fmt::print(f, "{}", id);
    for (double v : sum)
      fmt::print(f, " {:.9g}", v);
    fmt::print(f, "\n");
  }
  return std::fclose(f) == 0 ? Status::ok() : Status(StatusCode::kIo, fmt::format("writing '{}'", hooks_.auditOut));
}

}  // namespace starling::coordinator
