// The contract every compressor keeps, and each compressor's own behaviour.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "starling/compression/compressor.hpp"
#include "starling/compression/fp16.hpp"
#include "starling/compression/qsgd.hpp"
#include "starling/compression/randk.hpp"
#include "starling/compression/topk.hpp"

#include "vectors.hpp"

using namespace starling;
using namespace starling::compression;
using namespace starling::compression::test;

TEST_CASE("every compressor keeps at least one element of a non-empty input", "[contract]") {
  for (const auto& name : allNames()) {
    DYNAMIC_SECTION(name) {
      auto c = make(name);
      for (std::size_t d : {std::size_t{1}, std::size_t{2}, std::size_t{1000}, std::size_t{100000}}) {
        const auto v = gaussian(d, 1);
        Compressed q;
        REQUIRE(c->compress(v, {1e-9, 3}, q).isOk());
        REQUIRE(q.count == d);
        REQUIRE(q.selected() >= 1);
        const auto out = dense(q);
        // The kept element is not lost: C(v) is not all zero for a vector without zeros.
        REQUIRE(std::any_of(out.begin(), out.end(), [](float x) { return x != 0.0f; }));
      }
    }
  }
}

TEST_CASE("every compressor maps an all-zero input to an all-zero output", "[contract]") {
  for (const auto& name : allNames()) {
    DYNAMIC_SECTION(name) {
      auto c = make(name);
      for (std::size_t d : {std::size_t{1}, std::size_t{777}, std::size_t{70000}}) {
        const std::vector<float> v(d, 0.0f);
        Compressed q;
        REQUIRE(c->compress(v, {0.01, 5}, q).isOk());
        REQUIRE(q.selected() >= 1);
        const auto out = dense(q);
        REQUIRE(std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }));
      }
    }
  }
}

TEST_CASE("every compressor rejects non-finite input with an error naming the element", "[contract]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& name : allNames()) {
    DYNAMIC_SECTION(name) {
      auto c = make(name);
      for (std::size_t d : {std::size_t{10}, std::size_t{100000}}) {
        for (float bad : {nan, inf, -inf}) {
          for (std::size_t at : {std::size_t{0}, d / 2 + 1, d - 1}) {
            auto v = gaussian(d, 2);
            v[at] = bad;
            Compressed q;
            const Status s = c->compress(v, {0.01, 1}, q);
            REQUIRE_FALSE(s.isOk());
            REQUIRE(s.code() == StatusCode::kInvalidArgument);
            REQUIRE_THAT(s.message(), Catch::Contains("element " + std::to_string(at)));
          }
        }
      }
    }
  }
}

