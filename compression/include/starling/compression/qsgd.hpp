#pragma once
// QSGD with s levels (Alistarh et al., NeurIPS 2017): element i is sent as
// sign(v_i) * ||v||_2 * l_i / s, where l_i rounds s |v_i| / ||v||_2 stochastically to
// one of its two neighbouring integers so that E[C(v)] = v. The variance bound is
// E||C(v) - v||^2 <= omega ||v||^2 with omega = min(d / s^2, sqrt(d) / s).
// Multiplying by 1 / (1 + omega) (the contractive option) gives a contraction with
// delta = 1 / (1 + omega), for use under error feedback. Costs
// ceil(log2(s + 1)) + 1 bits per element, plus one float scale.

#include <cstdint>

#include "starling/compression/compressor.hpp"

namespace starling::compression {

struct QsgdOptions {
  std::uint32_t levels = 15;  // s, in [1, 255]
  bool contractive = false;   // scale by 1 / (1 + omega)
};

// omega(d, s) = min(d / s^2, sqrt(d) / s).
double qsgdOmega(std::size_t d, std::uint32_t levels);

// Bits of a level: ceil(log2(s + 1)).
std::uint8_t qsgdLevelBits(std::uint32_t levels);

class QsgdCompressor final : public Compressor {
 public:
  // options.levels in [1, 255]; makeCompressor() checks it.
  explicit QsgdCompressor(QsgdOptions options = {}) : options_(options) {}

  std::string_view name() const override { return "qsgd"; }
  Status compress(std::span<const float> v, const CompressParams& params, Compressed& out) override;

 private:
  QsgdOptions options_;
};

}  // namespace starling::compression
