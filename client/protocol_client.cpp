#include "starling/client/protocol_client.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "starling/wire/capabilities.hpp"

namespace starling::client {
namespace fb = wire::fb;

namespace {

std::string str(const flatbuffers::String* s) {
  return s != nullptr ? s->str() : std::string();
}

// An Error frame from the coordinator, as a Status.
Status coordinatorError(const wire::Message& msg) {
  const auto* err = msg.as<fb::Error>();
  return Status(err->code() == fb::ErrorCode::Unsupported ? StatusCode::kUnsupported : StatusCode::kClosed,
                fmt::format("the coordinator closed the session: {} ({})", str(err->message()),
                            fb::EnumNameErrorCode(err->code())));
}

}  // namespace

asio::awaitable<Result<Task>> joinAndLeave(asio::any_io_executor executor, std::shared_ptr<const net::TlsContext> tls,
                                           ClientOptions options, std::shared_ptr<spdlog::logger> log) {
  auto conn = co_await net::connect(executor, options.coordinator, std::move(tls), options.limits);
  if (!conn) co_return conn.status().withContext(fmt::format("connecting to {}", options.coordinator.toString()));
  log->info("connected to {} over TLS, coordinator certificate CN '{}'", options.coordinator.toString(),
            conn->peer().commonName);

  flatbuffers::FlatBufferBuilder b(256);
  std::vector<flatbuffers::Offset<flatbuffers::String>> caps;
  for (std::string_view c : wire::kClientCapabilities)
    caps.push_back(b.CreateString(c.data(), c.size()));
  auto hello = fb::CreateHelloDirect(b, options.id.c_str(), &caps, options.numExamples, "linux");
  Status st = co_await conn->send(wire::finishFrame(b, hello));
  if (!st) co_return st.withContext("sending Hello");

  auto reply = co_await conn->receive();
  if (!reply) co_return reply.status().withContext("waiting for Welcome");
  if (reply->type() == fb::Body::Error) co_return coordinatorError(*reply);
  const auto* welcome = reply->as<fb::Welcome>();
  if (welcome == nullptr)
    co_return Status(StatusCode::kMalformed, fmt::format("expected Welcome, got {}", reply->typeName()));
  Task task{str(welcome->client_id()), str(welcome->task()), str(welcome->model_spec()), welcome->round()};
  log->info("welcomed as '{}': task '{}', model '{}', round {}", task.clientId, task.task, task.modelSpec, task.round);

  b.Clear();
  st = co_await conn->send(wire::finishFrame(b, fb::CreateByeDirect(b, "done")));
  if (!st) co_return st.withContext("sending Bye");
  co_await conn->close();
  co_return task;
}

}  // namespace starling::client
