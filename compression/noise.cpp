#include "starling/compression/noise.hpp"

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "starling/compression/fp16.hpp"
#include "starling/util/gaussian.hpp"
#include "starling/util/mix.hpp"

namespace starling::compression {
namespace {

class SeededNoise final : public GaussianNoise {
 public:
  explicit SeededNoise(uint64_t seed) : state_(seed) {}

 private:
  bool words(std::span<uint64_t> out) override {
    for (uint64_t& w : out)
      w = splitmixNext(state_);
    return true;
  }
  uint64_t state_;
};

}  // namespace

Status GaussianNoise::add(std::span<float> x, double stddev) {
  constexpr std::size_t kWords = sizeof(buffer_) / sizeof(buffer_[0]);
  for (std::size_t at = 0; at < x.size(); at += kWords) {
    const std::size_t n = std::min(kWords, x.size() - at);
    if (!words(std::span<uint64_t>(buffer_, 2 * ((n + 1) / 2))))
      return Status(StatusCode::kInternal, "the noise generator failed (reseeding from the system's entropy)");
    for (std::size_t j = 0; j < n; j += 2) {
      const auto [g1, g2] = gaussianPair(buffer_[j], buffer_[j + 1]);
      x[at + j] += static_cast<float>(g1 * stddev);
      if (j + 1 < n) x[at + j + 1] += static_cast<float>(g2 * stddev);
    }
  }
  return Status::ok();
}

std::unique_ptr<GaussianNoise> seededNoise(uint64_t seed) {
  return std::make_unique<SeededNoise>(seed);
}

Status addNoise(Compressed& c, GaussianNoise& noise, double stddev) {
  if (!(stddev >= 0) || !std::isfinite(stddev))
    return Status(StatusCode::kInvalidArgument, "noise standard deviation must be finite and >= 0");
  if (c.encoding != Encoding::kDense32 && c.encoding != Encoding::kDense16)
    return Status(StatusCode::kInvalidArgument, "noise needs a dense tensor (the uplink identity or fp16)");
  if (c.values.size() != c.count) return Status(StatusCode::kInvalidArgument, "dense tensor without its values");
  if (stddev == 0) return Status::ok();
  STARLING_RETURN_IF_ERROR(noise.add(c.values, stddev));
  if (c.encoding == Encoding::kDense16) roundToHalfSaturating(c.values, c.values);
  return Status::ok();
}

// ---- secureNoise: mbedTLS CTR_DRBG --------------------------------------------

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
