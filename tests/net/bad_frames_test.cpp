// Each malformed frame closes that connection only; the coordinator keeps serving.

#include <catch2/catch.hpp>

#include "starling/client/protocol_client.hpp"
#include "starling/wire/messages.hpp"

#include "support/federation_fixture.hpp"

using namespace starling;
using namespace starling::testing;
using namespace std::chrono_literals;
namespace fb = starling::wire::fb;

namespace {

struct Outcome {
  std::optional<fb::ErrorCode> errorCode;  // the Error frame the coordinator sent back, if any
  std::string errorMessage;
  bool closed = false;  // the coordinator then closed the connection
};

// Connects as client-0, writes `bytes` raw into the TLS stream (optionally closing
// right after), and reports what the coordinator answered.
Outcome sendRaw(const RunningServer& server, const Pki& pki, std::vector<uint8_t> bytes, bool closeAfter = false) {
  auto tls = pki.clientContext(pki.client("client-0"));
  return runCoroutine([&](asio::any_io_executor ex) -> asio::awaitable<Outcome> {
    Outcome out;
    net::ConnectionLimits limits;
    limits.idleTimeout = 3s;
    auto conn = co_await net::connect(ex, server.endpoint(), tls, limits);
    REQUIRE(conn.isOk());
    // (No co_await inside Catch2 macros: GCC evaluates it twice there.)
    Status written = co_await conn->stream().writeAll(bytes);
    REQUIRE(written.isOk());
    if (closeAfter) {
      co_await conn->close();
      out.closed = true;
      co_return out;
    }
    auto reply = co_await conn->receive();
    if (reply && reply->type() == fb::Body::Error) {
      auto err = wire::parseError(*reply);
      REQUIRE(err.isOk());
      out.errorCode = err->code;
      out.errorMessage = err->message;
      reply = co_await conn->receive();
    }
    out.closed = !reply && reply.status().code() == StatusCode::kClosed;
    co_return out;
  });
}

std::vector<uint8_t> helloFrame() {
  return wire::encode(wire::HelloMsg{"client-0", {}, 10, "", 0, 0, {}, 0}).toVector();
}

void requireStillServing(const RunningServer& server, const Pki& pki) {
  client::ClientOptions options;
  options.coordinator = server.endpoint();
  options.id = "client-5";
  auto tls = pki.clientContext(pki.client("client-5"));
  auto task =
      runCoroutine([&](asio::any_io_executor ex) { return client::joinAndLeave(ex, tls, options, quietLogger()); });
  REQUIRE(task.isOk());
}

}  // namespace

TEST_CASE("a malformed frame closes that connection only", "[net][frames]") {
  Pki pki;
  coordinator::ServerOptions options;
  options.limits.maxFrameBytes = 64 * 1024;
  options.limits.frameTimeout = 500ms;
  RunningServer server(pki, options);

  // A second client stays connected through all of it and is served afterwards.
  auto bystanderTls = pki.clientContext(pki.client("client-9"));
  asio::io_context bystanderIo;
  auto bystander = runOn(
      bystanderIo, [&](asio::any_io_executor ex) { return net::connect(ex, server.endpoint(), bystanderTls, {}); });
  REQUIRE(bystander.isOk());

  SECTION("over the size limit") {
    auto header = wire::encodeFrameHeader(64 * 1024 + 1);
    auto out = sendRaw(server, pki, {header.begin(), header.end()});
    REQUIRE(out.errorCode == fb::ErrorCode::TooLarge);
    CHECK_THAT(out.errorMessage, Catch::Contains("exceeds the limit of 65536 bytes"));
    CHECK(out.closed);
    CHECK(server.waitFor([&] { return server.log().contains("exceeds the limit"); }));
  }
  SECTION("failing verification") {
    std::vector<uint8_t> garbage(200);
    for (std::size_t i = 0; i < garbage.size(); ++i)
      garbage[i] = static_cast<uint8_t>(i * 37 + 11);
    garbage[4] = 'S', garbage[5] = 'T', garbage[6] = 'R', garbage[7] = 'L';  // right identifier, bad offsets
    auto header = wire::encodeFrameHeader(static_cast<uint32_t>(garbage.size()));
    std::vector<uint8_t> frame(header.begin(), header.end());
    frame.insert(frame.end(), garbage.begin(), garbage.end());
    auto out = sendRaw(server, pki, frame);
    REQUIRE(out.errorCode == fb::ErrorCode::Malformed);
    CHECK_THAT(out.errorMessage, Catch::Contains("verification"));
    CHECK(out.closed);
  }
  SECTION("truncated: the connection ends inside a frame") {
    auto frame = helloFrame();
    frame.resize(frame.size() / 2);
    auto out = sendRaw(server, pki, frame, /*closeAfter=*/true);
    CHECK(out.closed);
    CHECK(server.waitFor([&] { return server.log().contains("truncated frame"); }));
  }
  SECTION("truncated: the peer stalls inside a frame") {
    auto frame = helloFrame();
    frame.resize(frame.size() - 3);
    auto out = sendRaw(server, pki, frame);
    CHECK(out.closed);
    CHECK(server.waitFor([&] { return server.log().contains("not received within 500 ms"); }));
  }
  SECTION("another protocol version") {
    auto frame = helloFrame();
    auto header = wire::encodeFrameHeader(static_cast<uint32_t>(frame.size() - wire::kFrameHeaderBytes), 2);
    std::copy(header.begin(), header.end(), frame.begin());
    auto out = sendRaw(server, pki, frame);
    REQUIRE(out.errorCode == fb::ErrorCode::UnsupportedVersion);
    CHECK_THAT(out.errorMessage, Catch::Contains("protocol version 2"));
    CHECK(out.closed);
  }
  SECTION("a message a client may not send") {
    auto out = sendRaw(server, pki, wire::encode(wire::RoundResultMsg{3, true, ""}).toVector());
    REQUIRE(out.errorCode == fb::ErrorCode::Unexpected);
    CHECK(out.closed);
  }

  CHECK(server.waitFor([&] { return server.counters().dropped == 1; }));
  requireStillServing(server, pki);
  // The bystander's connection survived: it still gets answers.
  bool answered = runOn(bystanderIo, [&](asio::any_io_executor) -> asio::awaitable<bool> {
    const wire::Frame beatFrame = wire::encode(wire::HeartbeatMsg{42});
    Status sent = co_await bystander->send(beatFrame.bytes());
    if (!sent) co_return false;
    auto reply = co_await bystander->receive();
    if (!reply) co_return false;
    auto beat = wire::parseHeartbeat(*reply);
    co_return beat && beat->sentMs == 42;
  });
  CHECK(answered);
}

TEST_CASE("a frame larger than the first read arrives whole, in pieces", "[net][frames]") {
  // The coordinator's buffer grows as the body arrives (64 KiB, then doubling):
  // a 300,000-byte Bye reason crosses three of those steps and must arrive intact.
  Pki pki;
  coordinator::ServerOptions options;
  options.limits.maxFrameBytes = 1 << 20;
  RunningServer server(pki, options);
  std::string reason(300'000, 'x');
  reason.replace(reason.size() - 8, 8, "-the-end");
  auto frame = wire::encode(wire::ByeMsg{reason, false}).toVector();
  REQUIRE(frame.size() > 4 * 64 * 1024);
  auto out = sendRaw(server, pki, frame);
  CHECK_FALSE(out.errorCode.has_value());
  CHECK(out.closed);
  CHECK(server.waitFor([&] { return server.log().contains("xxxxxxxx-the-end"); }));
  CHECK(server.counters().dropped == 0);
}
