// starling-coordinator: the daemon that orchestrates a Starling federation.
//
//   starling-coordinator init --out DIR --clients N [--hostname H]... [--days D]
//   starling-coordinator run [--config FILE] [--certs DIR] [--listen HOST:PORT] [...]
//   starling-coordinator revoke --certs DIR [--client ID]... [--cert FILE]... [--days D]
//   starling-coordinator report --db FILE [--format table|csv|json] [--html FILE]
//   starling-coordinator export (--db FILE | --model-file FILE) [--format onnx|starling] --out FILE
//   starling-coordinator placement --row-sets FILE | --db FILE... --relays R [--shards S] [--method metis|random|hash]
//   [--out FILE]

#include <fmt/ranges.h>
#include <malloc.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <asio/strand.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>

#include "starling/compression/row_set.hpp"
#include "starling/coordinator/config.hpp"
#include "starling/coordinator/federation.hpp"
#include "starling/coordinator/report.hpp"
#include "starling/coordinator/server.hpp"
#include "starling/coordinator/store.hpp"
#include "starling/model/row_view.hpp"
#include "starling/net/certificates.hpp"
#include "starling/onnx/onnx.hpp"
#include "starling/util/log.hpp"

#include "dashboard/dashboard.hpp"
#include "placement.hpp"
#include "placement_file.hpp"

