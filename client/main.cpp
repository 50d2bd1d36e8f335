// starling-client: the Starling client for a device.
//
//   starling-client --coordinator HOST:PORT --certs DIR --id client-<i>

#include <CLI/CLI.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <filesystem>
#include <iostream>
#include <optional>

#include "starling/client/protocol_client.hpp"
#include "starling/util/log.hpp"

namespace {

using namespace starling;

int fail(const std::string& message) {
  std::cerr << "starling-client: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"starling-client: trains on local data for a Starling coordinator"};
  app.option_defaults()->always_capture_default();
  std::string coordinatorAddr;
  std::string certs;
  std::string id;
  std::string ca, cert, key;
  std::string serverName;
  std::string logLevel = "info";
  int64_t handshakeTimeoutMs = 10'000;
  uint64_t numExamples = 0;
  app.add_option("--coordinator", coordinatorAddr, "coordinator address, HOST:PORT")->required();
  app.add_option("--certs", certs, "directory with ca.crt and <id>.crt / <id>.key");
  app.add_option("--id", id, "this client's name, e.g. client-3 (picks <id>.crt and <id>.key in --certs)");
  app.add_option("--ca", ca, "CA certificate (overrides --certs)");
  app.add_option("--cert", cert, "client certificate (overrides --certs)");
  app.add_option("--key", key, "client private key (overrides --certs)");
  app.add_option("--server-name", serverName,
                 "host name expected in the coordinator's certificate (default: the host of --coordinator)");
  app.add_option("--handshake-timeout-ms", handshakeTimeoutMs, "time allowed for connecting and the TLS handshake");
  app.add_option("--examples", numExamples, "number of local examples reported to the coordinator");
  app.add_option("--log-level", logLevel, "trace, debug, info, warn, error or off");
  CLI11_PARSE(app, argc, argv);

  auto log = makeLogger(id.empty() ? "client" : id, logLevel);
  if (!log) return fail(log.status().message());
  auto endpoint = net::parseEndpoint(coordinatorAddr);
  if (!endpoint) return fail(endpoint.status().message());
  auto in = [&](const std::string& override, const std::string& name) -> std::string {
    if (!override.empty()) return override;
    return (std::filesystem::path(certs) / name).string();
  };
  if ((cert.empty() || key.empty()) && (certs.empty() || id.empty()))
    return fail("give --certs DIR and --id NAME, or --ca, --cert and --key");
  if (ca.empty() && certs.empty()) return fail("give --certs DIR or --ca FILE");
  auto identity = net::loadIdentity(in(ca, "ca.crt"), in(cert, id + ".crt"), in(key, id + ".key"));
  if (!identity) return fail(identity.status().message());
  auto tls =
      net::TlsContext::create(net::TlsRole::kClient, *identity, serverName.empty() ? endpoint->host : serverName);
  if (!tls) return fail(tls.status().message());

  client::ClientOptions options;
  options.coordinator = *endpoint;
  options.id = id;
  options.numExamples = numExamples;
  options.limits.handshakeTimeout = std::chrono::milliseconds(handshakeTimeoutMs);

  asio::io_context io(1);
  std::optional<Result<client::Task>> outcome;
  asio::co_spawn(io, client::joinAndLeave(io.get_executor(), *tls, options, *log),
                 [&](std::exception_ptr e, Result<client::Task> r) {
                   if (e) std::rethrow_exception(e);
                   outcome.emplace(std::move(r));
                 });
  io.run();
  if (!outcome || !*outcome) return fail(outcome ? outcome->status().message() : "stopped before finishing");
  return 0;
}
