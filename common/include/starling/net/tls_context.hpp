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
// Resumption (TLS 1.2 session tickets, RFC 5077): a server issues tickets sealed with
// its SessionTicketKeys; a client keeps the session of its last successful handshake
// with each server (by the address it reached) and offers it on its next connection to
// that server, which then skips the certificates, signatures and key exchange. A ticket
// the server does not accept (another server's, a restarted one's, an expired one) only
// makes that handshake a full one. A resumed session carries the peer's certificate, so the peer's
// identity is the same as after a full handshake, and a server checks that certificate
// against its revocation list again before it accepts a ticket. docs/transport.md.
//
// Peer certificates: a context with its own certificate and a single CA verifies its
// peer's certificate itself, from mbedTLS's verification callback: against the CA, the
// revocation list (by serial; the list's signature is checked once, at create()) and a
// cache of certificates it verified before (VerifiedCertificates), which spares a
// byte-identical certificate the CA signature check and nothing else.
//
// Thread safety: immutable after create() except the client's kept sessions, which are
// guarded; shared by every connection of a process (mbedTLS is built with
// MBEDTLS_THREADING_PTHREAD, so its RNG and ticket keys lock themselves).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "starling/net/verified_certificates.hpp"
#include "starling/util/status.hpp"

struct mbedtls_ssl_config;
struct mbedtls_ssl_context;

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

// The keys a server seals its session tickets with (AES-256-GCM, mbedtls_ssl_ticket):
// two keys, the active one replaced by a fresh random key every `lifetime`, so a ticket
// is accepted for at most `lifetime` (and its key is gone after twice that). Made by
// create(), they live in memory only: a restarted server accepts no earlier ticket (its
// clients do one full handshake each). Made by open(), they are kept in a file, so a
// restarted server resumes the sessions of before. Several server contexts may share one
// set (a context rebuilt with a new revocation list keeps accepting the tickets of the
// old one).
// Thread safety: any thread (mbedTLS locks the keys; the file is written under a lock).
class SessionTicketKeys {
 public:
  static Result<std::shared_ptr<SessionTicketKeys>> create(std::chrono::seconds lifetime);
  // Keys kept in the file at `path`: read when it exists, else made and written (mode
  // 0600, written to a temporary file, synced and renamed over). The file holds the
  // active and the previous key with their creation times and is rewritten each time the
  // active key is replaced, when it is older than `lifetime` (at open() too). A file that
  // others may read or write, or that is not in this format, is refused with the reason:
  // whoever holds these keys can open every ticket. Format: docs/security.md.
  static Result<std::shared_ptr<SessionTicketKeys>> open(const std::string& path, std::chrono::seconds lifetime);
  // Kept keys: replaces the active key if it is older than the lifetime and writes the
  // file; a failed write leaves the new key in memory only and returns why. Called
  // before every ticket is sealed or opened; a no-op for keys made by create() (mbedTLS
  // replaces those itself).
  Status rotateIfDue();
  // open(): whether the file existed (the keys of an earlier run are in use).
  bool reloaded() const { return reloaded_; }
  ~SessionTicketKeys();
  SessionTicketKeys(const SessionTicketKeys&) = delete;
  SessionTicketKeys& operator=(const SessionTicketKeys&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  SessionTicketKeys();
  std::unique_ptr<Impl> impl_;
  bool reloaded_ = false;
};

// Which AEAD the side prefers (a coordinator's choice decides: mbedTLS servers pick by
// their own order).
enum class CipherPreference {
  kAuto,      // AES-128-GCM first where the CPU has AES and carry-less multiply instructions, else ChaCha20
  kAesGcm,    // AES-128-GCM first
  kChaCha20,  // ChaCha20-Poly1305 first
};

struct TlsOptions {
  // Servers: issue session tickets and accept them. Clients: offer the session of the
  // last successful handshake with a server on the next connection to that server. Off:
  // every handshake is full.
  bool resumption = true;
  // Servers: how long a ticket is accepted (and how often its key is replaced).
  std::chrono::seconds ticketLifetime{6 * 3600};
  // Servers: the ticket keys to use; empty: a set of this context's own.
  std::shared_ptr<SessionTicketKeys> ticketKeys;
  CipherPreference cipher = CipherPreference::kAuto;
  // Peer certificates already verified against the CA skip that signature check on
  // their next full handshake (VerifiedCertificates; dates, revocation and the
  // handshake signature are still checked every time). How many to remember (0: none),
  // or a set to share between contexts of the same CA (a context rebuilt with a new
  // revocation list keeps what the old one verified).
  std::size_t verifiedCertificateCapacity = 16384;
  std::shared_ptr<VerifiedCertificates> verifiedCertificates;
};

// True when this CPU has the AES and PCLMULQDQ instructions mbedTLS uses for AES-GCM.
bool cpuHasAesInstructions();

class TlsContext {
 public:
  // Parses the identity and builds the configuration. `serverName` is the host name
  // a client expects in the coordinator's certificate (ignored for servers).
  static Result<std::shared_ptr<const TlsContext>> create(TlsRole role, const TlsIdentity& identity,
                                                          std::string serverName = {}, TlsOptions options = {});
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  TlsRole role() const { return role_; }
  const std::string& serverName() const { return serverName_; }
  const mbedtls_ssl_config* config() const;
  bool resumption() const { return resumption_; }
  // The verified-certificate cache in use, or null when there is none.
  const std::shared_ptr<VerifiedCertificates>& verifiedCertificates() const;

  // Client side of resumption, for TlsStream (any thread). Sessions are kept per server,
  // `server` being the address the connection reached ("127.0.0.1:7444",
  // PeerIdentity::address): a ticket goes back only to the server that issued it, so a
  // client with several servers (relays, a coordinator's fallback) resumes with each.
  // At most kMaxKeptSessions are kept (the least recently kept one goes first).
  static constexpr std::size_t kMaxKeptSessions = 16;
  // Offers `server`'s kept session on a new connection; false (nothing offered) when
  // there is none or resumption is off.
  bool offerSession(mbedtls_ssl_context* ssl, const std::string& server) const;
  // Keeps the session of a connection to `server` whose handshake succeeded.
  void keepSession(const mbedtls_ssl_context* ssl, const std::string& server) const;
  // Drops `server`'s kept session (its next handshake is full).
  void forgetSession(const std::string& server) const;
  // `server`'s kept session serialized (mbedtls_ssl_session_save: master secret, ticket,
  // the server's certificate; secret material), empty when there is none; and the
  // reverse, which replaces it. A device may keep it across restarts.
  std::vector<uint8_t> saveSession(const std::string& server) const;
  Status restoreSession(const std::string& server, std::span<const uint8_t> saved) const;

 private:
  struct Impl;
  TlsContext(TlsRole role, std::string serverName);
  TlsRole role_;
  std::string serverName_;
  bool resumption_ = true;
  std::unique_ptr<Impl> impl_;
};

// "X509 - Certificate verification failed (...)" for an mbedTLS error code.
std::string mbedtlsErrorString(int code);

// A sentence per flag set in an X.509 verification result, e.g.
// "the certificate has expired; the certificate is not signed by a trusted CA".
std::string describeVerifyFlags(unsigned flags);

}  // namespace starling::net
