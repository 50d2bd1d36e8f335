// The synthetic power-law data set (starling/data/synthetic.hpp): deterministic for a
// seed, its feature frequencies fall with the stated exponent, the labels are the planted
// model's with the stated noise.

#include "starling/data/synthetic.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <vector>

using namespace starling;
using namespace starling::data;

namespace {

SparseBatch all(const Dataset& d) {
  std::vector<uint32_t> idx(d.size());
  std::iota(idx.begin(), idx.end(), 0u);
  SparseBatch b;
  d.gatherSparse(idx, b);
  return b;
}

// The least-squares slope of log(document frequency) on log(rank), ranks by observed
// frequency, over the features appearing in 0.3% to 3% of the examples: above that the
// most popular features saturate (they appear in most examples whatever their token
// probability), below it the counts are few and noisy.
double fittedSlope(const Dataset& d) {
  const SparseBatch b = all(d);
  std::vector<uint32_t> df(d.featureDim(), 0);
  for (uint32_t f : b.indices)
    ++df[f];
  std::sort(df.begin(), df.end(), std::greater<>());
  const double n = static_cast<double>(d.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0, m = 0;
  for (std::size_t r = 0; r < df.size(); ++r) {
    const double share = df[r] / n;
    if (share > 0.03 || share < 0.003) continue;
    const double x = std::log(static_cast<double>(r + 1));
    const double y = std::log(static_cast<double>(df[r]));
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    m += 1;
  }
  REQUIRE(m >= 50);
  return (m * sxy - sx * sy) / (m * sxx - sx * sx);
}

PowerLawOptions sized(std::size_t examples, uint32_t features) {
  PowerLawOptions o;
  o.examples = examples;
  o.features = features;
  return o;
}

}  // namespace

TEST_CASE("powerLawSparse is deterministic for a seed", "[synthetic]") {
  PowerLawOptions o = sized(2000, 1u << 16);
  o.seed = 7;
  auto a = powerLawSparse(o);
  auto b = powerLawSparse(o);
  REQUIRE(a.isOk());
  REQUIRE(b.isOk());
  const SparseBatch ba = all(*a);
  const SparseBatch bb = all(*b);
  CHECK(ba.offsets == bb.offsets);
  CHECK(ba.indices == bb.indices);
  CHECK(ba.values == bb.values);
  CHECK(std::equal(a->labels().begin(), a->labels().end(), b->labels().begin(), b->labels().end()));
  o.seed = 8;
  auto c = powerLawSparse(o);
  REQUIRE(c.isOk());
  CHECK(all(*c).indices != ba.indices);
}

TEST_CASE("powerLawSparse rows: K tokens, unit norm, binary labels of both classes", "[synthetic]") {
  PowerLawOptions o;
  o.examples = 3000;
  o.tokens = 20;
  auto d = powerLawSparse(o);
  REQUIRE(d.isOk());
  CHECK(d->isSparse());
  CHECK(d->featureDim() == (1u << 20));
  CHECK(d->numClasses() == 2);
  const SparseBatch b = all(*d);
  for (std::size_t r = 0; r < b.rows(); ++r) {
    const std::size_t nnz = b.offsets[r + 1] - b.offsets[r];
    CHECK(nnz >= 1);
    CHECK(nnz <= 20);
    double squares = 0;
    for (std::size_t k = b.offsets[r]; k < b.offsets[r + 1]; ++k)
      squares += static_cast<double>(b.values[k]) * b.values[k];
    CHECK(squares == Approx(1.0).epsilon(1e-5));
  }
  const auto ones = std::count(d->labels().begin(), d->labels().end(), 1);
  CHECK(ones > 3000 * 3 / 10);
  CHECK(ones < 3000 * 7 / 10);
}

TEST_CASE("powerLawSparse feature frequencies follow the stated exponent", "[synthetic]") {
  for (double s : {0.8, 1.1, 1.5}) {
    PowerLawOptions o;
    o.examples = 50000;
    o.exponent = s;
    o.seed = 3;
    auto d = powerLawSparse(o);
    REQUIRE(d.isOk());
    const double slope = fittedSlope(*d);
    INFO("exponent " << s << ": fitted log-log slope " << slope);
    CHECK(slope == Approx(-s).margin(0.1));
  }
}

TEST_CASE("powerLawSparse flips the stated share of labels", "[synthetic]") {
  PowerLawOptions o = sized(20000, 1u << 14);
  o.labelNoise = 0;
  auto clean = powerLawSparse(o);
  o.labelNoise = 0.2;
  auto noisy = powerLawSparse(o);
  REQUIRE(clean.isOk());
  REQUIRE(noisy.isOk());
  std::size_t flipped = 0;
  for (std::size_t i = 0; i < clean->size(); ++i)
    flipped += clean->label(i) != noisy->label(i) ? 1 : 0;
  CHECK(static_cast<double>(flipped) / 20000 == Approx(0.2).margin(0.015));
}

TEST_CASE("powerLawSparse refuses options out of range by name", "[synthetic]") {
  struct Bad {
    void (*set)(PowerLawOptions&);
    const char* what;
  };
  const Bad cases[] = {
      {[](PowerLawOptions& o) { o.examples = 0; }, "examples"},
      {[](PowerLawOptions& o) { o.features = 0; }, "features 0"},
      {[](PowerLawOptions& o) { o.features = kMaxPowerLawFeatures + 1; }, "not in [1, 2^28]"},
      {[](PowerLawOptions& o) { o.tokens = 0; }, "tokens"},
      {[](PowerLawOptions& o) { o.exponent = 0; }, "exponent"},
      {[](PowerLawOptions& o) { o.exponent = std::nan(""); }, "exponent"},
      {[](PowerLawOptions& o) { o.plantedFraction = 1.5; }, "plantedFraction"},
      {[](PowerLawOptions& o) { o.labelNoise = 0.6; }, "labelNoise"},
  };
  for (const Bad& bad : cases) {
    PowerLawOptions o;
    bad.set(o);
    auto d = powerLawSparse(o);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(d.status().message(), Catch::Contains(bad.what));
  }
}
