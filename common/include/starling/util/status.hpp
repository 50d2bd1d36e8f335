#pragma once
// Status and Result: how Starling reports expected failures.
//
// Policy (docs/errors.md): anything a peer, a file or a user can get wrong is an
// expected failure and travels as a Status or Result<T> with a message a person can
// act on. Exceptions are reserved for programmer errors and start-up.

#include <cassert>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace starling {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller or a config passed something unusable
  kMalformed,        // bytes from a peer or a file do not parse
  kOutOfRange,       // a size or index beyond a limit
  kNotFound,         // a file or a record is missing
  kUnauthenticated,  // TLS or certificate failure
  kTimeout,          // a deadline passed
  kClosed,           // the peer closed the connection
  kIo,               // an operating-system or socket error
  kUnsupported,      // a version or feature this build does not speak
  kInternal,         // a library call failed in a way we did not expect
};
inline constexpr std::size_t kStatusCodeCount = static_cast<std::size_t>(StatusCode::kInternal) + 1;

// Short stable name of a code, e.g. "malformed".
const char* statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool isOk() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "malformed: frame length 9000000 exceeds the limit of 4194304 bytes"
  std::string toString() const;

  // Returns a copy whose message is prefixed with context, e.g. "reading ca.crt: ...".
  Status withContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  // An empty Result is an error ("no value"); it exists because Asio's co_spawn
  // default-constructs the result it hands to a completion handler.
  Result() : status_(StatusCode::kInternal, "no value was produced") {}
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.isOk() && "a Result built from a Status must carry an error");
  }

  bool isOk() const { return value_.has_value(); }
  explicit operator bool() const { return isOk(); }
  const Status& status() const { return status_; }

  T& value() & {
    assert(isOk());
    return *value_;
  }
  const T& value() const& {
    assert(isOk());
    return *value_;
  }
  T&& value() && {
    assert(isOk());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace starling

// Returns early from a function returning Status (or Result) when expr fails.
#define STARLING_RETURN_IF_ERROR(expr)                     \
  do {                                                     \
    ::starling::Status starling_status_ = (expr);          \
    if (!starling_status_.isOk()) return starling_status_; \
  } while (false)
