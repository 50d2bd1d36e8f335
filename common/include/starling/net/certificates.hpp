#pragma once
// Certificates for Starling's mutual TLS, made with mbedTLS (no openssl needed).
//
// One CA signs everything. The coordinator's certificate names its host(s) in the
// subjectAltName and may only authenticate servers (extendedKeyUsage serverAuth);
// a client's certificate carries the client's identity in its subject CN and may
// only authenticate clients (clientAuth), so no client can pose as the coordinator.
// A relay's certificate (starling-relay, between the coordinator and its clients)
// authenticates both ways: a server to its clients, a client to the coordinator.
//
// Each certificate states its role in its subject's organizationalUnit (OU=coordinator,
// OU=relay, OU=client); the key usages above make the roles hold in the handshake, the
// OU lets a peer tell a relay from a client (both may authenticate as clients).
// Certificates made before roles existed have no OU: a server's is the coordinator's,
// a client's a client's.

#include <chrono>
#include <string>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::net {

// A private key and its certificate, both PEM.
struct KeyPair {
  std::string keyPem;
  std::string certPem;
};

// kOperator: a person watching the coordinator's dashboard (docs/dashboard.md), not a
// trainer: a client certificate whose OU is "operator".
enum class CertificateKind { kCa, kServer, kClient, kRelay, kOperator };

// The role a certificate states (its subject's OU), as its peers read it.
enum class Role { kCoordinator, kRelay, kClient, kOperator, kUnknown };
// "coordinator", "relay", "client", "operator", "unknown".
const char* roleName(Role role);
// The role of a peer whose certificate's OU is `ou`; an empty OU (a certificate from
// before roles) is `legacy`'s role: a server's is the coordinator, a client's a client.
Role roleFromOu(const std::string& ou, Role legacy);

struct CertificateRequest {
  CertificateKind kind = CertificateKind::kClient;
  std::string commonName;             // "client-3", "starling-coordinator", ...
  std::vector<std::string> dnsNames;  // subjectAltName dNSName entries (servers)
  std::chrono::system_clock::time_point notBefore;
  std::chrono::system_clock::time_point notAfter;
};

// A self-signed CA (P-256, SHA-256).
Result<KeyPair> makeCertificateAuthority(const CertificateRequest& request);

// A certificate for request, signed by ca.
Result<KeyPair> issueCertificate(const KeyPair& ca, const CertificateRequest& request);

struct InitOptions {
  std::string outDir;
  int clients = 0;
  int relays = 0;     // relay-<i>.crt/.key, each naming its own host names (relayHostnames) too
  int operators = 0;  // operator-<i>.crt/.key: the dashboard beyond localhost (docs/dashboard.md)
  // Host names the coordinator answers to. mbedTLS 2.28 compares an IP literal the
  // client dials against dNSName entries, so "127.0.0.1" is listed as one too.
  std::vector<std::string> hostnames = {"localhost", "127.0.0.1"};
  // Host names every relay answers to (its clients dial one of them), besides
  // "relay-<i>" itself.
  std::vector<std::string> relayHostnames = {"localhost", "127.0.0.1"};
  int days = 365;  // validity of the coordinator, relay and client certificates
};

// Writes ca.crt, ca.key, coordinator.crt, coordinator.key, client-<i>.crt/.key for i in
// 0..clients-1, relay-<j>.crt/.key for j in 0..relays-1 and operator-<k>.crt/.key for k in
// 0..operators-1 into outDir (created if
// missing; keys mode 0600).
Status writeCertificateDirectory(const InitOptions& options);

// ---- revocation ----
//
// A revoked client is named in the CA's certificate revocation list (CRL, X.509 v2,
// PEM "X509 CRL", signed by the CA key). The coordinator loads it at start and the
// handshake refuses any certificate whose serial number it lists.

// A CRL signed by ca listing every entry of currentCrlPem (empty: none; it must be
// signed by ca) plus the serials of revokeCertPems (each must be issued by ca).
// thisUpdate is also the revocation date of the new entries; after nextUpdate the
// coordinator refuses to start with the list (renew it by running revoke again).
Result<std::string> updateRevocationList(const KeyPair& ca, const std::string& currentCrlPem,
                                         const std::vector<std::string>& revokeCertPems,
                                         std::chrono::system_clock::time_point thisUpdate,
                                         std::chrono::system_clock::time_point nextUpdate);

// Serial numbers (lowercase hex) a CRL lists, after checking it is signed by caPem;
// an error says why the list is unusable (unparsable, another issuer, bad signature,
// expired).
Result<std::vector<std::string>> checkRevocationList(const std::string& caPem, const std::string& crlPem);

// Serial number (lowercase hex) and subject CN of a PEM certificate.
struct CertificateInfo {
  std::string serial;
  std::string commonName;
  std::string organizationalUnit;  // the role: "coordinator", "relay", "client" ("" before roles)
};
Result<CertificateInfo> describeCertificate(const std::string& certPem);

struct RevokeOptions {
  std::string certsDir;                // holds ca.crt, ca.key and <client>.crt
  std::vector<std::string> clients;    // "client-3": revokes certsDir/client-3.crt
  std::vector<std::string> certFiles;  // other certificates to revoke, by path
  std::string crlPath;                 // default: certsDir/crl.pem (updated in place)
  int days = 30;                       // the list's validity (nextUpdate)
};

// Adds the certificates to the CRL (creating it if missing; with none to add, renews
// it) and replaces the file atomically. Returns the certificates it added.
Result<std::vector<CertificateInfo>> revokeCertificates(const RevokeOptions& options);

// Reads a whole file; the error names `what` and the path.
Result<std::string> readTextFile(const std::string& path, const char* what);

// Writes text to path atomically enough for key material (mode applies on create).
Status writeTextFile(const std::string& path, const std::string& text, unsigned mode);

}  // namespace starling::net