namespace {

using namespace starling;

int fail(const std::string& message) {
  std::cerr << "starling-coordinator: " << message << "\n";
  return 1;
}

int runInit(const net::InitOptions& options) {
  Status st = net::writeCertificateDirectory(options);
  if (!st) return fail(st.message());
  std::cout << "wrote ca.crt, ca.key, coordinator.crt, coordinator.key";
  if (options.clients > 0) std::cout << " and client-0.." << options.clients - 1 << " .crt/.key";
  std::cout << " to " << options.outDir << "\n";
  return 0;
}

int runRevoke(const net::RevokeOptions& options) {
  auto revoked = net::revokeCertificates(options);
  if (!revoked) return fail(revoked.status().message());
  for (const auto& c : *revoked)
    std::cout << "revoked " << c.commonName << " (serial " << c.serial << ")\n";
  const std::string crl =
      options.crlPath.empty() ? (std::filesystem::path(options.certsDir) / "crl.pem").string() : options.crlPath;
  std::cout << "wrote " << crl << "; a running coordinator applies it when restarted\n";
  return 0;
}

// html: a file to write the HTML page to (the printed report is then left out).
int runReport(const std::string& db, const std::string& format, const std::string& html) {
  auto fmt = coordinator::parseReportFormat(format);
  if (!fmt) return fail(fmt.status().message());
  if (!std::filesystem::exists(db)) return fail("no database '" + db + "'");
  coordinator::StoreOptions options;
  options.readOnly = true;
  auto store = coordinator::Store::open(db, options);
  if (!store) return fail(store.status().message());
  if (!html.empty()) {
    auto data = coordinator::loadReport(**store);
    if (!data) return fail(data.status().message());
    std::ofstream out(html, std::ios::binary | std::ios::trunc);
    out << coordinator::formatHtml(*data, db);
    out.close();
    if (!out) return fail("cannot write " + html);
    std::cerr << fmt::format("wrote {} ({} rounds)\n", html, data->rounds.size());
    return 0;
  }
  Status st = coordinator::writeReport(**store, *fmt, std::cout);
  if (!st) return fail(st.message());
  return 0;
}

// The trained model: the last checkpoint's (the served moving average when the task
// keeps one, as the daemon evaluates and saves it) from a database, or a model file.
int runExport(const std::string& db, const std::string& modelFile, const std::string& format, const std::string& out) {
  if (db.empty() == modelFile.empty()) return fail("give one of --db and --model-file");
  if (format != "onnx" && format != "starling") return fail("--format must be onnx or starling, not '" + format + "'");
  std::optional<model::Model> m;
  std::string from;
  if (!modelFile.empty()) {
    auto loaded = model::Model::load(modelFile);
    if (!loaded) return fail(loaded.status().message());
    m.emplace(std::move(*loaded));
    from = modelFile;
  } else {
    if (!std::filesystem::exists(db)) return fail("no database '" + db + "'");
    coordinator::StoreOptions options;
    options.readOnly = true;
    auto store = coordinator::Store::open(db, options);
    if (!store) return fail(store.status().message());
    auto spec = (*store)->meta("model");
    if (!spec) return fail(spec.status().message());
    if (!*spec) return fail("database '" + db + "' records no model");
    auto cp = (*store)->latestCheckpoint();
    if (!cp) return fail(cp.status().message());
    if (!*cp) return fail("database '" + db + "' has no checkpoint yet (no round committed)");
    auto built = model::Model::fromSpec(**spec);
    if (!built) return fail(built.status().message());
    const auto average = (*cp)->vectors.find("model-average");
    const bool useAverage = average != (*cp)->vectors.end() && !average->second.empty();
    Status st = built->setParams(useAverage ? average->second : (*cp)->model);
    if (!st) return fail("checkpoint of round " + std::to_string((*cp)->round) + ": " + st.message());
    m.emplace(std::move(*built));
    from = db + ", round " + std::to_string((*cp)->round) + (useAverage ? " (moving average)" : "");
  }
  Status st = format == "onnx" ? onnxio::exportOnnx(*m, out) : m->save(out);
  if (!st) return fail(st.message());
  std::cout << "wrote " << out << " (" << format << ", " << m->spec() << ", " << m->numParams() << " parameters) from "
            << from << "\n";
  return 0;
}

struct PlacementArgs {
  std::string rowSets;
  std::vector<std::string> dbs;  // or the row sets clients offered, from these databases
  uint32_t relays = 0;
  uint32_t shards = 0;  // 0: no shard placement
  std::string method = "metis";
  std::string shardMethod = "metis";
  std::string graph = "bipartite-cut";
  double tolerance = 0.10;
  int refinePasses = 8;
  uint64_t universe = 0;  // 0: the largest row + 1
  uint64_t seed = 1;
  std::string out;
};

// The row sets the clients of these databases (a coordinator's, its relays') offered in
// their last Hello (docs/sparse.md), as the rows their buckets cover; universe: the
// task's model inputs (each database must record the same model).
Result<std::vector<coordinator::ClientRows>> offeredRowSets(const std::vector<std::string>& dbs, uint64_t& universe) {
  std::vector<coordinator::ClientRows> out;
  std::string spec;
  for (const std::string& db : dbs) {
    if (!std::filesystem::exists(db)) return Status(StatusCode::kNotFound, "no database '" + db + "'");
    coordinator::StoreOptions options;
    options.readOnly = true;
    auto store = coordinator::Store::open(db, options);
    if (!store) return store.status();
    auto model = (*store)->meta("model");
    if (!model) return model.status();
    if (!*model) return Status(StatusCode::kInvalidArgument, "database '" + db + "' records no model");
    if (!spec.empty() && **model != spec)
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("database '{}' records model {}, another database {}", db, **model, spec));
    spec = **model;
    auto inputs = model::specInputs(spec);
    if (!inputs) return inputs.status().withContext(db);
    universe = *inputs;
    auto clients = (*store)->clients();
    if (!clients) return clients.status();
    for (const auto& c : *clients) {
      if (c.rowSet.empty()) continue;
      auto rows = compression::decodeCoveredRows(c.rowSet, c.rowBucket, static_cast<uint32_t>(*inputs));
      if (!rows) return rows.status().withContext(fmt::format("{}: the row set of client '{}'", db, c.id));
      out.push_back({c.id, std::vector<uint32_t>(rows->rows().begin(), rows->rows().end())});
    }
  }
  if (out.empty())
    return Status(StatusCode::kNotFound, "no client offered its rows in " + fmt::format("{}", fmt::join(dbs, ", ")));
  return out;
}

