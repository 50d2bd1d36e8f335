#include "starling/net/certificates.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <mbedtls/bignum.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/md.h>
#include <mbedtls/oid.h>
#include <mbedtls/pem.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "starling/net/tls_context.hpp"

#include "mbedtls_handle.hpp"

namespace starling::net {
namespace {

// RAII owners of the mbedTLS contexts used while making certificates.
struct Rng {
  mbedtls::Entropy entropy;
  mbedtls::CtrDrbg drbg;
  Status seed() {
    static const char kPers[] = "starling-certificates";
    int rc = mbedtls_ctr_drbg_seed(&drbg.ctx, mbedtls_entropy_func, &entropy.ctx,
                                   reinterpret_cast<const unsigned char*>(kPers), sizeof kPers);
    if (rc != 0) return Status(StatusCode::kInternal, "seeding the random generator: " + mbedtlsErrorString(rc));
    return Status::ok();
  }
};

using Pk = mbedtls::Pk;

using Crt = mbedtls::Crt;

using CrtWriter = mbedtls::CrtWriter;

using Mpi = mbedtls::Mpi;

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
std::string extendedKeyUsage(const std::vector<std::string>& oids) {
  std::string content;
  for (const std::string& oid : oids) {
    content += '\x06';
    appendDerLength(content, oid.size());
    content += oid;
  }
  return derSequence(content);
}

// The OU a certificate of `kind` states (none for the CA).
const char* organizationalUnit(CertificateKind kind) {
  switch (kind) {
    case CertificateKind::kServer:
      return "coordinator";
    case CertificateKind::kRelay:
      return "relay";
    case CertificateKind::kClient:
      return "client";
    case CertificateKind::kOperator:
      return "operator";
    case CertificateKind::kCa:
      break;
  }
  return "";
}

Status generateKey(Pk& key, Rng& rng) {
  int rc = mbedtls_pk_setup(&key.ctx, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY));
  if (rc != 0) return fail("key setup", rc);
  rc = mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(key.ctx), mbedtls_ctr_drbg_random, &rng.drbg.ctx);
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
  const bool ca = req.kind == CertificateKind::kCa;
  const std::string subject =
      "CN=" + req.commonName + (ca ? "" : std::string(",OU=") + organizationalUnit(req.kind)) + ",O=Starling";
  int rc;
  if ((rc = mbedtls_x509write_crt_set_subject_name(&w.ctx, subject.c_str())) != 0) return fail("subject name", rc);
  if ((rc = mbedtls_x509write_crt_set_issuer_name(&w.ctx, issuerName.c_str())) != 0) return fail("issuer name", rc);

  Mpi serial;
  if ((rc = mbedtls_mpi_fill_random(&serial.ctx, 16, mbedtls_ctr_drbg_random, &rng.drbg.ctx)) != 0)
    return fail("serial", rc);
  mbedtls_mpi_set_bit(&serial.ctx, 127, 0);  // a positive 127-bit serial
  if ((rc = mbedtls_x509write_crt_set_serial(&w.ctx, &serial.ctx)) != 0) return fail("serial", rc);
  if ((rc = mbedtls_x509write_crt_set_validity(&w.ctx, x509Time(req.notBefore).c_str(),
                                               x509Time(req.notAfter).c_str())) != 0)
    return fail("validity", rc);

