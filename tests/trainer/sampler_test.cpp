// Sampler: priority minibatches give an unbiased gradient with bounded weights; the
// variance-reduction switch turns priority sampling on and off; the score table ages.
#include "starling/client/sampler.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "toy_data.hpp"

using starling::client::Proposal;
using starling::client::Sampler;
using starling::client::SamplerOptions;
using starling::client::SamplingMode;
using starling::client::test::toyModel;
using starling::model::Model;

namespace {

double distance(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}

}  // namespace

TEST_CASE("priority minibatches give an unbiased weighted gradient", "[sampler][statistical]") {
  // A fixed model whose scores differ a lot between examples (blobs that overlap).
  auto data = starling::client::test::blobs(40, 6, 3, 11, 2.5f);
  Model model = toyModel("mlp:6-5-3", 4);
  const std::size_t d = model.numParams();

  // The full-data gradient.
  std::vector<uint32_t> all(data.size());
  for (uint32_t i = 0; i < all.size(); ++i)
    all[i] = i;
  std::vector<float> xs(data.size() * data.featureDim());
  data.gather(all, xs);
  std::vector<float> g(d);
  const std::vector<float> ys(data.labels().begin(), data.labels().end());
  model.forwardBackward(xs.data(), ys.data(), nullptr, static_cast<int>(data.size()), g);
  std::vector<double> full(g.begin(), g.end());

  SamplerOptions options;
  options.mode = SamplingMode::kPriority;
  options.lambda = 0.1f;
  // 0: table; 1: candidates; 2: candidates with table scores; 3, 4: table with scouts
  // (a sweep, uniform draws).
  const int scheme = GENERATE(0, 1, 2, 3, 4);
  const bool table = scheme == 0 || scheme >= 3;
  const bool reuse = scheme == 2;
  options.proposal = table ? Proposal::kTable : Proposal::kCandidates;
  options.maxScoreAge = reuse ? 1000 : 0;  // table scores stand in for most forward passes
  options.scoutFactor = scheme >= 3 ? 0.75f : 0.0f;
  options.scoutSweep = scheme == 3;
  INFO("proposal " << (table ? "table" : "candidates") << ", maxScoreAge " << options.maxScoreAge << ", scouts "
                   << options.scoutFactor << (options.scoutSweep ? " (sweep)" : ""));
  Sampler sampler(data, options, 5);
  const int b = 4;
  const int draws = 20000;
  std::vector<double> weighted(d, 0.0);
  std::vector<double> unweighted(d, 0.0);
  // Per example: its weights summed over its draws, / (draws * b). Unbiasedness means
  // E[w 1{drawn}] = 1 / N for every example, a stronger check than the mean gradient
  // (where errors of different examples could cancel).
  std::vector<double> mass(data.size(), 0.0);
  std::vector<int> count(data.size(), 0);
  float maxWeight = 0.0f;
  float minWeight = 1e9f;
  Model scorer = model;  // the sampler's forward passes must not disturb the gradients
  for (int t = 0; t < draws; ++t) {
    auto mb = sampler.next(scorer, b);
    REQUIRE(mb.prioritized);
    if (mb.scouts > 0) {
      // As the trainer does: one forward pass over the minibatch and its scouts.
      const int classes = scorer.numClasses();
      auto probs = scorer.forward(mb.forwardFeatures.data(), b + mb.scouts);
      sampler.observeScouts(probs.subspan(static_cast<std::size_t>(b) * classes), model);
    }
    for (std::size_t j = 0; j < mb.weights.size(); ++j) {
      const float w = mb.weights[j];
      maxWeight = std::max(maxWeight, w);
      minWeight = std::min(minWeight, w);
      mass[mb.indices[j]] += static_cast<double>(w) / (static_cast<double>(draws) * b);
      ++count[mb.indices[j]];
    }
    model.forwardBackward(mb.features.data(), mb.labels.data(), mb.weights.data(), b, g);
    // The trainer feeds every step's softmax outputs back; the table proposal lives on them.
    sampler.observe(model.probabilities(), model);
    for (std::size_t i = 0; i < d; ++i)
      weighted[i] += g[i] / draws;
    model.forwardBackward(mb.features.data(), mb.labels.data(), nullptr, b, g);
    for (std::size_t i = 0; i < d; ++i)
      unweighted[i] += g[i] / draws;
  }
  std::vector<double> zero(d, 0.0);
  const double scale = distance(full, zero);
  const double weightedError = distance(weighted, full) / scale;
  const double unweightedError = distance(unweighted, full) / scale;
  INFO("relative error weighted " << weightedError << ", unweighted " << unweightedError);
  CHECK(weightedError < 0.03);
  // Without the importance weights the estimate is visibly biased: the test can tell.
  CHECK(unweightedError > 3 * weightedError);
  CHECK(maxWeight <= 1.0f / options.lambda + 1e-4f);
  CHECK(maxWeight > 1.5f);  // the weights do vary
  CHECK(minWeight < 0.8f);
  CHECK(sampler.prioritizedSteps() == static_cast<uint64_t>(draws));
  const double n = static_cast<double>(data.size());
  double worst = 0.0;
  double meanError = 0.0;
  int minCount = draws * b;
  int maxCount = 0;
  for (std::size_t i = 0; i < data.size(); ++i) {
    const double error = std::abs(mass[i] * n - 1.0);
    worst = std::max(worst, error);
    meanError += error / n;
    minCount = std::min(minCount, count[i]);
    maxCount = std::max(maxCount, count[i]);
  }
  INFO("relative error of the examples' weighted frequencies: mean "
       << meanError << ", largest " << worst << "; draws per example " << minCount << " to " << maxCount);
  // The rarest examples are drawn about 400 times with weights up to 10: a few percent
  // of noise each. Unweighted, the frequencies differ by a factor of 3 or more.
  CHECK(meanError < 0.04);
  CHECK(worst < 0.2);
  CHECK(maxCount > 3 * minCount);  // the draws do favour some examples
  // With reuse an example is rescored only once its score is over 1000 steps old: about
  // 40 * 20 scorings instead of 240,000.
  if (table)  // no scoring pass at all; the scouts (3 a step) are counted
    CHECK(sampler.scoredExamples() == (scheme >= 3 ? static_cast<uint64_t>(draws) * 3 : 0u));
  else if (reuse)
    CHECK(sampler.scoredExamples() <= 2 * data.size() * (draws / 1000));
  else
    CHECK(sampler.scoredExamples() == static_cast<uint64_t>(draws) * 3 * b);
}

