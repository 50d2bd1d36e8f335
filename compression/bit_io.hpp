#pragma once
// Private: the bit and byte fields of the payload codec. BitWriter and BitReader carry
// LSB-first bit fields (Rice codes, QSGD levels, XOR words); putVarint and getVarint
// LEB128 varints of at most 32 bits; putSignBytes the sign bitmap of scaled sign.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace starling::compression::detail {

// LSB-first bit stream of fields up to 25 bits wide.
class BitWriter {
 public:
  explicit BitWriter(std::vector<std::uint8_t>& out) : out_(out) {}
  void put(std::uint32_t field, unsigned width) {
    acc_ |= static_cast<std::uint64_t>(field) << bits_;
    bits_ += width;
    while (bits_ >= 8) {
      out_.push_back(static_cast<std::uint8_t>(acc_));
      acc_ >>= 8;
      bits_ -= 8;
    }
  }
  void finish() {
    if (bits_ > 0) out_.push_back(static_cast<std::uint8_t>(acc_));
    acc_ = 0;
    bits_ = 0;
  }

 private:
  std::vector<std::uint8_t>& out_;
  std::uint64_t acc_ = 0;
  unsigned bits_ = 0;
};

// Reads fields from a byte span whose length the caller has checked covers them.
class BitReader {
 public:
  BitReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint32_t get(unsigned width) {
    while (bits_ < width) {
      const std::uint64_t byte = pos_ < size_ ? data_[pos_] : 0;  // never past the end
      ++pos_;
      acc_ |= byte << bits_;
      bits_ += 8;
    }
    const auto field = static_cast<std::uint32_t>(acc_ & ((std::uint64_t{1} << width) - 1));
    acc_ >>= width;
    bits_ -= width;
    return field;
  }
  // The bits left in the current byte (the padding after the last field).
  std::uint64_t rest() const { return acc_; }
  // Bits consumed so far (fields returned by get()).
  std::size_t consumed() const { return pos_ * 8 - bits_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::uint64_t acc_ = 0;
  unsigned bits_ = 0;
};

inline void putVarint(std::uint32_t x, std::vector<std::uint8_t>& out) {
  while (x >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(x | 0x80));
    x >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(x));
}

// Reads the LEB128 varint (at most 32 bits) at data[pos], advancing pos. Returns null,
// or what was wrong with it.
inline const char* getVarint(const std::uint8_t* data, std::size_t size, std::size_t& pos, std::uint64_t& x) {
  x = 0;
  for (unsigned shift = 0;; shift += 7) {
    if (pos >= size) return "is truncated";
    const std::uint8_t byte = data[pos++];
    if (shift == 28 && byte > 0x0f) return "exceeds 32 bits";
    x |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return nullptr;
  }
}

// The first `count` bits of `words` (bit i of word i / 64) as bytes, LSB first.
inline void putSignBytes(const std::vector<std::uint64_t>& words, std::uint32_t count, std::vector<std::uint8_t>& out) {
  out.resize((static_cast<std::size_t>(count) + 7) / 8);
  for (std::size_t b = 0; b < out.size(); ++b) {
    out[b] = static_cast<std::uint8_t>(words[b / 8] >> (8 * (b % 8)));
  }
}

}  // namespace starling::compression::detail
