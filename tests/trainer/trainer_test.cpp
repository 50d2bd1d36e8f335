// Trainer: local SGD converges, returns xhat - x, is deterministic, and applies
// momentum, weight decay, clipping and FedProx's proximal term as documented.
#include "starling/client/trainer.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "toy_data.hpp"

using starling::StatusCode;
using starling::client::Proposal;
using starling::client::SamplingMode;
using starling::client::Trainer;
using starling::client::TrainerOptions;
using starling::client::TrainRequest;
using starling::client::test::toyModel;
using starling::model::Model;

namespace {

double norm(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v)
    s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

}  // namespace

TEST_CASE("local SGD converges on a separable toy problem", "[trainer]") {
  auto data = starling::client::test::blobs(400, 8, 4, 1);
  for (SamplingMode mode : {SamplingMode::kUniform, SamplingMode::kPriority})
    for (Proposal proposal : {Proposal::kTable, Proposal::kCandidates}) {
      DYNAMIC_SECTION("sampling mode " << static_cast<int>(mode) << ", proposal " << static_cast<int>(proposal)) {
        TrainerOptions options;
        options.batchSize = 16;
        options.sampler.mode = mode;
        options.sampler.proposal = proposal;
        auto trainer = Trainer::create(toyModel("mlp:8-16-4", 3), data, options);
        REQUIRE(trainer.isOk());
        std::vector<float> base(trainer->model().params().begin(), trainer->model().params().end());
        std::vector<float> delta(base.size());
        auto before = trainer->model().evaluate(data);
        REQUIRE(before.isOk());
        auto stats = trainer->run(base, TrainRequest{300, 0.05f, 7}, delta);
        REQUIRE(stats.isOk());
        auto after = trainer->model().evaluate(data);
        REQUIRE(after.isOk());
        CHECK(stats->steps == 300);
        CHECK(stats->examples == 300u * 16u);
        CHECK(stats->lossEnd < 0.2 * stats->lossStart);
        CHECK(stats->lossStart == Approx(before->loss).epsilon(0.5));
        CHECK(after->accuracy >= 0.97);
        CHECK(stats->seconds > 0.0);
        if (mode == SamplingMode::kPriority) {
          CHECK(stats->prioritizedSteps == 300);
          // The table proposal's scouts (0.75 b a step) ride in the training step's forward pass.
          CHECK(stats->scoredExamples == (proposal == Proposal::kTable ? 300u * 12u : 300u * 48u));
        } else {
          CHECK(stats->prioritizedSteps == 0);
          CHECK(stats->scoredExamples == 0);
        }
      }
    }
}

TEST_CASE("run returns xhat - x and leaves x in the model", "[trainer]") {
  auto data = starling::client::test::blobs(100, 5, 3, 2);
  auto trainer = Trainer::create(toyModel("mlp:5-6-3", 1), data);
  REQUIRE(trainer.isOk());
  std::vector<float> base(trainer->model().numParams());
  for (std::size_t i = 0; i < base.size(); ++i)
    base[i] = 0.01f * std::sin(static_cast<float>(i));
  std::vector<float> delta(base.size());
  REQUIRE(trainer->run(base, TrainRequest{10, 0.1f, 1}, delta).isOk());
  CHECK(norm(delta) > 0.0);
  for (std::size_t i = 0; i < base.size(); ++i)
    CHECK(trainer->model().params()[i] == Approx(base[i] - delta[i]).margin(1e-6));

  SECTION("zero steps give a zero difference") {
    REQUIRE(trainer->run(base, TrainRequest{0, 0.1f, 1}, delta).isOk());
    CHECK(norm(delta) == 0.0);
  }
}

TEST_CASE("the same seed gives the same difference", "[trainer]") {
  auto data = starling::client::test::blobs(200, 6, 3, 4);
  TrainerOptions options;
  options.sampler.mode = SamplingMode::kAdaptive;
  options.sampler.threshold = 1.05f;  // so that priority sampling switches on
  auto a = Trainer::create(toyModel("mlp:6-8-3", 2), data, options);
  auto b = Trainer::create(toyModel("mlp:6-8-3", 2), data, options);
  REQUIRE((a.isOk() && b.isOk()));
  std::vector<float> base(a->model().params().begin(), a->model().params().end());
  std::vector<float> da(base.size());
  std::vector<float> db(base.size());
  auto sa = a->run(base, TrainRequest{50, 0.05f, 99}, da);
  auto sb = b->run(base, TrainRequest{50, 0.05f, 99}, db);
  REQUIRE((sa.isOk() && sb.isOk()));
  CHECK(sa->prioritizedSteps > 0);
  CHECK(da == db);
  CHECK(sa->lossEnd == sb->lossEnd);
  REQUIRE(b->run(base, TrainRequest{50, 0.05f, 100}, db).isOk());
  CHECK(da != db);
}

