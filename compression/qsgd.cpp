#include "starling/compression/qsgd.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "random.hpp"
#include "reduce.hpp"

namespace starling::compression {

double qsgdOmega(std::size_t d, std::uint32_t levels) {
  const double s = levels;
  const auto n = static_cast<double>(d);
  return std::min(n / (s * s), std::sqrt(n) / s);
}

std::uint8_t qsgdLevelBits(std::uint32_t levels) {
  return static_cast<std::uint8_t>(std::bit_width(levels));
}

Status QsgdCompressor::compress(std::span<const float> v, const CompressParams& params, Compressed& out) {
  if (v.empty() || v.size() > std::numeric_limits<std::uint32_t>::max()) return checkInput(v);
  const std::size_t d = v.size();
  const double norm = std::sqrt(detail::sumSquares(v.data(), d));
  if (!std::isfinite(norm)) return checkInput(v);  // names the element
  const std::uint32_t s = options_.levels;
  const double factor = options_.contractive ? 1.0 / (1.0 + qsgdOmega(d, s)) : 1.0;

  out.clear();
  out.encoding = Encoding::kQsgd;
  out.count = static_cast<std::uint32_t>(d);
  out.valueFormat = ValueFormat::kLevels;
  out.qsgdLevels = s;
  out.seed = params.seed;
  out.scales.assign(1, static_cast<float>(norm * factor));
  out.levels.resize(d);
  out.signs.assign((d + 63) / 64, 0);
  if (norm == 0.0 || out.scales[0] == 0.0f) {
    std::fill(out.levels.begin(), out.levels.end(), std::uint8_t{0});
    out.scales[0] = 0.0f;
    return Status::ok();
  }
  // l_i = floor(x) + [u_i < x - floor(x)] with x = s |v_i| / ||v||, u_i uniform from a
  // counter-based stream (so the loop has no carried dependence).
  const double perUnit = static_cast<double>(s) / norm;
  const std::uint64_t key = detail::mix64(params.seed ^ detail::kStreamQsgd);
  const double top = s;
  std::uint8_t* levels = out.levels.data();
  for (std::size_t i = 0; i < d; ++i) {
    const double x = std::min(std::fabs(static_cast<double>(v[i])) * perUnit, top);
    const double floor = std::floor(x);
    const double u = detail::unitFloat(detail::hashAt(key, i));
    const double level = std::min(floor + (u < x - floor ? 1.0 : 0.0), top);
    levels[i] = static_cast<std::uint8_t>(level);
  }
  for (std::size_t i = 0; i < d; ++i) {
    if (levels[i] != 0 && std::signbit(v[i])) out.signs[i >> 6] |= std::uint64_t{1} << (i & 63);
  }
  return Status::ok();
}

}  // namespace starling::compression
