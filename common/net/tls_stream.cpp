#include "starling/net/tls_stream.hpp"

#include <fmt/format.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/oid.h>
#include <mbedtls/sha256.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_internal.h>

#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <cstring>

#include "starling/util/hex.hpp"

#include "mbedtls_handle.hpp"

namespace starling::net {
namespace {

constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);
// Socket reads start small and double while they fill the buffer, up to kReadChunk; an
// idle connection (its buffer drained, the last read small) goes back to kIdleReadChunk,
// so ten thousand quiet clients do not each pin 64 KiB (docs/transport.md, "Memory").
constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::size_t kIdleReadChunk = 2 * 1024;
// An outbound buffer larger than this is released once it has been written (an idle
// connection keeps none: a heartbeat's record is allocated when it is sent).
constexpr std::size_t kKeepWriteCapacity = 0;
// Ciphertext is handed to the socket once this much is queued, and at the end of
// every writeAll.
constexpr std::size_t kFlushThreshold = 256 * 1024;

const char* alertName(unsigned char alert) {
  switch (alert) {
    case MBEDTLS_SSL_ALERT_MSG_BAD_CERT:
      return "bad certificate";
    case MBEDTLS_SSL_ALERT_MSG_UNSUPPORTED_CERT:
      return "unsupported certificate";
    case MBEDTLS_SSL_ALERT_MSG_CERT_REVOKED:
      return "certificate revoked";
    case MBEDTLS_SSL_ALERT_MSG_CERT_EXPIRED:
      return "certificate expired";
    case MBEDTLS_SSL_ALERT_MSG_CERT_UNKNOWN:
      return "certificate unknown";
    case MBEDTLS_SSL_ALERT_MSG_UNKNOWN_CA:
      return "unknown CA";
    case MBEDTLS_SSL_ALERT_MSG_HANDSHAKE_FAILURE:
      return "handshake failure (no or unacceptable certificate)";
    case MBEDTLS_SSL_ALERT_MSG_NO_CERT:
      return "no certificate";
    case MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED:
      return "access denied";
    case MBEDTLS_SSL_ALERT_MSG_PROTOCOL_VERSION:
      return "protocol version";
    case MBEDTLS_SSL_ALERT_MSG_INSUFFICIENT_SECURITY:
      return "insufficient security";
    case MBEDTLS_SSL_ALERT_MSG_DECRYPT_ERROR:
      return "decrypt error";
    default:
      return "alert";
  }
}

}  // namespace

struct TlsStream::Session {
  mbedtls::Ssl ssl;
};

Result<std::shared_ptr<TlsStream>> TlsStream::create(asio::ip::tcp::socket socket,
                                                     std::shared_ptr<const TlsContext> context) {
  auto stream = std::make_shared<TlsStream>(Private{}, std::move(socket), std::move(context));
  // A failure here is an allocation failure inside mbedTLS: this connection cannot be
  // served, the others can.
  if (int rc = mbedtls_ssl_setup(&stream->session_->ssl.ctx, stream->context_->config()); rc != 0)
    return Status(StatusCode::kInternal, "setting up a TLS session: " + mbedtlsErrorString(rc));
  if (stream->context_->role() == TlsRole::kClient &&
      mbedtls_ssl_set_hostname(&stream->session_->ssl.ctx, stream->context_->serverName().c_str()) != 0)
    return Status(StatusCode::kInternal, "setting the TLS server name");
  // Sessions are kept per server: the address this socket reached names it.
  if (!stream->peer_.address.empty())
    stream->sessionOffered_ = stream->context_->offerSession(&stream->session_->ssl.ctx, stream->peer_.address);
  mbedtls_ssl_set_bio(&stream->session_->ssl.ctx, stream.get(), &TlsStream::bioSend, &TlsStream::bioRecv, nullptr);
  return stream;
}