TEST_CASE("weights are bounded by 1/lambda for any lambda", "[sampler]") {
  auto data = starling::client::test::blobs(60, 4, 3, 3, 2.0f);
  Model model = toyModel("mlp:4-3", 8);
  for (Proposal proposal : {Proposal::kTable, Proposal::kCandidates})
    for (float lambda : {0.05f, 0.1f, 0.5f, 1.0f}) {
      DYNAMIC_SECTION("proposal " << static_cast<int>(proposal) << ", lambda " << lambda) {
        SamplerOptions options;
        options.mode = SamplingMode::kPriority;
        options.proposal = proposal;
        options.lambda = lambda;
        Sampler sampler(data, options, 1);
        float maxWeight = 0.0f;
        for (int t = 0; t < 500; ++t) {
          auto mb = sampler.next(model, 8);
          for (float w : mb.weights)
            maxWeight = std::max(maxWeight, w);
          std::vector<float> x(mb.features.begin(), mb.features.end());
          sampler.observe(model.forward(x.data(), 8), model);
        }
        CHECK(maxWeight <= 1.0f / lambda + 1e-4f);
        if (lambda == 1.0f) CHECK(maxWeight == Approx(1.0f));
      }
    }
}

TEST_CASE("uniform minibatches carry unit weights and cost no extra forward pass", "[sampler]") {
  auto data = starling::client::test::blobs(50, 4, 2, 3);
  Model model = toyModel("mlp:4-2", 1);
  SamplerOptions options;
  options.mode = SamplingMode::kUniform;
  Sampler sampler(data, options, 2);
  std::vector<int> seen(data.size(), 0);
  for (int t = 0; t < 200; ++t) {
    auto mb = sampler.next(model, 5);
    CHECK_FALSE(mb.prioritized);
    for (float w : mb.weights)
      REQUIRE(w == 1.0f);
    for (std::size_t i = 0; i < mb.indices.size(); ++i) {
      ++seen[mb.indices[i]];
      REQUIRE(mb.labels[i] == static_cast<float>(data.label(mb.indices[i])));
    }
  }
  CHECK(sampler.scoredExamples() == 0);
  CHECK(sampler.uniformSteps() == 200);
  for (int s : seen)
    CHECK(s > 0);  // 1000 draws over 50 examples reach every one
}

