#include "value_codes.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "starling/compression/fp16.hpp"

#include "bit_io.hpp"
#include "codec_status.hpp"

namespace starling::compression::detail {

static_assert(std::endian::native == std::endian::little,
              "the payload codec copies little-endian floats as they are in memory");

namespace {

// XOR words (value_codes.hpp has the layout): the largest Rice parameter of the
// leading zeros.
constexpr unsigned kMaxXorRiceBits = 5;

// Bits of the coded words (without the two header bytes) for a histogram of their
// leading zeros, m and r.
std::uint64_t xorBits(const std::array<std::uint64_t, 33>& histogram, unsigned m, unsigned r) {
  std::uint64_t bits = 0;
  for (unsigned z = m; z <= 32; ++z)
    bits += histogram[z] * (((z - m) >> r) + 1 + r + (z < 32 ? 31 - z : 0));
  return bits;
}

}  // namespace

void putFloats(const std::vector<float>& values, ValueFormat format, std::vector<std::uint8_t>& out) {
  if (format == ValueFormat::kFp32) {
    out.resize(values.size() * 4);
    if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
    return;
  }
  out.resize(values.size() * 2);
  std::uint16_t chunk[256];
  for (std::size_t i = 0; i < values.size(); i += 256) {
    const std::size_t n = std::min<std::size_t>(256, values.size() - i);
    floatsToHalvesSaturating(std::span<const float>(values.data() + i, n), chunk);
    std::memcpy(out.data() + 2 * i, chunk, 2 * n);
  }
}

Status getFloats(const PayloadView& p, std::size_t n, std::vector<float>& out) {
  const std::size_t width = p.valueFormat == ValueFormat::kFp32 ? 4 : 2;
  if (p.values.size() != n * width) {
    return malformed(str(p.values.size()) + " bytes of " + valueFormatName(p.valueFormat) + " values for " + str(n) +
                     " elements (expected " + str(n * width) + ")");
  }
  out.resize(n);
  if (width == 4) {
    if (n > 0) std::memcpy(out.data(), p.values.data(), n * 4);
  } else {
    std::uint16_t chunk[256];
    for (std::size_t i = 0; i < n; i += 256) {
      const std::size_t m = std::min<std::size_t>(256, n - i);
      std::memcpy(chunk, p.values.data() + 2 * i, 2 * m);
      halvesToFloats(std::span<const std::uint16_t>(chunk, m), std::span<float>(out.data() + i, m));
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) return malformed("value " + str(i) + " is not finite");
  }
  return Status::ok();
}

Status getTernary(const PayloadView& p, Compressed& out) {
  const std::size_t n = p.selected;
  if (p.block == 0) return malformed("top-k sign-bit payload with a block of 0 values");
  const std::size_t blocks = (n + p.block - 1) / p.block;
  if (p.scales.size() != blocks) {
    return malformed("top-k sign-bit payload with " + str(p.scales.size()) + " scales for " + str(blocks) + " blocks");
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    if (!(std::isfinite(p.scales[b]) && p.scales[b] >= 0.0f)) {
      return malformed("top-k sign-bit scale " + str(b) + " is negative or not finite");
    }
  }
  const std::size_t bytes = (n + 7) / 8;
  if (p.values.size() != bytes) {
    return malformed(str(p.values.size()) + " bytes of sign bits for " + str(n) + " values (expected " + str(bytes) +
                     ")");
  }
  if (n % 8 != 0 && (p.values.back() >> (n % 8)) != 0) return malformed("sign bits set beyond value " + str(n));
  out.values.resize(n);
  for (std::size_t j = 0; j < n; ++j) {
    const float scale = p.scales[j / p.block];
    out.values[j] = ((p.values[j >> 3] >> (j & 7)) & 1u) != 0 ? -scale : scale;
  }
  out.block = p.block;
  out.scales.assign(p.scales.begin(), p.scales.end());
  return Status::ok();
}

void putXorWords(const std::vector<std::uint32_t>& words, std::vector<std::uint8_t>& out) {
  std::array<std::uint64_t, 33> histogram{};
  unsigned m = 32;
  for (std::uint32_t w : words) {
    const auto z = static_cast<unsigned>(std::countl_zero(w));
    ++histogram[z];
    m = std::min(m, z);
  }
  unsigned r = 0;
  for (unsigned t = 1; t <= kMaxXorRiceBits; ++t)
    if (xorBits(histogram, m, t) < xorBits(histogram, m, r)) r = t;
  out.clear();
  out.push_back(static_cast<std::uint8_t>(m));
  out.push_back(static_cast<std::uint8_t>(r));
  BitWriter writer(out);
  for (std::uint32_t w : words) {
    const auto z = static_cast<unsigned>(std::countl_zero(w));
    const unsigned g = z - m;
    for (unsigned ones = g >> r; ones > 0;) {
      const unsigned width = std::min(ones, 24u);
      writer.put((1u << width) - 1, width);
      ones -= width;
    }
    writer.put(0, 1);
    if (r > 0) writer.put(g & ((1u << r) - 1), r);
    if (z < 32) {
      const unsigned low = 31 - z;  // the bits below the leading one
      const std::uint32_t rest = w & ((std::uint32_t{1} << low) - 1);
      writer.put(rest & 0xffffu, std::min(low, 16u));
      if (low > 16) writer.put(rest >> 16, low - 16);
    }
  }
  writer.finish();
}

Status getXorWords(const PayloadView& p, std::vector<std::uint32_t>& out) {
  const std::uint32_t n = p.selected;
  if (p.values.size() < 2) return malformed("XOR values without their two header bytes");
  const unsigned m = p.values[0], r = p.values[1];
  if (m > 32) return malformed("XOR values with " + str(m) + " leading zeros (at most 32)");
  if (r > kMaxXorRiceBits) return malformed("XOR values with Rice parameter " + str(r));
  const std::size_t size = p.values.size() - 2;
  const std::uint64_t available = 8 * static_cast<std::uint64_t>(size);
  if (static_cast<std::uint64_t>(n) * (1 + r) > available) {
    return malformed(str(size) + " bytes of XOR values cannot hold " + str(n) + " words");
  }
  BitReader reader(p.values.data() + 2, size);
  out.resize(n);
  for (std::uint32_t j = 0; j < n; ++j) {
    unsigned quotient = 0;
    while (reader.get(1) == 1) {
      if ((++quotient << r) > 32 - m) return malformed("XOR value " + str(j) + " has more than 32 leading zeros");
    }
    const unsigned z = m + ((quotient << r) | (r > 0 ? reader.get(r) : 0));
    if (z > 32) return malformed("XOR value " + str(j) + " has more than 32 leading zeros");
    std::uint32_t word = 0;
    if (z < 32) {
      const unsigned low = 31 - z;
      std::uint32_t rest = reader.get(std::min(low, 16u));
      if (low > 16) rest |= reader.get(low - 16) << 16;
      word = (std::uint32_t{1} << low) | rest;
    }
    if (reader.consumed() > available) {
      return malformed("XOR values truncated at value " + str(j) + " of " + str(n));
    }
    out[j] = word;
  }
  const std::size_t used = (reader.consumed() + 7) / 8;
  if (used != size) return malformed(str(size - used) + " trailing bytes after " + str(n) + " XOR values");
  if (reader.rest() != 0) return malformed("XOR values with nonzero padding bits");
  return Status::ok();
}

}  // namespace starling::compression::detail
