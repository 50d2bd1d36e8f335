// RowView and compactSpec (issue 22, sparse models): the compact model of some rows is
// the full model restricted to them. Checked the independent way: the compact network,
// given the view's parameters and the data with its features renamed
// (data::restrictFeatures), computes the same outputs, loss and gradient as the full
// network on the original data, the gradient at the view's positions and zero elsewhere.
#include "starling/model/row_view.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/data/touched_features.hpp"
#include "starling/model/model.hpp"

#include "support/sparse_data.hpp"

using starling::StatusCode;
using starling::data::Dataset;
using starling::model::compactSpec;
using starling::model::Model;
using starling::model::RowView;

namespace {

Model build(const std::string& spec) {
  auto m = Model::fromSpec(spec);
  REQUIRE(m.isOk());
  return std::move(m).value();
}

// n examples over dim features, each with a few features drawn from the first `used`.

}  // namespace

TEST_CASE("compactSpec replaces the input size of linear, mlp and embedbag specs", "[row-view]") {
  CHECK(*compactSpec("linear:1048576-1/logistic", 7) == "linear:7-1/logistic");
  CHECK(*compactSpec("mlp:784-200-10", 30) == "mlp:30-200-10");
  CHECK(*compactSpec("mlp:tanh:64-8-2", 5) == "mlp:tanh:5-8-2");
  CHECK(*compactSpec("embedbag:262144-16-32-2/logistic", 9) == "embedbag:9-16-32-2/logistic");
  CHECK(*starling::model::specInputs("embedbag:tanh:262144-16-2") == 262144);
  CHECK(compactSpec("cnn:1x28x28-c16k5-p2-f128-10", 3).status().code() == StatusCode::kInvalidArgument);
  CHECK(compactSpec("linear:10-2", 0).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a view names the rows' parameters and the dense rest, in the order of the full vector", "[row-view]") {
  const Model m = build("linear:6-2");  // weight {2, 6}, then the bias (2)
  auto v = RowView::create(m, {1, 2, 5});
  REQUIRE(v.isOk());
  const RowView& view = **v;
  CHECK(view.size() == 3 * 2 + 2);
  CHECK(view.fullSize() == 14);
  CHECK(view.spec() == "linear:3-2");
  std::vector<float> full(14);
  for (std::size_t i = 0; i < full.size(); ++i)
    full[i] = float(i);
  // Output 0's columns 1, 2, 5, output 1's (6 + those), the bias (12, 13).
  CHECK(view.gather(full) == std::vector<float>{1, 2, 5, 7, 8, 11, 12, 13});
  // scatter() writes those positions back and leaves the others.
  std::vector<float> back(14, -1.0f);
  view.scatter(std::vector<float>{1, 2, 5, 7, 8, 11, 12, 13}, back);
  CHECK(back == std::vector<float>{-1, 1, 2, -1, -1, 5, -1, 7, 8, -1, -1, 11, 12, 13});
  std::vector<uint32_t> positions{0, 2, 3, 7};
  REQUIRE(view.toFull(positions).isOk());
  CHECK(positions == std::vector<uint32_t>{1, 5, 7, 13});
  std::vector<uint32_t> unordered{3, 2};
  CHECK(view.toFull(unordered).code() == StatusCode::kInvalidArgument);
  std::vector<uint32_t> past{8};
  CHECK(view.toFull(past).code() == StatusCode::kInvalidArgument);
  CHECK(RowView::create(m, {}).status().code() == StatusCode::kInvalidArgument);
  CHECK(RowView::create(m, {2, 1}).status().code() == StatusCode::kInvalidArgument);
  CHECK(RowView::create(m, {6}).status().code() == StatusCode::kInvalidArgument);
  CHECK(RowView::create(build("cnn:1x8x8-c2k3-p2-4"), {1}).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("the compact model on renamed features is the full model on the originals", "[row-view]") {
  const std::string spec =
      GENERATE(std::string("linear:400-3"), std::string("mlp:tanh:400-8-3"), std::string("embedbag:400-6-5-3"));
  INFO(spec);
  Model full = build(spec);
  full.initialize(7);
  // Non-zero biases and weights everywhere, so that a wrong position shows.
  std::mt19937_64 rng(3);
  for (float& p : full.params())
    p += float(int(rng() % 200) - 100) / 1000.0f;
  const Dataset data = starling::test::sparseData(40, 400, 50, 4, 3, 11);
  const std::vector<uint32_t> rows = starling::data::featuresTouched(data);
  REQUIRE(rows.size() < 200);  // a strict part of the 400 rows
  auto v = RowView::create(full, rows);
  REQUIRE(v.isOk());
  const RowView& view = **v;
  REQUIRE(view.checkCompact().isOk());
  Model compact = build(view.spec());
  REQUIRE(compact.setParams(view.gather(full.params())).isOk());
  auto renamed = starling::data::restrictFeatures(data, rows);
  REQUIRE(renamed.isOk());
  REQUIRE(renamed->featureDim() == rows.size());

  std::vector<uint32_t> all(data.size());
  for (uint32_t i = 0; i < all.size(); ++i)
    all[i] = i;
  starling::data::SparseBatch a, b;
  data.gatherSparse(all, a);
  renamed->gatherSparse(all, b);
  std::vector<float> y(data.size());
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] = float(data.label(i));
  std::vector<float> gFull(full.numParams()), gCompact(compact.numParams());
  const float lossFull = full.forwardBackwardSparse(a, y.data(), nullptr, gFull);
  const std::vector<float> outFull(full.probabilities().begin(), full.probabilities().end());
  const float lossCompact = compact.forwardBackwardSparse(b, y.data(), nullptr, gCompact);
  const std::vector<float> outCompact(compact.probabilities().begin(), compact.probabilities().end());
  // The same arithmetic in the same order: equal bit for bit.
  CHECK(lossCompact == lossFull);
  CHECK(outCompact == outFull);
  CHECK(view.gather(gFull) == gCompact);
  // The gradient is zero off the view (the rows the data does not touch).
  std::vector<float> offView = gFull;
  for (const auto& r : view.ranges())
    std::fill_n(offView.begin() + static_cast<std::ptrdiff_t>(r.offset), r.count, 0.0f);
  CHECK(std::all_of(offView.begin(), offView.end(), [](float g) { return g == 0.0f; }));
  CHECK(view.checksum(full.params()) != 0);
}
