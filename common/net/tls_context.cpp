#include "starling/net/tls_context.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <mbedtls/aesni.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/sha256.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_ticket.h>
#include <mbedtls/threading.h>
#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "starling/net/certificates.hpp"
#include "starling/util/hex.hpp"

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
  // One ticket key as the file holds it (mbedTLS keeps only the expanded cipher).
  struct RawKey {
    std::array<unsigned char, 4> name{};
    uint32_t created = 0;  // seconds since the epoch
    std::array<unsigned char, 32> key{};
  };

  mbedtls::Entropy entropy;
  mbedtls::CtrDrbg drbg;
  std::string path;  // kept keys: their file; empty: in memory only
  uint32_t lifetime = 0;
  std::mutex fileMu;  // guards raw and the file
  std::array<RawKey, 2> raw{};
  mbedtls::SslTicket ticket;  // declared last: destroyed first, it uses drbg

  Result<RawKey> fresh(uint32_t created) {
    RawKey k;
    k.created = created;
    int rc = mbedtls_ctr_drbg_random(&drbg.ctx, k.name.data(), k.name.size());
    if (rc == 0) rc = mbedtls_ctr_drbg_random(&drbg.ctx, k.key.data(), k.key.size());
    if (rc != 0) return Status(StatusCode::kInternal, "making a ticket key: " + mbedtlsErrorString(rc));
    return k;
  }

  // Puts `k` into mbedTLS's slot `index` (and makes it the active one), under mbedTLS's lock.
  Status install(unsigned char index, const RawKey& k, bool makeActive) {
    mbedtls_ssl_ticket_context& t = ticket.ctx;
    mbedtls_mutex_lock(&t.mutex);
    std::memcpy(t.keys[index].name, k.name.data(), k.name.size());
    t.keys[index].generation_time = k.created;
    int rc =
        mbedtls_cipher_setkey(&t.keys[index].ctx, k.key.data(), static_cast<int>(k.key.size() * 8), MBEDTLS_ENCRYPT);
    if (rc == 0 && makeActive) t.active = index;
    mbedtls_mutex_unlock(&t.mutex);
    if (rc != 0) return Status(StatusCode::kInternal, "installing a ticket key: " + mbedtlsErrorString(rc));
    raw[index] = k;
    return Status::ok();
  }

  unsigned char active() {
    mbedtls_mutex_lock(&ticket.ctx.mutex);
    unsigned char a = ticket.ctx.active;
    mbedtls_mutex_unlock(&ticket.ctx.mutex);
    return a;
  }

  Status save();
  Status load();
};