// The three client placements side by side (and the four shard placements with
// --shards); the chosen ones written to --out.
int runPlacement(const PlacementArgs& args) {
  using namespace coordinator;
  auto method = parseRelayMethod(args.method);
  if (!method) return fail(method.status().message());
  auto shardMethod = parseShardMethod(args.shardMethod);
  if (!shardMethod) return fail(shardMethod.status().message());
  auto graph = parseMetisGraph(args.graph);
  if (!graph) return fail(graph.status().message());
  if (args.rowSets.empty() == args.dbs.empty()) return fail("give one of --row-sets and --db");
  uint64_t universe = args.universe;
  auto clients = args.dbs.empty() ? readRowSets(args.rowSets, args.universe) : offeredRowSets(args.dbs, universe);
  if (!clients) return fail(clients.status().message());
  const std::string source = args.dbs.empty() ? args.rowSets : fmt::format("{}", fmt::join(args.dbs, ", "));
  std::size_t entries = 0;
  for (const auto& c : *clients) {
    if (args.universe == 0 && !c.rows.empty()) universe = std::max<uint64_t>(universe, uint64_t(c.rows.back()) + 1);
    entries += c.rows.size();
  }
  universe = std::max<uint64_t>(universe, 1);

  RelayPlacementOptions options;
  options.relays = args.relays;
  options.graph = *graph;
  options.tolerance = args.tolerance;
  options.seed = args.seed;
  options.refinePasses = args.refinePasses;
  std::vector<RelayPlacement> placements;
  const RelayMethod methods[] = {RelayMethod::kMetis, RelayMethod::kRandom, RelayMethod::kHash};
  for (RelayMethod m : methods) {
    options.method = m;
    auto p = placeClients(*clients, universe, options);
    if (!p) return fail(source + ": " + p.status().message());
    placements.push_back(std::move(*p));
  }
  std::cout << fmt::format("{}: {} clients, {} row entries, universe {} rows; {} relays (METIS graph {})\n", source,
                           clients->size(), entries, universe, args.relays, metisGraphName(*graph));
  std::cout << fmt::format("{:<8} {:>14} {:>12} {:>16} {:>10}\n", "method", "traffic_rows", "random/this",
                           "relay_max/mean", "seconds");
  const double randomTraffic = double(placements[1].trafficRows);
  for (std::size_t i = 0; i < placements.size(); ++i) {
    const auto& p = placements[i];
    // No rows anywhere: no traffic to compare.
    const std::string ratio =
        p.trafficRows > 0 ? fmt::format("{:.2f}x", randomTraffic / double(p.trafficRows)) : std::string("-");
    std::cout << fmt::format("{:<8} {:>14} {:>12} {:>16.3f} {:>10.3f}{}\n", relayMethodName(methods[i]), p.trafficRows,
                             ratio, p.sizeMaxOverMean, p.seconds, methods[i] == *method ? "  (chosen)" : "");
  }

  std::optional<ShardPlacement> chosenShards;
  if (args.shards > 0) {
    ShardPlacementOptions shardOptions;
    shardOptions.shards = args.shards;
    shardOptions.tolerance = args.tolerance;
    shardOptions.seed = args.seed;
    std::cout << fmt::format("{} shards\n{:<8} {:>14} {:>18} {:>10}\n", args.shards, "method", "load_max/mean",
                             "shards_per_client", "seconds");
    for (ShardMethod m : {ShardMethod::kRange, ShardMethod::kHash, ShardMethod::kLpt, ShardMethod::kMetis}) {
      shardOptions.method = m;
      auto p = placeRows(*clients, universe, shardOptions);
      if (!p) return fail(source + ": " + p.status().message());
      std::cout << fmt::format("{:<8} {:>14.3f} {:>18.2f} {:>10.3f}{}\n", shardMethodName(m), p->loadMaxOverMean,
                               p->shardsPerClient, p->seconds, m == *shardMethod ? "  (chosen)" : "");
      if (m == *shardMethod) chosenShards.emplace(std::move(*p));
    }
  }
  if (!args.out.empty()) {
    const auto& chosen = placements[static_cast<std::size_t>(*method)];
    Status st = writePlacement(args.out, *clients, chosen, args.method, chosenShards ? &*chosenShards : nullptr,
                               args.shardMethod);
    if (!st) return fail(st.message());
    std::cout << "wrote " << args.out << " (" << args.method << ")\n";
  }
  return 0;
}

