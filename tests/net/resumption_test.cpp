// TLS 1.2 session resumption (session tickets): a client's second connection skips the
// full handshake, the coordinator still knows who it is, a revoked certificate cannot
// come back through its ticket, a ticket that is not intact, too old or another
// server's only costs a full handshake, and a client keeps a session per server.

#include <fmt/format.h>
#include <mbedtls/ssl.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
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
  SECTION("a handshake that fails after offering a session drops it: the next one is full") {
    const auto firstTls = first.tls;
    first.tls = nullptr;  // accepts and closes
    Handshake cut = connectOnce(first, client);
    CHECK_FALSE(cut.client.isOk());
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
