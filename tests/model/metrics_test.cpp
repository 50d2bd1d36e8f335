// Metrics per task: hand-computed values, an independent NumPy/PyTorch reference run at
// test time, the AUC binning bound, merging and the wire form of EvalStats.
#include "starling/model/metrics.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/model/model.hpp"

using starling::StatusCode;
using starling::data::Dataset;
using starling::data::TaskKind;
using starling::model::aucBin;
using starling::model::EvalStats;
using starling::model::exactAuc;
using starling::model::finalize;
using starling::model::kAucBins;
using starling::model::Model;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

// The reference: reads "task n k", then n lines of k outputs and a label, and prints
// "name value" lines computed with NumPy (top-5 by a stable sort of each row). Independent of
// the C++ code: the AUC by comparing every (positive, negative) pair.
constexpr const char* kReference = R"PY(
import sys
import numpy as np
lines = open(sys.argv[1]).read().split("\n")
task, n, k = lines[0].split()
n, k = int(n), int(k)
rows = np.array([[float(v) for v in l.split()] for l in lines[1:1 + n]], dtype=np.float64)
out, y = rows[:, :k], rows[:, k]
res = {}
if task == "classification":
    lab = y.astype(np.int64)
    res["loss"] = float(np.mean(-np.log(np.maximum(out[np.arange(n), lab], 1e-30))))
    res["accuracy"] = float(np.mean(np.argmax(out, axis=1) == lab))
    top = np.argsort(-out, axis=1, kind="stable")[:, :5]
    res["top5"] = float(np.mean([lab[i] in top[i] for i in range(n)]))
elif task == "binary":
    p = out[:, 0]
    res["loss"] = float(np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p))))
    res["accuracy"] = float(np.mean((p >= 0.5) == (y == 1)))
    pos, neg = p[y == 1], p[y == 0]
    cmp = (pos[:, None] > neg[None, :]).astype(np.float64) + 0.5 * (pos[:, None] == neg[None, :])
    res["auc"] = float(cmp.mean())
else:
    f = out[:, 0]
    r = f - y
    res["loss"] = float(np.mean(0.5 * r * r))
    res["rmse"] = float(np.sqrt(np.mean(r * r)))
    res["mae"] = float(np.mean(np.abs(r)))
    res["r2"] = float(1 - np.sum(r * r) / np.sum((y - y.mean()) ** 2))
for name, v in res.items():
    print(name, repr(v))
)PY";

// Runs the reference on outputs (n rows of k) and labels; empty when Python is missing.
std::map<std::string, double> reference(const std::string& task, std::span<const float> outputs, int k,
                                        std::span<const float> labels) {
  std::map<std::string, double> res;
  if (access(kPython, X_OK) != 0) return res;
  const auto dir = std::filesystem::temp_directory_path();
  const std::string stem = "starling-metrics-" + std::to_string(getpid()) + "-" + task;
  const auto script = dir / (stem + ".py");
  const auto input = dir / (stem + ".txt");
  const auto output = dir / (stem + ".out");
  std::ofstream(script) << kReference;
  {
    std::ofstream in(input);
    in.precision(9);
    in << task << " " << labels.size() << " " << k << "\n";
    for (std::size_t i = 0; i < labels.size(); ++i) {
      for (int c = 0; c < k; ++c)
        in << outputs[i * k + c] << " ";
      in << labels[i] << "\n";
    }
  }
  const std::string cmd =
      std::string(kPython) + " " + script.string() + " " + input.string() + " > " + output.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream out(output);
  std::string name;
  double v = 0;
  while (out >> name >> v)
    res[name] = v;
  INFO("reference exit " << rc);
  REQUIRE(rc == 0);
  std::filesystem::remove(script);
  std::filesystem::remove(input);
  std::filesystem::remove(output);
  return res;
}

Model linearModel(const char* spec, uint64_t seed, float scale) {
  auto m = Model::fromSpec(spec);
  REQUIRE(m.isOk());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, scale);
  for (float& p : m->params())
    p = g(rng);
  return std::move(m).value();
}