TEST_CASE("the batch log records each step's minibatch and changes nothing", "[trainer]") {
  auto data = starling::client::test::blobs(120, 5, 3, 6);
  TrainerOptions options;
  options.batchSize = 8;
  options.momentum = 0.0f;
  options.sampler.mode = SamplingMode::kUniform;
  auto plain = Trainer::create(toyModel("mlp:5-7-3", 4), data, options);
  std::vector<uint32_t> log;
  options.batchLog = &log;
  auto logged = Trainer::create(toyModel("mlp:5-7-3", 4), data, options);
  REQUIRE((plain.isOk() && logged.isOk()));
  std::vector<float> base(plain->model().params().begin(), plain->model().params().end());
  std::vector<float> d1(base.size()), d2(base.size());
  REQUIRE(plain->run(base, TrainRequest{12, 0.1f, 5}, d1).isOk());
  REQUIRE(logged->run(base, TrainRequest{12, 0.1f, 5}, d2).isOk());
  CHECK(d1 == d2);
  REQUIRE(log.size() == 12u * 8u);
  for (uint32_t i : log)
    CHECK(i < data.size());

  // Replaying the logged minibatches with plain SGD gives the same difference, bit for bit.
  Model replay = toyModel("mlp:5-7-3", 4);
  REQUIRE(replay.setParams(base).isOk());
  std::vector<float> grad(base.size()), x(5 * 8);
  std::vector<float> y(8);
  for (int step = 0; step < 12; ++step) {
    std::span<const uint32_t> rows(log.data() + step * 8, 8);
    data.gather(rows, x);
    for (int j = 0; j < 8; ++j)
      y[j] = static_cast<float>(data.label(rows[j]));
    replay.forwardBackward(x.data(), y.data(), nullptr, 8, grad);
    for (std::size_t i = 0; i < base.size(); ++i)
      replay.params()[i] -= 0.1f * (grad[i] + 0.0f * replay.params()[i]);
  }
  for (std::size_t i = 0; i < base.size(); ++i)
    CHECK(base[i] - replay.params()[i] == d1[i]);

  SECTION("it appends: a second run adds its steps") {
    REQUIRE(logged->run(base, TrainRequest{3, 0.1f, 6}, d2).isOk());
    CHECK(log.size() == 15u * 8u);
  }
}