// Every connection is a descriptor: the soft limit (often 1024) goes up to the hard
// limit, which only root can raise. Logged, with a warning when --max-connections would
// not fit (the coordinator also needs descriptors for its database and logs).
void raiseOpenFileLimit(spdlog::logger& log, std::size_t maxConnections) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    log.warn("cannot read the open files limit: {}", std::strerror(errno));
    return;
  }
  const rlim_t before = limit.rlim_cur;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      log.warn("cannot raise the open files limit from {} to {}: {}", before, limit.rlim_max, std::strerror(errno));
      limit.rlim_cur = before;
    }
  }
  auto text = [](rlim_t v) { return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(v); };
  if (limit.rlim_cur != before)
    log.info("open files limit raised from {} to {} (the hard limit)", text(before), text(limit.rlim_cur));
  else
    log.info("open files limit {} (hard limit {})", text(limit.rlim_cur), text(limit.rlim_max));
  if (limit.rlim_cur != RLIM_INFINITY && maxConnections + 64 > limit.rlim_cur)
    log.warn(
        "--max-connections {} does not fit in the open files limit {}: connections beyond about {} will fail "
        "to be accepted (raise the hard limit: ulimit -Hn, LimitNOFILE=)",
        maxConnections, text(limit.rlim_cur), limit.rlim_cur > 64 ? limit.rlim_cur - 64 : 0);
}

