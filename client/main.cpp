// starling-client: the Starling client for a device.
//
//   starling-client --coordinator HOST:PORT --certs DIR --id client-<i> --data PATH [--shard I/N]
//                   [--data-format F] [--label COLUMN] [--task classification|binary|regression]
//       joins the federation and trains on its data (a CSV, LIBSVM or NumPy file, or an
//       IDX directory) until the coordinator says done;
//   without --data it only checks that it can join (Hello, Welcome, Bye).
//   starling-client --profile OUT.json --data PATH --model SPEC [--uplink C --uplink-density F ...]
//       measures this device for that task (profile.hpp, docs/predict.md): no coordinator,
//       no certificates; the task comes from the command line.

#include <malloc.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "starling/client/participant.hpp"
#include "starling/client/profile.hpp"
#include "starling/client/protocol_client.hpp"
#include "starling/data/idx_select.hpp"
#include "starling/data/load.hpp"
#include "starling/data/loaders.hpp"
#include "starling/data/partition.hpp"
#include "starling/util/log.hpp"

namespace {

using namespace starling;

int fail(const std::string& message) {
  std::cerr << "starling-client: " << message << "\n";
  return 1;
}

// Runs on the Participant's loader thread: inflating the images is bulk work, and
// while it runs the clients of a fleet started together on one machine are still
// joining; a lower priority for this thread only (Linux nice is per thread) lets
// their handshakes go first. Best effort: a refusal leaves the priority as it is.
void lowerThisThreadsPriority() {
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
}

// Shard I of N, "I/N", or nullopt for all of it.
Result<std::optional<std::pair<unsigned, unsigned>>> parseShard(const std::string& shardSpec) {
  if (shardSpec.empty()) return std::optional<std::pair<unsigned, unsigned>>();
  unsigned index = 0, count = 0;
  char slash = 0;
  std::istringstream in(shardSpec);
  if (!(in >> index >> slash >> count) || slash != '/' || count == 0 || index >= count || !in.eof())
    return Status(StatusCode::kInvalidArgument, "--shard must be I/N with 0 <= I < N, not '" + shardSpec + "'");
  return std::optional<std::pair<unsigned, unsigned>>(std::pair{index, count});
}

// The examples of a data file (CSV, LIBSVM, NPY, NPZ): read whole before joining,
// then shard I of N of them kept.
Result<client::DeferredData> planFile(const std::string& path, const data::DataOptions& dataOptions,
                                      const std::string& shardSpec, const std::string& partition, uint64_t seed) {
  auto shard = parseShard(shardSpec);
  if (!shard) return shard.status();
  auto loaded = *shard ? data::loadDataShard(path, dataOptions, (*shard)->first, (*shard)->second, partition, seed)
                       : data::loadData(path, dataOptions);
  if (!loaded) return loaded.status();
  auto mine = std::make_shared<data::Dataset>(std::move(*loaded));
  client::DeferredData out;
  out.numExamples = mine->size();
  out.load = [mine]() -> Result<data::Dataset> { return std::move(*mine); };
  return out;
}

// This client's examples from a Fashion-MNIST IDX directory: all of the training set,
// or shard I of N. A shard is cut from the labels alone and then only its images are
// kept while the file is read, so a device never holds the whole training set (47 MB)
// to train on a tenth of it.
//
// The labels (60 kB) are read before joining, which gives the number of examples for
// Hello; the images (26 MB of gzip to inflate) load after joining, in load().
Result<client::DeferredData> planShard(const std::string& dir, const std::string& shardSpec,
                                       const std::string& partition, uint64_t seed) {
  auto labels = data::loadFashionMnistLabels(dir, data::FashionMnistSplit::kTrain);
  if (!labels) return labels.status();
  // A missing images file is worth knowing before joining; a damaged one shows in load().
  const auto images = std::filesystem::path(dir) / "train-images-idx3-ubyte";
  if (!std::filesystem::exists(images) && !std::filesystem::exists(images.string() + ".gz"))
    return Status(StatusCode::kNotFound, images.string() + "[.gz]: no such file");
  client::DeferredData out;
  if (shardSpec.empty()) {
    out.numExamples = labels->size();
    out.load = [dir] {
      lowerThisThreadsPriority();
      return data::loadFashionMnistSplit(dir, data::FashionMnistSplit::kTrain);
    };
    return out;
  }
  auto shard = parseShard(shardSpec);
  if (!shard) return shard.status();
  auto parts = data::partitionBySpec(*labels, (**shard).second, partition, seed);
  if (!parts) return parts.status().withContext("--partition");
  const unsigned index = (**shard).first;
  out.numExamples = (*parts)[index].size();
  out.load = [dir, rows = std::move((*parts)[index])] {
    lowerThisThreadsPriority();
    return data::loadFashionMnistSubset(dir, data::FashionMnistSplit::kTrain, rows);
  };
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"starling-client: trains on local data for a Starling coordinator"};
  app.set_version_flag("--version", STARLING_VERSION);
  app.option_defaults()->always_capture_default();
  std::string coordinatorAddr;
  std::string certs;
  std::string id;
  std::string ca, cert, key;
  std::string serverName;
  std::string logLevel = "info";
  int64_t handshakeTimeoutMs = 10'000;
  uint64_t numExamples = 0;
  app.add_option("--coordinator", coordinatorAddr,
                 "coordinator (or relay) address, HOST:PORT; several, comma-separated, are tried in turn when one "
                 "fails (relays: the next when one dies)");
  app.add_option("--certs", certs, "directory with ca.crt and <id>.crt / <id>.key");
  app.add_option("--id", id, "this client's name, e.g. client-3 (picks <id>.crt and <id>.key in --certs)");
  app.add_option("--ca", ca, "CA certificate (overrides --certs)");
  app.add_option("--cert", cert, "client certificate (overrides --certs)");
  app.add_option("--key", key, "client private key (overrides --certs)");
  app.add_option("--server-name", serverName,
                 "host name expected in the coordinator's certificate (default: the host of --coordinator)");
  app.add_option("--handshake-timeout-ms", handshakeTimeoutMs, "time allowed for connecting and the TLS handshake");
  bool noResumption = false;
  app.add_flag("--no-tls-resumption", noResumption,
               "every reconnect does a full TLS handshake (default: offer the last session's ticket)");
  app.add_option("--examples", numExamples, "number of local examples reported to the coordinator");
  app.add_option("--log-level", logLevel, "trace, debug, info, warn, error or off");
  std::string dataDir;
  std::string shardSpec;
  std::string partition = "iid";
  uint64_t partitionSeed = 1;
  uint64_t seed = 0;
  std::string dataFormat = "auto", label, task = "classification";
  app.add_option("--data", dataDir,
                 "training data: a CSV, LIBSVM (.libsvm/.svm), NumPy (.npy/.npz) file or an IDX directory; "
                 "without it, only join and leave");
  app.add_option("--data-format", dataFormat, "auto (from the file name), csv, libsvm, npy, npz or idx");
  app.add_option("--label", label,
                 "CSV: the label column, by header name or 0-based index (default: the last); NPZ: the labels "
                 "array (default y)");
  std::string categorical;
  uint32_t categoricalBuckets = 16;
  app.add_option("--categorical", categorical,
                 "CSV columns of categories, comma-separated: each one-hot over hashed buckets (same on every client)");
  app.add_option("--categorical-buckets", categoricalBuckets, "hashed one-hot slots per categorical column")
      ->check(CLI::Range(1u, 1u << 20));
  std::size_t dataMemoryLimit = 0;
  app.add_option("--data-memory-limit", dataMemoryLimit,
                 "most bytes the loaded data may take; a larger file is refused before it is read (0 = the memory "
                 "this process may still allocate: MemAvailable, the cgroup's memory.max, ulimit -v)");
  app.add_option("--task", task,
                 "classification, binary or regression: how the labels are read (must match the coordinator's task)");
  app.add_option("--shard", shardSpec, "train on shard I of N of the training set, as I/N (default: all of it)");
  app.add_option("--partition", partition,
                 "how shards are cut: iid, dirichlet:ALPHA, classes:K, by-column:NAME (a CSV column, e.g. a user id: "
                 "whole groups per shard, not a feature) or files:DIR (shard I is the I-th data file of DIR by name; "
                 "no --data)");
  app.add_option("--partition-seed", partitionSeed, "seed of the partition (the same on every client)");
  app.add_option("--seed", seed, "seed of local randomness (sampling, reconnect jitter)");
  double evalFraction = 0;
  app.add_option("--eval-fraction", evalFraction,
                 "hold this fraction of the data out of training and evaluate the model on it when the coordinator "
                 "asks (federated evaluation)")
      ->check(CLI::Range(0.0, 0.9));
  uint32_t rowBucket = 0;
  app.add_option("--sparse-rows", rowBucket,
                 "offer the coordinator the first-layer rows this client's data touches, in buckets of B rows "
                 "(1 = the rows themselves; larger buckets reveal less and move more), and train, receive and send "
                 "only their parameters when it takes them (linear, mlp and embedbag models; 0 = off)")
      ->check(CLI::Range(0u, 1u << 30));
  double slowdown = 1.0;
  app.add_option("--slowdown", slowdown,
                 "act as a device this many times slower: wait (F - 1) x each round's training time before sending, "
                 "and report F x it (benchmarks and tests of uneven fleets)")
      ->check(CLI::Range(1.0, 1000.0));
  std::string auditOut;  // test-only (tests/cli/crash_points_test.sh), hidden from --help
  app.add_option("--test-audit", auditOut, "write the sums computed and kept in memory here")->group("");
  std::string attackSpec = "none";  // test-only (tests/cli/attack_test.sh), hidden from --help
  app.add_option("--test-attack", attackSpec,
                 "act as a hostile client: sign-flip[:F], scale[:F], noise[:F] or label-flip (client::Attack)")
      ->group("");
  std::string profileOut;
  client::ProfileTask profileTask;
  client::ProfileOptions profileOptions;
  auto* profileGroup = app.add_option_group("profile", "--profile: measure this device for a task (docs/predict.md)");
  profileGroup->add_option("--profile", profileOut,
                           "write this device's profile for the task below to this JSON file and exit (no "
                           "coordinator: needs --data and --model)");
  profileGroup->add_option("--model", profileTask.model, "the task's model spec (as the coordinator's --model)");
  profileGroup->add_option("--uplink", profileTask.uplink, "the task's uplink compressor");
  profileGroup->add_option("--uplink-density", profileTask.uplinkDensity, "its density")->check(CLI::Range(0.0, 1.0));
  profileGroup->add_option("--uplink-ternary", profileTask.uplinkTernary, "sign values on the uplink (top-k)");
  profileGroup->add_option("--downlink", profileTask.downlink, "the task's downlink compressor");
  profileGroup->add_option("--downlink-density", profileTask.downlinkDensity, "its density")
      ->check(CLI::Range(0.0, 1.0));
  profileGroup->add_option("--downlink-ternary", profileTask.downlinkTernary, "sign values on the downlink (top-k)");
  profileGroup->add_option("--fp16-values", profileTask.fp16Values, "fp16 values of sparse payloads");
  profileGroup->add_option("--error-feedback", profileTask.errorFeedback, "uplink error feedback");
  profileGroup->add_option("--lr", profileTask.lr, "the local learning rate of the timed steps");
  profileGroup->add_option("--profile-batches", profileOptions.batchSizes, "batch sizes whose step time is measured")
      ->delimiter(',');
  profileGroup->add_option("--profile-steps", profileOptions.steps, "steps per timed run")
      ->check(CLI::Range(1, 100000));
  profileGroup->add_option("--profile-repeats", profileOptions.repeats, "timed runs per figure (their median)")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  // One malloc arena: the data loader's thread would otherwise get an arena of its own,
  // whose freed pages the training thread cannot reuse (about 0.7 MiB more peak RSS).
  mallopt(M_ARENA_MAX, 1);
  if (const std::string filesDir = data::filesDirOf(partition); !filesDir.empty()) {
    // One file per client: shard I is file I, read whole.
    if (!dataDir.empty())
      return fail("--data is not used with --partition files:DIR (shard I is the I-th file of DIR)");
    auto shard = parseShard(shardSpec);
    if (!shard) return fail(shard.status().message());
    if (!*shard) return fail("--partition files:DIR needs --shard I/N");
    auto file = data::clientFileOf(filesDir, (*shard)->first, (*shard)->second);
    if (!file) return fail("--partition: " + file.status().message());
    dataDir = *file;
    shardSpec.clear();
  }

