#pragma once
// Server: the coordinator's TLS front door. Accepts connections, one coroutine per
// connection on its own strand, authenticates each client by its certificate and
// answers its messages. Policy (what a round is) lives elsewhere; the server owns
// sockets, limits and the per-connection protocol state.
//
// Threading: start()/stop() from any thread; the io_context may be run by several
// threads. Counters are atomics.

#include <spdlog/logger.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "starling/net/connection.hpp"

namespace starling::coordinator {

struct ServerOptions {
  net::Endpoint listen{"127.0.0.1", 7443};
  net::ConnectionLimits limits;
  std::size_t maxConnections = 10'000;  // beyond this, new connections are closed at once
  std::string task = "walking-skeleton";
  std::string modelSpec = "mlp:784-200-200-10";
  uint32_t heartbeatMs = 30'000;
};

struct ServerCounters {
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> joined{0};   // Hello answered with Welcome
  std::atomic<uint64_t> refused{0};  // TLS handshake failed
  std::atomic<uint64_t> dropped{0};  // closed for a bad frame, timeout or protocol error
  std::atomic<uint64_t> active{0};
};

class Server {
 public:
  Server(asio::io_context& io, std::shared_ptr<const net::TlsContext> tls, ServerOptions options,
         std::shared_ptr<spdlog::logger> log);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts accepting; returns the bound port (useful with port 0).
  Result<uint16_t> start();
  // Stops accepting and closes every connection; the io_context then runs dry.
  void stop();

  const ServerCounters& counters() const { return counters_; }

 private:
  asio::awaitable<void> acceptLoop();
  asio::awaitable<void> serve(std::shared_ptr<net::TlsStream> stream, uint64_t id);
  asio::awaitable<Status> answer(net::Connection& conn, const wire::Message& msg, bool& done);

  asio::io_context& io_;
  std::shared_ptr<const net::TlsContext> tls_;
  ServerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  asio::ip::tcp::acceptor acceptor_;
  ServerCounters counters_;
  std::mutex mu_;  // guards live_
  std::map<uint64_t, std::weak_ptr<net::TlsStream>> live_;
  uint64_t nextId_ = 0;
  std::atomic<bool> stopping_{false};
};

}  // namespace starling::coordinator
