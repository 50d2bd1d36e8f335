#include "starling/data/dataset.hpp"

#include <catch2/catch.hpp>
#include <vector>

using namespace starling;
using namespace starling::data;

TEST_CASE("a byte dataset keeps one byte per feature and converts per batch", "[dataset]") {
  // Three examples of four features: example i holds 10*i .. 10*i+3.
  std::vector<uint8_t> bytes = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 255};
  auto d = Dataset::fromBytes(bytes, {0, 2, 1}, 4, 3, 0.5f, {1, 2, 2});
  REQUIRE(d.isOk());
  CHECK(d->size() == 3);
  CHECK(d->featureDim() == 4);
  CHECK(d->numClasses() == 3);
  CHECK(d->shape() == std::vector<int>{1, 2, 2});
  CHECK(d->label(1) == 2);
  CHECK(d->labels().size() == 3);
  CHECK(d->memoryBytes() == 12 * 1 + 3 * 4);

  SECTION("gather writes the rows asked for, in that order, scaled") {
    std::vector<uint32_t> idx = {2, 0, 2};
    std::vector<float> out(idx.size() * 4, -1.0f);
    d->gather(idx, out);
    CHECK(out == std::vector<float>{10.0f, 10.5f, 11.0f, 127.5f, 0.0f, 0.5f, 1.0f, 1.5f, 10.0f, 10.5f, 11.0f, 127.5f});
  }
  SECTION("the default scale maps bytes to [0, 1]") {
    auto unit = Dataset::fromBytes(bytes, {0, 2, 1}, 4, 3);
    REQUIRE(unit.isOk());
    std::vector<uint32_t> idx = {2};
    std::vector<float> out(4);
    unit->gather(idx, out);
    CHECK(out[3] == 1.0f);
    CHECK(out[0] == Approx(20.0f / 255.0f));
    CHECK(unit->shape() == std::vector<int>{4});
  }
  SECTION("an empty batch writes nothing") {
    std::vector<float> out;
    d->gather({}, out);
    CHECK(out.empty());
  }
  SECTION("subset copies the chosen examples, still as bytes") {
    std::vector<uint32_t> idx = {1, 1, 0};
    Dataset s = d->subset(idx);
    CHECK(s.size() == 3);
    CHECK(s.label(0) == 2);
    CHECK(s.label(2) == 0);
    CHECK(s.memoryBytes() == 12 + 12);
    std::vector<uint32_t> all = {0, 1, 2};
    std::vector<float> out(12);
    s.gather(all, out);
    CHECK(out[0] == 5.0f);  // example 1, feature 0: 10 * 0.5
    CHECK(out[8] == 0.0f);  // example 0, feature 0
    CHECK(s.shape() == d->shape());
  }
}

TEST_CASE("a float dataset gathers rows unchanged", "[dataset]") {
  auto d = Dataset::fromFloats({1.5f, -2.0f, 3.25f, 4.0f}, {1, 0}, 2, 2);
  REQUIRE(d.isOk());
  CHECK(d->memoryBytes() == 4 * 4 + 2 * 4);
  std::vector<uint32_t> idx = {1, 0};
  std::vector<float> out(4);
  d->gather(idx, out);
  CHECK(out == std::vector<float>{3.25f, 4.0f, 1.5f, -2.0f});
  Dataset s = d->subset(std::vector<uint32_t>{1});
  std::vector<float> one(2);
  s.gather(std::vector<uint32_t>{0}, one);
  CHECK(one == std::vector<float>{3.25f, 4.0f});
  CHECK(s.label(0) == 0);
}

TEST_CASE("a dataset refuses inconsistent contents", "[dataset]") {
  SECTION("features that do not divide into the examples") {
    auto d = Dataset::fromBytes({1, 2, 3}, {0, 0}, 2, 1);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == StatusCode::kInvalidArgument);
  }
  SECTION("a label outside [0, numClasses)") {
    CHECK_FALSE(Dataset::fromFloats({1, 2}, {0, 3}, 1, 3).isOk());
    CHECK_FALSE(Dataset::fromFloats({1, 2}, {-1, 0}, 1, 3).isOk());
  }
  SECTION("a shape that does not multiply to featureDim") {
    auto d = Dataset::fromBytes({1, 2, 3, 4}, {0}, 4, 1, 1.0f, {1, 3});
    REQUIRE_FALSE(d.isOk());
    CHECK_THAT(d.status().message(), Catch::Contains("shape"));
  }
  SECTION("zero features or classes") {
    CHECK_FALSE(Dataset::fromBytes({}, {}, 0, 1).isOk());
    CHECK_FALSE(Dataset::fromBytes({1}, {0}, 1, 0).isOk());
  }
}