TEST_CASE("the variance-reduction switch prioritizes only while it pays", "[sampler]") {
  auto data = starling::client::test::blobs(100, 4, 3, 9, 2.0f);
  std::vector<float> g;

  // Feeds the sampler the probabilities of the training step, as the Trainer does.
  auto step = [&](Sampler& sampler, Model& model) {
    auto mb = sampler.next(model, 8);
    g.resize(model.numParams());
    model.forwardBackward(mb.features.data(), mb.labels.data(), nullptr, 8, g);
    if (!mb.prioritized) sampler.observe(model.probabilities(), model);
    return mb.prioritized;
  };

  SECTION("equal scores never switch it on") {
    Model flat = toyModel("mlp:4-3", 1);
    std::fill(flat.params().begin(), flat.params().end(), 0.0f);  // uniform softmax
    Sampler sampler(data, SamplerOptions{}, 1);
    int prioritized = 0;
    for (int t = 0; t < 100; ++t)
      prioritized += step(sampler, flat) ? 1 : 0;
    CHECK(prioritized == 0);
    CHECK(sampler.tauVr() == Approx(1.0).epsilon(1e-3));
    // The table proposal pays no scoring pass: its bookkeeping and its 0.75 b scouts'
    // share of the forward pass (a third of a step for b).
    CHECK(sampler.threshold(8) == Approx(Sampler::kTableThreshold + 0.25));
    SamplerOptions noScouts;
    noScouts.scoutFactor = 0.0f;
    CHECK(Sampler(data, noScouts, 1).threshold(8) == Approx(Sampler::kTableThreshold));
    // (B + 2b) / 3b for B = 3b: the drawn rows need no second forward pass.
    SamplerOptions candidates;
    candidates.proposal = Proposal::kCandidates;
    CHECK(Sampler(data, candidates, 1).threshold(8) == Approx(5.0 / 3.0));
  }
  SECTION("skewed scores switch it on once tau_vr passes the threshold") {
    Model model = toyModel("mlp:4-3", 2);
    SamplerOptions options;
    options.threshold = 1.02f;  // below the estimate these scores give
    Sampler sampler(data, options, 1);
    CHECK_FALSE(sampler.prioritizing());  // tau starts at 0
    int prioritized = 0;
    for (int t = 0; t < 100; ++t)
      prioritized += step(sampler, model) ? 1 : 0;
    CHECK(sampler.tauVr() > 1.02);
    CHECK(prioritized > 50);

    SECTION("and a higher threshold keeps it off") {
      SamplerOptions strict;
      strict.threshold = 50.0f;
      Sampler off(data, strict, 1);
      int on = 0;
      for (int t = 0; t < 100; ++t)
        on += step(off, model) ? 1 : 0;
      CHECK(on == 0);
      CHECK(off.tauVr() > 1.0);
      CHECK(off.scoredExamples() == 0);
    }
  }
}

