// The payload codec: decode(encode(C(x))) == C(x) bit for bit, the smaller index
// format wins, and malformed payloads are errors that name the problem.

#include "starling/compression/payload.hpp"

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "starling/compression/precision.hpp"
#include "starling/compression/wire_codec.hpp"

#include "vectors.hpp"

using namespace starling;
using namespace starling::compression;
using namespace starling::compression::test;

namespace {

std::vector<std::pair<std::string, CompressorOptions>> variants() {
  std::vector<std::pair<std::string, CompressorOptions>> out;
  for (const auto& name : allNames())
    out.emplace_back(name, CompressorOptions{});
  CompressorOptions half;
  half.values = ValueFormat::kFp16;
  out.emplace_back("topk", half);
  out.emplace_back("randk", half);
  CompressorOptions ternary;
  ternary.values = ValueFormat::kSignBits;
  out.emplace_back("topk", ternary);
  out.emplace_back("topk-sampled", ternary);
  CompressorOptions o;
  o.signBlock = 7;
  out.emplace_back("sign", o);
  for (std::uint32_t s : {1u, 2u, 7u, 255u}) {
    CompressorOptions q;
    q.qsgdLevels = s;
    q.qsgdContractive = s == 7;
    out.emplace_back("qsgd", q);
  }
  return out;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

Payload encoded(const std::string& name, CompressorOptions o, std::size_t d, double density, std::uint64_t seed = 1) {
  auto c = make(name, o);
  Compressed q;
  REQUIRE(c->compress(skewed(d, seed), {density, seed}, q).isOk());
  Payload p;
  REQUIRE(encode(q, p).isOk());
  return p;
}

Status decodeStatus(const Payload& p) {
  Compressed out;
  return decode(p, p.count, out);
}

}  // namespace

TEST_CASE("decode(encode(C(x))) reproduces C(x) bit for bit, also through the wire table", "[payload]") {
  for (const auto& [name, options] : variants()) {
    for (std::size_t d : {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{1000}, std::size_t{100003}}) {
      for (double density : {0.001, 0.01, 0.4, 1.0}) {
        DYNAMIC_SECTION(name << " values=" << valueFormatName(options.values) << " block=" << options.signBlock
                             << " s=" << options.qsgdLevels << " d=" << d << " density=" << density) {
          auto c = make(name, options);
          Compressed q;
          REQUIRE(c->compress(skewed(d, d + 1), {density, 99}, q).isOk());
          Payload p;
          REQUIRE(encode(q, p).isOk());
          Compressed back;
          const Status s = decode(p, static_cast<std::uint32_t>(d), back);
          INFO(s.toString());
          REQUIRE(s.isOk());
          REQUIRE(back == q);
          REQUIRE(sameBits(dense(back), dense(q)));

          flatbuffers::FlatBufferBuilder builder;
          builder.Finish(toWire(builder, p));
          flatbuffers::Verifier verifier(builder.GetBufferPointer(), builder.GetSize());
          REQUIRE(verifier.VerifyBuffer<wire::fb::CompressedTensor>(nullptr));
          auto fromTable = fromWire(flatbuffers::GetRoot<wire::fb::CompressedTensor>(builder.GetBufferPointer()));
          REQUIRE(fromTable.isOk());
          REQUIRE(*fromTable == p);
          // Decoding in place from the table gives the same tensor as from the copy.
          auto view = viewWire(flatbuffers::GetRoot<wire::fb::CompressedTensor>(builder.GetBufferPointer()));
          REQUIRE(view.isOk());
          CHECK(view->byteSize() == p.byteSize());
          Compressed fromView;
          REQUIRE(decode(*view, static_cast<std::uint32_t>(d), fromView).isOk());
          REQUIRE(fromView == q);
          // The norm from the compressed form is the norm of the expanded tensor.
          auto norm = l2Norm(back);
          REQUIRE(norm.isOk());
          CHECK(*norm == Approx(std::sqrt(sqNorm(dense(back)))).epsilon(1e-9).margin(1e-30));
        }
      }
    }
  }
}

TEST_CASE("a view decodes like its payload and rejects what the payload would", "[payload][malformed]") {
  Payload p = encoded("topk", {}, 1000, 0.01);
  Compressed a, b;
  REQUIRE(decode(p, 1000, a).isOk());
  REQUIRE(decode(viewOf(p), 1000, b).isOk());
  CHECK(a == b);
  p.values.pop_back();  // a truncated value
  const Status fromPayload = decodeStatus(p);
  const Status fromView = decode(viewOf(p), p.count, b);
  CHECK_FALSE(fromPayload.isOk());
  CHECK(fromView.toString() == fromPayload.toString());
  CHECK_FALSE(viewWire(nullptr).isOk());
}

TEST_CASE("l2Norm reads the compressed form and refuses an inconsistent tensor", "[payload]") {
  Compressed c;
  c.encoding = Encoding::kTopK;
  c.count = 10;
  c.indices = {1, 4};
  c.values = {3.0f, -4.0f};
  CHECK(*l2Norm(c) == 5.0);
  c.values.push_back(1.0f);  // more values than indices
  CHECK_FALSE(l2Norm(c).isOk());
  c.values = {std::nanf(""), 1.0f};
  CHECK_FALSE(std::isfinite(*l2Norm(c)));
}

TEST_CASE("clipToNorm scales every encoding to at most the norm, in its own format", "[payload][clip]") {
  for (const auto& [name, options] : variants()) {
    DYNAMIC_SECTION(name << " values " << int(options.values) << " block " << options.signBlock << " s "
                         << options.qsgdLevels) {
      auto c = make(name, options);
      const auto v = skewed(3000, 17);
      Compressed q;
      REQUIRE(c->compress(v, {0.05, 3}, q).isOk());
      const double before = *l2Norm(q);
      REQUIRE(before > 0);
      std::vector<float> dense(q.count), clippedDense(q.count);
      REQUIRE(expand(q, dense).isOk());
      SECTION("within the norm: unchanged") {
        const Compressed copy = q;
        CHECK(*clipToNorm(q, before * 1.5) == 1.0);
        CHECK(q == copy);
      }
      SECTION("over it: scaled down to it, toward zero, still decodable") {
        const double limit = before * 0.3;
        const double factor = *clipToNorm(q, limit);
        CHECK(factor == Approx(0.3).epsilon(1e-9));
        const double after = *l2Norm(q);
        CHECK(after <= limit);
        // fp16 values lose at most one half ulp (2^-11 relative) each to the rounding.
        CHECK(after >= limit * (1 - 2e-3));
        REQUIRE(expand(q, clippedDense).isOk());
        for (std::size_t i = 0; i < dense.size(); ++i) {
          CHECK(std::fabs(clippedDense[i]) <= std::fabs(dense[i] * 0.3) * (1 + 1e-6));
          CHECK(clippedDense[i] == Approx(dense[i] * 0.3).epsilon(2e-3).margin(1e-30));
        }
        Payload bytes;
        REQUIRE(encode(q, bytes).isOk());
        Compressed back;
        REQUIRE(decode(bytes, q.count, back).isOk());
        CHECK(back == q);
      }
    }
  }
  Compressed q;
  REQUIRE(make("identity", {})->compress(gaussian(10, 1), {1.0, 1}, q).isOk());
  CHECK_FALSE(clipToNorm(q, 0).isOk());
  CHECK_FALSE(clipToNorm(q, std::nan("")).isOk());
}

TEST_CASE("top-k indices use delta varints, Rice-coded gaps or a bitmap, whichever is smallest", "[payload]") {
  SECTION("one index: a delta varint") {
    const Payload p = encoded("topk", {}, 1000, 0.001);
    CHECK(p.indexFormat == IndexFormat::kDeltaVarint);
    CHECK(p.indices.size() <= 2);
  }
  SECTION("sparse: Rice-coded gaps, near the entropy of the index set") {
    for (double density : {0.001, 0.004, 0.012, 0.05}) {
      const std::size_t d = 200000;
      const Payload p = encoded("topk", {}, d, density);
      CHECK(p.indexFormat == IndexFormat::kRice);
      // log2(C(d, k)) ~ d H(k/d) bits: Rice coding stays within 10% of it.
      const double k = static_cast<double>(p.selected), q = k / d;
      const double entropyBits = d * (-q * std::log2(q) - (1 - q) * std::log2(1 - q));
      INFO("density " << density << ": " << p.indices.size() << " bytes, entropy " << entropyBits / 8);
      CHECK(8.0 * static_cast<double>(p.indices.size()) <= 1.1 * entropyBits + 16);
      std::size_t varint = 0;
      Compressed q2;
      REQUIRE(decode(p, p.count, q2).isOk());
      for (std::size_t j = 0; j < q2.indices.size(); ++j)
        varint += varintSize(j == 0 ? q2.indices[0] : q2.indices[j] - q2.indices[j - 1]);
      CHECK(p.indices.size() < varint);
    }
  }
  SECTION("dense selection: bitmap") {
    const Payload p = encoded("topk", {}, 100000, 0.6);
    CHECK(p.indexFormat == IndexFormat::kBitmap);
    CHECK(p.indices.size() == 12500);
  }
  SECTION("rand-k sends no indices, only the seed") {
    const Payload p = encoded("randk", {}, 100000, 0.01, 1234);
    CHECK(p.indexFormat == IndexFormat::kNone);
    CHECK(p.indices.empty());
    CHECK(p.seed == 1234);
  }
}

TEST_CASE("the encodings cost the bits per element the design promises", "[payload]") {
  const std::size_t d = 1000000;
  CompressorOptions half;
  half.values = ValueFormat::kFp16;
  const auto bits = [&](const Payload& p) { return 8.0 * static_cast<double>(p.byteSize()) / d; };
  CHECK(bits(encoded("identity", {}, d, 1)) == Approx(32).epsilon(0.001));
  CHECK(bits(encoded("fp16", {}, d, 1)) == Approx(16).epsilon(0.001));
  CHECK(bits(encoded("topk", half, d, 0.01)) <= 0.26);  // 16 + ~8.6 index bits, x 0.01
  CompressorOptions ternary;
  ternary.values = ValueFormat::kSignBits;
  CHECK(bits(encoded("topk", ternary, d, 0.01)) <= 0.1);  // 1 + ~8.6 bits, x 0.01
  CHECK(bits(encoded("sign", {}, d, 1)) <= 1.05);
  CHECK(bits(encoded("qsgd", {}, d, 1)) == Approx(5).epsilon(0.001));  // s = 15: 4 + 1
  CHECK(bits(encoded("randk", half, d, 0.01)) == Approx(0.16).epsilon(0.01));
}

TEST_CASE("decode names what is wrong with a malformed payload", "[payload][malformed]") {
  const auto expectError = [](const Payload& p, StatusCode code, const std::string& text) {
    const Status s = decodeStatus(p);
    INFO(s.toString());
    REQUIRE_FALSE(s.isOk());
    CHECK(s.code() == code);
    CHECK_THAT(s.message(), Catch::Contains(text));
  };
  // A small top-k payload with delta varints: indices {3, 10, 200}.
  Payload p;
  p.encoding = Encoding::kTopK;
  p.count = 1000;
  p.selected = 3;
  p.indexFormat = IndexFormat::kDeltaVarint;
  p.indices = {3, 7, 190, 1};  // 3, +7, +190 (varint 0xbe 0x01)
  p.valueFormat = ValueFormat::kFp32;
  p.values.resize(12, 0);
  REQUIRE(decodeStatus(p).isOk());

  SECTION("a count other than the expected one") {
    Compressed out;
    CHECK(decode(p, 999, out).code() == StatusCode::kOutOfRange);
  }
  SECTION("index out of range") {
    Payload bad = p;
    bad.indices = {3, 7, 0xff, 0x7f};
    expectError(bad, StatusCode::kMalformed, "out of range");
  }
  SECTION("indices not increasing") {
    Payload bad = p;
    bad.indices = {3, 0, 190, 1};
    expectError(bad, StatusCode::kMalformed, "not increasing");
  }
  SECTION("truncated varint") {
    Payload bad = p;
    bad.indices = {3, 7, 190};
    expectError(bad, StatusCode::kMalformed, "truncated");
  }
  SECTION("varint beyond 32 bits") {
    Payload bad = p;
    bad.indices = {0xff, 0xff, 0xff, 0xff, 0x7f, 7, 1};
    expectError(bad, StatusCode::kMalformed, "exceeds 32 bits");
  }
  SECTION("trailing index bytes") {
    Payload bad = p;
    bad.indices.push_back(5);
    expectError(bad, StatusCode::kMalformed, "trailing");
  }
  SECTION("selected disagrees with the values") {
    Payload bad = p;
    bad.values.resize(8);
    expectError(bad, StatusCode::kMalformed, "bytes of fp32 values");
  }
  SECTION("selected beyond count") {
    Payload bad = p;
    bad.selected = 1001;
    expectError(bad, StatusCode::kMalformed, "selects 1001 of 1000");
  }
  SECTION("bitmap whose population disagrees with selected") {
    Payload bad = p;
    bad.indexFormat = IndexFormat::kBitmap;
    bad.indices.assign(125, 0);
    bad.indices[0] = 0x0f;  // 4 bits set, 3 selected
    expectError(bad, StatusCode::kMalformed, "more than the 3 selected");
    bad.indices[0] = 0x03;
    expectError(bad, StatusCode::kMalformed, "holds 2 elements");
    bad.indices.resize(124);
    expectError(bad, StatusCode::kMalformed, "bitmap of 124 bytes");
  }
  SECTION("Rice indices: parameter, truncation, overrun, padding, trailing bytes") {
    // Indices 3, 10, 200 by hand: r = 5; gaps 3, 6, 189 = 5 x 32 + 29, LSB first:
    // 0 11000 | 0 01100 | 11111 0 10111 (23 bits, one padding bit).
    Payload rice = p;
    rice.indexFormat = IndexFormat::kRice;
    rice.indices = {5, 0x06, 0xf3, 0x75};
    Compressed back;
    REQUIRE(decode(rice, 1000, back).isOk());
    CHECK(back.indices == std::vector<std::uint32_t>{3, 10, 200});
    Payload bad = rice;
    bad.indices[0] = 25;
    expectError(bad, StatusCode::kMalformed, "rice parameter 25");
    bad = rice;
    bad.indices.resize(1);
    expectError(bad, StatusCode::kMalformed, "truncated");
    bad.indices.clear();
    expectError(bad, StatusCode::kMalformed, "parameter byte");
    bad = rice;
    bad.indices.push_back(0);
    expectError(bad, StatusCode::kMalformed, "trailing");
    bad = rice;
    bad.indices.back() |= 0x80;  // a padding bit
    expectError(bad, StatusCode::kMalformed, "padding");
    bad = rice;
    bad.indices.assign(1 + 200, 0xff);  // a unary run longer than the tensor
    bad.indices[0] = 0;
    expectError(bad, StatusCode::kMalformed, "runs past 1000");
    bad = rice;
    bad.count = 200;  // index 200 out of range
    expectError(bad, StatusCode::kMalformed, "out of range");
  }
  SECTION("ternary top-k: scale, sign bytes, stray bits") {
    Compressed c;
    c.encoding = Encoding::kTopK;
    c.count = 1000;
    c.indices = {3, 10, 200};
    c.values = {0.5f, -0.5f, 0.25f};
    c.valueFormat = ValueFormat::kSignBits;
    c.block = 2;
    c.scales = {0.5f, 0.25f};
    Payload t;
    REQUIRE(encode(c, t).isOk());
    CHECK(t.values == std::vector<std::uint8_t>{0x02});
    Compressed back;
    REQUIRE(decode(t, 1000, back).isOk());
    CHECK(back == c);
    Payload bad = t;
    bad.scales = {0.5f, -1.0f};
    expectError(bad, StatusCode::kMalformed, "scale 1 is negative or not finite");
    bad.scales = {0.5f};
    expectError(bad, StatusCode::kMalformed, "with 1 scales for 2 blocks");
    bad.block = 0;
    expectError(bad, StatusCode::kMalformed, "block of 0 values");
    bad = t;
    bad.values = {0x0a};
    expectError(bad, StatusCode::kMalformed, "sign bits set beyond value 3");
    bad.values = {0x02, 0};
    expectError(bad, StatusCode::kMalformed, "2 bytes of sign bits for 3 values");
    Compressed notTernary = c;
    notTernary.values[1] = -0.25f;  // not +-its block's 0.5
    CHECK(encode(notTernary, t).code() == StatusCode::kInvalidArgument);
  }
  SECTION("non-finite values") {
    Payload bad = p;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(bad.values.data() + 4, &nan, 4);
    expectError(bad, StatusCode::kMalformed, "value 1 is not finite");
  }
  SECTION("unknown encoding, index format, value format") {
    Payload bad = p;
    bad.encoding = static_cast<Encoding>(9);
    expectError(bad, StatusCode::kUnsupported, "unknown encoding 9");
    bad = p;
    bad.indexFormat = static_cast<IndexFormat>(5);
    expectError(bad, StatusCode::kMalformed, "index format unknown(5)");
    bad = p;
    bad.valueFormat = static_cast<ValueFormat>(200);
    expectError(bad, StatusCode::kMalformed, "value format unknown(200)");
  }
  SECTION("qsgd: level above s, wrong level width, bad scale, padding") {
    CompressorOptions four;
    four.qsgdLevels = 4;  // 3-bit levels: 5, 6 and 7 are out of range
    Payload q = encoded("qsgd", four, 100, 1);
    REQUIRE(decodeStatus(q).isOk());
    Payload bad = q;
    bad.values[0] = static_cast<std::uint8_t>(bad.values[0] | 0x07);  // element 0: level 7
    expectError(bad, StatusCode::kMalformed, "level 7 of element 0 exceeds 4");
    bad = q;
    bad.levelBits = 5;
    expectError(bad, StatusCode::kMalformed, "level width");
    bad = q;
    bad.scales = {std::numeric_limits<float>::infinity()};
    expectError(bad, StatusCode::kMalformed, "scale");
    bad = q;
    bad.levels = 0;
    expectError(bad, StatusCode::kUnsupported, "levels");
    Payload odd = encoded("qsgd", four, 101, 1);  // 101 * 4 bits: 4 bits of padding
    REQUIRE(decodeStatus(odd).isOk());
    odd.values.back() |= 0x80;
    expectError(odd, StatusCode::kMalformed, "padding");
  }
  SECTION("scaled sign: scales that disagree with the blocks, stray sign bits") {
    Payload s = encoded("sign", {}, 3000, 1);
    REQUIRE(decodeStatus(s).isOk());
    Payload bad = s;
    bad.scales.pop_back();
    expectError(bad, StatusCode::kMalformed, "scales for 3 blocks");
    bad = s;
    bad.block = 0;
    expectError(bad, StatusCode::kMalformed, "block of 0");
    bad = s;
    bad.scales[1] = -1.0f;
    expectError(bad, StatusCode::kMalformed, "block 1");
    bad = s;
    bad.values.pop_back();
    expectError(bad, StatusCode::kMalformed, "bytes of sign bits");
    Payload odd = encoded("sign", {}, 3001, 1);
    odd.values.back() |= 0x80;
    expectError(odd, StatusCode::kMalformed, "beyond element 3001");
  }
  SECTION("a dense payload that is not dense") {
    Payload d = encoded("identity", {}, 10, 1);
    d.selected = 9;
    expectError(d, StatusCode::kMalformed, "selects 9 of 10");
    d = encoded("fp16", {}, 10, 1);
    d.valueFormat = ValueFormat::kFp32;
    expectError(d, StatusCode::kMalformed, "value format fp32");
  }
  SECTION("a null wire table") {
    CHECK(fromWire(nullptr).status().code() == StatusCode::kMalformed);
  }
}

TEST_CASE("randomly corrupted payloads decode to an error or a valid tensor, never a crash",
          "[payload][malformed][fuzz]") {
  std::mt19937_64 rng(2024);
  int errors = 0, accepted = 0;
  for (const auto& [name, options] : variants()) {
    for (std::size_t d : {std::size_t{1}, std::size_t{100}, std::size_t{5000}}) {
      const Payload good = encoded(name, options, d, 0.05, d);
      for (int trial = 0; trial < 300; ++trial) {
        Payload p = good;
        std::uint32_t expected = p.count;
        const int mutations = 1 + static_cast<int>(rng() % 3);
        for (int m = 0; m < mutations; ++m) {
          auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
          switch (rng() % 12) {
            case 0:
              if (!p.indices.empty()) p.indices[pick(p.indices.size())] ^= static_cast<std::uint8_t>(1u << pick(8));
              break;
            case 1:
              if (!p.values.empty()) p.values[pick(p.values.size())] = static_cast<std::uint8_t>(rng());
              break;
            case 2:
              p.indices.resize(pick(p.indices.size() + 3));
              break;
            case 3:
              p.values.resize(pick(p.values.size() + 5));
              break;
            case 4:
              p.selected = static_cast<std::uint32_t>(rng() % 2 ? pick(d + 3) : rng());
              break;
            case 5:
              p.count = static_cast<std::uint32_t>(pick(2 * d + 2));
              expected = p.count;
              break;
            case 6:
              p.encoding = static_cast<Encoding>(pick(8));
              break;
            case 7:
              p.indexFormat = static_cast<IndexFormat>(pick(4));
              break;
            case 8:
              p.valueFormat = static_cast<ValueFormat>(pick(5));
              break;
            case 9:
              p.levelBits = static_cast<std::uint8_t>(rng());
              p.levels = static_cast<std::uint32_t>(pick(300));
              break;
            case 10:
              p.block = static_cast<std::uint32_t>(rng() % 2 ? pick(d + 2) : rng());
              break;
            case 11:
              p.scales.resize(pick(p.scales.size() + 3), static_cast<float>(rng() % 7) - 3.0f);
              break;
          }
        }
        Compressed out;
        const Status s = decode(p, expected, out);
        if (!s.isOk()) {
          ++errors;
          continue;
        }
        ++accepted;
        // Whatever decode accepts is a tensor expand() can use, with finite values, or
        // XOR catch-up words, one per index, that only overwrite() applies.
        std::vector<float> dense(out.count);
        if (out.valueFormat == ValueFormat::kXor32) {
          REQUIRE(out.xorWords.size() == out.indices.size());
          CHECK_FALSE(expand(out, dense).isOk());
        } else {
          REQUIRE(expand(out, dense).isOk());
          for (float x : dense)
            REQUIRE(std::isfinite(x));
        }
        Payload again;
        REQUIRE(encode(out, again).isOk());
      }
    }
  }
  CHECK(errors > 1000);
  CHECK(accepted > 0);
}

TEST_CASE("corrupted Flatbuffers never reach decode unverified", "[payload][malformed][fuzz]") {
  std::mt19937_64 rng(77);
  const Payload good = encoded("topk", {}, 2000, 0.05);
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(toWire(builder, good));
  const std::vector<std::uint8_t> bytes(builder.GetBufferPointer(), builder.GetBufferPointer() + builder.GetSize());
  for (int trial = 0; trial < 3000; ++trial) {
    auto buf = bytes;
    for (int m = 0; m < 4; ++m)
      buf[rng() % buf.size()] = static_cast<std::uint8_t>(rng());
    if (trial % 5 == 0) buf.resize(rng() % buf.size());
    flatbuffers::Verifier verifier(buf.data(), buf.size());
    if (!verifier.VerifyBuffer<wire::fb::CompressedTensor>(nullptr)) continue;
    auto p = fromWire(flatbuffers::GetRoot<wire::fb::CompressedTensor>(buf.data()));
    REQUIRE(p.isOk());
    Compressed out;
    (void)decode(*p, 2000, out);
  }
}

TEST_CASE("overwrite sets the sent elements and leaves the others", "[payload]") {
  Compressed c;
  c.encoding = Encoding::kTopK;
  c.count = 6;
  c.indices = {1, 4};
  c.values = {-2.5f, 7.0f};
  std::vector<float> out{1, 2, 3, 4, 5, 6};
  REQUIRE(overwrite(c, out).isOk());
  CHECK(out == std::vector<float>{1, -2.5f, 3, 4, 7.0f, 6});
  // A dense tensor replaces every element; a wrong size is refused.
  Compressed d;
  d.encoding = Encoding::kDense32;
  d.count = 6;
  d.values = {0, 0, 0, 0, 0, 9};
  REQUIRE(overwrite(d, out).isOk());
  CHECK(out == d.values);
  std::vector<float> small(3);
  CHECK_FALSE(overwrite(c, small).isOk());
}

TEST_CASE("XOR catch-up words: Rice-coded leading zeros, bit for bit, malformed ones named", "[payload][xor]") {
  // What a client holds and the sender's current values: most moved by a few percent,
  // some not at all, some changed sign.
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr std::uint32_t kCount = 5000;
  std::vector<float> held(kCount), now(kCount);
  Compressed c;
  c.encoding = Encoding::kTopK;
  c.count = kCount;
  c.valueFormat = ValueFormat::kXor32;
  for (std::uint32_t i = 0; i < kCount; ++i) {
    held[i] = now[i] = 0.05f * normal(rng);
    if (i % 3 != 0) continue;
    if (i % 60 == 3)
      now[i] = -held[i];
    else if (i % 21 != 6)
      now[i] = held[i] * (1.0f + 0.05f * normal(rng));
    c.indices.push_back(i);
    c.xorWords.push_back(std::bit_cast<std::uint32_t>(now[i]) ^ std::bit_cast<std::uint32_t>(held[i]));
  }
  Payload p;
  REQUIRE(encode(c, p).isOk());
  CHECK(p.valueFormat == ValueFormat::kXor32);
  CHECK(p.values.size() < 3 * c.indices.size());  // under 24 bits a value, fp32 takes 32
  Compressed back;
  REQUIRE(decode(p, kCount, back).isOk());
  CHECK(back == c);
  flatbuffers::FlatBufferBuilder b;
  b.Finish(toWire(b, p));
  auto viewed = viewWire(flatbuffers::GetRoot<wire::fb::CompressedTensor>(b.GetBufferPointer()));
  REQUIRE(viewed.isOk());
  Compressed fromWire;
  REQUIRE(decode(*viewed, kCount, fromWire).isOk());
  CHECK(fromWire == c);

  std::vector<float> model = held;
  REQUIRE(overwrite(back, model).isOk());
  for (std::uint32_t i = 0; i < kCount; ++i)
    REQUIRE(std::bit_cast<std::uint32_t>(model[i]) == std::bit_cast<std::uint32_t>(now[i]));
  // The words are relative to a model: nothing to expand or add on their own.
  std::vector<float> dense(kCount);
  CHECK_FALSE(expand(back, dense).isOk());
  CHECK_FALSE(addScaled(back, 1.0f, dense).isOk());
  CHECK_FALSE(l2Norm(back).isOk());

  SECTION("one word by hand: 5 has 29 leading zeros, then the bits 01 below its leading one") {
    Compressed one;
    one.encoding = Encoding::kTopK;
    one.count = 10;
    one.valueFormat = ValueFormat::kXor32;
    one.indices = {4};
    one.xorWords = {5};
    Payload q;
    REQUIRE(encode(one, q).isOk());
    CHECK(q.values == std::vector<std::uint8_t>{29, 0, 0x02});  // m 29, r 0; 0 | 1 0
  }
  SECTION("a model the words were not made for: a non-finite result is refused, nothing written") {
    Compressed bad;
    bad.encoding = Encoding::kTopK;
    bad.count = 3;
    bad.valueFormat = ValueFormat::kXor32;
    bad.indices = {0, 2};
    bad.xorWords = {0, std::bit_cast<std::uint32_t>(1.0f) ^ 0x7fc00000u};  // 1.0 to NaN
    std::vector<float> m{1.0f, 2.0f, 1.0f};
    const Status s = overwrite(bad, m);
    CHECK(s.code() == StatusCode::kMalformed);
    CHECK_THAT(s.message(), Catch::Contains("not finite"));
    CHECK(m == std::vector<float>{1.0f, 2.0f, 1.0f});
    bad.xorWords.pop_back();
    CHECK_FALSE(overwrite(bad, m).isOk());  // a word per index
  }
  SECTION("malformed: header, parameter, truncation, padding, trailing bytes, too many zeros, scales") {
    const auto expectError = [&](const Payload& bad, const std::string& text) {
      Compressed out;
      const Status s = decode(bad, kCount, out);
      INFO(s.toString());
      REQUIRE_FALSE(s.isOk());
      CHECK(s.code() == StatusCode::kMalformed);
      CHECK_THAT(s.message(), Catch::Contains(text));
    };
    Payload bad = p;
    bad.values.resize(1);
    expectError(bad, "header bytes");
    bad = p;
    bad.values[0] = 33;
    expectError(bad, "33 leading zeros");
    bad = p;
    bad.values[1] = 6;
    expectError(bad, "Rice parameter 6");
    bad = p;
    bad.values.resize(p.values.size() - 2);
    expectError(bad, "truncated");
    bad = p;
    bad.values.resize(10);
    expectError(bad, "cannot hold");
    bad = p;
    bad.values.push_back(0);
    expectError(bad, "trailing");
    bad = p;
    bad.scales = {1.0f};
    expectError(bad, "scales");
    Payload one;
    one.encoding = Encoding::kTopK;
    one.count = kCount;
    one.selected = 1;
    one.indexFormat = IndexFormat::kDeltaVarint;
    one.indices = {4};
    one.valueFormat = ValueFormat::kXor32;
    one.values = {29, 0, 0x02};
    Compressed out;
    REQUIRE(decode(one, kCount, out).isOk());
    CHECK(out.xorWords == std::vector<std::uint32_t>{5});
    bad = one;
    bad.values[2] = 0x0a;  // a padding bit
    expectError(bad, "padding");
    bad = one;
    bad.values = {32, 0, 0x01};  // m 32, then a unary one: 33 zeros
    expectError(bad, "more than 32 leading zeros");
    bad = one;
    bad.values = {30, 2, 0x06};  // m 30, r 2: quotient 0, remainder 3: 33 zeros
    expectError(bad, "more than 32 leading zeros");
  }
}

TEST_CASE("model precision: rounding to n mantissa bits, and XOR words above the cleared bits", "[payload][xor]") {
  // 1 + 2^-10 + 2^-11 (a tie at 10 bits) rounds to even: up to 1 + 2^-9; 1 + 2^-11 down to 1.
  CHECK(roundMantissa(1.0f + 0x1p-10f + 0x1p-11f, 10) == 1.0f + 0x1p-9f);
  CHECK(roundMantissa(1.0f + 0x1p-11f, 10) == 1.0f);
  CHECK(roundMantissa(-(1.0f + 0x1p-10f + 0x1p-11f), 10) == -(1.0f + 0x1p-9f));
  CHECK(roundMantissa(1.99999f, 4) == 2.0f);  // the carry raises the exponent
  CHECK(roundMantissa(std::numeric_limits<float>::max(), 4) < std::numeric_limits<float>::infinity());
  CHECK(roundMantissa(0.1f, 23) == 0.1f);
  CHECK((std::bit_cast<std::uint32_t>(roundMantissa(0.1f, 10)) & 0x1fffu) == 0);

  Compressed q;
  q.encoding = Encoding::kTopK;
  q.count = 4;
  q.indices = {1, 3};
  q.values = {0.5f, 0.5f};
  std::vector<float> m{0.1f, 0.1f, 0.1f, 0.1f};
  REQUIRE(roundChanged(q, 10, m).isOk());
  CHECK(m[0] == 0.1f);  // not changed by q: left as it is
  CHECK(m[1] == roundMantissa(0.1f, 10));
  CHECK(m[1] != 0.1f);
  CHECK_FALSE(roundChanged(q, 0, m).isOk());
  CHECK_FALSE(roundChanged(q, 24, m).isOk());

  // A client holding `held` catches up to `now`, whose values have 13 low bits clear:
  // the words are the 19 bits above them, XORed.
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> held(300), now(300);
  Compressed c;
  c.encoding = Encoding::kTopK;
  c.count = 300;
  c.valueFormat = ValueFormat::kXor32;
  c.block = 13;
  for (std::uint32_t i = 0; i < 300; ++i) {
    held[i] = now[i] = 0.05f * normal(rng);  // full precision: never rounded
    if (i % 2 != 0) continue;
    now[i] = roundMantissa(held[i] * (1.0f + 0.5f * normal(rng)), 10);
    c.indices.push_back(i);
    c.xorWords.push_back((std::bit_cast<std::uint32_t>(now[i]) >> 13) ^ (std::bit_cast<std::uint32_t>(held[i]) >> 13));
  }
  Payload p;
  REQUIRE(encode(c, p).isOk());
  CHECK(p.block == 13);
  CHECK(p.values.size() < 2 * c.indices.size());  // under 16 bits a value
  Compressed back;
  REQUIRE(decode(p, 300, back).isOk());
  CHECK(back == c);
  std::vector<float> model = held;
  REQUIRE(overwrite(back, model).isOk());
  for (std::uint32_t i = 0; i < 300; ++i)
    REQUIRE(std::bit_cast<std::uint32_t>(model[i]) == std::bit_cast<std::uint32_t>(now[i]));

  SECTION("malformed: too many dropped bits, a word wider than the bits above them") {
    Payload bad = p;
    bad.block = 23;
    Compressed out;
    Status s = decode(bad, 300, out);
    CHECK(s.code() == StatusCode::kMalformed);
    CHECK_THAT(s.message(), Catch::Contains("dropping 23 low bits"));
    Compressed wide = c;
    wide.block = 0;
    wide.xorWords[0] = 0xffffffffu;  // 32 bits
    REQUIRE(encode(wide, bad).isOk());
    bad.block = 13;
    s = decode(bad, 300, out);
    CHECK(s.code() == StatusCode::kMalformed);
    CHECK_THAT(s.message(), Catch::Contains("wider than the 19 bits"));
    wide.block = 13;
    CHECK_FALSE(encode(wide, bad).isOk());
    CHECK_FALSE(overwrite(wide, model).isOk());
  }
}