  if ((rc = mbedtls_x509write_crt_set_basic_constraints(&w.ctx, ca ? 1 : 0, ca ? 0 : -1)) != 0)
    return fail("basic constraints", rc);
  if ((rc = mbedtls_x509write_crt_set_subject_key_identifier(&w.ctx)) != 0) return fail("subject key id", rc);
  if ((rc = mbedtls_x509write_crt_set_authority_key_identifier(&w.ctx)) != 0) return fail("authority key id", rc);
  unsigned usage = ca ? (MBEDTLS_X509_KU_KEY_CERT_SIGN | MBEDTLS_X509_KU_CRL_SIGN) : MBEDTLS_X509_KU_DIGITAL_SIGNATURE;
  if ((rc = mbedtls_x509write_crt_set_key_usage(&w.ctx, static_cast<unsigned char>(usage))) != 0)
    return fail("key usage", rc);
  if (!ca) {
    std::vector<std::string> oids;
    if (req.kind == CertificateKind::kServer || req.kind == CertificateKind::kRelay)
      oids.emplace_back(MBEDTLS_OID_SERVER_AUTH, MBEDTLS_OID_SIZE(MBEDTLS_OID_SERVER_AUTH));
    if (req.kind == CertificateKind::kClient || req.kind == CertificateKind::kRelay ||
        req.kind == CertificateKind::kOperator)
      oids.emplace_back(MBEDTLS_OID_CLIENT_AUTH, MBEDTLS_OID_SIZE(MBEDTLS_OID_CLIENT_AUTH));
    const std::string eku = extendedKeyUsage(oids);
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
                                 mbedtls_ctr_drbg_random, &rng.drbg.ctx);
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

Result<std::string> readTextFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kNotFound, fmt::format("cannot open {} '{}'", what, path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status(StatusCode::kIo, fmt::format("cannot read {} '{}'", what, path));
  return text.str();
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
  if (options.relays < 0) return Status(StatusCode::kInvalidArgument, "--relays must be 0 or more");
  if (options.operators < 0) return Status(StatusCode::kInvalidArgument, "--operators must be 0 or more");
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
  for (int i = 0; i < options.relays; ++i) {
    const std::string name = fmt::format("relay-{}", i);
    std::vector<std::string> hosts = options.relayHostnames;
    hosts.push_back(name);
    auto relay = issueCertificate(*ca, {CertificateKind::kRelay, name, hosts, start, end});
    if (!relay) return relay.status();
    STARLING_RETURN_IF_ERROR(save(name, *relay));
  }
  for (int i = 0; i < options.operators; ++i) {
    const std::string name = fmt::format("operator-{}", i);
    auto op = issueCertificate(*ca, {CertificateKind::kOperator, name, {}, start, end});
    if (!op) return op.status();
    STARLING_RETURN_IF_ERROR(save(name, *op));
  }
  return Status::ok();
}

const char* roleName(Role role) {
  switch (role) {
    case Role::kCoordinator:
      return "coordinator";
    case Role::kRelay:
      return "relay";
    case Role::kClient:
      return "client";
    case Role::kOperator:
      return "operator";
    case Role::kUnknown:
      break;
  }
  return "unknown";
}

Role roleFromOu(const std::string& ou, Role legacy) {
  if (ou.empty()) return legacy;
  for (Role r : {Role::kCoordinator, Role::kRelay, Role::kClient, Role::kOperator})
    if (ou == roleName(r)) return r;
  return Role::kUnknown;
}

}  // namespace starling::net

// ---- revocation ----

