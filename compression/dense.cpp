#include "starling/compression/dense.hpp"

#include "starling/compression/fp16.hpp"

namespace starling::compression {

Status IdentityCompressor::compress(std::span<const float> v, const CompressParams&, Compressed& out) {
  STARLING_RETURN_IF_ERROR(checkInput(v));
  out.clear();
  out.encoding = Encoding::kDense32;
  out.count = static_cast<std::uint32_t>(v.size());
  out.valueFormat = ValueFormat::kFp32;
  out.values.assign(v.begin(), v.end());
  return Status::ok();
}

Status Fp16Compressor::compress(std::span<const float> v, const CompressParams&, Compressed& out) {
  STARLING_RETURN_IF_ERROR(checkInput(v));
  out.clear();
  out.encoding = Encoding::kDense16;
  out.count = static_cast<std::uint32_t>(v.size());
  out.valueFormat = ValueFormat::kFp16;
  out.values.resize(v.size());
  roundToHalfSaturating(v, out.values);
  return Status::ok();
}

}  // namespace starling::compression
