#include "starling/coordinator/server.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>

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

Server::Server(asio::io_context& io, std::shared_ptr<const net::TlsContext> tls, ServerOptions options,
               std::shared_ptr<spdlog::logger> log)
    : io_(io), tls_(std::move(tls)), options_(std::move(options)), log_(std::move(log)), acceptor_(io) {}

Server::~Server() {
  stop();
}

Result<uint16_t> Server::start() {
  std::error_code ec;
  auto address = asio::ip::make_address(options_.listen.host, ec);
  if (ec) {
    asio::ip::tcp::resolver resolver(io_);
    auto results = resolver.resolve(options_.listen.host, std::to_string(options_.listen.port), ec);
    if (ec || results.empty())
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("cannot resolve listen address '{}'", options_.listen.host));
    address = results.begin()->endpoint().address();
  }
  asio::ip::tcp::endpoint endpoint(address, options_.listen.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Status(StatusCode::kIo, fmt::format("cannot listen on {}: {}", options_.listen.toString(), ec.message()));
  const uint16_t port = acceptor_.local_endpoint().port();
  asio::co_spawn(io_, acceptLoop(), asio::detached);
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
    if (auto stream = weak.lock()) asio::post(stream->executor(), [stream] { stream->close(); });
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
    auto stream = std::make_shared<net::TlsStream>(std::move(socket), tls_);
    uint64_t id;
    {
      std::lock_guard lock(mu_);
      id = nextId_++;
      live_.emplace(id, stream);
    }
    ++counters_.active;
    asio::co_spawn(stream->executor(), serve(stream, id), asio::detached);
  }
}

asio::awaitable<void> Server::serve(std::shared_ptr<net::TlsStream> stream, uint64_t id) {
  net::Connection conn(stream, options_.limits);
  const std::string address = stream->peer().address;
  Status st = co_await conn.handshake();
  if (!st) {
    ++counters_.refused;
    log_->warn("refused {}: {}", address, st.message());
  } else {
    const std::string who = conn.peer().commonName;
    bool done = false;
    while (!done && !stopping_) {
      auto msg = co_await conn.receive();
      if (!msg) {
        const Status& why = msg.status();
        if (why.code() == StatusCode::kClosed) {
          log_->info("{} disconnected", who);
        } else {
          ++counters_.dropped;
          log_->warn("closing the connection to {} ({}): {}", who, address, why.message());
          if (why.code() != StatusCode::kTimeout && why.code() != StatusCode::kIo) {
            auto frame = wire::makeErrorFrame(wireCode(why.code()), why.message());
            (void)co_await conn.send(frame);
          }
        }
        break;
      }
      st = co_await answer(conn, *msg, done);
      if (!st) {
        ++counters_.dropped;
        log_->warn("closing the connection to {} ({}): {}", who, address, st.message());
        break;
      }
    }
  }
  co_await conn.close();
  --counters_.active;
  std::lock_guard lock(mu_);
  live_.erase(id);
}

asio::awaitable<Status> Server::answer(net::Connection& conn, const wire::Message& msg, bool& done) {
  const std::string& who = conn.peer().commonName;
  flatbuffers::FlatBufferBuilder b(1024);
  switch (msg.type()) {
    case fb::Body::Hello: {
      const auto* hello = msg.as<fb::Hello>();
      const char* claimed = hello->client_id() != nullptr ? hello->client_id()->c_str() : "";
      if (*claimed != '\0' && who != claimed)
        log_->warn("{} says it is '{}'; the certificate decides: {}", who, claimed, who);
      auto hyper = fb::CreateHyperParameters(b, 0.05f, 0.0f, 0.0f, 32, 1, 0.0f);
      auto welcome = fb::CreateWelcomeDirect(b, who.c_str(), options_.task.c_str(), options_.modelSpec.c_str(), hyper,
                                             0, 0, 0, 0, options_.heartbeatMs);
      Status st = co_await conn.send(wire::finishFrame(b, welcome));
      if (st) {
        ++counters_.joined;
        log_->info("{} joined from {} ({} examples, certificate sha256 {})", who, conn.peer().address,
                   hello->num_examples(), conn.peer().fingerprint.substr(0, 16));
      }
      co_return st;
    }
    case fb::Body::Heartbeat: {
      auto beat = fb::CreateHeartbeat(b, msg.as<fb::Heartbeat>()->sent_ms());
      co_return co_await conn.send(wire::finishFrame(b, beat));
    }
    case fb::Body::Bye: {
      const auto* bye = msg.as<fb::Bye>();
      log_->info("{} left: {}", who, bye->reason() != nullptr ? bye->reason()->str() : "no reason given");
      done = true;
      co_return Status::ok();
    }
    default: {
      std::string why = fmt::format("unexpected {} message from a client", msg.typeName());
      (void)co_await conn.send(wire::makeErrorFrame(fb::ErrorCode::Unexpected, why));
      co_return Status(StatusCode::kMalformed, why);
    }
  }
}

}  // namespace starling::coordinator