TlsStream::TlsStream(Private, asio::ip::tcp::socket socket, std::shared_ptr<const TlsContext> context)
    : socket_(std::move(socket)),
      context_(std::move(context)),
      session_(std::make_unique<Session>()),
      in_(kIdleReadChunk),
      watchdog_(socket_.get_executor()) {
  std::error_code ec;
  auto remote = socket_.remote_endpoint(ec);
  if (!ec) peer_.address = fmt::format("{}:{}", remote.address().to_string(), remote.port());
}

TlsStream::~TlsStream() = default;

int TlsStream::bioSend(void* self, const unsigned char* buf, std::size_t len) {
  auto* s = static_cast<TlsStream*>(self);
  if (s->closed_) return MBEDTLS_ERR_NET_CONN_RESET;
  s->out_.insert(s->out_.end(), buf, buf + len);
  return static_cast<int>(len);
}

int TlsStream::bioRecv(void* self, unsigned char* buf, std::size_t len) {
  auto* s = static_cast<TlsStream*>(self);
  std::size_t avail = s->inEnd_ - s->inPos_;
  if (avail == 0) return MBEDTLS_ERR_SSL_WANT_READ;
  std::size_t n = std::min(avail, len);
  std::memcpy(buf, s->in_.data() + s->inPos_, n);
  s->inPos_ += n;
  return static_cast<int>(n);
}

Status TlsStream::socketError(const std::error_code& ec, const char* during) const {
  if (timedOut_) return Status(StatusCode::kTimeout, fmt::format("timed out {}", during));
  if (ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe)
    return Status(StatusCode::kClosed, fmt::format("peer closed the connection {}", during));
  if (closed_ || ec == asio::error::operation_aborted)
    return Status(StatusCode::kClosed, fmt::format("connection closed {}", during));
  return Status(StatusCode::kIo, fmt::format("socket error {}: {}", during, ec.message()));
}

asio::awaitable<Status> TlsStream::fill() {
  if (inPos_ == inEnd_) {
    inPos_ = inEnd_ = 0;
    if (lastRead_ < kIdleReadChunk && in_.size() > kIdleReadChunk) std::vector<uint8_t>(kIdleReadChunk).swap(in_);
  }
  if (lastRead_ == in_.size() && in_.size() < kReadChunk) {
    // The last read filled the buffer: more is probably waiting.
    std::vector<uint8_t> bigger(std::min(in_.size() * 2, kReadChunk));
    std::memcpy(bigger.data(), in_.data() + inPos_, inEnd_ - inPos_);
    inEnd_ -= inPos_;
    inPos_ = 0;
    in_.swap(bigger);
  }
  if (inEnd_ == in_.size()) {  // compact, then grow if a record still does not fit
    std::memmove(in_.data(), in_.data() + inPos_, inEnd_ - inPos_);
    inEnd_ -= inPos_;
    inPos_ = 0;
    if (inEnd_ == in_.size()) in_.resize(in_.size() * 2);
  }
  const std::size_t space = in_.size() - inEnd_;
  auto [ec, n] = co_await socket_.async_read_some(asio::buffer(in_.data() + inEnd_, space), kAsTuple);
  if (ec) co_return socketError(ec, handshakeDone_ ? "while reading" : "during the TLS handshake");
  inEnd_ += n;
  lastRead_ = n == space ? in_.size() : n;
  co_return Status::ok();
}

asio::awaitable<Status> TlsStream::flush() {
  while (!out_.empty()) {
    sending_.clear();
    std::swap(sending_, out_);
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(sending_), kAsTuple);
    (void)n;
    if (ec) co_return socketError(ec, handshakeDone_ ? "while writing" : "during the TLS handshake");
  }
  if (sending_.capacity() > kKeepWriteCapacity) std::vector<uint8_t>().swap(sending_);
  if (out_.capacity() > kKeepWriteCapacity) std::vector<uint8_t>().swap(out_);
  co_return Status::ok();
}

