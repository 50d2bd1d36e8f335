// starling-relay: between a Starling coordinator and its own clients (docs/relay.md).
//
//   starling-relay --coordinator HOST:PORT --listen HOST:PORT --certs DIR --id relay-<i> --db FILE
//                  [--clients-per-round K] [--local-rounds L] [--deadline-ms MS] ...
//
// To the coordinator it is a client (its certificate's role says relay); to its clients
// it is a coordinator, with the coordinator's task. For each assignment from the
// coordinator it adopts the global model, runs --local-rounds rounds with its clients
// (their updates aggregated, the model broadcast down compressed with its own memory),
// and sends the difference its rounds made upwards, compressed with its own uplink
// memory, as a client sends its update. Its rounds, clients and stragglers go to its own
// SQLite file; restarted, it resumes from it. With --upstream-relay its upstream may be
// another relay (three tiers).
#include <CLI/CLI.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "starling/client/participant.hpp"
#include "starling/compression/row_set.hpp"
#include "starling/coordinator/federation.hpp"
#include "starling/coordinator/server.hpp"
#include "starling/coordinator/store.hpp"
#include "starling/model/model.hpp"
#include "starling/model/row_view.hpp"
#include "starling/net/certificates.hpp"
#include "starling/net/tls_context.hpp"
#include "starling/util/checksum.hpp"
#include "starling/util/log.hpp"

#include "task.hpp"

namespace {

using namespace starling;

int fail(const std::string& message) {
  std::cerr << "starling-relay: " << message << "\n";
  return 1;
}

// The relay's downstream side, made once the coordinator's Welcome names the task.
class Downstream {
 public:
  Downstream(std::string self, std::shared_ptr<const net::TlsContext> tls, coordinator::ServerOptions server,
             relay::RelayRounds rounds, std::string db, unsigned threads, bool sparseRows,
             std::shared_ptr<spdlog::logger> log)
      : self_(std::move(self)),
        sparse_(sparseRows),
        io_(static_cast<int>(threads)),
        tls_(std::move(tls)),
        serverOptions_(std::move(server)),
        rounds_(rounds),
        db_(std::move(db)),
        threads_(threads),
        log_(std::move(log)) {}
  Downstream(const Downstream&) = delete;
  Downstream& operator=(const Downstream&) = delete;
  ~Downstream() { stop("the relay is stopping"); }

  // The coordinator's Welcome: the first starts the federation for its clients; a later
  // one (a reconnect) must name the same task.
  Status welcome(const wire::WelcomeMsg& w) {
    std::lock_guard lock(mu_);
    if (federation_) {
      if (w.task != task_ || w.modelSpec != model_)
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("the coordinator's task is now '{}' ({}), this relay serves '{}' ({}): restart it",
                                  w.task, w.modelSpec, task_, model_));
      return takeRows(w);
    }
    auto configs = relay::downstreamTask(w, rounds_);
    if (!configs) return configs.status();
    auto store = coordinator::Store::open(db_);
    if (!store) return store.status();
    auto federation = coordinator::Federation::create(io_, configs->first, configs->second, std::move(*store), log_);
    if (!federation) return federation.status();
    federation_ = std::move(*federation);
    federation_->holdForUpstream();
    serverOptions_.task = w.task;
    serverOptions_.modelSpec = w.modelSpec;
    server_ = std::make_unique<coordinator::Server>(io_, tls_, serverOptions_, log_, federation_);
    auto port = server_->start();
    if (!port) return port.status();
    task_ = w.task;
    model_ = w.modelSpec;
    // The relay's model as its federation holds it (resumed, or round 0): the rows its
    // coordinator does not send when sparse (no client here trains them).
    full_.assign(federation_->engine().model().begin(), federation_->engine().model().end());
    if (Status st = takeRows(w); !st) return st;
    federation_->onFinished([this](const Status& st) {
      if (!st && st.code() != StatusCode::kClosed) log_->error("the relay's federation stopped: {}", st.message());
      server_->stop();
    });
    for (unsigned i = 0; i < threads_; ++i)
      pool_.emplace_back([this] { io_.run(); });
    log_->info("serving task '{}' ({}) to clients: {} per round, {} local round(s) per assignment", w.task, w.modelSpec,
               rounds_.clientsPerRound, rounds_.localRounds);
    return Status::ok();
  }

