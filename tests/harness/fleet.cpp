// Fleet: the simulated federation's data, clients, devices and links.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "starling/client/learner.hpp"
#include "starling/data/idx_select.hpp"
#include "starling/data/load.hpp"
#include "starling/data/loaders.hpp"
#include "starling/data/partition.hpp"
#include "starling/model/model.hpp"
#include "starling/onnx/onnx.hpp"

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

// A seeded sample of `want` examples of a data set (all of it when want is 0 or more
// than it holds).
data::Dataset sampleOf(data::Dataset all, uint32_t want, uint64_t seed) {
  if (want == 0 || want >= all.size()) return all;
  const auto parts = data::partitionIid(all.labels(), all.size() / want, seed);
  return all.subset(parts[0]);
}

// The training and test sets of a data file (CSV, LIBSVM, NPY, NPZ): the test set from
// sim.test-data, or, without it, a seeded fifth of the file held out.
Result<std::pair<data::Dataset, data::Dataset>> loadFiles(const SimSettings& s, const data::DataOptions& options) {
  auto all = data::loadData(s.data, options);
  if (!all) return all.status().withContext("sim.data");
  data::Dataset train, test;
  if (!s.testData.empty()) {
    data::DataOptions noGroups = options;  // the test set is not partitioned
    noGroups.groupColumn.clear();
    auto t = data::loadData(s.testData, noGroups);
    if (!t) return t.status().withContext("sim.test-data");
    if (t->featureDim() != all->featureDim())
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("sim.test-data has {} features, sim.data {}", t->featureDim(), all->featureDim()));
    train = std::move(*all);
    test = std::move(*t);
  } else {
    if (all->size() < 5)
      return Status(StatusCode::kInvalidArgument, s.data + ": too few examples to hold out a test fifth");
    const auto parts = data::partitionIid(all->labels(), 5, s.seed ^ 0x7e57ull);
    std::vector<uint32_t> rest;
    for (std::size_t p = 1; p < parts.size(); ++p)
      rest.insert(rest.end(), parts[p].begin(), parts[p].end());
    std::sort(rest.begin(), rest.end());
    test = all->subset(parts[0]);
    train = all->subset(rest);
  }
  return std::pair{sampleOf(std::move(train), s.trainExamples, s.seed),
                   sampleOf(std::move(test), s.testExamples, s.seed + 1)};
}

// Partition files:DIR: the clients' files one after the other, and client i's examples
// in them. The test set is sim.test-data or, without it, a seeded fifth of all the
// files' examples held out (each client keeps the rest of its file).
struct ClientFiles {
  data::Dataset train, test;
  data::Partition parts;
};

