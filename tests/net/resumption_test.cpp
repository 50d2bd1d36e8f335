// What a returning client skips, and what it cannot skip. TLS 1.2 session resumption
// (session tickets): a client's second connection skips the full handshake, the
// coordinator still knows who it is, a revoked certificate cannot come back through
// its ticket, a ticket that is not intact, too old or another server's only costs a
// full handshake, and a client keeps a session per server. The verified-certificate
// cache: a full handshake with a certificate verified before skips its CA signature
// check, but a revoked, expired or different certificate is refused as without the
// cache.

#include <fmt/format.h>
#include <mbedtls/ssl.h>
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "starling/client/protocol_client.hpp"
#include "starling/net/certificates.hpp"
#include "starling/net/tls_stream.hpp"

#include "support/federation_fixture.hpp"

using namespace starling;
using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

// What each end of one connection saw of its handshake.
struct Handshake {
  Status server = Status::ok();
  Status client = Status::ok();
  net::PeerIdentity serverSaw;  // the client, as the server knows it
  net::PeerIdentity clientSaw;  // the server, as the client knows it
};

// A server: one port of 127.0.0.1 for as long as it lives (a client keeps its session
// by the address it reached) and the TLS context it answers with, which a test may
// replace between connections (a server restarted on the same port) or set to null (a
// server that accepts and closes at once).
struct Listener {
  explicit Listener(std::shared_ptr<const net::TlsContext> context) : tls(std::move(context)) {}
  std::string address() const { return fmt::format("127.0.0.1:{}", acceptor.local_endpoint().port()); }

  std::shared_ptr<const net::TlsContext> tls;
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}};
};

// One TCP connection to `server` and a TLS handshake on both ends.
Handshake connectOnce(Listener& server, std::shared_ptr<const net::TlsContext> clientTls) {
  constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);
  asio::io_context& io = server.io;
  io.restart();
  Handshake out;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec, socket] = co_await server.acceptor.async_accept(kAsTuple);
        if (ec) {
          out.server = Status(StatusCode::kIo, ec.message());
          co_return;
        }
        if (!server.tls) {
          out.server = Status(StatusCode::kClosed, "closed without a handshake");
          co_return;  // the socket closes here
        }
        auto stream = net::TlsStream::create(std::move(socket), server.tls).value();
        out.server = co_await stream->handshake();
        out.serverSaw = stream->peer();
        co_await stream->shutdown();
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::ip::tcp::socket socket(io);
        auto [ec] = co_await socket.async_connect(server.acceptor.local_endpoint(), kAsTuple);
        if (ec) {
          out.client = Status(StatusCode::kIo, ec.message());
          co_return;
        }
        auto stream = net::TlsStream::create(std::move(socket), clientTls).value();
        out.client = co_await stream->handshake();
        out.clientSaw = stream->peer();
        // Take the server's close_notify: a ticket sent after our last flight arrives
        // before the server closes.
        uint8_t byte = 0;
        (void)co_await stream->readSome({&byte, 1});
        stream->close();
      },
      asio::detached);
  io.run();
  return out;
}

// One connection to a server made for it.
Handshake connectOnce(std::shared_ptr<const net::TlsContext> serverTls,
                      std::shared_ptr<const net::TlsContext> clientTls) {
  Listener server(std::move(serverTls));
  return connectOnce(server, std::move(clientTls));
}

std::shared_ptr<const net::TlsContext> serverContext(const Pki& pki, net::TlsOptions options = {}) {
  return net::TlsContext::create(net::TlsRole::kServer, pki.serverIdentity(), {}, std::move(options)).value();
}

std::shared_ptr<const net::TlsContext> clientContext(const net::KeyPair& kp, const Pki& pki,
                                                     net::TlsOptions options = {}) {
  return net::TlsContext::create(net::TlsRole::kClient, {pki.ca.certPem, kp.certPem, kp.keyPem, {}}, "localhost",
                                 std::move(options))
      .value();
}

