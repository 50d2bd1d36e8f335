#pragma once
// Certificates for Starling's mutual TLS, made with mbedTLS (no openssl needed).
//
// One CA signs everything. The coordinator's certificate names its host(s) in the
// subjectAltName and may only authenticate servers (extendedKeyUsage serverAuth);
// a client's certificate carries the client's identity in its subject CN and may
// only authenticate clients (clientAuth), so no client can pose as the coordinator.

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

enum class CertificateKind { kCa, kServer, kClient };

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
  // Host names the coordinator answers to. mbedTLS 2.28 compares an IP literal the
  // client dials against dNSName entries, so "127.0.0.1" is listed as one too.
  std::vector<std::string> hostnames = {"localhost", "127.0.0.1"};
  int days = 365;  // validity of the coordinator and client certificates
};

// Writes ca.crt, ca.key, coordinator.crt, coordinator.key and client-<i>.crt/.key
// for i in 0..clients-1 into outDir (created if missing; keys mode 0600).
Status writeCertificateDirectory(const InitOptions& options);

// Writes text to path atomically enough for key material (mode applies on create).
Status writeTextFile(const std::string& path, const std::string& text, unsigned mode);

}  // namespace starling::net
