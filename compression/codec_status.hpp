#pragma once
// Private: the Status helpers of the payload codec (payload.cpp, index_codes.cpp,
// value_codes.cpp).

#include <cstdint>
#include <string>

#include "starling/util/status.hpp"

namespace starling::compression::detail {

inline Status malformed(const std::string& what) {
  return {StatusCode::kMalformed, what};
}
inline Status invalid(const std::string& what) {
  return {StatusCode::kInvalidArgument, what};
}
inline std::string str(std::uint64_t x) {
  return std::to_string(x);
}

}  // namespace starling::compression::detail
