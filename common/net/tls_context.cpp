#include "starling/net/tls_context.hpp"

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>

#include <fstream>
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
// certificates carry P-256 keys. ChaCha20-Poly1305 first: in mbedTLS 2.28 it is
// faster than AES-GCM on x86-64 (304 vs 217 MB/s per core here, see
// docs/transport.md) and on ARM devices, where 2.28 has no AES acceleration.
const int kCipherSuites[] = {
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    0,
};

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

struct TlsContext::Impl {
  mbedtls::Entropy entropy;
  mbedtls::CtrDrbg drbg;
  mbedtls::Crt ca;
  mbedtls::Crl crl;
  mbedtls::Crt cert;
  mbedtls::Pk key;
  mbedtls::SslConfig conf;  // declared last: destroyed first, it points at the others
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

TlsContext::~TlsContext() = default;

const mbedtls_ssl_config* TlsContext::config() const {
  return &impl_->conf.ctx;
}

Result<std::shared_ptr<const TlsContext>> TlsContext::create(TlsRole role, const TlsIdentity& identity,
                                                             std::string serverName) {
  if (role == TlsRole::kClient && serverName.empty())
    return Status(StatusCode::kInvalidArgument, "a client needs the coordinator's host name to verify");
  std::shared_ptr<TlsContext> ctx(new TlsContext(role, std::move(serverName)));
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
  mbedtls_ssl_conf_ciphersuites(&s.conf.ctx, kCipherSuites);
  mbedtls_ssl_conf_curves(&s.conf.ctx, kCurves);
  mbedtls_ssl_conf_renegotiation(&s.conf.ctx, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
  if (haveCert && (rc = mbedtls_ssl_conf_own_cert(&s.conf.ctx, &s.cert.ctx, &s.key.ctx)) != 0)
    return Status(StatusCode::kInternal, "TLS own certificate: " + mbedtlsErrorString(rc));
  return std::shared_ptr<const TlsContext>(std::move(ctx));
}

}  // namespace starling::net