TEST_CASE("the score table keeps the latest score and ages it", "[sampler]") {
  auto data = starling::client::test::blobs(10, 4, 2, 1, 2.0f);
  Model model = toyModel("mlp:4-2", 3);
  for (Proposal proposal : {Proposal::kTable, Proposal::kCandidates}) {
    CAPTURE(proposal == Proposal::kTable);
    SamplerOptions options;
    options.threshold = 50.0f;  // stays uniform: the table is refreshed by observe() only
    options.ageing = 0.5f;
    options.proposal = proposal;
    Sampler sampler(data, options, 1);
    auto mb = sampler.next(model, 2);
    const uint32_t i = mb.indices[0];
    CHECK(sampler.score(i) == 0.0f);  // never scored yet
    std::vector<float> x(mb.features.begin(), mb.features.end());
    sampler.observe(model.forward(x.data(), 2), model);
    const float fresh = sampler.score(i);
    CHECK(fresh > 0.0f);
    CHECK(fresh <= std::sqrt(2.0f));  // ||p - onehot|| <= sqrt(2)
    for (int t = 0; t < 3; ++t)
      (void)sampler.next(model, 2);  // steps that do not refresh the table
    if (proposal == Proposal::kTable) {
      // Reverts to the mean score of the observed rows, which an unscored example has.
      const double m = sampler.meanScore();
      CHECK(m > 0.0);
      CHECK(sampler.score(i) == Approx(m + (fresh - m) * 0.125));
      uint32_t unscored = 0;
      while (unscored == mb.indices[0] || unscored == mb.indices[1])
        ++unscored;
      CHECK(sampler.score(unscored) == Approx(m));
    } else {
      CHECK(sampler.score(i) == Approx(fresh * 0.125f));
    }
    CHECK(sampler.score(1000) == 0.0f);
  }
}

TEST_CASE("a prioritized minibatch's distinct rows give its gradient without a second forward pass", "[sampler]") {
  auto data = starling::client::test::blobs(40, 6, 3, 11, 2.5f);
  Model model = toyModel("mlp:6-5-3", 4);
  SamplerOptions options;
  options.mode = SamplingMode::kPriority;
  options.proposal = Proposal::kCandidates;
  Sampler sampler(data, options, 3);
  const int b = 8;
  std::vector<float> expected(model.numParams());
  std::vector<float> got(model.numParams());
  int merged = 0;  // minibatches in which some example was drawn more than once
  for (int t = 0; t < 50; ++t) {
    auto mb = sampler.next(model, b);  // scores on model: its last forward pass
    REQUIRE_FALSE(mb.scoredRows.empty());
    REQUIRE(mb.rowWeights.size() == mb.scoredRows.size());
    merged += mb.scoredRows.size() < static_cast<std::size_t>(b) ? 1 : 0;
    float sum = 0.0f;
    for (float w : mb.rowWeights)
      sum += w;
    float drawnSum = 0.0f;
    for (float w : mb.weights)
      drawnSum += w;
    CHECK(sum == Approx(drawnSum));

    Model twin = model;  // a second forward pass over the b drawn rows, as before
    const float expectedLoss =
        twin.forwardBackward(mb.features.data(), mb.labels.data(), mb.weights.data(), b, expected);
    const float loss =
        model.backwardRows(mb.rowFeatures.data(), mb.scoredRows, mb.rowLabels.data(), mb.rowWeights.data(), b, got);
    CHECK(loss == Approx(expectedLoss).epsilon(1e-5));
    for (std::size_t i = 0; i < got.size(); ++i)
      REQUIRE(got[i] == Approx(expected[i]).epsilon(1e-4).margin(1e-6));
  }
  CHECK(merged > 0);  // the merging of repeated draws was exercised

  // With table scores some drawn candidates were not in the scoring pass: no rows.
  options.maxScoreAge = 1000;
  Sampler stale(data, options, 3);
  bool sawNoRows = false;
  for (int t = 0; t < 50 && !sawNoRows; ++t)
    sawNoRows = stale.next(model, b).scoredRows.empty();
  CHECK(sawNoRows);
}

