#include "starling/net/certificates.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <mbedtls/bignum.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "starling/net/tls_context.hpp"

namespace starling::net {
namespace {

// RAII owners of the mbedTLS contexts used while making certificates.
struct Rng {
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  Rng() {
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
  }
  ~Rng() {
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
  }
  Rng(const Rng&) = delete;
  Rng& operator=(const Rng&) = delete;
  Status seed() {
    static const char kPers[] = "starling-certificates";
    int rc = mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, reinterpret_cast<const unsigned char*>(kPers),
                                   sizeof kPers);
    if (rc != 0) return Status(StatusCode::kInternal, "seeding the random generator: " + mbedtlsErrorString(rc));
    return Status::ok();
  }
};

struct Pk {
  mbedtls_pk_context ctx;
  Pk() { mbedtls_pk_init(&ctx); }
  ~Pk() { mbedtls_pk_free(&ctx); }
  Pk(const Pk&) = delete;
  Pk& operator=(const Pk&) = delete;
};

struct Crt {
  mbedtls_x509_crt ctx;
  Crt() { mbedtls_x509_crt_init(&ctx); }
  ~Crt() { mbedtls_x509_crt_free(&ctx); }
  Crt(const Crt&) = delete;
  Crt& operator=(const Crt&) = delete;
};

struct CrtWriter {
  mbedtls_x509write_cert ctx;
  CrtWriter() { mbedtls_x509write_crt_init(&ctx); }
  ~CrtWriter() { mbedtls_x509write_crt_free(&ctx); }
  CrtWriter(const CrtWriter&) = delete;
  CrtWriter& operator=(const CrtWriter&) = delete;
};

struct Mpi {
  mbedtls_mpi ctx;
  Mpi() { mbedtls_mpi_init(&ctx); }
  ~Mpi() { mbedtls_mpi_free(&ctx); }
  Mpi(const Mpi&) = delete;
  Mpi& operator=(const Mpi&) = delete;
};

Status fail(const char* what, int rc) {
  return Status(StatusCode::kInternal, fmt::format("{}: {}", what, mbedtlsErrorString(rc)));
}

const unsigned char* bytes(const std::string& s) {
  return reinterpret_cast<const unsigned char*>(s.c_str());
}

// X.509 time "YYYYMMDDhhmmss" in UTC.
std::string x509Time(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y%m%d%H%M%S", &tm);
  return buf;
}

// DER length octets.
void appendDerLength(std::string& out, std::size_t len) {
  if (len < 0x80) {
    out.push_back(static_cast<char>(len));
  } else if (len <= 0xff) {
    out.push_back(static_cast<char>(0x81));
    out.push_back(static_cast<char>(len));
  } else {
    out.push_back(static_cast<char>(0x82));
    out.push_back(static_cast<char>(len >> 8));
    out.push_back(static_cast<char>(len & 0xff));
  }
}

std::string derSequence(const std::string& content) {
  std::string out(1, '\x30');
  appendDerLength(out, content.size());
  return out + content;
}

// subjectAltName: SEQUENCE OF [2] IMPLICIT IA5String (dNSName).
std::string subjectAltName(const std::vector<std::string>& names) {
  std::string content;
  for (const auto& n : names) {
    content.push_back('\x82');
    appendDerLength(content, n.size());
    content += n;
  }
  return derSequence(content);
}

// extendedKeyUsage: SEQUENCE OF OBJECT IDENTIFIER.
std::string extendedKeyUsage(const std::string& oid) {
  std::string content(1, '\x06');
  appendDerLength(content, oid.size());
  content += oid;
  return derSequence(content);
}

Status generateKey(Pk& key, Rng& rng) {
  int rc = mbedtls_pk_setup(&key.ctx, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY));
  if (rc != 0) return fail("key setup", rc);
  rc = mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(key.ctx), mbedtls_ctr_drbg_random, &rng.drbg);
  if (rc != 0) return fail("generating a P-256 key", rc);
  return Status::ok();
}

