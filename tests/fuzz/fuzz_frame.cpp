// Fuzz target: what a coordinator or client does with bytes from the network.
// The input is a frame: the 8-byte header (decodeFrameHeader), then the body
// (Message::parse, the Flatbuffers Verifier). A message that passes is read the way
// the receivers read it: every field of every message type, and the compressed
// tensors of Update, RoundAssign and Welcome through fromWire and decode.

#include <span>
#include <vector>

#include "starling/compression/compressed.hpp"
#include "starling/compression/payload.hpp"
#include "starling/compression/wire_codec.hpp"
#include "starling/wire/frame.hpp"

#include "fuzz_support.hpp"

namespace {

using namespace starling;
namespace fb = wire::fb;

// Largest tensor the target decodes: the decoder allocates what the expected count
// needs, and the coordinator's expected count is its model size (a few million).
constexpr uint32_t kMaxCount = 1u << 20;
constexpr uint32_t kMaxFrame = 1u << 20;

volatile size_t sink;

void touch(const flatbuffers::String* s) {
  if (s != nullptr) sink = sink + s->size() + (s->size() > 0 ? uint8_t(s->c_str()[s->size() - 1]) : 0);
}

void tensor(const fb::CompressedTensor* t) {
  if (t == nullptr) return;
  auto payload = compression::fromWire(t);
  if (!payload) return;
  const uint32_t count = payload->count;
  if (count > kMaxCount) return;
  compression::Compressed c;
  if (!compression::decode(*payload, count, c)) return;
  // What decode accepts, expand must turn into count finite-or-not floats without
  // reading out of bounds, and encode must accept back.
  std::vector<float> dense(count);
  STARLING_FUZZ_CHECK(compression::expand(c, dense).isOk());
  compression::Payload again;
  STARLING_FUZZ_CHECK(compression::encode(c, again).isOk());
  compression::Compressed back;
  STARLING_FUZZ_CHECK(compression::decode(again, count, back).isOk() && back == c);
}

void read(const wire::Message& m) {
  switch (m.type()) {
    case fb::Body::Hello: {
      const auto* h = m.as<fb::Hello>();
      touch(h->client_id());
      touch(h->platform());
      if (h->capabilities() != nullptr)
        for (const auto* s : *h->capabilities())
          touch(s);
      sink = sink + h->num_examples() + h->last_round() + h->model_checksum();
      break;
    }
    case fb::Body::Welcome: {
      const auto* w = m.as<fb::Welcome>();
      touch(w->client_id());
      touch(w->task());
      touch(w->model_spec());
      if (w->hyper() != nullptr) sink = sink + w->hyper()->batch_size() + w->hyper()->tau();
      if (w->compression() != nullptr) {
        touch(w->compression()->uplink());
        touch(w->compression()->downlink());
      }
      tensor(w->model());
      break;
    }
    case fb::Body::RoundAssign: {
      const auto* a = m.as<fb::RoundAssign>();
      if (a->broadcast() != nullptr)
        for (const auto* t : *a->broadcast())
          tensor(t);
      tensor(a->model());
      tensor(a->values());
      sink = sink + a->round() + a->tau();
      break;
    }
    case fb::Body::Update: {
      const auto* u = m.as<fb::Update>();
      sink = sink + u->round() + u->examples() + u->steps();
      tensor(u->delta());
      break;
    }
    case fb::Body::RoundResult:
      touch(m.as<fb::RoundResult>()->reason());
      break;
    case fb::Body::Heartbeat:
      sink = sink + m.as<fb::Heartbeat>()->sent_ms();
      break;
    case fb::Body::Bye:
      touch(m.as<fb::Bye>()->reason());
      break;
    case fb::Body::Error:
      touch(m.as<fb::Error>()->message());
      sink = sink + static_cast<size_t>(m.as<fb::Error>()->code());
      break;
    default: {
      const bool knownType = false;  // Message::parse let an unknown type through
      STARLING_FUZZ_CHECK(knownType);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < wire::kFrameHeaderBytes) return 0;
  auto header = wire::decodeFrameHeader(std::span<const uint8_t, wire::kFrameHeaderBytes>(data, 8), kMaxFrame);
  if (!header) return 0;
  STARLING_FUZZ_CHECK(header->length > 0 && header->length <= kMaxFrame);
  // The receiver reads exactly `length` bytes; a short input is a truncated stream.
  const size_t have = size - wire::kFrameHeaderBytes;
  if (have < header->length) return 0;
  std::vector<uint8_t> body(data + wire::kFrameHeaderBytes, data + wire::kFrameHeaderBytes + header->length);
  auto message = wire::Message::parse(std::move(body));
  if (!message) return 0;
  STARLING_FUZZ_CHECK(message->type() != fb::Body::NONE);
  read(*message);
  return 0;
}
