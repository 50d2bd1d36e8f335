// Fleet: the simulated federation's data, clients, devices and links.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "starling/data/idx_select.hpp"
#include "starling/data/loaders.hpp"
#include "starling/data/partition.hpp"
#include "starling/model/model.hpp"

#include "sim.hpp"

namespace starling::sim {
namespace {

// A seeded sample of `want` examples of a split (all of them when want is 0 or
// more than the split holds), read without holding the rest.
Result<data::Dataset> loadSample(const std::string& dir, data::FashionMnistSplit split, uint32_t want, uint64_t seed) {
  auto labels = data::loadFashionMnistLabels(dir, split);
  if (!labels) return labels.status();
  if (want == 0 || want >= labels->size()) return data::loadFashionMnistSplit(dir, split);
  // Client 0 of an IID partition into n / want pieces is a uniform sample of about `want`.
  const std::size_t pieces = labels->size() / want;
  auto parts = data::partitionIid(*labels, pieces, seed);
  return data::loadFashionMnistSubset(dir, split, parts[0]);
}

Result<std::vector<double>> readTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kNotFound, path + ": cannot open the speed trace");
  std::vector<double> speeds;
  double v = 0;
  while (in >> v) {
    if (!(v > 0) || !std::isfinite(v))
      return Status(StatusCode::kMalformed,
                    fmt::format("{}: speed {} on line {} is not positive", path, v, speeds.size() + 1));
    speeds.push_back(v);
  }
  if (!in.eof())
    return Status(StatusCode::kMalformed, fmt::format("{}: line {} is not a number", path, speeds.size() + 1));
  if (speeds.empty()) return Status(StatusCode::kMalformed, path + ": the speed trace is empty");
  return speeds;
}

}  // namespace

int64_t linkMicros(uint64_t bytes, double mbps, double latencyMs) {
  return static_cast<int64_t>(std::llround(latencyMs * 1e3 + double(bytes) * 8.0 / mbps));
}

double computeSeconds(double flopsPerExample, uint64_t trainedExamples, uint64_t forwardOnlyExamples,
                      double flopsPerSecond) {
  // A backward pass costs about twice the forward pass.
  return flopsPerExample * (3.0 * double(trainedExamples) + double(forwardOnlyExamples)) / flopsPerSecond;
}

Result<Fleet> Fleet::create(const SimSettings& s, const std::string& modelSpec) {
  auto bad = [](const std::string& why) { return Status(StatusCode::kInvalidArgument, why); };
  if (s.clients == 0) return bad("sim.clients must be at least 1");
  if (!(s.deviceGflops > 0)) return bad("sim.device-gflops must be positive");
  if (!(s.uplinkMbps > 0) || !(s.downlinkMbps > 0)) return bad("link bandwidths must be positive");
  if (!(s.latencyMs >= 0)) return bad("sim.latency-ms must be >= 0");
  if (!(s.dropout >= 0 && s.dropout < 1)) return bad("sim.dropout must be in [0, 1)");
  if (!(s.speedSpread >= 1)) return bad("sim.speed-spread must be at least 1");
  if (!(s.speedSigma >= 0)) return bad("sim.speed-sigma must be >= 0");
  if (s.efClients == 0) return bad("sim.ef-clients must be at least 1");
  if (s.speedDistribution != "loguniform" && s.speedDistribution != "lognormal")
    return bad("sim.speed-distribution must be loguniform or lognormal");

  Fleet f;
  f.settings_ = s;
  const std::string dir = s.data.empty() ? data::defaultFashionMnistDir() : s.data;
  auto train = loadSample(dir, data::FashionMnistSplit::kTrain, s.trainExamples, s.seed);
  if (!train) return train.status().withContext("training data");
  auto test = loadSample(dir, data::FashionMnistSplit::kTest, s.testExamples, s.seed + 1);
  if (!test) return test.status().withContext("test data");
  f.train_ = std::move(*train);
  f.test_ = std::move(*test);

  auto model = model::Model::fromSpec(modelSpec);
  if (!model) return model.status().withContext("model spec");
  f.flopsPerExample_ = s.flopsPerExample;
  if (f.flopsPerExample_ <= 0) {
    // One multiply-add per weight per example: exact for dense layers, a lower bound
    // for convolutions (set flops-per-example for those).
    double weights = 0;
    for (const auto& t : model->layout().tensors())
      if (t.shape.size() >= 2) weights += double(t.size);
    f.flopsPerExample_ = 2.0 * weights;
  }

  auto parts = data::partitionBySpec(f.train_.labels(), s.clients, s.partition, s.seed);
  if (!parts) return parts.status().withContext("sim.partition");
  std::vector<double> trace;
  if (!s.speedTrace.empty()) {
    auto t = readTrace(s.speedTrace);
    if (!t) return t.status();
    trace = std::move(*t);
  }
  std::mt19937_64 rng(s.seed ^ 0x5eedf1ee7ull);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double fastest = s.deviceGflops * 1e9;
  f.clients_.resize(s.clients);
  for (uint32_t i = 0; i < s.clients; ++i) {
    Client& c = f.clients_[i];
    c.examples = std::move((*parts)[i]);
    double relative = 1.0;
    if (!trace.empty()) {
      const double top = *std::max_element(trace.begin(), trace.end());
      relative = trace[i % trace.size()] / top;
    } else if (s.speedDistribution == "loguniform") {
      relative = std::exp(-unit(rng) * std::log(s.speedSpread));
    } else {
      relative = std::min(1.0, std::exp(-std::abs(normal(rng)) * s.speedSigma));
    }
    c.flopsPerSecond = fastest * relative;
  }
  return f;
}

}  // namespace starling::sim
