#pragma once
// Test inputs with fixed seeds.

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "starling/compression/compressor.hpp"

namespace starling::compression::test {

// Gaussian N(0, 1).
inline std::vector<float> gaussian(std::size_t d, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(d);
  for (float& x : v)
    x = dist(rng);
  return v;
}

// Flat: uniform in [-1, 1], every magnitude about as likely as any other.
inline std::vector<float> flat(std::size_t d, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(d);
  for (float& x : v)
    x = dist(rng);
  return v;
}

// Skewed: heavy-tailed (Student t with 2 degrees of freedom) with a few very large
// entries, like a gradient with a handful of dominant coordinates.
inline std::vector<float> skewed(std::size_t d, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::student_t_distribution<float> dist(2.0f);
  std::vector<float> v(d);
  for (float& x : v)
    x = dist(rng);
  for (std::size_t i = 0; i < d; i += 997)
    v[i] *= 1000.0f;
  return v;
}

inline double sqNorm(std::span<const float> v) {
  double s = 0;
  for (float x : v)
    s += static_cast<double>(x) * x;
  return s;
}

inline std::vector<float> dense(const Compressed& c) {
  std::vector<float> out(c.count);
  REQUIRE(expand(c, out).isOk());
  return out;
}

inline std::unique_ptr<Compressor> make(const std::string& name, CompressorOptions options = {}) {
  auto c = makeCompressor(name, options);
  REQUIRE(c.isOk());
  return std::move(c).value();
}

// Every compressor with the options used under error feedback.
inline const std::vector<std::string>& allNames() {
  static const std::vector<std::string> names = {"identity", "fp16", "topk", "topk-sampled", "randk", "sign", "qsgd"};
  return names;
}

}  // namespace starling::compression::test
