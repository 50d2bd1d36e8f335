#include "starling/client/protocol_client.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "starling/wire/messages.hpp"

namespace starling::client {
namespace fb = wire::fb;

namespace {

// An Error frame from the coordinator, as a Status.
Status coordinatorError(const wire::Message& msg) {
  auto err = wire::parseError(msg);
  if (!err) return err.status();
  return Status(
      err->code == fb::ErrorCode::Unsupported ? StatusCode::kUnsupported : StatusCode::kClosed,
      fmt::format("the coordinator closed the session: {} ({})", err->message, fb::EnumNameErrorCode(err->code)));
}

}  // namespace

asio::awaitable<Result<Task>> joinAndLeave(asio::any_io_executor executor, std::shared_ptr<const net::TlsContext> tls,
                                           ClientOptions options, std::shared_ptr<spdlog::logger> log) {
  auto conn = co_await net::connect(executor, options.coordinator, std::move(tls), options.limits);
  if (!conn) co_return conn.status().withContext(fmt::format("connecting to {}", options.coordinator.toString()));
  log->info("connected to {} over TLS ({}{}), coordinator certificate CN '{}'", options.coordinator.toString(),
            conn->peer().cipherSuite, conn->peer().resumed ? ", resumed session" : "", conn->peer().commonName);

  const wire::Frame helloFrame = wire::encode(wire::clientHello(options.id, options.numExamples));
  Status st = co_await conn->send(helloFrame.bytes());
  if (!st) co_return st.withContext("sending Hello");

  auto reply = co_await conn->receive();
  if (!reply) co_return reply.status().withContext("waiting for Welcome");
  if (reply->type() == fb::Body::Error) co_return coordinatorError(*reply);
  auto welcome = wire::parseWelcome(*reply);
  if (!welcome) co_return welcome.status();
  Task task{welcome->clientId, welcome->task, welcome->modelSpec, welcome->round};
  log->info("welcomed as '{}': task '{}', model '{}', round {}", task.clientId, task.task, task.modelSpec, task.round);

  const wire::Frame byeFrame = wire::encode(wire::ByeMsg{"done", false, {}});
  st = co_await conn->send(byeFrame.bytes());
  if (!st) co_return st.withContext("sending Bye");
  co_await conn->close();
  co_return task;
}

}  // namespace starling::client