  // The coordinator's assignment: its model through local rounds, the difference up.
  Result<client::LocalUpdate> work(client::Learner& learner, const wire::RoundAssignMsg& assign) {
    std::shared_ptr<coordinator::Federation> federation;
    {
      std::lock_guard lock(mu_);
      federation = federation_;
    }
    if (!federation) return Status(StatusCode::kInternal, "an assignment before the relay's federation started");
    // The coordinator's placement of clients on relays: those placed elsewhere are
    // redirected before these local rounds.
    if (assign.placementVersion > 0) federation->applyPlacement(self_, assign.placement, assign.placementVersion);
    const auto started = std::chrono::steady_clock::now();
    auto done = std::make_shared<std::promise<Result<coordinator::LocalRounds>>>();
    auto got = done->get_future();
    // Sparse upstream: the Learner holds the compact model of the declared rows; the
    // other rows are the relay's own (no client here trains them).
    std::vector<float> base;
    if (view_) {
      if (learner.model().size() != view_->size())
        return Status(StatusCode::kInternal, fmt::format("the relay holds {} values, its rows' view has {}",
                                                         learner.model().size(), view_->size()));
      view_->scatter(learner.model(), full_);
      base = full_;
    } else {
      base.assign(learner.model().begin(), learner.model().end());
    }
    // The coordinator's tau and lr for this assignment (its ADACOMM, its decay) are the
    // local rounds' own.
    federation->trainLocalRounds(std::move(base), rounds_.localRounds,
                                 coordinator::RoundEngine::UpstreamPace{assign.tau, assign.lr},
                                 [done](Result<coordinator::LocalRounds> r) { done->set_value(std::move(r)); });
    // An update after the coordinator's deadline would only be late: at 90% of it the
    // relay stops waiting (the local round in flight is abandoned by the next
    // assignment) and sends nothing this time.
    if (assign.deadlineMs > 0 &&
        got.wait_for(std::chrono::milliseconds(assign.deadlineMs * 9 / 10)) != std::future_status::ready) {
      federation->cancelLocalRounds();
      return Status(StatusCode::kTimeout,
                    fmt::format("the local rounds for round {} did not end within 90% of the coordinator's "
                                "deadline ({} ms): no update this time",
                                assign.round, assign.deadlineMs));
    }
    auto rounds = got.get();
    if (!rounds) return rounds.status().withContext("the relay's local rounds");
    if (rounds->examples == 0)  // every update of its rounds refused: nothing to send, as at a timeout
      return Status(StatusCode::kTimeout,
                    fmt::format("the local rounds for round {} applied no update: no update this time", assign.round));
    client::TrainStats stats;
    stats.steps = static_cast<int>(rounds->steps);
    stats.examples = rounds->examples;
    stats.lossStart = rounds->lossStart;
    stats.lossEnd = rounds->lossEnd;
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    log_->info("round {}: {} local round(s), {} examples a round, loss {:.4f} -> {:.4f}; model {:016x} up",
               assign.round, rounds->rounds, rounds->examples, rounds->lossStart, rounds->lossEnd,
               checksum64(rounds->model));
    full_ = rounds->model;
    wire::RoundAssignMsg a = assign;
    if (sparse_ && inputs_ > 0) {
      // The rows this relay's clients train now: when they are not the declared ones,
      // this update carries the whole uplink memory (density 1: nothing held back is
      // lost), and once it is accepted the relay joins again offering them.
      std::optional<std::vector<uint32_t>> want = declared_;
      if (rounds->anyDense)
        want.reset();
      else if (!rounds->clientRows.empty())
        want = rounds->clientRows;
      next_ = want;
      if (want != declared_) {
        a.density = 1.0f;
        flushRound_ = assign.round;
        log_->info("round {}: the clients' rows changed ({} -> {}); this update flushes the uplink memory",
                   assign.round, rowsName(declared_), rowsName(want));
      } else {
        flushRound_.reset();
      }
    }
    auto update =
        view_ ? learner.submit(a, view_->gather(rounds->model), stats) : learner.submit(a, rounds->model, stats);
    if (update && flushRound_ && *flushRound_ == assign.round) {
      // Top-k and rand-k send everything at density 1; another uplink compressor (or
      // fewer mantissa bits) leaves a residual, which the new compact model cannot hold.
      double left = 0;
      for (float v : learner.memory())
        left += double(v) * double(v);
      if (left > 0)
        log_->warn(
            "round {}: the flushing update leaves uplink memory of norm {:.3g}; it is dropped when the relay "
            "joins again with its new rows",
            assign.round, std::sqrt(left));
    }
    // Its clients and their rows go up when they changed, for the coordinator's placement.
    std::vector<wire::MemberRowsMsg> members;
    members.reserve(rounds->members.size());
    for (auto& m : rounds->members)
      members.push_back({std::move(m.id), std::move(m.rowSet), m.rowBucket});
    if (update && members != sentMembers_) {
      update->members = members;
      sentMembers_ = std::move(members);
    }
    return update;
  }

