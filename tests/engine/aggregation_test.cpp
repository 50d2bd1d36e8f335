// Aggregator alone: weights, FedNova's step normalization, the norm check and its
// held-until-enough-norms rule, the sender mean and FedExP's statistic.

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "engine/aggregator.hpp"

using namespace starling;
using namespace starling::coordinator;

namespace {

// An update of `values` (every coordinate, or those at `indices` when given).
Contribution contribution(std::vector<float> values, uint64_t examples, uint32_t steps, uint32_t count,
                          std::vector<uint32_t> indices = {}) {
  Contribution c;
  c.delta.encoding = indices.empty() ? compression::Encoding::kDense32 : compression::Encoding::kTopK;
  c.delta.count = count;
  c.delta.indices = std::move(indices);
  double sq = 0;
  for (float x : values)
    sq += double(x) * x;
  c.norm = std::sqrt(sq);
  c.delta.values = std::move(values);
  c.examples = examples;
  c.steps = steps;
  return c;
}

Contribution dense(std::vector<float> v, uint64_t examples, uint32_t steps, uint32_t staleness = 0,
                   double selectionWeight = 1.0) {
  const auto count = static_cast<uint32_t>(v.size());
  Contribution c = contribution(std::move(v), examples, steps, count);
  c.staleness = staleness;
  c.selectionWeight = selectionWeight;
  return c;
}

Contribution sparse(uint32_t dim, std::vector<uint32_t> indices, std::vector<float> values, uint64_t examples) {
  return contribution(std::move(values), examples, 1, dim, std::move(indices));
}

}  // namespace

TEST_CASE("aggregation: examples-weighted mean of the per-step updates, times the mean steps (FedNova)",
          "[engine][aggregation]") {
  Aggregator agg(2, 0, false);
  agg.begin();
  // w = 100 and 300; per step 1/10 and 2/20 = 0.1 both; mean steps (100 x 10 + 300 x 20) / 400 = 17.5.
  auto a = dense({1.0f, 1.0f}, 100, 10);
  auto b = dense({2.0f, 2.0f}, 300, 20);
  CHECK_FALSE(agg.add(a, 0));
  CHECK_FALSE(agg.add(b, 0));
  CHECK(a.delta.values.empty());  // released
  CHECK(agg.weightSum() == 400);
  const auto delta = agg.finish();
  CHECK(delta[0] == Approx(1.75));
  CHECK(delta[1] == Approx(1.75));
}

TEST_CASE("aggregation: staleness weighs 1/sqrt(1 + s), the selection weight multiplies", "[engine][aggregation]") {
  Aggregator agg(1, 0, false);
  agg.begin();
  auto fresh = dense({1.0f}, 100, 1);
  auto stale = dense({4.0f}, 100, 1, 3);            // w = 100 / 2 = 50
  auto reweighted = dense({0.0f}, 100, 1, 0, 0.5);  // w = 50
  (void)agg.add(fresh, 0);
  (void)agg.add(stale, 0);
  (void)agg.add(reweighted, 0);
  CHECK(agg.weightSum() == Approx(200));
  // (100 x 1 + 50 x 4 + 50 x 0) / 200 = 1.5
  CHECK(agg.finish()[0] == Approx(1.5));
}

TEST_CASE("aggregation: the norm check waits for three norms, then judges against ratio x the upper median",
          "[engine][aggregation]") {
  Aggregator agg(1, 2.0, false);
  agg.begin();
  agg.noteNorm(1.0);
  CHECK_FALSE(agg.limitOnTime());
  agg.noteNorm(1.0);
  CHECK_FALSE(agg.limitOnTime());  // held: two norms say nothing
  agg.noteNorm(10.0);
  REQUIRE(agg.limitOnTime());
  CHECK(*agg.limitOnTime() == Approx(2.0));  // 2 x median{1, 1, 10}
  auto big = dense({10.0f}, 100, 1);
  const auto why = agg.add(big, *agg.limitOnTime());
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("update norm 10 is over 2 x the round's median"));
  CHECK(big.delta.values.empty());
  CHECK(agg.weightSum() == 0);
  auto small = dense({1.0f}, 100, 1);
  CHECK_FALSE(agg.add(small, *agg.limitOnTime()));
  CHECK(agg.finish()[0] == Approx(1.0));

  SECTION("at the close late updates' norms join the round's") {
    Aggregator close(1, 2.0, false);
    close.begin();
    close.noteNorm(1.0);
    CHECK(close.limitAtClose(std::vector<double>{5.0}) == 0);                 // still only two: no check
    CHECK(close.limitAtClose(std::vector<double>{3.0, 5.0}) == Approx(6.0));  // 2 x median{1, 3, 5}
  }
  SECTION("ratio 0: no check, nothing held") {
    Aggregator off(1, 0, false);
    off.begin();
    REQUIRE(off.limitOnTime());
    CHECK(*off.limitOnTime() == 0);
  }
}

TEST_CASE("aggregation: the sender mean divides each coordinate by the weight of the updates that sent it",
          "[engine][aggregation]") {
  for (const bool senderMean : {false, true}) {
    Aggregator agg(4, 0, senderMean);
    agg.begin();
    auto a = sparse(4, {0, 1}, {1.0f, 1.0f}, 100);
    auto b = sparse(4, {1, 2}, {3.0f, 3.0f}, 100);
    (void)agg.add(a, 0);
    (void)agg.add(b, 0);
    const auto d = agg.finish();
    if (senderMean) {  // coordinate 0 from a alone, 1 from both, 2 from b alone
      CHECK(d[0] == Approx(1.0));
      CHECK(d[1] == Approx(2.0));
      CHECK(d[2] == Approx(3.0));
    } else {  // over both updates
      CHECK(d[0] == Approx(0.5));
      CHECK(d[1] == Approx(2.0));
      CHECK(d[2] == Approx(1.5));
    }
    CHECK(d[3] == 0);
  }
}

TEST_CASE("aggregation: FedExP's spread is the weighted mean of the updates' squared norms as they enter Delta",
          "[engine][aggregation]") {
  Aggregator agg(4, 0, false);
  agg.begin();
  CHECK_FALSE(agg.spread());  // nothing added
  for (uint32_t i = 0; i < 4; ++i) {
    std::vector<float> v(4, 0.0f);
    v[i] = 2.0f;
    auto c = dense(v, 100, 1);
    (void)agg.add(c, 0);
  }
  REQUIRE(agg.spread());
  CHECK(*agg.spread() == Approx(4.0));  // each ||a_k||^2 = 4
  const auto d = agg.finish();
  for (float x : d)
    CHECK(x == Approx(0.5));
  agg.begin();  // a new round starts from zero
  CHECK(agg.weightSum() == 0);
  CHECK(agg.finish()[0] == 0);
}
