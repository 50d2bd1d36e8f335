// starling-sim's configuration: the daemon's settings, [sim], and [[strategy]] tables.
#include "sim_config.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>

#include "starling/coordinator/config_file.hpp"

namespace starling::sim {

void bindSimSettings(coordinator::ConfigBinder& b, SimSettings& s) {
  b.bind("sim.clients", s.clients, "virtual clients in the fleet");
  b.bind("sim.partition", s.partition,
         "how the training set is split: iid, dirichlet:ALPHA, classes:K, by-column:NAME (a CSV column: whole groups "
         "per client) or files:DIR (client i takes the i-th data file of DIR by name; sim.data unused)");
  b.bind("sim.data", s.data,
         "training data: a CSV, LIBSVM, NumPy (.npy/.npz) file or an IDX directory (empty = Debian's Fashion-MNIST); "
         "format and label as eval.data-format and eval.label; test data from eval.test-data (empty = the IDX "
         "directory's test split, or a seeded fifth of the data file held out)");
  b.bind("sim.train-examples", s.trainExamples, "use a seeded sample of this many training examples (0 = all)");
  b.bind("sim.test-examples", s.testExamples, "evaluate on a seeded sample of this many test examples (0 = all)");
  b.bind("sim.fleet-seed", s.seed, "seed of the partition, device speeds and dropouts");
  b.bind("sim.device-gflops", s.deviceGflops, "speed of the fastest device, GFLOP/s");
  b.bind("sim.speed-distribution", s.speedDistribution, "device speeds: loguniform or lognormal");
  b.bind("sim.speed-spread", s.speedSpread, "loguniform: fastest / slowest device");
  b.bind("sim.speed-sigma", s.speedSigma, "lognormal: sigma of the log of the speed");
  b.bind("sim.speed-trace", s.speedTrace, "file of relative speeds, one per line (overrides the distribution)");
  b.bind("sim.flops-per-example", s.flopsPerExample, "forward FLOPs per example (0 = 2 x the model's weights)");
  b.bind("sim.uplink-mbps", s.uplinkMbps, "client -> coordinator bandwidth, Mbit/s");
  b.bind("sim.downlink-mbps", s.downlinkMbps, "coordinator -> client bandwidth, Mbit/s");
  b.bind("sim.latency-ms", s.latencyMs, "one-way latency of every message, ms");
  b.bind("sim.link-spread", s.linkSpread,
         "per-client links: bandwidths / f and latency x f, f log-uniform in [1, this] (1 = all alike)");
  b.bind("sim.link-trace", s.linkTrace,
         "file of links, 'UP_MBPS DOWN_MBPS LATENCY_MS' per line, client i takes line i mod n (overrides the above)");
  b.bind("sim.coordinator-mbps", s.tiers.coordinatorMbps,
         "the coordinator's own link capacity each way, shared by every transfer to and from it (0 = unlimited)");
  b.bind("sim.relays", s.tiers.relays,
         "relays between the coordinator and the clients (placed by sim.relay-placement; 0 = flat)");
  b.bind("sim.relay-clients-per-round", s.tiers.clientsPerRound, "a relay's updates per local round (K)");
  b.bind("sim.relay-over-selection", s.tiers.overSelection, "a relay assigns each local round to ceil(K x this)");
  b.bind("sim.relay-min-clients", s.tiers.minClients, "idle clients before a relay's local round starts (0 = K)");
  b.bind("sim.relay-deadline-ms", s.tiers.deadlineMs, "a relay's local round deadline (0 = the coordinator's)");
  b.bind("sim.relay-local-rounds", s.tiers.localRounds, "a relay's local rounds per assignment from the coordinator");
  b.bind("sim.relay-uplink-mbps", s.tiers.uplinkMbps, "relay -> coordinator bandwidth, Mbit/s");
  b.bind("sim.relay-downlink-mbps", s.tiers.downlinkMbps, "coordinator -> relay bandwidth, Mbit/s");
  b.bind("sim.relay-latency-ms", s.tiers.latencyMs, "relay <-> coordinator one-way latency, ms");
  b.bind("sim.relay-link-mbps", s.tiers.linkMbps,
         "each relay's own link capacity each way, shared by its clients' transfers and its own (0 = unlimited)");
  b.bind("sim.relay-client-latency-ms", s.tiers.clientLatencyMs,
         "one-way latency between a relay and its clients (0 = the clients' own)");
  b.bind("sim.relay-sparse-rows", s.tiers.sparseRows,
         "relays train upstream only the union of their clients' rows (starling-relay --sparse-rows; needs "
         "sim.row-bucket)");
  b.bind("sim.relay-placement", s.tiers.placement,
         "clients on relays: mod (client i under relay i mod R), or metis or random over the clients' row sets "
         "(starling-coordinator placement; needs sim.row-bucket)");
  b.bind("sim.attack", s.attack,
         "hostile clients' attack: none, sign-flip[:F] (-F x the update, 4), scale[:F] (F x, 10), noise[:F] "
         "(Gaussian of F x its norm, 10) or label-flip (train on labels classes - 1 - y)");
  b.bind("sim.attackers", s.attackers, "fraction of the clients that attack (0 = none)");
  b.bind("sim.attack-varying", s.attackVarying,
         "draw the attackers anew for every round a client trains (false: the same clients the whole run)");
  b.bind("sim.dropout", s.dropout, "probability that a selected client drops out of its round");
  b.bind("sim.rejoin-ms", s.rejoinMs, "a dropped client rejoins after this (0 = the round deadline)");
  b.bind("sim.availability-trace", s.availabilityTrace,
         "file of windows when devices are online, 'DEVICE START_S END_S' per line; client i follows device i "
         "mod (devices); outside its windows a client is offline (empty = always online)");
  b.bind("sim.availability-period-s", s.availabilityPeriodS,
         "the availability trace repeats every this many "
         "seconds (0 = once: after its last window a device stays offline)");
  b.bind("sim.export-dir", s.exportDir,
         "write each strategy's initial model, shards, batch order and per-round results here, for "
         "bench/reference.py (full participation only; empty = off)");
  b.bind("sim.row-bucket", s.rowBucket,
         "clients offer the first-layer rows their data touches in buckets of this many rows and train only those "
         "rows' parameters where the strategy takes them (train.sparse-rows; 0 = off)");
  b.bind("sim.ef-clients", s.efClients, "most clients that keep uplink error-feedback memory and overlap state (LRU)");
  b.bind("sim.learner-clients", s.learnerClients,
         "most clients that keep a Learner (sampler state, updates awaiting verdicts, the memories above; LRU, never "
         "one with an update unsettled): an evicted client restarts as a device would");
  b.bind("sim.client-examples", s.clientExamples,
         "examples each client draws with replacement by sim.partition (iid, dirichlet, classes); 0 = the partition "
         "splits the training set, or draws 32 per client when the clients outnumber the examples");
  b.bind("sim.eval-fraction", s.evalFraction,
         "federated evaluation: each client holds this fraction of its examples out of training and evaluates "
         "the model on them when eval.federated-every asks (0 = none)");
  b.bind("sim.target-accuracy", s.targetAccuracy, "test accuracy for 'bytes and time to target'");
  b.bind("sim.max-virtual-hours", s.maxVirtualHours, "stop a strategy after this much virtual time");
  b.bind("sim.stop-at-target", s.stopAtTarget, "end each strategy once it reaches the target accuracy");
  b.bind("sim.preloaded-model", s.preloadedModel,
         "clients join saying they hold the round-0 model (its checksum); without it they say they hold "
         "nothing, as starling-client does, which the engine treats alike under clients-initialize");
}

Strategy strategyOf(std::string name, const coordinator::DaemonConfig& config) {
  return Strategy{std::move(name), config.engine, config.task, std::nullopt};
}

Status loadConfig(const std::string& path, coordinator::ConfigBinder& binder, const coordinator::DaemonConfig& base,
                  std::vector<Strategy>& strategies) {
  toml::table file;
  STARLING_RETURN_IF_ERROR(coordinator::parseConfigFile(path, file));
  STARLING_RETURN_IF_ERROR(binder.applyTable(&file, path, {"strategy"}));
  strategies.clear();
  const toml::node* list = file.get("strategy");
  if (list == nullptr) {
    strategies.push_back(strategyOf("default", base));
    return validateTask(strategies.back().engine, strategies.back().task).withContext(path);
  }
  if (!list->is_array_of_tables())
    return Status(StatusCode::kInvalidArgument, path + ": 'strategy' must be an array of tables ([[strategy]])");
  for (const auto& node : *list->as_array()) {
    const toml::table& t = *node.as_table();
    const auto name = t["name"].value<std::string>();
    const std::string where = fmt::format("{}, strategy {}", path, strategies.size() + 1);
    if (!name || name->empty()) return Status(StatusCode::kInvalidArgument, where + ": needs a name");
    for (const auto& other : strategies)
      if (other.name == *name)
        return Status(StatusCode::kInvalidArgument, fmt::format("{}: two strategies are named '{}'", path, *name));
    coordinator::DaemonConfig config = base;
    // A binder of its own, on a command line nobody parses: every key of the table applies.
    CLI::App scratch;
    coordinator::ConfigBinder own(scratch, config);
    const std::string origin = where + " '" + *name + "'";
    STARLING_RETURN_IF_ERROR(own.applyTable(&t, origin, {"name"}));
    strategies.push_back(strategyOf(*name, config));
    STARLING_RETURN_IF_ERROR(validateTask(config.engine, config.task).withContext(origin));
  }
  return Status::ok();
}

Status chooseStrategies(std::vector<Strategy>& strategies, const std::vector<std::string>& only) {
  if (only.empty()) return Status::ok();
  std::vector<Strategy> chosen;
  for (const auto& name : only) {
    auto it = std::find_if(strategies.begin(), strategies.end(), [&](const auto& s) { return s.name == name; });
    if (it == strategies.end()) return {StatusCode::kInvalidArgument, "no strategy named '" + name + "'"};
    chosen.push_back(*it);
  }
  strategies = std::move(chosen);
  return Status::ok();
}

Status checkSameData(const std::vector<Strategy>& strategies) {
  for (const auto& s : strategies) {
    const auto& first = strategies.front();
    if (s.task.model != first.task.model)
      return {StatusCode::kInvalidArgument,
              "strategies '" + first.name + "' and '" + s.name + "' train different models"};
    if (s.task.kind != first.task.kind || s.task.dataFormat != first.task.dataFormat ||
        s.task.label != first.task.label || s.task.testData != first.task.testData)
      return {StatusCode::kInvalidArgument,
              "strategies '" + first.name + "' and '" + s.name + "' read the data differently (task, format, label)"};
  }
  return Status::ok();
}

}  // namespace starling::sim