  // --sparse-rows: what the relay offers in its next Hello (its clients' rows, once
  // known), and whether to join again after the verdict on `round` (its flushing update,
  // accepted).
  std::optional<client::RowOffer> upstreamOffer() {
    offered_.reset();
    // While the flushing update awaits its verdict (a connection lost meanwhile), the
    // relay joins with the rows it holds: a Learner of the same rows settles that update
    // as any reconnect does (rolled back into the memory when it was not applied).
    const std::optional<std::vector<uint32_t>>& rows = flushRound_ ? declared_ : next_;
    if (!rows || inputs_ == 0) return std::nullopt;
    auto set = compression::RowSet::fromSorted(*rows, static_cast<uint32_t>(inputs_));
    if (!set) {
      log_->error("the clients' rows: {}", set.status().message());
      return std::nullopt;
    }
    client::RowOffer offer;
    offer.bucket = 1;
    offer.bytes = compression::encodeRowSet(*set);
    offer.covered = *rows;
    offer.touched = rows->size();
    offered_ = rows;
    log_->info("offering the coordinator the {} rows this relay's clients train ({} bytes)", rows->size(),
               offer.bytes.size());
    return offer;
  }
  bool rejoinAfter(uint64_t round, bool accepted) {
    if (!flushRound_ || *flushRound_ != round) return false;
    if (!accepted) return false;  // the memory is back: the next update flushes again
    flushRound_.reset();
    return true;
  }

  // The coordinator's task is complete: the relay's clients are told, and it stops.
  void complete() {
    std::shared_ptr<coordinator::Federation> federation;
    {
      std::lock_guard lock(mu_);
      federation = federation_;
    }
    if (federation) federation->complete();
    join();
  }

  void stop(const std::string& reason) {
    std::shared_ptr<coordinator::Federation> federation;
    {
      std::lock_guard lock(mu_);
      federation = federation_;
    }
    if (federation) federation->shutdown(reason);
    join();
  }

 private:
  void join() {
    for (auto& t : pool_)
      if (t.joinable()) t.join();
  }

  static std::string rowsName(const std::optional<std::vector<uint32_t>>& rows) {
    return rows ? fmt::format("{} rows", rows->size()) : std::string("the whole model");
  }

