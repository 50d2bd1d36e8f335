// The features a data set touches (starling/data/touched_features.hpp): the input side of
// a row set, on hand-built sparse and dense data sets.

#include "starling/data/touched_features.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace starling;
using namespace starling::data;

namespace {

// Four examples over 10 features:
//   0: 1:0.5 4:1      1: 4:2 7:0 (an explicit zero)      2: (none)      3: 9:1 1:-3
Dataset handBuilt() {
  auto d = Dataset::fromSparse({0, 2, 4, 4, 6}, {1, 4, 4, 7, 1, 9}, {0.5f, 1.0f, 2.0f, 0.0f, -3.0f, 1.0f}, {0, 1, 0, 1},
                               10, 2);
  REQUIRE(d.isOk());
  return std::move(d).value();
}

}  // namespace

TEST_CASE("featuresTouched lists the non-zero features of a sparse data set", "[touched]") {
  const Dataset d = handBuilt();
  CHECK(featuresTouched(d) == std::vector<uint32_t>{1, 4, 9});
  SECTION("over a client's examples only") {
    CHECK(featuresTouched(d, std::vector<uint32_t>{1}) == std::vector<uint32_t>{4});
    CHECK(featuresTouched(d, std::vector<uint32_t>{3, 0}) == std::vector<uint32_t>{1, 4, 9});
    CHECK(featuresTouched(d, std::vector<uint32_t>{2}).empty());
    CHECK(featuresTouched(d, std::vector<uint32_t>{}).empty());
  }
  SECTION("features at the top of a 2^20 space, across words of the bit set") {
    auto wide = Dataset::fromSparse({0, 2, 3}, {63, (1u << 20) - 1, 64}, {1, 1, 1}, {0, 1}, std::size_t{1} << 20, 2);
    REQUIRE(wide.isOk());
    CHECK(featuresTouched(*wide) == std::vector<uint32_t>{63, 64, (1u << 20) - 1});
  }
}

TEST_CASE("featuresTouched lists the non-zero features of a dense data set", "[touched]") {
  // Three examples of four features.
  auto d = Dataset::fromFloats({0, 0, 1, 0, /**/ 0, 0, 2, 0, /**/ 5, 0, 0, 0}, {0, 1, 0}, 4, 2);
  REQUIRE(d.isOk());
  CHECK(featuresTouched(*d) == std::vector<uint32_t>{0, 2});
  CHECK(featuresTouched(*d, std::vector<uint32_t>{0, 1}) == std::vector<uint32_t>{2});
}

TEST_CASE("featuresTouched over many examples agrees with a direct count", "[touched]") {
  // 1,000 examples of 3 features each at positions that depend on the example: more than
  // one batch of the implementation.
  std::vector<uint64_t> offsets{0};
  std::vector<uint32_t> indices;
  std::vector<float> values;
  std::vector<int32_t> labels;
  std::vector<bool> expected(5000, false);
  for (uint32_t i = 0; i < 1000; ++i) {
    for (uint32_t f : {i % 7, 100 + (i * 37) % 1000, 2000 + (i * i) % 3000}) {
      indices.push_back(f);
      values.push_back(1.0f);
      expected[f] = true;
    }
    offsets.push_back(indices.size());
    labels.push_back(static_cast<int32_t>(i % 2));
  }
  auto d = Dataset::fromSparse(offsets, indices, values, labels, 5000, 2);
  REQUIRE(d.isOk());
  std::vector<uint32_t> reference;
  for (uint32_t f = 0; f < expected.size(); ++f)
    if (expected[f]) reference.push_back(f);
  CHECK(featuresTouched(*d) == reference);
}

TEST_CASE("restrictFeatures renames the kept features and refuses one it does not keep", "[touched-features]") {
  // Example 0: features 2 and 9; example 1: 5, and an explicit 0 at 7.
  auto d = starling::data::Dataset::fromSparse({0, 2, 4}, {2, 9, 5, 7}, {1.5f, -2.0f, 3.0f, 0.0f}, {1, 0}, 12, 2);
  REQUIRE(d.isOk());
  const std::vector<uint32_t> keep{2, 5, 9};
  auto r = starling::data::restrictFeatures(*d, keep);
  REQUIRE(r.isOk());
  CHECK(r->featureDim() == 3);
  CHECK(r->size() == 2);
  CHECK(r->label(0) == 1);
  CHECK(r->label(1) == 0);
  std::vector<float> dense(6);
  const std::vector<uint32_t> both{0, 1};
  r->gather(both, dense);
  CHECK(dense == std::vector<float>{1.5f, 0.0f, -2.0f, 0.0f, 3.0f, 0.0f});
  const std::vector<uint32_t> missing{2, 9};
  auto bad = starling::data::restrictFeatures(*d, missing);
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().message().find("example 1 has feature 5") != std::string::npos);
  const std::vector<uint32_t> unordered{5, 2};
  CHECK(starling::data::restrictFeatures(*d, unordered).status().code() == starling::StatusCode::kInvalidArgument);
}
