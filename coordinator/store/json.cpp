// JSON text (json.hpp).
#include "starling/coordinator/json.hpp"

#include <fmt/format.h>

#include <cmath>

namespace starling::coordinator {

std::string jsonString(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string jsonNumber(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return "null";
  return fmt::format("{}", *v);
}

std::string jsonNumberOrInfinity(std::optional<double> v) {
  return v && std::isinf(*v) ? std::string("1e999") : jsonNumber(v);
}

JsonObject& JsonObject::add(std::string_view key, std::string_view rawValue) {
  if (!first_) text_ += ", ";
  first_ = false;
  text_ += jsonString(key);
  text_ += ": ";
  text_ += rawValue;
  return *this;
}

JsonObject& JsonObject::num(std::string_view key, int64_t value) {
  return add(key, fmt::format("{}", value));
}
JsonObject& JsonObject::unum(std::string_view key, uint64_t value) {
  return add(key, fmt::format("{}", value));
}

}  // namespace starling::coordinator