int runDaemon(const coordinator::DaemonConfig& config, const coordinator::FederationTestHooks& testHooks,
              const std::string& logLevel) {
  // One malloc arena for all threads: the network threads and the evaluation worker
  // would otherwise each get one, whose freed pages the others cannot reuse (peak
  // RSS of a 10-client FedAvg federation: 51 MiB with one, 57 with two, 58-62 with
  // glibc's default; per-thread caches keep small allocations uncontended).
  mallopt(M_ARENA_MAX, 1);
  auto log = makeLogger("coordinator", logLevel);
  if (!log) return fail(log.status().message());
  raiseOpenFileLimit(**log, config.maxConnections);
  Status valid = coordinator::ConfigBinder::validate(config);
  if (!valid) return fail(valid.message());
  auto in = [&](const std::string& override, const char* name) {
    return !override.empty() ? override : (std::filesystem::path(config.certs) / name).string();
  };
  if (config.certs.empty() && (config.ca.empty() || config.cert.empty() || config.key.empty()))
    return fail("give --certs DIR, or all of --ca, --cert and --key");
  auto identity =
      net::loadIdentity(in(config.ca, "ca.crt"), in(config.cert, "coordinator.crt"), in(config.key, "coordinator.key"));
  if (!identity) return fail(identity.status().message());
  if (auto own = net::describeCertificate(identity->certPem); !own) {
    return fail(own.status().message());
  } else if (net::Role role = net::roleFromOu(own->organizationalUnit, net::Role::kCoordinator);
             role != net::Role::kCoordinator) {
    return fail(
        fmt::format("{}: the certificate of {} states the role '{}': only a coordinator certificate "
                    "(starling-coordinator init) can run the coordinator",
                    in(config.cert, "coordinator.crt"), own->commonName, own->organizationalUnit));
  }
  // The revocation list: --crl, else crl.pem beside the certificates if there is one.
  std::string crlPath = config.crl;
  if (crlPath.empty() && !config.certs.empty() &&
      std::filesystem::exists(std::filesystem::path(config.certs) / "crl.pem"))
    crlPath = (std::filesystem::path(config.certs) / "crl.pem").string();
  if (!crlPath.empty()) {
    auto crl = net::readTextFile(crlPath, "revocation list");
    if (!crl) return fail(crl.status().message());
    identity->crlPem = std::move(*crl);
  }
  // An empty file stands for a list that revokes nothing (the systemd unit hands one
  // over when /etc/starling/certs has no crl.pem yet).
  if (!crlPath.empty() && identity->crlPem.find_first_not_of(" \t\r\n") == std::string::npos) {
    (*log)->info("revocation list {} is empty: no certificate revoked", crlPath);
    identity->crlPem.clear();
    crlPath.clear();
  }
  if (!crlPath.empty()) {
    auto serials = net::checkRevocationList(identity->caPem, identity->crlPem);
    if (!serials) return fail(crlPath + ": " + serials.status().message());
    (*log)->info("revocation list {}: {} certificate(s) revoked", crlPath, serials->size());
  }
  // The database first: a state directory that cannot be written is reported as the
  // database's problem, before the ticket key file beside it is tried.
  auto store = coordinator::Store::open(config.db);
  if (!store) return fail(store.status().message());
  net::TlsOptions tlsOptions;
  tlsOptions.resumption = config.tlsResumption;
  if (config.tlsResumption && config.tlsPersistTicketKeys && config.db != ":memory:") {
    const std::string path = !config.tlsTicketKeyFile.empty() ? config.tlsTicketKeyFile : config.db + ".ticket-keys";
    auto keys = net::SessionTicketKeys::open(path, tlsOptions.ticketLifetime);
    if (!keys) return fail(keys.status().message());
    (*log)->info("TLS session ticket keys {} {} (clients resume their sessions across restarts)",
                 (*keys)->reloaded() ? "reloaded from" : "written to", path);
    tlsOptions.ticketKeys = std::move(*keys);
  }
  auto tls = net::TlsContext::create(net::TlsRole::kServer, *identity, {}, tlsOptions);
  if (!tls) return fail(tls.status().message());
  auto listen = net::parseEndpoint(config.listen);
  if (!listen) return fail(listen.status().message());

  // Every connection runs on its own strand and the rounds on the federation's, so
  // the io_context can run on several threads: TLS handshakes and record encryption
  // for different clients proceed in parallel.
  const unsigned threads =
      config.threads > 0 ? config.threads : std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
  asio::io_context io(static_cast<int>(threads));
  coordinator::TaskConfig task = config.task;
  task.heartbeatMs = config.heartbeatMs;  // Welcome tells clients the period
  // The dashboard's view starts from every round already recorded (a restart shows them).
  std::shared_ptr<coordinator::LiveState> live;
  std::optional<net::Endpoint> httpAt;
  bool httpTls = false;
  if (!config.http.empty()) {
    // A port alone is this machine's: 127.0.0.1:PORT.
    const bool portOnly =
        std::all_of(config.http.begin(), config.http.end(), [](char c) { return c >= '0' && c <= '9'; });
    auto at = net::parseEndpoint(portOnly ? "127.0.0.1:" + config.http : config.http);
    if (!at) return fail("server.http: " + at.status().message());
    httpAt = *at;
    if (config.httpTls != "auto" && config.httpTls != "on" && config.httpTls != "off")
      return fail(fmt::format("server.http-tls '{}': must be auto, on or off", config.httpTls));
    httpTls = config.httpTls == "on" || (config.httpTls == "auto" && !coordinator::isLoopback(at->host));
    auto history = coordinator::loadReport(**store);
    if (!history) return fail(history.status().message());
    live = std::make_shared<coordinator::LiveState>(coordinator::DashboardTask{
        config.task.name, config.task.model, config.task.kind, config.engine.mode, config.engine.rounds,
        config.engine.clientsPerRound, config.engine.clipNorm > 0, config.db});
    live->seed(*history);
  }
  auto federation = coordinator::Federation::create(io, config.engine, task, std::move(*store), *log);
  if (!federation) return fail(federation.status().message());
  if (live) (*federation)->setObserver(live);
  if (Status st = (*federation)->setTestHooks(testHooks); !st) return fail(st.message());

  coordinator::ServerOptions options;
  options.listen = *listen;
  options.limits.maxFrameBytes = config.maxFrameBytes;
  options.limits.handshakeTimeout = std::chrono::milliseconds(config.handshakeTimeoutMs);
  options.limits.frameTimeout = std::chrono::milliseconds(config.frameTimeoutMs);
  // A client is silent while it trains: it may take up to the round's deadline,
  // then answers the heartbeat it missed.
  options.heartbeatMs = config.heartbeatMs;
  options.limits.idleTimeout = std::chrono::milliseconds(
      std::max<int64_t>(config.idleTimeoutMs, config.engine.deadlineMs + 2 * int64_t(config.heartbeatMs)));
  options.maxConnections = config.maxConnections;
  if (config.listenBacklog < 1)
    return fail(fmt::format("--listen-backlog {}: must be at least 1", config.listenBacklog));
  options.listenBacklog = config.listenBacklog;
  options.task = config.task.name;
  options.modelSpec = config.task.model;
  coordinator::Server server(io, *tls, options, *log, *federation);
  auto port = server.start();
  if (!port) return fail(port.status().message());
  std::unique_ptr<coordinator::Dashboard> dashboard;
  if (live) {
    coordinator::DashboardOptions dashboardOptions;
    dashboardOptions.listen = *httpAt;
    if (httpTls) dashboardOptions.tls = *tls;
    dashboardOptions.handshakeTimeout = std::chrono::milliseconds(config.handshakeTimeoutMs);
    auto started = coordinator::Dashboard::start(io, dashboardOptions, live, &server.counters(), *log);
    if (!started) {
      server.stop();
      return fail(started.status().message());
    }
    dashboard = std::move(*started);
  }

  int exitCode = 0;
  asio::signal_set signals(asio::make_strand(io), SIGINT, SIGTERM);
  // Every trim-heap-ms, if connections came or went since the last time: free heap
  // pages go back to the kernel (malloc_trim). A burst of handshakes frees its
  // temporaries between the buffers of live connections, and glibc's heap would keep
  // those pages resident (docs/reliability.md, "10,000 clients"). On the signals' strand.
  asio::steady_timer trimTimer(signals.get_executor());
  std::pair<uint64_t, uint64_t> trimmedAt{0, 0};  // (accepted, active) at the last trim
  bool trimStopped = false;
  std::function<void()> armTrim = [&] {
    trimTimer.expires_after(std::chrono::milliseconds(config.trimHeapMs));
    trimTimer.async_wait([&](const std::error_code& ec) {
      if (ec || trimStopped) return;
      const std::pair<uint64_t, uint64_t> now{server.counters().accepted.load(), server.counters().active.load()};
      if (now != trimmedAt) {
        trimmedAt = now;
        malloc_trim(0);
      }
      armTrim();
    });
  };
  // Once training has ended, on the signals' strand: the dashboard (after
  // server.http-linger-ms, unless a signal ended training), the signal wait and the
  // trim timer stop, and io.run() returns.
  asio::steady_timer lingerTimer(signals.get_executor());
  bool ended = false, signalled = false;
  const auto stopRest = [&] {
    if (dashboard) dashboard->stop();
    std::error_code ignored;
    signals.cancel(ignored);
    trimStopped = true;
    trimTimer.cancel();
    lingerTimer.cancel();
  };
  (*federation)->onFinished([&](const Status& st) {
    if (!st && st.code() != StatusCode::kClosed) {
      (*log)->error("stopping: {}", st.message());
      exitCode = 1;
    }
    server.stop();
    // On the signals' strand, as this runs on the federation's.
    asio::post(signals.get_executor(), [&] {
      ended = true;
      if (!dashboard || config.httpLingerMs <= 0 || signalled) return stopRest();
      (*log)->info("training has ended; the dashboard stays up for {} ms (server.http-linger-ms) or until a signal",
                   config.httpLingerMs);
      lingerTimer.expires_after(std::chrono::milliseconds(config.httpLingerMs));
      lingerTimer.async_wait([&](const std::error_code& ec) {
        if (!ec) stopRest();
      });
    });
  });
  signals.async_wait([&](const std::error_code& ec, int signo) {
    if (ec) return;
    if (ended) return stopRest();  // the dashboard was lingering
    signalled = true;
    (*federation)->shutdown(fmt::format("signal {}", signo));
  });
  if ((*federation)->engine().finished()) {
    (*log)->info("training already complete ({} rounds committed in {})", (*federation)->engine().commits(), config.db);
    server.stop();
    stopRest();
  } else if (config.trimHeapMs > 0)
    asio::post(signals.get_executor(), armTrim);
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads; ++i)
    pool.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& t : pool)
    t.join();
  const auto& c = server.counters();
  (*log)->info("stopped: {} connections, {} joined, {} refused, {} dropped", c.accepted.load(), c.joined.load(),
               c.refused.load(), c.dropped.load());
  return exitCode;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"starling-coordinator: orchestrates a Starling federation over mutual TLS"};
  app.set_version_flag("--version", STARLING_VERSION);
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  std::string logLevel = "info";
  app.add_option("--log-level", logLevel, "trace, debug, info, warn, error or off");

  net::InitOptions init;
  std::vector<std::string> hostnames;
  std::vector<std::string> relayHostnames;
  auto* initCmd =
      app.add_subcommand("init", "create a CA and certificates for the coordinator, N clients and M relays");
  initCmd->add_option("--out", init.outDir, "directory to write the certificates to")->required();
  initCmd->add_option("--clients", init.clients, "number of client certificates (client-0 .. client-N-1)");
  initCmd->add_option("--operators", init.operators,
                      "number of operator certificates (operator-0 ..): the dashboard beyond localhost (server.http)");
  initCmd->add_option("--relays", init.relays,
                      "number of relay certificates (relay-0 .. relay-M-1, for starling-relay: a server to its "
                      "clients, a client of the coordinator)");
  initCmd->add_option("--relay-hostname", relayHostnames,
                      "host name every relay answers to, besides relay-<i> (repeatable; default: localhost and "
                      "127.0.0.1)");
  initCmd->add_option("--hostname", hostnames,
                      "host name the coordinator answers to (repeatable; default: localhost and 127.0.0.1)");
  initCmd->add_option("--days", init.days, "validity of the coordinator and client certificates in days");

  coordinator::DaemonConfig config;
  std::string configFile;
  auto* runCmd = app.add_subcommand("run", "run the coordinator daemon (a file sets options, flags override it)");
  runCmd->option_defaults()->always_capture_default();
  runCmd->add_option("--config", configFile, "TOML file with [task] [train] [compression] [eval] [output] [server]");
  coordinator::ConfigBinder binder(*runCmd, config);
  // Test-only (tests/cli/crash_points_test.sh), hidden from --help.
  coordinator::FederationTestHooks testHooks;
  runCmd->add_option("--test-crash-at", testHooks.crashAt, "exit at a named point of closing a round")->group("");
  runCmd->add_option("--test-audit", testHooks.auditOut, "write the sums applied per client here")->group("");

  net::RevokeOptions revoke;
  auto* revokeCmd = app.add_subcommand("revoke", "add client certificates to the CA's revocation list (crl.pem)");
  revokeCmd->add_option("--certs", revoke.certsDir, "directory with ca.crt and ca.key (and the clients' .crt)")
      ->required();
  revokeCmd->add_option("--client", revoke.clients, "client to revoke: its certificate is DIR/ID.crt (repeatable)");
  revokeCmd->add_option("--cert", revoke.certFiles, "a certificate file to revoke (repeatable)");
  revokeCmd->add_option("--crl", revoke.crlPath, "revocation list to update (default: DIR/crl.pem)");
  revokeCmd->add_option("--days", revoke.days, "the list's validity; revoke with no --client renews it");

  std::string db = "starling.db";
  std::string format = "table";
  auto* reportCmd = app.add_subcommand("report", "print rounds, traffic, accuracy, tau and stragglers from a database");
  reportCmd->add_option("--db", db, "the coordinator's SQLite database")->required();
  reportCmd->add_option("--format", format, "table, csv or json");
  std::string reportHtml;
  reportCmd->add_option("--html", reportHtml,
                        "write a self-contained HTML page (plots, stragglers, rounds) to this file instead");

  std::string exportDb, exportModel, exportFormat = "onnx", exportOut;
  auto* exportCmd = app.add_subcommand("export", "write the trained model as ONNX (or a Starling model file)");
  exportCmd->add_option("--db", exportDb, "the coordinator's SQLite database: its last checkpoint's model");
  exportCmd->add_option("--model-file", exportModel, "a Starling model file (output.model-file) instead");
  exportCmd->add_option("--format", exportFormat, "onnx (IR 8, opset 17) or starling");
  exportCmd->add_option("--out", exportOut, "file to write")->required();

  PlacementArgs placement;
  auto* placementCmd = app.add_subcommand(
      "placement", "place clients on relays (and rows on shards) from their row sets: METIS vs random vs hash");
  placementCmd->add_option("--row-sets", placement.rowSets, "file with one client per line: CLIENT_ID ROW ROW ...");
  placementCmd->add_option("--db", placement.dbs,
                           "or: the row sets clients offered (starling-client --sparse-rows), from these coordinator "
                           "and relay databases");
  placementCmd->add_option("--relays", placement.relays, "number of relays")->required();
  placementCmd->add_option("--shards", placement.shards, "number of coordinator shards to place the rows on (0: none)");
  placementCmd->add_option("--method", placement.method, "client placement written to --out: metis, random or hash");
  placementCmd->add_option("--shard-method", placement.shardMethod,
                           "row placement written to --out: range, hash, lpt or metis");
  placementCmd->add_option("--graph", placement.graph,
                           "the graph METIS partitions: bipartite-volume, bipartite-cut or clients");
  placementCmd->add_option("--tolerance", placement.tolerance, "allowed imbalance of relay sizes and shard loads");
  placementCmd->add_option("--refine-passes", placement.refinePasses,
                           "passes of greedy client moves on the traffic after METIS (0: METIS alone)");
  placementCmd->add_option("--universe", placement.universe, "rows must be below this (0: the largest row + 1)");
  placementCmd->add_option("--seed", placement.seed, "seed of random's shuffle and of METIS");
  placementCmd->add_option("--out", placement.out, "write the chosen placement here (client ID RELAY, row ROW SHARD)");

  CLI11_PARSE(app, argc, argv);
  if (placementCmd->parsed()) return runPlacement(placement);
  if (exportCmd->parsed()) return runExport(exportDb, exportModel, exportFormat, exportOut);
  if (initCmd->parsed()) {
    if (!hostnames.empty()) init.hostnames = hostnames;
    if (!relayHostnames.empty()) init.relayHostnames = relayHostnames;
    return runInit(init);
  }
  if (reportCmd->parsed()) return runReport(db, format, reportHtml);
  if (revokeCmd->parsed()) return runRevoke(revoke);
  if (!configFile.empty()) {
    Status st = binder.applyFile(configFile);
    if (!st) return fail(st.message());
  }
  return runDaemon(config, testHooks, logLevel);
}