Result<std::string> keyPem(Pk& key) {
  std::string buf(4096, '\0');
  int rc = mbedtls_pk_write_key_pem(&key.ctx, reinterpret_cast<unsigned char*>(buf.data()), buf.size());
  if (rc != 0) return fail("writing the key", rc);
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

// Signs a certificate for subjectKey. issuerKey/issuerName are the CA's (or the
// subject's own, for the self-signed CA).
Result<std::string> signCertificate(const CertificateRequest& req, Pk& subjectKey, Pk& issuerKey,
                                    const std::string& issuerName, Rng& rng) {
  if (req.commonName.empty() || req.commonName.find_first_of(",=+\"\\<>;") != std::string::npos)
    return Status(StatusCode::kInvalidArgument, fmt::format("unusable certificate name '{}'", req.commonName));
  if (req.notAfter <= req.notBefore)
    return Status(StatusCode::kInvalidArgument, "certificate validity ends before it starts");
  CrtWriter w;
  mbedtls_x509write_crt_set_version(&w.ctx, MBEDTLS_X509_CRT_VERSION_3);
  mbedtls_x509write_crt_set_md_alg(&w.ctx, MBEDTLS_MD_SHA256);
  mbedtls_x509write_crt_set_subject_key(&w.ctx, &subjectKey.ctx);
  mbedtls_x509write_crt_set_issuer_key(&w.ctx, &issuerKey.ctx);
  const std::string subject = "CN=" + req.commonName + ",O=Starling";
  int rc;
  if ((rc = mbedtls_x509write_crt_set_subject_name(&w.ctx, subject.c_str())) != 0) return fail("subject name", rc);
  if ((rc = mbedtls_x509write_crt_set_issuer_name(&w.ctx, issuerName.c_str())) != 0) return fail("issuer name", rc);

  Mpi serial;
  if ((rc = mbedtls_mpi_fill_random(&serial.ctx, 16, mbedtls_ctr_drbg_random, &rng.drbg)) != 0)
    return fail("serial", rc);
  mbedtls_mpi_set_bit(&serial.ctx, 127, 0);  // a positive 127-bit serial
  if ((rc = mbedtls_x509write_crt_set_serial(&w.ctx, &serial.ctx)) != 0) return fail("serial", rc);
  if ((rc = mbedtls_x509write_crt_set_validity(&w.ctx, x509Time(req.notBefore).c_str(),
                                               x509Time(req.notAfter).c_str())) != 0)
    return fail("validity", rc);

  const bool ca = req.kind == CertificateKind::kCa;
  if ((rc = mbedtls_x509write_crt_set_basic_constraints(&w.ctx, ca ? 1 : 0, ca ? 0 : -1)) != 0)
    return fail("basic constraints", rc);
  if ((rc = mbedtls_x509write_crt_set_subject_key_identifier(&w.ctx)) != 0) return fail("subject key id", rc);
  if ((rc = mbedtls_x509write_crt_set_authority_key_identifier(&w.ctx)) != 0) return fail("authority key id", rc);
  unsigned usage = ca ? (MBEDTLS_X509_KU_KEY_CERT_SIGN | MBEDTLS_X509_KU_CRL_SIGN) : MBEDTLS_X509_KU_DIGITAL_SIGNATURE;
  if ((rc = mbedtls_x509write_crt_set_key_usage(&w.ctx, static_cast<unsigned char>(usage))) != 0)
    return fail("key usage", rc);
  if (!ca) {
    const std::string eku =
        extendedKeyUsage(req.kind == CertificateKind::kServer ? MBEDTLS_OID_SERVER_AUTH : MBEDTLS_OID_CLIENT_AUTH);
    rc = mbedtls_x509write_crt_set_extension(&w.ctx, MBEDTLS_OID_EXTENDED_KEY_USAGE,
                                             MBEDTLS_OID_SIZE(MBEDTLS_OID_EXTENDED_KEY_USAGE), 0, bytes(eku),
                                             eku.size());
    if (rc != 0) return fail("extended key usage", rc);
  }
  if (!req.dnsNames.empty()) {
    const std::string san = subjectAltName(req.dnsNames);
    rc = mbedtls_x509write_crt_set_extension(&w.ctx, MBEDTLS_OID_SUBJECT_ALT_NAME,
                                             MBEDTLS_OID_SIZE(MBEDTLS_OID_SUBJECT_ALT_NAME), 0, bytes(san), san.size());
    if (rc != 0) return fail("subject alternative name", rc);
  }
  std::string pem(8192, '\0');
  rc = mbedtls_x509write_crt_pem(&w.ctx, reinterpret_cast<unsigned char*>(pem.data()), pem.size(),
                                 mbedtls_ctr_drbg_random, &rng.drbg);
  if (rc != 0) return fail("writing the certificate", rc);
  pem.resize(std::strlen(pem.c_str()));
  return pem;
}

}  // namespace

