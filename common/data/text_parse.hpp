#pragma once
// Helpers shared by the text loaders (private to data/): lines, fields, numbers.
// Stateless; any thread.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace starling::data::detail {

// Walks the lines of a text, numbering them from 1; strips a trailing '\r'.
class LineCursor {
 public:
  explicit LineCursor(std::string_view text) : text_(text) {}

  // False at the end of the text; a final line without '\n' still counts.
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    const std::size_t end = text_.find('\n', pos_);
    const std::size_t stop = end == std::string_view::npos ? text_.size() : end;
    line = text_.substr(pos_, stop - pos_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos_ = stop + 1;
    ++number_;
    return true;
  }

  // Number of the line next() returned last.
  std::size_t number() const { return number_; }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
  std::size_t number_ = 0;
};

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

// Whether the whole of s reads as a number, finite or not ("nan", "inf", "1e999").
bool isNumeric(std::string_view s);

// s shortened for an error message, in quotes.
std::string quoted(std::string_view s);

}  // namespace starling::data::detail
