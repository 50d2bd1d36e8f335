// Model::firstLayerRows and denseParams: the parameters a first-layer row owns (issue 22,
// sparse models), by hand for small layouts and against the ranges the sparse backward
// pass reports as touched (forwardBackwardSparse), an independent path.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "starling/model/model.hpp"

using starling::StatusCode;
using starling::data::SparseBatch;
using starling::model::Model;
using starling::model::ParamRange;

namespace {

Model build(const std::string& spec) {
  auto m = Model::fromSpec(spec);
  REQUIRE(m.isOk());
  return std::move(m).value();
}

std::vector<std::pair<std::size_t, std::size_t>> pairs(const std::vector<ParamRange>& ranges) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const ParamRange& r : ranges)
    out.emplace_back(r.offset, r.count);
  return out;
}

// Parameter i is covered by some range.
std::vector<bool> cover(const std::vector<ParamRange>& ranges, std::size_t n) {
  std::vector<bool> out(n, false);
  for (const ParamRange& r : ranges) {
    REQUIRE(r.offset + r.count <= n);
    for (std::size_t i = r.offset; i < r.offset + r.count; ++i)
      out[i] = true;
  }
  return out;
}

}  // namespace

TEST_CASE("a linear model's row j is column j of its weight, one float per output", "[first-layer-rows]") {
  const Model m = build("linear:6-3");
  REQUIRE(m.layout().find("dense0.weight")->offset == 0);
  auto r = m.firstLayerRows(std::vector<uint32_t>{1, 2, 4});
  REQUIRE(r.isOk());
  // Output o's weights start at 6 o; rows 1 and 2 are adjacent, so one range of 2.
  CHECK(pairs(*r) ==
        std::vector<std::pair<std::size_t, std::size_t>>{{1, 2}, {4, 1}, {7, 2}, {10, 1}, {13, 2}, {16, 1}});
  CHECK(m.denseParams().offset == 18);  // the bias
  CHECK(m.denseParams().count == 3);
  SECTION("every row: the whole weight, one range") {
    auto all = m.firstLayerRows(std::vector<uint32_t>{0, 1, 2, 3, 4, 5});
    REQUIRE(all.isOk());
    CHECK(pairs(*all) == std::vector<std::pair<std::size_t, std::size_t>>{{0, 18}});
  }
  SECTION("no row: no range") {
    CHECK(m.firstLayerRows(std::vector<uint32_t>{})->empty());
  }
}

TEST_CASE("an embedding bag's row j is row j of its table", "[first-layer-rows]") {
  const Model m = build("embedbag:10-4-2");
  const auto* table = m.layout().find("embed.weight");
  REQUIRE(table != nullptr);
  auto r = m.firstLayerRows(std::vector<uint32_t>{0, 1, 5, 9});
  REQUIRE(r.isOk());
  const std::size_t t = table->offset;
  CHECK(pairs(*r) == std::vector<std::pair<std::size_t, std::size_t>>{{t, 8}, {t + 20, 4}, {t + 36, 4}});
  CHECK(m.denseParams().offset == t + 40);
  CHECK(m.denseParams().offset + m.denseParams().count == m.numParams());
}

TEST_CASE("first-layer rows plus the dense part are what the sparse backward pass touches", "[first-layer-rows]") {
  for (const char* spec : {"linear:40-3", "mlp:tanh:40-8-2", "embedbag:40-6-3", "embedbag:mean:40-5-4-1/logistic"}) {
    INFO(spec);
    Model m = build(spec);
    m.initialize(3);
    std::mt19937_64 rng(11);
    SparseBatch batch;
    batch.clear();
    std::vector<float> y;
    for (int r = 0; r < 5; ++r) {
      std::set<uint32_t> cols;
      while (cols.size() < 4)
        cols.insert(static_cast<uint32_t>(rng() % 40));
      for (uint32_t c : cols) {
        batch.indices.push_back(c);
        batch.values.push_back(0.5f + static_cast<float>(rng() % 4));
      }
      batch.offsets.push_back(batch.indices.size());
      y.push_back(
          static_cast<float>(rng() % static_cast<uint64_t>(std::max(2, m.numClasses() == 1 ? 2 : m.numClasses()))));
    }
    std::vector<float> grad(m.numParams());
    std::vector<ParamRange> touched;
    m.forwardBackwardSparse(batch, y.data(), nullptr, grad, &touched);

    std::vector<uint32_t> rows(batch.indices.begin(), batch.indices.end());
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    auto ranges = m.firstLayerRows(rows);
    REQUIRE(ranges.isOk());
    for (std::size_t k = 1; k < ranges->size(); ++k)
      CHECK((*ranges)[k].offset > (*ranges)[k - 1].offset + (*ranges)[k - 1].count);  // sorted, merged
    ranges->push_back(m.denseParams());
    CHECK(cover(*ranges, m.numParams()) == cover(touched, m.numParams()));
  }
}

TEST_CASE("firstLayerRows refuses rows out of order or range, and models without rows", "[first-layer-rows]") {
  const Model m = build("linear:6-3");
  auto unsorted = m.firstLayerRows(std::vector<uint32_t>{2, 2});
  REQUIRE_FALSE(unsorted.isOk());
  CHECK(unsorted.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(unsorted.status().message(), Catch::Contains("position 1 (row 2)"));
  auto outside = m.firstLayerRows(std::vector<uint32_t>{6});
  REQUIRE_FALSE(outside.isOk());
  CHECK_THAT(outside.status().message(), Catch::Contains("below the model's 6 inputs"));
  const Model cnn = build("cnn:1x8x8-c4k3-p2-10");
  auto none = cnn.firstLayerRows(std::vector<uint32_t>{0});
  REQUIRE_FALSE(none.isOk());
  CHECK_THAT(none.status().message(), Catch::Contains("has no first-layer rows"));
  CHECK(cnn.denseParams().offset == 0);
  CHECK(cnn.denseParams().count == cnn.numParams());
}
