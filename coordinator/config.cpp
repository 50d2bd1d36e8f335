#include "starling/coordinator/config.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "starling/coordinator/config_file.hpp"

namespace starling::coordinator {

template <typename T>
void ConfigBinder::bind(const std::string& key, T& field, const std::string& help) {
  const std::string flag = "--" + key.substr(key.find('.') + 1);
  CLI::Option* opt = app_.add_option(flag, field, help + " [" + key + "]");
  auto fromToml = [&field, key](const void* raw) -> Status {
    const auto* node = static_cast<const toml::node*>(raw);
    auto wrong = [&](const char* expected) {
      return Status(StatusCode::kInvalidArgument, fmt::format("'{}' must be {}", key, expected));
    };
    if constexpr (std::is_same_v<T, bool>) {
      if (!node->is_boolean()) return wrong("true or false");
      field = node->as_boolean()->get();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!node->is_string()) return wrong("a string");
      field = node->as_string()->get();
    } else if constexpr (std::is_floating_point_v<T>) {
      double v = 0;
      if (node->is_integer())
        v = static_cast<double>(node->as_integer()->get());
      else if (node->is_floating_point())
        v = node->as_floating_point()->get();
      else
        return wrong("a number");
      // Converting a double beyond T's range is undefined; NaN and inf are never meant.
      if (!std::isfinite(v) || std::fabs(v) > static_cast<double>(std::numeric_limits<T>::max()))
        return wrong("a finite number");
      field = static_cast<T>(v);
    } else {
      if (!node->is_integer()) return wrong("an integer");
      const int64_t v = node->as_integer()->get();
      if (v < 0 && std::is_unsigned_v<T>) return wrong("0 or more");
      // A value beyond the field's type would wrap silently (4294967297 -> 1).
      if (!std::in_range<T>(v)) return wrong(fmt::format("at most {}", std::numeric_limits<T>::max()).c_str());
      field = static_cast<T>(v);
    }
    return Status::ok();
  };
  bindings_.push_back({key, opt, fromToml});
}

template void ConfigBinder::bind(const std::string&, bool&, const std::string&);
template void ConfigBinder::bind(const std::string&, int&, const std::string&);
template void ConfigBinder::bind(const std::string&, int64_t&, const std::string&);
template void ConfigBinder::bind(const std::string&, uint32_t&, const std::string&);
template void ConfigBinder::bind(const std::string&, uint64_t&, const std::string&);
template void ConfigBinder::bind(const std::string&, float&, const std::string&);
template void ConfigBinder::bind(const std::string&, double&, const std::string&);
template void ConfigBinder::bind(const std::string&, std::string&, const std::string&);

