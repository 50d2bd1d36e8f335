// bench/transport: TLS (mbedTLS under Asio) vs plain TCP throughput on loopback, and TLS handshakes per second.
//
// One process, two threads: a receiver with its own io_context and a sender with
// another, connected over 127.0.0.1. Each measurement streams N messages of one
// size through one connection and stops the clock when the receiver acknowledges
// the last byte. Plain TCP runs the same code over a bare socket: the baseline.

#include <fmt/format.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <chrono>
#include <cstdio>
#include <future>
#include <thread>

#include "starling/net/certificates.hpp"
#include "starling/net/tls_stream.hpp"

using namespace starling;
using Clock = std::chrono::steady_clock;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

namespace {

// A bare socket with the TlsStream calls the measurement uses.
class PlainStream {
 public:
  explicit PlainStream(asio::ip::tcp::socket s) : socket_(std::move(s)) {}
  asio::awaitable<Result<std::size_t>> readSome(std::span<uint8_t> buf) {
    auto [ec, n] = co_await socket_.async_read_some(asio::buffer(buf.data(), buf.size()), kAsTuple);
    if (ec) co_return Status(StatusCode::kIo, ec.message());
    co_return n;
  }
  asio::awaitable<Status> writeAll(std::span<const uint8_t> data) {
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(data.data(), data.size()), kAsTuple);
    (void)n;
    if (ec) co_return Status(StatusCode::kIo, ec.message());
    co_return Status::ok();
  }
  void close() { socket_.close(); }

 private:
  asio::ip::tcp::socket socket_;
};

struct Pki {
  net::KeyPair ca, server, client;
  Pki() {
    auto now = std::chrono::system_clock::now();
    auto h = std::chrono::hours(1);
    ca = net::makeCertificateAuthority({net::CertificateKind::kCa, "Bench CA", {}, now - h, now + 24 * h}).value();
    server = net::issueCertificate(ca, {net::CertificateKind::kServer, "localhost", {"localhost"}, now - h, now + h})
                 .value();
    client = net::issueCertificate(ca, {net::CertificateKind::kClient, "client-0", {}, now - h, now + h}).value();
  }
};

// Receives `total` bytes, then writes one byte back.
template <typename Stream>
asio::awaitable<void> sink(Stream& s, std::size_t total) {
  std::vector<uint8_t> buf(256 * 1024);
  std::size_t got = 0;
  while (got < total) {
    auto n = co_await s.readSome(buf);
    if (!n) throw std::runtime_error("receiver: " + n.status().message());
    got += *n;
  }
  uint8_t ack = 1;
  Status st = co_await s.writeAll({&ack, 1});
  if (!st) throw std::runtime_error("receiver ack: " + st.message());
}

// Sends `count` messages of `size` bytes, then waits for the acknowledgement.
template <typename Stream>
asio::awaitable<void> source(Stream& s, std::size_t size, std::size_t count) {
  std::vector<uint8_t> msg(size, 0x5a);
  for (std::size_t i = 0; i < count; ++i) {
    Status st = co_await s.writeAll(msg);
    if (!st) throw std::runtime_error("sender: " + st.message());
  }
  uint8_t ack = 0;
  auto n = co_await s.readSome({&ack, 1});
  if (!n) throw std::runtime_error("sender ack: " + n.status().message());
}

// Runs fn's coroutine on io until it finishes, rethrowing its exception.
void runToEnd(asio::io_context& io, asio::awaitable<void> task) {
  std::exception_ptr failure;
  asio::co_spawn(io, std::move(task), [&](std::exception_ptr e) { failure = e; });
  io.restart();
  io.run();
  if (failure) std::rethrow_exception(failure);
}

struct Endpoints {
  asio::io_context serverIo, clientIo;
  asio::ip::tcp::acceptor acceptor{serverIo, {asio::ip::make_address("127.0.0.1"), 0}};
  asio::ip::tcp::endpoint endpoint() const { return acceptor.local_endpoint(); }
};