// The outputs of m on every example of d.
std::vector<float> outputsOf(Model& m, const Dataset& d) {
  std::vector<uint32_t> idx(d.size());
  for (uint32_t i = 0; i < idx.size(); ++i)
    idx[i] = i;
  std::vector<float> x(d.size() * d.featureDim());
  d.gather(idx, x);
  auto p = m.forward(x.data(), static_cast<int>(d.size()));
  return {p.begin(), p.end()};
}

std::vector<float> gaussians(std::size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v)
    x = g(rng);
  return v;
}

}  // namespace

TEST_CASE("exactAuc by hand, ties counted one half", "[model][metrics]") {
  const std::vector<float> s = {0.1f, 0.4f, 0.35f, 0.8f};
  const std::vector<int32_t> y = {0, 0, 1, 1};
  CHECK(exactAuc(s, y) == Approx(0.75));
  // Positives {0.5, 0.9}, negatives {0.5, 0.2}: 0.5 + 1 + 1 + 1 over 4.
  CHECK(exactAuc(std::vector<float>{0.5f, 0.5f, 0.2f, 0.9f}, std::vector<int32_t>{1, 0, 0, 1}) == Approx(0.875));
  CHECK(exactAuc(std::vector<float>{0.3f, 0.3f, 0.3f}, std::vector<int32_t>{1, 0, 1}) == Approx(0.5));
  CHECK(exactAuc(std::vector<float>{0.9f, 0.1f}, std::vector<int32_t>{0, 1}) == Approx(0.0));
  CHECK(exactAuc(std::vector<float>{0.9f, 0.1f}, std::vector<int32_t>{1, 1}) == 0.5);  // no negatives
}

TEST_CASE("finalize by hand", "[model][metrics]") {
  EvalStats r = EvalStats::empty(TaskKind::kRegression);
  // Predictions 1, 2, 4 for targets 1, 3, 3: residuals 0, -1, 1.
  r.count = 3;
  r.sumSqErr = 2;
  r.sumAbsErr = 2;
  r.sumY = 7;
  r.sumY2 = 19;
  r.lossSum = 1;
  auto m = finalize(r);
  CHECK(m.loss == Approx(1.0 / 3));
  CHECK(*m.rmse == Approx(std::sqrt(2.0 / 3)));
  CHECK(*m.mae == Approx(2.0 / 3));
  CHECK(*m.r2 == Approx(1.0 - 2.0 / (19.0 - 49.0 / 3)));  // SST = 8/3: r2 = 0.25
  CHECK(*m.r2 == Approx(0.25));
  CHECK_FALSE(m.accuracy.has_value());
  CHECK_FALSE(m.auc.has_value());

  EvalStats c = EvalStats::empty(TaskKind::kClassification, 5);
  c.count = 4;
  c.correct = 3;
  c.top5Correct = 4;
  auto mc = finalize(c);
  CHECK(*mc.accuracy == 0.75);
  CHECK_FALSE(mc.top5.has_value());  // 5 classes: top-5 says nothing
  CHECK(finalize(EvalStats::empty(TaskKind::kBinary)).examples == 0);
}

TEST_CASE("classification metrics match NumPy and PyTorch", "[model][metrics][reference]") {
  const int n = 300, dim = 4, classes = 8;
  std::vector<int32_t> labels(n);
  std::mt19937_64 rng(9);
  for (int32_t& l : labels)
    l = static_cast<int32_t>(rng() % classes);
  auto data = Dataset::fromFloats(gaussians(static_cast<std::size_t>(n) * dim, 1), labels, dim, classes);
  REQUIRE(data.isOk());
  Model m = linearModel("linear:4-8", 2, 1.0f);
  auto ev = m.evaluate(*data, 64);
  REQUIRE(ev.isOk());
  const std::vector<float> out = outputsOf(m, *data);
  const std::vector<float> ys(labels.begin(), labels.end());
  auto ref = reference("classification", out, classes, ys);
  if (ref.empty()) WARN("no " << kPython << ": reference comparison skipped");
  REQUIRE(ev->metrics.top5.has_value());
  CHECK(*ev->metrics.accuracy > 0.0);
  CHECK(*ev->metrics.top5 > *ev->metrics.accuracy);
  CHECK(*ev->metrics.top5 < 1.0);  // the test would not tell top-5 from "always right"
  if (!ref.empty()) {
    CHECK(ev->loss == Approx(ref["loss"]).epsilon(1e-5));
    CHECK(ev->metrics.loss == ev->loss);
    CHECK(ev->accuracy == Approx(ref["accuracy"]).epsilon(1e-12));
    CHECK(*ev->metrics.top5 == Approx(ref["top5"]).epsilon(1e-12));
  }
  CHECK(ev->examples == static_cast<std::size_t>(n));
}

