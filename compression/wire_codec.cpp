#include "starling/compression/wire_codec.hpp"

#include <type_traits>

namespace starling::compression {

namespace fb = wire::fb;

// The codec's enums carry the schema's numeric values.
static_assert(static_cast<int>(Encoding::kDense32) == static_cast<int>(fb::Encoding::Dense32));
static_assert(static_cast<int>(Encoding::kDense16) == static_cast<int>(fb::Encoding::Dense16));
static_assert(static_cast<int>(Encoding::kTopK) == static_cast<int>(fb::Encoding::TopK));
static_assert(static_cast<int>(Encoding::kRandK) == static_cast<int>(fb::Encoding::RandK));
static_assert(static_cast<int>(Encoding::kScaledSign) == static_cast<int>(fb::Encoding::ScaledSign));
static_assert(static_cast<int>(Encoding::kQsgd) == static_cast<int>(fb::Encoding::Qsgd));
static_assert(static_cast<int>(IndexFormat::kNone) == static_cast<int>(fb::IndexFormat::None));
static_assert(static_cast<int>(IndexFormat::kDeltaVarint) == static_cast<int>(fb::IndexFormat::DeltaVarint));
static_assert(static_cast<int>(IndexFormat::kBitmap) == static_cast<int>(fb::IndexFormat::Bitmap));
static_assert(static_cast<int>(IndexFormat::kRice) == static_cast<int>(fb::IndexFormat::Rice));
static_assert(static_cast<int>(IndexFormat::kRelative) == static_cast<int>(fb::IndexFormat::Relative));
static_assert(static_cast<int>(ValueFormat::kFp32) == static_cast<int>(fb::ValueFormat::Fp32));
static_assert(static_cast<int>(ValueFormat::kFp16) == static_cast<int>(fb::ValueFormat::Fp16));
static_assert(static_cast<int>(ValueFormat::kLevels) == static_cast<int>(fb::ValueFormat::Levels));
static_assert(static_cast<int>(ValueFormat::kSignBits) == static_cast<int>(fb::ValueFormat::SignBits));
static_assert(static_cast<int>(ValueFormat::kXor32) == static_cast<int>(fb::ValueFormat::Xor32));
static_assert(std::is_same_v<std::underlying_type_t<fb::Encoding>, std::uint8_t>);
static_assert(std::is_same_v<std::underlying_type_t<fb::IndexFormat>, std::uint8_t>);
static_assert(std::is_same_v<std::underlying_type_t<fb::ValueFormat>, std::uint8_t>);

flatbuffers::Offset<fb::CompressedTensor> toWire(flatbuffers::FlatBufferBuilder& builder, const Payload& payload) {
  return toWire(builder, viewOf(payload));
}

flatbuffers::Offset<fb::CompressedTensor> toWire(flatbuffers::FlatBufferBuilder& builder, const PayloadView& payload) {
  const auto indices =
      payload.indices.empty() ? 0 : builder.CreateVector(payload.indices.data(), payload.indices.size());
  const auto values = payload.values.empty() ? 0 : builder.CreateVector(payload.values.data(), payload.values.size());
  const auto scales = payload.scales.empty() ? 0 : builder.CreateVector(payload.scales.data(), payload.scales.size());
  return fb::CreateCompressedTensor(builder, static_cast<fb::Encoding>(payload.encoding), payload.count,
                                    payload.selected, static_cast<fb::IndexFormat>(payload.indexFormat), indices,
                                    static_cast<fb::ValueFormat>(payload.valueFormat), values, payload.levelBits,
                                    payload.levels, payload.block, scales, payload.seed);
}

Result<Payload> fromWire(const fb::CompressedTensor* tensor) {
  if (tensor == nullptr) return Status{StatusCode::kMalformed, "compressed tensor is missing"};
  Payload p;
  p.encoding = static_cast<Encoding>(tensor->encoding());
  p.count = tensor->count();
  p.selected = tensor->selected();
  p.indexFormat = static_cast<IndexFormat>(tensor->index_format());
  if (const auto* v = tensor->indices()) p.indices.assign(v->begin(), v->end());
  p.valueFormat = static_cast<ValueFormat>(tensor->value_format());
  if (const auto* v = tensor->values()) p.values.assign(v->begin(), v->end());
  p.levelBits = tensor->level_bits();
  p.levels = tensor->levels();
  p.block = tensor->block();
  if (const auto* v = tensor->scales()) p.scales.assign(v->begin(), v->end());
  p.seed = tensor->seed();
  return p;
}

// viewWire reads the scales in place, as floats: the wire is little-endian.
static_assert(FLATBUFFERS_LITTLEENDIAN, "viewWire assumes a little-endian host");

Result<PayloadView> viewWire(const fb::CompressedTensor* tensor) {
  if (tensor == nullptr) return Status{StatusCode::kMalformed, "compressed tensor is missing"};
  PayloadView p;
  p.encoding = static_cast<Encoding>(tensor->encoding());
  p.count = tensor->count();
  p.selected = tensor->selected();
  p.indexFormat = static_cast<IndexFormat>(tensor->index_format());
  if (const auto* v = tensor->indices()) p.indices = {v->data(), v->size()};
  p.valueFormat = static_cast<ValueFormat>(tensor->value_format());
  if (const auto* v = tensor->values()) p.values = {v->data(), v->size()};
  p.levelBits = tensor->level_bits();
  p.levels = tensor->levels();
  p.block = tensor->block();
  if (const auto* v = tensor->scales()) p.scales = {v->data(), v->size()};
  p.seed = tensor->seed();
  return p;
}

}  // namespace starling::compression
