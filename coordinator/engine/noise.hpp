#pragma once
// GaussianNoise: where differential privacy's noise comes from (docs/privacy.md).
//
// One transform for every source: two uniform 64-bit words give two N(0, 1) values by
// Box-Muller (53-bit uniforms in (0, 1]), scaled by the standard deviation and added
// in float. The sources differ only in where the words come from:
//  - seededNoise(seed): splitmix64 from a seed. The simulator's: the same seed gives
//    the same noise, bit for bit, on every machine. Never for a deployment: whoever
//    knows the seed can subtract the noise.
//  - the daemon's, from a cryptographic generator (coordinator/secure_noise.hpp).
// Floating-point Gaussian samples are not exactly the mechanism the accountant assumes
// (their low bits can leak: Mironov 2012 showed it for the Laplace mechanism); the
// discrete Gaussian is the fix, not built (docs/privacy.md "Limits").
//
// Not synchronized: one thread at a time.

#include <cstdint>
#include <memory>
#include <span>

namespace starling::coordinator {

class GaussianNoise {
 public:
  virtual ~GaussianNoise() = default;
  // x[i] += N(0, stddev^2), independently for every i.
  void add(std::span<float> x, double stddev);

 protected:
  // Fills out with uniform 64-bit words.
  virtual void words(std::span<uint64_t> out) = 0;

 private:
  uint64_t buffer_[512];
};

std::unique_ptr<GaussianNoise> seededNoise(uint64_t seed);

}  // namespace starling::coordinator
