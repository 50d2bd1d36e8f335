#pragma once
// JSON text for the report (`report --format json`) and the dashboard's /api/state:
// string and number literals and an object writer. UTF-8 passes through.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace starling::coordinator {

// A JSON string literal. Control characters are escaped; other bytes pass through,
// so UTF-8 text stays UTF-8.
std::string jsonString(std::string_view s);

// JSON has no NaN or infinity: they become null, as do absent values.
std::string jsonNumber(std::optional<double> v);

// As jsonNumber, but an infinity (epsilon of rounds without noise) is written 1e999: a
// JSON number that Python and JavaScript read as infinity.
std::string jsonNumberOrInfinity(std::optional<double> v);

// Writes "key": value pairs into one object.
class JsonObject {
 public:
  JsonObject& add(std::string_view key, std::string_view rawValue);
  JsonObject& str(std::string_view key, std::string_view value) { return add(key, jsonString(value)); }
  JsonObject& num(std::string_view key, int64_t value);
  JsonObject& unum(std::string_view key, uint64_t value);
  JsonObject& real(std::string_view key, std::optional<double> value) { return add(key, jsonNumber(value)); }
  JsonObject& boolean(std::string_view key, bool value) { return add(key, value ? "true" : "false"); }
  std::string done() const { return "{" + text_ + "}"; }

 private:
  std::string text_;
  bool first_ = true;
};

}  // namespace starling::coordinator
