#include "starling/wire/frame.hpp"

#include <fmt/format.h>

namespace starling::wire {
namespace {

uint32_t loadLe32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint16_t loadLe16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}

// Verifier limits: Starling messages are shallow; a deep or table-heavy buffer is
// an attack, not a model.
constexpr flatbuffers::uoffset_t kMaxDepth = 16;
constexpr flatbuffers::uoffset_t kMaxTables = 1u << 16;

}  // namespace

std::array<uint8_t, kFrameHeaderBytes> encodeFrameHeader(uint32_t length, uint16_t version) {
  return {static_cast<uint8_t>(length),
          static_cast<uint8_t>(length >> 8),
          static_cast<uint8_t>(length >> 16),
          static_cast<uint8_t>(length >> 24),
          static_cast<uint8_t>(version),
          static_cast<uint8_t>(version >> 8),
          0,
          0};
}

Result<FrameHeader> decodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes> bytes, uint32_t maxFrameBytes) {
  FrameHeader h{loadLe32(bytes.data()), loadLe16(bytes.data() + 4), loadLe16(bytes.data() + 6)};
  if (h.version != kProtocolVersion)
    return Status(StatusCode::kUnsupported, fmt::format("frame of protocol version {}, this side speaks version {}",
                                                        h.version, kProtocolVersion));
  if (h.flags != 0) return Status(StatusCode::kMalformed, fmt::format("frame has unknown flags 0x{:04x}", h.flags));
  if (h.length == 0) return Status(StatusCode::kMalformed, "frame has an empty body");
  if (h.length > maxFrameBytes)
    return Status(StatusCode::kOutOfRange,
                  fmt::format("frame of {} bytes exceeds the limit of {} bytes", h.length, maxFrameBytes));
  return h;
}

Result<Message> Message::parse(std::vector<uint8_t> body) {
  if (body.size() < 8)
    return Status(StatusCode::kMalformed, fmt::format("message of {} bytes is too short", body.size()));
  if (!fb::EnvelopeBufferHasIdentifier(body.data()))
    return Status(StatusCode::kMalformed, "message does not carry the Starling identifier 'STRL'");
  flatbuffers::Verifier verifier(body.data(), body.size(), kMaxDepth, kMaxTables);
  if (!fb::VerifyEnvelopeBuffer(verifier))
    return Status(StatusCode::kMalformed, "message failed Flatbuffers verification (bad offsets or field sizes)");
  const fb::Envelope* env = fb::GetEnvelope(body.data());
  if (static_cast<unsigned>(env->body_type()) > static_cast<unsigned>(fb::Body::MAX))
    return Status(StatusCode::kMalformed,
                  fmt::format("unknown message type {}", static_cast<unsigned>(env->body_type())));
  if (env->body_type() == fb::Body::NONE || env->body() == nullptr)
    return Status(StatusCode::kMalformed, "message has no body");
  // The vector's heap buffer does not move when the vector is moved.
  return Message(std::move(body), env);
}

}  // namespace starling::wire
