#include "starling/util/status.hpp"

namespace starling {

const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kMalformed:
      return "malformed";
    case StatusCode::kOutOfRange:
      return "out of range";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kUnauthenticated:
      return "unauthenticated";
    case StatusCode::kTimeout:
      return "timeout";
    case StatusCode::kClosed:
      return "closed";
    case StatusCode::kIo:
      return "i/o error";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Status::toString() const {
  if (isOk()) return "ok";
  return std::string(statusCodeName(code_)) + ": " + message_;
}

Status Status::withContext(const std::string& context) const {
  if (isOk()) return *this;
  return {code_, context + ": " + message_};
}

}  // namespace starling