Result<KeyPair> makeCertificateAuthority(const CertificateRequest& request) {
  Rng rng;
  STARLING_RETURN_IF_ERROR(rng.seed());
  Pk key;
  STARLING_RETURN_IF_ERROR(generateKey(key, rng));
  CertificateRequest req = request;
  req.kind = CertificateKind::kCa;
  auto cert = signCertificate(req, key, key, "CN=" + req.commonName + ",O=Starling", rng);
  if (!cert) return cert.status();
  auto pem = keyPem(key);
  if (!pem) return pem.status();
  return KeyPair{std::move(*pem), std::move(*cert)};
}

Result<KeyPair> issueCertificate(const KeyPair& ca, const CertificateRequest& request) {
  if (request.kind == CertificateKind::kCa)
    return Status(StatusCode::kInvalidArgument, "use makeCertificateAuthority for a CA");
  Rng rng;
  STARLING_RETURN_IF_ERROR(rng.seed());
  Pk caKey;
  int rc = mbedtls_pk_parse_key(&caKey.ctx, bytes(ca.keyPem), ca.keyPem.size() + 1, nullptr, 0);
  if (rc != 0) return Status(StatusCode::kInvalidArgument, "parsing the CA key: " + mbedtlsErrorString(rc));
  Crt caCrt;
  rc = mbedtls_x509_crt_parse(&caCrt.ctx, bytes(ca.certPem), ca.certPem.size() + 1);
  if (rc != 0) return Status(StatusCode::kInvalidArgument, "parsing the CA certificate: " + mbedtlsErrorString(rc));
  char issuer[512];
  if (mbedtls_x509_dn_gets(issuer, sizeof issuer, &caCrt.ctx.subject) < 0)
    return Status(StatusCode::kInvalidArgument, "the CA certificate's subject name is unreadable");
  Pk key;
  STARLING_RETURN_IF_ERROR(generateKey(key, rng));
  auto cert = signCertificate(request, key, caKey, issuer, rng);
  if (!cert) return cert.status();
  auto pem = keyPem(key);
  if (!pem) return pem.status();
  return KeyPair{std::move(*pem), std::move(*cert)};
}

Status writeTextFile(const std::string& path, const std::string& text, unsigned mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status(StatusCode::kIo, fmt::format("cannot create '{}': {}", path, std::strerror(errno)));
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Status(StatusCode::kIo, fmt::format("cannot write '{}': {}", path, std::strerror(err)));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  ::fchmod(fd, mode);
  if (::close(fd) != 0)
    return Status(StatusCode::kIo, fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
  return Status::ok();
}

Status writeCertificateDirectory(const InitOptions& options) {
  if (options.clients < 0) return Status(StatusCode::kInvalidArgument, "--clients must be 0 or more");
  if (options.days < 1) return Status(StatusCode::kInvalidArgument, "--days must be at least 1");
  if (options.hostnames.empty())
    return Status(StatusCode::kInvalidArgument, "the coordinator needs at least one host name");
  std::error_code ec;
  std::filesystem::create_directories(options.outDir, ec);
  if (ec) return Status(StatusCode::kIo, fmt::format("cannot create '{}': {}", options.outDir, ec.message()));

  using namespace std::chrono;
  const auto now = system_clock::now();
  const auto start = now - hours(1);  // tolerate small clock skew between machines
  const auto end = now + hours(24) * options.days;
  // The CA outlives the certificates it signs so that they can be renewed under it.
  const auto caEnd = now + hours(24) * std::max(options.days, 3650);

  auto ca = makeCertificateAuthority({CertificateKind::kCa, "Starling CA", {}, start, caEnd});
  if (!ca) return ca.status();
  auto path = [&](const std::string& name) { return (std::filesystem::path(options.outDir) / name).string(); };
  auto save = [&](const std::string& base, const KeyPair& kp) -> Status {
    STARLING_RETURN_IF_ERROR(writeTextFile(path(base + ".crt"), kp.certPem, 0644));
    return writeTextFile(path(base + ".key"), kp.keyPem, 0600);
  };
  STARLING_RETURN_IF_ERROR(save("ca", *ca));
  auto coord =
      issueCertificate(*ca, {CertificateKind::kServer, options.hostnames.front(), options.hostnames, start, end});
  if (!coord) return coord.status();
  STARLING_RETURN_IF_ERROR(save("coordinator", *coord));
  for (int i = 0; i < options.clients; ++i) {
    const std::string name = fmt::format("client-{}", i);
    auto client = issueCertificate(*ca, {CertificateKind::kClient, name, {}, start, end});
    if (!client) return client.status();
    STARLING_RETURN_IF_ERROR(save(name, *client));
  }
  return Status::ok();
}

}  // namespace starling::net