TEST_CASE("every compressor rejects an empty input and a density outside (0, 1]", "[contract]") {
  for (const auto& name : allNames()) {
    DYNAMIC_SECTION(name) {
      auto c = make(name);
      Compressed q;
      REQUIRE(c->compress(std::span<const float>(), {0.5, 0}, q).code() == StatusCode::kInvalidArgument);
    }
  }
  auto topk = make("topk");
  auto randk = make("randk");
  const auto v = gaussian(100, 3);
  Compressed q;
  for (double density : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    CHECK(topk->compress(v, {density, 0}, q).code() == StatusCode::kInvalidArgument);
    CHECK(randk->compress(v, {density, 0}, q).code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("every compressor is deterministic for a given input and seed", "[contract]") {
  const auto v = gaussian(50000, 4);
  for (const auto& name : allNames()) {
    DYNAMIC_SECTION(name) {
      auto a = make(name);
      auto b = make(name);
      Compressed qa, qb;
      REQUIRE(a->compress(v, {0.01, 42}, qa).isOk());
      REQUIRE(b->compress(v, {0.01, 42}, qb).isOk());
      REQUIRE(qa == qb);
    }
  }
}

TEST_CASE("makeCompressor rejects unknown names and unusable options", "[contract]") {
  CHECK(makeCompressor("zip").status().code() == StatusCode::kInvalidArgument);
  CompressorOptions o;
  o.qsgdLevels = 0;
  CHECK_FALSE(makeCompressor("qsgd", o).isOk());
  o.qsgdLevels = 256;
  CHECK_FALSE(makeCompressor("qsgd", o).isOk());
  o = {};
  o.signBlock = 0;
  CHECK_FALSE(makeCompressor("sign", o).isOk());
  o = {};
  o.values = ValueFormat::kLevels;
  CHECK_FALSE(makeCompressor("topk", o).isOk());
  o.values = ValueFormat::kSignBits;  // ternary values: top-k only
  CHECK(makeCompressor("topk", o).isOk());
  CHECK(makeCompressor("topk-sampled", o).isOk());
  CHECK_FALSE(makeCompressor("randk", o).isOk());
}

TEST_CASE("selectedCount rounds density * d and clamps it to [1, d]", "[contract]") {
  CHECK(*selectedCount(1000, 0.01) == 10);
  CHECK(*selectedCount(1000, 1e-9) == 1);
  CHECK(*selectedCount(1000, 1.0) == 1000);
  CHECK(*selectedCount(1, 0.5) == 1);
  CHECK_FALSE(selectedCount(0, 0.5).isOk());
}

namespace {

// Brute force: the k largest magnitudes, ties to the lowest index.
std::vector<std::uint32_t> referenceTopK(const std::vector<float>& v, std::uint32_t k) {
  std::vector<std::uint32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return std::fabs(v[a]) > std::fabs(v[b]); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace

TEST_CASE("top-k keeps exactly the k largest magnitudes, ties to the lowest indices", "[topk]") {
  for (bool sampled : {false, true}) {
    DYNAMIC_SECTION((sampled ? "sampled" : "exact")) {
      TopKCompressor c({ValueFormat::kFp32, sampled});
      SECTION("random inputs") {
        for (std::size_t d : {std::size_t{5}, std::size_t{1000}, std::size_t{200000}}) {
          for (double density : {0.001, 0.01, 0.3, 1.0}) {
            const auto v = skewed(d, d);
            Compressed q;
            REQUIRE(c.compress(v, {density, 9}, q).isOk());
            const auto k = *selectedCount(d, density);
            REQUIRE(q.indices == referenceTopK(v, k));
            for (std::size_t j = 0; j < k; ++j)
              REQUIRE(q.values[j] == v[q.indices[j]]);
          }
        }
      }
      SECTION("ties") {
        std::vector<float> v(100000, 1.0f);
        v[500] = -2.0f;
        v[90000] = 3.0f;
        Compressed q;
        REQUIRE(c.compress(v, {0.0001, 1}, q).isOk());  // k = 10
        REQUIRE(q.indices == std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 500, 90000});
      }
      SECTION("many ties on a large tensor") {
        std::vector<float> v(1 << 20);
        for (std::size_t i = 0; i < v.size(); ++i) {
          v[i] = static_cast<float>((i * 7919) % 3 + 1) * (i % 2 ? -1.0f : 1.0f);
        }
        Compressed q;
        REQUIRE(c.compress(v, {0.01, 4}, q).isOk());
        REQUIRE(q.indices == referenceTopK(v, *selectedCount(v.size(), 0.01)));
      }
    }
  }
}

TEST_CASE("top-k with fp16 values sends the fp16 rounding of the selected values", "[topk]") {
  TopKCompressor c({ValueFormat::kFp16, false});
  const auto v = gaussian(10000, 11);
  Compressed q;
  REQUIRE(c.compress(v, {0.01, 0}, q).isOk());
  REQUIRE(q.valueFormat == ValueFormat::kFp16);
  REQUIRE(q.indices == referenceTopK(v, 100));
  for (std::size_t j = 0; j < q.indices.size(); ++j) {
    REQUIRE(q.values[j] == halfToFloat(floatToHalf(v[q.indices[j]])));
  }
}

TEST_CASE("ternary top-k sends the signs of the top k and each block's mean magnitude", "[topk]") {
  for (bool sampled : {false, true}) {
    TopKCompressor c({ValueFormat::kSignBits, sampled});
    const auto v = gaussian(100000, 12);
    Compressed q;
    REQUIRE(c.compress(v, {0.01, 3}, q).isOk());
    REQUIRE(q.valueFormat == ValueFormat::kSignBits);
    REQUIRE(q.indices == referenceTopK(v, 1000));
    REQUIRE(q.block == kTernaryBlock);
    REQUIRE(q.scales.size() == (1000 + kTernaryBlock - 1) / kTernaryBlock);
    for (std::size_t b = 0; b < q.scales.size(); ++b) {
      const std::size_t begin = b * kTernaryBlock, end = std::min<std::size_t>(1000, begin + kTernaryBlock);
      double sum = 0;
      for (std::size_t j = begin; j < end; ++j)
        sum += std::fabs(v[q.indices[j]]);
      CHECK(q.scales[b] == Approx(sum / static_cast<double>(end - begin)).epsilon(1e-6));
      for (std::size_t j = begin; j < end; ++j)
        REQUIRE(q.values[j] == (v[q.indices[j]] < 0 ? -q.scales[b] : q.scales[b]));
    }
  }
}

TEST_CASE("sampled top-k: the first candidate set is within 0.8k..1.3k, exactly k after", "[topk]") {
  TopKCompressor c({ValueFormat::kFp32, true});
  int seed = 0;
  for (const char* shape : {"skewed", "flat", "gaussian"}) {
    for (std::size_t d : {std::size_t{1000000}, std::size_t{3000000}}) {
      for (double density : {0.01, 0.001}) {
        DYNAMIC_SECTION(shape << " d=" << d << " density=" << density) {
          for (int trial = 0; trial < 3; ++trial, ++seed) {
            const std::string s = shape;
            const auto v = s == "skewed" ? skewed(d, seed) : s == "flat" ? flat(d, seed) : gaussian(d, seed);
            Compressed q;
            REQUIRE(c.compress(v, {density, static_cast<std::uint64_t>(seed)}, q).isOk());
            const auto& stats = c.lastStats();
            const double k = stats.k;
            REQUIRE_FALSE(stats.exact);
            INFO("first pass candidates " << stats.firstCandidates << " for k " << k);
            REQUIRE(static_cast<double>(stats.firstCandidates) >= 0.8 * k);
            REQUIRE(static_cast<double>(stats.firstCandidates) <= 1.3 * k);
            REQUIRE(q.indices.size() == stats.k);
          }
        }
      }
    }
  }
}

TEST_CASE("sampled top-k recovers when the sample overestimates the threshold", "[topk]") {
  // Large values only in places a strided sample is likely to miss: the sampled
  // threshold keeps too few, and the retries must still give exactly the top k.
  TopKCompressor c({ValueFormat::kFp32, true});
  std::vector<float> v(1 << 20, 0.0f);
  for (std::size_t i = 0; i < v.size(); i += 64)
    v[i] = 1.0f + static_cast<float>(i % 1000) * 1e-3f;
  Compressed q;
  REQUIRE(c.compress(v, {0.01, 3}, q).isOk());
  REQUIRE(q.indices.size() == c.lastStats().k);
  std::vector<float> copy(v);
  REQUIRE(q.indices == referenceTopK(copy, c.lastStats().k));
}

TEST_CASE("rand-k picks k distinct increasing indices from the seed alone", "[randk]") {
  std::vector<std::uint64_t> scratch;
  std::vector<std::uint32_t> a, b, other;
  randKIndices(123, 100000, 1000, scratch, a);
  randKIndices(123, 100000, 1000, scratch, b);
  randKIndices(124, 100000, 1000, scratch, other);
  REQUIRE(a.size() == 1000);
  REQUIRE(std::is_sorted(a.begin(), a.end()));
  REQUIRE(std::adjacent_find(a.begin(), a.end()) == a.end());
  REQUIRE(a.back() < 100000);
  REQUIRE(a == b);
  REQUIRE(a != other);
  SECTION("k == d takes everything") {
    randKIndices(5, 77, 77, scratch, a);
    std::vector<std::uint32_t> all(77);
    std::iota(all.begin(), all.end(), 0u);
    REQUIRE(a == all);
  }
  SECTION("every index is about equally likely") {
    std::vector<int> hits(100, 0);
    for (std::uint64_t seed = 0; seed < 20000; ++seed) {
      randKIndices(seed, 100, 10, scratch, a);
      for (auto i : a)
        ++hits[i];
    }
    // Expected 2000 per index, standard deviation about 42.
    for (int h : hits)
      REQUIRE(std::abs(h - 2000) < 250);
  }
}

TEST_CASE("scaled sign sends signs and the mean magnitude of each block", "[sign]") {
  CompressorOptions o;
  o.signBlock = 4;
  auto c = make("sign", o);
  const std::vector<float> v = {1.0f, -3.0f, 0.0f, 4.0f, -2.0f, -2.0f};
  Compressed q;
  REQUIRE(c->compress(v, {}, q).isOk());
  REQUIRE(q.scales == std::vector<float>{2.0f, 2.0f});
  REQUIRE(dense(q) == std::vector<float>{2.0f, -2.0f, 2.0f, 2.0f, -2.0f, -2.0f});
}

TEST_CASE("QSGD levels lie in [0, s] and only the two neighbours of s|v_i|/||v|| occur", "[qsgd]") {
  CompressorOptions o;
  o.qsgdLevels = 4;
  auto c = make("qsgd", o);
  const auto v = gaussian(5000, 12);
  const double norm = std::sqrt(sqNorm(v));
  Compressed q;
  REQUIRE(c->compress(v, {1.0, 77}, q).isOk());
  REQUIRE(q.scales[0] == Approx(norm).epsilon(1e-6));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double x = 4.0 * std::fabs(v[i]) / norm;
    REQUIRE(q.levels[i] <= 4);
    REQUIRE(q.levels[i] >= std::floor(x) - 1e-9);
    REQUIRE(q.levels[i] <= std::ceil(x) + 1e-9);
  }
  CHECK(qsgdLevelBits(1) == 1);
  CHECK(qsgdLevelBits(4) == 3);
  CHECK(qsgdLevelBits(15) == 4);
  CHECK(qsgdLevelBits(255) == 8);
}