Status TlsStream::handshakeFailure(int rc) const {
  const bool server = context_->role() == TlsRole::kServer;
  const char* whose = server ? "client" : "coordinator";
  // Certificate problems (verification, key usage) leave their reasons in the
  // verification flags whatever the error code says.
  uint32_t flags = mbedtls_ssl_get_verify_result(&session_->ssl.ctx);
  if (flags != 0 && flags != static_cast<uint32_t>(-1))
    return Status(StatusCode::kUnauthenticated,
                  fmt::format("{} certificate refused: {}", whose, describeVerifyFlags(flags)));
  if (rc == MBEDTLS_ERR_SSL_NO_CLIENT_CERTIFICATE)
    return Status(StatusCode::kUnauthenticated, "client certificate refused: no certificate was presented");
  if (rc == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE) {
    unsigned char alert = session_->ssl.ctx.in_msg != nullptr ? session_->ssl.ctx.in_msg[1] : 0;
    return Status(StatusCode::kUnauthenticated,
                  fmt::format("the {} refused the TLS handshake: {} (alert {})", whose, alertName(alert), alert));
  }
  return Status(StatusCode::kUnauthenticated, fmt::format("TLS handshake failed: {}", mbedtlsErrorString(rc)));
}

asio::awaitable<Status> TlsStream::handshake() {
  Status st = co_await runHandshake();
  // A session the server cannot take back costs a full handshake, not a failure. So a
  // failure after offering one is either the network's (timed out, closed or reset: a
  // busy or restarting server, as when thousands of devices return at once; the session
  // stays for the next attempt, which would otherwise be a full handshake and slow the
  // server further) or TLS's own (an alert, a refused certificate, a malformed record:
  // the session goes, and the next handshake is full).
  if (!st && sessionOffered_ && st.code() == StatusCode::kUnauthenticated) context_->forgetSession(peer_.address);
  co_return st;
}

asio::awaitable<Status> TlsStream::runHandshake() {
  mbedtls_ssl_context& ssl = session_->ssl.ctx;
  for (;;) {
    // Step by step (as mbedtls_ssl_handshake does) to see whether the session is
    // resumed: mbedTLS 2.28 says so only in its handshake state, freed at the end.
    int rc = 0;
    while (rc == 0 && ssl.state != MBEDTLS_SSL_HANDSHAKE_OVER) {
      rc = mbedtls_ssl_handshake_step(&ssl);
      // A client sets it when it offers a session and clears it when the server
      // answers with a new one; the last value seen is the outcome.
      if (ssl.handshake != nullptr) peer_.resumed = ssl.handshake->resume != 0;
    }
    Status sent = co_await flush();  // also delivers our alert when we refuse the peer
    if (rc == 0) {
      if (!sent) co_return sent;
      break;
    }
    if (rc == MBEDTLS_ERR_SSL_WANT_WRITE) {
      if (!sent) co_return sent;
      continue;
    }
    if (rc == MBEDTLS_ERR_SSL_WANT_READ) {
      if (!sent) co_return sent;
      Status got = co_await fill();
      if (!got) co_return got;
      continue;
    }
    if (rc == MBEDTLS_ERR_SSL_NO_CLIENT_CERTIFICATE) {
      // mbedTLS 2.28 does not tell the client why; an alert does.
      mbedtls_ssl_send_alert_message(&session_->ssl.ctx, MBEDTLS_SSL_ALERT_LEVEL_FATAL,
                                     MBEDTLS_SSL_ALERT_MSG_HANDSHAKE_FAILURE);
      (void)co_await flush();
    }
    co_return handshakeFailure(rc);
  }
  handshakeDone_ = true;
  readPeerIdentity();
  if (const char* suite = mbedtls_ssl_get_ciphersuite(&ssl)) peer_.cipherSuite = suite;
  if (!peer_.address.empty()) context_->keepSession(&ssl, peer_.address);
  co_return Status::ok();
}

