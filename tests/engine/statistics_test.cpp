// The statistics round's parts: a shard's sums (data::featureSums), their merge
// (coordinator::mergeFeatureSums) and the scaling (data::scaleFeatures), checked against
// NumPy over the concatenated data.
#include "engine/statistics.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "starling/data/feature_scaling.hpp"

using starling::StatusCode;
using starling::coordinator::checkFeatureSums;
using starling::coordinator::mergeFeatureSums;
using starling::data::Dataset;
using starling::data::FeatureScaling;
using starling::data::FeatureSums;
using starling::data::featureSums;
using starling::data::scaleFeatures;

namespace {

constexpr std::size_t kDim = 4;

// n examples: feature 0 ~ N(0, 1), feature 1 ~ 1000 x N(5, 2), feature 2 constant 7,
// feature 3 ~ U(-0.001, 0.001); a client offset shifts feature 0 (non-iid shards).
std::vector<float> makeRows(std::size_t n, uint64_t seed, float offset) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> tiny(-0.001f, 0.001f);
  std::vector<float> x(n * kDim);
  for (std::size_t i = 0; i < n; ++i) {
    x[i * kDim + 0] = normal(rng) + offset;
    x[i * kDim + 1] = 1000.0f * (5.0f + 2.0f * normal(rng));
    x[i * kDim + 2] = 7.0f;
    x[i * kDim + 3] = tiny(rng);
  }
  return x;
}

Dataset dense(const std::vector<float>& x) {
  const std::size_t n = x.size() / kDim;
  std::vector<int32_t> labels(n, 0);
  return Dataset::fromFloats(x, labels, kDim, 2).value();
}

// NumPy's mean and population std (ddof 0) of each column of rows (float32 values as
// written, to 9 significant digits: they read back exactly); empty when Python is missing.
std::vector<std::pair<double, double>> numpyMoments(const std::vector<float>& rows) {
  if (access("/usr/bin/python3", X_OK) != 0) return {};
  const auto dir = std::filesystem::temp_directory_path();
  const auto data = dir / ("starling-stats-" + std::to_string(getpid()) + ".txt");
  {
    std::ofstream out(data);
    char buf[32];
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%.9g", double(rows[i]));
      out << buf << ((i + 1) % kDim == 0 ? "\n" : " ");
    }
  }
  const std::string cmd =
      "/usr/bin/python3 -c \"import numpy as np, sys; x = np.loadtxt(sys.argv[1], "
      "dtype=np.float32).astype(np.float64); [print(repr(m), repr(s)) for m, s in "
      "zip(x.mean(axis=0), x.std(axis=0))]\" " +
      data.string();
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string text;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p) != nullptr)
    text += buf;
  pclose(p);
  std::filesystem::remove(data);
  std::vector<std::pair<double, double>> out;
  std::istringstream in(text);
  double m = 0, s = 0;
  while (in >> m >> s)
    out.emplace_back(m, s);
  if (out.size() != kDim) WARN("numpy (/usr/bin/python3 with numpy) is missing: no reference");
  return out.size() == kDim ? out : std::vector<std::pair<double, double>>{};
}

}  // namespace

TEST_CASE("the merged statistics equal NumPy's over the union of the shards", "[statistics]") {
  const std::vector<float> a = makeRows(300, 1, 0.0f), b = makeRows(170, 2, 3.0f), c = makeRows(531, 3, -2.0f);
  std::map<std::string, FeatureSums> sums{
      {"client-b", featureSums(dense(b))}, {"client-a", featureSums(dense(a))}, {"client-c", featureSums(dense(c))}};
  for (const auto& [id, s] : sums)
    REQUIRE(checkFeatureSums(s, kDim).isOk());
  auto merged = mergeFeatureSums(sums);
  REQUIRE(merged.isOk());
  CHECK(merged->clients == std::vector<std::string>{"client-a", "client-b", "client-c"});
  CHECK(merged->examples == 1001);
  CHECK(merged->scaling.centre);

  std::vector<float> all = a;
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());
  const auto ref = numpyMoments(all);
  if (!ref.empty()) {
    for (std::size_t j = 0; j < kDim; ++j) {
      INFO("feature " << j);
      CHECK(merged->scaling.mean[j] == Approx(ref[j].first).epsilon(1e-9).margin(1e-12));
      if (j == 2) {
        CHECK(ref[j].second == 0.0);
        CHECK(merged->scaling.std[j] == 1.0);  // a constant feature is only centred
      } else {
        CHECK(merged->scaling.std[j] == Approx(ref[j].second).epsilon(1e-9));
      }
    }
  }

  SECTION("the scaled union has mean 0 and std 1 per non-constant feature") {
    auto scaled = scaleFeatures(dense(all), merged->scaling);
    REQUIRE(scaled.isOk());
    const FeatureSums s = featureSums(*scaled);
    for (std::size_t j = 0; j < kDim; ++j) {
      const double mean = s.sum[j] / s.count[j];
      CHECK(std::abs(mean) < 1e-5);
      if (j != 2) CHECK(std::sqrt(s.sumSquares[j] / s.count[j] - mean * mean) == Approx(1.0).epsilon(1e-5));
    }
  }
}

