#include "text_parse.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace starling::data::detail {

namespace {

// from_chars takes no '+': drops one, and refuses "+-1" and "++1".
bool dropPlus(std::string_view& s) {
  if (s.empty() || s.front() != '+') return true;
  s.remove_prefix(1);
  return s.empty() || (s.front() != '+' && s.front() != '-');
}

}  // namespace

std::optional<float> parseFloat(std::string_view s) {
  if (!dropPlus(s)) return std::nullopt;
  float value = 0.0f;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<int64_t> parseIntegral(std::string_view s) {
  if (!dropPlus(s)) return std::nullopt;
  double value = 0.0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(value)) return std::nullopt;
  if (value != std::floor(value) || std::fabs(value) > 2147483647.0) return std::nullopt;
  return static_cast<int64_t>(value);
}

std::optional<std::size_t> parseIndex(std::string_view s) {
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  std::size_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::optional<uint64_t> parseIndex64(std::string_view s) {
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

bool isNumeric(std::string_view s) {
  if (!dropPlus(s)) return false;
  double value = 0.0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return (ec == std::errc() || ec == std::errc::result_out_of_range) && end == s.data() + s.size() && !s.empty();
}

std::string quoted(std::string_view s) {
  constexpr std::size_t kMax = 40;
  // Built by appends: GCC 12 misreports "'" + std::string(...) under -Werror=restrict.
  std::string out;
  out.reserve(kMax + 5);
  out.push_back('\'');
  out.append(s.substr(0, kMax));
  if (s.size() > kMax) out.append("...");
  out.push_back('\'');
  return out;
}

}  // namespace starling::data::detail
