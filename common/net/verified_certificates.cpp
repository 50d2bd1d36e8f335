#include "starling/net/verified_certificates.hpp"

#include <cstring>

namespace starling::net {

std::size_t VerifiedCertificates::KeyHash::operator()(const Key& k) const noexcept {
  std::size_t h = 0;
  std::memcpy(&h, k.data(), sizeof h);  // a SHA-256 digest: any 8 bytes are uniform
  return h;
}

bool VerifiedCertificates::contains(const Key& key) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return false;
  }
  order_.splice(order_.begin(), order_, it->second);
  ++hits_;
  return true;
}

void VerifiedCertificates::add(const Key& key) {
  if (capacity_ == 0) return;
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    order_.splice(order_.begin(), order_, it->second);
    return;
  }
  if (index_.size() >= capacity_) {
    index_.erase(order_.back());
    order_.pop_back();
  }
  order_.push_front(key);
  index_.emplace(key, order_.begin());
}

VerifiedCertificates::Stats VerifiedCertificates::stats() const {
  std::lock_guard lock(mu_);
  return {hits_.load(), misses_.load(), index_.size()};
}

}  // namespace starling::net