ConfigBinder::ConfigBinder(CLI::App& app, DaemonConfig& c) : app_(app) {
  EngineConfig& e = c.engine;
  TaskConfig& t = c.task;
  bind("task.name", t.name, "task name (a database holds one task)");
  bind("task.model", t.model, "model every client builds: mlp:784-200-200-10, cnn:...");
  bind("task.init-seed", t.initSeed, "seed of the initial model");
  bind("task.task", t.kind, "what the model learns: classification, binary or regression");
  bind("task.huber-delta", t.huberDelta, "regression: Huber loss with this delta (0 = squared error)");
  bind("task.rounds", e.rounds, "committed rounds to train");
  bind("task.clients-per-round", e.clientsPerRound, "updates that close a round (K)");
  bind("task.over-selection", e.overSelection, "assign to ceil(K x this) clients");
  bind("task.sticky-clients", e.stickyClients,
       "sticky client sampling (GlueFL): size of the group of recently selected clients (0 = off: uniform)");
  bind("task.sticky-fraction", e.stickyFraction,
       "sticky sampling: fraction of the selected drawn from the sticky group, the rest from the other clients");
  bind("task.sticky-reweight", e.stickyReweight,
       "sticky sampling: weigh each update by its selection weight, unbiased for uniform sampling in every round "
       "(false: by its examples alone)");
  bind("task.min-clients", e.minClients, "idle clients needed to start a round (0 = K)");
  bind("task.min-goal", e.minGoal, "fewer updates at the deadline abandon the round (0 = ceil(K/2))");
  bind("task.deadline-ms", e.deadlineMs, "time from assignment to a round's deadline");
  bind("task.max-staleness", e.maxStaleness, "late updates up to this many rounds old are applied");
  bind("task.mode", e.mode,
       "sync (rounds), async (FedBuff: concurrency clients train at once, a server step every buffer-size "
       "updates), ssp or dssp (every client a worker within a staleness bound)");
  bind("task.concurrency", e.concurrency, "async: clients training at once (0 = ceil(K x over-selection))");
  bind("task.buffer-size", e.bufferSize, "async, ssp, dssp: updates per server step (0 = clients-per-round)");
  bind("task.staleness-weight", e.stalenessWeight,
       "async: weight of an update s versions behind: poly:A = 1/(1+s)^A (poly:0.5, FedBuff), hinge:A:B, constant");
  bind("task.staleness-bound", e.stalenessBound,
       "ssp: a client runs at most this many updates ahead of the slowest; dssp: the lowest bound");
  bind("task.staleness-max", e.stalenessMax, "dssp: the highest bound (0 = staleness-bound + 4)");
  bind("task.max-norm-ratio", e.maxNormRatio, "reject updates with a norm over this x the round's median (0 = off)");
  bind("task.sampling", e.sampling,
       "who trains: fixed (ceil(K x over-selection) of the idle clients) or poisson (each idle client independently "
       "with task.sampling-rate; the round waits for all it drew)");
  bind("task.sampling-rate", e.samplingRate, "poisson sampling: the probability q each idle client is drawn with");
  bind("task.aggregation", e.aggregation,
       "how a round's updates combine: mean (weighted, streamed), median (coordinate-wise), trimmed-mean or "
       "multi-krum (these three hold the round's updates dense and ignore weights)");
  bind("task.trim-fraction", e.trimFraction, "trimmed-mean: the fraction cut at each end per coordinate");
  bind("task.krum-faulty", e.krumFaulty, "multi-krum: f, the updates assumed bad (0 = (n - 3) / 2)");
  bind("task.krum-select", e.krumSelect, "multi-krum: m, the updates of lowest score averaged (0 = n - f)");
  bind("task.server-clip-norm", e.serverClipNorm,
       "scale every update to at most this L2 norm before combining it (server-side clipping; 0 = off)");
  bind("privacy.update-clip-norm", e.clipNorm,
       "differential privacy (DP-FedAvg): clients clip the update they send to this L2 norm, after compression and "
       "error feedback (0 = privacy off)");
  bind("privacy.noise-multiplier", e.noiseMultiplier,
       "differential privacy: the round's sum gets Gaussian noise of std this x clip-norm (0 = clipping only)");
  bind("privacy.noise", e.noisePlacement,
       "differential privacy: who adds the noise: central (the coordinator, on the sum) or distributed (each client "
       "adds its share, std / sqrt(noise-shares), to its clipped update; needs fixed sampling and a dense uplink)");
  bind("privacy.noise-shares", e.noiseShares,
       "distributed noise: the shares the noise is split into (0 = task.clients-per-round); the coordinator adds "
       "those of the clients a round lacks");
  bind("privacy.delta", e.privacyDelta, "differential privacy: epsilon is reported for this delta");
  bind("privacy.target-epsilon", e.targetEpsilon,
       "differential privacy: training stops before a round would take epsilon over this (0 = no budget)");
  bind("task.catch-up-rounds", e.catchUpRounds, "broadcasts kept for clients that missed rounds");
  bind("task.catch-up-by-value", e.catchUpByValue,
       "a client that missed rounds may get the current values of the coordinates changed since (when smaller)");
  bind("task.catch-up-xor-rounds", e.catchUpXorRounds,
       "catch-up values as XORs with the client's, coded by leading zeros, for clients up to this many commits "
       "behind (0 = off: fp32 values)");
  bind("task.clients-initialize", e.clientsInitialize,
       "a client holding nothing builds the round-0 model from the spec and seed, then catches up");
  bind("task.seed", e.seed, "seed of selection and seeded compressors");
  bind("task.standardize", t.standardize,
       "scale features by the mean and std of a statistics round before round 1 (z-scores; sparse data: x / std)");
  bind("task.categorical-vocabulary", t.categoricalVocabulary,
       "one-hot the categorical columns (eval.categorical) over a vocabulary the statistics round agrees instead of "
       "hashed buckets: the categorical-buckets - 1 most frequent values, the rest in the last slot");
  bind("task.vocabulary-min-count", t.vocabularyMinCount,
       "a value on fewer examples (over every client) stays out of the vocabulary: it never leaves the coordinator");
  bind("task.stats-clients", t.statsClients, "clients asked in the statistics round (0 = every waiting one)");
  bind("task.stats-min-clients", t.statsMinClients,
       "clients waiting before the statistics round starts (0 = min-clients, or clients-per-round)");
  bind("task.stats-deadline-ms", t.statsDeadlineMs, "the statistics round's deadline (0 = task.deadline-ms)");
  bind("train.lr", e.lr, "learning rate");
  bind("train.lr-decay", e.lrDecay, "lr x this per committed round");
  bind("train.model-ema", e.modelEma,
       "evaluate and save a moving average of the committed models, xbar <- this xbar + (1 - this) x (0 = off)");
  bind("train.server-lr", e.serverLr, "server learning rate on the aggregate (1 = FedAvg)");
  bind("train.extrapolate", e.extrapolate, "FedExP: extrapolate the server step when the updates disagree");
  bind("train.server-momentum", e.serverMomentum, "server momentum on the aggregate, in [0, 1) (FedAvgM)");
  bind("train.momentum-masking", e.momentumMasking, "zero server momentum where the broadcast sent a coordinate");
  bind("train.server-optimizer", e.serverOptimizer,
       "server optimizer on the aggregate: sgd (server-lr, server-momentum), adam or yogi (FedAdam, FedYogi)");
  bind("train.server-beta1", e.serverBeta1, "adam / yogi: first-moment decay");
  bind("train.server-beta2", e.serverBeta2, "adam / yogi: second-moment decay");
  bind("train.server-eps", e.serverEps, "adam / yogi: adaptivity eps (tau in Reddi et al.)");
  bind("train.sender-mean", e.senderMean,
       "average each coordinate over the updates that sent it, not over all of them (sparse uplinks)");
  bind("train.tau", e.tau, "local steps per round (initial, with ADACOMM)");
  bind("train.adaptive-tau", e.adaptiveTau, "ADACOMM: adapt tau to the loss");
  bind("train.tau-min", e.tauMin, "ADACOMM and step budgets: fewest local steps");
  bind("train.tau-max", e.tauMax, "ADACOMM: most local steps");
  bind("train.step-budgets", e.stepBudgets, "give slow clients fewer steps so they meet the deadline");
  bind("train.dynamic-batch", e.dynamicBatch,
       "DBS: scale each measured client's minibatch by its speed / the mean speed (within [1/32, 8]) so a round's "
       "clients do the same steps in about the same time");
  bind("train.budget-quantile", e.budgetQuantile,
       "also cap each client's steps at the time the selected client at this speed quantile needs for tau (0 = off)");
  bind("train.budget-tau-factor", e.budgetTauFactor,
       "with budget-quantile: faster clients use that time for more steps, up to this x tau (1 = off)");
  bind("train.batch-size", t.batchSize, "minibatch size");
  bind("train.momentum", t.momentum, "momentum of local SGD");
  bind("train.weight-decay", t.weightDecay, "weight decay of local SGD");
  bind("train.clip-norm", t.clipNorm, "clip each minibatch gradient to this L2 norm (0 = off)");
  bind("train.prox-mu", t.proxMu, "FedProx: clients add mu/2 ||x - xhat||^2 to their local objective (0 = off)");
  bind("train.priority-sampling", t.prioritySampling, "clients sample minibatches by priority");
  bind("train.overlap", t.overlap,
       "Overlap Local-SGD: clients train while their update and the next assignment travel, and pull their model "
       "back towards the global one by this alpha in [0, 1] at each round (0 = off; 0.2 is the usual)");
  bind("train.overlap-momentum", t.overlapMomentum, "Overlap Local-SGD: anchor momentum beta in [0, 1)");
  bind("train.sparse-rows", t.sparseRows,
       "clients that offer the first-layer rows their data touches train, receive and send only those rows' "
       "parameters and the dense rest (false: every client the whole model)");
  bind("compression.uplink", e.uplink, "client -> coordinator: identity, fp16, topk, topk-sampled, randk, sign, qsgd");
  bind("compression.uplink-density", e.uplinkDensity, "fraction kept by top-k / rand-k uplink");
  bind("compression.downlink", e.downlink, "coordinator -> clients compressor");
  bind("compression.downlink-density", e.downlinkDensity, "fraction kept by top-k / rand-k downlink");
  bind("compression.downlink-shared", e.downlinkShared,
       "GlueFL shared mask: fraction of a top-k broadcast's coordinates kept from the previous one's (0 = off)");
  bind("compression.downlink-relative-indices", e.downlinkRelativeIndices,
       "log replays code each top-k broadcast's indices against the previous broadcast's, when smaller");
  bind("compression.warmup-rounds", e.warmupRounds, "DGC warm-up: rounds of falling density");
  bind("compression.fp16-values", e.fp16Values, "top-k / rand-k values as fp16");
  bind("compression.qsgd-levels", e.qsgdLevels,
       "QSGD's levels s in [1, 255] (scaled by 1 / (1 + omega) under error feedback)");
  bind("compression.uplink-ternary", e.uplinkTernary,
       "top-k uplink values as sign bits + one scale per 256 values (sparse ternary)");
  bind("compression.model-mantissa-bits", e.modelMantissaBits,
       "the global model's precision: coordinates a broadcast changes are rounded to this many mantissa bits "
       "(23 = fp32)");
  bind("compression.downlink-ternary", e.downlinkTernary,
       "top-k broadcast values as sign bits + one scale per 256 values (sparse ternary)");
  bind("compression.error-feedback", e.errorFeedback, "error-feedback memory on both ends");
  bind("compression.uplink-memory-decay", t.uplinkMemoryDecay,
       "clients' uplink memory x this per round missed since they last trained, in [0, 1] (1 = off)");
  bind("compression.uplink-memory-reset-after", t.uplinkMemoryResetAfter,
       "clients clear their uplink memory after this many missed rounds in a row (0 = never)");
  bind("compression.uplink-error-cap", t.uplinkErrorCap,
       "clients scale their memory to ||e|| <= this x ||p|| after each commit (0 = no cap)");
  bind("compression.downlink-error-cap", e.downlinkErrorCap,
       "the coordinator scales its memory to ||e|| <= this x ||p|| after each commit (0 = no cap)");
  bind("engine.shards", e.shards,
       "aggregate and step the server optimizer in this many shards of the parameters, on as many threads "
       "(0 = one per core, 1 = no threads); the results are the same bits whatever the number");
  bind("eval.test-data", t.testData,
       "data to evaluate on: a CSV, LIBSVM (.libsvm/.svm), NumPy (.npy/.npz) file or an IDX directory (empty = none)");
  bind("eval.data-format", t.dataFormat,
       "format of the evaluation data: auto (from the name), csv, libsvm, npy, npz, idx");
  bind("eval.categorical", t.categorical,
       "CSV columns of categories (comma-separated), each one-hot over hashed buckets, as on the clients");
  bind("eval.categorical-buckets", t.categoricalBuckets,
       "one-hot slots per categorical column (hashed; with task.categorical-vocabulary: values + the other slot)");
  bind("eval.label", t.label,
       "label of the evaluation data: CSV column by header name or 0-based index (default the last), NPZ array "
       "(default y)");
  bind("eval.eval-every", t.evalEvery, "evaluate every N committed rounds");
  bind("eval.federated-every", e.federatedEvalEvery,
       "federated evaluation: clients evaluate the model of every Nth committed round on their held-out examples "
       "(starling-client --eval-fraction) and send the sums (0 = off)");
  bind("output.model-file", t.modelOut, "file the final model is saved to (empty = none)");
  bind("server.listen", c.listen, "address to listen on, HOST:PORT");
  bind("engine.shard-map", t.shardMapFile,
       "the shards' map: the 'row ROW SHARD' lines of a placement file (placement --shards S --out; embedbag "
       "models; engine.shards = S); empty = equal ranges");
  bind("server.placement-file", t.placementFile,
       "clients on relays: a file of 'client ID RELAY' lines (starling-coordinator placement --out), applied at the "
       "relays' next round whenever it changes and kept in the database (empty = none)");
  bind("server.placement-drift", t.placementDrift,
       "clients on relays recomputed (METIS over the row sets the relays report) when the relay traffic drifted by "
       "more than this fraction since the last computation, and applied when it saves more than it (0 = never)");
  bind("server.certs", c.certs, "directory with ca.crt, coordinator.crt, coordinator.key");
  bind("server.ca", c.ca, "CA certificate (overrides certs)");
  bind("server.cert", c.cert, "coordinator certificate (overrides certs)");
  bind("server.key", c.key, "coordinator private key (overrides certs)");
  bind("server.crl", c.crl, "CA revocation list (default: crl.pem in certs, when it exists)");
  bind("server.db", c.db, "SQLite database: rounds, participants, checkpoints; resumed when it exists");
  bind("server.max-frame-bytes", c.maxFrameBytes, "largest frame accepted from a client");
  bind("server.handshake-timeout-ms", c.handshakeTimeoutMs, "time a client has to finish the TLS handshake");
  bind("server.idle-timeout-ms", c.idleTimeoutMs, "a client silent this long is disconnected");
  bind("server.frame-timeout-ms", c.frameTimeoutMs, "time a client has to deliver a frame whose header arrived");
  bind("server.heartbeat-ms", c.heartbeatMs, "a quiet connection gets a heartbeat this often; clients answer");
  bind("server.max-connections", c.maxConnections, "connections beyond this are closed at once");
  bind("server.listen-backlog", c.listenBacklog,
       "connections the kernel queues for accept; keep it short (what waits past the client's handshake timeout is "
       "dead when accepted)");
  bind(
      "server.tls-resumption", c.tlsResumption,
      "issue and accept TLS session tickets, so that a client reconnects without a full handshake (docs/transport.md)");
  bind("server.tls-persist-ticket-keys", c.tlsPersistTicketKeys,
       "keep the session ticket keys in a file (mode 0600) so clients resume after a restart (docs/security.md)");
  bind("server.tls-ticket-key-file", c.tlsTicketKeyFile,
       "the ticket key file (default: the database's path + .ticket-keys)");
  bind("server.trim-heap-ms", c.trimHeapMs,
       "every this many ms, if connections came or went, return free heap pages to the kernel (0 = never)");
  bind("server.http", c.http,
       "serve the dashboard and /metrics on HOST:PORT, or PORT alone for 127.0.0.1 (docs/dashboard.md); empty = off. "
       "Beyond a loopback address "
       "only over mutual TLS, to operator certificates (init --operators N)");
  bind("server.http-linger-ms", c.httpLingerMs,
       "after training ends, keep serving the dashboard this long (a signal stops it sooner); 0 = stop with training");
  bind("server.http-tls", c.httpTls,
       "auto (TLS beyond a loopback address), on (always: operators only), off (plain HTTP; loopback addresses only)");
  bind("server.threads", c.threads,
       "threads running TLS handshakes and connections (0 = one per core, at most 4); rounds run on one strand");
}

