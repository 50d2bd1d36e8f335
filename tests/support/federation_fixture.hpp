#pragma once
// Test support: a real coordinator Server on 127.0.0.1 (port 0) running on its own
// thread, certificates made in memory, a log that tests can search, and a way to
// run a client coroutine to completion on the test's thread.

#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "starling/coordinator/server.hpp"
#include "starling/net/certificates.hpp"
#include "starling/net/tls_context.hpp"

namespace starling::testing {

// An spdlog sink that keeps every line, for assertions on what was logged.
class CaptureSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  bool contains(const std::string& text) {
    std::lock_guard lock(mutex_);
    for (const auto& l : lines_)
      if (l.find(text) != std::string::npos) return true;
    return false;
  }
  std::string all() {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& l : lines_)
      out += l + "\n";
    return out;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    lines_.emplace_back(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}

 private:
  std::vector<std::string> lines_;
};

// A CA with a coordinator certificate for "localhost" and helpers to issue more.
struct Pki {
  net::KeyPair ca;
  net::KeyPair coordinator;
  std::string crlPem;  // the coordinator's revocation list, if any

  static std::chrono::system_clock::time_point now() { return std::chrono::system_clock::now(); }

  explicit Pki(std::vector<std::string> hostnames = {"localhost"}) {
    using std::chrono::hours;
    ca = net::makeCertificateAuthority({net::CertificateKind::kCa, "Test CA", {}, now() - hours(1), now() + hours(48)})
             .value();
    coordinator = net::issueCertificate(ca, {net::CertificateKind::kServer, hostnames.front(), hostnames,
                                             now() - hours(1), now() + hours(24)})
                      .value();
  }
  net::KeyPair client(const std::string& name, std::chrono::hours validFrom = std::chrono::hours(-1),
                      std::chrono::hours validTo = std::chrono::hours(24)) const {
    return net::issueCertificate(ca, {net::CertificateKind::kClient, name, {}, now() + validFrom, now() + validTo})
        .value();
  }
  net::KeyPair relay(const std::string& name, std::vector<std::string> hostnames = {"localhost"}) const {
    using std::chrono::hours;
    return net::issueCertificate(ca,
                                 {net::CertificateKind::kRelay, name, hostnames, now() - hours(1), now() + hours(24)})
        .value();
  }
  net::TlsIdentity serverIdentity() const { return {ca.certPem, coordinator.certPem, coordinator.keyPem, crlPem}; }
  net::TlsIdentity clientIdentity(const net::KeyPair& kp) const { return {ca.certPem, kp.certPem, kp.keyPem, {}}; }
  std::shared_ptr<const net::TlsContext> clientContext(const net::KeyPair& kp,
                                                       std::string serverName = "localhost") const {
    return net::TlsContext::create(net::TlsRole::kClient, clientIdentity(kp), std::move(serverName)).value();
  }
};

// A coordinator Server on its own io_context thread.
class RunningServer {
 public:
  explicit RunningServer(const Pki& pki) : RunningServer(pki, defaultOptions()) {}
  RunningServer(const Pki& pki, coordinator::ServerOptions options) : sink_(std::make_shared<CaptureSink>()) {
    options.listen.host = "127.0.0.1";
    options.listen.port = 0;
    log_ = std::make_shared<spdlog::logger>("coordinator", sink_);
    log_->set_level(spdlog::level::debug);
    auto tls = net::TlsContext::create(net::TlsRole::kServer, pki.serverIdentity()).value();
    server_ = std::make_unique<coordinator::Server>(io_, tls, options, log_);
    port_ = server_->start().value();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~RunningServer() {
    server_->stop();
    thread_.join();
    if (std::getenv("STARLING_TEST_LOG") != nullptr)
      std::fprintf(stderr, "--- coordinator log ---\n%s", sink_->all().c_str());
  }
  RunningServer(const RunningServer&) = delete;
  RunningServer& operator=(const RunningServer&) = delete;

  net::Endpoint endpoint() const { return {"127.0.0.1", port_}; }
  const coordinator::ServerCounters& counters() const { return server_->counters(); }
  CaptureSink& log() { return *sink_; }

  // Waits (up to `limit`) until pred() holds; returns whether it did.
  template <typename Pred>
  bool waitFor(Pred pred, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return pred();
  }

 private:
  static coordinator::ServerOptions defaultOptions() {
    coordinator::ServerOptions options;
    return options;
  }
  asio::io_context io_;
  std::shared_ptr<CaptureSink> sink_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<coordinator::Server> server_;
  uint16_t port_ = 0;
  std::thread thread_;
};

// Runs a coroutine on io (on this thread) until it finishes and returns its value.
// Other work on io (a connection's watchdog, say) may stay pending.
template <typename Factory>
auto runOn(asio::io_context& io, Factory factory) {
  using Awaitable = decltype(factory(io.get_executor()));
  using T = typename Awaitable::value_type;
  std::optional<T> out;
  std::exception_ptr error;
  bool done = false;
  asio::co_spawn(io, factory(io.get_executor()), [&](std::exception_ptr e, T value) {
    error = e;
    if (!e) out.emplace(std::move(value));
    done = true;
  });
  io.restart();
  while (!done && io.run_one() > 0) {
  }
  if (error) std::rethrow_exception(error);
  return std::move(*out);
}

// Runs a coroutine on a fresh io_context on this thread and returns its value.
template <typename Factory>
auto runCoroutine(Factory factory) {
  asio::io_context io;
  return runOn(io, std::move(factory));
}

inline std::shared_ptr<spdlog::logger> quietLogger() {
  auto log = std::make_shared<spdlog::logger>("client", std::make_shared<CaptureSink>());
  return log;
}

}  // namespace starling::testing
