#pragma once
// Connection: framed, verified Starling messages over a TlsStream, with limits.
//
// Every inbound frame is checked against maxFrameBytes and the protocol version
// before its body is allocated, and verified before it is handed out. Any failure
// is returned as a Status; the caller closes this connection only.
//
// Deadlines: the handshake must finish within handshakeTimeout; a peer that sends
// nothing for idleTimeout, or takes longer than frameTimeout to deliver a frame
// whose header arrived, or does not take a frame within writeTimeout, is cut off.
//
// Threading: all calls on the connection's executor (its strand); at most one
// receive() and one send() in flight.

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <chrono>
#include <memory>
#include <span>
#include <string>

#include "starling/net/tls_stream.hpp"
#include "starling/wire/frame.hpp"

namespace starling::net {

struct ConnectionLimits {
  uint32_t maxFrameBytes = wire::kDefaultMaxFrameBytes;
  std::chrono::milliseconds handshakeTimeout{10'000};
  std::chrono::milliseconds idleTimeout{120'000};
  std::chrono::milliseconds frameTimeout{60'000};
  std::chrono::milliseconds writeTimeout{60'000};
};

class Connection {
 public:
  Connection(std::shared_ptr<TlsStream> stream, ConnectionLimits limits);
  ~Connection();
  Connection(Connection&&) = default;
  Connection& operator=(Connection&&) = default;

  asio::awaitable<Status> handshake();
  asio::awaitable<Result<wire::Message>> receive();
  // Writes one complete frame (header included, as made by wire::finishFrame).
  asio::awaitable<Status> send(std::span<const uint8_t> frame);
  // Sends close_notify and closes.
  asio::awaitable<void> close();

  const PeerIdentity& peer() const { return stream_->peer(); }
  TlsStream& stream() { return *stream_; }
  const ConnectionLimits& limits() const { return limits_; }

 private:
  std::shared_ptr<TlsStream> stream_;
  ConnectionLimits limits_;
};

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  std::string toString() const;
};

// Parses "HOST:PORT" or "[V6]:PORT"; the error names what is wrong.
Result<Endpoint> parseEndpoint(const std::string& text);

// Resolves, connects and runs the TLS handshake (within limits.handshakeTimeout).
// Parameters are taken by value: a coroutine outlives its caller's temporaries.
asio::awaitable<Result<Connection>> connect(asio::any_io_executor executor, Endpoint endpoint,
                                            std::shared_ptr<const TlsContext> context, ConnectionLimits limits);

}  // namespace starling::net
