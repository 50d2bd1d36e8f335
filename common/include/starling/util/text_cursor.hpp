#pragma once
// TextCursor: a position in a text parsed by hand (the NPY header's dict literal, the
// device profile's JSON): skips blanks, counting lines, and takes expected characters.
// Parsers derive from it and read text_ at pos_. Not synchronized.

#include <cstddef>
#include <string_view>

namespace starling {

class TextCursor {
 public:
  explicit TextCursor(std::string_view text) : text_(text) {}

  // Past spaces, tabs and line ends (each '\n' counted in line()).
  void skipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\r' || text_[pos_] == '\n')) {
      if (text_[pos_] == '\n') ++line_;
      ++pos_;
    }
  }
  // After skipSpace(): c is next, and is taken.
  bool take(char c) {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  std::size_t position() const { return pos_; }
  int line() const { return line_; }  // 1-based, of position()

 protected:
  std::string_view text_;
  std::size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace starling
