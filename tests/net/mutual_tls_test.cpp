// Mutual TLS between a real coordinator Server and clients on 127.0.0.1.

#include <catch2/catch.hpp>

#include "starling/client/protocol_client.hpp"

#include "support/federation_fixture.hpp"

using namespace starling;
using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

Result<client::Task> join(const RunningServer& server, std::shared_ptr<const net::TlsContext> tls,
                          const std::string& id = "client-0") {
  client::ClientOptions options;
  options.coordinator = server.endpoint();
  options.id = id;
  options.numExamples = 600;
  options.limits.handshakeTimeout = 3s;
  return runCoroutine([&](asio::any_io_executor ex) { return client::joinAndLeave(ex, tls, options, quietLogger()); });
}

}  // namespace

TEST_CASE("a client with a certificate from the coordinator's CA joins and learns its identity", "[net][tls]") {
  Pki pki;
  RunningServer server(pki);
  auto task = join(server, pki.clientContext(pki.client("client-7")), "client-7");
  REQUIRE(task.isOk());
  CHECK(task->clientId == "client-7");
  CHECK(task->modelSpec == "mlp:784-200-200-10");
  REQUIRE(server.waitFor([&] { return server.log().contains("client-7 joined from 127.0.0.1"); }));
  CHECK(server.counters().joined == 1);
}

TEST_CASE("the coordinator takes the identity from the certificate, not from Hello", "[net][tls]") {
  Pki pki;
  RunningServer server(pki);
  auto task = join(server, pki.clientContext(pki.client("client-2")), "client-9");
  REQUIRE(task.isOk());
  CHECK(task->clientId == "client-2");
  CHECK(server.waitFor([&] { return server.log().contains("says it is 'client-9'"); }));
}

TEST_CASE("many clients join at once", "[net][tls]") {
  Pki pki;
  RunningServer server(pki);
  constexpr int kClients = 24;
  std::vector<std::shared_ptr<const net::TlsContext>> contexts;
  for (int i = 0; i < kClients; ++i)
    contexts.push_back(pki.clientContext(pki.client("client-" + std::to_string(i))));
  asio::io_context io;
  int ok = 0;
  for (int i = 0; i < kClients; ++i) {
    client::ClientOptions options;
    options.coordinator = server.endpoint();
    options.id = "client-" + std::to_string(i);
    asio::co_spawn(io, client::joinAndLeave(io.get_executor(), contexts[i], options, quietLogger()),
                   [&](std::exception_ptr e, Result<client::Task> r) {
                     if (!e && r.isOk()) ++ok;
                   });
  }
  io.run();
  CHECK(ok == kClients);
  CHECK(server.waitFor([&] { return server.counters().joined == kClients; }));
}

TEST_CASE("the coordinator refuses clients it cannot authenticate, saying why", "[net][tls][refusal]") {
  Pki pki;
  RunningServer server(pki);

  SECTION("no client certificate") {
    auto tls = net::TlsContext::create(net::TlsRole::kClient, {pki.ca.certPem, "", "", ""}, "localhost").value();
    auto r = join(server, tls);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kUnauthenticated);
    CHECK(server.waitFor([&] { return server.log().contains("no certificate was presented"); }));
  }
  SECTION("a certificate from another CA") {
    Pki other;
    auto stranger = other.client("client-0");
    auto tls = net::TlsContext::create(net::TlsRole::kClient, {pki.ca.certPem, stranger.certPem, stranger.keyPem, ""},
                                       "localhost")
                   .value();
    auto r = join(server, tls);
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains("refused the TLS handshake"));
    CHECK(server.waitFor([&] { return server.log().contains("not signed by the trusted CA"); }));
  }
  SECTION("an expired certificate") {
    auto expired = pki.client("client-0", std::chrono::hours(-72), std::chrono::hours(-24));
    auto r = join(server, pki.clientContext(expired));
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains("certificate expired"));
    CHECK(server.waitFor([&] { return server.log().contains("the certificate has expired"); }));
  }
  SECTION("a certificate made for the coordinator, not for a client") {
    auto r = join(server, net::TlsContext::create(net::TlsRole::kClient, pki.serverIdentity(), "localhost").value());
    REQUIRE_FALSE(r.isOk());
    CHECK(server.waitFor([&] { return server.log().contains("extended key usage"); }));
  }
  CHECK(server.waitFor([&] { return server.counters().refused == 1; }));
  CHECK(server.counters().joined == 0);
}