namespace starling::net {
namespace {

using Crl = mbedtls::Crl;

// A DER tag-length-value (lengths up to 2^24 - 1: a CRL of ~400,000 entries).
std::string derTlv(unsigned char tag, const std::string& content) {
  std::string out(1, static_cast<char>(tag));
  const std::size_t len = content.size();
  if (len < 0x80) {
    out.push_back(static_cast<char>(len));
  } else if (len <= 0xff) {
    out += {'\x81', static_cast<char>(len)};
  } else if (len <= 0xffff) {
    out += {'\x82', static_cast<char>(len >> 8), static_cast<char>(len & 0xff)};
  } else {
    out += {'\x83', static_cast<char>(len >> 16), static_cast<char>((len >> 8) & 0xff), static_cast<char>(len & 0xff)};
  }
  return out + content;
}

std::string raw(const mbedtls_x509_buf& b) {
  return std::string(reinterpret_cast<const char*>(b.p), b.len);
}

std::string hex(const mbedtls_x509_buf& b) {
  std::string out;
  for (std::size_t i = 0; i < b.len; ++i)
    out += fmt::format("{:02x}", b.p[i]);
  return out;
}

// RFC 5280 Time: UTCTime for 1950..2049, GeneralizedTime otherwise.
std::string derTime(int year, int mon, int day, int hour, int min, int sec) {
  if (year >= 1950 && year < 2050)
    return derTlv(0x17, fmt::format("{:02}{:02}{:02}{:02}{:02}{:02}Z", year % 100, mon, day, hour, min, sec));
  return derTlv(0x18, fmt::format("{:04}{:02}{:02}{:02}{:02}{:02}Z", year, mon, day, hour, min, sec));
}

std::string derTime(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return derTime(tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::string derTime(const mbedtls_x509_time& t) {
  return derTime(t.year, t.mon, t.day, t.hour, t.min, t.sec);
}

std::string x509TimeText(const mbedtls_x509_time& t) {
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC", t.year, t.mon, t.day, t.hour, t.min, t.sec);
}

// Parses a PEM CRL and checks it is one list, issued and signed by ca, and current.
Status parseCrl(Crl& crl, const mbedtls_x509_crt& ca, const std::string& crlPem) {
  int rc = mbedtls_x509_crl_parse(&crl.ctx, bytes(crlPem), crlPem.size() + 1);
  if (rc != 0) return Status(StatusCode::kInvalidArgument, "parsing the revocation list: " + mbedtlsErrorString(rc));
  if (crl.ctx.next != nullptr)
    return Status(StatusCode::kInvalidArgument, "the revocation list file holds more than one list");
  if (crl.ctx.issuer_raw.len != ca.subject_raw.len ||
      std::memcmp(crl.ctx.issuer_raw.p, ca.subject_raw.p, ca.subject_raw.len) != 0)
    return Status(StatusCode::kInvalidArgument, "the revocation list was not issued by the CA");
  const mbedtls_md_info_t* md = mbedtls_md_info_from_type(crl.ctx.sig_md);
  unsigned char hash[MBEDTLS_MD_MAX_SIZE];
  if (md == nullptr || mbedtls_md(md, crl.ctx.tbs.p, crl.ctx.tbs.len, hash) != 0)
    return Status(StatusCode::kInvalidArgument, "the revocation list uses an unsupported signature hash");
  rc = mbedtls_pk_verify_ext(crl.ctx.sig_pk, crl.ctx.sig_opts, const_cast<mbedtls_pk_context*>(&ca.pk), crl.ctx.sig_md,
                             hash, mbedtls_md_get_size(md), crl.ctx.sig.p, crl.ctx.sig.len);
  if (rc != 0) return Status(StatusCode::kInvalidArgument, "the revocation list's signature is not the CA's");
  if (mbedtls_x509_time_is_past(&crl.ctx.next_update))
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the revocation list expired on {}; renew it with `starling-coordinator revoke`",
                              x509TimeText(crl.ctx.next_update)));
  return Status::ok();
}

Status parseCa(Crt& crt, const std::string& caPem) {
  int rc = mbedtls_x509_crt_parse(&crt.ctx, bytes(caPem), caPem.size() + 1);
  if (rc != 0) return Status(StatusCode::kInvalidArgument, "parsing the CA certificate: " + mbedtlsErrorString(rc));
  return Status::ok();
}

}  // namespace

Result<CertificateInfo> describeCertificate(const std::string& certPem) {
  Crt crt;
  int rc = mbedtls_x509_crt_parse(&crt.ctx, bytes(certPem), certPem.size() + 1);
  if (rc != 0) return Status(StatusCode::kInvalidArgument, "parsing the certificate: " + mbedtlsErrorString(rc));
  CertificateInfo info;
  info.serial = hex(crt.ctx.serial);
  for (const mbedtls_x509_name* n = &crt.ctx.subject; n != nullptr; n = n->next)
    if (MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) == 0)
      info.commonName = raw(n->val);
    else if (MBEDTLS_OID_CMP(MBEDTLS_OID_AT_ORG_UNIT, &n->oid) == 0)
      info.organizationalUnit = raw(n->val);
  return info;
}