TEST_CASE("the merge does not depend on the order the answers arrived in", "[statistics]") {
  std::vector<std::pair<std::string, FeatureSums>> answers;
  for (int i = 0; i < 6; ++i)
    answers.emplace_back("c" + std::to_string(i), featureSums(dense(makeRows(50 + 37 * i, 10 + i, float(i)))));
  std::map<std::string, FeatureSums> forward(answers.begin(), answers.end());
  std::map<std::string, FeatureSums> backward(answers.rbegin(), answers.rend());
  std::mt19937_64 rng(5);
  std::shuffle(answers.begin(), answers.end(), rng);
  std::map<std::string, FeatureSums> shuffled;
  for (auto& [id, s] : answers)
    shuffled.emplace(id, s);
  const auto x = mergeFeatureSums(forward).value(), y = mergeFeatureSums(backward).value(),
             z = mergeFeatureSums(shuffled).value();
  CHECK(x.scaling == y.scaling);  // bit for bit
  CHECK(x.scaling == z.scaling);
}

TEST_CASE("malformed statistics are refused naming what is wrong", "[statistics]") {
  FeatureSums s = featureSums(dense(makeRows(20, 4, 0.0f)));
  SECTION("another number of features") {
    const auto st = checkFeatureSums(s, kDim + 1);
    CHECK(st.code() == StatusCode::kMalformed);
    CHECK_THAT(st.message(), Catch::Contains("4 features, the task's model has 5"));
  }
  SECTION("vectors of different lengths") {
    s.sumSquares.pop_back();
    CHECK(checkFeatureSums(s, kDim).code() == StatusCode::kMalformed);
  }
  SECTION("a count above the examples") {
    s.count[1] = 21;
    CHECK_THAT(checkFeatureSums(s, kDim).message(), Catch::Contains("feature 1: count 21 of 20 examples"));
  }
  SECTION("a sum that is not finite") {
    s.sum[3] = std::nan("");
    CHECK(checkFeatureSums(s, kDim).code() == StatusCode::kMalformed);
  }
  SECTION("clients that disagree are not merged") {
    FeatureSums other = s;
    other.sum.push_back(1);
    other.count.push_back(1);
    other.sumSquares.push_back(1);
    CHECK(mergeFeatureSums({{"a", s}, {"b", other}}).status().code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("sparse data is scaled by std, never centred", "[statistics]") {
  // Two rows of 3 features: {0: 2, 2: -4} and {1: 6}.
  auto sparse = Dataset::fromSparse({0, 2, 3}, {0, 2, 1}, {2.0f, -4.0f, 6.0f}, {0, 1}, 3, 2).value();
  const FeatureSums s = featureSums(sparse);
  CHECK(s.sparse);
  CHECK(s.count == std::vector<double>{2, 2, 2});
  CHECK(s.sum == std::vector<double>{2, 6, -4});
  CHECK(s.sumSquares == std::vector<double>{4, 36, 16});
  auto merged = mergeFeatureSums({{"only", s}}).value();
  CHECK_FALSE(merged.scaling.centre);
  CHECK(merged.scaling.std == std::vector<double>{1, 3, 2});  // population std of {2,0}, {0,6}, {-4,0}
  CHECK(scaleFeatures(sparse, FeatureScaling{merged.scaling.mean, merged.scaling.std, true}).status().code() ==
        StatusCode::kInvalidArgument);
  auto scaled = scaleFeatures(sparse, merged.scaling);
  REQUIRE(scaled.isOk());
  CHECK(scaled->isSparse());
  CHECK(scaled->nnz() == 3);
  std::vector<float> rows(6);
  const std::vector<uint32_t> idx{0, 1};
  scaled->gather(idx, rows);
  CHECK(rows == std::vector<float>{2, 0, -2, 0, 2, 0});
}
