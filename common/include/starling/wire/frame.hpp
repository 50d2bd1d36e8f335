#pragma once
// Framing of Starling messages on a byte stream.
//
//   offset 0  u32 little-endian  length of the body in bytes
//   offset 4  u16 little-endian  protocol version (kProtocolVersion)
//   offset 6  u16 little-endian  flags, must be 0 in version 1
//   offset 8  body: one Flatbuffers Envelope with file identifier "STRL"
//
// A receiver reads the 8-byte header, rejects it (decodeFrameHeader) before
// allocating anything when the length is over its limit or the version is not its
// own, then reads the body and verifies it (Message::parse) before any field is read.

#include <flatbuffers/flatbuffers.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "starling/util/status.hpp"

#include "starling_generated.h"

namespace starling::wire {

// (The generated schema lives in starling::wire::fb.)

inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kFrameHeaderBytes = 8;
// Enough for a dense fp32 model of 4M parameters; configurable per connection.
inline constexpr uint32_t kDefaultMaxFrameBytes = 16u << 20;

struct FrameHeader {
  uint32_t length = 0;
  uint16_t version = 0;
  uint16_t flags = 0;
};

std::array<uint8_t, kFrameHeaderBytes> encodeFrameHeader(uint32_t length, uint16_t version = kProtocolVersion);

// Checks a received header: non-empty body, length <= maxFrameBytes, our version,
// no unknown flags. The error says which and by how much.
Result<FrameHeader> decodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes> bytes, uint32_t maxFrameBytes);

// One verified message. Owns its bytes; the envelope points into them.
class Message {
 public:
  // Runs the Flatbuffers Verifier over body (identifier, offsets, nested tables,
  // union type); an error names what failed. Takes ownership of body.
  static Result<Message> parse(std::vector<uint8_t> body);

  fb::Body type() const { return envelope_->body_type(); }
  const char* typeName() const { return fb::EnumNameBody(type()); }
  const fb::Envelope& envelope() const { return *envelope_; }
  std::size_t sizeBytes() const { return body_.size(); }

  // The body as T, or nullptr when the message is of another type.
  template <typename T>
  const T* as() const {
    return envelope_->body_as<T>();
  }

 private:
  Message(std::vector<uint8_t> body, const fb::Envelope* env) : body_(std::move(body)), envelope_(env) {}
  std::vector<uint8_t> body_;
  const fb::Envelope* envelope_ = nullptr;
};

// A complete frame, header and body, ready to write. The Flatbuffers builder that made
// it wrote the header in front of the body, so the frame is the builder's own buffer:
// no copy is made to frame a message (messages.hpp makes frames). Move-only; immutable
// once made, so it may be shared between threads (e.g. one broadcast to many sessions).
// Hold it in a named variable across a co_await that writes it: GCC 12 frees a temporary
// with a destructor inside a co_await expression twice.
class Frame {
 public:
  Frame() = default;
  explicit Frame(flatbuffers::DetachedBuffer buffer) : buffer_(std::move(buffer)) {}

  std::span<const uint8_t> bytes() const { return {buffer_.data(), buffer_.size()}; }
  std::size_t size() const { return buffer_.size(); }
  // A copy of the bytes, for a test that alters them.
  std::vector<uint8_t> toVector() const { return {buffer_.data(), buffer_.data() + buffer_.size()}; }

 private:
  flatbuffers::DetachedBuffer buffer_;
};

// Finishes `builder` as an Envelope around `body`, then writes the frame header in front
// of it in the same buffer (the builder grows downwards): the frame is the builder's
// buffer, released. The messages are built in messages.cpp: use wire::encode().
template <typename T>
Frame finishFrame(flatbuffers::FlatBufferBuilder& builder, flatbuffers::Offset<T> body) {
  auto env = fb::CreateEnvelope(builder, fb::BodyTraits<T>::enum_value, body.Union());
  fb::FinishEnvelopeBuffer(builder, env);
  const auto header = encodeFrameHeader(static_cast<uint32_t>(builder.GetSize()));
  builder.PushBytes(header.data(), header.size());
  return Frame(builder.Release());
}

}  // namespace starling::wire