  if (!profileOut.empty()) {
    if (dataDir.empty()) return fail("--profile needs --data (the examples its steps train on)");
    if (profileTask.model.empty()) return fail("--profile needs --model (the task's model spec)");
  } else if (coordinatorAddr.empty()) {
    return fail("--coordinator is required (or --profile OUT.json)");
  }

  auto log = makeLogger(id.empty() ? "client" : id, logLevel);
  if (!log) return fail(log.status().message());
  auto in = [&](const std::string& override, const std::string& name) -> std::string {
    if (!override.empty()) return override;
    return (std::filesystem::path(certs) / name).string();
  };
  // The coordinator's addresses and this client's identity (none for --profile).
  std::optional<client::ServerList> servers;
  if (profileOut.empty()) {
    if ((cert.empty() || key.empty()) && (certs.empty() || id.empty()))
      return fail("give --certs DIR and --id NAME, or --ca, --cert and --key");
    if (ca.empty() && certs.empty()) return fail("give --certs DIR or --ca FILE");
    auto identity = net::loadIdentity(in(ca, "ca.crt"), in(cert, id + ".crt"), in(key, id + ".key"));
    if (!identity) return fail(identity.status().message());
    net::TlsOptions tlsOptions;
    tlsOptions.resumption = !noResumption;
    auto list = client::serverList(coordinatorAddr, *identity, serverName, tlsOptions);
    if (!list) return fail("--coordinator: " + list.status().message());
    servers.emplace(std::move(*list));
  }