TEST_CASE("binary metrics match NumPy; binned AUC within its bound", "[model][metrics][reference]") {
  const int n = 2000, dim = 3;
  std::vector<float> x = gaussians(static_cast<std::size_t>(n) * dim, 3);
  std::vector<int32_t> labels(n);
  std::mt19937_64 rng(4);
  std::normal_distribution<float> noise(0.0f, 1.5f);
  for (int i = 0; i < n; ++i)
    labels[i] = x[static_cast<std::size_t>(i) * dim] + noise(rng) > 0.0f ? 1 : 0;
  auto data = Dataset::fromFloats(x, labels, dim, 2);
  REQUIRE(data.isOk());
  Model m = linearModel("linear:3-1/logistic", 5, 1.0f);
  m.params()[0] = 2.0f;  // leans on the feature the labels follow
  auto ev = m.evaluate(*data, 128);
  REQUIRE(ev.isOk());
  const std::vector<float> out = outputsOf(m, *data);
  const std::vector<float> ys(labels.begin(), labels.end());
  const double exact = exactAuc(out, labels);
  const double binned = *ev->metrics.auc;
  // The bound of metrics.hpp: half the fraction of (positive, negative) pairs in one bin.
  double sharing = 0.0;
  double pos = 0.0;
  double neg = 0.0;
  for (std::size_t b = 0; b < kAucBins; ++b) {
    sharing += static_cast<double>(ev->stats.positives[b]) * static_cast<double>(ev->stats.negatives[b]);
    pos += static_cast<double>(ev->stats.positives[b]);
    neg += static_cast<double>(ev->stats.negatives[b]);
  }
  CHECK(std::abs(binned - exact) <= 0.5 * sharing / (pos * neg) + 1e-12);
  CHECK(std::abs(binned - exact) < 1e-3);
  CHECK(exact > 0.6);  // a model that learned something; AUC 0.5 would hide errors
  auto ref = reference("binary", out, 1, ys);
  if (ref.empty()) WARN("no " << kPython << ": reference comparison skipped");
  if (!ref.empty()) {
    CHECK(exact == Approx(ref["auc"]).epsilon(1e-12));
    CHECK(ev->loss == Approx(ref["loss"]).epsilon(1e-5));
    CHECK(ev->accuracy == Approx(ref["accuracy"]).epsilon(1e-12));
  }
  SECTION("ties: scores rounded to tenths") {
    std::vector<float> tied(out);
    for (float& v : tied)
      v = std::round(v * 10.0f) / 10.0f;
    auto r = reference("binary", tied, 1, ys);
    if (!r.empty()) CHECK(exactAuc(tied, labels) == Approx(r["auc"]).epsilon(1e-12));
    // Binning keeps equal scores in one bin: counted one half as by exactAuc.
    EvalStats st = EvalStats::empty(TaskKind::kBinary);
    for (int i = 0; i < n; ++i) {
      (labels[i] == 1 ? st.positives : st.negatives)[aucBin(tied[i])] += 1;
      ++st.count;
    }
    CHECK(*finalize(st).auc == Approx(exactAuc(tied, labels)).epsilon(1e-12));
  }
}