Result<ClientFiles> loadClientFiles(const SimSettings& s, const std::string& dir, const data::DataOptions& options) {
  auto bad = [](const std::string& why) { return Status(StatusCode::kInvalidArgument, why); };
  if (!s.data.empty())
    return bad("sim.data is not used with sim.partition files:DIR (each client's data is its file in " + dir +
               "); leave sim.data empty");
  if (s.trainExamples != 0)
    return bad("sim.train-examples does not apply to sim.partition files:DIR (each client trains on its whole file)");
  auto files = data::loadFilesPartition(dir, s.clients, options);
  if (!files) return files.status().withContext("sim.partition");
  ClientFiles out;
  if (!s.testData.empty()) {
    auto t = data::loadData(s.testData, options);
    if (!t) return t.status().withContext("sim.test-data");
    if (t->featureDim() != files->all.featureDim())
      return bad(fmt::format("sim.test-data has {} features, the files of {} {}", t->featureDim(), dir,
                             files->all.featureDim()));
    out.test = sampleOf(std::move(*t), s.testExamples, s.seed + 1);
    out.train = std::move(files->all);
    out.parts = std::move(files->parts);
    return out;
  }
  if (files->all.size() < 5) return bad(dir + ": too few examples to hold out a test fifth");
  const auto fifths = data::partitionIid(files->all.size(), 5, s.seed ^ 0x7e57ull);
  std::vector<bool> isTest(files->all.size(), false);
  for (uint32_t i : fifths[0])
    isTest[i] = true;
  // The training rows keep their order, so each client's rows stay its own, renumbered.
  std::vector<uint32_t> rest, renumbered(files->all.size(), 0);
  for (uint32_t i = 0; i < files->all.size(); ++i) {
    if (isTest[i]) continue;
    renumbered[i] = static_cast<uint32_t>(rest.size());
    rest.push_back(i);
  }
  for (auto& rows : files->parts) {
    std::vector<uint32_t> kept;
    for (uint32_t i : rows)
      if (!isTest[i]) kept.push_back(renumbered[i]);
    out.parts.push_back(std::move(kept));
  }
  out.test = sampleOf(files->all.subset(fifths[0]), s.testExamples, s.seed + 1);
  out.train = files->all.subset(rest);
  return out;
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

// The lines of a trace file that carry data, each with its line number: '#' starts a
// comment, blank lines are skipped.
Result<std::vector<std::pair<std::size_t, std::string>>> traceLines(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kNotFound, fmt::format("{}: cannot open the {}", path, what));
  std::vector<std::pair<std::size_t, std::string>> lines;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    lines.emplace_back(n, line);
  }
  if (lines.empty()) return Status(StatusCode::kMalformed, fmt::format("{}: the {} is empty", path, what));
  return lines;
}

// Exactly `count` numbers on a line, or an error naming the line.
Status numbers(const std::string& path, std::size_t lineNo, const std::string& line, std::size_t count,
               std::vector<double>& out) {
  std::istringstream fields(line);
  out.clear();
  double v = 0;
  while (fields >> v)
    out.push_back(v);
  if (!fields.eof() || out.size() != count)
    return Status(StatusCode::kMalformed,
                  fmt::format("{}: line {} is not {} numbers: '{}'", path, lineNo, count, line));
  for (double x : out)
    if (!std::isfinite(x))
      return Status(StatusCode::kMalformed, fmt::format("{}: line {} has a number that is not finite", path, lineNo));
  return Status::ok();
}

struct Link {
  double upMbps = 0, downMbps = 0, latencyMs = 0;
};

Result<std::vector<Link>> readLinkTrace(const std::string& path) {
  auto lines = traceLines(path, "link trace");
  if (!lines) return lines.status();
  std::vector<Link> links;
  std::vector<double> v;
  for (const auto& [n, line] : *lines) {
    STARLING_RETURN_IF_ERROR(numbers(path, n, line, 3, v));
    if (!(v[0] > 0) || !(v[1] > 0) || !(v[2] >= 0))
      return Status(StatusCode::kMalformed,
                    fmt::format("{}: line {}: bandwidths must be positive and the latency >= 0", path, n));
    links.push_back({v[0], v[1], v[2]});
  }
  return links;
}

}  // namespace

Result<std::vector<std::vector<Fleet::Window>>> readAvailabilityTrace(const std::string& path, double periodS) {
  auto lines = traceLines(path, "availability trace");
  if (!lines) return lines.status();
  std::vector<std::vector<Fleet::Window>> devices;
  std::vector<double> v;
  for (const auto& [n, line] : *lines) {
    STARLING_RETURN_IF_ERROR(numbers(path, n, line, 3, v));
    auto bad = [&, n = n](const std::string& why) {
      return Status(StatusCode::kMalformed, fmt::format("{}: line {}: {}", path, n, why));
    };
    if (!(v[0] >= 0 && v[0] < 1e6 && v[0] == std::floor(v[0])))
      return bad("the device must be an integer in [0, 1000000)");
    if (!(v[1] >= 0 && v[1] < v[2])) return bad("a window must have 0 <= start < end");
    if (periodS > 0 && v[2] > periodS) return bad(fmt::format("the window ends after the period of {} s", periodS));
    const auto d = static_cast<std::size_t>(v[0]);
    if (devices.size() <= d) devices.resize(d + 1);
    if (!devices[d].empty() && v[1] < devices[d].back().end)
      return bad(fmt::format("the window starts before the end of device {}'s previous one", d));
    devices[d].push_back({v[1], v[2]});
  }
  return devices;
}

