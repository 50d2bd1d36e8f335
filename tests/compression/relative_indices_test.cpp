// Top-k indices coded against a reference list (IndexFormat::kRelative): the kept
// elements of the reference, then the others; decode(encodeRelative(c, R), R) == c bit
// for bit, and malformed bytes are errors that name the problem.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "starling/compression/payload.hpp"

using namespace starling;
using namespace starling::compression;

namespace {

std::vector<std::uint32_t> sortedSample(std::vector<std::uint32_t> pool, std::size_t n, std::mt19937_64& rng) {
  std::shuffle(pool.begin(), pool.end(), rng);
  pool.resize(std::min(n, pool.size()));
  std::sort(pool.begin(), pool.end());
  return pool;
}

// k indices of d of which round(overlap x k) are drawn from reference, the rest from
// the other coordinates.
std::vector<std::uint32_t> target(const std::vector<std::uint32_t>& reference, std::uint32_t d, std::size_t k,
                                  double overlap, std::mt19937_64& rng) {
  const auto shared = static_cast<std::size_t>(std::lround(overlap * static_cast<double>(k)));
  std::vector<std::uint32_t> out = sortedSample(reference, shared, rng);
  std::vector<std::uint32_t> others;
  for (std::uint32_t i = 0; i < d; ++i)
    if (!std::binary_search(reference.begin(), reference.end(), i)) others.push_back(i);
  const auto rest = sortedSample(std::move(others), k - out.size(), rng);
  out.insert(out.end(), rest.begin(), rest.end());
  std::sort(out.begin(), out.end());
  return out;
}

Compressed topK(std::uint32_t d, std::vector<std::uint32_t> indices, std::mt19937_64& rng) {
  Compressed c;
  c.encoding = Encoding::kTopK;
  c.count = d;
  c.indices = std::move(indices);
  std::normal_distribution<float> dist;
  for (std::size_t j = 0; j < c.indices.size(); ++j)
    c.values.push_back(dist(rng));
  return c;
}

// Indices {5, 9, 30, 50} of 100 against the reference {2, 5, 9, 20}: positions 1 and 2
// kept; 30 and 50 new.
const std::vector<std::uint32_t> kReference = {2, 5, 9, 20};

Payload handMade(std::vector<std::uint8_t> indices) {
  Payload p;
  p.encoding = Encoding::kTopK;
  p.count = 100;
  p.selected = 4;
  p.indexFormat = IndexFormat::kRelative;
  p.indices = std::move(indices);
  p.valueFormat = ValueFormat::kFp32;
  const float values[4] = {0.5f, -1.0f, 2.0f, 0.25f};
  p.values.resize(sizeof values);
  std::memcpy(p.values.data(), values, sizeof values);
  return p;
}

// The new indices' section by hand: r = 4; gaps 30 = 1 x 16 + 14 and 19 = 1 x 16 + 3,
// LSB first: 1 0 0111 | 1 0 1100 (12 bits, four padding bits).
const std::vector<std::uint8_t> kFresh = {0x04, 0x79, 0x03};

std::vector<std::uint8_t> concat(std::vector<std::uint8_t> a, const std::vector<std::uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("relative indices decode back to the tensor for any overlap with the reference", "[payload][relative]") {
  std::mt19937_64 rng(7);
  for (std::uint32_t d : {1000u, 199'210u}) {
    for (std::size_t refSize : {std::size_t{0}, std::size_t{1}, std::size_t{797}}) {
      const auto all = [&] {
        std::vector<std::uint32_t> v(d);
        for (std::uint32_t i = 0; i < d; ++i)
          v[i] = i;
        return v;
      }();
      const auto reference = sortedSample(all, refSize, rng);
      for (double overlap : {0.0, 0.8, 1.0}) {
        for (std::size_t k : {std::size_t{1}, std::size_t{100}, std::size_t{797}}) {
          if (static_cast<double>(k) * overlap > static_cast<double>(reference.size()) + 0.5) continue;
          DYNAMIC_SECTION("d=" << d << " |R|=" << refSize << " overlap=" << overlap << " k=" << k) {
            const Compressed c = topK(d, target(reference, d, k, overlap, rng), rng);
            Payload p;
            REQUIRE(encodeRelative(c, reference, p).isOk());
            CHECK(p.indexFormat == IndexFormat::kRelative);
            Compressed back;
            const Status s = decode(p, d, reference, back);
            INFO(s.toString());
            REQUIRE(s.isOk());
            CHECK(back == c);
          }
        }
      }
    }
  }
}

TEST_CASE("relative indices keep every value format and its order", "[payload][relative]") {
  std::mt19937_64 rng(11);
  const std::uint32_t d = 5000;
  std::vector<std::uint32_t> reference;
  for (std::uint32_t i = 3; i < d; i += 50)
    reference.push_back(i);
  Compressed plain = topK(d, target(reference, d, 100, 0.8, rng), rng);
  Compressed half = plain;
  half.valueFormat = ValueFormat::kFp16;
  for (float& v : half.values)
    v = 0.5f * std::round(2 * v);  // exact in fp16
  Compressed ternary = plain;
  ternary.valueFormat = ValueFormat::kSignBits;
  ternary.block = 32;
  ternary.scales = {0.5f, 0.25f, 1.0f, 2.0f};
  for (std::size_t j = 0; j < ternary.values.size(); ++j)
    ternary.values[j] = (j % 3 == 0 ? -1.0f : 1.0f) * ternary.scales[j / 32];
  Compressed xors = plain;
  xors.valueFormat = ValueFormat::kXor32;
  xors.values.clear();
  for (std::size_t j = 0; j < xors.indices.size(); ++j)
    xors.xorWords.push_back(static_cast<std::uint32_t>(rng()) >> (j % 32));
  for (const Compressed* c : {&plain, &half, &ternary, &xors}) {
    DYNAMIC_SECTION(valueFormatName(c->valueFormat)) {
      Payload standalone, relative;
      REQUIRE(encode(*c, standalone).isOk());
      REQUIRE(encodeRelative(*c, reference, relative).isOk());
      CHECK(relative.values == standalone.values);
      CHECK(relative.scales == standalone.scales);
      Compressed back;
      REQUIRE(decode(relative, d, reference, back).isOk());
      CHECK(back == *c);
    }
  }
}

TEST_CASE("relative indices cost less than standalone ones when most are in the reference", "[payload][relative]") {
  // GlueFL's shared mask at 0.8: k = 797 of 199,210, 638 of them the previous broadcast's.
  std::mt19937_64 rng(3);
  const std::uint32_t d = 199'210;
  std::vector<std::uint32_t> all(d);
  for (std::uint32_t i = 0; i < d; ++i)
    all[i] = i;
  const auto reference = sortedSample(all, 797, rng);
  const Compressed c = topK(d, target(reference, d, 797, 0.8, rng), rng);
  Payload standalone, relative;
  REQUIRE(encode(c, standalone).isOk());
  REQUIRE(encodeRelative(c, reference, relative).isOk());
  INFO("standalone " << standalone.indices.size() << " bytes, relative " << relative.indices.size());
  CHECK(standalone.indices.size() > 800);
  CHECK(relative.indices.size() < 400);
  CHECK(relative.indices[0] == 0);  // most of the reference kept: the bitmap over it

  SECTION("a few kept of a long reference: Rice-coded positions") {
    const auto longReference = sortedSample(all, 20'000, rng);
    const Compressed few = topK(d, target(longReference, d, 797, 0.8, rng), rng);
    REQUIRE(encodeRelative(few, longReference, relative).isOk());
    CHECK(relative.indices[0] == 1);
    CHECK(relative.indices.size() < (20'000 / 8));
    Compressed back;
    REQUIRE(decode(relative, d, longReference, back).isOk());
    CHECK(back == few);
  }
}

TEST_CASE("an empty target or reference has a well-defined relative form", "[payload][relative]") {
  Compressed c;
  c.encoding = Encoding::kTopK;
  c.count = 100;
  Payload p;
  SECTION("no indices: an empty bitmap over an empty reference, then r = 0") {
    REQUIRE(encodeRelative(c, {}, p).isOk());
    CHECK(p.indices == std::vector<std::uint8_t>{0, 0});
    Compressed back;
    // A top-k payload selects at least one element, whatever its index format.
    CHECK_THAT(decode(p, 100, std::span<const std::uint32_t>{}, back).message(), Catch::Contains("selects 0"));
  }
  SECTION("no indices, a reference: its bitmap, all clear") {
    REQUIRE(encodeRelative(c, kReference, p).isOk());
    CHECK(p.indices == std::vector<std::uint8_t>{0, 0, 0});
  }
  SECTION("an empty reference: every index new") {
    c.indices = {0, 99};
    c.values = {1.0f, 2.0f};
    REQUIRE(encodeRelative(c, {}, p).isOk());
    CHECK(p.indices[0] == 0);
    Compressed back;
    REQUIRE(decode(p, 100, std::span<const std::uint32_t>{}, back).isOk());
    CHECK(back == c);
  }
  SECTION("only top-k tensors, against an increasing reference below the size") {
    c.indices = {1};
    c.values = {1.0f};
    const std::vector<std::uint32_t> unsorted = {5, 2};
    CHECK(encodeRelative(c, unsorted, p).code() == StatusCode::kInvalidArgument);
    const std::vector<std::uint32_t> beyond = {100};
    CHECK(encodeRelative(c, beyond, p).code() == StatusCode::kInvalidArgument);
    c.encoding = Encoding::kRandK;
    CHECK(encodeRelative(c, kReference, p).code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("relative indices by hand: both forms of the kept set, and malformed bytes named",
          "[payload][relative][malformed]") {
  const Payload bitmap = handMade(concat({0x00, 0x06}, kFresh));
  // Kept positions as Rice: m = 2, r = 0, gaps 1 and 0: 1 0 | 0 (three bits, padding).
  const Payload rice = handMade(concat({0x01, 0x02, 0x00, 0x01}, kFresh));
  const std::vector<std::uint32_t> want = {5, 9, 30, 50};
  for (const Payload* p : {&bitmap, &rice}) {
    Compressed back;
    const Status s = decode(*p, 100, kReference, back);
    INFO(s.toString());
    REQUIRE(s.isOk());
    CHECK(back.indices == want);
    CHECK(back.values == std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f});
  }

  const auto expectError = [](const Payload& p, const std::string& text,
                              std::span<const std::uint32_t> reference = kReference,
                              StatusCode code = StatusCode::kMalformed) {
    Compressed out;
    const Status s = decode(p, p.count, reference, out);
    INFO(s.toString());
    REQUIRE_FALSE(s.isOk());
    CHECK(s.code() == code);
    CHECK_THAT(s.message(), Catch::Contains(text));
  };
  SECTION("no reference") {
    Compressed out;
    const Status s = decode(bitmap, 100, out);
    CHECK(s.code() == StatusCode::kMalformed);
    CHECK_THAT(s.message(), Catch::Contains("relative indices without a reference"));
  }
  SECTION("a reference that is not increasing below the size") {
    const std::vector<std::uint32_t> unsorted = {5, 2, 9, 20};
    expectError(bitmap, "reference indices must increase", unsorted, StatusCode::kInvalidArgument);
    const std::vector<std::uint32_t> beyond = {2, 5, 9, 100};
    expectError(bitmap, "reference indices must increase", beyond, StatusCode::kInvalidArgument);
  }
  SECTION("header") {
    expectError(handMade({}), "without their header byte");
    expectError(handMade(concat({0x02, 0x06}, kFresh)), "header byte 2");
  }
  SECTION("bitmap of kept positions") {
    expectError(handMade({0x00}), "truncated in the bitmap");
    expectError(handMade(concat({0x00, 0x16}, kFresh)), "past the reference's 4 elements");
    Payload one = bitmap;
    one.selected = 1;
    one.values.resize(4);
    expectError(one, "keep more than the 1 selected");
  }
  SECTION("Rice-coded kept positions") {
    expectError(handMade({0x01}), "kept count is truncated");
    expectError(handMade(concat({0x01, 0x05, 0x00, 0x1f}, kFresh)), "keep 5 elements of a reference of 4");
    expectError(handMade({0x01, 0x02}), "truncated before the kept positions' rice parameter");
    expectError(handMade(concat({0x01, 0x02, 0x19, 0x01}, kFresh)), "rice parameter 25");
    // m = 1, r = 2, position 4 (one unary 1, then 00): past the 4 of the reference.
    expectError(handMade(concat({0x01, 0x01, 0x02, 0x01}, kFresh)), "runs past 4 elements");
    // m = 2, r = 0: gaps 1 then 2 (positions 1, 4): position 4 is past the reference.
    expectError(handMade(concat({0x01, 0x02, 0x00, 0x0d}, kFresh)), "out of range for 4 elements");
    expectError(handMade(concat({0x01, 0x02, 0x00, 0x81}, kFresh)), "kept positions with nonzero padding bits");
    Payload few = rice;
    few.selected = 1;
    few.values.resize(4);
    expectError(few, "more than the 1 selected");
  }
  SECTION("new indices") {
    expectError(handMade({0x00, 0x06}), "truncated before the new indices' rice parameter");
    expectError(handMade({0x00, 0x06, 0x19, 0x79, 0x03}), "rice parameter 25");
    expectError(handMade({0x00, 0x06, 0x04, 0x79}), "truncated");
    expectError(handMade({0x00, 0x06, 0x04, 0x79, 0x83}), "padding");
    expectError(handMade(concat(concat({0x00, 0x06}, kFresh), {0x00})), "1 trailing bytes");
    Payload small = bitmap;
    small.count = 40;  // index 50 out of range
    expectError(small, "out of range for 40 elements");
  }
  SECTION("a new index the reference holds") {
    // Coded against {2, 9, 20}: 9 kept, 5 new. Against {2, 5, 9, 20}, 5 is kept and new.
    Compressed c;
    c.encoding = Encoding::kTopK;
    c.count = 100;
    c.indices = want;
    c.values = {0.5f, -1.0f, 2.0f, 0.25f};
    Payload p;
    const std::vector<std::uint32_t> other = {2, 9, 20};
    REQUIRE(encodeRelative(c, other, p).isOk());
    expectError(p, "new index 5 is in the reference and collides with a kept one");
    // Coded against {2, 5, 20}: 5 kept, 9 new, which {2, 5, 9, 20} holds but does not keep.
    const std::vector<std::uint32_t> without9 = {2, 5, 20};
    REQUIRE(encodeRelative(c, without9, p).isOk());
    expectError(p, "new index 9 is in the reference");
  }
}