TEST_CASE("momentum, weight decay and clipping follow the documented update", "[trainer]") {
  // One example: every minibatch is that example repeated, so the minibatch gradient
  // is known and the update can be replayed by hand.
  auto data = starling::client::test::blobs(1, 4, 2, 5);
  Model reference = toyModel("mlp:4-3-2", 6);
  std::vector<float> x(4);
  data.gather(std::vector<uint32_t>{0}, x);
  const float y = static_cast<float>(data.label(0));

  TrainerOptions options;
  options.batchSize = 3;
  options.momentum = 0.5f;
  options.weightDecay = 0.1f;
  options.lossProbe = 0;
  options.sampler.mode = SamplingMode::kUniform;
  const float lr = 0.2f;
  const std::size_t d = reference.numParams();
  std::vector<float> base(reference.params().begin(), reference.params().end());

  // The gradient of one example equals that of the example repeated b times.
  auto gradientAt = [&](const std::vector<float>& params) {
    Model m = reference;
    REQUIRE(m.setParams(params).isOk());
    std::vector<float> g(d);
    m.forwardBackward(x.data(), &y, nullptr, 1, g);
    return g;
  };

  SECTION("momentum and weight decay") {
    std::vector<float> xs = base;
    std::vector<float> mom(d, 0.0f);
    for (int step = 0; step < 2; ++step) {
      std::vector<float> g = gradientAt(xs);
      for (std::size_t i = 0; i < d; ++i) {
        mom[i] = 0.5f * mom[i] + g[i];
        xs[i] -= lr * (mom[i] + 0.1f * xs[i]);
      }
    }
    auto trainer = Trainer::create(reference, data, options);
    REQUIRE(trainer.isOk());
    std::vector<float> delta(d);
    auto stats = trainer->run(base, TrainRequest{2, lr, 3}, delta);
    REQUIRE(stats.isOk());
    for (std::size_t i = 0; i < d; ++i)
      CHECK(delta[i] == Approx(base[i] - xs[i]).margin(1e-5));
  }
  SECTION("FedProx adds mu (x - xhat) to the gradient") {
    // Three steps: the first is plain (x = xhat), the next two are pulled back to xhat.
    options.proxMu = 0.7f;
    std::vector<float> xs = base;
    std::vector<float> mom(d, 0.0f);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> g = gradientAt(xs);
      for (std::size_t i = 0; i < d; ++i) {
        mom[i] = 0.5f * mom[i] + g[i] + 0.7f * (xs[i] - base[i]);
        xs[i] -= lr * (mom[i] + 0.1f * xs[i]);
      }
    }
    auto trainer = Trainer::create(reference, data, options);
    REQUIRE(trainer.isOk());
    std::vector<float> delta(d);
    REQUIRE(trainer->run(base, TrainRequest{3, lr, 3}, delta).isOk());
    for (std::size_t i = 0; i < d; ++i)
      CHECK(delta[i] == Approx(base[i] - xs[i]).margin(1e-5));
    // And the term changes the result: without it the run ends elsewhere.
    options.proxMu = 0.0f;
    auto plain = Trainer::create(reference, data, options);
    REQUIRE(plain.isOk());
    std::vector<float> plainDelta(d);
    REQUIRE(plain->run(base, TrainRequest{3, lr, 3}, plainDelta).isOk());
    double diff = 0;
    for (std::size_t i = 0; i < d; ++i)
      diff += std::abs(double(plainDelta[i]) - double(delta[i]));
    CHECK(diff > 1e-3);
  }
  SECTION("clipping bounds the gradient norm") {
    options.momentum = 0.0f;
    options.weightDecay = 0.0f;
    std::vector<float> g = gradientAt(base);
    const double gnorm = norm(g);
    REQUIRE(gnorm > 0.1);
    options.clipNorm = static_cast<float>(gnorm / 4);
    auto trainer = Trainer::create(reference, data, options);
    REQUIRE(trainer.isOk());
    std::vector<float> delta(d);
    REQUIRE(trainer->run(base, TrainRequest{1, lr, 3}, delta).isOk());
    // One clipped step: delta = lr * g * (clip / ||g||).
    CHECK(norm(delta) == Approx(lr * gnorm / 4).epsilon(1e-4));
    for (std::size_t i = 0; i < d; ++i)
      CHECK(delta[i] == Approx(lr * g[i] / 4).margin(1e-6));
  }
}

TEST_CASE("the trainer refuses what it cannot use", "[trainer]") {
  auto data = starling::client::test::blobs(20, 5, 3, 2);
  SECTION("a model for other data") {
    auto t = Trainer::create(toyModel("mlp:6-3", 1), data);
    REQUIRE_FALSE(t.isOk());
    CHECK(t.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(t.status().message(), Catch::Contains("5 features"));
  }
  SECTION("too few classes") {
    auto t = Trainer::create(toyModel("mlp:5-2", 1), data);
    REQUIRE_FALSE(t.isOk());
  }
  SECTION("bad options") {
    TrainerOptions options;
    options.batchSize = 0;
    CHECK_FALSE(Trainer::create(toyModel("mlp:5-3", 1), data, options).isOk());
    options = {};
    options.sampler.lambda = 0.0f;
    CHECK_FALSE(Trainer::create(toyModel("mlp:5-3", 1), data, options).isOk());
    options = {};
    options.momentum = 1.0f;
    CHECK_FALSE(Trainer::create(toyModel("mlp:5-3", 1), data, options).isOk());
    options = {};
    options.proxMu = -0.1f;
    CHECK_FALSE(Trainer::create(toyModel("mlp:5-3", 1), data, options).isOk());
    options = {};
    options.sampler.scoutFactor = -1.0f;
    CHECK_FALSE(Trainer::create(toyModel("mlp:5-3", 1), data, options).isOk());
    options.sampler.scoutFactor = 0.0f;  // no scouts
    CHECK(Trainer::create(toyModel("mlp:5-3", 1), data, options).isOk());
  }
  SECTION("a base of the wrong size") {
    auto t = Trainer::create(toyModel("mlp:5-3", 1), data);
    REQUIRE(t.isOk());
    std::vector<float> base(7);
    std::vector<float> delta(t->model().numParams());
    auto r = t->run(base, TrainRequest{}, delta);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
  }
}