TEST_CASE("a client refuses a coordinator whose certificate is for another host name", "[net][tls][refusal]") {
  Pki pki({"coordinator.example"});
  RunningServer server(pki);
  auto r = join(server, pki.clientContext(pki.client("client-0"), "localhost"));
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == StatusCode::kUnauthenticated);
  CHECK_THAT(r.status().message(),
             Catch::Contains("coordinator certificate refused") && Catch::Contains("another host name"));
}

TEST_CASE("a client refuses a coordinator signed by another CA", "[net][tls][refusal]") {
  Pki pki;
  Pki other;
  RunningServer server(other);
  auto r = join(server, pki.clientContext(pki.client("client-0")));
  REQUIRE_FALSE(r.isOk());
  CHECK_THAT(r.status().message(), Catch::Contains("not signed by the trusted CA"));
}

TEST_CASE("a client that never finishes the handshake is cut off without delaying others", "[net][tls][timeout]") {
  Pki pki;
  coordinator::ServerOptions options;
  options.limits.handshakeTimeout = 300ms;
  RunningServer server(pki, options);
  asio::io_context io;
  asio::ip::tcp::socket silent(io);
  silent.connect({asio::ip::make_address("127.0.0.1"), server.endpoint().port});
  // A well-behaved client is served while the silent one holds its socket open.
  REQUIRE(join(server, pki.clientContext(pki.client("client-1")), "client-1").isOk());
  CHECK(server.waitFor([&] { return server.log().contains("TLS handshake did not finish within 300 ms"); }));
  std::array<char, 1> byte{};
  std::error_code ec;
  silent.read_some(asio::buffer(byte), ec);
  CHECK(ec == asio::error::eof);
}

TEST_CASE("certificates state their roles; a relay's authenticates it to the coordinator and to its clients",
          "[net][tls][roles]") {
  Pki pki;
  const net::KeyPair relay = pki.relay("relay-0");
  CHECK(net::describeCertificate(relay.certPem).value().organizationalUnit == "relay");
  CHECK(net::describeCertificate(pki.client("client-0").certPem).value().organizationalUnit == "client");
  CHECK(net::describeCertificate(pki.coordinator.certPem).value().organizationalUnit == "coordinator");
  CHECK(net::describeCertificate(pki.ca.certPem).value().organizationalUnit.empty());

  // Upwards: the relay joins the coordinator as a client would, and is known as a relay.
  {
    RunningServer coordinator(pki);
    auto task = join(coordinator, pki.clientContext(relay), "relay-0");
    REQUIRE(task.isOk());
    CHECK(task->clientId == "relay-0");
    CHECK(coordinator.waitFor([&] { return coordinator.log().contains("relay-0 joined from 127.0.0.1"); }));
    CHECK(coordinator.log().contains("role relay"));
  }
  // Downwards: a client joins the relay as it joins a coordinator.
  {
    Pki atRelay = pki;
    atRelay.coordinator = relay;
    RunningServer relayServer(atRelay);
    auto task = join(relayServer, pki.clientContext(pki.client("client-4")), "client-4");
    REQUIRE(task.isOk());
    CHECK(task->clientId == "client-4");
    CHECK(relayServer.waitFor([&] { return relayServer.log().contains("client-4 joined from 127.0.0.1"); }));
    CHECK(relayServer.log().contains("role client"));
  }
  // A client's certificate cannot serve clients: a client refuses it.
  {
    Pki atClient = pki;
    atClient.coordinator = pki.client("client-5");
    RunningServer impostor(atClient);
    auto r = join(impostor, pki.clientContext(pki.client("client-6")), "client-6");
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kUnauthenticated);
  }
}

TEST_CASE("a peer's role comes from its certificate's OU; certificates from before roles keep theirs", "[net][roles]") {
  CHECK(net::roleFromOu("relay", net::Role::kClient) == net::Role::kRelay);
  CHECK(net::roleFromOu("client", net::Role::kCoordinator) == net::Role::kClient);
  CHECK(net::roleFromOu("coordinator", net::Role::kClient) == net::Role::kCoordinator);
  CHECK(net::roleFromOu("", net::Role::kClient) == net::Role::kClient);
  CHECK(net::roleFromOu("", net::Role::kCoordinator) == net::Role::kCoordinator);
  CHECK(net::roleFromOu("operator", net::Role::kClient) == net::Role::kOperator);
  CHECK(net::roleFromOu("auditor", net::Role::kClient) == net::Role::kUnknown);
  CHECK(std::string(net::roleName(net::Role::kRelay)) == "relay");
}
