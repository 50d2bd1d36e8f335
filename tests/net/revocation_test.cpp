// Revocation: the CA's certificate revocation list, and a coordinator that refuses
// a revoked client at the handshake while it accepts the others.

#include <algorithm>
#include <catch2/catch.hpp>

#include "starling/client/protocol_client.hpp"
#include "starling/net/certificates.hpp"

#include "support/federation_fixture.hpp"

using namespace starling;
using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

Result<client::Task> join(const RunningServer& server, std::shared_ptr<const net::TlsContext> tls,
                          const std::string& id) {
  client::ClientOptions options;
  options.coordinator = server.endpoint();
  options.id = id;
  options.numExamples = 600;
  options.limits.handshakeTimeout = 3s;
  return runCoroutine([&](asio::any_io_executor ex) { return client::joinAndLeave(ex, tls, options, quietLogger()); });
}

std::string revocationList(const Pki& pki, const std::string& current, const std::vector<std::string>& revoke,
                           std::chrono::hours validFor = std::chrono::hours(24)) {
  const auto now = std::chrono::system_clock::now();
  return net::updateRevocationList(pki.ca, current, revoke, now - 1h, now + validFor).value();
}

bool lists(const std::vector<std::string>& serials, const net::KeyPair& kp) {
  const std::string serial = net::describeCertificate(kp.certPem).value().serial;
  return std::find(serials.begin(), serials.end(), serial) != serials.end();
}

}  // namespace

TEST_CASE("a revoked client is refused at the handshake while another client joins", "[net][tls][revocation]") {
  Pki pki;
  const auto revoked = pki.client("client-1");
  const auto kept = pki.client("client-2");
  pki.crlPem = revocationList(pki, "", {revoked.certPem});
  RunningServer server(pki);

  auto refused = join(server, pki.clientContext(revoked), "client-1");
  REQUIRE_FALSE(refused.isOk());
  CHECK_THAT(refused.status().message(), Catch::Contains("refused the TLS handshake"));
  CHECK(server.waitFor([&] { return server.log().contains("the certificate has been revoked"); }));

  auto accepted = join(server, pki.clientContext(kept), "client-2");
  REQUIRE(accepted.isOk());
  CHECK(accepted->clientId == "client-2");
  CHECK(server.waitFor([&] { return server.counters().joined == 1; }));
  CHECK(server.counters().refused == 1);
}

TEST_CASE("without a revocation list the same certificate joins", "[net][tls][revocation]") {
  Pki pki;
  const auto client = pki.client("client-1");
  RunningServer server(pki);
  CHECK(join(server, pki.clientContext(client), "client-1").isOk());
}

TEST_CASE("updating a revocation list keeps what it listed", "[net][revocation]") {
  Pki pki;
  const auto a = pki.client("client-a");
  const auto b = pki.client("client-b");
  const auto c = pki.client("client-c");
  const std::string first = revocationList(pki, "", {a.certPem});
  const std::string second = revocationList(pki, first, {b.certPem, a.certPem});
  auto serials = net::checkRevocationList(pki.ca.certPem, second);
  REQUIRE(serials.isOk());
  CHECK(serials->size() == 2);  // a once, not twice
  CHECK(lists(*serials, a));
  CHECK(lists(*serials, b));
  CHECK_FALSE(lists(*serials, c));

  SECTION("an empty list is valid and lists nothing") {
    auto none = net::checkRevocationList(pki.ca.certPem, revocationList(pki, "", {}));
    REQUIRE(none.isOk());
    CHECK(none->empty());
  }
}

TEST_CASE("unusable revocation lists are refused when the TLS context is made", "[net][revocation]") {
  Pki pki;
  Pki other;
  const auto client = pki.client("client-1");
  net::TlsIdentity identity = pki.serverIdentity();

  SECTION("signed by another CA of the same name") {
    identity.crlPem = revocationList(other, "", {});
    auto tls = net::TlsContext::create(net::TlsRole::kServer, identity);
    REQUIRE_FALSE(tls.isOk());
    CHECK_THAT(tls.status().message(), Catch::Contains("signature is not the CA's"));
  }
  SECTION("issued by another CA") {
    Pki renamed;
    renamed.ca =
        net::makeCertificateAuthority({net::CertificateKind::kCa, "Other CA", {}, Pki::now() - 1h, Pki::now() + 48h})
            .value();
    identity.crlPem = revocationList(renamed, "", {});
    auto tls = net::TlsContext::create(net::TlsRole::kServer, identity);
    REQUIRE_FALSE(tls.isOk());
    CHECK_THAT(tls.status().message(), Catch::Contains("not issued by the CA"));
  }
  SECTION("expired") {
    const auto now = std::chrono::system_clock::now();
    identity.crlPem = net::updateRevocationList(pki.ca, "", {client.certPem}, now - 48h, now - 24h).value();
    auto tls = net::TlsContext::create(net::TlsRole::kServer, identity);
    REQUIRE_FALSE(tls.isOk());
    CHECK_THAT(tls.status().message(), Catch::Contains("revocation list expired"));
  }
  SECTION("tampered with") {
    std::string crl = revocationList(pki, "", {client.certPem});
    // Flip one base64 character inside the body (not the header line).
    const std::size_t at = crl.find('\n') + 40;
    crl[at] = crl[at] == 'A' ? 'B' : 'A';
    identity.crlPem = crl;
    auto tls = net::TlsContext::create(net::TlsRole::kServer, identity);
    CHECK_FALSE(tls.isOk());
  }
  SECTION("not a revocation list") {
    identity.crlPem = "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n";
    CHECK_FALSE(net::TlsContext::create(net::TlsRole::kServer, identity).isOk());
  }
}

TEST_CASE("only certificates of the CA can be revoked", "[net][revocation]") {
  Pki pki;
  Pki other;
  const auto now = std::chrono::system_clock::now();
  auto r = net::updateRevocationList(pki.ca, "", {other.client("client-0").certPem}, now, now + 24h);
  REQUIRE_FALSE(r.isOk());
  CHECK_THAT(r.status().message(), Catch::Contains("not issued by this CA"));
  CHECK_FALSE(net::updateRevocationList(pki.ca, "", {}, now, now).isOk());
}
