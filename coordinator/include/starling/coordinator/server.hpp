#pragma once
// Server: the coordinator's TLS front door. Accepts connections, one coroutine per
// connection on its own strand, authenticates each client by its certificate and
// hands every verified message to a SessionHandler. Policy (what a round is) lives
// in the handler; the server owns sockets, limits and write queues.
//
// Without a handler the server runs the walking skeleton: it answers Hello with a
// Welcome naming the task and model, Heartbeat with Heartbeat, and logs Bye.
//
// Threading: start()/stop() from any thread; the io_context may be run by several
// threads. Handler callbacks come on the session's strand. Counters are atomics.

#include <spdlog/logger.h>

#include <array>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <deque>
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
  // Connections the kernel queues for accept. Short on purpose: a connection that waits
  // in the queue longer than the client's handshake timeout is dead when accepted, and
  // a long queue of dead ones keeps every live one waiting too (docs/reliability.md,
  // "10,000 clients"); beyond it the kernel drops the SYN and the client retries.
  int listenBacklog = 128;
  std::string task = "walking-skeleton";
  std::string modelSpec = "mlp:784-200-200-10";
  uint32_t heartbeatMs = 30'000;
};

struct ServerCounters {
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> joined{0};   // sessions that sent a valid first message
  std::atomic<uint64_t> refused{0};  // TLS handshake failed
  std::atomic<uint64_t> dropped{0};  // closed for a bad frame, timeout or protocol error
  std::atomic<uint64_t> active{0};
  // `dropped` by the kind of error, indexed by StatusCode.
  std::array<std::atomic<uint64_t>, kStatusCodeCount> droppedBy{};
  void drop(StatusCode why) {
    ++dropped;
    ++droppedBy[static_cast<std::size_t>(why)];
  }
};

// Resolves `at`, opens, binds (reusing the address) and listens with `backlog`; the
// bound port (useful with port 0). Errors name the address.
Result<uint16_t> listenOn(asio::ip::tcp::acceptor& acceptor, const net::Endpoint& at, int backlog);

// A complete frame (wire/messages.hpp makes them), shared by the sessions it goes to.
using Frame = std::shared_ptr<const wire::Frame>;

// One authenticated connection. send() and close() may be called from any thread.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // heartbeat: a Heartbeat is written when nothing else was for this long (0 = never),
  // so that a live client has something to answer and an idle link stays open.
  Session(std::shared_ptr<net::TlsStream> stream, net::ConnectionLimits limits, uint64_t id,
          std::chrono::milliseconds heartbeat = std::chrono::milliseconds(0));

  uint64_t id() const { return id_; }
  // The identity proven by the client's certificate ("client-3").
  const std::string& clientId() const { return conn_.peer().commonName; }
  const net::PeerIdentity& peer() const { return conn_.peer(); }

  // Queues a complete frame; frames are written in the order queued.
  void send(Frame frame);
  // Flushes what is queued, then closes.
  void close();
  // Frames queued and not yet written, and their bytes.
  std::size_t queuedBytes() const { return queuedBytes_.load(); }

 private:
  friend class Server;
  // Holds self so the session outlives its queue.
  asio::awaitable<void> writer(std::shared_ptr<Session> self);

  net::Connection conn_;
  uint64_t id_;
  std::chrono::milliseconds heartbeat_;
  asio::steady_timer wake_;
  std::deque<Frame> queue_;  // on the strand only
  bool closing_ = false;
  bool writerDone_ = false;
  std::atomic<std::size_t> queuedBytes_{0};
};

// What the server calls for each session. Called on the session's strand.
class SessionHandler {
 public:
  virtual ~SessionHandler() = default;
  // A verified message from the client.
  virtual void onMessage(const std::shared_ptr<Session>& session, wire::Message message) = 0;
  // The session ended: why says how (kClosed for a clean goodbye or disconnect).
  virtual void onClosed(const std::shared_ptr<Session>& session, const Status& why) = 0;
};

class Server {
 public:
  Server(asio::io_context& io, std::shared_ptr<const net::TlsContext> tls, ServerOptions options,
         std::shared_ptr<spdlog::logger> log, std::shared_ptr<SessionHandler> handler = nullptr);
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
  asio::awaitable<void> serve(std::shared_ptr<Session> session);
  asio::awaitable<Status> answerSkeleton(Session& session, const wire::Message& msg, bool& done);

  asio::io_context& io_;
  std::shared_ptr<const net::TlsContext> tls_;
  ServerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<SessionHandler> handler_;
  asio::ip::tcp::acceptor acceptor_;
  ServerCounters counters_;
  std::mutex mu_;  // guards live_
  std::map<uint64_t, std::weak_ptr<Session>> live_;
  uint64_t nextId_ = 0;
  std::atomic<bool> stopping_{false};
};

}  // namespace starling::coordinator
