#pragma once
// Dashboard: the coordinator's own HTTP port (server.http, off by default) serving the
// live page, its JSON and plots, and /metrics (docs/dashboard.md).
//
// HTTP is civetweb's (Debian's libcivetweb): it parses every request; Starling only
// routes them. On a loopback address civetweb listens itself, in plain HTTP: whoever
// can reach the port is on this machine. Anywhere else, only operators get in: the
// port is a mutual-TLS front on the coordinator's own TLS stack (mbedTLS under Asio,
// the task's CA), and a peer whose certificate does not state the operator role
// (`starling-coordinator init --operators N`) is answered 403 and closed; an
// operator's bytes are relayed to civetweb on a loopback port.
//
// Threading: civetweb's threads read the LiveState and the server's counters (both
// thread-safe); the TLS front runs on the io_context it is given.

#include <spdlog/logger.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "starling/coordinator/server.hpp"
#include "starling/net/connection.hpp"
#include "starling/net/tls_context.hpp"
#include "starling/net/tls_stream.hpp"

#include "live_state.hpp"

struct mg_context;
struct mg_connection;
struct mg_request_info;

namespace starling::coordinator {

struct DashboardOptions {
  net::Endpoint listen{"127.0.0.1", 0};
  // The coordinator's server context (it asks every peer for a certificate of the
  // task's CA): the TLS front uses it. Null: plain HTTP, which only a loopback address
  // may use.
  std::shared_ptr<const net::TlsContext> tls;
  std::chrono::milliseconds handshakeTimeout{10'000};
  // An operator's connection idle this long is closed.
  std::chrono::milliseconds idleTimeout{120'000};
  unsigned threads = 4;  // civetweb's worker threads
  // TLS front: connections open at once (handshaking or relaying); beyond, closed at once.
  std::size_t maxConnections = 64;
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool isLoopback(const std::string& host);

class Dashboard {
 public:
  // Listens and serves. Refuses plain HTTP on an address that is not a loopback one.
  static Result<std::unique_ptr<Dashboard>> start(asio::io_context& io, DashboardOptions options,
                                                  std::shared_ptr<const LiveState> state, const ServerCounters* server,
                                                  std::shared_ptr<spdlog::logger> log);
  ~Dashboard();
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  // The port operators connect to.
  uint16_t port() const { return port_; }
  // civetweb's own port (port() without the TLS front).
  uint16_t httpPort() const { return httpPort_; }
  // Stops: civetweb's threads are joined (after the requests they are serving), the TLS
  // front's listener and open connections are closed on their executors. The
  // io_context must run until they are; the Dashboard must outlive it.
  void stop();

  struct Counters {
    std::atomic<uint64_t> requests{0};
    std::atomic<uint64_t> refusedPeers{0};      // TLS front: a certificate without the operator role
    std::atomic<uint64_t> failedHandshakes{0};  // TLS front
  };
  const Counters& counters() const { return counters_; }

 private:
  Dashboard(asio::io_context& io, DashboardOptions options, std::shared_ptr<const LiveState> state,
            const ServerCounters* server, std::shared_ptr<spdlog::logger> log);
  static int handle(mg_connection* conn, void* self);
  int serve(mg_connection* conn);
  bool admitted(const mg_request_info* request);
  Status startFront();
  asio::awaitable<void> acceptLoop();
  asio::awaitable<void> relay(asio::ip::tcp::socket socket);

  asio::io_context& io_;
  DashboardOptions options_;
  std::shared_ptr<const LiveState> state_;
  const ServerCounters* server_;
  std::shared_ptr<spdlog::logger> log_;
  mg_context* http_ = nullptr;
  uint16_t httpPort_ = 0;  // civetweb's
  uint16_t port_ = 0;      // operators'
  asio::ip::tcp::acceptor acceptor_;
  std::atomic<bool> stopping_{false};
  Counters counters_;
  // A front connection in relays_ (and its port to civetweb in frontPorts_) while it
  // lasts; removed when the relay coroutine ends.
  class Registered {
   public:
    Registered(Dashboard& self, uint64_t relay) : self_(self), relay_(relay) {}
    ~Registered();
    Registered(const Registered&) = delete;
    Registered& operator=(const Registered&) = delete;
    void usePort(uint16_t port) const;

   private:
    Dashboard& self_;
    uint64_t relay_;
    mutable std::optional<uint16_t> port_;
  };
  bool front_ = false;                                        // the TLS front runs (set before any request)
  std::mutex mu_;                                             // guards relays_ and frontPorts_
  std::map<uint64_t, std::weak_ptr<net::TlsStream>> relays_;  // the TLS front's open connections, closed by stop()
  uint64_t nextRelay_ = 0;
  std::set<uint16_t> frontPorts_;  // local ports of the front's connections to civetweb
};

}  // namespace starling::coordinator
