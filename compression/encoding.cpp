#include "starling/compression/encoding.hpp"

namespace starling::compression {

namespace {
std::string unknown(unsigned value) {
  return "unknown(" + std::to_string(value) + ")";
}
}  // namespace

std::string encodingName(Encoding encoding) {
  switch (encoding) {
    case Encoding::kDense32:
      return "dense32";
    case Encoding::kDense16:
      return "dense16";
    case Encoding::kTopK:
      return "top-k";
    case Encoding::kRandK:
      return "rand-k";
    case Encoding::kScaledSign:
      return "scaled-sign";
    case Encoding::kQsgd:
      return "qsgd";
  }
  return unknown(static_cast<unsigned>(encoding));
}

std::string indexFormatName(IndexFormat format) {
  switch (format) {
    case IndexFormat::kNone:
      return "none";
    case IndexFormat::kDeltaVarint:
      return "delta-varint";
    case IndexFormat::kBitmap:
      return "bitmap";
    case IndexFormat::kRice:
      return "rice";
    case IndexFormat::kRelative:
      return "relative";
  }
  return unknown(static_cast<unsigned>(format));
}

std::string valueFormatName(ValueFormat format) {
  switch (format) {
    case ValueFormat::kFp32:
      return "fp32";
    case ValueFormat::kFp16:
      return "fp16";
    case ValueFormat::kLevels:
      return "levels";
    case ValueFormat::kSignBits:
      return "sign-bits";
    case ValueFormat::kXor32:
      return "xor32";
  }
  return unknown(static_cast<unsigned>(format));
}

}  // namespace starling::compression