TEST_CASE("scouts share the minibatch's forward pass and refresh their table scores", "[sampler]") {
  auto data = starling::client::test::blobs(40, 6, 3, 11, 2.5f);
  Model model = toyModel("mlp:6-5-3", 4);
  const int classes = model.numClasses();
  SamplerOptions options;
  options.mode = SamplingMode::kPriority;
  options.proposal = Proposal::kTable;
  options.scoutFactor = 0.5f;  // 4 scouts for b = 8
  options.ageing = 0.5f;
  Sampler sampler(data, options, 3);
  const int b = 8;
  std::vector<uint32_t> firstRows(b);
  for (int i = 0; i < b; ++i)
    firstRows[i] = static_cast<uint32_t>(i);
  std::vector<float> expected(model.numParams());
  std::vector<float> got(model.numParams());
  std::vector<int> scouted(data.size(), 0);
  std::vector<float> x(data.featureDim());
  for (int t = 0; t < 30; ++t) {
    auto mb = sampler.next(model, b);
    REQUIRE(mb.scouts == 4);
    REQUIRE(mb.forwardFeatures.size() == static_cast<std::size_t>(b + 4) * data.featureDim());
    // The minibatch's rows come first, unchanged.
    REQUIRE(std::equal(mb.features.begin(), mb.features.end(), mb.forwardFeatures.begin()));
    std::vector<uint32_t> scouts(mb.indices.data() + b, mb.indices.data() + b + 4);  // rows after the minibatch
    // Sweep: consecutive examples of the data set, wrapping around.
    for (std::size_t k = 1; k < scouts.size(); ++k)
      REQUIRE(scouts[k] == (scouts[k - 1] + 1) % data.size());
    for (uint32_t i : scouts)
      ++scouted[i];

    Model twin = model;  // the separate pass the shared one replaces
    const float expectedLoss =
        twin.forwardBackward(mb.features.data(), mb.labels.data(), mb.weights.data(), b, expected);
    auto probs = model.forward(mb.forwardFeatures.data(), b + 4);
    sampler.observeScouts(probs.subspan(static_cast<std::size_t>(b) * classes), model);
    const float loss = model.backwardRows(mb.features.data(), firstRows, mb.labels.data(), mb.weights.data(), b, got);
    CHECK(loss == Approx(expectedLoss).epsilon(1e-5));
    for (std::size_t i = 0; i < got.size(); ++i)
      REQUIRE(got[i] == Approx(expected[i]).epsilon(1e-4).margin(1e-6));
    sampler.observe(model.probabilities(), model);

    // A scout's table score is its fresh score ||p - onehot||, unless it was also in
    // the minibatch (whose own score, from the same parameters, is the same).
    for (uint32_t i : scouts) {
      data.gather({&i, 1}, x);
      auto p = twin.forward(x.data(), 1);
      float s = 0.0f;
      for (int c = 0; c < classes; ++c) {
        const float d = p[c] - (c == data.label(i) ? 1.0f : 0.0f);
        s += d * d;
      }
      // score() reverts it to the mean by one step's ageing (next() counted the step).
      const double m = sampler.meanScore();
      CHECK(sampler.score(i) == Approx(m + (std::sqrt(s) - m) * 0.5).epsilon(1e-4));
    }
  }
  // 30 steps of 4 scouts sweep the 40 examples three times.
  for (int c : scouted)
    CHECK(c == 3);
  CHECK(sampler.scoredExamples() == 30u * 4u);
}

