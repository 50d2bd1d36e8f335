#include "starling/coordinator/server.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>

#include "starling/coordinator/task.hpp"
#include "starling/net/certificates.hpp"
#include "starling/wire/messages.hpp"

namespace starling::coordinator {
namespace fb = wire::fb;

namespace {

constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

// The wire error code that tells a peer why its connection is being closed.
fb::ErrorCode wireCode(StatusCode code) {
  switch (code) {
    case StatusCode::kMalformed:
      return fb::ErrorCode::Malformed;
    case StatusCode::kOutOfRange:
      return fb::ErrorCode::TooLarge;
    case StatusCode::kUnsupported:
      return fb::ErrorCode::UnsupportedVersion;
    default:
      return fb::ErrorCode::Internal;
  }
}

}  // namespace

Session::Session(std::shared_ptr<net::TlsStream> stream, net::ConnectionLimits limits, uint64_t id,
                 std::chrono::milliseconds heartbeat)
    : conn_(std::move(stream), limits), id_(id), heartbeat_(heartbeat), wake_(conn_.stream().executor()) {
  wake_.expires_at(asio::steady_timer::time_point::max());
}

void Session::send(Frame frame) {
  queuedBytes_ += frame->size();
  asio::post(wake_.get_executor(), [self = shared_from_this(), frame = std::move(frame)]() mutable {
    if (self->closing_ || self->writerDone_) {
      self->queuedBytes_ -= frame->size();
      return;
    }
    self->queue_.push_back(std::move(frame));
    self->wake_.cancel();
  });
}

void Session::close() {
  asio::post(wake_.get_executor(), [self = shared_from_this()] {
    self->closing_ = true;
    self->wake_.cancel();
  });
}

asio::awaitable<void> Session::writer(std::shared_ptr<Session> self) {
  (void)self;
  for (;;) {
    while (!queue_.empty()) {
      Frame frame = std::move(queue_.front());
      queue_.pop_front();
      Status st = co_await conn_.send(frame->bytes());
      queuedBytes_ -= frame->size();
      if (!st) {
        closing_ = true;
        break;
      }
    }
    if (closing_) break;
    if (heartbeat_.count() > 0)
      wake_.expires_after(heartbeat_);
    else
      wake_.expires_at(asio::steady_timer::time_point::max());
    auto [ec] = co_await wake_.async_wait(kAsTuple);
    if (!ec && queue_.empty() && !closing_) {
      // Quiet for a whole period: a heartbeat, which the client answers.
      const auto now =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch());
      auto frame = std::make_shared<const wire::Frame>(wire::encode(wire::HeartbeatMsg{uint64_t(now.count())}));
      queuedBytes_ += frame->size();
      queue_.push_back(std::move(frame));
    }
  }
  writerDone_ = true;
  for (const auto& f : queue_)
    queuedBytes_ -= f->size();
  queue_.clear();
  co_await conn_.close();
}

Server::Server(asio::io_context& io, std::shared_ptr<const net::TlsContext> tls, ServerOptions options,
               std::shared_ptr<spdlog::logger> log, std::shared_ptr<SessionHandler> handler)
    : io_(io),
      tls_(std::move(tls)),
      options_(std::move(options)),
      log_(std::move(log)),
      handler_(std::move(handler)),
      acceptor_(asio::make_strand(io)) {}

Server::~Server() {
  stop();
}

