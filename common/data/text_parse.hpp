#pragma once
// Helpers shared by the text loaders (private to data/): lines, fields, numbers.
// Stateless; any thread.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace starling::data::detail {

inline bool isBlank(char c) {
  return c == ' ' || c == '\t';
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && isBlank(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && isBlank(s.back()))
    s.remove_suffix(1);
  return s;
}

// The whole of s as a finite float ("1", "-2.5e3", "+4"); nullopt otherwise.
std::optional<float> parseFloat(std::string_view s);

// The whole of s as an integral value ("3", "+1", "-1", "3.0") within +-2^31; nullopt otherwise.
std::optional<int64_t> parseIntegral(std::string_view s);

// The whole of s as a decimal integer >= 0 without sign; nullopt otherwise or on overflow.
std::optional<std::size_t> parseIndex(std::string_view s);
// The same in 64 bits, whatever the width of size_t.
std::optional<uint64_t> parseIndex64(std::string_view s);

// Whether the whole of s reads as a number, finite or not ("nan", "inf", "1e999").
bool isNumeric(std::string_view s);

// s shortened for an error message, in quotes.
std::string quoted(std::string_view s);

}  // namespace starling::data::detail