// A relay's server context: its own certificate (for "localhost") and ticket keys.
std::shared_ptr<const net::TlsContext> relayContext(const Pki& pki, const net::KeyPair& relay) {
  return net::TlsContext::create(net::TlsRole::kServer, {pki.ca.certPem, relay.certPem, relay.keyPem, {}}).value();
}

// Connects twice and returns what the second connection saw.
Handshake reconnect(Listener& server, std::shared_ptr<const net::TlsContext> clientTls) {
  Handshake first = connectOnce(server, clientTls);
  REQUIRE(first.server.isOk());
  REQUIRE(first.client.isOk());
  return connectOnce(server, clientTls);
}

// A handshake that succeeded as a full one and names `commonName` on the server.
void checkFull(const Handshake& h, const std::string& commonName) {
  REQUIRE(h.server.isOk());
  REQUIRE(h.client.isOk());
  CHECK_FALSE(h.serverSaw.resumed);
  CHECK_FALSE(h.clientSaw.resumed);
  CHECK(h.serverSaw.commonName == commonName);
}

// Both ends saw a resumed session, and the server knows the client as commonName.
void checkResumed(const Handshake& h, const std::string& commonName) {
  REQUIRE(h.server.isOk());
  REQUIRE(h.client.isOk());
  CHECK(h.serverSaw.resumed);
  CHECK(h.clientSaw.resumed);
  CHECK(h.serverSaw.commonName == commonName);
}

// The session `tls` kept for `server` with one byte of its ticket flipped, put back.
void tamperWithTicket(const net::TlsContext& tls, const std::string& server) {
  std::vector<uint8_t> saved = tls.saveSession(server);
  REQUIRE_FALSE(saved.empty());
  mbedtls_ssl_session session;
  mbedtls_ssl_session_init(&session);
  REQUIRE(mbedtls_ssl_session_load(&session, saved.data(), saved.size()) == 0);
  REQUIRE(session.ticket_len > 32);
  session.ticket[session.ticket_len / 2] ^= 0x01;
  std::size_t length = 0;
  REQUIRE(mbedtls_ssl_session_save(&session, saved.data(), saved.size(), &length) == 0);
  mbedtls_ssl_session_free(&session);
  REQUIRE(tls.restoreSession(server, std::span<const uint8_t>(saved.data(), length)).isOk());
}

}  // namespace

TEST_CASE("a reconnecting client resumes its session and is still its certificate's identity",
          "[net][tls][resumption]") {
  Pki pki;
  const auto device = pki.client("client-7");
  Listener server(serverContext(pki));
  auto client = clientContext(device, pki);

  Handshake first = connectOnce(server, client);
  checkFull(first, "client-7");

  Handshake second = connectOnce(server, client);
  REQUIRE(second.server.isOk());
  REQUIRE(second.client.isOk());
  CHECK(second.serverSaw.resumed);
  CHECK(second.clientSaw.resumed);
  // The identity after resumption is the one of the full handshake, field for field.
  CHECK(second.serverSaw.commonName == first.serverSaw.commonName);
  CHECK(second.serverSaw.role == first.serverSaw.role);
  CHECK(second.serverSaw.fingerprint == first.serverSaw.fingerprint);
  CHECK(second.clientSaw.commonName == "localhost");
  CHECK(second.clientSaw.fingerprint == first.clientSaw.fingerprint);
  CHECK(second.serverSaw.cipherSuite == first.serverSaw.cipherSuite);

  SECTION("a third connection resumes from the ticket the second one brought") {
    Handshake third = connectOnce(server, client);
    REQUIRE(third.server.isOk());
    CHECK(third.serverSaw.resumed);
    CHECK(third.serverSaw.commonName == "client-7");
  }
  SECTION("two clients resume as themselves, not as each other") {
    auto otherClient = clientContext(pki.client("client-8"), pki);
    REQUIRE(connectOnce(server, otherClient).server.isOk());
    Handshake other = connectOnce(server, otherClient);
    Handshake again = connectOnce(server, client);
    CHECK(other.serverSaw.resumed);
    CHECK(other.serverSaw.commonName == "client-8");
    CHECK(again.serverSaw.resumed);
    CHECK(again.serverSaw.commonName == "client-7");
  }
  SECTION("a client with resumption off does a full handshake every time") {
    net::TlsOptions off;
    off.resumption = false;
    auto plain = clientContext(device, pki, off);
    checkFull(reconnect(server, plain), "client-7");
    CHECK(plain->saveSession(server.address()).empty());
  }
  SECTION("a server with resumption off issues no ticket and does full handshakes") {
    net::TlsOptions off;
    off.resumption = false;
    Listener plainServer(serverContext(pki, off));
    checkFull(reconnect(plainServer, clientContext(device, pki)), "client-7");
  }
}

