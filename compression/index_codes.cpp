#include "index_codes.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "bit_io.hpp"
#include "codec_status.hpp"

namespace starling::compression::detail {

namespace {

// Golomb-Rice coding of the gaps between increasing indices (the first index, then
// index - previous - 1): for gaps of a geometric-like distribution with mean m, the
// best r is near log2(m ln 2), and the cost is within a few percent of the entropy.
constexpr unsigned kMaxRiceBits = 24;

std::uint32_t riceGap(const std::vector<std::uint32_t>& indices, std::size_t j) {
  return j == 0 ? indices[0] : indices[j] - indices[j - 1] - 1;
}

// Bits of the coded gaps (without the leading byte of r).
std::uint64_t riceBits(const std::vector<std::uint32_t>& indices, unsigned r) {
  std::uint64_t bits = 0;
  for (std::size_t j = 0; j < indices.size(); ++j)
    bits += (riceGap(indices, j) >> r) + 1 + r;
  return bits;
}

// The r of the fewest bits among those around log2(mean gap x ln 2).
unsigned bestRiceBits(const std::vector<std::uint32_t>& indices, std::uint32_t count) {
  const double meanGap = static_cast<double>(count) / static_cast<double>(indices.size());
  const double guess = std::log2(std::max(1.0, meanGap * 0.6931471805599453));
  const int centre = std::clamp(static_cast<int>(guess), 0, static_cast<int>(kMaxRiceBits));
  unsigned best = static_cast<unsigned>(centre);
  std::uint64_t bestBits = riceBits(indices, best);
  for (int r = std::max(0, centre - 2); r <= std::min<int>(kMaxRiceBits, centre + 2); ++r) {
    const std::uint64_t bits = riceBits(indices, static_cast<unsigned>(r));
    if (bits < bestBits) {
      bestBits = bits;
      best = static_cast<unsigned>(r);
    }
  }
  return best;
}

// Appends the Rice codes of the gaps (without r's byte), zero padding to a byte.
void appendRiceGaps(const std::vector<std::uint32_t>& indices, unsigned r, std::vector<std::uint8_t>& out) {
  BitWriter writer(out);
  for (std::size_t j = 0; j < indices.size(); ++j) {
    const std::uint32_t gap = riceGap(indices, j);
    for (std::uint32_t ones = gap >> r; ones > 0;) {
      const unsigned width = std::min<std::uint32_t>(ones, 24);
      writer.put((1u << width) - 1, width);
      ones -= width;
    }
    writer.put(0, 1);
    if (r > 0) writer.put(gap & ((1u << r) - 1), r);
  }
  writer.finish();
}

void putRice(const std::vector<std::uint32_t>& indices, unsigned r, std::vector<std::uint8_t>& out) {
  out.clear();
  out.push_back(static_cast<std::uint8_t>(r));
  appendRiceGaps(indices, r, out);
}

Status checkReference(std::span<const std::uint32_t> reference, std::uint32_t count) {
  for (std::size_t j = 0; j < reference.size(); ++j) {
    if (reference[j] >= count || (j > 0 && reference[j] <= reference[j - 1])) {
      return invalid("reference indices must increase and lie below the tensor size (" + str(count) + "); position " +
                     str(j) + " does not");
    }
  }
  return Status::ok();
}

// Reads n increasing values below limit, Rice coded with parameter r as appendRiceGaps
// writes them, from data[0, size), into out[0, n), and checks the padding bits after
// the last. used: the bytes they take. `what` names them in errors.
Status getRiceGaps(const std::uint8_t* data, std::size_t size, unsigned r, std::uint32_t n, std::uint64_t limit,
                   const std::string& what, std::uint32_t* out, std::size_t& used) {
  const std::uint64_t available = 8 * static_cast<std::uint64_t>(size);
  BitReader reader(data, size);
  std::uint64_t next = 0;  // the smallest value the next one may take
  for (std::uint32_t j = 0; j < n; ++j) {
    std::uint64_t quotient = 0;
    while (reader.get(1) == 1) {
      ++quotient;
      if ((quotient << r) >= limit) {
        return malformed(what + ": gap " + str(j) + " of " + str(n) + " runs past " + str(limit) + " elements");
      }
    }
    const std::uint64_t gap = (quotient << r) | (r > 0 ? reader.get(r) : 0);
    if (reader.consumed() > available) return malformed(what + " truncated at index " + str(j) + " of " + str(n));
    const std::uint64_t value = next + gap;
    if (value >= limit) {
      return malformed(what + ": index " + str(value) + " at position " + str(j) + " out of range for " + str(limit) +
                       " elements");
    }
    out[j] = static_cast<std::uint32_t>(value);
    next = value + 1;
  }
  used = (reader.consumed() + 7) / 8;
  if (reader.rest() != 0) return malformed(what + " with nonzero padding bits");
  return Status::ok();
}

Status decodeRice(const PayloadView& p, std::vector<std::uint32_t>& out) {
  const std::uint32_t n = p.selected;
  if (p.indices.empty()) return malformed("rice indices without their parameter byte");
  const unsigned r = p.indices[0];
  if (r > kMaxRiceBits) return malformed("rice parameter " + str(r) + " above " + str(kMaxRiceBits));
  const std::size_t size = p.indices.size() - 1;
  std::size_t used = 0;
  STARLING_RETURN_IF_ERROR(getRiceGaps(p.indices.data() + 1, size, r, n, p.count, "rice indices", out.data(), used));
  if (used != size) return malformed(str(size - used) + " trailing bytes after " + str(n) + " rice indices");
  return Status::ok();
}

Status decodeRelative(const PayloadView& p, std::span<const std::uint32_t> reference, std::vector<std::uint32_t>& out) {
  const std::uint32_t n = p.selected;
  STARLING_RETURN_IF_ERROR(checkReference(reference, p.count));
  const std::uint8_t* data = p.indices.data();
  const std::size_t size = p.indices.size();
  if (size == 0) return malformed("relative indices without their header byte");
  const unsigned form = data[0];
  if (form > 1) {
    return malformed("relative indices with header byte " + str(form) +
                     " (0: kept positions as a bitmap, 1: Rice-coded kept positions)");
  }
  std::size_t pos = 1;
  std::vector<std::uint32_t> kept;
  if (form == 0) {
    const std::size_t bytes = (reference.size() + 7) / 8;
    if (size - pos < bytes) {
      return malformed("relative indices truncated in the bitmap of kept positions (" + str(size - pos) + " of " +
                       str(bytes) + " bytes)");
    }
    if (reference.size() % 8 != 0 && (data[pos + bytes - 1] >> (reference.size() % 8)) != 0) {
      return malformed("relative indices' kept bitmap has bits set past the reference's " + str(reference.size()) +
                       " elements");
    }
    for (std::size_t b = 0; b < bytes; ++b) {
      unsigned bits = data[pos + b];
      while (bits != 0) {
        if (kept.size() == n) return malformed("relative indices keep more than the " + str(n) + " selected elements");
        kept.push_back(reference[b * 8 + static_cast<std::size_t>(std::countr_zero(bits))]);
        bits &= bits - 1;
      }
    }
    pos += bytes;
  } else {
    std::uint64_t m = 0;
    if (const char* bad = getVarint(data, size, pos, m)) {
      return malformed(std::string("relative indices' kept count ") + bad);
    }
    if (m > reference.size()) {
      return malformed("relative indices keep " + str(m) + " elements of a reference of " + str(reference.size()));
    }
    if (m > n) return malformed("relative indices keep " + str(m) + " elements, more than the " + str(n) + " selected");
    if (pos >= size) return malformed("relative indices truncated before the kept positions' rice parameter");
    const unsigned r = data[pos++];
    if (r > kMaxRiceBits)
      return malformed("relative kept positions' rice parameter " + str(r) + " above " + str(kMaxRiceBits));
    kept.resize(m);
    std::size_t used = 0;
    STARLING_RETURN_IF_ERROR(getRiceGaps(data + pos, size - pos, r, static_cast<std::uint32_t>(m), reference.size(),
                                         "relative indices' kept positions", kept.data(), used));
    for (std::uint32_t& x : kept)
      x = reference[x];
    pos += used;
  }
  if (pos >= size) return malformed("relative indices truncated before the new indices' rice parameter");
  const unsigned r = data[pos++];
  if (r > kMaxRiceBits)
    return malformed("relative new indices' rice parameter " + str(r) + " above " + str(kMaxRiceBits));
  const auto freshCount = static_cast<std::uint32_t>(n - kept.size());
  std::vector<std::uint32_t> fresh(freshCount);
  std::size_t used = 0;
  STARLING_RETURN_IF_ERROR(
      getRiceGaps(data + pos, size - pos, r, freshCount, p.count, "relative indices' new indices", fresh.data(), used));
  if (pos + used != size) {
    return malformed(str(size - pos - used) + " trailing bytes after " + str(n) + " relative indices");
  }
  // A new index is one the reference does not hold: one it holds is kept or dropped.
  std::size_t q = 0;
  for (std::size_t j = 0; j < fresh.size(); ++j) {
    while (q < reference.size() && reference[q] < fresh[j])
      ++q;
    if (q < reference.size() && reference[q] == fresh[j]) {
      const bool collides = std::binary_search(kept.begin(), kept.end(), fresh[j]);
      return malformed("relative indices: new index " + str(fresh[j]) + " is in the reference" +
                       (collides ? " and collides with a kept one" : ""));
    }
  }
  out.resize(n);
  std::merge(kept.begin(), kept.end(), fresh.begin(), fresh.end(), out.begin());
  return Status::ok();
}

}  // namespace

Status putRelative(const std::vector<std::uint32_t>& indices, std::uint32_t count,
                   std::span<const std::uint32_t> reference, std::vector<std::uint8_t>& out) {
  STARLING_RETURN_IF_ERROR(checkReference(reference, count));
  std::vector<std::uint32_t> keptAt, fresh;  // positions in the reference; indices not in it
  std::size_t q = 0;
  for (std::uint32_t i : indices) {
    while (q < reference.size() && reference[q] < i)
      ++q;
    if (q < reference.size() && reference[q] == i)
      keptAt.push_back(static_cast<std::uint32_t>(q));
    else
      fresh.push_back(i);
  }
  const auto size = static_cast<std::uint32_t>(reference.size());
  const std::size_t bitmapBytes = (reference.size() + 7) / 8;
  unsigned r = 0;
  std::size_t riceBytes = varintSize(static_cast<std::uint32_t>(keptAt.size())) + 1;
  if (!keptAt.empty()) {
    r = bestRiceBits(keptAt, size);
    riceBytes += static_cast<std::size_t>((riceBits(keptAt, r) + 7) / 8);
  }
  out.clear();
  if (riceBytes < bitmapBytes) {
    out.push_back(1);
    putVarint(static_cast<std::uint32_t>(keptAt.size()), out);
    out.push_back(static_cast<std::uint8_t>(r));
    appendRiceGaps(keptAt, r, out);
  } else {
    out.push_back(0);
    const std::size_t base = out.size();
    out.resize(base + bitmapBytes, 0);
    for (std::uint32_t j : keptAt)
      out[base + j / 8] |= static_cast<std::uint8_t>(1u << (j % 8));
  }
  const unsigned rf = fresh.empty() ? 0 : bestRiceBits(fresh, count);
  out.push_back(static_cast<std::uint8_t>(rf));
  appendRiceGaps(fresh, rf, out);
  return Status::ok();
}

Status encodeIndexList(const std::vector<std::uint32_t>& indices, std::uint32_t count, IndexFormat& format,
                       std::vector<std::uint8_t>& out) {
  std::size_t varintBytes = 0;
  std::uint32_t previous = 0;
  for (std::size_t j = 0; j < indices.size(); ++j) {
    const std::uint32_t i = indices[j];
    if (i >= count || (j > 0 && i <= previous)) {
      return invalid("indices must increase and lie below the tensor size");
    }
    varintBytes += varintSize(j == 0 ? i : i - previous);
    previous = i;
  }
  // In 64 bits: on a 32-bit target count + 7 would wrap for counts near 2^32.
  const auto bitmapBytes = static_cast<std::size_t>((static_cast<std::uint64_t>(count) + 7) / 8);
  std::size_t riceBytes = std::numeric_limits<std::size_t>::max();
  unsigned r = 0;
  if (!indices.empty()) {
    r = bestRiceBits(indices, count);
    riceBytes = 1 + static_cast<std::size_t>((riceBits(indices, r) + 7) / 8);
  }
  if (riceBytes < varintBytes && riceBytes < bitmapBytes) {
    format = IndexFormat::kRice;
    putRice(indices, r, out);
    return Status::ok();
  }
  if (bitmapBytes < varintBytes) {
    format = IndexFormat::kBitmap;
    out.assign(bitmapBytes, 0);
    for (std::uint32_t i : indices)
      out[i >> 3] |= static_cast<std::uint8_t>(1u << (i & 7));
    return Status::ok();
  }
  format = IndexFormat::kDeltaVarint;
  out.clear();
  out.reserve(varintBytes);
  previous = 0;
  for (std::size_t j = 0; j < indices.size(); ++j) {
    putVarint(j == 0 ? indices[j] : indices[j] - previous, out);
    previous = indices[j];
  }
  return Status::ok();
}

Status encodeIndices(const Compressed& c, Payload& out) {
  const Status status = encodeIndexList(c.indices, c.count, out.indexFormat, out.indices);
  if (!status) return invalid("top-k " + status.message());
  return Status::ok();
}

Status decodeIndices(const PayloadView& p, const std::span<const std::uint32_t>* reference,
                     std::vector<std::uint32_t>& out) {
  const std::uint32_t n = p.selected;
  out.resize(n);
  if (p.indexFormat == IndexFormat::kRelative) {
    if (reference == nullptr) return malformed("relative indices without a reference");
    return decodeRelative(p, *reference, out);
  }
  if (p.indexFormat == IndexFormat::kBitmap) {
    const auto bytes = static_cast<std::size_t>((static_cast<std::uint64_t>(p.count) + 7) / 8);
    if (p.indices.size() != bytes) {
      return malformed("index bitmap of " + str(p.indices.size()) + " bytes for " + str(p.count) +
                       " elements (expected " + str(bytes) + ")");
    }
    if (p.count % 8 != 0 && (p.indices.back() >> (p.count % 8)) != 0) {
      return malformed("index bitmap has bits set beyond element " + str(p.count));
    }
    std::size_t m = 0;
    for (std::size_t b = 0; b < bytes; ++b) {
      unsigned bits = p.indices[b];
      while (bits != 0) {
        if (m == n) return malformed("index bitmap holds more than the " + str(n) + " selected elements");
        out[m++] = static_cast<std::uint32_t>(b * 8 + static_cast<std::size_t>(std::countr_zero(bits)));
        bits &= bits - 1;
      }
    }
    if (m != n) return malformed("index bitmap holds " + str(m) + " elements, selected says " + str(n));
    return Status::ok();
  }
  if (p.indexFormat == IndexFormat::kRice) return decodeRice(p, out);
  if (p.indexFormat != IndexFormat::kDeltaVarint) {
    return malformed("top-k payload with index format " + indexFormatName(p.indexFormat));
  }
  const std::uint8_t* data = p.indices.data();
  const std::size_t size = p.indices.size();
  std::size_t pos = 0;
  std::uint64_t previous = 0;
  for (std::uint32_t j = 0; j < n; ++j) {
    std::uint64_t x = 0;
    if (const char* bad = getVarint(data, size, pos, x)) {
      return malformed("index varint " + str(j) + " of " + str(n) + " " + bad + " at byte " + str(pos));
    }
    if (j > 0 && x == 0) return malformed("indices not increasing at position " + str(j));
    const std::uint64_t index = j == 0 ? x : previous + x;
    if (index >= p.count) {
      return malformed("index " + str(index) + " at position " + str(j) + " out of range for " + str(p.count) +
                       " elements");
    }
    out[j] = static_cast<std::uint32_t>(index);
    previous = index;
  }
  if (pos != size) return malformed(str(size - pos) + " trailing bytes after " + str(n) + " indices");
  return Status::ok();
}

}  // namespace starling::compression::detail
