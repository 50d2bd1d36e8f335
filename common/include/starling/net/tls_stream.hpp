#pragma once
// TlsStream: mbedTLS over an Asio TCP socket, driven by C++20 coroutines, shaped
// like asio::ssl::stream (handshake / readSome / writeAll / shutdown).
//
// mbedTLS reads and writes through in-memory buffers; the coroutines move those
// buffers to and from the socket, so no thread ever blocks in mbedTLS.
//
// Deadlines: setDeadline() arms a watchdog that closes the socket when the time
// passes; every pending or later operation then fails with StatusCode::kTimeout.
//
// Threading: all calls on the stream's executor (a strand per connection). At most
// one read and one write in flight at a time (the owner serializes writes).
// Lifetime: made by create() (shared); call close() when done so the watchdog lets go
// of its reference.

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "starling/net/tls_context.hpp"
#include "starling/util/status.hpp"

namespace starling::net {

// Who is at the other end, as proven by the handshake.
struct PeerIdentity {
  std::string commonName;   // subject CN of the peer's certificate, e.g. "client-3"
  std::string role;         // its subject OU: "coordinator", "relay", "client" ("" before roles; net::roleFromOu)
  std::string fingerprint;  // SHA-256 of the certificate's DER, lowercase hex
  std::string address;      // "127.0.0.1:53144"
  // How the handshake went: resumed from a session ticket (no certificates exchanged:
  // the identity above is the one sealed in the ticket at the full handshake), and the
  // negotiated suite, e.g. "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256".
  bool resumed = false;
  std::string cipherSuite;
};

class TlsStream : public std::enable_shared_from_this<TlsStream> {
 public:
  using Clock = std::chrono::steady_clock;

  // A stream over a connected socket; fails (an allocation failure inside mbedTLS) with
  // a Status, so that a server's accept loop refuses that connection and goes on.
  static Result<std::shared_ptr<TlsStream>> create(asio::ip::tcp::socket socket,
                                                   std::shared_ptr<const TlsContext> context);
  struct Private {};  // create() only
  TlsStream(Private, asio::ip::tcp::socket socket, std::shared_ptr<const TlsContext> context);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // Runs the TLS handshake with mutual authentication. On failure the status says
  // why in words a person can act on ("the certificate has expired", ...). A client
  // offers the session it kept for this server (TlsContext), and keeps the new one on
  // success; a failed handshake that offered one drops it, so the next is full.
  asio::awaitable<Status> handshake();

  // Reads at least one byte of plaintext into buffer; kClosed when the peer closed.
  asio::awaitable<Result<std::size_t>> readSome(std::span<uint8_t> buffer);
  // Reads exactly buffer.size() bytes.
  asio::awaitable<Status> readExactly(std::span<uint8_t> buffer);
  // Writes all of data (as one or more TLS records) before returning.
  asio::awaitable<Status> writeAll(std::span<const uint8_t> data);
  // Sends close_notify (best effort) and closes the socket.
  asio::awaitable<void> shutdown();
  // Closes the socket now; pending operations fail with kClosed.
  void close();

  // Operations after `deadline` fail with kTimeout. Clock::time_point::max() = none.
  void setDeadline(Clock::time_point deadline);
  void expiresAfter(Clock::duration d) { setDeadline(Clock::now() + d); }
  bool timedOut() const { return timedOut_; }

  const PeerIdentity& peer() const { return peer_; }
  asio::any_io_executor executor() { return socket_.get_executor(); }

 private:
  struct Session;
  static int bioSend(void* self, const unsigned char* buf, std::size_t len);
  static int bioRecv(void* self, unsigned char* buf, std::size_t len);

  asio::awaitable<Status> fill();   // socket -> inbound buffer
  asio::awaitable<Status> flush();  // outbound buffer -> socket
  asio::awaitable<void> watch(std::shared_ptr<TlsStream> self);
  asio::awaitable<Status> runHandshake();
  Status socketError(const std::error_code& ec, const char* during) const;
  Status handshakeFailure(int rc) const;
  void readPeerIdentity();

  asio::ip::tcp::socket socket_;
  std::shared_ptr<const TlsContext> context_;
  std::unique_ptr<Session> session_;

  std::vector<uint8_t> in_;  // ciphertext received, not yet consumed by mbedTLS
  std::size_t inPos_ = 0;
  std::size_t inEnd_ = 0;
  std::size_t lastRead_ = 0;      // bytes the last socket read gave; in_.size() when it filled in_
  std::vector<uint8_t> out_;      // ciphertext produced, not yet handed to the socket
  std::vector<uint8_t> sending_;  // ciphertext being written right now

  asio::steady_timer watchdog_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool watching_ = false;
  bool closed_ = false;
  bool timedOut_ = false;
  bool handshakeDone_ = false;
  PeerIdentity peer_;
  bool sessionOffered_ = false;  // a client offered the session kept for this server
};

}  // namespace starling::net