Result<uint16_t> listenOn(asio::ip::tcp::acceptor& acceptor, const net::Endpoint& at, int backlog) {
  std::error_code ec;
  auto address = asio::ip::make_address(at.host, ec);
  if (ec) {
    asio::ip::tcp::resolver resolver(acceptor.get_executor());
    auto results = resolver.resolve(at.host, std::to_string(at.port), ec);
    if (ec || results.empty())
      return Status(StatusCode::kInvalidArgument, fmt::format("cannot resolve listen address '{}'", at.host));
    address = results.begin()->endpoint().address();
  }
  asio::ip::tcp::endpoint endpoint(address, at.port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(backlog, ec);
  if (ec) return Status(StatusCode::kIo, fmt::format("cannot listen on {}: {}", at.toString(), ec.message()));
  return acceptor.local_endpoint().port();
}

Result<uint16_t> Server::start() {
  auto listening = listenOn(acceptor_, options_.listen, options_.listenBacklog);
  if (!listening) return listening.status();
  const uint16_t port = *listening;
  const auto address = acceptor_.local_endpoint().address();
  asio::co_spawn(acceptor_.get_executor(), acceptLoop(), asio::detached);
  log_->info("listening on {}:{} (mutual TLS, max frame {} bytes)", address.to_string(), port,
             options_.limits.maxFrameBytes);
  return port;
}

void Server::stop() {
  if (stopping_.exchange(true)) return;
  asio::post(acceptor_.get_executor(), [this] {
    std::error_code ec;
    acceptor_.close(ec);
  });
  std::lock_guard lock(mu_);
  for (auto& [id, weak] : live_) {
    if (auto session = weak.lock()) session->close();
  }
}

asio::awaitable<void> Server::acceptLoop() {
  while (!stopping_) {
    auto [ec, socket] = co_await acceptor_.async_accept(asio::make_strand(io_), kAsTuple);
    if (ec) {
      if (stopping_ || ec == asio::error::operation_aborted) break;
      log_->warn("accept failed: {}", ec.message());
      continue;
    }
    ++counters_.accepted;
    if (counters_.active.load() >= options_.maxConnections) {
      log_->warn("refusing a connection: {} connections already open (limit)", options_.maxConnections);
      continue;  // the socket closes as it goes out of scope
    }
    std::error_code ignored;
    socket.set_option(asio::ip::tcp::no_delay(true), ignored);
    auto made = net::TlsStream::create(std::move(socket), tls_);
    if (!made) {
      // This connection cannot be served (the socket closes with it); the next may be.
      ++counters_.refused;
      log_->warn("refusing a connection: {}", made.status().message());
      continue;
    }
    std::shared_ptr<net::TlsStream> stream = std::move(*made);
    std::shared_ptr<Session> session;
    {
      std::lock_guard lock(mu_);
      session = std::make_shared<Session>(stream, options_.limits, nextId_++,
                                          std::chrono::milliseconds(handler_ ? options_.heartbeatMs : 0));
      live_.emplace(session->id(), session);
    }
    ++counters_.active;
    asio::co_spawn(stream->executor(), serve(session), asio::detached);
  }
}

asio::awaitable<void> Server::serve(std::shared_ptr<Session> session) {
  net::Connection& conn = session->conn_;
  const std::string address = conn.stream().peer().address;
  Status st = co_await conn.handshake();
  Status why(StatusCode::kClosed, "closed");
  bool handshaken = st.isOk();
  if (!st) {
    ++counters_.refused;
    log_->warn("refused {}: {}", address, st.message());
  } else {
    asio::co_spawn(conn.stream().executor(), session->writer(session), asio::detached);
    const std::string who = conn.peer().commonName;
    bool done = false;
    bool first = true;
    while (!done && !stopping_) {
      auto msg = co_await conn.receive();
      if (!msg) {
        why = msg.status();
        if (why.code() == StatusCode::kClosed) {
          log_->info("{} disconnected", who);
        } else {
          counters_.drop(why.code());
          log_->warn("closing the connection to {} ({}): {}", who, address, why.message());
          if (why.code() != StatusCode::kTimeout && why.code() != StatusCode::kIo)
            session->send(
                std::make_shared<const wire::Frame>(wire::encode(wire::ErrorMsg{wireCode(why.code()), why.message()})));
        }
        break;
      }
      if (first) {
        first = false;
        ++counters_.joined;
      }
      if (handler_) {
        if (msg->type() == fb::Body::Bye) {
          auto bye = wire::parseBye(*msg);
          why = Status(StatusCode::kClosed,
                       fmt::format("left: {}", bye && !bye->reason.empty() ? bye->reason : "no reason given"));
          log_->info("{} {}", who, why.message());
          break;
        }
        handler_->onMessage(session, std::move(*msg));
        continue;
      }
      st = co_await answerSkeleton(*session, *msg, done);
      if (!st) {
        counters_.drop(st.code());
        why = st;
        log_->warn("closing the connection to {} ({}): {}", who, address, st.message());
        break;
      }
    }
  }
  if (handshaken) {
    if (handler_) handler_->onClosed(session, why);
    session->close();
  } else {
    co_await conn.close();
  }
  --counters_.active;
  std::lock_guard lock(mu_);
  live_.erase(session->id());
}

asio::awaitable<Status> Server::answerSkeleton(Session& session, const wire::Message& msg, bool& done) {
  net::Connection& conn = session.conn_;
  const std::string& who = conn.peer().commonName;
  switch (msg.type()) {
    case fb::Body::Hello: {
      auto hello = wire::parseHello(msg);
      if (!hello) co_return hello.status();
      if (!hello->clientId.empty() && who != hello->clientId)
        log_->warn("{} says it is '{}'; the certificate decides: {}", who, hello->clientId, who);
      // The Welcome of a default task (coordinator/task.hpp) with this server's names.
      TaskConfig task;
      task.name = options_.task;
      task.model = options_.modelSpec;
      task.heartbeatMs = options_.heartbeatMs;
      wire::WelcomeMsg welcome = taskWelcome(EngineConfig{}, task);
      welcome.clientId = who;
      const wire::Frame welcomeFrame = wire::encode(welcome);
      Status st = co_await conn.send(welcomeFrame.bytes());
      if (st) {
        log_->info("{} joined from {} ({} examples, role {}, certificate sha256 {}, {}{})", who, conn.peer().address,
                   hello->numExamples, net::roleName(net::roleFromOu(conn.peer().role, net::Role::kClient)),
                   conn.peer().fingerprint.substr(0, 16), conn.peer().cipherSuite,
                   conn.peer().resumed ? ", resumed session" : "");
      }
      co_return st;
    }
    case fb::Body::Heartbeat: {
      auto beat = wire::parseHeartbeat(msg);
      if (!beat) co_return beat.status();
      const wire::Frame beatFrame = wire::encode(*beat);
      co_return co_await conn.send(beatFrame.bytes());
    }
    case fb::Body::Bye: {
      auto bye = wire::parseBye(msg);
      log_->info("{} left: {}", who, bye && !bye->reason.empty() ? bye->reason : "no reason given");
      done = true;
      co_return Status::ok();
    }
    default: {
      std::string why = fmt::format("unexpected {} message from a client", msg.typeName());
      const wire::Frame errorFrame = wire::encode(wire::ErrorMsg{fb::ErrorCode::Unexpected, why});
      (void)co_await conn.send(errorFrame.bytes());
      co_return Status(StatusCode::kMalformed, why);
    }
  }
}

}  // namespace starling::coordinator
