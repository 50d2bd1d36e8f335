#pragma once
// GaussianNoise: where differential privacy's noise comes from (docs/privacy.md), on
// either side: the coordinator's noise on the round's sum (central), and each client's
// share (distributed noise).
//
// One transform for every source: two uniform 64-bit words give two N(0, 1) values by
// Box-Muller (starling::gaussianPair, 53-bit uniforms), scaled by the standard deviation
// and added in float. The sources differ only in where the words come from:
//  - seededNoise(seed): splitmix64 from a seed. The simulator's: the same seed gives
//    the same noise, bit for bit, on every machine. Never for a deployment: whoever
//    knows the seed can subtract the noise.
//  - secureNoise(): mbedTLS's CTR_DRBG (AES-256, NIST SP 800-90A) seeded from the
//    system's entropy, the daemon's and starling-client's: nobody, the operator
//    included, can reproduce or subtract it.
// Floating-point Gaussian samples are not exactly the mechanism the accountant assumes
// (their low bits can leak: Mironov 2012 showed it for the Laplace mechanism); the
// discrete Gaussian is the fix, not built (docs/privacy.md "Limits").
//
// Not synchronized: one thread at a time.

#include <cstdint>
#include <memory>
#include <span>

#include "starling/compression/compressed.hpp"
#include "starling/util/status.hpp"

namespace starling::compression {

class GaussianNoise {
 public:
  virtual ~GaussianNoise() = default;
  // x[i] += N(0, stddev^2), independently for every i. Fails (x partly noised) only when
  // the source cannot give words (a cryptographic generator that could not reseed).
  Status add(std::span<float> x, double stddev);

 protected:
  // Fills out with uniform 64-bit words; false when it cannot.
  virtual bool words(std::span<uint64_t> out) = 0;

 private:
  uint64_t buffer_[512];
};

std::unique_ptr<GaussianNoise> seededNoise(uint64_t seed);
Result<std::unique_ptr<GaussianNoise>> secureNoise();

// Distributed noise: adds N(0, stddev^2) to every element of a dense tensor (kDense32;
// kDense16's sums are rounded to binary16 again, after the noise). Other encodings are
// refused: noise on every coordinate makes any message dense.
Status addNoise(Compressed& c, GaussianNoise& noise, double stddev);

}  // namespace starling::compression
