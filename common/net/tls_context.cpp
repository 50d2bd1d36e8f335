#include "starling/net/tls_context.hpp"

#include <fmt/format.h>
#include <mbedtls/aesni.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_ticket.h>
#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "starling/net/certificates.hpp"

#include "mbedtls_handle.hpp"

namespace starling::net {
namespace {

Result<std::string> readFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kNotFound, std::string("cannot open ") + what + " '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return Status(StatusCode::kIo, std::string("cannot read ") + what + " '" + path + "'");
  return text.str();
}

// TLS 1.2 suites with forward secrecy and AEAD only; ECDSA because Starling's
// certificates carry P-256 keys. Which comes first is CipherPreference (see
// docs/transport.md for the measured speeds of both in mbedTLS 2.28).
const int kAesGcmFirst[] = {
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    0,
};
const int kChaChaFirst[] = {
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    0,
};

const int* cipherSuites(CipherPreference preference) {
  switch (preference) {
    case CipherPreference::kAesGcm:
      return kAesGcmFirst;
    case CipherPreference::kChaCha20:
      return kChaChaFirst;
    case CipherPreference::kAuto:
      break;
  }
  return cpuHasAesInstructions() ? kAesGcmFirst : kChaChaFirst;
}

// Key exchange groups: X25519 first (cheaper than P-256 in mbedTLS 2.28), P-256 for
// peers without it. Certificates stay P-256 ECDSA.
const mbedtls_ecp_group_id kCurves[] = {MBEDTLS_ECP_DP_CURVE25519, MBEDTLS_ECP_DP_SECP256R1, MBEDTLS_ECP_DP_NONE};

}  // namespace

std::string mbedtlsErrorString(int code) {
  char buf[256];
  mbedtls_strerror(code, buf, sizeof buf);
  return buf;
}

std::string describeVerifyFlags(unsigned flags) {
  struct Reason {
    unsigned flag;
    const char* text;
  };
  static constexpr Reason kReasons[] = {
      {MBEDTLS_X509_BADCERT_EXPIRED, "the certificate has expired"},
      {MBEDTLS_X509_BADCERT_FUTURE, "the certificate is not valid yet"},
      {MBEDTLS_X509_BADCERT_REVOKED, "the certificate has been revoked"},
      {MBEDTLS_X509_BADCERT_CN_MISMATCH, "the certificate is for another host name"},
      {MBEDTLS_X509_BADCERT_NOT_TRUSTED, "the certificate is not signed by the trusted CA"},
      {MBEDTLS_X509_BADCERT_MISSING, "no certificate was presented"},
      {MBEDTLS_X509_BADCERT_KEY_USAGE, "the certificate's key usage does not allow this use"},
      {MBEDTLS_X509_BADCERT_EXT_KEY_USAGE, "the certificate's extended key usage does not allow this use"},
      {MBEDTLS_X509_BADCERT_BAD_MD, "the certificate is signed with a disallowed hash"},
      {MBEDTLS_X509_BADCERT_BAD_KEY, "the certificate's key is too weak or of a disallowed type"},
      {MBEDTLS_X509_BADCRL_EXPIRED, "the revocation list has expired"},
  };
  std::string out;
  for (const auto& r : kReasons) {
    if (flags & r.flag) {
      if (!out.empty()) out += "; ";
      out += r.text;
    }
  }
  if (out.empty() && flags != 0) out = "certificate verification failed (flags 0x" + std::to_string(flags) + ")";
  return out;
}

bool cpuHasAesInstructions() {
#if defined(MBEDTLS_AESNI_C) && defined(MBEDTLS_HAVE_X86_64)
  return mbedtls_aesni_has_support(MBEDTLS_AESNI_AES) != 0 && mbedtls_aesni_has_support(MBEDTLS_AESNI_CLMUL) != 0;
#else
  return false;
#endif
}

struct SessionTicketKeys::Impl {
  mbedtls::Entropy entropy;
  mbedtls::CtrDrbg drbg;
  mbedtls::SslTicket ticket;  // declared last: destroyed first, it uses drbg
};

SessionTicketKeys::SessionTicketKeys() : impl_(std::make_unique<Impl>()) {}
SessionTicketKeys::~SessionTicketKeys() = default;

