#include "starling/data/dataset.hpp"

#include <catch2/catch.hpp>
#include <cmath>
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

namespace {

// A CSR dataset of 4 examples over 6 features, and the same examples dense.
struct SparseFixture {
  std::vector<uint64_t> offsets = {0, 2, 2, 5, 6};
  std::vector<uint32_t> indices = {1, 4, 0, 2, 5, 3};
  std::vector<float> values = {1.5f, -2.0f, 3.0f, 0.25f, 7.0f, -1.0f};
  std::vector<int32_t> labels = {0, 1, 2, 1};
  std::vector<float> dense = {
      0,    1.5f, 0,     0,     -2.0f, 0,     //
      0,    0,    0,     0,     0,     0,     //
      3.0f, 0,    0.25f, 0,     0,     7.0f,  //
      0,    0,    0,     -1.0f, 0,     0,     //
  };
};

}  // namespace

TEST_CASE("a sparse dataset holds CSR rows and gathers them sparse or densified", "[dataset][sparse]") {
  SparseFixture f;
  auto d = Dataset::fromSparse(f.offsets, f.indices, f.values, f.labels, 6, 3);
  REQUIRE(d.isOk());
  CHECK(d->isSparse());
  CHECK(d->size() == 4);
  CHECK(d->nnz() == 6);
  CHECK(d->featureDim() == 6);
  CHECK(d->shape() == std::vector<int>{6});
  CHECK(d->memoryBytes() == 5 * 8 + 6 * 4 + 6 * 4 + 4 * 4);
  auto dense = Dataset::fromFloats(f.dense, f.labels, 6, 3);
  REQUIRE(dense.isOk());
  CHECK_FALSE(dense->isSparse());
  CHECK(dense->nnz() == 24);

  const std::vector<uint32_t> idx = {3, 0, 1, 2, 0};
  SECTION("gather densifies the requested rows; it equals the dense dataset's gather") {
    std::vector<float> a(idx.size() * 6, 99.0f);
    std::vector<float> b(idx.size() * 6, -99.0f);
    d->gather(idx, a);
    dense->gather(idx, b);
    CHECK(a == b);
  }
  SECTION("gatherSparse yields the rows in CSR; a dense dataset yields its non-zeros") {
    SparseBatch s;
    s.indices = {42};  // stale contents are overwritten
    d->gatherSparse(idx, s);
    CHECK(s.rows() == 5);
    CHECK(s.offsets == std::vector<uint64_t>{0, 1, 3, 3, 6, 8});
    CHECK(s.indices == std::vector<uint32_t>{3, 1, 4, 0, 2, 5, 1, 4});
    CHECK(s.values == std::vector<float>{-1.0f, 1.5f, -2.0f, 3.0f, 0.25f, 7.0f, 1.5f, -2.0f});
    SparseBatch t;
    dense->gatherSparse(idx, t);
    CHECK(t.offsets == s.offsets);
    CHECK(t.indices == s.indices);
    CHECK(t.values == s.values);
  }
  SECTION("subset keeps CSR and the chosen rows, and its memory follows the non-zeros") {
    const std::vector<uint32_t> pick = {2, 2, 1};
    Dataset s = d->subset(pick);
    CHECK(s.isSparse());
    CHECK(s.size() == 3);
    CHECK(s.nnz() == 6);
    CHECK(s.label(0) == 2);
    CHECK(s.label(2) == 1);
    CHECK(s.memoryBytes() == 4 * 8 + 6 * 4 + 6 * 4 + 3 * 4);
    std::vector<float> out(18);
    s.gather(std::vector<uint32_t>{0, 1, 2}, out);
    std::vector<float> want(f.dense.begin() + 12, f.dense.begin() + 18);
    want.insert(want.end(), f.dense.begin() + 12, f.dense.begin() + 18);
    want.insert(want.end(), 6, 0.0f);
    CHECK(out == want);
  }
  SECTION("regression targets ride along") {
    auto r = Dataset::fromSparseTargets(f.offsets, f.indices, f.values, {0.5f, -1.0f, 2.0f, 3.0f}, 6);
    REQUIRE(r.isOk());
    CHECK(r->isRegression());
    CHECK(r->numClasses() == 1);
    CHECK(r->target(2) == 2.0f);
    const std::vector<uint32_t> pick = {3};
    Dataset s = r->subset(pick);
    CHECK(s.isRegression());
    CHECK(s.target(0) == 3.0f);
    CHECK(s.isSparse());
    CHECK_FALSE(Dataset::fromSparseTargets(f.offsets, f.indices, f.values, {0.5f, NAN, 2.0f, 3.0f}, 6).isOk());
  }
  SECTION("a featureDim of 10^9 costs nothing per feature") {
    auto wide = Dataset::fromSparse({0, 1, 2}, {999999999, 0}, {1.0f, 2.0f}, {0, 1}, 1000000000, 2);
    REQUIRE(wide.isOk());
    CHECK(wide->memoryBytes() == 3 * 8 + 2 * 4 + 2 * 4 + 2 * 4);
  }
}

TEST_CASE("a sparse dataset refuses inconsistent CSR", "[dataset][sparse]") {
  SparseFixture f;
  auto code = [](const Result<Dataset>& r) { return r.isOk() ? StatusCode::kOk : r.status().code(); };
  CHECK(code(Dataset::fromSparse({0, 2, 2, 5}, f.indices, f.values, f.labels, 6, 3)) == StatusCode::kInvalidArgument);
  CHECK(code(Dataset::fromSparse({1, 2, 2, 5, 6}, f.indices, f.values, f.labels, 6, 3)) ==
        StatusCode::kInvalidArgument);
  CHECK(code(Dataset::fromSparse({0, 2, 1, 5, 6}, f.indices, f.values, f.labels, 6, 3)) ==
        StatusCode::kInvalidArgument);
  CHECK(code(Dataset::fromSparse(f.offsets, f.indices, f.values, f.labels, 5, 3)) == StatusCode::kInvalidArgument);
  CHECK(code(Dataset::fromSparse(f.offsets, f.indices, {1.0f}, f.labels, 6, 3)) == StatusCode::kInvalidArgument);
  CHECK(code(Dataset::fromSparse(f.offsets, f.indices, f.values, {0, 1, 3, 1}, 6, 3)) == StatusCode::kInvalidArgument);
  auto unsorted = Dataset::fromSparse(f.offsets, {1, 4, 2, 0, 5, 3}, f.values, f.labels, 6, 3);
  REQUIRE_FALSE(unsorted.isOk());
  CHECK_THAT(unsorted.status().message(), Catch::Contains("example 2"));
  CHECK(code(Dataset::fromSparse(f.offsets, {1, 1, 0, 2, 5, 3}, f.values, f.labels, 6, 3)) ==
        StatusCode::kInvalidArgument);
}