Result<std::vector<std::string>> checkRevocationList(const std::string& caPem, const std::string& crlPem) {
  Crt ca;
  STARLING_RETURN_IF_ERROR(parseCa(ca, caPem));
  Crl crl;
  STARLING_RETURN_IF_ERROR(parseCrl(crl, ca.ctx, crlPem));
  std::vector<std::string> serials;
  for (const mbedtls_x509_crl_entry* e = &crl.ctx.entry; e != nullptr && e->raw.p != nullptr; e = e->next)
    serials.push_back(hex(e->serial));
  return serials;
}

Result<std::string> updateRevocationList(const KeyPair& ca, const std::string& currentCrlPem,
                                         const std::vector<std::string>& revokeCertPems,
                                         std::chrono::system_clock::time_point thisUpdate,
                                         std::chrono::system_clock::time_point nextUpdate) {
  if (nextUpdate <= thisUpdate) return Status(StatusCode::kInvalidArgument, "the revocation list would expire at once");
  Crt caCrt;
  STARLING_RETURN_IF_ERROR(parseCa(caCrt, ca.certPem));
  Pk caKey;
  int rc = mbedtls_pk_parse_key(&caKey.ctx, bytes(ca.keyPem), ca.keyPem.size() + 1, nullptr, 0);
  if (rc != 0) return Status(StatusCode::kInvalidArgument, "parsing the CA key: " + mbedtlsErrorString(rc));
  if (mbedtls_pk_check_pair(&caCrt.ctx.pk, &caKey.ctx) != 0)
    return Status(StatusCode::kInvalidArgument, "the CA key does not belong to the CA certificate");

  // revokedCertificates: the current entries with their dates, then the new ones.
  std::string entries;
  std::vector<std::string> listed;
  auto add = [&](const std::string& serialContent, const std::string& date) {
    for (const auto& s : listed)
      if (s == serialContent) return;
    listed.push_back(serialContent);
    entries += derSequence(derTlv(0x02, serialContent) + date);
  };
  if (!currentCrlPem.empty()) {
    Crl current;
    STARLING_RETURN_IF_ERROR(parseCrl(current, caCrt.ctx, currentCrlPem));
    for (const mbedtls_x509_crl_entry* e = &current.ctx.entry; e != nullptr && e->raw.p != nullptr; e = e->next)
      add(raw(e->serial), derTime(e->revocation_date));
  }
  for (const auto& pem : revokeCertPems) {
    Crt crt;
    rc = mbedtls_x509_crt_parse(&crt.ctx, bytes(pem), pem.size() + 1);
    if (rc != 0)
      return Status(StatusCode::kInvalidArgument, "parsing a certificate to revoke: " + mbedtlsErrorString(rc));
    uint32_t flags = 0;
    rc = mbedtls_x509_crt_verify(&crt.ctx, &caCrt.ctx, nullptr, nullptr, &flags, nullptr, nullptr);
    // An expired certificate may still be revoked; one from another CA may not.
    if (rc != 0 && (flags & ~(MBEDTLS_X509_BADCERT_EXPIRED | MBEDTLS_X509_BADCERT_FUTURE)) != 0)
      return Status(StatusCode::kInvalidArgument,
                    "a certificate to revoke was not issued by this CA: " + describeVerifyFlags(flags));
    add(raw(crt.ctx.serial), derTime(thisUpdate));
  }

  // ecdsa-with-SHA256, without parameters (RFC 5758).
  const std::string algorithm =
      derSequence(derTlv(0x06, std::string(MBEDTLS_OID_ECDSA_SHA256, MBEDTLS_OID_SIZE(MBEDTLS_OID_ECDSA_SHA256))));
  std::string tbs = derTlv(0x02, std::string(1, '\x01'))  // version v2
                    + algorithm + raw(caCrt.ctx.subject_raw) + derTime(thisUpdate) + derTime(nextUpdate);
  if (!entries.empty()) tbs += derSequence(entries);
  tbs = derSequence(tbs);

  Rng rng;
  STARLING_RETURN_IF_ERROR(rng.seed());
  unsigned char hash[32];
  rc = mbedtls_md(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), bytes(tbs), tbs.size(), hash);
  if (rc != 0) return fail("hashing the revocation list", rc);
  unsigned char sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
  std::size_t sigLen = 0;
  rc = mbedtls_pk_sign(&caKey.ctx, MBEDTLS_MD_SHA256, hash, sizeof hash, sig, &sigLen, mbedtls_ctr_drbg_random,
                       &rng.drbg.ctx);
  if (rc != 0) return fail("signing the revocation list", rc);
  const std::string der = derSequence(
      tbs + algorithm + derTlv(0x03, std::string(1, '\0') + std::string(reinterpret_cast<char*>(sig), sigLen)));

  std::string pem(der.size() * 2 + 256, '\0');
  std::size_t olen = 0;
  rc = mbedtls_pem_write_buffer("-----BEGIN X509 CRL-----\n", "-----END X509 CRL-----\n", bytes(der), der.size(),
                                reinterpret_cast<unsigned char*>(pem.data()), pem.size(), &olen);
  if (rc != 0) return fail("writing the revocation list", rc);
  pem.resize(std::strlen(pem.c_str()));
  return pem;
}