Result<std::shared_ptr<SessionTicketKeys>> SessionTicketKeys::create(std::chrono::seconds lifetime) {
  if (lifetime.count() < 1 || lifetime.count() > 7 * 24 * 3600)
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("session ticket lifetime {} s is outside 1 s .. 7 days", lifetime.count()));
  std::shared_ptr<SessionTicketKeys> keys(new SessionTicketKeys());
  Impl& k = *keys->impl_;
  static const char kPersonalization[] = "starling-tickets";
  int rc = mbedtls_ctr_drbg_seed(&k.drbg.ctx, mbedtls_entropy_func, &k.entropy.ctx,
                                 reinterpret_cast<const unsigned char*>(kPersonalization), sizeof kPersonalization);
  if (rc != 0) return Status(StatusCode::kInternal, "seeding the ticket key generator: " + mbedtlsErrorString(rc));
  rc = mbedtls_ssl_ticket_setup(&k.ticket.ctx, mbedtls_ctr_drbg_random, &k.drbg.ctx, MBEDTLS_CIPHER_AES_256_GCM,
                                static_cast<uint32_t>(lifetime.count()));
  if (rc != 0) return Status(StatusCode::kInternal, "making the session ticket keys: " + mbedtlsErrorString(rc));
  return keys;
}

struct TlsContext::Impl {
  mbedtls::Entropy entropy;
  mbedtls::CtrDrbg drbg;
  mbedtls::Crt ca;
  mbedtls::Crl crl;
  bool haveCrl = false;
  mbedtls::Crt cert;
  mbedtls::Pk key;
  std::shared_ptr<SessionTicketKeys> tickets;  // servers with resumption on
  // Clients: per server address, the session of the last successful handshake with it,
  // and when it was kept (a count: the oldest goes first past kMaxKeptSessions).
  struct Kept {
    mbedtls::SslSession session{};
    uint64_t order{};
  };
  mutable std::mutex sessionMu;  // clients: guards sessions and keptCount
  std::map<std::string, std::unique_ptr<Kept>> sessions;
  uint64_t keptCount = 0;
  mbedtls::SslConfig conf;  // declared last: destroyed first, it points at the others

  // Makes `from` the kept session of `server` (taking over what it owns; `from` is left
  // empty).
  void adopt(const std::string& server, mbedtls::SslSession& from) {
    std::lock_guard lock(sessionMu);
    std::unique_ptr<Kept>& slot = sessions[server];
    if (!slot) slot = std::make_unique<Kept>();
    mbedtls_ssl_session_free(&slot->session.ctx);
    slot->session.ctx = from.ctx;
    mbedtls_ssl_session_init(&from.ctx);
    slot->order = ++keptCount;
    if (sessions.size() > TlsContext::kMaxKeptSessions)
      sessions.erase(std::min_element(sessions.begin(), sessions.end(),
                                      [](const auto& a, const auto& b) { return a.second->order < b.second->order; }));
  }

  // Ticket callbacks (p_ticket is this Impl): mbedtls_ssl_ticket seals and opens; a
  // ticket whose certificate is now revoked or expired is refused like an expired one,
  // so the handshake goes on as a full one, which refuses that certificate and says why.
  static int writeTicket(void* self, const mbedtls_ssl_session* session, unsigned char* start, const unsigned char* end,
                         size_t* length, uint32_t* lifetime) {
    auto* impl = static_cast<Impl*>(self);
    return mbedtls_ssl_ticket_write(&impl->tickets->impl().ticket.ctx, session, start, end, length, lifetime);
  }
  static int parseTicket(void* self, mbedtls_ssl_session* session, unsigned char* buf, size_t len) {
    auto* impl = static_cast<Impl*>(self);
    int rc = mbedtls_ssl_ticket_parse(&impl->tickets->impl().ticket.ctx, session, buf, len);
    if (rc != 0) return rc;
    const mbedtls_x509_crt* peer = session->peer_cert;
    if (peer == nullptr || mbedtls_x509_time_is_past(&peer->valid_to) != 0 ||
        (impl->haveCrl && mbedtls_x509_crt_is_revoked(peer, &impl->crl.ctx) != 0))
      return MBEDTLS_ERR_SSL_SESSION_TICKET_EXPIRED;
    return 0;
  }
};

