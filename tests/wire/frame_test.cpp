// Frame headers and message verification, without sockets.

#include "starling/wire/frame.hpp"

#include <catch2/catch.hpp>

#include "starling/wire/messages.hpp"

using namespace starling;
namespace fb = starling::wire::fb;

namespace {

std::vector<uint8_t> bodyOf(const std::vector<uint8_t>& frame) {
  return {frame.begin() + wire::kFrameHeaderBytes, frame.end()};
}

std::vector<uint8_t> helloFrame() {
  return wire::encode(wire::HelloMsg{"client-1", {}, 123, "", 0, 0, {}, 0}).toVector();
}

}  // namespace

TEST_CASE("a frame header round-trips and is checked before the body is read", "[wire]") {
  auto h = wire::encodeFrameHeader(1000);
  SECTION("accepted within the limit") {
    auto r = wire::decodeFrameHeader(h, 1000);
    REQUIRE(r.isOk());
    CHECK(r->length == 1000);
    CHECK(r->version == wire::kProtocolVersion);
  }
  SECTION("over the limit") {
    auto r = wire::decodeFrameHeader(h, 999);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kOutOfRange);
    CHECK(r.status().message() == "frame of 1000 bytes exceeds the limit of 999 bytes");
  }
  SECTION("another protocol version") {
    auto r = wire::decodeFrameHeader(wire::encodeFrameHeader(10, 7), 1000);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kUnsupported);
  }
  SECTION("unknown flags") {
    h[6] = 1;
    CHECK(wire::decodeFrameHeader(h, 1000).status().code() == StatusCode::kMalformed);
  }
  SECTION("an empty body") {
    CHECK(wire::decodeFrameHeader(wire::encodeFrameHeader(0), 1000).status().code() == StatusCode::kMalformed);
  }
}

TEST_CASE("a verified message exposes its typed body", "[wire]") {
  auto msg = wire::Message::parse(bodyOf(helloFrame()));
  REQUIRE(msg.isOk());
  CHECK(msg->type() == fb::Body::Hello);
  CHECK(std::string(msg->typeName()) == "Hello");
  REQUIRE(msg->as<fb::Hello>() != nullptr);
  CHECK(msg->as<fb::Hello>()->num_examples() == 123);
  CHECK(msg->as<fb::Welcome>() == nullptr);
}

TEST_CASE("messages that fail verification are rejected with a reason", "[wire]") {
  auto body = bodyOf(helloFrame());
  SECTION("wrong identifier") {
    body[4] = 'X';
    CHECK_THAT(wire::Message::parse(body).status().message(), Catch::Contains("identifier"));
  }
  SECTION("too short") {
    CHECK(wire::Message::parse({1, 2, 3}).status().code() == StatusCode::kMalformed);
  }
  SECTION("truncated") {
    body.resize(body.size() - 8);
    CHECK(wire::Message::parse(body).status().code() == StatusCode::kMalformed);
  }
  SECTION("an unknown message type") {
    flatbuffers::FlatBufferBuilder b;
    auto hb = fb::CreateHeartbeat(b, 1);
    fb::FinishEnvelopeBuffer(b, fb::CreateEnvelope(b, static_cast<fb::Body>(200), hb.Union()));
    std::vector<uint8_t> raw(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
    CHECK_THAT(wire::Message::parse(raw).status().message(), Catch::Contains("unknown message type 200"));
  }
  SECTION("no body") {
    flatbuffers::FlatBufferBuilder b;
    fb::FinishEnvelopeBuffer(b, fb::CreateEnvelope(b));
    std::vector<uint8_t> raw(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
    CHECK_THAT(wire::Message::parse(raw).status().message(), Catch::Contains("no body"));
  }
}

TEST_CASE("random corruption of a message never gets past verification unsafely", "[wire][fuzz]") {
  auto body = bodyOf(helloFrame());
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    auto copy = body;
    int flips = 1 + static_cast<int>(next() % 4);
    for (int f = 0; f < flips; ++f)
      copy[next() % copy.size()] = static_cast<uint8_t>(next() >> 24);
    if (next() % 8 == 0) copy.resize(next() % copy.size());
    auto msg = wire::Message::parse(copy);
    if (msg) {
      ++accepted;
      // Whatever verified must be safe to read in full.
      if (const auto* h = msg->as<fb::Hello>()) {
        if (h->client_id() != nullptr) CHECK(h->client_id()->size() <= copy.size());
      }
    }
  }
  CHECK(accepted < 20000);
}
