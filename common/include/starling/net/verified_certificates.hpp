#pragma once
// VerifiedCertificates: the peer certificates a TlsContext has already verified against
// its CA, so that a byte-identical certificate presented again skips the CA signature
// check (an ECDSA P-256 verification, about a fifth of a full handshake's CPU on the
// coordinator). docs/transport.md, "Verified-certificate cache".
//
// What a hit skips and what it does not: an entry is the SHA-256 of the CA's DER and
// the peer certificate's DER together, added only after mbedTLS verified that exact
// certificate, alone (no intermediates), as signed by that exact CA with the context's
// profile. A hit replaces that signature check only; validity dates (the
// certificate's and the CA's), the revocation list, the key usages, the host name (a
// client's check of the coordinator) and the handshake's own signature
// (CertificateVerify: the peer holds the key) are checked on every handshake, hit or
// miss. A certificate that fails any of them is refused with its usual reason.
//
// Bounded: at most `capacity` entries, the least recently used dropped first.
// Thread safety: any thread (one mutex).

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace starling::net {

class VerifiedCertificates {
 public:
  using Key = std::array<uint8_t, 32>;  // SHA-256(SHA-256(CA DER) || certificate DER)

  explicit VerifiedCertificates(std::size_t capacity) : capacity_(capacity) {}

  // True when `key` was added and is still held (it becomes the most recently used).
  bool contains(const Key& key);
  // Adds `key` (a certificate just verified), dropping the least recently used entry
  // when full.
  void add(const Key& key);

  struct Stats {
    uint64_t hits = 0;    // handshakes whose peer certificate was found
    uint64_t misses = 0;  // handshakes that verified its signature
    std::size_t size = 0;
  };
  Stats stats() const;
  std::size_t capacity() const { return capacity_; }

 private:
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept;
  };
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::list<Key> order_;  // most recently used first
  std::unordered_map<Key, std::list<Key>::iterator, KeyHash> index_;
  std::atomic<uint64_t> hits_{0}, misses_{0};
};

}  // namespace starling::net
