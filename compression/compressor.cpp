#include "starling/compression/compressor.hpp"

#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "starling/compression/dense.hpp"
#include "starling/compression/qsgd.hpp"
#include "starling/compression/randk.hpp"
#include "starling/compression/scaled_sign.hpp"
#include "starling/compression/schedule.hpp"
#include "starling/compression/topk.hpp"

namespace starling::compression {

Result<std::uint32_t> selectedCount(std::size_t d, double density) {
  if (d == 0) return Status{StatusCode::kInvalidArgument, "cannot compress an empty tensor"};
  STARLING_RETURN_IF_ERROR(checkDensity(density, "density"));
  const double k = std::round(density * static_cast<double>(d));
  if (k < 1.0) return 1u;
  if (k >= static_cast<double>(d)) return static_cast<std::uint32_t>(d);
  return static_cast<std::uint32_t>(k);
}

Status checkInput(std::span<const float> v) {
  if (v.empty()) return {StatusCode::kInvalidArgument, "cannot compress an empty tensor"};
  if (v.size() > std::numeric_limits<std::uint32_t>::max()) {
    return {StatusCode::kOutOfRange,
            "tensor of " + std::to_string(v.size()) + " elements exceeds the limit of 2^32 - 1"};
  }
  std::uint32_t maxBits = 0;
  for (float x : v)
    maxBits = std::max(maxBits, std::bit_cast<std::uint32_t>(x) & 0x7fffffffu);
  if (maxBits < 0x7f800000u) return Status::ok();
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      const char* what = std::isnan(v[i]) ? "NaN" : (v[i] > 0 ? "+infinity" : "-infinity");
      return {StatusCode::kInvalidArgument,
              "element " + std::to_string(i) + " of " + std::to_string(v.size()) + " is " + what};
    }
  }
  return Status::ok();
}

Result<std::unique_ptr<Compressor>> makeCompressor(std::string_view name, const CompressorOptions& options) {
  const bool fpValues = options.values == ValueFormat::kFp32 || options.values == ValueFormat::kFp16;
  if (name == "identity") return std::unique_ptr<Compressor>(new IdentityCompressor());
  if (name == "fp16") return std::unique_ptr<Compressor>(new Fp16Compressor());
  if (name == "topk" || name == "topk-sampled" || name == "randk") {
    const bool ternary = options.values == ValueFormat::kSignBits && name != "randk";
    if (!fpValues && !ternary) {
      return Status{StatusCode::kInvalidArgument, std::string(name) + " sends fp32 or fp16 values" +
                                                      (name == "randk" ? "" : " or sign bits") + ", not " +
                                                      valueFormatName(options.values)};
    }
    if (name == "randk") {
      return std::unique_ptr<Compressor>(new RandKCompressor(RandKOptions{options.values, options.randkRescale}));
    }
    return std::unique_ptr<Compressor>(new TopKCompressor(TopKOptions{options.values, name == "topk-sampled"}));
  }
  if (name == "sign") {
    if (options.signBlock == 0) {
      return Status{StatusCode::kInvalidArgument, "sign block must be at least 1 element"};
    }
    return std::unique_ptr<Compressor>(new ScaledSignCompressor(options.signBlock));
  }
  if (name == "qsgd") {
    if (options.qsgdLevels < 1 || options.qsgdLevels > 255) {
      return Status{StatusCode::kInvalidArgument,
                    "qsgd levels must be in [1, 255], got " + std::to_string(options.qsgdLevels)};
    }
    return std::unique_ptr<Compressor>(new QsgdCompressor(QsgdOptions{options.qsgdLevels, options.qsgdContractive}));
  }
  return Status{StatusCode::kInvalidArgument, "unknown compressor '" + std::string(name) +
                                                  "' (known: identity, fp16, topk, topk-sampled, randk, sign, qsgd)"};
}

}  // namespace starling::compression
