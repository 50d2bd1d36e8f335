// secureNoise(): starling/compression/noise.hpp's transform over mbedTLS's CTR_DRBG.
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "starling/compression/noise.hpp"

namespace starling::compression {
namespace {

class DrbgNoise final : public GaussianNoise {
 public:
  DrbgNoise() {
    mbedtls_entropy_init(&entropy_);
    mbedtls_ctr_drbg_init(&drbg_);
  }
  ~DrbgNoise() override {
    mbedtls_ctr_drbg_free(&drbg_);
    mbedtls_entropy_free(&entropy_);
  }
  DrbgNoise(const DrbgNoise&) = delete;
  DrbgNoise& operator=(const DrbgNoise&) = delete;

  Status seed() {
    static const char kPers[] = "starling-dp-noise";
    const int rc = mbedtls_ctr_drbg_seed(&drbg_, mbedtls_entropy_func, &entropy_,
                                         reinterpret_cast<const unsigned char*>(kPers), sizeof kPers);
    if (rc != 0)
      return Status(StatusCode::kInternal, "seeding the noise generator: mbedTLS error " + std::to_string(rc));
    return Status::ok();
  }

 private:
  bool words(std::span<uint64_t> out) override {
    // At most MBEDTLS_CTR_DRBG_MAX_REQUEST (1024) bytes a call; it reseeds itself.
    auto* bytes = reinterpret_cast<unsigned char*>(out.data());
    std::size_t left = out.size_bytes();
    while (left > 0) {
      const std::size_t n = std::min<std::size_t>(left, MBEDTLS_CTR_DRBG_MAX_REQUEST);
      if (mbedtls_ctr_drbg_random(&drbg_, bytes, n) != 0) return false;  // only on a failed reseed
      bytes += n;
      left -= n;
    }
    return true;
  }

  mbedtls_entropy_context entropy_;
  mbedtls_ctr_drbg_context drbg_;
};

}  // namespace

Result<std::unique_ptr<GaussianNoise>> secureNoise() {
  auto noise = std::make_unique<DrbgNoise>();
  STARLING_RETURN_IF_ERROR(noise->seed());
  return std::unique_ptr<GaussianNoise>(std::move(noise));
}

}  // namespace starling::compression