const std::vector<Fleet::Window>& Fleet::windows(std::size_t i) const {
  static const std::vector<Window> kNone;
  const int32_t d = clients_[i].device;
  return d < 0 ? kNone : devices_[static_cast<std::size_t>(d)];
}

int64_t linkMicros(uint64_t bytes, double mbps, double latencyMs) {
  return static_cast<int64_t>(std::llround(latencyMs * 1e3 + double(bytes) * 8.0 / mbps));
}

int64_t transferMicros(uint64_t bytes, int64_t startUs, double mbps, double latencyMs, ServerLink* a, ServerLink* b) {
  const bool limited = (a && a->mbps > 0) || (b && b->mbps > 0);
  if (!limited) return startUs + linkMicros(bytes, mbps, latencyMs);
  int64_t doneUs = startUs + linkMicros(bytes, mbps, 0);
  for (ServerLink* link : {a, b}) {
    if (!link || link->mbps <= 0) continue;
    link->freeUs = std::max(startUs, link->freeUs) + linkMicros(bytes, link->mbps, 0);
    doneUs = std::max(doneUs, link->freeUs);
  }
  return doneUs + linkMicros(0, 1, latencyMs);
}

double computeSeconds(double flopsPerExample, uint64_t trainedExamples, uint64_t forwardOnlyExamples,
                      double flopsPerSecond) {
  // A backward pass costs about twice the forward pass.
  return flopsPerExample * (3.0 * double(trainedExamples) + double(forwardOnlyExamples)) / flopsPerSecond;
}