TEST_CASE("binned AUC against exactAuc on spread scores", "[model][metrics]") {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const int n = 20000;
  std::vector<float> s(n);
  std::vector<int32_t> y(n);
  EvalStats st = EvalStats::empty(TaskKind::kBinary);
  for (int i = 0; i < n; ++i) {
    y[i] = u(rng) < 0.3f ? 1 : 0;
    s[i] = std::clamp(u(rng) * 0.8f + (y[i] == 1 ? 0.2f : 0.0f), 0.0f, 1.0f);
    (y[i] == 1 ? st.positives : st.negatives)[aucBin(s[i])] += 1;
    ++st.count;
  }
  const double exact = exactAuc(s, y);
  CHECK(std::abs(*finalize(st).auc - exact) < 0.5 / static_cast<double>(kAucBins) * 2);
  CHECK(aucBin(0.0f) == 0);
  CHECK(aucBin(1.0f) == kAucBins - 1);
  CHECK(aucBin(0.5f) == kAucBins / 2);
  CHECK(aucBin(-3.0f) == 0);
  CHECK(aucBin(std::nanf("")) == 0);
}

TEST_CASE("regression metrics match NumPy", "[model][metrics][reference]") {
  const int n = 500, dim = 3;
  std::vector<float> x = gaussians(static_cast<std::size_t>(n) * dim, 6);
  std::vector<float> t(n);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  for (int i = 0; i < n; ++i)
    t[i] = 3.0f + 2.0f * x[static_cast<std::size_t>(i) * dim] + noise(rng);
  auto data = Dataset::fromFloatTargets(x, t, dim);
  REQUIRE(data.isOk());
  Model m = linearModel("linear:3-1/mse", 8, 1.0f);
  m.params()[0] = 1.8f;  // near the truth so r2 is positive
  m.params()[3] = 2.5f;
  auto ev = m.evaluate(*data, 100);
  REQUIRE(ev.isOk());
  auto ref = reference("regression", outputsOf(m, *data), 1, t);
  if (ref.empty()) WARN("no " << kPython << ": reference comparison skipped");
  CHECK(ev->metrics.task == TaskKind::kRegression);
  CHECK_FALSE(ev->metrics.accuracy.has_value());
  REQUIRE(ev->metrics.r2.has_value());
  if (!ref.empty()) {
    CHECK(ev->loss == Approx(ref["loss"]).epsilon(1e-6));
    CHECK(*ev->metrics.rmse == Approx(ref["rmse"]).epsilon(1e-6));
    CHECK(*ev->metrics.mae == Approx(ref["mae"]).epsilon(1e-6));
    CHECK(*ev->metrics.r2 == Approx(ref["r2"]).epsilon(1e-6));
  }
}

TEST_CASE("merged EvalStats of a split data set equal the whole", "[model][metrics]") {
  const int n = 900, dim = 3;
  std::vector<float> x = gaussians(static_cast<std::size_t>(n) * dim, 10);
  std::vector<int32_t> labels(n);
  std::vector<float> t(n);
  for (int i = 0; i < n; ++i) {
    labels[i] = x[static_cast<std::size_t>(i) * dim + 1] > 0.2f ? 1 : 0;
    t[i] = x[static_cast<std::size_t>(i) * dim] * 4.0f;
  }
  auto part = [&](int from, int to, bool regression) {
    std::vector<float> xs(x.begin() + from * dim, x.begin() + to * dim);
    if (regression) return std::move(Dataset::fromFloatTargets(xs, {t.begin() + from, t.begin() + to}, dim)).value();
    return std::move(Dataset::fromFloats(xs, {labels.begin() + from, labels.begin() + to}, dim, 2)).value();
  };
  for (const char* spec : {"linear:3-1/logistic", "linear:3-1/huber:0.7", "linear:3-2"}) {
    DYNAMIC_SECTION(spec) {
      Model m = linearModel(spec, 11, 1.0f);
      const bool regression = m.task() == TaskKind::kRegression;
      auto whole = m.evalStats(part(0, n, regression), 64);
      REQUIRE(whole.isOk());
      auto merged = m.evalStats(part(0, 100, regression));
      REQUIRE(merged.isOk());
      for (auto [a, b] : {std::pair{100, 450}, std::pair{450, n}}) {
        auto s = m.evalStats(part(a, b, regression), 37);
        REQUIRE(s.isOk());
        REQUIRE(merged->merge(*s).isOk());
      }
      CHECK(merged->count == whole->count);
      CHECK(merged->correct == whole->correct);
      CHECK(merged->top5Correct == whole->top5Correct);
      CHECK(merged->positives == whole->positives);
      CHECK(merged->negatives == whole->negatives);
      // An example's float loss may differ in its last bit with the batch it is
      // evaluated in (on aarch64, Eigen's NEON kernels take a batch's tail rows another
      // way: 2e-11 relative in these sums under qemu-aarch64); merging adds doubles.
      CHECK(merged->lossSum == Approx(whole->lossSum).epsilon(1e-9));
      CHECK(merged->sumSqErr == Approx(whole->sumSqErr).epsilon(1e-9));
      CHECK(merged->sumAbsErr == Approx(whole->sumAbsErr).epsilon(1e-9));
      CHECK(merged->sumY == Approx(whole->sumY).epsilon(1e-12).margin(1e-9));
      CHECK(merged->sumY2 == Approx(whole->sumY2).epsilon(1e-12));
      auto a = finalize(*merged);
      auto b = finalize(*whole);
      CHECK(a.loss == Approx(b.loss).epsilon(1e-9));
      CHECK(a.auc.has_value() == b.auc.has_value());
      if (a.auc) CHECK(*a.auc == *b.auc);
      if (a.r2) CHECK(*a.r2 == Approx(*b.r2).epsilon(1e-9));
      if (a.accuracy) CHECK(*a.accuracy == *b.accuracy);

      // The wire form round-trips.
      auto back = EvalStats::fromVector(whole->toVector());
      REQUIRE(back.isOk());
      CHECK(back->toVector() == whole->toVector());
    }
  }
}

