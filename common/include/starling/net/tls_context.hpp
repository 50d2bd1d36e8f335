#pragma once
// TlsContext: the mbedTLS configuration one side of Starling's mutual TLS uses for
// all its connections: trusted CA, own certificate and key, random generator.
//
// Mutual authentication is always on: a coordinator requires a client certificate
// signed by its CA, a client requires the coordinator's certificate to be signed by
// the same CA and to carry the expected host name; certificates on the CA's
// revocation list (TlsIdentity::crlPem) are refused. TLS 1.2 only (mbedTLS 2.28),
// ECDHE with AES-GCM or ChaCha20-Poly1305.
//
// Thread safety: immutable after create(); shared by every connection of a process
// (mbedTLS is built with MBEDTLS_THREADING_PTHREAD, so its RNG locks itself).

#include <memory>
#include <string>

#include "starling/util/status.hpp"

struct mbedtls_ssl_config;

namespace starling::net {

enum class TlsRole { kServer, kClient };

// PEM text of the trust anchor and of this side's certificate and key.
struct TlsIdentity {
  std::string caPem;
  std::string certPem;  // may be empty only for tests of refusal (no client cert)
  std::string keyPem;
  // The CA's certificate revocation list (PEM), or empty. A coordinator refuses, at
  // the handshake, a client certificate whose serial number the list names.
  std::string crlPem;
};

// Reads the three PEM files; the error names the file that is missing or unreadable.
Result<TlsIdentity> loadIdentity(const std::string& caPath, const std::string& certPath, const std::string& keyPath);

class TlsContext {
 public:
  // Parses the identity and builds the configuration. `serverName` is the host name
  // a client expects in the coordinator's certificate (ignored for servers).
  static Result<std::shared_ptr<const TlsContext>> create(TlsRole role, const TlsIdentity& identity,
                                                          std::string serverName = {});
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  TlsRole role() const { return role_; }
  const std::string& serverName() const { return serverName_; }
  const mbedtls_ssl_config* config() const;

 private:
  struct Impl;
  TlsContext(TlsRole role, std::string serverName);
  TlsRole role_;
  std::string serverName_;
  std::unique_ptr<Impl> impl_;
};

// "X509 - Certificate verification failed (...)" for an mbedTLS error code.
std::string mbedtlsErrorString(int code);

// A sentence per flag set in an X.509 verification result, e.g.
// "the certificate has expired; the certificate is not signed by a trusted CA".
std::string describeVerifyFlags(unsigned flags);

}  // namespace starling::net
