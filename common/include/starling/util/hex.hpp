#pragma once
// toHex: bytes as lowercase hexadecimal, two digits a byte (certificate fingerprints,
// ticket key names and keys in their file).

#include <cstddef>
#include <string>

namespace starling {

inline std::string toHex(const unsigned char* p, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

}  // namespace starling