  if (dataDir.empty()) {
    client::ClientOptions options;
    options.coordinator = servers->first;
    options.id = id;
    options.numExamples = numExamples;
    options.limits.handshakeTimeout = std::chrono::milliseconds(handshakeTimeoutMs);
    asio::io_context io(1);
    std::optional<Result<client::Task>> outcome;
    asio::co_spawn(io, client::joinAndLeave(io.get_executor(), servers->tls, options, *log),
                   [&](std::exception_ptr e, Result<client::Task> r) {
                     if (e) std::rethrow_exception(e);
                     outcome.emplace(std::move(r));
                   });
    io.run();
    if (!outcome || !*outcome) return fail(outcome ? outcome->status().message() : "stopped before finishing");
    return 0;
  }

  data::DataOptions dataOptions;
  const auto format = data::parseDataFormat(dataFormat);
  if (!format) return fail("--data-format: unknown format '" + dataFormat + "' (auto, csv, libsvm, npy, npz or idx)");
  dataOptions.format = *format;
  const auto taskKind = data::parseTaskKind(task);
  if (!taskKind) return fail("--task: unknown task '" + task + "' (classification, binary or regression)");
  dataOptions.task = *taskKind;
  dataOptions.label = label;
  dataOptions.categorical = data::splitList(categorical);
  dataOptions.categoricalBuckets = categoricalBuckets;
  dataOptions.memoryLimitBytes = dataMemoryLimit;
  auto detected = dataOptions.format == data::DataFormat::kAuto ? data::detectFormat(dataDir)
                                                                : Result<data::DataFormat>(dataOptions.format);
  if (!detected) return fail(detected.status().message());
  const bool idx = *detected == data::DataFormat::kIdx;
  if (idx && *taskKind != data::TaskKind::kClassification)
    return fail("--data " + dataDir + ": an IDX directory holds classes; --task " + task + " needs another format");
  auto shard = idx ? planShard(dataDir, shardSpec, partition, partitionSeed)
                   : planFile(dataDir, dataOptions, shardSpec, partition, partitionSeed);
  if (!shard) return fail(shard.status().message());
  const auto attack = client::Attack::parse(attackSpec);
  if (!attack) return fail("--test-attack: " + attack.status().message());
  if (attack->kind == client::Attack::Kind::kLabelFlip)
    shard->load = [load = std::move(shard->load)]() -> Result<data::Dataset> {
      auto d = load();
      if (d) d->flipLabels();
      return d;
    };
  if (!profileOut.empty()) {
    // CPU seconds of this process (every thread), as the profile's other figures.
    auto cpuSeconds = [] {
      timespec t{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
      return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
    };
    const double loadStart = cpuSeconds();
    auto examples = shard->load();
    const double loadSeconds = cpuSeconds() - loadStart;
    if (!examples) return fail(examples.status().message());
    profileTask.kind = *taskKind;
    auto profile = client::measureProfile(profileTask, *examples, profileOptions);
    if (!profile) return fail("--profile: " + profile.status().message());
    profile->loadSeconds = loadSeconds;
    if (Status st = client::writeProfile(*profile, profileOut); !st) return fail(st.message());
    (*log)->info("profile of {} ({} parameters) written to {}", profile->task.model, profile->params, profileOut);
    return 0;
  }
  (*log)->info("training data: {} examples from {}{}{}", shard->numExamples, dataDir,
               shardSpec.empty() ? "" : " (shard " + shardSpec + ", " + partition + ")",
               idx ? ", loading after joining" : "");
  client::ParticipantOptions options;
  options.coordinator = servers->first;
  options.alternates = servers->alternates;
  options.id = id;
  options.seed = seed;
  options.auditOut = auditOut;
  options.attack = *attack;
  options.evalFraction = evalFraction;
  options.slowdown = slowdown;
  options.rowBucket = rowBucket;
  options.limits.handshakeTimeout = std::chrono::milliseconds(handshakeTimeoutMs);
  client::Participant participant(std::move(*shard), options, *log);
  asio::io_context io(1);
  std::optional<Status> outcome;
  asio::co_spawn(io, participant.run(io.get_executor(), servers->tls), [&](std::exception_ptr e, Status st) {
    if (e) std::rethrow_exception(e);
    outcome.emplace(std::move(st));
  });
  io.run();
  if (!outcome || !*outcome) return fail(outcome ? outcome->message() : "stopped before finishing");
  return 0;
}
