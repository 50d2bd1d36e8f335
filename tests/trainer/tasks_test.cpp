// The Trainer on the binary and regression heads: linear and logistic regression
// converge, under uniform and priority sampling (whose scores follow the head).
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "starling/client/trainer.hpp"

#include "toy_data.hpp"

using starling::client::Proposal;
using starling::client::SamplingMode;
using starling::client::Trainer;
using starling::client::TrainerOptions;
using starling::client::TrainRequest;
using starling::client::test::toyModel;
using starling::data::Dataset;
using starling::data::TaskKind;

namespace {

// y = 2x + 1 + N(0, 0.1^2), x uniform in [-1, 1].
Dataset line(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  std::vector<float> x(n);
  std::vector<float> y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = u(rng);
    y[i] = 2.0f * x[i] + 1.0f + noise(rng);
  }
  return std::move(Dataset::fromFloatTargets(std::move(x), std::move(y), 1)).value();
}

// Two features, label 1 when x0 + x1 > 0, with a margin of 0.2 around the boundary.
Dataset separable(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> x;
  std::vector<int32_t> y;
  while (static_cast<int>(y.size()) < n) {
    const float a = u(rng);
    const float b = u(rng);
    if (std::abs(a + b) < 0.2f) continue;
    x.push_back(a);
    x.push_back(b);
    y.push_back(a + b > 0.0f ? 1 : 0);
  }
  return std::move(Dataset::fromFloats(std::move(x), std::move(y), 2, 2)).value();
}

}  // namespace

TEST_CASE("linear regression on y = 2x + 1 converges", "[trainer][tasks]") {
  const Dataset data = line(1000, 1);
  for (const char* spec : {"linear:1-1/mse", "linear:1-1/huber:1"})
    for (SamplingMode mode : {SamplingMode::kUniform, SamplingMode::kPriority})
      for (Proposal proposal : {Proposal::kTable, Proposal::kCandidates}) {
        DYNAMIC_SECTION(spec << ", mode " << static_cast<int>(mode) << ", proposal " << static_cast<int>(proposal)) {
          TrainerOptions options;
          options.batchSize = 32;
          options.sampler.mode = mode;
          options.sampler.proposal = proposal;
          auto trainer = Trainer::create(toyModel(spec, 3), data, options);
          REQUIRE(trainer.isOk());
          std::vector<float> base(trainer->model().params().begin(), trainer->model().params().end());
          std::vector<float> delta(base.size());
          auto before = trainer->model().evaluate(data);
          REQUIRE(before.isOk());
          auto stats = trainer->run(base, TrainRequest{400, 0.05f, 7}, delta);
          REQUIRE(stats.isOk());
          auto after = trainer->model().evaluate(data);
          REQUIRE(after.isOk());
          INFO("rmse " << *after->metrics.rmse << " w " << trainer->model().params()[0] << " b "
                       << trainer->model().params()[1]);
          CHECK(after->metrics.task == TaskKind::kRegression);
          CHECK(*after->metrics.rmse < 0.13);  // the noise alone gives 0.1
          CHECK(after->loss < 0.01);
          CHECK(*after->metrics.r2 > 0.99);
          CHECK(trainer->model().params()[0] == Approx(2.0).margin(0.05));
          CHECK(trainer->model().params()[1] == Approx(1.0).margin(0.05));
          CHECK(stats->lossEnd < 0.05 * stats->lossStart);
          CHECK(stats->lossStart == Approx(before->loss).epsilon(0.5));
          if (mode == SamplingMode::kPriority) CHECK(stats->prioritizedSteps == 400);
        }
      }
}

TEST_CASE("logistic regression on separable data passes 95%", "[trainer][tasks]") {
  const Dataset data = separable(1000, 2);
  for (const char* spec : {"linear:2-1/logistic", "mlp:tanh:2-8-1/logistic"})
    for (SamplingMode mode : {SamplingMode::kUniform, SamplingMode::kPriority}) {
      DYNAMIC_SECTION(spec << ", mode " << static_cast<int>(mode)) {
        TrainerOptions options;
        options.batchSize = 32;
        options.sampler.mode = mode;
        auto trainer = Trainer::create(toyModel(spec, 5), data, options);
        REQUIRE(trainer.isOk());
        std::vector<float> base(trainer->model().params().begin(), trainer->model().params().end());
        std::vector<float> delta(base.size());
        auto stats = trainer->run(base, TrainRequest{300, 0.1f, 9}, delta);
        REQUIRE(stats.isOk());
        auto after = trainer->model().evaluate(data);
        REQUIRE(after.isOk());
        CHECK(after->metrics.task == TaskKind::kBinary);
        CHECK(after->accuracy > 0.95);
        CHECK(*after->metrics.auc > 0.99);
        CHECK(stats->lossEnd < 0.5 * stats->lossStart);
      }
    }
}

TEST_CASE("the Trainer refuses data of another task", "[trainer][tasks]") {
  const Dataset reg = line(10, 1);
  const Dataset bin = separable(10, 1);
  auto a = Trainer::create(toyModel("linear:1-2", 1), reg);
  CHECK_FALSE(a.isOk());
  auto b = Trainer::create(toyModel("linear:2-1/mse", 1), bin);
  CHECK_FALSE(b.isOk());
  CHECK(Trainer::create(toyModel("linear:2-1/logistic", 1), bin).isOk());
  CHECK(Trainer::create(toyModel("linear:2-2", 1), bin).isOk());
}
