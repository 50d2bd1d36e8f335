#include "starling/compression/compressed.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "starling/compression/fp16.hpp"

namespace starling::compression {

std::uint32_t Compressed::selected() const {
  if (encoding == Encoding::kTopK || encoding == Encoding::kRandK) {
    return static_cast<std::uint32_t>(indices.size());
  }
  return count;
}

void Compressed::clear() {
  encoding = Encoding::kDense32;
  count = 0;
  valueFormat = ValueFormat::kFp32;
  indices.clear();
  values.clear();
  xorWords.clear();
  signs.clear();
  block = 0;
  scales.clear();
  levels.clear();
  qsgdLevels = 0;
  seed = 0;
}

namespace {

inline bool bitAt(const std::vector<std::uint64_t>& words, std::size_t i) {
  return (words[i >> 6] >> (i & 63)) & 1u;
}

// Checks the invariants expand() and addScaled() rely on to stay in bounds, but for
// the sparse encodings' indices (checkShape checks them too).
Status checkSizes(const Compressed& c, std::size_t outSize) {
  if (outSize != c.count) {
    return {StatusCode::kInvalidArgument,
            "output of " + std::to_string(outSize) + " elements for a tensor of " + std::to_string(c.count)};
  }
  const std::size_t words = (static_cast<std::size_t>(c.count) + 63) / 64;
  switch (c.encoding) {
    case Encoding::kDense32:
    case Encoding::kDense16:
      if (c.values.size() != c.count) break;
      return Status::ok();
    case Encoding::kTopK:
    case Encoding::kRandK:
      if (c.valueFormat == ValueFormat::kXor32) {
        return {StatusCode::kInvalidArgument, "XOR catch-up words apply to a model only (overwrite)"};
      }
      if (c.values.size() != c.indices.size()) break;
      return Status::ok();
    case Encoding::kScaledSign:
      if (c.block == 0 || c.signs.size() != words ||
          c.scales.size() != (static_cast<std::size_t>(c.count) + c.block - 1) / c.block) {
        break;
      }
      return Status::ok();
    case Encoding::kQsgd:
      if (c.qsgdLevels == 0 || c.signs.size() != words || c.levels.size() != c.count || c.scales.size() != 1) {
        break;
      }
      return Status::ok();
  }
  return {StatusCode::kInvalidArgument, "inconsistent compressed tensor (" + encodingName(c.encoding) + ")"};
}

// checkSizes, and every index of a sparse encoding in range.
Status checkShape(const Compressed& c, std::size_t outSize) {
  STARLING_RETURN_IF_ERROR(checkSizes(c, outSize));
  if (c.encoding == Encoding::kTopK || c.encoding == Encoding::kRandK) {
    for (std::uint32_t i : c.indices) {
      if (i >= c.count) return {StatusCode::kInvalidArgument, "index out of range"};
    }
  }
  return Status::ok();
}

}  // namespace

Status expand(const Compressed& c, std::span<float> out) {
  STARLING_RETURN_IF_ERROR(checkShape(c, out.size()));
  switch (c.encoding) {
    case Encoding::kDense32:
    case Encoding::kDense16:
      std::copy(c.values.begin(), c.values.end(), out.begin());
      break;
    case Encoding::kTopK:
    case Encoding::kRandK:
      std::fill(out.begin(), out.end(), 0.0f);
      for (std::size_t j = 0; j < c.indices.size(); ++j)
        out[c.indices[j]] = c.values[j];
      break;
    case Encoding::kScaledSign:
      for (std::size_t b = 0; b < c.scales.size(); ++b) {
        const std::size_t begin = b * c.block;
        const std::size_t end = std::min<std::size_t>(begin + c.block, c.count);
        const float scale = c.scales[b];
        for (std::size_t i = begin; i < end; ++i)
          out[i] = bitAt(c.signs, i) ? -scale : scale;
      }
      break;
    case Encoding::kQsgd: {
      const float step = c.scales[0] / static_cast<float>(c.qsgdLevels);
      for (std::size_t i = 0; i < c.count; ++i)
        out[i] = qsgdValue(step, c.levels[i], bitAt(c.signs, i));
      break;
    }
  }
  return Status::ok();
}

Result<double> l2Norm(const Compressed& c) {
  STARLING_RETURN_IF_ERROR(checkShape(c, c.count));
  double sum = 0;
  switch (c.encoding) {
    case Encoding::kDense32:
    case Encoding::kDense16:
    case Encoding::kTopK:
    case Encoding::kRandK:
      for (float v : c.values)
        sum += static_cast<double>(v) * static_cast<double>(v);
      break;
    case Encoding::kScaledSign:
      // Every element of a block has the block's magnitude.
      for (std::size_t b = 0; b < c.scales.size(); ++b) {
        const std::size_t begin = b * c.block;
        const std::size_t end = std::min<std::size_t>(begin + c.block, c.count);
        const double scale = c.scales[b];
        sum += static_cast<double>(end - begin) * scale * scale;
      }
      break;
    case Encoding::kQsgd: {
      const float step = c.scales[0] / static_cast<float>(c.qsgdLevels);
      for (std::size_t i = 0; i < c.count; ++i) {
        const double v = qsgdValue(step, c.levels[i], false);
        sum += v * v;
      }
      break;
    }
  }
  return std::sqrt(sum);
}

namespace {

// x * s rounded toward zero, as a float, or as a binary16 value when half.
float shrink(float x, double s, bool half) {
  const double exact = static_cast<double>(x) * s;
  float r = static_cast<float>(exact);
  if (std::fabs(static_cast<double>(r)) > std::fabs(exact)) r = std::nextafter(r, 0.0f);
  if (!half) return r;
  std::uint16_t h = floatToHalf(r);
  // binary16 is sign and magnitude: one step down in the magnitude bits is toward zero.
  if (std::fabs(static_cast<double>(halfToFloat(h))) > std::fabs(exact) && (h & 0x7fffu) != 0) --h;
  return halfToFloat(h);
}

}  // namespace

Result<double> clipToNorm(Compressed& c, double maxNorm) {
  if (!(maxNorm > 0) || !std::isfinite(maxNorm))
    return Status(StatusCode::kInvalidArgument, "clip norm must be positive and finite");
  if (c.valueFormat == ValueFormat::kXor32)
    return Status(StatusCode::kInvalidArgument, "an XOR catch-up tensor has no values to clip");
  auto norm = l2Norm(c);
  if (!norm) return norm.status();
  if (!std::isfinite(*norm)) return Status(StatusCode::kInvalidArgument, "the tensor's norm is not finite");
  if (*norm <= maxNorm) return 1.0;
  const double s = maxNorm / *norm;
  const bool half = c.valueFormat == ValueFormat::kFp16 || c.encoding == Encoding::kDense16;
  const bool scaled = c.encoding == Encoding::kScaledSign || c.encoding == Encoding::kQsgd;
  const bool ternary = c.encoding == Encoding::kTopK && c.valueFormat == ValueFormat::kSignBits;
  // Rounding toward zero keeps every magnitude at or under its exact scaled value, and
  // the norm (accumulated in double) with it; the loop guards the last ulp of the sum.
  for (double factor = s;;) {
    if (scaled || ternary)
      for (float& v : c.scales)
        v = shrink(v, factor, false);
    else
      for (float& v : c.values)
        v = shrink(v, factor, half);
    // Sparse ternary's values are +-the scale of their block.
    if (ternary)
      for (std::size_t j = 0; j < c.values.size(); ++j)
        c.values[j] = std::signbit(c.values[j]) ? -c.scales[j / c.block] : c.scales[j / c.block];
    norm = l2Norm(c);
    if (!norm) return norm.status();
    if (*norm <= maxNorm) return s;
    factor = 1.0 - 1e-6;
  }
}

namespace {

// acc[i] += alpha * C(v)[i] for the elements [first, last) (dense encodings) or the
// entries [first, last) of indices (sparse ones); the shape is checked by the caller.
// addScaled() and addScaledPart() both run it: one expression per element, so a
// tensor added whole or part by part gives the same bits.
void addScaledUnchecked(const Compressed& c, float alpha, std::size_t first, std::size_t last, std::span<float> acc) {
  switch (c.encoding) {
    case Encoding::kDense32:
    case Encoding::kDense16:
      for (std::size_t i = first; i < last; ++i)
        acc[i] += alpha * c.values[i];
      break;
    case Encoding::kTopK:
    case Encoding::kRandK:
      for (std::size_t j = first; j < last; ++j)
        acc[c.indices[j]] += alpha * c.values[j];
      break;
    case Encoding::kScaledSign:
      for (std::size_t b = first / c.block; b * c.block < last; ++b) {
        const std::size_t begin = std::max<std::size_t>(b * c.block, first);
        const std::size_t end = std::min<std::size_t>((b + 1) * c.block, last);
        const float scale = c.scales[b];
        for (std::size_t i = begin; i < end; ++i)
          acc[i] += alpha * (bitAt(c.signs, i) ? -scale : scale);
      }
      break;
    case Encoding::kQsgd: {
      const float step = c.scales[0] / static_cast<float>(c.qsgdLevels);
      for (std::size_t i = first; i < last; ++i) {
        acc[i] += alpha * qsgdValue(step, c.levels[i], bitAt(c.signs, i));
      }
      break;
    }
  }
}

}  // namespace

Status addScaled(const Compressed& c, float alpha, std::span<float> acc) {
  STARLING_RETURN_IF_ERROR(checkShape(c, acc.size()));
  addScaledUnchecked(c, alpha, 0, c.selected(), acc);
  return Status::ok();
}

Status addScaledPart(const Compressed& c, float alpha, std::size_t first, std::size_t last, std::span<float> acc) {
  STARLING_RETURN_IF_ERROR(checkSizes(c, acc.size()));
  if (first > last || last > c.selected()) {
    return {StatusCode::kInvalidArgument, "part [" + std::to_string(first) + ", " + std::to_string(last) +
                                              ") of a tensor of " + std::to_string(c.selected()) + " sent elements"};
  }
  if (c.encoding == Encoding::kTopK || c.encoding == Encoding::kRandK) {
    for (std::size_t j = first; j < last; ++j) {
      if (c.indices[j] >= c.count) return {StatusCode::kInvalidArgument, "index out of range"};
    }
  }
  addScaledUnchecked(c, alpha, first, last, acc);
  return Status::ok();
}

Status overwrite(const Compressed& c, std::span<float> out) {
  if (c.encoding == Encoding::kTopK && c.valueFormat == ValueFormat::kXor32) {
    const std::uint32_t t = c.block;
    if (out.size() != c.count || c.xorWords.size() != c.indices.size() || t > kMaxXorDroppedBits) {
      return {StatusCode::kInvalidArgument, "inconsistent XOR catch-up tensor"};
    }
    const auto apply = [t](float x, std::uint32_t w) {
      return std::bit_cast<float>(((std::bit_cast<std::uint32_t>(x) >> t) ^ w) << t);
    };
    for (std::size_t j = 0; j < c.indices.size(); ++j) {
      const std::uint32_t i = c.indices[j];
      if (i >= c.count) return {StatusCode::kInvalidArgument, "index out of range"};
      if (t > 0 && (c.xorWords[j] >> (32 - t)) != 0) {
        return {StatusCode::kInvalidArgument, "XOR catch-up word wider than " + std::to_string(32 - t) + " bits"};
      }
      if (!std::isfinite(apply(out[i], c.xorWords[j]))) {
        return {StatusCode::kMalformed, "XOR catch-up value " + std::to_string(j) + " (coordinate " +
                                            std::to_string(i) + ") is not finite: not the model it was made for"};
      }
    }
    for (std::size_t j = 0; j < c.indices.size(); ++j) {
      float& x = out[c.indices[j]];
      x = apply(x, c.xorWords[j]);
    }
    return Status::ok();
  }
  STARLING_RETURN_IF_ERROR(checkShape(c, out.size()));
  if (c.encoding != Encoding::kTopK && c.encoding != Encoding::kRandK) return expand(c, out);
  for (std::size_t j = 0; j < c.indices.size(); ++j)
    out[c.indices[j]] = c.values[j];
  return Status::ok();
}

}  // namespace starling::compression
