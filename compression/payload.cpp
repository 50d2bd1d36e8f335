#include "starling/compression/payload.hpp"

#include <cmath>
#include <string>

#include "starling/compression/qsgd.hpp"
#include "starling/compression/randk.hpp"

#include "bit_io.hpp"
#include "codec_status.hpp"
#include "index_codes.hpp"
#include "value_codes.hpp"

namespace starling::compression {

using detail::BitReader;
using detail::BitWriter;
using detail::decodeIndices;
using detail::encodeIndices;
using detail::getFloats;
using detail::getTernary;
using detail::getXorWords;
using detail::invalid;
using detail::malformed;
using detail::putFloats;
using detail::putRelative;
using detail::putSignBytes;
using detail::putXorWords;
using detail::str;

namespace {
constexpr std::size_t kScalarBytes = 1 + 4 + 4 + 1 + 1 + 1 + 4 + 4 + 8;
}  // namespace

std::size_t Payload::byteSize() const {
  return kScalarBytes + indices.size() + values.size() + 4 * scales.size();
}

std::size_t PayloadView::byteSize() const {
  return kScalarBytes + indices.size() + values.size() + 4 * scales.size();
}

PayloadView viewOf(const Payload& p) {
  return {p.encoding, p.count,     p.selected, p.indexFormat, p.indices, p.valueFormat,
          p.values,   p.levelBits, p.levels,   p.block,       p.scales,  p.seed};
}

namespace {

Status requireFormats(const PayloadView& p, IndexFormat index, bool fp) {
  if (p.indexFormat != index) {
    return malformed(encodingName(p.encoding) + " payload with index format " + indexFormatName(p.indexFormat));
  }
  const bool ok = fp ? (p.valueFormat == ValueFormat::kFp32 || p.valueFormat == ValueFormat::kFp16) : true;
  if (!ok) {
    return malformed(encodingName(p.encoding) + " payload with value format " + valueFormatName(p.valueFormat));
  }
  return Status::ok();
}

}  // namespace

Status encode(const Compressed& c, Payload& out) {
  out.encoding = c.encoding;
  out.count = c.count;
  out.selected = c.selected();
  out.indexFormat = IndexFormat::kNone;
  out.indices.clear();
  out.valueFormat = c.valueFormat;
  out.values.clear();
  out.levelBits = 0;
  out.levels = 0;
  out.block = 0;
  out.scales.clear();
  out.seed = 0;
  const std::size_t words = (static_cast<std::size_t>(c.count) + 63) / 64;
  const bool fp = c.valueFormat == ValueFormat::kFp32 || c.valueFormat == ValueFormat::kFp16;
  switch (c.encoding) {
    case Encoding::kDense32:
    case Encoding::kDense16:
      if (c.values.size() != c.count || !fp) return invalid("inconsistent dense tensor");
      putFloats(c.values, c.valueFormat, out.values);
      return Status::ok();
    case Encoding::kTopK:
      if (c.valueFormat == ValueFormat::kSignBits) {
        if (c.values.size() != c.indices.size()) return invalid("inconsistent top-k tensor");
        // Ternary: value j is +-scales[j / block], one sign bit each.
        if (c.block == 0 || c.scales.size() != (c.values.size() + c.block - 1) / c.block) {
          return invalid("top-k sign-bit tensor needs one scale per block of values");
        }
        out.values.assign((c.values.size() + 7) / 8, 0);
        for (std::size_t j = 0; j < c.values.size(); ++j) {
          const float v = c.values[j], scale = c.scales[j / c.block];
          if (!(scale >= 0.0f) || !std::isfinite(scale) || (v != scale && v != -scale)) {
            return invalid("top-k sign-bit value " + str(j) + " is not +-its block's scale");
          }
          if (std::signbit(v)) out.values[j >> 3] |= static_cast<std::uint8_t>(1u << (j & 7));
        }
        out.block = c.block;
        out.scales = c.scales;
        return encodeIndices(c, out);
      }
      if (c.valueFormat == ValueFormat::kXor32) {
        if (c.xorWords.size() != c.indices.size() || !c.values.empty()) {
          return invalid("top-k XOR tensor needs one word per index and no values");
        }
        if (c.block > kMaxXorDroppedBits) return invalid("top-k XOR tensor dropping " + str(c.block) + " bits");
        for (std::uint32_t w : c.xorWords)
          if (c.block > 0 && (w >> (32 - c.block)) != 0) return invalid("top-k XOR word wider than its bits");
        out.block = c.block;
        putXorWords(c.xorWords, out.values);
        return encodeIndices(c, out);
      }
      if (c.values.size() != c.indices.size()) return invalid("inconsistent top-k tensor");
      if (!fp) return invalid("inconsistent top-k tensor");
      STARLING_RETURN_IF_ERROR(encodeIndices(c, out));
      putFloats(c.values, c.valueFormat, out.values);
      return Status::ok();
    case Encoding::kRandK:
      if (c.values.size() != c.indices.size() || !fp) return invalid("inconsistent rand-k tensor");
      out.seed = c.seed;
      putFloats(c.values, c.valueFormat, out.values);
      return Status::ok();
    case Encoding::kScaledSign:
      if (c.block == 0 || c.signs.size() != words ||
          c.scales.size() != (static_cast<std::size_t>(c.count) + c.block - 1) / c.block) {
        return invalid("inconsistent scaled-sign tensor");
      }
      out.block = c.block;
      out.scales = c.scales;
      putSignBytes(c.signs, c.count, out.values);
      return Status::ok();
    case Encoding::kQsgd: {
      if (c.qsgdLevels < 1 || c.qsgdLevels > 255 || c.levels.size() != c.count || c.signs.size() != words ||
          c.scales.size() != 1) {
        return invalid("inconsistent qsgd tensor");
      }
      out.levels = c.qsgdLevels;
      out.levelBits = qsgdLevelBits(c.qsgdLevels);
      out.scales = c.scales;
      out.seed = c.seed;
      out.values.reserve((static_cast<std::size_t>(c.count) * (out.levelBits + 1u) + 7) / 8);
      BitWriter writer(out.values);
      for (std::size_t i = 0; i < c.count; ++i) {
        const std::uint32_t sign = (c.signs[i >> 6] >> (i & 63)) & 1u;
        writer.put(c.levels[i] | (sign << out.levelBits), out.levelBits + 1u);
      }
      writer.finish();
      return Status::ok();
    }
  }
  return invalid("cannot encode " + encodingName(c.encoding));
}

Status encodeRelative(const Compressed& c, std::span<const std::uint32_t> reference, Payload& out) {
  if (c.encoding != Encoding::kTopK)
    return invalid("relative indices need a top-k tensor, not " + encodingName(c.encoding));
  STARLING_RETURN_IF_ERROR(encode(c, out));
  out.indexFormat = IndexFormat::kRelative;
  return putRelative(c.indices, c.count, reference, out.indices);
}

namespace {
Status decodeWith(const PayloadView& p, std::uint32_t expectedCount, const std::span<const std::uint32_t>* reference,
                  Compressed& out);
}  // namespace

Status decode(const Payload& p, std::uint32_t expectedCount, Compressed& out) {
  return decodeWith(viewOf(p), expectedCount, nullptr, out);
}

Status decode(const PayloadView& p, std::uint32_t expectedCount, Compressed& out) {
  return decodeWith(p, expectedCount, nullptr, out);
}

Status decode(const Payload& p, std::uint32_t expectedCount, std::span<const std::uint32_t> reference,
              Compressed& out) {
  return decodeWith(viewOf(p), expectedCount, &reference, out);
}

Status decode(const PayloadView& p, std::uint32_t expectedCount, std::span<const std::uint32_t> reference,
              Compressed& out) {
  return decodeWith(p, expectedCount, &reference, out);
}

namespace {
Status decodeWith(const PayloadView& p, std::uint32_t expectedCount, const std::span<const std::uint32_t>* reference,
                  Compressed& out) {
  if (p.count != expectedCount) {
    return {StatusCode::kOutOfRange,
            "compressed tensor of " + str(p.count) + " elements where " + str(expectedCount) + " are expected"};
  }
  if (p.count == 0) return malformed("compressed tensor of 0 elements");
  out.clear();
  out.encoding = p.encoding;
  out.count = p.count;
  out.valueFormat = p.valueFormat;
  const std::size_t words = (static_cast<std::size_t>(p.count) + 63) / 64;
  const std::string name = encodingName(p.encoding);
  switch (p.encoding) {
    case Encoding::kDense32:
    case Encoding::kDense16: {
      const ValueFormat want = p.encoding == Encoding::kDense32 ? ValueFormat::kFp32 : ValueFormat::kFp16;
      STARLING_RETURN_IF_ERROR(requireFormats(p, IndexFormat::kNone, true));
      if (p.valueFormat != want) {
        return malformed(name + " payload with value format " + valueFormatName(p.valueFormat));
      }
      if (p.selected != p.count) {
        return malformed(name + " payload selects " + str(p.selected) + " of " + str(p.count) + " elements");
      }
      return getFloats(p, p.count, out.values);
    }
    case Encoding::kTopK:
    case Encoding::kRandK: {
      if (p.selected < 1 || p.selected > p.count) {
        return malformed(name + " payload selects " + str(p.selected) + " of " + str(p.count) + " elements");
      }
      if (p.encoding == Encoding::kRandK) {
        STARLING_RETURN_IF_ERROR(requireFormats(p, IndexFormat::kNone, true));
        STARLING_RETURN_IF_ERROR(getFloats(p, p.selected, out.values));
        out.seed = p.seed;
        std::vector<std::uint64_t> bitmap;
        randKIndices(p.seed, p.count, p.selected, bitmap, out.indices);
        return Status::ok();
      }
      if (p.indexFormat != IndexFormat::kDeltaVarint && p.indexFormat != IndexFormat::kBitmap &&
          p.indexFormat != IndexFormat::kRice && p.indexFormat != IndexFormat::kRelative) {
        return malformed("top-k payload with index format " + indexFormatName(p.indexFormat));
      }
      if (p.valueFormat == ValueFormat::kSignBits) {
        STARLING_RETURN_IF_ERROR(getTernary(p, out));
      } else if (p.valueFormat == ValueFormat::kXor32) {
        if (!p.scales.empty()) return malformed("top-k XOR payload with scales");
        if (p.block > kMaxXorDroppedBits) {
          return malformed("top-k XOR payload dropping " + str(p.block) + " low bits (at most " +
                           str(kMaxXorDroppedBits) + ")");
        }
        STARLING_RETURN_IF_ERROR(getXorWords(p, out.xorWords));
        for (std::size_t j = 0; j < out.xorWords.size(); ++j) {
          if (p.block > 0 && (out.xorWords[j] >> (32 - p.block)) != 0) {
            return malformed("XOR value " + str(j) + " wider than the " + str(32 - p.block) + " bits above the " +
                             str(p.block) + " dropped");
          }
        }
        out.block = p.block;
      } else {
        STARLING_RETURN_IF_ERROR(requireFormats(p, p.indexFormat, true));
        STARLING_RETURN_IF_ERROR(getFloats(p, p.selected, out.values));
      }
      return decodeIndices(p, reference, out.indices);
    }
    case Encoding::kScaledSign: {
      STARLING_RETURN_IF_ERROR(requireFormats(p, IndexFormat::kNone, false));
      if (p.valueFormat != ValueFormat::kSignBits) {
        return malformed(name + " payload with value format " + valueFormatName(p.valueFormat));
      }
      if (p.selected != p.count) {
        return malformed(name + " payload selects " + str(p.selected) + " of " + str(p.count) + " elements");
      }
      if (p.block == 0) return malformed("scaled-sign payload with a block of 0 elements");
      const std::size_t blocks = (static_cast<std::size_t>(p.count) + p.block - 1) / p.block;
      if (p.scales.size() != blocks) {
        return malformed(str(p.scales.size()) + " scales for " + str(blocks) + " blocks");
      }
      for (std::size_t b = 0; b < blocks; ++b) {
        if (!(std::isfinite(p.scales[b]) && p.scales[b] >= 0.0f)) {
          return malformed("scale of block " + str(b) + " is negative or not finite");
        }
      }
      const std::size_t bytes = (static_cast<std::size_t>(p.count) + 7) / 8;
      if (p.values.size() != bytes) {
        return malformed(str(p.values.size()) + " bytes of sign bits for " + str(p.count) + " elements (expected " +
                         str(bytes) + ")");
      }
      if (p.count % 8 != 0 && (p.values.back() >> (p.count % 8)) != 0) {
        return malformed("sign bits set beyond element " + str(p.count));
      }
      out.block = p.block;
      out.scales.assign(p.scales.begin(), p.scales.end());
      out.signs.assign(words, 0);
      for (std::size_t b = 0; b < bytes; ++b) {
        out.signs[b / 8] |= static_cast<std::uint64_t>(p.values[b]) << (8 * (b % 8));
      }
      return Status::ok();
    }
    case Encoding::kQsgd: {
      STARLING_RETURN_IF_ERROR(requireFormats(p, IndexFormat::kNone, false));
      if (p.valueFormat != ValueFormat::kLevels) {
        return malformed(name + " payload with value format " + valueFormatName(p.valueFormat));
      }
      if (p.selected != p.count) {
        return malformed(name + " payload selects " + str(p.selected) + " of " + str(p.count) + " elements");
      }
      if (p.levels < 1 || p.levels > 255) {
        return {StatusCode::kUnsupported, "qsgd with " + str(p.levels) + " levels (supported: 1 to 255)"};
      }
      if (p.levelBits != qsgdLevelBits(p.levels)) {
        return malformed("qsgd level width of " + str(p.levelBits) + " bits for " + str(p.levels) +
                         " levels (expected " + str(qsgdLevelBits(p.levels)) + ")");
      }
      if (p.scales.size() != 1 || !(std::isfinite(p.scales[0]) && p.scales[0] >= 0.0f)) {
        return malformed("qsgd payload needs one finite, non-negative scale");
      }
      const unsigned width = p.levelBits + 1u;
      const std::size_t bytes = (static_cast<std::size_t>(p.count) * width + 7) / 8;
      if (p.values.size() != bytes) {
        return malformed(str(p.values.size()) + " bytes of levels for " + str(p.count) + " elements (expected " +
                         str(bytes) + ")");
      }
      out.qsgdLevels = p.levels;
      out.scales.assign(p.scales.begin(), p.scales.end());
      out.seed = p.seed;
      out.levels.resize(p.count);
      out.signs.assign(words, 0);
      BitReader reader(p.values.data(), p.values.size());
      const std::uint32_t levelMask = (1u << p.levelBits) - 1;
      for (std::size_t i = 0; i < p.count; ++i) {
        const std::uint32_t field = reader.get(width);
        const std::uint32_t level = field & levelMask;
        if (level > p.levels) {
          return malformed("level " + str(level) + " of element " + str(i) + " exceeds " + str(p.levels));
        }
        out.levels[i] = static_cast<std::uint8_t>(level);
        if (level != 0 && (field >> p.levelBits) != 0) out.signs[i >> 6] |= std::uint64_t{1} << (i & 63);
      }
      if (reader.rest() != 0) return malformed("qsgd padding bits are not zero");
      return Status::ok();
    }
  }
  return {StatusCode::kUnsupported, "unknown encoding " + str(static_cast<unsigned>(p.encoding))};
}
}  // namespace

}  // namespace starling::compression
