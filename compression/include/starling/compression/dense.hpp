#pragma once
// The dense compressors: identity (fp32, 32 bits per element, the FedAvg baseline)
// and fp16 (16 bits per element; values beyond +-65504 saturate).

#include "starling/compression/compressor.hpp"

namespace starling::compression {

class IdentityCompressor final : public Compressor {
 public:
  std::string_view name() const override { return "identity"; }
  Status compress(std::span<const float> v, const CompressParams& params, Compressed& out) override;
};

class Fp16Compressor final : public Compressor {
 public:
  std::string_view name() const override { return "fp16"; }
  Status compress(std::span<const float> v, const CompressParams& params, Compressed& out) override;
};

}  // namespace starling::compression