TEST_CASE("a revoked client's ticket is refused and its full handshake too", "[net][tls][resumption][revocation]") {
  Pki pki;
  const auto revoked = pki.client("client-1");
  const auto kept = pki.client("client-2");
  // One set of ticket keys for the coordinator before and after the revocation list
  // changed: without the check on resumption the old ticket would let client-1 in.
  auto keys = net::SessionTicketKeys::create(1h).value();
  net::TlsOptions options;
  options.ticketKeys = keys;
  Listener server(serverContext(pki, options));
  auto revokedClient = clientContext(revoked, pki);
  auto keptClient = clientContext(kept, pki);
  REQUIRE(connectOnce(server, revokedClient).server.isOk());
  REQUIRE(connectOnce(server, keptClient).server.isOk());

  const auto now = std::chrono::system_clock::now();
  pki.crlPem = net::updateRevocationList(pki.ca, "", {revoked.certPem}, now - 1h, now + 24h).value();
  server.tls = serverContext(pki, options);  // rebuilt with the new list, on the same port

  Handshake refused = connectOnce(server, revokedClient);
  CHECK_FALSE(refused.server.isOk());
  CHECK_THAT(refused.server.message(), Catch::Contains("the certificate has been revoked"));
  CHECK_FALSE(refused.client.isOk());
  CHECK_FALSE(refused.serverSaw.resumed);

  Handshake resumed = connectOnce(server, keptClient);
  REQUIRE(resumed.server.isOk());
  CHECK(resumed.serverSaw.resumed);
  CHECK(resumed.serverSaw.commonName == "client-2");
}

TEST_CASE("a ticket that is not intact, unknown or expired falls back to a full handshake", "[net][tls][resumption]") {
  Pki pki;
  const auto device = pki.client("client-3");
  auto client = clientContext(device, pki);

  SECTION("tampered with") {
    Listener server(serverContext(pki));
    REQUIRE(connectOnce(server, client).server.isOk());
    tamperWithTicket(*client, server.address());
    checkFull(connectOnce(server, client), "client-3");
    // ... and the full handshake brought a good ticket again.
    CHECK(connectOnce(server, client).serverSaw.resumed);
  }
  SECTION("sealed by another server's keys (a coordinator restarted on the same port)") {
    Listener server(serverContext(pki));
    REQUIRE(connectOnce(server, client).server.isOk());
    server.tls = serverContext(pki);
    checkFull(connectOnce(server, client), "client-3");
    CHECK(connectOnce(server, client).serverSaw.resumed);
  }
  SECTION("older than the ticket lifetime") {
    net::TlsOptions shortLived;
    shortLived.ticketLifetime = 1s;
    Listener server(serverContext(pki, shortLived));
    REQUIRE(connectOnce(server, client).server.isOk());
    // mbedTLS counts ticket age in whole seconds: wait until it is past 1 s for sure.
    std::this_thread::sleep_for(2100ms);
    checkFull(connectOnce(server, client), "client-3");
  }
}