Result<Fleet> Fleet::create(const SimSettings& s, const std::string& modelSpec, const data::DataOptions& options,
                            float huberDelta) {
  auto bad = [](const std::string& why) { return Status(StatusCode::kInvalidArgument, why); };
  if (s.clients == 0) return bad("sim.clients must be at least 1");
  if (!(s.deviceGflops > 0)) return bad("sim.device-gflops must be positive");
  if (!(s.uplinkMbps > 0) || !(s.downlinkMbps > 0)) return bad("link bandwidths must be positive");
  if (!(s.latencyMs >= 0)) return bad("sim.latency-ms must be >= 0");
  if (!(s.dropout >= 0 && s.dropout < 1)) return bad("sim.dropout must be in [0, 1)");
  if (!(s.speedSpread >= 1)) return bad("sim.speed-spread must be at least 1");
  if (!(s.speedSigma >= 0)) return bad("sim.speed-sigma must be >= 0");
  if (!(s.linkSpread >= 1)) return bad("sim.link-spread must be at least 1");
  if (!(s.availabilityPeriodS >= 0)) return bad("sim.availability-period-s must be >= 0");
  if (s.efClients == 0) return bad("sim.ef-clients must be at least 1");
  if (s.learnerClients == 0) return bad("sim.learner-clients must be at least 1");
  if (!(s.evalFraction >= 0 && s.evalFraction <= 0.9)) return bad("sim.eval-fraction must be in [0, 0.9]");
  if (s.speedDistribution != "loguniform" && s.speedDistribution != "lognormal")
    return bad("sim.speed-distribution must be loguniform or lognormal");

  Fleet f;
  f.settings_ = s;
  const std::string filesDir = data::filesDirOf(s.partition);
  std::optional<data::Partition> fileParts;
  const std::string path = s.data.empty() ? data::defaultFashionMnistDir() : s.data;
  auto format =
      options.format == data::DataFormat::kAuto ? data::detectFormat(path) : Result<data::DataFormat>(options.format);
  if (!filesDir.empty()) {
    auto files = loadClientFiles(s, filesDir, options);
    if (!files) return files.status();
    f.train_ = std::move(files->train);
    f.test_ = std::move(files->test);
    fileParts = std::move(files->parts);
  } else if (!format) {
    return format.status().withContext("sim.data");
  } else if (*format == data::DataFormat::kIdx) {
    // An IDX directory (Fashion-MNIST's layout): its train and t10k splits, sampled
    // without holding the rest.
    if (options.task != data::TaskKind::kClassification)
      return Status(StatusCode::kInvalidArgument, "sim.data " + path + ": an IDX directory holds classes, not a " +
                                                      std::string(data::taskKindName(options.task)) + " task");
    auto train = loadSample(path, data::FashionMnistSplit::kTrain, s.trainExamples, s.seed);
    if (!train) return train.status().withContext("training data");
    auto test =
        loadSample(s.testData.empty() ? path : s.testData, data::FashionMnistSplit::kTest, s.testExamples, s.seed + 1);
    if (!test) return test.status().withContext("test data");
    f.train_ = std::move(*train);
    f.test_ = std::move(*test);
  } else {
    SimSettings withPath = s;
    withPath.data = path;
    data::DataOptions withGroups = options;
    withGroups.groupColumn = data::groupColumnOf(s.partition);
    auto sets = loadFiles(withPath, withGroups);
    if (!sets) return sets.status();
    f.train_ = std::move(sets->first);
    f.test_ = std::move(sets->second);
  }

  Result<std::string> resolved = std::string();
  if (modelSpec.starts_with("onnx:")) {
    // The architecture and the round-0 weights from an ONNX file, as the coordinator
    // reads task.model = "onnx:PATH".
    auto imported = onnxio::importOnnx(modelSpec.substr(5));
    if (!imported) return imported.status().withContext("task.model");
    resolved =
        onnxio::resolveImported(*imported, options.task, f.train_.featureDim(), f.train_.numClasses(), huberDelta);
    f.initialModel_ = std::move(imported->params);
  } else {
    resolved = model::resolveSpec(modelSpec, options.task, f.train_.featureDim(), f.train_.numClasses(), huberDelta);
  }
  if (!resolved) return resolved.status().withContext("model spec");
  f.modelSpec_ = *resolved;
  auto model = model::Model::fromSpec(f.modelSpec_);
  if (!model) return model.status().withContext("model spec");
  if (!f.initialModel_.empty() && f.initialModel_.size() != model->params().size())
    return Status(StatusCode::kInternal, fmt::format("{}: {} weights for a model of {}", modelSpec,
                                                     f.initialModel_.size(), model->params().size()));
  f.flopsPerExample_ = s.flopsPerExample;
  if (f.flopsPerExample_ <= 0) {
    // One multiply-add per weight per example: exact for dense layers, a lower bound
    // for convolutions (set flops-per-example for those).
    double weights = 0;
    for (const auto& t : model->layout().tensors())
      if (t.shape.size() >= 2) weights += double(t.size);
    f.flopsPerExample_ = 2.0 * weights;
  }

  // The clients' examples as views of one index array (sim.hpp, Client): drawn with
  // replacement (sim.client-examples, or more clients than examples under a partition that
  // draws), or the partition's split of the training set.
  const bool draws = fileParts == std::nullopt && data::groupColumnOf(s.partition).empty();
  f.drawn_ = s.clientExamples > 0 || (draws && s.clients > f.train_.size());
  data::IndexViews views;
  if (f.drawn_) {
    if (!draws)
      return bad("sim.client-examples draws each client's examples from one data set: not with sim.partition " +
                 s.partition);
    auto drawn = data::partitionWithReplacement(
        f.train_, s.clients, s.clientExamples > 0 ? s.clientExamples : kDrawnExamples, s.partition, s.seed);
    if (!drawn) return drawn.status().withContext("sim.partition");
    views = std::move(*drawn);
  } else {
    auto parts = fileParts ? Result<data::Partition>(std::move(*fileParts))
                           : data::partitionDataset(f.train_, s.clients, s.partition, s.seed);
    if (!parts) return parts.status().withContext("sim.partition");
    if (parts->size() != s.clients)
      return Status(StatusCode::kInternal,
                    fmt::format("the partition has {} clients, not {}", parts->size(), s.clients));
    std::size_t total = 0;
    for (const auto& p : *parts)
      total += p.size();
    views.offsets.reserve(parts->size() + 1);
    views.offsets.push_back(0);
    views.indices.reserve(total);
    for (auto& p : *parts) {
      views.indices.insert(views.indices.end(), p.begin(), p.end());
      views.offsets.push_back(views.indices.size());
      std::vector<uint32_t>().swap(p);
    }
  }
  // Federated evaluation: each client's held-out draw, as a device makes it, goes after
  // the examples it keeps.
  std::vector<uint32_t> kept(s.clients);
  for (uint32_t i = 0; i < s.clients; ++i) {
    const std::span<const uint32_t> mine = views.of(i);
    kept[i] = static_cast<uint32_t>(mine.size());
    if (s.evalFraction <= 0 || mine.empty()) continue;
    client::HeldOutSplit split = client::splitHeldOut(mine, s.evalFraction, s.seed ^ (0xe7a1ull + i));
    kept[i] = static_cast<uint32_t>(split.kept.size());
    auto at = views.indices.begin() + static_cast<std::ptrdiff_t>(views.offsets[i]);
    at = std::copy(split.kept.begin(), split.kept.end(), at);
    std::copy(split.heldOut.begin(), split.heldOut.end(), at);
  }
  f.index_ = std::move(views.indices);
  std::vector<double> trace;
  if (!s.speedTrace.empty()) {
    auto t = readTrace(s.speedTrace);
    if (!t) return t.status();
    trace = std::move(*t);
  }
  std::vector<Link> links;
  if (!s.linkTrace.empty()) {
    auto t = readLinkTrace(s.linkTrace);
    if (!t) return t.status();
    links = std::move(*t);
  }
  if (!s.availabilityTrace.empty()) {
    auto t = readAvailabilityTrace(s.availabilityTrace, s.availabilityPeriodS);
    if (!t) return t.status();
    f.devices_ = std::move(*t);
  }
  std::mt19937_64 rng(s.seed ^ 0x5eedf1ee7ull);
  std::mt19937_64 linkRng(s.seed ^ 0x11c5eedull);  // its own stream: speeds do not move with it
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double fastest = s.deviceGflops * 1e9;
  f.clients_.resize(s.clients);
  for (uint32_t i = 0; i < s.clients; ++i) {
    Client& c = f.clients_[i];
    const std::span<const uint32_t> all(f.index_.data() + views.offsets[i],
                                        static_cast<std::size_t>(views.offsets[i + 1] - views.offsets[i]));
    c.examples = all.first(kept[i]);
    c.heldOut = all.subspan(kept[i]);
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
    if (!links.empty()) {
      const Link& l = links[i % links.size()];
      c.uplinkMbps = l.upMbps;
      c.downlinkMbps = l.downMbps;
      c.latencyMs = l.latencyMs;
    } else {
      const double slower = s.linkSpread > 1 ? std::exp(unit(linkRng) * std::log(s.linkSpread)) : 1.0;
      c.uplinkMbps = s.uplinkMbps / slower;
      c.downlinkMbps = s.downlinkMbps / slower;
      c.latencyMs = s.latencyMs * slower;
    }
    if (!f.devices_.empty()) c.device = static_cast<int32_t>(i % f.devices_.size());
  }
  return f;
}

}  // namespace starling::sim
