#include "starling/net/connection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <asio/connect.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <charconv>

namespace starling::net {

Connection::Connection(std::shared_ptr<TlsStream> stream, ConnectionLimits limits)
    : stream_(std::move(stream)), limits_(limits) {}

Connection::~Connection() {
  if (stream_) stream_->close();
}

asio::awaitable<Status> Connection::handshake() {
  stream_->expiresAfter(limits_.handshakeTimeout);
  Status st = co_await stream_->handshake();
  if (!st && stream_->timedOut())
    st = Status(StatusCode::kTimeout,
                fmt::format("TLS handshake did not finish within {} ms", limits_.handshakeTimeout.count()));
  stream_->expiresAfter(limits_.idleTimeout);
  co_return st;
}

asio::awaitable<Result<wire::Message>> Connection::receive() {
  std::array<uint8_t, wire::kFrameHeaderBytes> headerBytes{};
  stream_->expiresAfter(limits_.idleTimeout);
  Status st = co_await stream_->readExactly(headerBytes);
  if (!st) {
    if (stream_->timedOut())
      co_return Status(StatusCode::kTimeout, fmt::format("no message for {} ms", limits_.idleTimeout.count()));
    co_return st;
  }
  auto header = wire::decodeFrameHeader(headerBytes, limits_.maxFrameBytes);
  if (!header) co_return header.status();
  // The body grows as it arrives (64 KiB, then doubling), so a peer that announces
  // a large frame and sends nothing costs no more than a small one.
  std::vector<uint8_t> body;
  stream_->expiresAfter(limits_.frameTimeout);
  for (std::size_t got = 0; got < header->length && st;) {
    std::size_t chunk = std::min<std::size_t>(header->length - got, std::max<std::size_t>(got, 64 * 1024));
    body.resize(got + chunk);
    st = co_await stream_->readExactly(std::span<uint8_t>(body).subspan(got, chunk));
    got += chunk;
  }
  if (!st) {
    if (stream_->timedOut())
      co_return Status(StatusCode::kTimeout, fmt::format("frame of {} bytes not received within {} ms", header->length,
                                                         limits_.frameTimeout.count()));
    if (st.code() == StatusCode::kClosed)
      co_return Status(StatusCode::kMalformed,
                       fmt::format("truncated frame: connection closed inside a {}-byte frame", header->length));
    co_return st;
  }
  stream_->expiresAfter(limits_.idleTimeout);
  co_return wire::Message::parse(std::move(body));
}

asio::awaitable<Status> Connection::send(std::span<const uint8_t> frame) {
  stream_->expiresAfter(limits_.writeTimeout);
  Status st = co_await stream_->writeAll(frame);
  if (!st && stream_->timedOut())
    st = Status(StatusCode::kTimeout,
                fmt::format("peer did not take a frame within {} ms", limits_.writeTimeout.count()));
  stream_->expiresAfter(limits_.idleTimeout);
  co_return st;
}

asio::awaitable<void> Connection::close() {
  co_await stream_->shutdown();
}

std::string Endpoint::toString() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

Result<Endpoint> parseEndpoint(const std::string& text) {
  auto bad = [&](const char* why) {
    return Status(StatusCode::kInvalidArgument, fmt::format("bad address '{}': {} (expected HOST:PORT)", text, why));
  };
  std::string host;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') return bad("unclosed '['");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos) return bad("no port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) return bad("no host");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value > 65535)
    return bad("port is not a number 0-65535");
  return Endpoint{host, static_cast<uint16_t>(value)};
}

asio::awaitable<Result<Connection>> connect(asio::any_io_executor executor, Endpoint endpoint,
                                            std::shared_ptr<const TlsContext> context, ConnectionLimits limits) {
  constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);
  asio::ip::tcp::resolver resolver(executor);
  auto [rec, results] = co_await resolver.async_resolve(endpoint.host, std::to_string(endpoint.port), kAsTuple);
  if (rec)
    co_return Status(StatusCode::kNotFound, fmt::format("cannot resolve '{}': {}", endpoint.host, rec.message()));
  asio::ip::tcp::socket socket(executor);
  auto [cec, ep] = co_await asio::async_connect(socket, results, kAsTuple);
  if (cec)
    co_return Status(StatusCode::kIo, fmt::format("cannot connect to {}: {}", endpoint.toString(), cec.message()));
  // With nothing listening on a local port, the kernel may give the socket that
  // same port and connect it to itself (TCP simultaneous open). It would then hold
  // the coordinator's port when the coordinator restarts: let it go at once.
  asio::error_code lec;
  if (socket.local_endpoint(lec) == ep && !lec)
    co_return Status(StatusCode::kIo, fmt::format("cannot connect to {}: nothing is listening (the socket met itself)",
                                                  endpoint.toString()));
  socket.set_option(asio::ip::tcp::no_delay(true));
  auto stream = TlsStream::create(std::move(socket), std::move(context));
  if (!stream) co_return stream.status();
  Connection conn(std::move(*stream), limits);
  Status st = co_await conn.handshake();
  if (!st) co_return st;
  co_return std::move(conn);
}

}  // namespace starling::net