// MB/s (1e6 bytes) for `count` messages of `size` bytes, TLS or plain.
double throughput(bool tls, const Pki& pki, std::size_t size, std::size_t count) {
  Endpoints ep;
  auto serverTls =
      net::TlsContext::create(net::TlsRole::kServer, {pki.ca.certPem, pki.server.certPem, pki.server.keyPem, {}})
          .value();
  auto clientTls = net::TlsContext::create(net::TlsRole::kClient,
                                           {pki.ca.certPem, pki.client.certPem, pki.client.keyPem, {}}, "localhost")
                       .value();
  const std::size_t total = size * count;
  std::thread receiver([&] {
    runToEnd(ep.serverIo, [&]() -> asio::awaitable<void> {
      auto sock = co_await ep.acceptor.async_accept(asio::use_awaitable);
      sock.set_option(asio::ip::tcp::no_delay(true));
      if (tls) {
        auto s = net::TlsStream::create(std::move(sock), serverTls).value();
        Status hs = co_await s->handshake();
        if (!hs) throw std::runtime_error(hs.message());
        co_await sink(*s, total);
        s->close();
      } else {
        PlainStream s(std::move(sock));
        co_await sink(s, total);
      }
    }());
  });
  double seconds = 0;
  runToEnd(ep.clientIo, [&]() -> asio::awaitable<void> {
    asio::ip::tcp::socket sock(ep.clientIo);
    co_await sock.async_connect(ep.endpoint(), asio::use_awaitable);
    sock.set_option(asio::ip::tcp::no_delay(true));
    if (tls) {
      auto s = net::TlsStream::create(std::move(sock), clientTls).value();
      Status hs = co_await s->handshake();
      if (!hs) throw std::runtime_error(hs.message());
      auto t0 = Clock::now();
      co_await source(*s, size, count);
      seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      s->close();
    } else {
      PlainStream s(std::move(sock));
      auto t0 = Clock::now();
      co_await source(s, size, count);
      seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    }
  }());
  receiver.join();
  return static_cast<double>(total) / seconds / 1e6;
}

// Sequential full handshakes (new TCP connection each, mutual authentication).
double handshakesPerSecond(const Pki& pki, double budgetSeconds) {
  Endpoints ep;
  auto serverTls =
      net::TlsContext::create(net::TlsRole::kServer, {pki.ca.certPem, pki.server.certPem, pki.server.keyPem, {}})
          .value();
  auto clientTls = net::TlsContext::create(net::TlsRole::kClient,
                                           {pki.ca.certPem, pki.client.certPem, pki.client.keyPem, {}}, "localhost")
                       .value();
  std::promise<int> countPromise;
  auto counted = countPromise.get_future();
  std::atomic<bool> done{false};
  std::thread server([&] {
    runToEnd(ep.serverIo, [&]() -> asio::awaitable<void> {
      for (;;) {
        auto [ec, sock] = co_await ep.acceptor.async_accept(kAsTuple);
        if (ec || done) break;
        auto s = net::TlsStream::create(std::move(sock), serverTls).value();
        Status hs = co_await s->handshake();
        if (!hs) throw std::runtime_error("server handshake: " + hs.message());
        co_await s->shutdown();
      }
    }());
  });
  int n = 0;
  auto t0 = Clock::now();
  double seconds = 0;
  runToEnd(ep.clientIo, [&]() -> asio::awaitable<void> {
    while ((seconds = std::chrono::duration<double>(Clock::now() - t0).count()) < budgetSeconds) {
      asio::ip::tcp::socket sock(ep.clientIo);
      co_await sock.async_connect(ep.endpoint(), asio::use_awaitable);
      auto s = net::TlsStream::create(std::move(sock), clientTls).value();
      Status hs = co_await s->handshake();
      if (!hs) throw std::runtime_error("client handshake: " + hs.message());
      s->close();
      ++n;
    }
  }());
  done = true;
  asio::ip::tcp::socket wake(ep.clientIo);  // unblock the acceptor
  wake.connect(ep.endpoint());
  server.join();
  return n / seconds;
}

}  // namespace

int main() {
  Pki pki;
  struct Row {
    const char* label;
    std::size_t size, count;
  };
  const Row rows[] = {{"1 KiB", 1024, 100'000}, {"1 MiB", 1024 * 1024, 400}};
  std::printf("Transport over loopback (127.0.0.1), one connection, one sender thread and one receiver thread\n");
  std::printf("TLS 1.2 ECDHE-ECDSA-CHACHA20-POLY1305 (mbedTLS 2.28) beside plain TCP, same code path\n\n");
  std::printf(
      "| message | count  | TLS MB/s | TCP MB/s | TLS / TCP "
      "|\n|---------|--------|----------|----------|-----------|\n");
  double tls1m = 0, tcp1m = 0;
  for (const auto& r : rows) {
    double t = throughput(true, pki, r.size, r.count);
    double p = throughput(false, pki, r.size, r.count);
    std::printf("| %-7s | %6zu | %8.1f | %8.1f | %9.2f |\n", r.label, r.count, t, p, t / p);
    if (r.size == 1024 * 1024) tls1m = t, tcp1m = p;
  }
  double hps = handshakesPerSecond(pki, 3.0);
  std::printf(
      "\nTLS handshakes per second (new TCP connection, mutual authentication, X25519 + P-256 ECDSA, sequential): "
      "%.0f\n",
      hps);
  std::printf("summary: tls_1mib_MBps=%.1f tcp_1mib_MBps=%.1f handshakes_per_s=%.0f\n", tls1m, tcp1m, hps);
  return 0;
}