namespace {

bool fromHex(const std::string& text, unsigned char* out, std::size_t n) {
  if (text.size() != 2 * n) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < n; ++i) {
    int hi = digit(text[2 * i]), lo = digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

constexpr const char* kTicketFileMagic = "starling-ticket-keys v1";

}  // namespace

Status SessionTicketKeys::Impl::save() {
  const unsigned char a = active();
  std::string text =
      "# Starling TLS session ticket keys (AES-256-GCM): secret, whoever reads this file can open\n"
      "# every session ticket the coordinator issued. Mode 0600; rewritten when the key is replaced.\n";
  text += kTicketFileMagic;
  text += "\n";
  for (unsigned char i : {a, static_cast<unsigned char>(1 - a)}) {
    const RawKey& k = raw[i];
    text += fmt::format("{} {} {} {}\n", i == a ? "active" : "previous", toHex(k.name.data(), k.name.size()), k.created,
                        toHex(k.key.data(), k.key.size()));
  }
  const std::string tmp = path + ".tmp";
  auto fail = [&](const char* what) {
    return Status(StatusCode::kIo, fmt::format("{} ticket key file '{}': {}", what, tmp, std::strerror(errno)));
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return fail("cannot create");
  if (::fchmod(fd, 0600) != 0) {
    Status st = fail("cannot set the mode of");
    ::close(fd);
    return st;
  }
  for (std::size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status st = fail("cannot write");
      ::close(fd);
      return st;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status st = fail("cannot sync");
    ::close(fd);
    return st;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return Status(StatusCode::kIo, fmt::format("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno)));
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);  // the rename itself survives a crash; a failure here only risks the old file
    ::close(dfd);
  }
  return Status::ok();
}

Status SessionTicketKeys::Impl::load() {
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kIo, fmt::format("cannot read ticket key file '{}'", path));
  std::string line;
  int lineNo = 0;
  bool sawMagic = false;
  std::array<std::optional<RawKey>, 2> got;  // [0] active, [1] previous
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kMalformed, fmt::format("ticket key file '{}' line {}: {}", path, lineNo, why));
  };
  while (std::getline(in, line)) {
    ++lineNo;
    if (line.empty() || line[0] == '#') continue;
    if (!sawMagic) {
      if (line != kTicketFileMagic) return bad(fmt::format("expected '{}'", kTicketFileMagic));
      sawMagic = true;
      continue;
    }
    std::istringstream fields(line);
    std::string which, name, key, extra;
    uint64_t created = 0;
    if (!(fields >> which >> name >> created >> key) || (fields >> extra))
      return bad("expected 'active|previous NAME CREATED KEY'");
    RawKey k;
    if (!fromHex(name, k.name.data(), k.name.size())) return bad("the key name is not 8 lowercase hex digits");
    if (!fromHex(key, k.key.data(), k.key.size())) return bad("the key is not 64 lowercase hex digits");
    if (created > UINT32_MAX) return bad("the creation time is out of range");
    k.created = static_cast<uint32_t>(created);
    std::size_t slot = which == "active" ? 0 : which == "previous" ? 1 : 2;
    if (slot == 2) return bad("expected 'active' or 'previous', not '" + which + "'");
    if (got[slot]) return bad("a second '" + which + "' key");
    got[slot] = k;
  }
  lineNo = 0;
  if (!sawMagic || !got[0] || !got[1])
    return Status(StatusCode::kMalformed,
                  fmt::format("ticket key file '{}' is incomplete (needs '{}', an active and a previous key)", path,
                              kTicketFileMagic));
  if (got[0]->name == got[1]->name)
    return Status(StatusCode::kMalformed, fmt::format("ticket key file '{}': both keys have the same name", path));
  if (Status st = install(1, *got[1], false); !st) return st;
  return install(0, *got[0], true);
}

SessionTicketKeys::SessionTicketKeys() : impl_(std::make_unique<Impl>()) {}
SessionTicketKeys::~SessionTicketKeys() = default;

Result<std::shared_ptr<SessionTicketKeys>> SessionTicketKeys::open(const std::string& path,
                                                                   std::chrono::seconds lifetime) {
  if (path.empty()) return Status(StatusCode::kInvalidArgument, "no path for the ticket key file");
  auto keys = create(lifetime);
  if (!keys) return keys.status();
  Impl& k = (*keys)->impl();
  k.path = path;
  k.lifetime = static_cast<uint32_t>(lifetime.count());
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return Status(StatusCode::kInvalidArgument, fmt::format("ticket key file '{}' is not a regular file", path));
    if ((st.st_mode & 077) != 0)
      return Status(StatusCode::kUnauthenticated,
                    fmt::format("ticket key file '{}' may be read or written by others (mode {:04o}); it opens every "
                                "session ticket: chmod 600 '{}'",
                                path, st.st_mode & 07777, path));
    std::lock_guard lock(k.fileMu);
    if (Status loaded = k.load(); !loaded) return loaded;
    (*keys)->reloaded_ = true;
  } else if (errno == ENOENT) {
    std::lock_guard lock(k.fileMu);
    const auto now = static_cast<uint32_t>(std::time(nullptr));
    auto active = k.fresh(now);
    auto previous = k.fresh(now - std::min(now, k.lifetime));  // already past: it sealed nothing
    if (!active) return active.status();
    if (!previous) return previous.status();
    if (Status st1 = k.install(1, *previous, false); !st1) return st1;
    if (Status st0 = k.install(0, *active, true); !st0) return st0;
    if (Status saved = k.save(); !saved) return saved;
  } else {
    return Status(StatusCode::kIo, fmt::format("cannot stat ticket key file '{}': {}", path, std::strerror(errno)));
  }
  if (Status rotated = (*keys)->rotateIfDue(); !rotated) return rotated;
  return keys;
}

