// starling-coordinator: the daemon that orchestrates a Starling federation.
//
//   starling-coordinator init --out DIR --clients N [--hostname H]... [--days D]
//   starling-coordinator run --certs DIR --listen HOST:PORT

#include <CLI/CLI.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <filesystem>
#include <iostream>
#include <thread>
#include <vector>

#include "starling/coordinator/server.hpp"
#include "starling/net/certificates.hpp"
#include "starling/util/log.hpp"

namespace {

using namespace starling;

int fail(const std::string& message) {
  std::cerr << "starling-coordinator: " << message << "\n";
  return 1;
}

struct RunFlags {
  std::string certs;
  std::string ca, cert, key;  // override the files in --certs
  std::string listen = "127.0.0.1:7443";
  uint32_t maxFrameBytes = wire::kDefaultMaxFrameBytes;
  int64_t handshakeTimeoutMs = 10'000;
  int64_t idleTimeoutMs = 120'000;
  std::size_t maxConnections = 10'000;
  unsigned threads = 1;
};

int runInit(const net::InitOptions& options) {
  Status st = net::writeCertificateDirectory(options);
  if (!st) return fail(st.message());
  std::cout << "wrote ca.crt, ca.key, coordinator.crt, coordinator.key";
  if (options.clients > 0) std::cout << " and client-0.." << options.clients - 1 << " .crt/.key";
  std::cout << " to " << options.outDir << "\n";
  return 0;
}

int runDaemon(const RunFlags& flags, const std::string& logLevel) {
  auto log = makeLogger("coordinator", logLevel);
  if (!log) return fail(log.status().message());
  auto in = [&](const std::string& override, const char* name) {
    return !override.empty() ? override : (std::filesystem::path(flags.certs) / name).string();
  };
  if (flags.certs.empty() && (flags.ca.empty() || flags.cert.empty() || flags.key.empty()))
    return fail("give --certs DIR, or all of --ca, --cert and --key");
  auto identity =
      net::loadIdentity(in(flags.ca, "ca.crt"), in(flags.cert, "coordinator.crt"), in(flags.key, "coordinator.key"));
  if (!identity) return fail(identity.status().message());
  auto tls = net::TlsContext::create(net::TlsRole::kServer, *identity);
  if (!tls) return fail(tls.status().message());
  auto listen = net::parseEndpoint(flags.listen);
  if (!listen) return fail(listen.status().message());

  coordinator::ServerOptions options;
  options.listen = *listen;
  options.limits.maxFrameBytes = flags.maxFrameBytes;
  options.limits.handshakeTimeout = std::chrono::milliseconds(flags.handshakeTimeoutMs);
  options.limits.idleTimeout = std::chrono::milliseconds(flags.idleTimeoutMs);
  options.maxConnections = flags.maxConnections;

  asio::io_context io(static_cast<int>(flags.threads));
  coordinator::Server server(io, *tls, options, *log);
  auto port = server.start();
  if (!port) return fail(port.status().message());

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const std::error_code& ec, int signo) {
    if (ec) return;
    (*log)->info("signal {} received, shutting down", signo);
    server.stop();
  });
  std::vector<std::thread> workers;
  for (unsigned i = 1; i < flags.threads; ++i)
    workers.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& t : workers)
    t.join();
  const auto& c = server.counters();
  (*log)->info("stopped: {} connections, {} joined, {} refused, {} dropped", c.accepted.load(), c.joined.load(),
               c.refused.load(), c.dropped.load());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"starling-coordinator: orchestrates a Starling federation over mutual TLS"};
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  std::string logLevel = "info";
  app.add_option("--log-level", logLevel, "trace, debug, info, warn, error or off");

  net::InitOptions init;
  std::vector<std::string> hostnames;
  auto* initCmd = app.add_subcommand("init", "create a CA and certificates for the coordinator and N clients");
  initCmd->add_option("--out", init.outDir, "directory to write the certificates to")->required();
  initCmd->add_option("--clients", init.clients, "number of client certificates (client-0 .. client-N-1)");
  initCmd->add_option("--hostname", hostnames,
                      "host name the coordinator answers to (repeatable; default: localhost and 127.0.0.1)");
  initCmd->add_option("--days", init.days, "validity of the coordinator and client certificates in days");

  RunFlags run;
  auto* runCmd = app.add_subcommand("run", "run the coordinator daemon");
  runCmd->add_option("--certs", run.certs, "directory with ca.crt, coordinator.crt and coordinator.key");
  runCmd->add_option("--ca", run.ca, "CA certificate (overrides --certs)");
  runCmd->add_option("--cert", run.cert, "coordinator certificate (overrides --certs)");
  runCmd->add_option("--key", run.key, "coordinator private key (overrides --certs)");
  runCmd->add_option("--listen", run.listen, "address to listen on, HOST:PORT");
  runCmd->add_option("--max-frame-bytes", run.maxFrameBytes, "largest frame accepted from a client");
  runCmd->add_option("--handshake-timeout-ms", run.handshakeTimeoutMs, "time a client has to finish the TLS handshake");
  runCmd->add_option("--idle-timeout-ms", run.idleTimeoutMs, "a client silent this long is disconnected");
  runCmd->add_option("--max-connections", run.maxConnections, "connections beyond this are closed at once");
  runCmd->add_option("--threads", run.threads, "threads running the network")->check(CLI::Range(1u, 256u));

  CLI11_PARSE(app, argc, argv);
  if (initCmd->parsed()) {
    if (!hostnames.empty()) init.hostnames = hostnames;
    return runInit(init);
  }
  return runDaemon(run, logLevel);
}
