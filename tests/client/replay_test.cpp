// The client's replay of a RoundAssign's broadcasts (Participant::catchUp): relative
// indices are decoded against the tensor before them, the first against the indices
// the client kept from its last replay, and a relative first tensor without them is
// an error that forgets whatever was kept.
#include "starling/client/replay.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "starling/compression/compressed.hpp"
#include "starling/compression/payload.hpp"
#include "starling/wire/messages.hpp"

using namespace starling;
using namespace starling::compression;

namespace {

constexpr uint32_t kD = 2000;

// Three top-k broadcasts of 40 of kD coordinates, each keeping 32 of the one before's.
std::vector<Compressed> chain() {
  std::vector<Compressed> out;
  std::vector<uint32_t> indices;
  for (uint32_t i = 0; i < 40; ++i)
    indices.push_back(i * 50);
  for (int b = 0; b < 3; ++b) {
    if (b > 0) {
      std::vector<uint32_t> next(indices.begin() + 8, indices.end());  // drop 8
      for (uint32_t i = 0; i < 8; ++i)
        next.push_back(static_cast<uint32_t>(b * 7 + i * 211 + 1) % kD);  // add 8 others
      std::sort(next.begin(), next.end());
      next.erase(std::unique(next.begin(), next.end()), next.end());
      indices = next;
    }
    Compressed c;
    c.encoding = Encoding::kTopK;
    c.count = kD;
    c.indices = indices;
    for (std::size_t j = 0; j < indices.size(); ++j)
      c.values.push_back(0.01f * static_cast<float>(j + 1) * (b % 2 == 0 ? 1.0f : -1.0f));
    out.push_back(std::move(c));
  }
  return out;
}

Payload standalone(const Compressed& c) {
  Payload p;
  REQUIRE(encode(c, p).isOk());
  return p;
}

Payload relativeTo(const Compressed& c, const Compressed& previous) {
  Payload p;
  REQUIRE(encodeRelative(c, previous.indices, p).isOk());
  REQUIRE(p.indexFormat == IndexFormat::kRelative);
  return p;
}

// A received RoundAssign carrying `payloads` as its broadcasts: encoded, then parsed
// back, so the broadcasts are views into the verified message as a client gets them.
class Assign {
 public:
  explicit Assign(const std::vector<Payload>& payloads) {
    wire::RoundAssignMsg m{5, 4, 1, 0.1f, 1.0f, 1000, {}, 0, std::nullopt, std::nullopt};
    for (const Payload& p : payloads)
      m.broadcast.push_back(viewOf(p));
    const wire::Frame frame = wire::encode(m);
    auto body = frame.bytes().subspan(wire::kFrameHeaderBytes);
    auto msg = wire::Message::parse({body.begin(), body.end()});
    REQUIRE(msg.isOk());
    message_.emplace(std::move(*msg));
    auto parsed = wire::parseRoundAssign(*message_);
    REQUIRE(parsed.isOk());
    assign_ = std::move(*parsed);
  }
  client::Broadcasts broadcasts() const { return assign_.broadcast; }

 private:
  std::optional<wire::Message> message_;
  wire::RoundAssignMsg assign_;
};

std::vector<float> start() {
  std::vector<float> m(kD);
  for (uint32_t i = 0; i < kD; ++i)
    m[i] = 0.001f * static_cast<float>(i % 13);
  return m;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("a replay decodes relative broadcasts against the one before, the first against the kept indices",
          "[client][replay][relative]") {
  const auto c = chain();
  std::vector<float> want = start();
  for (const auto& q : c)
    REQUIRE(addScaled(q, -1.0f, want).isOk());
  std::vector<float> model = start();
  std::optional<std::vector<uint32_t>> kept;

  SECTION("one replay: the first standalone, the others relative to the one before") {
    Assign all({standalone(c[0]), relativeTo(c[1], c[0]), relativeTo(c[2], c[1])});
    REQUIRE(client::replayBroadcasts(all.broadcasts(), 23, kept, model).isOk());
    CHECK(sameBits(model, want));
    REQUIRE(kept.has_value());
    CHECK(*kept == c[2].indices);
  }
  SECTION("two replays: the second's first tensor is relative to the first's last") {
    Assign first({standalone(c[0])});
    REQUIRE(client::replayBroadcasts(first.broadcasts(), 23, kept, model).isOk());
    REQUIRE(kept.has_value());
    CHECK(*kept == c[0].indices);
    Assign second({relativeTo(c[1], c[0]), relativeTo(c[2], c[1])});
    const Status st = client::replayBroadcasts(second.broadcasts(), 23, kept, model);
    INFO(st.toString());
    REQUIRE(st.isOk());
    CHECK(sameBits(model, want));
    CHECK(*kept == c[2].indices);
  }
  SECTION("a relative first tensor without kept indices is an error, not a guess") {
    Assign second({relativeTo(c[1], c[0]), relativeTo(c[2], c[1])});
    const Status st = client::replayBroadcasts(second.broadcasts(), 23, kept, model);
    REQUIRE_FALSE(st.isOk());
    CHECK(st.code() == StatusCode::kMalformed);
    CHECK_THAT(st.message(), Catch::Contains("relative indices without a reference"));
    CHECK_THAT(st.message(), Catch::Contains("broadcast 1 of 2"));
    CHECK_FALSE(kept.has_value());
  }
  SECTION("any failure forgets the kept indices") {
    kept = c[0].indices;
    Payload broken = relativeTo(c[2], c[1]);
    broken.indices.push_back(0);  // a trailing byte
    Assign second({relativeTo(c[1], c[0]), broken});
    const Status st = client::replayBroadcasts(second.broadcasts(), 23, kept, model);
    REQUIRE_FALSE(st.isOk());
    CHECK_THAT(st.message(), Catch::Contains("broadcast 2 of 2"));
    CHECK_FALSE(kept.has_value());
  }
  SECTION("a dense last broadcast leaves nothing to keep") {
    Compressed dense;
    dense.encoding = Encoding::kDense32;
    dense.count = kD;
    dense.values.assign(kD, 0.5f);
    kept = c[0].indices;
    Assign replay({relativeTo(c[1], c[0]), standalone(dense)});
    REQUIRE(client::replayBroadcasts(replay.broadcasts(), 23, kept, model).isOk());
    CHECK_FALSE(kept.has_value());
  }
}