Status parseConfigFile(const std::string& path, toml::table& out) {
  try {
    out = toml::parse_file(path);
  } catch (const toml::parse_error& err) {
    const auto& where = err.source().begin;
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}:{}:{}: {}", path, where.line, where.column, err.description()));
  }
  return Status::ok();
}

Status ConfigBinder::applyFile(const std::string& path) {
  toml::table file;
  STARLING_RETURN_IF_ERROR(parseConfigFile(path, file));
  return applyTable(&file, path);
}

Status ConfigBinder::applyTable(const void* raw, const std::string& path, const std::vector<std::string>& foreign) {
  const auto& file = *static_cast<const toml::table*>(raw);
  // Every key in the file must be a known setting.
  for (const auto& [section, node] : file) {
    if (std::find(foreign.begin(), foreign.end(), section.str()) != foreign.end()) continue;
    const auto* table = node.as_table();
    if (table == nullptr)
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("{}: '{}' must be a [section] (task, train, compression, engine, eval, output, server)",
                                path, std::string(section.str())));
    for (const auto& [name, value] : *table) {
      const std::string key = std::string(section.str()) + "." + std::string(name.str());
      auto b = std::find_if(bindings_.begin(), bindings_.end(), [&](const Binding& x) { return x.key == key; });
      if (b == bindings_.end())
        return Status(StatusCode::kInvalidArgument, fmt::format("{}: unknown setting '{}'", path, key));
      if (b->option->count() > 0) continue;  // the flag overrides the file
      if (Status st = b->fromToml(&value); !st) return st.withContext(path);
    }
  }
  return Status::ok();
}

Status ConfigBinder::validate(const DaemonConfig& c) {
  STARLING_RETURN_IF_ERROR(validateTask(c.engine, c.task));
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, m); };
  if (c.handshakeTimeoutMs < 1 || c.frameTimeoutMs < 1 || c.idleTimeoutMs < 1)
    return bad("handshake-timeout-ms, frame-timeout-ms and idle-timeout-ms must be at least 1");
  if (c.threads > 64) return bad("threads must be at most 64 (0 = one per core)");
  return Status::ok();
}

}  // namespace starling::coordinator