  // A Welcome: the rows the coordinator took (those offered, when it says sparse_rows)
  // become the relay's view and the rows its federation lets clients train.
  Status takeRows(const wire::WelcomeMsg& w) {
    sentMembers_.reset();  // a new session: the coordinator is told again
    if (!sparse_) return Status::ok();
    if (inputs_ == 0) {
      auto m = model::Model::fromSpec(w.modelSpec);
      if (!m) return m.status();
      if (!m->acceptsSparse()) {
        log_->warn("--sparse-rows: the model {} has no first-layer rows; the relay trains the whole model",
                   w.modelSpec);
        sparse_ = false;
        return Status::ok();
      }
      inputs_ = m->inputDim();
      fullModel_ = std::make_shared<const model::Model>(std::move(*m));
    }
    if (offered_ && !w.sparseRows) {
      log_->warn("the coordinator trains the whole model with this relay (it did not take the rows offered)");
      sparse_ = false;
    }
    declared_ = w.sparseRows ? offered_ : std::nullopt;
    next_ = declared_;
    view_.reset();
    if (declared_) {
      auto view = model::RowView::create(*fullModel_, *declared_);
      if (!view) return view.status();
      view_ = *view;
    }
    federation_->setUpstreamRows(declared_);
    return Status::ok();
  }