void TlsStream::readPeerIdentity() {
  const mbedtls_x509_crt* crt = mbedtls_ssl_get_peer_cert(&session_->ssl.ctx);
  if (crt == nullptr) return;
  for (const mbedtls_x509_name* n = &crt->subject; n != nullptr; n = n->next) {
    if (n->oid.p == nullptr) continue;
    if (peer_.commonName.empty() && MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) == 0)
      peer_.commonName.assign(reinterpret_cast<const char*>(n->val.p), n->val.len);
    else if (peer_.role.empty() && MBEDTLS_OID_CMP(MBEDTLS_OID_AT_ORG_UNIT, &n->oid) == 0)
      peer_.role.assign(reinterpret_cast<const char*>(n->val.p), n->val.len);
  }
  unsigned char digest[32];
  if (mbedtls_sha256_ret(crt->raw.p, crt->raw.len, digest, 0) == 0) peer_.fingerprint = toHex(digest, sizeof digest);
}

asio::awaitable<Result<std::size_t>> TlsStream::readSome(std::span<uint8_t> buffer) {
  for (;;) {
    int rc = mbedtls_ssl_read(&session_->ssl.ctx, buffer.data(), buffer.size());
    if (rc > 0) co_return static_cast<std::size_t>(rc);
    if (rc == 0 || rc == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY)
      co_return Status(StatusCode::kClosed, "peer closed the connection");
    if (rc == MBEDTLS_ERR_SSL_WANT_READ) {
      Status got = co_await fill();
      if (!got) co_return got;
      continue;
    }
    if (rc == MBEDTLS_ERR_SSL_WANT_WRITE) continue;
    co_return Status(StatusCode::kMalformed, "TLS record error: " + mbedtlsErrorString(rc));
  }
}

asio::awaitable<Status> TlsStream::readExactly(std::span<uint8_t> buffer) {
  while (!buffer.empty()) {
    auto n = co_await readSome(buffer);
    if (!n) co_return n.status();
    buffer = buffer.subspan(*n);
  }
  co_return Status::ok();
}

asio::awaitable<Status> TlsStream::writeAll(std::span<const uint8_t> data) {
  while (!data.empty()) {
    int rc = mbedtls_ssl_write(&session_->ssl.ctx, data.data(), data.size());
    if (rc > 0) {
      data = data.subspan(static_cast<std::size_t>(rc));
      if (out_.size() >= kFlushThreshold) {
        Status st = co_await flush();
        if (!st) co_return st;
      }
      continue;
    }
    if (rc == MBEDTLS_ERR_SSL_WANT_WRITE || rc == MBEDTLS_ERR_SSL_WANT_READ) {
      Status st = co_await flush();
      if (!st) co_return st;
      continue;
    }
    if (closed_) co_return socketError(asio::error::operation_aborted, "while writing");
    co_return Status(StatusCode::kIo, "TLS write failed: " + mbedtlsErrorString(rc));
  }
  co_return co_await flush();
}

asio::awaitable<void> TlsStream::shutdown() {
  if (!closed_ && handshakeDone_) {
    mbedtls_ssl_close_notify(&session_->ssl.ctx);
    (void)co_await flush();
  }
  close();
}

void TlsStream::close() {
  if (closed_) return;
  closed_ = true;
  std::error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  watchdog_.cancel();
}

void TlsStream::setDeadline(Clock::time_point deadline) {
  if (closed_) return;
  const bool earlier = deadline < deadline_;
  deadline_ = deadline;
  if (!watching_) {
    if (deadline == Clock::time_point::max()) return;
    watching_ = true;
    asio::co_spawn(socket_.get_executor(), watch(shared_from_this()), asio::detached);
  } else if (earlier) {
    watchdog_.cancel();  // wake the watchdog so it re-arms for the earlier time
  }
}

asio::awaitable<void> TlsStream::watch(std::shared_ptr<TlsStream> self) {
  while (!closed_) {
    if (deadline_ <= Clock::now()) {
      timedOut_ = true;
      close();
      break;
    }
    watchdog_.expires_at(deadline_);
    co_await watchdog_.async_wait(kAsTuple);
  }
  watching_ = false;
  (void)self;
}

}  // namespace starling::net
