// Fuzz target: the compressed-payload decoder, fed Payload structs whose every field
// comes from the input (the Flatbuffers table is bypassed, so that the fuzzer spends
// its time in decode rather than in the Verifier). What decode accepts must expand
// into the tensor and survive encode -> decode unchanged.
//
// Input layout: encoding, index format, value format, level bits (1 byte each);
// count, selected, levels, block (u32 LE each, count taken modulo 2^16 + 1); seed
// (u64 LE); then three length-prefixed (u16 LE) byte strings: indices, values,
// scales (as floats). A payload with relative indices is decoded against the reference
// the seed names (referenceFor()), and must survive encodeRelative -> decode too.

#include <cstring>
#include <vector>

#include "starling/compression/compressed.hpp"
#include "starling/compression/payload.hpp"

#include "fuzz_support.hpp"

namespace {

using namespace starling;

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  template <typename T>
  T take() {
    T v{};
    const size_t n = left_ < sizeof v ? left_ : sizeof v;
    std::memcpy(&v, p_, n);  // little-endian host, as the fuzzing machines are
    p_ += n;
    left_ -= n;
    return v;
  }
  std::vector<uint8_t> bytes() {
    size_t n = take<uint16_t>();
    if (n > left_) n = left_;
    std::vector<uint8_t> out(p_, p_ + n);
    p_ += n;
    left_ -= n;
    return out;
  }

 private:
  const uint8_t* p_;
  size_t left_;
};

// Every stride-th index below count from offset, stride = (seed & 63) + 1 and offset =
// (seed >> 8) % stride: a reference list for IndexFormat::kRelative.
std::vector<uint32_t> referenceFor(uint64_t seed, uint32_t count) {
  const auto stride = static_cast<uint32_t>(seed & 63) + 1;
  const auto offset = static_cast<uint32_t>((seed >> 8) % stride);
  std::vector<uint32_t> out;
  for (uint32_t i = offset; i < count; i += stride)
    out.push_back(i);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  compression::Payload p;
  p.encoding = static_cast<compression::Encoding>(in.take<uint8_t>());
  p.indexFormat = static_cast<compression::IndexFormat>(in.take<uint8_t>());
  p.valueFormat = static_cast<compression::ValueFormat>(in.take<uint8_t>());
  p.levelBits = in.take<uint8_t>();
  p.count = in.take<uint32_t>() % ((1u << 16) + 1);
  p.selected = in.take<uint32_t>();
  p.levels = in.take<uint32_t>();
  p.block = in.take<uint32_t>();
  p.seed = in.take<uint64_t>();
  p.indices = in.bytes();
  p.values = in.bytes();
  const auto scaleBytes = in.bytes();
  p.scales.resize(scaleBytes.size() / sizeof(float));
  if (!p.scales.empty()) std::memcpy(p.scales.data(), scaleBytes.data(), p.scales.size() * sizeof(float));

  // The receiver's expected count is its own model size; the payload may disagree.
  const uint32_t expected = (size % 2 == 0) ? p.count : p.count + 1;
  compression::Compressed c;
  const bool relative = p.indexFormat == compression::IndexFormat::kRelative;
  const std::vector<uint32_t> reference = relative ? referenceFor(p.seed, p.count) : std::vector<uint32_t>{};
  if (!(relative ? compression::decode(p, expected, reference, c) : compression::decode(p, expected, c))) return 0;
  STARLING_FUZZ_CHECK(c.count == expected);
  std::vector<float> dense(c.count);
  STARLING_FUZZ_CHECK(compression::expand(c, dense).isOk());
  compression::Payload again;
  STARLING_FUZZ_CHECK(compression::encode(c, again).isOk());
  compression::Compressed back;
  STARLING_FUZZ_CHECK(compression::decode(again, c.count, back).isOk());
  STARLING_FUZZ_CHECK(back == c);
  if (relative) {
    STARLING_FUZZ_CHECK(compression::encodeRelative(c, reference, again).isOk());
    STARLING_FUZZ_CHECK(compression::decode(again, c.count, reference, back).isOk());
    STARLING_FUZZ_CHECK(back == c);
  }
  return 0;
}