// A scratch directory removed at the end of the test.
struct ScratchDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("starling-tickets-" + std::to_string(::getpid()) + "-" +
                                std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string fileText(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("ticket keys kept in a file let a restarted server resume its clients' sessions",
          "[net][tls][resumption][ticket-keys]") {
  Pki pki;
  ScratchDir dir;
  const std::string file = (dir.path / "starling.db.ticket-keys").string();
  const auto device = pki.client("client-4");
  auto client = clientContext(device, pki);
  auto serverWith = [&](std::shared_ptr<net::SessionTicketKeys> keys) {
    net::TlsOptions options;
    options.ticketKeys = std::move(keys);
    return serverContext(pki, options);
  };

  auto first = net::SessionTicketKeys::open(file, 6h);
  REQUIRE(first.isOk());
  CHECK_FALSE((*first)->reloaded());
  CHECK((std::filesystem::status(file).permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  // One listener: a restart is a new context on the same port (sessions are kept per address).
  Listener server(serverWith(*first));
  REQUIRE(connectOnce(server, client).server.isOk());

  SECTION("the same file after a restart: the ticket is accepted, the identity is the certificate's") {
    auto again = net::SessionTicketKeys::open(file, 6h);
    REQUIRE(again.isOk());
    CHECK((*again)->reloaded());
    server.tls = serverWith(*again);
    checkResumed(connectOnce(server, client), "client-4");
  }
  SECTION("another file (keys lost): a full handshake") {
    auto other = net::SessionTicketKeys::open((dir.path / "other.ticket-keys").string(), 6h);
    REQUIRE(other.isOk());
    server.tls = serverWith(*other);
    checkFull(connectOnce(server, client), "client-4");
  }
  SECTION("an expired active key is replaced at open and kept as the previous one") {
    const std::string before = fileText(file);
    const std::string activeName = before.substr(before.find("\nactive ") + 8, 8);
    std::this_thread::sleep_for(2100ms);
    auto rotated = net::SessionTicketKeys::open(file, 1s);
    REQUIRE(rotated.isOk());
    const std::string after = fileText(file);
    CHECK(after.find("\nprevious " + activeName + " ") != std::string::npos);
    CHECK(after.find("\nactive " + activeName + " ") == std::string::npos);
  }
  SECTION("a file others may read is refused, saying how to fix it") {
    std::filesystem::permissions(file, std::filesystem::perms::group_read, std::filesystem::perm_options::add);
    auto refused = net::SessionTicketKeys::open(file, 6h);
    REQUIRE_FALSE(refused.isOk());
    CHECK_THAT(refused.status().message(), Catch::Contains("mode 0640") && Catch::Contains("chmod 600"));
  }
  SECTION("a damaged file is refused, naming the line") {
    std::string text = fileText(file);
    text[text.find("\nactive ") + 9] = 'Z';
    {
      std::ofstream out(file, std::ios::trunc);
      out << text;
    }
    auto refused = net::SessionTicketKeys::open(file, 6h);
    REQUIRE_FALSE(refused.isOk());
    CHECK_THAT(refused.status().message(), Catch::Contains("line 4") && Catch::Contains("key name"));
  }
}

TEST_CASE("a client keeps a session per server: another server's ticket only costs a full handshake",
          "[net][tls][resumption]") {
  Pki pki;
  const auto device = pki.client("client-6");
  // Two relays: their own certificates, ticket keys and ports.
  const auto relay0 = pki.relay("relay-0");
  const auto relay1 = pki.relay("relay-1");
  Listener first(relayContext(pki, relay0));
  Listener second(relayContext(pki, relay1));
  auto client = clientContext(device, pki);

  Handshake a = connectOnce(first, client);
  checkFull(a, "client-6");
  CHECK(a.clientSaw.commonName == "relay-0");

  SECTION("moving to the second server is a full handshake; then each resumes with its own ticket") {
    Handshake b = connectOnce(second, client);
    checkFull(b, "client-6");
    CHECK(b.clientSaw.commonName == "relay-1");
    for (int i = 0; i < 2; ++i) {
      Handshake backToFirst = connectOnce(first, client);
      REQUIRE(backToFirst.server.isOk());
      CHECK(backToFirst.serverSaw.resumed);
      CHECK(backToFirst.clientSaw.resumed);
      CHECK(backToFirst.clientSaw.commonName == "relay-0");
      CHECK(backToFirst.serverSaw.commonName == "client-6");
      Handshake backToSecond = connectOnce(second, client);
      REQUIRE(backToSecond.server.isOk());
      CHECK(backToSecond.serverSaw.resumed);
      CHECK(backToSecond.clientSaw.resumed);
      CHECK(backToSecond.clientSaw.commonName == "relay-1");
    }
  }
  SECTION("the first server's ticket offered to the second (another ticket key) falls back to a full handshake") {
    // What a client keeping one session for all its servers would offer.
    std::vector<uint8_t> firstSession = client->saveSession(first.address());
    REQUIRE_FALSE(firstSession.empty());
    REQUIRE(client->restoreSession(second.address(), firstSession).isOk());
    Handshake b = connectOnce(second, client);
    checkFull(b, "client-6");
    // The second server's own certificate was verified, not the one in the offered session.
    CHECK(b.clientSaw.commonName == "relay-1");
    CHECK(b.clientSaw.fingerprint != a.clientSaw.fingerprint);
    // The full handshake brought the second server's own ticket, and the first server's
    // session is still the first's.
    CHECK(connectOnce(second, client).serverSaw.resumed);
    CHECK(connectOnce(first, client).serverSaw.resumed);
  }
  SECTION("a handshake cut by the network keeps the session: the next one resumes") {
    // A server that accepts and closes at once, as a restarted coordinator with
    // thousands of devices returning may: the client's ticket is still good.
    const auto firstTls = first.tls;
    first.tls = nullptr;
    Handshake cut = connectOnce(first, client);
    CHECK_FALSE(cut.client.isOk());
    CHECK(cut.client.code() != StatusCode::kUnauthenticated);
    CHECK_FALSE(client->saveSession(first.address()).empty());
    first.tls = firstTls;
    checkResumed(connectOnce(first, client), "client-6");
  }
  SECTION("a handshake refused by TLS after offering a session drops it: the next one is full") {
    // Another CA's server on the same address: the client refuses its certificate.
    Pki other;
    const auto firstTls = first.tls;
    first.tls = serverContext(other);
    Handshake refused = connectOnce(first, client);
    CHECK(refused.client.code() == StatusCode::kUnauthenticated);
    CHECK(client->saveSession(first.address()).empty());
    // The same server again (same ticket keys): it would have taken the ticket.
    first.tls = firstTls;
    checkFull(connectOnce(first, client), "client-6");
  }
}

TEST_CASE("the suite follows the cipher preference", "[net][tls]") {
  Pki pki;
  auto client = clientContext(pki.client("client-4"), pki);
  net::TlsOptions aes;
  aes.cipher = net::CipherPreference::kAesGcm;
  net::TlsOptions chacha;
  chacha.cipher = net::CipherPreference::kChaCha20;
  CHECK(connectOnce(serverContext(pki, aes), client).serverSaw.cipherSuite ==
        "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256");
  CHECK(connectOnce(serverContext(pki, chacha), client).serverSaw.cipherSuite ==
        "TLS-ECDHE-ECDSA-WITH-CHACHA20-POLY1305-SHA256");
  const auto automatic = connectOnce(serverContext(pki), client).serverSaw.cipherSuite;
  CHECK(automatic == (net::cpuHasAesInstructions() ? "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256"
                                                   : "TLS-ECDHE-ECDSA-WITH-CHACHA20-POLY1305-SHA256"));
}

TEST_CASE("the coordinator logs a client's second join as a resumed session of the same identity",
          "[net][tls][resumption]") {
  Pki pki;
  RunningServer server(pki);
  auto tls = pki.clientContext(pki.client("client-5"));
  client::ClientOptions options;
  options.coordinator = server.endpoint();
  options.id = "client-5";
  options.numExamples = 100;
  const auto join = [&] {
    return runCoroutine(
        [&](asio::any_io_executor ex) { return client::joinAndLeave(ex, tls, options, quietLogger()); });
  };
  auto first = join();
  REQUIRE(first.isOk());
  REQUIRE(server.waitFor([&] { return server.counters().joined == 1; }));
  CHECK_FALSE(server.log().contains("resumed session"));
  auto second = join();
  REQUIRE(second.isOk());
  CHECK(second->clientId == "client-5");
  CHECK(server.waitFor(
      [&] { return server.log().contains("client-5 joined") && server.log().contains("resumed session"); }));
}

namespace {

// A client that never offers a session: every connection is a full handshake.
std::shared_ptr<const net::TlsContext> fullHandshakeClient(const net::KeyPair& kp, const Pki& pki) {
  net::TlsOptions options;
  options.resumption = false;
  return clientContext(kp, pki, options);
}

net::TlsOptions sharing(std::shared_ptr<net::VerifiedCertificates> cache) {
  net::TlsOptions options;
  options.verifiedCertificates = std::move(cache);
  return options;
}

}  // namespace

TEST_CASE("a certificate verified once skips its CA signature check next time and is still its identity",
          "[net][tls][certificate-cache]") {
  Pki pki;
  auto cache = std::make_shared<net::VerifiedCertificates>(16);
  auto server = serverContext(pki, sharing(cache));
  REQUIRE(server->verifiedCertificates() == cache);
  auto client = fullHandshakeClient(pki.client("client-6"), pki);

  Handshake first = connectOnce(server, client);
  checkFull(first, "client-6");
  CHECK(cache->stats().misses == 1);
  CHECK(cache->stats().hits == 0);
  CHECK(cache->stats().size == 1);

  Handshake second = connectOnce(server, client);
  checkFull(second, "client-6");
  CHECK(cache->stats().hits == 1);
  CHECK(second.serverSaw.fingerprint == first.serverSaw.fingerprint);
  CHECK(second.serverSaw.role == first.serverSaw.role);

  // The client's side caches the coordinator's certificate the same way.
  const auto& clientCache = client->verifiedCertificates();
  REQUIRE(clientCache != nullptr);
  CHECK(clientCache->stats().hits == 1);
  CHECK(clientCache->stats().misses == 1);
}

TEST_CASE("a revoked certificate is refused even when the cache holds it",
          "[net][tls][certificate-cache][revocation]") {
  Pki pki;
  const auto revoked = pki.client("client-7");
  const auto kept = pki.client("client-8");
  // One cache for the coordinator before and after the revocation list changed: the
  // cache must not let client-7 skip the list.
  auto cache = std::make_shared<net::VerifiedCertificates>(16);
  auto before = serverContext(pki, sharing(cache));
  auto revokedClient = fullHandshakeClient(revoked, pki);
  auto keptClient = fullHandshakeClient(kept, pki);
  REQUIRE(connectOnce(before, revokedClient).server.isOk());
  REQUIRE(connectOnce(before, keptClient).server.isOk());
  REQUIRE(cache->stats().size == 2);

  const auto now = std::chrono::system_clock::now();
  pki.crlPem = net::updateRevocationList(pki.ca, "", {revoked.certPem}, now - 1h, now + 24h).value();
  auto after = serverContext(pki, sharing(cache));
  const uint64_t hitsBefore = cache->stats().hits;

  Handshake refused = connectOnce(after, revokedClient);
  CHECK_FALSE(refused.server.isOk());
  CHECK_THAT(refused.server.message(), Catch::Contains("the certificate has been revoked"));
  CHECK_FALSE(refused.client.isOk());
  CHECK(cache->stats().hits == hitsBefore + 1);  // found in the cache, refused all the same

  checkFull(connectOnce(after, keptClient), "client-8");
  CHECK(cache->stats().hits == hitsBefore + 2);

  SECTION("and with resumption on, neither its ticket nor its cached certificate lets it in") {
    auto resuming = clientContext(revoked, pki);
    REQUIRE(connectOnce(before, resuming).server.isOk());  // a ticket from before the revocation
    Handshake again = connectOnce(after, resuming);
    CHECK_FALSE(again.server.isOk());
    CHECK_THAT(again.server.message(), Catch::Contains("the certificate has been revoked"));
    CHECK_FALSE(again.serverSaw.resumed);
  }
}

TEST_CASE("an expired certificate is refused even when the cache holds it", "[net][tls][certificate-cache]") {
  Pki pki;
  const auto now = std::chrono::system_clock::now();
  // Valid for 2 more seconds (X.509 times are whole seconds).
  const auto shortLived =
      net::issueCertificate(pki.ca, {net::CertificateKind::kClient, "client-9", {}, now - 1h, now + 2s}).value();
  auto server = serverContext(pki);
  auto client = fullHandshakeClient(shortLived, pki);
  REQUIRE(connectOnce(server, client).server.isOk());
  REQUIRE(server->verifiedCertificates()->stats().size == 1);

  std::this_thread::sleep_for(3100ms);
  Handshake refused = connectOnce(server, client);
  CHECK_FALSE(refused.server.isOk());
  CHECK_THAT(refused.server.message(), Catch::Contains("the certificate has expired"));
  CHECK_THAT(refused.client.message(), Catch::Contains("certificate expired"));
  CHECK(server->verifiedCertificates()->stats().hits == 1);
}

TEST_CASE("only a byte-identical certificate of the same CA is taken from the cache", "[net][tls][certificate-cache]") {
  Pki pki;
  auto cache = std::make_shared<net::VerifiedCertificates>(16);
  auto server = serverContext(pki, sharing(cache));
  REQUIRE(connectOnce(server, fullHandshakeClient(pki.client("client-10"), pki)).server.isOk());

  SECTION("the same name from another CA") {
    Pki other;
    // It trusts the coordinator's CA, but its certificate is from another one.
    auto impostor = fullHandshakeClient(other.client("client-10"), pki);
    Handshake refused = connectOnce(server, impostor);
    CHECK_FALSE(refused.server.isOk());
    CHECK_THAT(refused.server.message(), Catch::Contains("the certificate is not signed by the trusted CA"));
  }
  SECTION("a second certificate of the same CA and name") {
    checkFull(connectOnce(server, fullHandshakeClient(pki.client("client-10"), pki)), "client-10");
    CHECK(cache->stats().hits == 0);
    CHECK(cache->stats().misses == 2);
  }
  SECTION("the same certificate, once the coordinator trusts another CA") {
    Pki other;
    auto foreign = net::TlsContext::create(net::TlsRole::kServer,
                                           {other.ca.certPem, pki.coordinator.certPem, pki.coordinator.keyPem, {}}, {},
                                           sharing(cache))
                       .value();
    Handshake refused = connectOnce(foreign, fullHandshakeClient(pki.client("client-10"), pki));
    CHECK_FALSE(refused.server.isOk());
    CHECK(cache->stats().hits == 0);
  }
}

TEST_CASE("without the cache every full handshake verifies the certificate", "[net][tls][certificate-cache]") {
  Pki pki;
  net::TlsOptions none;
  none.verifiedCertificateCapacity = 0;
  auto server = serverContext(pki, none);
  CHECK(server->verifiedCertificates() == nullptr);
  auto client = fullHandshakeClient(pki.client("client-11"), pki);
  checkFull(connectOnce(server, client), "client-11");
  checkFull(connectOnce(server, client), "client-11");
  const auto now = std::chrono::system_clock::now();
  pki.crlPem = net::updateRevocationList(pki.ca, "", {pki.client("client-12").certPem}, now - 1h, now + 24h).value();
  auto withList = serverContext(pki, none);
  checkFull(connectOnce(withList, client), "client-11");
}

TEST_CASE("the cache holds at most its capacity, dropping the least recently used", "[net][certificate-cache]") {
  net::VerifiedCertificates cache(2);
  const net::VerifiedCertificates::Key a{1}, b{2}, c{3};
  cache.add(a);
  cache.add(b);
  CHECK(cache.contains(a));  // a is now the most recently used
  cache.add(c);              // drops b
  CHECK(cache.stats().size == 2);
  CHECK(cache.contains(a));
  CHECK(cache.contains(c));
  CHECK_FALSE(cache.contains(b));
  net::VerifiedCertificates off(0);
  off.add(a);
  CHECK_FALSE(off.contains(a));
}