Status SessionTicketKeys::rotateIfDue() {
  Impl& k = *impl_;
  if (k.path.empty()) return Status::ok();
  std::lock_guard lock(k.fileMu);
  const auto now = static_cast<uint32_t>(std::time(nullptr));
  const unsigned char a = k.active();
  // A minute early (for lifetimes above two minutes), so that mbedTLS, which replaces an
  // expired key with a random one of its own, never finds the active key expired.
  const uint32_t due = k.lifetime > 120 ? k.lifetime - 60 : k.lifetime;
  const uint32_t created = k.raw[a].created;
  if (now >= created && now - created < due) return Status::ok();
  auto next = k.fresh(now);
  if (!next) return next.status();
  if (Status st = k.install(static_cast<unsigned char>(1 - a), *next, true); !st) return st;
  return k.save();
}

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
  // Peer verification by Starling rather than mbedTLS (verifyPeer): on when the context
  // has its own certificate and one CA. `verified` may be null (no cache).
  bool ownVerification = false;
  std::shared_ptr<VerifiedCertificates> verified;
  unsigned char caDigest[32] = {};  // SHA-256 of the CA's DER
  mbedtls::SslConfig conf;          // declared last: destroyed first, it points at the others

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
    // A kept key that could not be written to its file stays in use in memory.
    (void)impl->tickets->rotateIfDue();
    return mbedtls_ssl_ticket_write(&impl->tickets->impl().ticket.ctx, session, start, end, length, lifetime);
  }
  static int parseTicket(void* self, mbedtls_ssl_session* session, unsigned char* buf, size_t len) {
    auto* impl = static_cast<Impl*>(self);
    (void)impl->tickets->rotateIfDue();
    int rc = mbedtls_ssl_ticket_parse(&impl->tickets->impl().ticket.ctx, session, buf, len);
    if (rc != 0) return rc;
    const mbedtls_x509_crt* peer = session->peer_cert;
    if (peer == nullptr || mbedtls_x509_time_is_past(&peer->valid_to) != 0 ||
        (impl->haveCrl && mbedtls_x509_crt_is_revoked(peer, &impl->crl.ctx) != 0))
      return MBEDTLS_ERR_SSL_SESSION_TICKET_EXPIRED;
    return 0;
  }

  // mbedTLS's verification callback (p_vrfy is this Impl), and the verdict on a peer
  // certificate against the CA, its revocation list and the cache. See below.
  static int verifyPeer(void* self, mbedtls_x509_crt* crt, int depth, uint32_t* flags);
  uint32_t checkAgainstCa(mbedtls_x509_crt& crt);
};

// Peer verification. mbedTLS 2.28 offers no hook before it checks a chain's signatures
// (MBEDTLS_X509_TRUSTED_CERTIFICATE_CALLBACK is not in Debian's build), only a callback
// after, so the configuration names this side's own certificate as the only trust
// anchor: it is no CA (basicConstraints CA:false), so mbedTLS finds no issuer for the
// peer's certificate, checks no signature and flags it "not trusted" (besides its dates,
// profile and, for a client, the host name). verifyPeer then drops that flag and adds
// the verdict against the real CA: from the cache for a certificate it verified before,
// else from mbedtls_x509_crt_verify_with_profile. mbedTLS refuses the handshake on any
// flag left, with the alert it would have sent, and still checks the key usages and
// the peer's handshake signature itself.
//
// The revocation list is checked here too, by serial number, on every handshake; its
// signature was checked once when the context was made (checkRevocationList), where
// mbedTLS would verify it again on every handshake (one more ECDSA verification).
int TlsContext::Impl::verifyPeer(void* self, mbedtls_x509_crt* crt, int depth, uint32_t* flags) {
  *flags &= ~static_cast<uint32_t>(MBEDTLS_X509_BADCERT_NOT_TRUSTED);
  if (depth == 0) *flags |= static_cast<Impl*>(self)->checkAgainstCa(*crt);
  return 0;
}

