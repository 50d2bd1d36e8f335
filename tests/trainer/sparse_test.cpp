// The Trainer on sparse data: CSR minibatches for linear and embedbag models, the same
// steps as on the densified data, densified minibatches for a cnn, and the limit on
// densifying.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "starling/client/trainer.hpp"

using starling::client::Proposal;
using starling::client::SamplingMode;
using starling::client::Trainer;
using starling::client::TrainerOptions;
using starling::client::TrainRequest;
using starling::data::Dataset;
using starling::model::Model;

namespace {

// n examples over dim hashed features, k non-zeros each (value 1). Features below 20
// are "positive words", 20..39 "negative words": each example holds one of either kind
// and its label says which; the rest is noise spread over all dim features. Separable
// by a linear model. Also the same examples densified (when dense is not null).
Dataset bagOfWords(int n, uint32_t dim, int k, uint64_t seed, std::vector<float>* dense = nullptr) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> noise(40, dim - 1);
  std::vector<uint64_t> off = {0};
  std::vector<uint32_t> idx;
  std::vector<float> val;
  std::vector<int32_t> labels;
  for (int i = 0; i < n; ++i) {
    const int32_t y = static_cast<int32_t>(rng() % 2);
    std::set<uint32_t> cols = {static_cast<uint32_t>(rng() % 20 + (y == 1 ? 0 : 20))};
    while (static_cast<int>(cols.size()) < k)
      cols.insert(noise(rng));
    for (uint32_t c : cols) {
      idx.push_back(c);
      val.push_back(1.0f);
    }
    off.push_back(idx.size());
    labels.push_back(y);
  }
  if (dense != nullptr) {
    dense->assign(static_cast<std::size_t>(n) * dim, 0.0f);
    for (int i = 0; i < n; ++i)
      for (uint64_t q = off[i]; q < off[i + 1]; ++q)
        (*dense)[static_cast<std::size_t>(i) * dim + idx[q]] = val[q];
  }
  return std::move(Dataset::fromSparse(off, idx, val, labels, dim, 2)).value();
}

Model made(const char* spec, uint64_t seed) {
  Model m = Model::fromSpec(spec).value();
  m.initialize(seed);
  return m;
}

}  // namespace

TEST_CASE("sparse logistic regression on hashed bag-of-words reaches high accuracy", "[trainer][sparse]") {
  const uint32_t dim = 1u << 18;
  Dataset train = bagOfWords(2000, dim, 30, 1);
  Dataset test = bagOfWords(500, dim, 30, 2);
  REQUIRE(train.isSparse());
  for (float mu : {0.0f, 0.9f}) {
    CAPTURE(mu);
    Model m = made("linear:262144-1/logistic", 3);
    const double before = m.evaluate(test)->accuracy;
    TrainerOptions o;
    o.batchSize = 32;
    o.momentum = mu;
    auto t = Trainer::create(m, train, o);
    REQUIRE(t.isOk());
    std::vector<float> base(m.params().begin(), m.params().end());
    std::vector<float> delta(m.numParams());
    auto st = t->run(base, TrainRequest{300, mu > 0 ? 0.1f : 0.5f, 7}, delta);
    REQUIRE(st.isOk());
    CHECK(st->prioritizedSteps == 0);  // sparse data, adaptive (the default): uniform minibatches
    CHECK(st->lossEnd < st->lossStart);
    auto ev = t->model().evaluate(test);
    REQUIRE(ev.isOk());
    CHECK(before < 0.7);
    CHECK(ev->accuracy > 0.95);
    CHECK(ev->metrics.auc.value_or(0.0) > 0.98);
  }
  SECTION("embedbag learns it too") {
    Model m = made("embedbag:262144-8-1/logistic", 4);
    auto t = Trainer::create(m, train, TrainerOptions{});
    REQUIRE(t.isOk());
    std::vector<float> base(m.params().begin(), m.params().end());
    std::vector<float> delta(m.numParams());
    REQUIRE(t->run(base, TrainRequest{300, 0.1f, 9}, delta).isOk());
    CHECK(t->model().evaluate(test)->accuracy > 0.95);
  }
}

