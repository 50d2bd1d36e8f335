// bench/transport: TLS (mbedTLS under Asio) vs plain TCP on loopback: bulk MB/s beside the ciphers alone, full and
// resumed mutual-TLS handshakes/s beside openssl s_server.
//
// Throughput: one process, two threads: a receiver with its own io_context and a
// sender with another, connected over 127.0.0.1. Each measurement streams N messages
// of one size through one connection and stops the clock when the receiver
// acknowledges the last byte. Plain TCP runs the same code over a bare socket: the
// baseline. Beside it the AEADs alone (mbedtls_gcm, mbedtls_chachapoly on 16 KiB
// records, one thread) and `openssl speed -evp aes-128-gcm` (its 16384-byte column).
//
// Handshakes: a server like the coordinator's (one io_context on every core, a strand
// per connection) and a driver of several threads, each with many connections in
// flight, every one a new TCP connection, a mutual-TLS handshake and a close. Full
// handshakes (the driver offers no session), resumed ones (it offers the session of
// its last handshake), and the same driver against `openssl s_server` processes (one
// per core, the same certificates): the driver's side is mbedTLS in every case.

#include <fcntl.h>
#include <fmt/format.h>
#include <mbedtls/chachapoly.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecdh.h>
#include <mbedtls/ecdsa.h>
#include <mbedtls/entropy.h>
#include <mbedtls/gcm.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <string>
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

// The contexts of one side of a measurement.
std::shared_ptr<const net::TlsContext> serverContext(const Pki& pki, net::TlsOptions options = {}) {
  return net::TlsContext::create(net::TlsRole::kServer, {pki.ca.certPem, pki.server.certPem, pki.server.keyPem, {}}, {},
                                 std::move(options))
      .value();
}
std::shared_ptr<const net::TlsContext> clientContext(const Pki& pki, bool resume) {
  net::TlsOptions options;
  options.resumption = resume;
  return net::TlsContext::create(net::TlsRole::kClient, {pki.ca.certPem, pki.client.certPem, pki.client.keyPem, {}},
                                 "localhost", options)
      .value();
}

