#pragma once
// The client's side of the Starling protocol: connect over mutual TLS, introduce
// itself with Hello, receive the task in Welcome, and leave with Bye.
//
// Threading: a coroutine on the caller's executor; no shared state.

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <memory>
#include <string>

#include "starling/net/connection.hpp"

namespace spdlog {
class logger;
}

namespace starling::client {

struct ClientOptions {
  net::Endpoint coordinator;
  std::string id;            // informative; the coordinator reads our certificate's CN
  uint64_t numExamples = 0;  // size of the local data set, reported in Hello
  net::ConnectionLimits limits;
};

// What the coordinator told us in Welcome.
struct Task {
  std::string clientId;  // the identity the coordinator read from our certificate
  std::string task;
  std::string modelSpec;
  uint64_t round = 0;
};

// Joins, reads the task and says goodbye. Any refusal (TLS, protocol, Error frame)
// comes back as a Status whose message names the reason.
asio::awaitable<Result<Task>> joinAndLeave(asio::any_io_executor executor, std::shared_ptr<const net::TlsContext> tls,
                                           ClientOptions options, std::shared_ptr<spdlog::logger> log);

}  // namespace starling::client