TEST_CASE("sparse training takes the steps of dense training on the densified data", "[trainer][sparse]") {
  std::vector<float> dense;
  Dataset sparse = bagOfWords(300, 500, 8, 5, &dense);
  std::vector<int32_t> labels(sparse.labels().begin(), sparse.labels().end());
  Dataset flat = std::move(Dataset::fromFloats(dense, labels, 500, 2)).value();
  const char* spec = GENERATE("linear:500-1/logistic", "linear:500-2", "embedbag:500-4-3-1/logistic");
  const float mu = GENERATE(0.0f, 0.9f);
  const float clip = GENERATE(0.0f, 0.5f);
  CAPTURE(spec, mu, clip);
  Model m = made(spec, 6);
  TrainerOptions o;
  o.batchSize = 16;
  o.momentum = mu;
  o.clipNorm = clip;
  o.sampler.mode = SamplingMode::kUniform;  // the same draws on both (a table's would
                                            // part at the first tie that rounding breaks)
  std::vector<uint32_t> drawnSparse;
  std::vector<uint32_t> drawnDense;
  o.batchLog = &drawnSparse;
  auto ts = Trainer::create(m, sparse, o);
  o.batchLog = &drawnDense;
  auto td = Trainer::create(m, flat, o);
  REQUIRE(ts.isOk());
  REQUIRE(td.isOk());
  std::vector<float> base(m.params().begin(), m.params().end());
  std::vector<float> ds(m.numParams());
  std::vector<float> dd(m.numParams());
  auto a = ts->run(base, TrainRequest{40, 0.2f, 11}, ds);
  auto b = td->run(base, TrainRequest{40, 0.2f, 11}, dd);
  REQUIRE(a.isOk());
  REQUIRE(b.isOk());
  CHECK(drawnSparse == drawnDense);
  CHECK(a->lossStart == Approx(b->lossStart).epsilon(1e-5));
  CHECK(a->lossEnd == Approx(b->lossEnd).epsilon(1e-3));
  double diff = 0.0;
  double norm = 0.0;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    diff += (ds[i] - dd[i]) * static_cast<double>(ds[i] - dd[i]);
    norm += dd[i] * static_cast<double>(dd[i]);
  }
  CHECK(norm > 0.0);
  CHECK(std::sqrt(diff / norm) < 1e-4);
}

TEST_CASE("a model without sparse input trains on densified rows, within a limit", "[trainer][sparse]") {
  Dataset small = bagOfWords(200, 64, 3, 8);
  Model cnn = made("cnn:1x8x8-c2k3-2", 1);
  auto t = Trainer::create(cnn, small, TrainerOptions{});
  REQUIRE(t.isOk());
  std::vector<float> base(cnn.params().begin(), cnn.params().end());
  std::vector<float> delta(cnn.numParams());
  auto st = t->run(base, TrainRequest{50, 0.1f, 2}, delta);
  REQUIRE(st.isOk());
  CHECK(st->lossEnd < st->lossStart);

  Dataset wide = bagOfWords(10, 1u << 22, 3, 9);
  Model big = Model::fromSpec("cnn:1x2048x2048-p64-2").value();
  TrainerOptions o;
  o.batchSize = 32;  // 32 x 2^22 floats: 512 MiB densified
  auto refused = Trainer::create(big, wide, o);
  REQUIRE_FALSE(refused.isOk());
  CHECK_THAT(refused.status().message(), Catch::Contains("densifies to 536870912 bytes, over the limit of 268435456"));
  o.batchSize = 16;  // 256 MiB: at the limit
  CHECK(Trainer::create(big, wide, o).isOk());
}

TEST_CASE("forced priority on sparse data draws weighted CSR minibatches from the table", "[trainer][sparse]") {
  std::vector<float> dense;
  Dataset sparse = bagOfWords(300, 500, 8, 5, &dense);
  Model m = made("linear:500-1/logistic", 6);
  TrainerOptions o;
  o.batchSize = 16;
  o.sampler.mode = SamplingMode::kPriority;
  o.sampler.proposal = Proposal::kTable;
  auto t = Trainer::create(m, sparse, o);
  REQUIRE(t.isOk());
  std::vector<float> base(m.params().begin(), m.params().end());
  std::vector<float> delta(m.numParams());
  auto st = t->run(base, TrainRequest{200, 0.2f, 3}, delta);
  REQUIRE(st.isOk());
  CHECK(st->prioritizedSteps == 200);
  CHECK(st->scoredExamples == 0);  // no scouts on sparse data
  CHECK(st->lossEnd < st->lossStart);

  // The sampler's next minibatch: CSR rows with weights that are not all 1, whose
  // weighted sparse step is the weighted dense step on the same rows densified.
  Model& trained = t->model();
  auto mb = t->sampler().next(trained, 16);
  REQUIRE(mb.prioritized);
  REQUIRE(mb.sparse != nullptr);
  bool unequal = false;
  for (float w : mb.weights)
    unequal = unequal || std::abs(w - 1.0f) > 1e-3f;
  CHECK(unequal);
  Model twin = trained;
  std::vector<float> gs(trained.numParams());
  std::vector<float> gd(trained.numParams());
  const float ls = trained.forwardBackwardSparse(*mb.sparse, mb.labels.data(), mb.weights.data(), gs);
  std::vector<float> x(16 * sparse.featureDim());
  sparse.gather(mb.indices, x);
  const float ld = twin.forwardBackward(x.data(), mb.labels.data(), mb.weights.data(), 16, gd);
  CHECK(ls == Approx(ld).epsilon(1e-5));
  for (std::size_t i = 0; i < gs.size(); ++i)
    REQUIRE(gs[i] == Approx(gd[i]).epsilon(1e-4).margin(1e-6));
}