Result<std::vector<CertificateInfo>> revokeCertificates(const RevokeOptions& options) {
  if (options.certsDir.empty())
    return Status(StatusCode::kInvalidArgument, "give --certs DIR (with ca.crt and ca.key)");
  if (options.days < 1) return Status(StatusCode::kInvalidArgument, "--days must be at least 1");
  auto in = [&](const std::string& name) { return (std::filesystem::path(options.certsDir) / name).string(); };
  std::vector<std::string> paths = options.certFiles;
  for (const auto& c : options.clients) {
    if (c.empty() || c.find('/') != std::string::npos || c.front() == '.')
      return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is not a client name", c));
    paths.push_back(in(c + ".crt"));
  }
  auto caCert = readTextFile(in("ca.crt"), "CA certificate");
  if (!caCert) return caCert.status();
  auto caKey = readTextFile(in("ca.key"), "CA key");
  if (!caKey) return caKey.status();
  const KeyPair ca{std::move(*caKey), std::move(*caCert)};

  std::vector<std::string> pems;
  std::vector<CertificateInfo> infos;
  for (const auto& p : paths) {
    auto text = readTextFile(p, "certificate");
    if (!text) return text.status();
    auto info = describeCertificate(*text);
    if (!info) return Status(info.status().code(), fmt::format("'{}': {}", p, info.status().message()));
    pems.push_back(std::move(*text));
    infos.push_back(*info);
  }
  const std::string crlPath = options.crlPath.empty() ? in("crl.pem") : options.crlPath;
  std::string current;
  if (std::filesystem::exists(crlPath)) {
    auto text = readTextFile(crlPath, "revocation list");
    if (!text) return text.status();
    current = std::move(*text);
  }
  using namespace std::chrono;
  const auto now = system_clock::now();
  // Same skew allowance as the certificates: a coordinator whose clock is up to an
  // hour behind still sees the list as current and the entries as revoked.
  auto crl = updateRevocationList(ca, current, pems, now - hours(1), now + hours(24) * options.days);
  if (!crl) return crl.status();
  const std::string tmp = crlPath + ".tmp";
  STARLING_RETURN_IF_ERROR(writeTextFile(tmp, *crl, 0644));
  std::error_code ec;
  std::filesystem::rename(tmp, crlPath, ec);
  if (ec) return Status(StatusCode::kIo, fmt::format("cannot replace '{}': {}", crlPath, ec.message()));
  return infos;
}

}  // namespace starling::net