// This thread's CPU time so far, in seconds.
double threadCpuSeconds() {
  timespec cpu{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  return static_cast<double>(cpu.tv_sec) + static_cast<double>(cpu.tv_nsec) / 1e9;
}

struct Throughput {
  double mbps = 0;           // MB/s (1e6 bytes) on the wall clock
  double senderCpuMBps = 0;  // bytes over the sender thread's CPU time: its speed on a core of its own
  double receiverCpuMBps = 0;
};

// `count` messages of `size` bytes, TLS or plain.
Throughput throughput(bool tls, const Pki& pki, std::size_t size, std::size_t count, net::TlsOptions options) {
  Endpoints ep;
  auto serverTls = serverContext(pki, options);
  auto clientTls = clientContext(pki, false);
  const std::size_t total = size * count;
  double receiverCpu = 0;
  std::thread receiver([&] {
    runToEnd(ep.serverIo, [&]() -> asio::awaitable<void> {
      auto sock = co_await ep.acceptor.async_accept(asio::use_awaitable);
      sock.set_option(asio::ip::tcp::no_delay(true));
      if (tls) {
        auto s = net::TlsStream::create(std::move(sock), serverTls).value();
        Status hs = co_await s->handshake();
        if (!hs) throw std::runtime_error(hs.message());
        const double cpu0 = threadCpuSeconds();
        co_await sink(*s, total);
        receiverCpu = threadCpuSeconds() - cpu0;
        s->close();
      } else {
        PlainStream s(std::move(sock));
        const double cpu0 = threadCpuSeconds();
        co_await sink(s, total);
        receiverCpu = threadCpuSeconds() - cpu0;
      }
    }());
  });
  double seconds = 0, senderCpu = 0;
  runToEnd(ep.clientIo, [&]() -> asio::awaitable<void> {
    asio::ip::tcp::socket sock(ep.clientIo);
    co_await sock.async_connect(ep.endpoint(), asio::use_awaitable);
    sock.set_option(asio::ip::tcp::no_delay(true));
    std::shared_ptr<net::TlsStream> secure;
    std::optional<PlainStream> plain;
    if (tls) {
      secure = net::TlsStream::create(std::move(sock), clientTls).value();
      Status hs = co_await secure->handshake();
      if (!hs) throw std::runtime_error(hs.message());
    } else {
      plain.emplace(std::move(sock));
    }
    const auto t0 = Clock::now();
    const double cpu0 = threadCpuSeconds();
    if (secure)
      co_await source(*secure, size, count);
    else
      co_await source(*plain, size, count);
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    senderCpu = threadCpuSeconds() - cpu0;
    if (secure) secure->close();
  }());
  receiver.join();
  const double mb = static_cast<double>(total) / 1e6;
  return {mb / seconds, mb / senderCpu, mb / receiverCpu};
}

// A TLS server like the coordinator's: one io_context run by `threads` threads, each
// connection a coroutine on its own strand: handshake, then close.
class HandshakeServer {
 public:
  HandshakeServer(std::shared_ptr<const net::TlsContext> tls, unsigned threads) : tls_(std::move(tls)) {
    asio::co_spawn(acceptor_.get_executor(), acceptLoop(), asio::detached);
    for (unsigned i = 0; i < threads; ++i)
      pool_.emplace_back([this] {
        pthread_setname_np(pthread_self(), "hs-server");
        io_.run();
        timespec cpu{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
        cpuNanos_ += static_cast<uint64_t>(cpu.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(cpu.tv_nsec);
      });
  }
  ~HandshakeServer() { stop(); }
  // Stops and joins the threads; then cpuSeconds() is the CPU time they used.
  void stop() {
    if (pool_.empty()) return;
    asio::post(acceptor_.get_executor(), [this] { acceptor_.close(); });
    work_.reset();
    for (auto& t : pool_)
      t.join();
    pool_.clear();
  }
  double cpuSeconds() const { return static_cast<double>(cpuNanos_.load()) / 1e9; }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  uint64_t resumed() const { return resumed_; }
  uint64_t failed() const { return failed_; }

 private:
  asio::awaitable<void> acceptLoop() {
    for (;;) {
      auto [ec, sock] = co_await acceptor_.async_accept(asio::make_strand(io_), kAsTuple);
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) break;
      if (ec) continue;
      sock.set_option(asio::ip::tcp::no_delay(true));
      auto made = net::TlsStream::create(std::move(sock), tls_);
      if (!made) continue;
      auto stream = std::move(*made);
      asio::co_spawn(stream->executor(), serve(stream), asio::detached);
    }
  }
  asio::awaitable<void> serve(std::shared_ptr<net::TlsStream> s) {
    Status hs = co_await s->handshake();
    if (!hs) ++failed_;
    if (s->peer().resumed) ++resumed_;
    co_await s->shutdown();
  }

  std::shared_ptr<const net::TlsContext> tls_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  asio::ip::tcp::acceptor acceptor_{asio::make_strand(io_), {asio::ip::make_address("127.0.0.1"), 0}};
  std::vector<std::thread> pool_;
  std::atomic<uint64_t> resumed_{0}, failed_{0}, cpuNanos_{0};
};

struct HandshakeRate {
  double perSecond = 0;
  uint64_t count = 0, resumed = 0, failed = 0;
  double driverCpuMs = 0;  // the driver's CPU time per handshake (all its threads)
  double serverCpuMs = 0;  // the server's CPU time per handshake (our server only)
  // Handshakes per second of one core of the server's CPU time: its rate on cores of
  // its own, whatever the driver and the rest of the machine take.
  double perCoreSecond() const { return serverCpuMs > 0 ? 1e3 / serverCpuMs : 0.0; }
};

// The driver: `threads` threads, each with its own io_context and `inFlight`
// connections at a time; every connection a new TCP connection to one of `ports` (in
// turn), a full mutual-TLS handshake and a close. Runs for `seconds`.
HandshakeRate driveHandshakes(std::shared_ptr<const net::TlsContext> tls, std::vector<uint16_t> ports, unsigned threads,
                              unsigned inFlight, double seconds) {
  std::atomic<uint64_t> done{0}, resumed{0}, failed{0}, driverCpuNanos{0};
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  auto t0 = Clock::now();
  std::vector<std::thread> drivers;
  for (unsigned t = 0; t < threads; ++t) {
    drivers.emplace_back([&, t] {
      pthread_setname_np(pthread_self(), "hs-driver");
      asio::io_context io;
      for (unsigned c = 0; c < inFlight; ++c) {
        asio::co_spawn(
            io,
            [&, c]() -> asio::awaitable<void> {
              // Each connection slot makes at least one handshake, however busy the
              // machine (the resumed row's priming run relies on it).
              const std::size_t first = t * inFlight + c;
              for (std::size_t i = first; i == first || Clock::now() < until; ++i) {
                asio::ip::tcp::socket sock(io);
                auto [ec] = co_await sock.async_connect({asio::ip::make_address("127.0.0.1"), ports[i % ports.size()]},
                                                        kAsTuple);
                if (ec) {
                  ++failed;
                  continue;
                }
                sock.set_option(asio::ip::tcp::no_delay(true));
                auto s = net::TlsStream::create(std::move(sock), tls).value();
                Status hs = co_await s->handshake();
                if (!hs) {
                  if (failed++ == 0) std::fprintf(stderr, "driver handshake: %s\n", hs.message().c_str());
                  continue;
                }
                ++done;
                if (s->peer().resumed) ++resumed;
                co_await s->shutdown();
              }
            },
            asio::detached);
      }
      io.run();
      driverCpuNanos += static_cast<uint64_t>(threadCpuSeconds() * 1e9);
    });
  }
  for (auto& d : drivers)
    d.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  HandshakeRate r{static_cast<double>(done) / elapsed, done.load(), resumed.load(), failed.load()};
  if (r.count > 0) r.driverCpuMs = static_cast<double>(driverCpuNanos.load()) / 1e6 / static_cast<double>(r.count);
  return r;
}

// The bench's certificates as PEM files in a temporary directory, for openssl.
class PemFiles {
 public:
  explicit PemFiles(const Pki& pki) {
    char dirTemplate[] = "/tmp/bench-transport-XXXXXX";
    if (mkdtemp(dirTemplate) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = dirTemplate;
    const auto write = [&](const char* name, const std::string& text) {
      if (!net::writeTextFile(path(name), text, 0600).isOk()) throw std::runtime_error("writing certificates");
    };
    write("ca.crt", pki.ca.certPem);
    write("server.crt", pki.server.certPem);
    write("server.key", pki.server.keyPem);
    write("client.crt", pki.client.certPem);
    write("client.key", pki.client.keyPem);
  }
  ~PemFiles() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string path(const char* name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

// Starts `args` (args[0] found on PATH) with stdin from /dev/null and stdout to
// `out` (or /dev/null), stderr to /dev/null.
pid_t spawn(std::vector<std::string> args, const std::string& out = "/dev/null") {
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + args[0]);
  return pid;
}

// `openssl s_server` processes (one per port) with the bench's certificates, requiring
// a client certificate (-Verify), TLS 1.2, the suite Starling negotiates.
class OpensslServers {
 public:
  OpensslServers(const Pki& pki, unsigned count, const char* cipher) : files_(pki) {
    for (unsigned i = 0; i < count; ++i) {
      // A free port: bind to 0, read it, let go (s_server binds it a moment later).
      asio::io_context io;
      asio::ip::tcp::acceptor probe(io, {asio::ip::make_address("127.0.0.1"), 0});
      const uint16_t port = probe.local_endpoint().port();
      probe.close();
      const std::string accept = "127.0.0.1:" + std::to_string(port);
      pids_.push_back(spawn({"openssl",
                             "s_server",
                             "-quiet",
                             "-www",
                             "-tls1_2",
                             "-accept",
                             accept,
                             "-cert",
                             files_.path("server.crt"),
                             "-key",
                             files_.path("server.key"),
                             "-CAfile",
                             files_.path("ca.crt"),
                             "-Verify",
                             "1",
                             "-cipher",
                             cipher,
                             "-groups",
                             "X25519:P-256",
                             "-no_ticket"}));
      ports_.push_back(port);
      // Ready when it accepts a TCP connection (bounded: 5 s).
      bool up = false;
      for (int tries = 0; tries < 100 && !up; ++tries) {
        asio::ip::tcp::socket probeSocket(io);
        std::error_code ec;
        probeSocket.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
        up = !ec;
        if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!up) throw std::runtime_error("openssl s_server did not start listening on " + accept);
    }
  }
  ~OpensslServers() {
    for (pid_t pid : pids_) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  }
  const std::vector<uint16_t>& ports() const { return ports_; }

 private:
  PemFiles files_;
  std::vector<pid_t> pids_;
  std::vector<uint16_t> ports_;
};

// `processes` `openssl s_time -new` clients (each one connection at a time: a full
// mutual-TLS handshake and a close) against 127.0.0.1:port for `seconds`: the
// server's rate with a client side that costs little (OpenSSL's P-256). 0 when
// openssl cannot run.
double opensslClientsRate(const Pki& pki, uint16_t port, unsigned processes, unsigned seconds, const char* cipher) {
  PemFiles files(pki);
  std::vector<pid_t> pids;
  const auto t0 = Clock::now();
  for (unsigned i = 0; i < processes; ++i)
    pids.push_back(spawn({"openssl", "s_time", "-connect", "127.0.0.1:" + std::to_string(port), "-new", "-tls1_2",
                          "-time", std::to_string(seconds), "-cert", files.path("client.crt"), "-key",
                          files.path("client.key"), "-CAfile", files.path("ca.crt"), "-cipher", cipher},
                         files.path(("s_time-" + std::to_string(i) + ".out").c_str())));
  uint64_t connections = 0;
  for (unsigned i = 0; i < processes; ++i) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    // "1234 connections in 3.01s; 410.00 connections/user sec, bytes read 0"
    auto text = net::readTextFile(files.path(("s_time-" + std::to_string(i) + ".out").c_str()), "s_time output");
    if (!text) continue;
    const auto at = text->find(" connections in ");
    if (at == std::string::npos) continue;
    auto begin = text->rfind('\n', at);
    begin = begin == std::string::npos ? 0 : begin + 1;
    connections += std::strtoull(text->c_str() + begin, nullptr, 10);
  }
  return static_cast<double>(connections) / std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs `op` for about `seconds` of this thread's CPU time and returns its calls per
// CPU-second (on an idle machine the same as per second; on a busy one it leaves out
// the time the thread waited for a core, as the TLS figures per CPU-second do).
double rate(double seconds, const std::function<void()>& op) {
  uint64_t n = 0;
  const double t0 = threadCpuSeconds();
  double elapsed = 0;
  do {
    op();
    ++n;
  } while ((elapsed = threadCpuSeconds() - t0) < seconds);
  return static_cast<double>(n) / elapsed;
}

struct CryptoRates {
  double gcmMBps = 0, chachaMBps = 0;
  double p256Sign = 0, p256Verify = 0, x25519 = 0;
  // One side's ECDHE as in a handshake (a fresh context: key pair, then the shared
  // secret with the peer's public key), per CPU-second, for each group.
  double x25519Exchange = 0, p256Exchange = 0;
};

// `group`'s ECDHE as one side of a handshake does it, per CPU-second.
double exchangeRate(mbedtls_ecp_group_id group, mbedtls_ctr_drbg_context* drbg) {
  mbedtls_ecp_group grp;
  mbedtls_ecp_group_init(&grp);
  mbedtls_ecp_group_load(&grp, group);
  mbedtls_mpi peerKey;
  mbedtls_ecp_point peer;
  mbedtls_mpi_init(&peerKey);
  mbedtls_ecp_point_init(&peer);
  mbedtls_ecdh_gen_public(&grp, &peerKey, &peer, mbedtls_ctr_drbg_random, drbg);
  const double r = rate(0.5, [&] {
    mbedtls_ecdh_context ecdh;
    mbedtls_ecdh_init(&ecdh);
    mbedtls_mpi z;
    mbedtls_mpi_init(&z);
    if (mbedtls_ecdh_setup(&ecdh, group) != 0 ||
        mbedtls_ecdh_gen_public(&ecdh.grp, &ecdh.d, &ecdh.Q, mbedtls_ctr_drbg_random, drbg) != 0 ||
        mbedtls_ecdh_compute_shared(&ecdh.grp, &z, &peer, &ecdh.d, mbedtls_ctr_drbg_random, drbg) != 0)
      throw std::runtime_error("ECDHE failed");
    mbedtls_mpi_free(&z);
    mbedtls_ecdh_free(&ecdh);
  });
  mbedtls_mpi_free(&peerKey);
  mbedtls_ecp_point_free(&peer);
  mbedtls_ecp_group_free(&grp);
  return r;
}

// The primitives alone, one thread: AEADs over 16 KiB records (a TLS record's largest
// plaintext), P-256 ECDSA signatures and verifications, X25519 scalar multiplications.
CryptoRates measureCrypto() {
  CryptoRates r;
  std::vector<unsigned char> in(16384, 0x5a), out(16384);
  unsigned char key[32] = {7}, iv[12] = {1}, tag[16];
  mbedtls_gcm_context gcm;
  mbedtls_gcm_init(&gcm);
  mbedtls_gcm_setkey(&gcm, MBEDTLS_CIPHER_ID_AES, key, 128);
  r.gcmMBps = rate(0.5,
                   [&] {
                     mbedtls_gcm_crypt_and_tag(&gcm, MBEDTLS_GCM_ENCRYPT, in.size(), iv, sizeof iv, nullptr, 0,
                                               in.data(), out.data(), sizeof tag, tag);
                   }) *
              16384 / 1e6;
  mbedtls_gcm_free(&gcm);
  mbedtls_chachapoly_context chacha;
  mbedtls_chachapoly_init(&chacha);
  mbedtls_chachapoly_setkey(&chacha, key);
  r.chachaMBps =
      rate(
          0.5,
          [&] { mbedtls_chachapoly_encrypt_and_tag(&chacha, in.size(), iv, nullptr, 0, in.data(), out.data(), tag); }) *
      16384 / 1e6;
  mbedtls_chachapoly_free(&chacha);

  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_entropy_init(&entropy);
  mbedtls_ctr_drbg_init(&drbg);
  mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, nullptr, 0);
  mbedtls_ecdsa_context ecdsa;
  mbedtls_ecdsa_init(&ecdsa);
  mbedtls_ecdsa_genkey(&ecdsa, MBEDTLS_ECP_DP_SECP256R1, mbedtls_ctr_drbg_random, &drbg);
  unsigned char hash[32] = {3}, sig[MBEDTLS_ECDSA_MAX_LEN];
  size_t sigLen = 0;
  r.p256Sign = rate(0.5, [&] {
    mbedtls_ecdsa_write_signature(&ecdsa, MBEDTLS_MD_SHA256, hash, sizeof hash, sig, &sigLen, mbedtls_ctr_drbg_random,
                                  &drbg);
  });
  r.p256Verify = rate(0.5, [&] {
    if (mbedtls_ecdsa_read_signature(&ecdsa, hash, sizeof hash, sig, sigLen) != 0)
      throw std::runtime_error("ECDSA verification failed");
  });
  mbedtls_ecdsa_free(&ecdsa);
  mbedtls_ecp_group grp;
  mbedtls_ecp_group_init(&grp);
  mbedtls_ecp_group_load(&grp, MBEDTLS_ECP_DP_CURVE25519);
  mbedtls_mpi d, z;
  mbedtls_ecp_point q;
  mbedtls_mpi_init(&d);
  mbedtls_mpi_init(&z);
  mbedtls_ecp_point_init(&q);
  mbedtls_ecdh_gen_public(&grp, &d, &q, mbedtls_ctr_drbg_random, &drbg);
  r.x25519 = rate(0.5, [&] { mbedtls_ecdh_compute_shared(&grp, &z, &q, &d, mbedtls_ctr_drbg_random, &drbg); });
  mbedtls_mpi_free(&d);
  mbedtls_mpi_free(&z);
  mbedtls_ecp_point_free(&q);
  mbedtls_ecp_group_free(&grp);
  r.x25519Exchange = exchangeRate(MBEDTLS_ECP_DP_CURVE25519, &drbg);
  r.p256Exchange = exchangeRate(MBEDTLS_ECP_DP_SECP256R1, &drbg);
  mbedtls_ctr_drbg_free(&drbg);
  mbedtls_entropy_free(&entropy);
  return r;
}

// `openssl speed -evp aes-128-gcm` at 16384-byte blocks, MB/s (1e6 bytes); 0 when it
// cannot run.
double opensslGcmMBps() {
  FILE* pipe = popen("openssl speed -evp aes-128-gcm -bytes 16384 -seconds 1 2>/dev/null", "r");
  if (pipe == nullptr) return 0;
  char line[512];
  double kbps = 0;
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    // "AES-128-GCM    4474389.82k": thousands of bytes per second.
    if (std::strncmp(line, "AES-128-GCM", 11) == 0) {
      const char* last = std::strrchr(line, ' ');
      if (last != nullptr) kbps = std::strtod(last + 1, nullptr);
    }
  }
  pclose(pipe);
  return kbps / 1000.0;
}

}  // namespace

int main(int argc, char** argv) {
  // --handshakes: the handshake measurements only (no bulk transfer rows).
  // --wire-cpu: only the CPU a byte of 1 MiB frames costs at the busier end of a TLS
  // connection with the suite Starling negotiates here (what bench/predict.sh gives
  // `starling-sim predict --wire-cpu-ns-per-byte`), one line.
  bool handshakesOnly = false, wireCpuOnly = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--handshakes") == 0) {
      handshakesOnly = true;
    } else if (std::strcmp(argv[i], "--wire-cpu") == 0) {
      wireCpuOnly = true;
    } else {
      std::fprintf(stderr, "usage: bench-transport [--handshakes | --wire-cpu]\n");
      return 2;
    }
  }
  Pki pki;
  if (wireCpuOnly) {
    const Throughput t = throughput(true, pki, 1024 * 1024, 200, net::TlsOptions{});
    const double busier = std::min(t.senderCpuMBps, t.receiverCpuMBps);
    std::printf("summary: wire_cpu_ns_per_byte=%.2f tls_cpu_mb_s=%.1f\n", 1e3 / busier, busier);
    return 0;
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  struct Row {
    const char* label;
    std::size_t size, count;
    net::CipherPreference cipher;
  };
  const Row rows[] = {{"1 KiB", 1024, 100'000, net::CipherPreference::kAuto},
                      {"1 MiB", 1024 * 1024, 400, net::CipherPreference::kAuto},
                      {"1 MiB", 1024 * 1024, 400, net::CipherPreference::kChaCha20}};
  std::printf("Transport over loopback (127.0.0.1), one connection, one sender thread and one receiver thread\n");
  std::printf("TLS 1.2 (mbedTLS 2.28) beside plain TCP, same code path; %u cores; CPU AES instructions: %s\n\n", cores,
              net::cpuHasAesInstructions() ? "yes" : "no");
  if (!handshakesOnly)
    std::printf(
        "| message | count  | suite             | TLS MB/s | TCP MB/s | TLS / TCP | TLS MB/s per sender CPU-s | per "
        "receiver CPU-s |\n"
        "|---------|--------|-------------------|----------|----------|-----------|---------------------------|-----"
        "---------------|\n");
  double tls1m = 0, tcp1m = 0, chacha1m = 0, tls1mCpu = 0, tcp1mCpu = 0, chacha1mCpu = 0;
  for (const auto& r : rows) {
    if (handshakesOnly) break;
    net::TlsOptions options;
    options.cipher = r.cipher;
    const std::string suite = r.cipher == net::CipherPreference::kChaCha20 || !net::cpuHasAesInstructions()
                                  ? "CHACHA20-POLY1305"
                                  : "AES-128-GCM";
    const Throughput t = throughput(true, pki, r.size, r.count, options);
    const Throughput p = throughput(false, pki, r.size, r.count, options);
    std::printf("| %-7s | %6zu | %-17s | %8.1f | %8.1f | %9.2f | %25.1f | %18.1f |\n", r.label, r.count, suite.c_str(),
                t.mbps, p.mbps, t.mbps / p.mbps, t.senderCpuMBps, t.receiverCpuMBps);
    if (r.size == 1024 * 1024 && r.cipher == net::CipherPreference::kAuto) {
      tls1m = t.mbps, tcp1m = p.mbps;
      tls1mCpu = std::min(t.senderCpuMBps, t.receiverCpuMBps);
      tcp1mCpu = std::min(p.senderCpuMBps, p.receiverCpuMBps);
    }
    if (r.size == 1024 * 1024 && r.cipher == net::CipherPreference::kChaCha20) {
      chacha1m = t.mbps;
      chacha1mCpu = std::min(t.senderCpuMBps, t.receiverCpuMBps);
    }
  }

  const CryptoRates crypto = measureCrypto();
  const double opensslGcm = opensslGcmMBps();
  std::printf("\nThe ciphers alone, one thread, 16 KiB records (mbedTLS per CPU-second of the thread):\n\n");
  std::printf(
      "| cipher                              | MB/s     |\n|-------------------------------------|----------|\n");
  std::printf("| mbedTLS AES-128-GCM (mbedtls_gcm)   | %8.1f |\n", crypto.gcmMBps);
  std::printf("| mbedTLS ChaCha20-Poly1305           | %8.1f |\n", crypto.chachaMBps);
  std::printf("| openssl speed -evp aes-128-gcm      | %8.1f |\n", opensslGcm);
  if (!handshakesOnly) {
    std::printf(
        "\nTLS 1 MiB frames / mbedTLS AES-128-GCM alone: %.2f on the wall clock, %.2f per CPU-second of the busier "
        "end\n(the wall clock counts the time the two ends wait for a core when the machine is busy)\n",
        tls1m / crypto.gcmMBps, tls1mCpu / crypto.gcmMBps);
    // Where the busier end's CPU goes per MB: the cipher, the socket (plain TCP's CPU
    // per MB at that end), and what is left: the record layer, framing and copies.
    const double perMbTls = 1e3 / tls1mCpu, perMbGcm = 1e3 / crypto.gcmMBps, perMbTcp = 1e3 / tcp1mCpu;
    std::printf(
        "CPU per MB at the busier end: %.2f ms in TLS = %.2f ms AES-128-GCM + %.2f ms plain TCP + %.2f ms the rest\n"
        "ChaCha20-Poly1305 in TLS per CPU-second of the busier end: %.1f MB/s (%.2fx AES-128-GCM's)\n",
        perMbTls, perMbGcm, perMbTcp, perMbTls - perMbGcm - perMbTcp, chacha1mCpu,
        tls1mCpu > 0 ? chacha1mCpu / tls1mCpu : 0.0);
  }

  // Handshakes: the server on every core, the driver with as many threads, 16
  // connections in flight each.
  const unsigned driverThreads = cores;
  const unsigned inFlight = 16;
  const double seconds = 3.0;
  // A server per measurement, so that its threads' CPU time is that measurement's.
  const auto againstStarling = [&](bool resume, net::TlsOptions options) {
    HandshakeServer server(serverContext(pki, std::move(options)), cores);
    auto client = clientContext(pki, resume);
    // Resumed: one full handshake first (one slot, one handshake), so that every
    // measured connection has a session to offer (its CPU time is in the server's,
    // ~1/1000 of the row's).
    if (resume) driveHandshakes(client, {server.port()}, 1, 1, 1e-3);
    HandshakeRate r = driveHandshakes(client, {server.port()}, driverThreads, inFlight, seconds);
    server.stop();
    if (r.count > 0) r.serverCpuMs = server.cpuSeconds() * 1e3 / static_cast<double>(r.count);
    return r;
  };
  net::TlsOptions noCache;
  noCache.verifiedCertificateCapacity = 0;
  const HandshakeRate full = againstStarling(false, {});
  const HandshakeRate uncached = againstStarling(false, noCache);
  const HandshakeRate resumed = againstStarling(true, {});
  // With a revocation list (one other client revoked): checked on every handshake.
  HandshakeRate withCrl;
  {
    const auto now = std::chrono::system_clock::now();
    const auto other = net::issueCertificate(pki.ca, {net::CertificateKind::kClient,
                                                      "client-revoked",
                                                      {},
                                                      now - std::chrono::hours(1),
                                                      now + std::chrono::hours(1)})
                           .value();
    net::TlsIdentity identity{pki.ca.certPem, pki.server.certPem, pki.server.keyPem,
                              net::updateRevocationList(pki.ca, "", {other.certPem}, now - std::chrono::hours(1),
                                                        now + std::chrono::hours(24))
                                  .value()};
    HandshakeServer server(net::TlsContext::create(net::TlsRole::kServer, identity).value(), cores);
    withCrl = driveHandshakes(clientContext(pki, false), {server.port()}, driverThreads, inFlight, seconds);
    server.stop();
    if (withCrl.count > 0) withCrl.serverCpuMs = server.cpuSeconds() * 1e3 / static_cast<double>(withCrl.count);
  }
  // The same server driven by openssl s_time clients (cheap P-256): its own rate.
  double starlingByOpenssl = 0;
  {
    HandshakeServer server(serverContext(pki), cores);
    starlingByOpenssl =
        opensslClientsRate(pki, server.port(), cores, static_cast<unsigned>(seconds), "ECDHE-ECDSA-AES128-GCM-SHA256");
    server.stop();
  }
  HandshakeRate openssl;
  try {
    OpensslServers servers(pki, cores, "ECDHE-ECDSA-AES128-GCM-SHA256");
    openssl = driveHandshakes(clientContext(pki, false), servers.ports(), driverThreads, inFlight, seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "openssl s_server: %s\n", e.what());
  }
  std::printf(
      "\nMutual-TLS handshakes per second (TLS 1.2, X25519 + P-256 ECDSA both ways, a new TCP connection each;\n"
      "server on %u threads, driver of %u threads x %u connections in flight, mbedTLS on the driver's side, %.0f s "
      "each;\n"
      "per core-second: handshakes per second of the server's own CPU time, from its threads' CPU clocks):\n\n",
      cores, driverThreads, inFlight, seconds);
  std::printf(
      "| server                                 | handshakes | per second | resumed | failed | server CPU ms each | "
      "per core-second | driver CPU ms each |\n");
  std::printf(
      "|----------------------------------------|------------|------------|---------|--------|--------------------|-"
      "----------------|--------------------|\n");
  const auto printRate = [](const char* label, const HandshakeRate& r) {
    std::printf("| %-38s | %10llu | %10.0f | %7llu | %6llu | %18s | %15s | %18.2f |\n", label,
                static_cast<unsigned long long>(r.count), r.perSecond, static_cast<unsigned long long>(r.resumed),
                static_cast<unsigned long long>(r.failed),
                r.serverCpuMs > 0 ? fmt::format("{:.2f}", r.serverCpuMs).c_str() : "-",
                r.serverCpuMs > 0 ? fmt::format("{:.0f}", r.perCoreSecond()).c_str() : "-", r.driverCpuMs);
  };
  printRate("Starling (mbedTLS), full", full);
  printRate("Starling, full, certificate cache off", uncached);
  printRate("Starling, full, with a revocation list", withCrl);
  printRate("Starling (mbedTLS), resumed", resumed);
  printRate("openssl s_server x cores, full", openssl);
  std::printf(
      "\nThe Starling server driven by %u `openssl s_time -new` clients instead (OpenSSL's client side): %.0f full "
      "handshakes/s\n",
      cores, starlingByOpenssl);
  std::printf(
      "\nresumed / full: %.1fx; the server's own capacity from its CPU time: %.0f full (%.0f without the certificate "
      "cache), %.0f resumed per core-second, %.0f full on %u cores\n",
      full.perSecond > 0 ? resumed.perSecond / full.perSecond : 0.0, full.perCoreSecond(), uncached.perCoreSecond(),
      resumed.perCoreSecond(), cores * full.perCoreSecond(), cores);

  // What a full handshake costs the server in public-key operations, from the rates
  // above: one signature (ServerKeyExchange), one ECDHE (key pair and shared secret),
  // and two verifications (the CA's signature on the client's certificate, the
  // client's CertificateVerify), one of which the certificate cache skips.
  const double msSign = 1e3 / crypto.p256Sign, msVerify = 1e3 / crypto.p256Verify;
  const double msExchange = 1e3 / crypto.x25519Exchange;
  const double msUncached = msSign + 2 * msVerify + msExchange, msCached = msSign + msVerify + msExchange;
  std::printf(
      "\nmbedTLS public-key operations per CPU-second, one thread: P-256 sign %.0f, verify %.0f, X25519 %.0f;\n"
      "one side's ECDHE (key pair + shared secret, fresh context): X25519 %.0f, P-256 %.0f\n"
      "=> the server's public-key work per full handshake: %.2f ms (%.0f/s per core) verifying the client's "
      "certificate,\n   %.2f ms (%.0f/s per core) with it in the cache; measured above with everything else: %.2f ms "
      "and %.2f ms\n",
      crypto.p256Sign, crypto.p256Verify, crypto.x25519, crypto.x25519Exchange, crypto.p256Exchange, msUncached,
      1e3 / msUncached, msCached, 1e3 / msCached, uncached.serverCpuMs, full.serverCpuMs);

  std::printf(
      "summary: handshakes_per_s=%.0f openssl_handshakes_per_s=%.0f resumed_per_s=%.0f tls_mb_s=%.1f "
      "mbedtls_gcm_mb_s=%.1f openssl_gcm_mb_s=%.1f handshakes_per_core_s=%.0f handshakes_per_core_s_uncached=%.0f "
      "handshakes_per_core_s_crl=%.0f tcp_mb_s=%.1f chacha_tls_mb_s=%.1f chacha_mb_s=%.1f server_ms_per_full=%.2f "
      "server_ms_per_full_uncached=%.2f server_ms_per_resumed=%.3f driver_ms_per_full=%.2f tls_cpu_mb_s=%.1f "
      "chacha_tls_cpu_mb_s=%.1f handshakes_per_s_openssl_clients=%.0f x25519_exchange_per_s=%.0f "
      "p256_exchange_per_s=%.0f\n",
      full.perSecond, openssl.perSecond, resumed.perSecond, tls1m, crypto.gcmMBps, opensslGcm, full.perCoreSecond(),
      uncached.perCoreSecond(), withCrl.perCoreSecond(), tcp1m, chacha1m, crypto.chachaMBps, full.serverCpuMs,
      uncached.serverCpuMs, resumed.serverCpuMs, full.driverCpuMs, tls1mCpu, chacha1mCpu, starlingByOpenssl,
      crypto.x25519Exchange, crypto.p256Exchange);
  return 0;
}