Result<TlsIdentity> loadIdentity(const std::string& caPath, const std::string& certPath, const std::string& keyPath) {
  TlsIdentity id;
  auto ca = readFile(caPath, "CA certificate");
  if (!ca) return ca.status();
  auto cert = readFile(certPath, "certificate");
  if (!cert) return cert.status();
  auto key = readFile(keyPath, "private key");
  if (!key) return key.status();
  id.caPem = std::move(*ca);
  id.certPem = std::move(*cert);
  id.keyPem = std::move(*key);
  return id;
}

TlsContext::TlsContext(TlsRole role, std::string serverName)
    : role_(role), serverName_(std::move(serverName)), impl_(std::make_unique<Impl>()) {}

bool TlsContext::offerSession(mbedtls_ssl_context* ssl, const std::string& server) const {
  if (role_ != TlsRole::kClient || !resumption_) return false;
  std::lock_guard lock(impl_->sessionMu);
  auto it = impl_->sessions.find(server);
  if (it == impl_->sessions.end()) return false;
  // A session mbedTLS cannot take back is only a lost shortcut: the handshake is full.
  return mbedtls_ssl_set_session(ssl, &it->second->session.ctx) == 0;
}

void TlsContext::keepSession(const mbedtls_ssl_context* ssl, const std::string& server) const {
  if (role_ != TlsRole::kClient || !resumption_) return;
  mbedtls::SslSession got;
  if (mbedtls_ssl_get_session(ssl, &got.ctx) != 0) return;
  impl_->adopt(server, got);
}

void TlsContext::forgetSession(const std::string& server) const {
  std::lock_guard lock(impl_->sessionMu);
  impl_->sessions.erase(server);
}

std::vector<uint8_t> TlsContext::saveSession(const std::string& server) const {
  std::lock_guard lock(impl_->sessionMu);
  auto it = impl_->sessions.find(server);
  if (it == impl_->sessions.end()) return {};
  const mbedtls_ssl_session* session = &it->second->session.ctx;
  size_t length = 0;
  (void)mbedtls_ssl_session_save(session, nullptr, 0, &length);
  std::vector<uint8_t> out(length);
  if (mbedtls_ssl_session_save(session, out.data(), out.size(), &length) != 0) return {};
  out.resize(length);
  return out;
}

Status TlsContext::restoreSession(const std::string& server, std::span<const uint8_t> saved) const {
  if (role_ != TlsRole::kClient) return Status(StatusCode::kInvalidArgument, "only a client keeps a TLS session");
  mbedtls::SslSession loaded;
  if (int rc = mbedtls_ssl_session_load(&loaded.ctx, saved.data(), saved.size()); rc != 0)
    return Status(StatusCode::kMalformed, "unusable saved TLS session: " + mbedtlsErrorString(rc));
  impl_->adopt(server, loaded);
  return Status::ok();
}

TlsContext::~TlsContext() = default;

const mbedtls_ssl_config* TlsContext::config() const {
  return &impl_->conf.ctx;
}