TEST_CASE("the table proposal draws by the exact table probabilities, and a refreshed score takes over",
          "[sampler][statistical]") {
  auto data = starling::client::test::blobs(40, 6, 3, 11, 2.5f);
  Model model = toyModel("mlp:6-5-3", 4);
  const int classes = model.numClasses();
  SamplerOptions options;
  options.mode = SamplingMode::kPriority;
  options.proposal = Proposal::kTable;
  options.scoutFactor = 0.0f;
  options.ageing = 1.0f;  // scores keep their value: the probabilities stay put
  options.lambda = 0.2f;
  Sampler sampler(data, options, 5);
  const std::size_t n = data.size();
  // Outputs that give each row of the last minibatch a chosen score: the one-hot of its
  // label scores 0, the one-hot of another class sqrt(2).
  auto feed = [&](const starling::client::Minibatch& mb, auto wrong) {
    std::vector<float> out(mb.indices.size() * classes, 0.0f);
    for (std::size_t r = 0; r < mb.indices.size(); ++r) {
      const int label = data.label(mb.indices[r]);
      out[r * classes + (wrong(mb.indices[r]) ? (label + 1) % classes : label)] = 1.0f;
    }
    sampler.observe(out, model);
  };
  // The first minibatch is uniform (nothing scored): even examples score sqrt(2), odd 0.
  feed(sampler.next(model, 24), [](uint32_t i) { return i % 2 == 0; });

  auto drawAndTest = [&](int steps) {
    std::vector<double> p(n);
    double sum = 0.0;
    for (uint32_t i = 0; i < n; ++i)
      sum += sampler.score(i);
    REQUIRE(sum > 0.0);
    for (uint32_t i = 0; i < n; ++i)
      p[i] = (1.0 - options.lambda) * sampler.score(i) / sum + options.lambda / static_cast<double>(n);
    std::vector<int> counts(n, 0);
    const int b = 8;
    for (int t = 0; t < steps; ++t) {
      auto mb = sampler.next(model, b);  // no observe(): the table stays as it is
      REQUIRE(mb.prioritized);
      for (int k = 0; k < b; ++k) {
        ++counts[mb.indices[k]];
        REQUIRE(mb.weights[k] == Approx(1.0 / (static_cast<double>(n) * p[mb.indices[k]])).epsilon(1e-5));
      }
    }
    double x2 = 0.0;
    const double draws = static_cast<double>(steps) * b;
    for (std::size_t i = 0; i < n; ++i)
      x2 += (counts[i] - p[i] * draws) * (counts[i] - p[i] * draws) / (p[i] * draws);
    CHECK(x2 < 72.05);  // chi-square, 39 degrees of freedom, 99.9% quantile
    return p;
  };
  const std::vector<double> before = drawAndTest(5000);

  // A stale high score is refreshed by a training step's output: the example then draws
  // with its new score.
  auto mb = sampler.next(model, 8);
  uint32_t even = 0;
  while (even < 8 && mb.indices[even] % 2 != 0)
    ++even;
  REQUIRE(even < 8);  // even examples hold nearly all the mass
  const uint32_t refreshed = mb.indices[even];
  const float stale = sampler.score(refreshed);
  feed(mb, [&](uint32_t i) { return i != refreshed && i % 2 == 0; });
  CHECK(stale > 1.0f);
  CHECK(sampler.score(refreshed) == 0.0f);
  const std::vector<double> after = drawAndTest(5000);
  CHECK(after[refreshed] == Approx(options.lambda / static_cast<double>(n)));
  CHECK(before[refreshed] > 5 * after[refreshed]);
}

TEST_CASE("scouts on a second thread refresh the table with the posted parameters", "[sampler][thread]") {
  auto data = starling::client::test::blobs(40, 6, 3, 11, 2.5f);
  Model model = toyModel("mlp:6-5-3", 4);
  const int classes = model.numClasses();
  SamplerOptions options;
  options.mode = SamplingMode::kPriority;
  options.proposal = Proposal::kTable;
  options.scoutThread = true;
  options.scoutFactor = 8.0f;  // 64 scouts a step for b = 8: one chunk of the thread
  options.ageing = 1.0f;       // a score keeps its value: it can be compared exactly
  Sampler sampler(data, options, 3);
  const int b = 8;
  // The scouts leave the minibatch's pass.
  auto first = sampler.next(model, b);
  CHECK(first.scouts == 0);
  CHECK(first.forwardFeatures.empty());
  // Steps without training (the parameters stay those posted) until the thread has
  // scored every example at least once; each step takes what it finished.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (sampler.scoredExamples() < 2 * data.size() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    (void)sampler.next(model, b);
  }
  REQUIRE(sampler.scoredExamples() >= 2 * data.size());
  std::vector<float> x(data.featureDim());
  Model twin = model;
  for (uint32_t i = 0; i < data.size(); ++i) {
    data.gather({&i, 1}, x);
    auto p = twin.forward(x.data(), 1);
    float s = 0.0f;
    for (int c = 0; c < classes; ++c) {
      const float d = p[c] - (c == data.label(i) ? 1.0f : 0.0f);
      s += d * d;
    }
    CHECK(sampler.score(i) == Approx(std::sqrt(s)).epsilon(1e-4));
  }
}