uint32_t TlsContext::Impl::checkAgainstCa(mbedtls_x509_crt& crt) {
  uint32_t flags = 0;
  // Only a certificate sent alone is remembered: with intermediates the verdict
  // depends on them too.
  const bool cacheable = verified != nullptr && crt.next == nullptr;
  VerifiedCertificates::Key key{};
  bool known = false;
  if (cacheable) {
    mbedtls_sha256_context sha;
    mbedtls_sha256_init(&sha);
    (void)mbedtls_sha256_starts_ret(&sha, 0);
    (void)mbedtls_sha256_update_ret(&sha, caDigest, sizeof caDigest);
    (void)mbedtls_sha256_update_ret(&sha, crt.raw.p, crt.raw.len);
    (void)mbedtls_sha256_finish_ret(&sha, key.data());
    mbedtls_sha256_free(&sha);
    known = verified->contains(key);
  }
  if (known) {
    // What the full verification checks besides the signature: the dates of the
    // certificate and of the CA.
    for (const mbedtls_x509_crt* c : {&crt, &ca.ctx}) {
      if (mbedtls_x509_time_is_past(&c->valid_to) != 0) flags |= MBEDTLS_X509_BADCERT_EXPIRED;
      if (mbedtls_x509_time_is_future(&c->valid_from) != 0) flags |= MBEDTLS_X509_BADCERT_FUTURE;
    }
  } else {
    uint32_t verdict = 0;
    const int rc = mbedtls_x509_crt_verify_with_profile(&crt, &ca.ctx, nullptr, conf.ctx.cert_profile, nullptr,
                                                        &verdict, nullptr, nullptr);
    if (rc != 0 && verdict == 0) verdict = MBEDTLS_X509_BADCERT_NOT_TRUSTED;  // any other error refuses too
    flags |= verdict;
    if (cacheable && verdict == 0) verified->add(key);
  }
  if (haveCrl) {
    if (mbedtls_x509_crt_is_revoked(&crt, &crl.ctx) != 0) flags |= MBEDTLS_X509_BADCERT_REVOKED;
    if (mbedtls_x509_time_is_past(&crl.ctx.next_update) != 0) flags |= MBEDTLS_X509_BADCRL_EXPIRED;
    if (mbedtls_x509_time_is_future(&crl.ctx.this_update) != 0) flags |= MBEDTLS_X509_BADCRL_FUTURE;
  }
  return flags;
}

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

const std::shared_ptr<VerifiedCertificates>& TlsContext::verifiedCertificates() const {
  return impl_->verified;
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
  // Starling verifies the peer's certificate itself (Impl::verifyPeer) where it can: a
  // context with a certificate of its own and a single CA.
  s.ownVerification = haveCert && s.ca.ctx.next == nullptr;
  if (s.ownVerification) {
    if ((rc = mbedtls_sha256_ret(s.ca.ctx.raw.p, s.ca.ctx.raw.len, s.caDigest, 0)) != 0)
      return Status(StatusCode::kInternal, "hashing the CA certificate: " + mbedtlsErrorString(rc));
    if (options.verifiedCertificates)
      s.verified = options.verifiedCertificates;
    else if (options.verifiedCertificateCapacity > 0)
      s.verified = std::make_shared<VerifiedCertificates>(options.verifiedCertificateCapacity);
    mbedtls_ssl_conf_ca_chain(&s.conf.ctx, &s.cert.ctx, nullptr);
    mbedtls_ssl_conf_verify(&s.conf.ctx, &Impl::verifyPeer, &s);
    // The certificate request names no CA (TLS 1.2 allows it: any), rather than the
    // stand-in anchor; Starling's clients send their one certificate either way.
    if (role == TlsRole::kServer) mbedtls_ssl_conf_cert_req_ca_list(&s.conf.ctx, MBEDTLS_SSL_CERT_REQ_CA_LIST_DISABLED);
  } else {
    mbedtls_ssl_conf_ca_chain(&s.conf.ctx, &s.ca.ctx, haveCrl ? &s.crl.ctx : nullptr);
  }
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