Result<std::shared_ptr<const TlsContext>> TlsContext::create(TlsRole role, const TlsIdentity& identity,
                                                             std::string serverName, TlsOptions options) {
  if (role == TlsRole::kClient && serverName.empty())
    return Status(StatusCode::kInvalidArgument, "a client needs the coordinator's host name to verify");
  std::shared_ptr<TlsContext> ctx(new TlsContext(role, std::move(serverName)));
  ctx->resumption_ = options.resumption;
  Impl& s = *ctx->impl_;
  auto pem = [](const std::string& text) { return reinterpret_cast<const unsigned char*>(text.c_str()); };

  static const char kPersonalization[] = "starling-tls";
  int rc = mbedtls_ctr_drbg_seed(&s.drbg.ctx, mbedtls_entropy_func, &s.entropy.ctx,
                                 reinterpret_cast<const unsigned char*>(kPersonalization), sizeof kPersonalization);
  if (rc != 0) return Status(StatusCode::kInternal, "seeding the TLS random generator: " + mbedtlsErrorString(rc));

  if ((rc = mbedtls_x509_crt_parse(&s.ca.ctx, pem(identity.caPem), identity.caPem.size() + 1)) != 0)
    return Status(StatusCode::kInvalidArgument, "parsing the CA certificate: " + mbedtlsErrorString(rc));
  const bool haveCrl = !identity.crlPem.empty();
  if (haveCrl) {
    // Checked here (issuer, signature, expiry) so that an unusable list stops the
    // coordinator at start instead of mbedTLS ignoring it, or refusing everyone.
    auto serials = checkRevocationList(identity.caPem, identity.crlPem);
    if (!serials) return serials.status();
    if ((rc = mbedtls_x509_crl_parse(&s.crl.ctx, pem(identity.crlPem), identity.crlPem.size() + 1)) != 0)
      return Status(StatusCode::kInvalidArgument, "parsing the revocation list: " + mbedtlsErrorString(rc));
    s.haveCrl = true;
  }
  const bool haveCert = !identity.certPem.empty();
  if (haveCert) {
    if ((rc = mbedtls_x509_crt_parse(&s.cert.ctx, pem(identity.certPem), identity.certPem.size() + 1)) != 0)
      return Status(StatusCode::kInvalidArgument, "parsing the certificate: " + mbedtlsErrorString(rc));
    if ((rc = mbedtls_pk_parse_key(&s.key.ctx, pem(identity.keyPem), identity.keyPem.size() + 1, nullptr, 0)) != 0)
      return Status(StatusCode::kInvalidArgument, "parsing the private key: " + mbedtlsErrorString(rc));
    if ((rc = mbedtls_pk_check_pair(&s.cert.ctx.pk, &s.key.ctx)) != 0)
      return Status(StatusCode::kInvalidArgument, "the private key does not belong to the certificate");
  } else if (role == TlsRole::kServer) {
    return Status(StatusCode::kInvalidArgument, "a coordinator needs a certificate and key");
  }

  rc =
      mbedtls_ssl_config_defaults(&s.conf.ctx, role == TlsRole::kServer ? MBEDTLS_SSL_IS_SERVER : MBEDTLS_SSL_IS_CLIENT,
                                  MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
  if (rc != 0) return Status(StatusCode::kInternal, "TLS defaults: " + mbedtlsErrorString(rc));
  mbedtls_ssl_conf_rng(&s.conf.ctx, mbedtls_ctr_drbg_random, &s.drbg.ctx);
  mbedtls_ssl_conf_authmode(&s.conf.ctx, MBEDTLS_SSL_VERIFY_REQUIRED);
  mbedtls_ssl_conf_ca_chain(&s.conf.ctx, &s.ca.ctx, haveCrl ? &s.crl.ctx : nullptr);
  mbedtls_ssl_conf_min_version(&s.conf.ctx, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
  mbedtls_ssl_conf_ciphersuites(&s.conf.ctx, cipherSuites(options.cipher));
  mbedtls_ssl_conf_curves(&s.conf.ctx, kCurves);
  mbedtls_ssl_conf_renegotiation(&s.conf.ctx, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
  if (haveCert && (rc = mbedtls_ssl_conf_own_cert(&s.conf.ctx, &s.cert.ctx, &s.key.ctx)) != 0)
    return Status(StatusCode::kInternal, "TLS own certificate: " + mbedtlsErrorString(rc));
  // Session tickets (RFC 5077) rather than a server-side session cache: nothing per
  // client is stored on the coordinator, and mbedTLS 2.28 (MBEDTLS_SSL_KEEP_PEER_CERTIFICATE)
  // seals the client's certificate into the ticket, so a resumed session still names it.
  if (role == TlsRole::kServer && options.resumption) {
    s.tickets = options.ticketKeys;
    if (!s.tickets) {
      auto keys = SessionTicketKeys::create(options.ticketLifetime);
      if (!keys) return keys.status();
      s.tickets = std::move(*keys);
    }
    mbedtls_ssl_conf_session_tickets_cb(&s.conf.ctx, &Impl::writeTicket, &Impl::parseTicket, &s);
  }
  mbedtls_ssl_conf_session_tickets(&s.conf.ctx, role == TlsRole::kClient && options.resumption
                                                    ? MBEDTLS_SSL_SESSION_TICKETS_ENABLED
                                                    : MBEDTLS_SSL_SESSION_TICKETS_DISABLED);
  return std::shared_ptr<const TlsContext>(std::move(ctx));
}

}  // namespace starling::net