  std::string self_;  // this relay's identity: the placement names relays by it
  bool sparse_;       // --sparse-rows
  asio::io_context io_;
  std::shared_ptr<const net::TlsContext> tls_;
  coordinator::ServerOptions serverOptions_;
  relay::RelayRounds rounds_;
  std::string db_;
  unsigned threads_;
  std::shared_ptr<spdlog::logger> log_;
  std::mutex mu_;
  std::shared_ptr<coordinator::Federation> federation_;
  std::unique_ptr<coordinator::Server> server_;
  std::string task_, model_;
  std::vector<std::thread> pool_;
  // --sparse-rows (used on the upstream thread only): the model's inputs (0 until the
  // first Welcome), the rows offered in the last Hello, taken in its Welcome, and to
  // offer next (nullopt: the whole model); the taken rows' view; the relay's whole model;
  // the round of the update that flushes the memory before joining with new rows.
  std::size_t inputs_ = 0;
  std::shared_ptr<const model::Model> fullModel_;
  std::optional<std::vector<uint32_t>> offered_, declared_, next_;
  std::shared_ptr<const model::RowView> view_;
  std::vector<float> full_;
  std::optional<uint64_t> flushRound_;
  // The clients and rows last sent up in an Update of this session (Update.members).
  std::optional<std::vector<wire::MemberRowsMsg>> sentMembers_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"starling-relay: between a Starling coordinator and its own clients"};
  app.set_version_flag("--version", STARLING_VERSION);
  app.option_defaults()->always_capture_default();
  std::string coordinatorAddr, listenAddr = "127.0.0.1:7444", certs, id, ca, cert, key, serverName, crl;
  std::string db = "relay.db", logLevel = "info";
  relay::RelayRounds rounds;
  int64_t handshakeTimeoutMs = 10'000;
  unsigned threads = 2;
  bool upstreamRelay = false, sparseRows = false;
  app.add_option("--coordinator", coordinatorAddr, "the coordinator's address, HOST:PORT")->required();
  app.add_option("--listen", listenAddr, "address the relay's clients connect to, HOST:PORT");
  std::string advertise;
  app.add_option("--advertise", advertise,
                 "the address its clients reach it at, HOST:PORT, sent to the coordinator for its placement of clients "
                 "on relays (default: --listen, unless its port is 0)");
  app.add_option("--certs", certs, "directory with ca.crt and <id>.crt / <id>.key (and crl.pem, if any)");
  app.add_option("--id", id, "this relay's name, e.g. relay-0 (picks <id>.crt and <id>.key in --certs)");
  app.add_option("--ca", ca, "CA certificate (overrides --certs)");
  app.add_option("--cert", cert, "relay certificate (overrides --certs)");
  app.add_option("--key", key, "relay private key (overrides --certs)");
  app.add_option("--crl", crl, "the CA's revocation list for the relay's clients (default: crl.pem in --certs)");
  app.add_option("--server-name", serverName,
                 "host name expected in the coordinator's certificate (default: the host of --coordinator)");
  bool noResumption = false;
  app.add_flag("--no-tls-resumption", noResumption,
               "full TLS handshakes only: the relay offers no session ticket upstream and issues none to its clients");
  app.add_option("--db", db, "SQLite database of the relay's rounds, clients and stragglers; resumed when it exists");
  app.add_option("--clients-per-round", rounds.clientsPerRound, "updates that close one of the relay's rounds (K)")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--over-selection", rounds.overSelection, "assign each local round to ceil(K x this) clients")
      ->check(CLI::Range(1.0, 10.0));
  app.add_option("--min-clients", rounds.minClients, "idle clients needed to start a local round (0 = K)");
  app.add_option("--deadline-ms", rounds.deadlineMs, "time from assignment to a local round's deadline")
      ->check(CLI::Range(int64_t(100), int64_t(86'400'000)));
  app.add_option("--local-rounds", rounds.localRounds,
                 "rounds with the relay's clients for each assignment from the coordinator")
      ->check(CLI::Range(1u, 10'000u));
  app.add_option("--heartbeat-ms", rounds.heartbeatMs, "a quiet client connection gets a heartbeat this often");
  app.add_option("--handshake-timeout-ms", handshakeTimeoutMs, "time allowed for a TLS handshake, both ways");
  app.add_option("--threads", threads, "threads serving the relay's clients")->check(CLI::Range(1u, 64u));
  app.add_flag("--upstream-relay", upstreamRelay,
               "--coordinator may be another relay (three tiers: coordinator <- relay <- this relay <- clients)");
  app.add_flag("--sparse-rows", sparseRows,
               "train upstream only the rows this relay's clients train (the union of their row sets, "
               "starling-client --sparse-rows): the coordinator sends and takes those rows only; a client with "
               "other rows waits until the relay has joined again offering them (docs/sparse.md)");
  app.add_option("--log-level", logLevel, "trace, debug, info, warn, error or off");
  CLI11_PARSE(app, argc, argv);

  auto log = makeLogger(id.empty() ? "relay" : id, logLevel);
  if (!log) return fail(log.status().message());
  auto upstream = net::parseEndpoint(coordinatorAddr);
  if (!upstream) return fail("--coordinator: " + upstream.status().message());
  auto listen = net::parseEndpoint(listenAddr);
  if (!listen) return fail("--listen: " + listen.status().message());
  if ((cert.empty() || key.empty()) && (certs.empty() || id.empty()))
    return fail("give --certs DIR and --id NAME, or --ca, --cert and --key");
  if (ca.empty() && certs.empty()) return fail("give --certs DIR or --ca FILE");
  auto in = [&](const std::string& override, const std::string& name) {
    return !override.empty() ? override : (std::filesystem::path(certs) / name).string();
  };
  const std::string certPath = in(cert, id + ".crt");
  auto identity = net::loadIdentity(in(ca, "ca.crt"), certPath, in(key, id + ".key"));
  if (!identity) return fail(identity.status().message());
  auto own = net::describeCertificate(identity->certPem);
  if (!own) return fail(certPath + ": " + own.status().message());
  if (net::roleFromOu(own->organizationalUnit, net::Role::kClient) != net::Role::kRelay)
    return fail(
        fmt::format("{}: the certificate of {} states the role '{}': only a relay certificate "
                    "(starling-coordinator init --relays N) can run a relay",
                    certPath, own->commonName, own->organizationalUnit.empty() ? "client" : own->organizationalUnit));
  net::TlsOptions tlsOptions;
  tlsOptions.resumption = !noResumption;
  auto upTls = net::TlsContext::create(net::TlsRole::kClient, *identity,
                                       serverName.empty() ? upstream->host : serverName, tlsOptions);
  if (!upTls) return fail(upTls.status().message());
  std::string crlPath = crl;
  if (crlPath.empty() && !certs.empty() && std::filesystem::exists(std::filesystem::path(certs) / "crl.pem"))
    crlPath = (std::filesystem::path(certs) / "crl.pem").string();
  net::TlsIdentity downIdentity = *identity;
  if (!crlPath.empty()) {
    auto list = net::readTextFile(crlPath, "revocation list");
    if (!list) return fail(list.status().message());
    // An empty file revokes nothing (the systemd unit's stand-in when there is no crl.pem).
    if (list->find_first_not_of(" \t\r\n") != std::string::npos) downIdentity.crlPem = std::move(*list);
  }
  auto downTls = net::TlsContext::create(net::TlsRole::kServer, downIdentity, {}, tlsOptions);
  if (!downTls) return fail(downTls.status().message());

  coordinator::ServerOptions serverOptions;
  serverOptions.listen = *listen;
  serverOptions.heartbeatMs = rounds.heartbeatMs;
  serverOptions.limits.handshakeTimeout = std::chrono::milliseconds(handshakeTimeoutMs);
  serverOptions.limits.idleTimeout =
      std::chrono::milliseconds(std::max<int64_t>(120'000, rounds.deadlineMs + 2 * int64_t(rounds.heartbeatMs)));
  Downstream down(own->commonName, *downTls, serverOptions, rounds, db, threads, sparseRows, *log);

  client::ParticipantOptions options;
  options.coordinator = *upstream;
  options.id = own->commonName;
  options.limits.handshakeTimeout = std::chrono::milliseconds(handshakeTimeoutMs);
  // A relay upstream only when asked (--upstream-relay: three tiers): otherwise a relay
  // mistaken for the coordinator is refused by name.
  // The coordinator's placement sends other relays' clients here by this address: a
  // --listen on port 0 has none to give until it serves, so none is said then.
  options.advertise = !advertise.empty() ? advertise : listen->port != 0 ? listen->toString() : std::string();
  if (options.advertise.empty())
    (*log)->info(
        "--listen has port 0 and no --advertise is given: the coordinator's placement cannot send clients "
        "to this relay");
  options.serverRoles = {net::Role::kCoordinator};
  if (upstreamRelay) options.serverRoles.push_back(net::Role::kRelay);
  options.onWelcome = [&down](const wire::WelcomeMsg& w) { return down.welcome(w); };
  options.localWork = [&down](client::Learner& learner, const wire::RoundAssignMsg& a) {
    return down.work(learner, a);
  };
  if (sparseRows) {
    options.rowSource = [&down] { return down.upstreamOffer(); };
    options.rejoinAfter = [&down](uint64_t round, bool accepted) { return down.rejoinAfter(round, accepted); };
  }
  const data::Dataset noData;  // the relay's clients hold the data
  client::Participant participant(noData, options, *log);

  asio::io_context io(1);
  std::optional<Status> outcome;
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const std::error_code& ec, int signo) {
    if (ec) return;
    (*log)->info("signal {}: stopping", signo);
    io.stop();
  });
  asio::co_spawn(io, participant.run(io.get_executor(), *upTls), [&](std::exception_ptr e, Status st) {
    if (e) std::rethrow_exception(e);
    outcome.emplace(std::move(st));
    std::error_code ignored;
    signals.cancel(ignored);
  });
  io.run();
  if (outcome && outcome->isOk()) {
    down.complete();
    (*log)->info("the coordinator's training is complete");
    return 0;
  }
  down.stop(outcome ? outcome->message() : "stopped by a signal");
  if (outcome) return fail(outcome->message());
  return 0;
}