TEST_CASE("merge and fromVector refuse what does not fit", "[model][metrics]") {
  EvalStats a = EvalStats::empty(TaskKind::kBinary);
  EvalStats r = EvalStats::empty(TaskKind::kRegression);
  auto st = a.merge(r);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("regression"));
  EvalStats c5 = EvalStats::empty(TaskKind::kClassification, 5);
  EvalStats c10 = EvalStats::empty(TaskKind::kClassification, 10);
  CHECK_FALSE(c5.merge(c10).isOk());
  EvalStats odd = EvalStats::empty(TaskKind::kBinary);
  odd.positives.resize(10);
  odd.negatives.resize(10);
  CHECK_FALSE(a.merge(odd).isOk());

  std::vector<double> v = a.toVector();
  CHECK(EvalStats::fromVector(v).isOk());
  auto truncated = v;
  truncated.pop_back();
  CHECK(EvalStats::fromVector(truncated).status().code() == StatusCode::kMalformed);
  auto counted = v;
  counted[3] = 5;  // 5 examples but empty histograms
  CHECK_FALSE(EvalStats::fromVector(counted).isOk());
  auto version = v;
  version[0] = 2;
  CHECK_FALSE(EvalStats::fromVector(version).isOk());
  auto task = v;
  task[1] = 7;
  CHECK_FALSE(EvalStats::fromVector(task).isOk());
  auto fraction = r.toVector();
  fraction[3] = 1.5;
  CHECK_FALSE(EvalStats::fromVector(fraction).isOk());
  CHECK_FALSE(EvalStats::fromVector(std::vector<double>{}).isOk());
}

TEST_CASE("evaluate refuses data of another task", "[model][metrics]") {
  auto cls = Dataset::fromFloats(std::vector<float>(6, 0.0f), {0, 1, 2}, 2, 3);
  auto reg = Dataset::fromFloatTargets(std::vector<float>(6, 0.0f), {0.5f, 1.0f, 2.0f}, 2);
  REQUIRE(cls.isOk());
  REQUIRE(reg.isOk());
  auto mse = Model::fromSpec("linear:2-1/mse");
  auto logistic = Model::fromSpec("linear:2-1/logistic");
  auto ce = Model::fromSpec("linear:2-3");
  REQUIRE((mse.isOk() && logistic.isOk() && ce.isOk()));
  CHECK_THAT(mse->evaluate(*cls).status().message(), Catch::Contains("regression model"));
  CHECK_THAT(ce->evaluate(*reg).status().message(), Catch::Contains("real (regression) targets"));
  CHECK_THAT(logistic->evaluate(*cls).status().message(), Catch::Contains("is binary"));
  CHECK(ce->evaluate(*cls).isOk());
  CHECK(mse->evaluate(*reg).isOk());
}
