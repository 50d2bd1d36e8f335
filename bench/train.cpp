// bench/train: local SGD examples/s beside PyTorch, centralized MLP/CNN accuracy, priority vs uniform sampling
//
// One run on Fashion-MNIST, one thread:
//   1. throughput: examples per second of Trainer::run (uniform minibatches, momentum
//      0.9) for the MLP 784-200-200-10 at batch 32 and 64, beside PyTorch running the
//      same steps (bench/train_torch.py, run with /usr/bin/python3 as a subprocess;
//      "not installed" when torch cannot be imported);
//   2. centralized test accuracy of the MLP after 5 epochs (lr 0.01) and of the small
//      CNN cnn:1x28x28-c16k5-p2-c32k5-p2-f128-10 after --cnn-epochs (4) epochs (lr 0.01
//      for two epochs, then divided by 5 per epoch), both batch 32, momentum 0.9;
//   3. priority vs uniform sampling: gradient steps and training seconds, wall-clock and
//      thread CPU time (scoring passes included, evaluations excluded) until the MLP
//      first reaches 85% test accuracy, evaluated every --eval-every (100) steps, mean
//      over --seeds (32) initializations, the rows taking turns seed by seed; the ratios
//      are uniform / priority (always on, table proposal), and uniform / adaptive (the
//      tau_vr switch, what starling-client runs) for adaptive_*; the last row is
//      ALGORITHMS.md's scheme (B = 3b candidates scored by a forward pass).
// Last line:
//   summary: ex_per_s_b32=X torch_ex_per_s_b32=Y mlp_acc_5ep=A cnn_acc=B
//            priority_step_ratio=C priority_wall_ratio=D client_bin_mb=E client_rss_mib=F
//            adaptive_step_ratio=G adaptive_wall_ratio=H priority_cpu_ratio=I
//   5. sparse data (--only sparse runs it alone, without Fashion-MNIST): examples/s of
//      Trainer::run on a synthetic hashed bag-of-words, 2^18 features at 0.1% density
//      (262 non-zeros an example, 20,000 examples, seeded), batch 32, plain SGD (no
//      momentum: the sparse update), for linear:262144-1/logistic and
//      embedbag:262144-16-1/logistic on CSR minibatches, beside the same models trained
//      dense: the same uniform minibatches densified (Dataset::gather), the dense
//      forwardBackward and the same update over every parameter. Its own line:
//        sparse: sparse_ex_per_s=S dense_equiv_ex_per_s=D ratio=S/D   (the linear model)
//   4. the starling-client binary: size of a stripped copy (E, 10^6 bytes) and that
//      copy's peak RSS (F, MiB, wait4's ru_maxrss) training on --shard 0/10 (6,000
//      examples) for 3 rounds against a starling-coordinator process on 127.0.0.1
//      configured as examples/fashion-mnist/coordinator.toml (one local epoch a round,
//      top-k 1%); also shown, not summarized: the RSS with uncompressed traffic.
//      "n/a" when the binaries are not built (scripts/bench builds them).
//
// Usage: bench-train [--data DIR] [--torch-script PATH] [--cnn-epochs N] [--eval-every STEPS]
//                    [--seeds N] [--quick] [--client-bin PATH] [--coordinator-bin PATH]
//                    [--rows uniform,table,adaptive,candidates] (the sampling rows to run)
//                    [--lambda F] [--ageing F] [--candidate-factor N]   (priority sampler options)
//                    [--scout-factor F] [--scout-uniform]   (table proposal: F b scouts per step, a sweep
//                                                            of the data set or uniform draws)
//                    [--scout-thread]   (the scouts on a second thread: SamplerOptions::scoutThread)
//                    [--only throughput|accuracy|sampling|split|client|sparse|approx]
//                    [--model SPEC] [--target ACC] [--lr F]   (the sampling rows' model, target test
//                                                               accuracy and learning rate)
// --data FILE (a LIBSVM file instead of the Fashion-MNIST directory): the sampling rows
// only, on that file split in file order (every fifth example is a test example), model
// mlp:D-32-C unless --model; e.g. --data /usr/share/doc/liblinear-tools/examples/heart_scale.
// --only split: microseconds per step in draw / forward / backward / scoring / update,
// uniform against the table proposal (dense data).
// --only approx (not part of the full run): how a cheap 2x2-pooled forward pass ranks
// examples against exact scores, beside table scores 100 and 500 steps old.
// --only runs one section; the summary then shows 0 or n/a for what was not measured.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "starling/client/trainer.hpp"
#include "starling/data/loaders.hpp"
#include "starling/model/model.hpp"

namespace {

using starling::client::Proposal;
using starling::client::SamplingMode;
using starling::client::Trainer;
using starling::client::TrainerOptions;
using starling::client::TrainRequest;
using starling::data::Dataset;
using starling::model::Model;

constexpr const char* kMlp = "mlp:784-200-200-10";
constexpr const char* kCnn = "cnn:1x28x28-c16k5-p2-c32k5-p2-f128-10";

struct Args {
  std::string data = starling::data::defaultFashionMnistDir();
  std::string torchScript;
  int cnnEpochs = 4;
  int evalEvery = 100;
  int seeds = 32;                               // steps to 85% vary by ~400 per seed: 16 seeds left ~100 steps of noise
  bool quick = false;                           // smaller runs, for a smoke test
  std::string only;                             // one section: throughput, accuracy, sampling or client (empty: all)
  std::string clientBin = STARLING_CLIENT_BIN;  // set by bench/meson.build
  std::string coordinatorBin = STARLING_COORDINATOR_BIN;   // set by bench/meson.build
  starling::client::SamplerOptions sampler;                // --lambda, --ageing, --candidate-factor
  std::string rows = "uniform,table,adaptive,candidates";  // --rows: the sampling rows to run
  // --data FILE (a LIBSVM file instead of the Fashion-MNIST directory): the sampling
  // section's model, target test accuracy (0: 85%, or 70% with --quick) and learning rate.
  std::string model;  // empty: mlp:784-200-200-10, or mlp:D-32-C for a file
  double target = 0.0;
  float lr = 0.01f;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench-train: %s\n", what.c_str());
  std::exit(1);
}

// A number in (0, 1] for option name, or exit naming both.
float number(const std::string& name, const std::string& text) {
  char* end = nullptr;
  const float v = std::strtof(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0.0f && v <= 1.0f))
    die(name + " takes a number in (0, 1], not '" + text + "'");
  return v;
}

Model build(const char* spec, uint64_t seed) {
  auto m = Model::fromSpec(spec);
  if (!m) die(m.status().toString());
  m->initialize(seed);
  return std::move(m).value();
}

// A trainer that keeps its momentum across run() calls, so that consecutive runs are
// one continuous SGD trajectory.
Trainer makeTrainer(const char* spec, const Dataset& train, int batch, SamplingMode mode, uint64_t initSeed = 1,
                    Proposal proposal = Proposal::kTable, const starling::client::SamplerOptions& sampler = {}) {
  TrainerOptions options;
  options.sampler = sampler;
  options.batchSize = batch;
  options.momentum = 0.9f;
  options.resetMomentum = false;
  options.lossProbe = 0;
  options.sampler.mode = mode;
  options.sampler.proposal = proposal;
  auto t = Trainer::create(build(spec, initSeed), train, options);
  if (!t) die(t.status().toString());
  return std::move(t).value();
}

// Runs steps more steps from the trainer's current model; returns seconds spent.
double advance(Trainer& t, int steps, float lr, uint64_t seed) {
  std::vector<float> base(t.model().params().begin(), t.model().params().end());
  std::vector<float> delta(base.size());
  auto stats = t.run(base, TrainRequest{steps, lr, seed}, delta);
  if (!stats) die(stats.status().toString());
  return stats->seconds;
}

// ---- 5. sparse data: CSR minibatches against the same steps on densified rows ----

// n examples of dim hashed features, k non-zeros each (values in (0, 1]), labels from a
// sparse random linear rule: separable, like bag-of-words sentiment.
Dataset hashedBagOfWords(int n, uint32_t dim, int k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> feature(0, dim - 1);
  std::uniform_real_distribution<float> value(0.05f, 1.0f);
  std::vector<uint64_t> off = {0};
  std::vector<uint32_t> idx;
  std::vector<float> val;
  std::vector<int32_t> labels;
  std::vector<uint32_t> row;
  for (int i = 0; i < n; ++i) {
    row.clear();
    while (static_cast<int>(row.size()) < k) {
      const uint32_t f = feature(rng);
      if (std::find(row.begin(), row.end(), f) == row.end()) row.push_back(f);
    }
    std::sort(row.begin(), row.end());
    double score = 0.0;
    for (uint32_t f : row) {
      const float v = value(rng);
      idx.push_back(f);
      val.push_back(v);
      score += ((f * 2654435761u) >> 31) != 0 ? v : -v;  // each feature votes +-1
    }
    off.push_back(idx.size());
    labels.push_back(score > 0.0 ? 1 : 0);
  }
  auto d = Dataset::fromSparse(std::move(off), std::move(idx), std::move(val), std::move(labels), dim, 2);
  if (!d) die(d.status().toString());
  return std::move(d).value();
}

// Examples/s of Trainer::run on sparse data (CSR minibatches), over at least `seconds`.
double sparseExPerS(const char* spec, const Dataset& data, double seconds) {
  TrainerOptions o;
  o.batchSize = 32;
  o.momentum = 0.0f;
  o.lossProbe = 0;
  auto t = Trainer::create(build(spec, 1), data, o);
  if (!t) die(t.status().toString());
  std::vector<float> base(t->model().params().begin(), t->model().params().end());
  std::vector<float> delta(base.size());
  double spent = 0.0;
  uint64_t examples = 0;
  for (uint64_t seed = 1; spent < seconds; ++seed) {
    auto st = t->run(base, TrainRequest{500, 0.1f, seed}, delta);
    if (!st) die(st.status().toString());
    // run() includes the final delta pass over all parameters: a round's cost, counted.
    spent += st->seconds;
    examples += st->examples;
  }
  return static_cast<double>(examples) / spent;
}

// The same steps on densified rows: uniform minibatches gathered dense, the dense
// forwardBackward, x <- x - lr g over every parameter.
double denseExPerS(const char* spec, const Dataset& data, double seconds) {
  Model m = build(spec, 1);
  const int b = 32;
  std::vector<float> x(static_cast<std::size_t>(b) * data.featureDim());
  std::vector<float> y(b);
  std::vector<uint32_t> idx(b);
  std::vector<float> grad(m.numParams());
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(data.size() - 1));
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&start] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  uint64_t examples = 0;
  while (elapsed() < seconds) {
    for (int i = 0; i < b; ++i) {
      idx[i] = pick(rng);
      y[i] = static_cast<float>(data.label(idx[i]));
    }
    data.gather(idx, x);
    m.forwardBackward(x.data(), y.data(), nullptr, b, grad);
    float* p = m.params().data();
    for (std::size_t i = 0; i < grad.size(); ++i)
      p[i] -= 0.1f * grad[i];
    examples += static_cast<uint64_t>(b);
  }
  return static_cast<double>(examples) / elapsed();
}

void sparseSection(bool quick) {
  const uint32_t dim = 1u << 18;
  const int k = 262;  // 0.1% of 2^18
  const Dataset data = hashedBagOfWords(quick ? 4000 : 20000, dim, k, 42);
  std::printf("\n%-44s %14s %14s %8s\n", "sparse: 2^18 features, 0.1% dense, batch 32", "sparse ex/s", "dense ex/s",
              "ratio");
  double linearSparse = 0.0;
  double linearDense = 0.0;
  for (const char* spec : {"linear:262144-1/logistic", "embedbag:262144-16-1/logistic"}) {
    const double s = sparseExPerS(spec, data, quick ? 0.3 : 1.5);
    const double d = denseExPerS(spec, data, quick ? 0.3 : 1.5);
    std::printf("%-44s %14.0f %14.0f %8.1f\n", spec, s, d, s / d);
    if (linearSparse == 0.0) {
      linearSparse = s;
      linearDense = d;
    }
  }
  std::printf("  (%zu examples, %zu non-zeros, %.1f MB as CSR; dense they would take %.1f GB)\n", data.size(),
              data.nnz(), data.memoryBytes() / 1e6, static_cast<double>(data.size()) * dim * 4 / 1e9);
  std::printf("sparse: sparse_ex_per_s=%.0f dense_equiv_ex_per_s=%.0f ratio=%.1f\n", linearSparse, linearDense,
              linearSparse / linearDense);
}

double accuracy(Trainer& t, const Dataset& test) {
  auto ev = t.model().evaluate(test);
  if (!ev) die(ev.status().toString());
  return ev->accuracy;
}

std::string findTorchScript(const Args& args) {
  if (!args.torchScript.empty()) return args.torchScript;
  std::vector<std::filesystem::path> roots = {std::filesystem::current_path()};
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (auto p = exe.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path())
      roots.push_back(p);
  for (const auto& r : roots)
    if (std::filesystem::exists(r / "bench" / "train_torch.py")) return (r / "bench" / "train_torch.py").string();
  return {};
}

// Runs the PyTorch helper; returns examples/s per batch size (empty: not installed).
std::vector<std::pair<int, double>> runTorch(const Args& args, std::string& note) {
  std::vector<std::pair<int, double>> out;
  const std::string script = findTorchScript(args);
  if (script.empty() || access("/usr/bin/python3", X_OK) != 0) {
    note = "not installed";
    return out;
  }
  const std::string cmd = "/usr/bin/python3 '" + script + "' --data '" + args.data + "' --batches 32,64 --examples " +
                          (args.quick ? "6400" : "64000") + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    note = "not installed";
    return out;
  }
  char line[512];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    int b = 0;
    int steps = 0;
    double seconds = 0.0;
    double rate = 0.0;
    if (std::sscanf(line, "torch b=%d steps=%d seconds=%lf ex_per_s=%lf", &b, &steps, &seconds, &rate) == 4)
      out.emplace_back(b, rate);
    else if (std::string(line).find("not installed") != std::string::npos)
      note = "not installed";
  }
  const int rc = pclose(p);
  if (out.empty() && note.empty()) note = "failed (exit " + std::to_string(rc) + ")";
  return out;
}

// --data FILE: a LIBSVM file (e.g. heart_scale), split in file order: every fifth
// example is a test example. Densified when that takes at most 64 MiB (the table
// proposal's scouts need dense rows), CSR otherwise.
void loadFile(const std::string& path, Dataset& train, Dataset& test) {
  auto all = starling::data::loadLibsvm(path);
  if (!all) die(all.status().toString());
  const std::size_t n = all->size();
  const std::size_t d = all->featureDim();
  std::vector<uint32_t> trainIdx;
  std::vector<uint32_t> testIdx;
  for (std::size_t i = 0; i < n; ++i)
    (i % 5 == 4 ? testIdx : trainIdx).push_back(static_cast<uint32_t>(i));
  if (static_cast<double>(n) * static_cast<double>(d) * 4.0 > 64.0 * (1 << 20)) {
    train = all->subset(trainIdx);
    test = all->subset(testIdx);
    return;
  }
  auto dense = [&](const std::vector<uint32_t>& idx) {
    std::vector<float> x(idx.size() * d);
    all->gather(idx, x);
    std::vector<int32_t> y;
    for (uint32_t i : idx)
      y.push_back(all->label(i));
    auto ds = Dataset::fromFloats(std::move(x), std::move(y), d, all->numClasses());
    if (!ds) die(path + ": " + ds.status().toString());
    return std::move(ds).value();
  };
  train = dense(trainIdx);
  test = dense(testIdx);
}

// This thread's CPU seconds: steadier than wall-clock on a shared machine.
double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct ToTarget {
  int steps = -1;         // -1: not reached
  double seconds = 0;     // training seconds until then (wall-clock)
  double cpuSeconds = 0;  // the same, in this thread's CPU time
  int prioritized = 0;
  double finalAccuracy = 0;
};

ToTarget stepsTo(double target, SamplingMode mode, Proposal proposal, const Dataset& train, const Dataset& test,
                 const Args& args, int maxSteps, uint64_t initSeed) {
  Trainer t = makeTrainer(args.model.c_str(), train, 32, mode, initSeed, proposal, args.sampler);
  ToTarget r;
  uint64_t seed = 1000 * initSeed;
  for (int done = 0; done < maxSteps;) {
    std::vector<float> base(t.model().params().begin(), t.model().params().end());
    std::vector<float> delta(base.size());
    const double cpu = threadCpuSeconds();
    auto stats = t.run(base, TrainRequest{args.evalEvery, args.lr, seed++}, delta);
    r.cpuSeconds += threadCpuSeconds() - cpu;
    if (!stats) die(stats.status().toString());
    r.seconds += stats->seconds;
    r.prioritized += stats->prioritizedSteps;
    done += args.evalEvery;
    r.finalAccuracy = accuracy(t, test);
    if (r.finalAccuracy >= target) {
      r.steps = done;
      return r;
    }
  }
  return r;
}

// ---- --only split: where a prioritized step's time goes ----

// The Trainer's step taken apart, a thread-CPU clock around each part, uniform against
// the table proposal (args.sampler's options), on a model trained uniformly for 1000
// steps first: draw (Sampler::next, gathers included), forward (b rows, or b + scouts),
// backward (Model::backwardRows over the b rows), scoring (observeScouts + observe),
// update (momentum 0.9). Microseconds per step, mean over the measured steps.
void splitSection(const Args& args, const Dataset& train) {
  if (train.isSparse()) die("--only split takes dense data (the scouts' shared forward pass)");
  Trainer warm = makeTrainer(args.model.c_str(), train, 32, SamplingMode::kUniform);
  advance(warm, 1000, args.lr, 1);
  const int b = 32;
  const int steps = args.quick ? 500 : 4000;
  std::printf("%-28s %8s %8s %8s %8s %8s %8s\n", "us per step (thread cpu), b 32", "draw", "forward", "backward",
              "scoring", "update", "total");
  for (SamplingMode mode : {SamplingMode::kUniform, SamplingMode::kPriority}) {
    starling::client::SamplerOptions o = args.sampler;
    o.mode = mode;
    o.proposal = Proposal::kTable;
    starling::client::Sampler sampler(train, o, 1);
    Model m = warm.model();
    const int classes = m.numClasses();
    std::vector<float> grad(m.numParams());
    std::vector<float> momentum(m.numParams(), 0.0f);
    std::vector<uint32_t> first(b);
    for (int i = 0; i < b; ++i)
      first[i] = static_cast<uint32_t>(i);
    double part[5] = {0, 0, 0, 0, 0};
    for (int step = -200; step < steps; ++step) {  // 200 unmeasured steps fill the table
      const double t0 = threadCpuSeconds();
      starling::client::Minibatch mb = sampler.next(m, b);
      const double t1 = threadCpuSeconds();
      auto probs = m.forward(mb.scouts > 0 ? mb.forwardFeatures.data() : mb.features.data(), b + mb.scouts);
      const double t2 = threadCpuSeconds();
      if (mb.scouts > 0) sampler.observeScouts(probs.subspan(static_cast<std::size_t>(b) * classes), m);
      const double t3 = threadCpuSeconds();
      m.backwardRows(mb.features.data(), first, mb.labels.data(), mb.weights.data(), b, grad);
      const double t4 = threadCpuSeconds();
      sampler.observe(m.probabilities(), m);
      const double t5 = threadCpuSeconds();
      float* xs = m.params().data();
      for (std::size_t i = 0; i < grad.size(); ++i) {
        momentum[i] = 0.9f * momentum[i] + grad[i];
        xs[i] -= args.lr * momentum[i];
      }
      const double t6 = threadCpuSeconds();
      if (step < 0) continue;
      part[0] += t1 - t0;
      part[1] += t2 - t1;
      part[2] += t4 - t3;
      part[3] += (t3 - t2) + (t5 - t4);
      part[4] += t6 - t5;
    }
    double total = 0.0;
    for (double& p : part) {
      p = 1e6 * p / steps;
      total += p;
    }
    std::printf("%-28s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f\n",
                mode == SamplingMode::kUniform ? "uniform" : "priority (table proposal)", part[0], part[1], part[2],
                part[3], part[4], total);
  }
}

// ---- --only approx: how well a cheap forward pass ranks examples (session 6) ----
//
// The approximate pass of mlp:784-200-200-10 sees 2x2-average-pooled 14x14 inputs
// through W0' (200 x 196, each column the sum of the four W0 columns of its 2x2 block);
// the other layers are the model's. It costs 81k of the 199k multiply-adds per example.

// ||softmax(z) - onehot(label)|| of the logits z of one example.
float scoreOfLogits(const float* z, int classes, int32_t label) {
  float zmax = z[0];
  for (int c = 1; c < classes; ++c)
    zmax = std::max(zmax, z[c]);
  float p[16];
  float sum = 0.0f;
  for (int c = 0; c < classes; ++c)
    sum += p[c] = std::exp(z[c] - zmax);
  float s = 0.0f;
  for (int c = 0; c < classes; ++c) {
    const float d = p[c] / sum - (c == label ? 1.0f : 0.0f);
    s += d * d;
  }
  return std::sqrt(s);
}

// out[o] = relu?(b[o] + sum_i w[o * in + i] x[i]).
void denseRow(const float* w, const float* b, const float* x, int in, int out, bool relu, float* y) {
  for (int o = 0; o < out; ++o) {
    float acc = b[o];
    const float* row = w + static_cast<std::size_t>(o) * in;
    for (int i = 0; i < in; ++i)
      acc += row[i] * x[i];
    y[o] = relu ? std::max(acc, 0.0f) : acc;
  }
}

// Scores examples idx with the pooled pass of the MLP whose parameters are params.
std::vector<float> approxScores(std::span<const float> params, const Dataset& data, const std::vector<uint32_t>& idx) {
  constexpr int kIn = 784, kH = 200, kPooled = 196, kClasses = 10;
  const float* w0 = params.data();
  const float* b0 = w0 + kH * kIn;
  const float* w1 = b0 + kH;
  const float* b1 = w1 + kH * kH;
  const float* w2 = b1 + kH;
  const float* b2 = w2 + kClasses * kH;
  std::vector<float> pooledW(static_cast<std::size_t>(kH) * kPooled, 0.0f);
  for (int o = 0; o < kH; ++o)
    for (int r = 0; r < 28; ++r)
      for (int c = 0; c < 28; ++c)
        pooledW[static_cast<std::size_t>(o) * kPooled + (r / 2) * 14 + c / 2] +=
            w0[static_cast<std::size_t>(o) * kIn + r * 28 + c];
  std::vector<float> x(kIn), pooled(kPooled), h0(kH), h1(kH), z(kClasses);
  std::vector<float> out(idx.size());
  for (std::size_t k = 0; k < idx.size(); ++k) {
    data.gather({&idx[k], 1}, x);
    for (int r = 0; r < 14; ++r)
      for (int c = 0; c < 14; ++c)
        pooled[r * 14 + c] = 0.25f * (x[(2 * r) * 28 + 2 * c] + x[(2 * r) * 28 + 2 * c + 1] +
                                      x[(2 * r + 1) * 28 + 2 * c] + x[(2 * r + 1) * 28 + 2 * c + 1]);
    denseRow(pooledW.data(), b0, pooled.data(), kPooled, kH, true, h0.data());
    denseRow(w1, b1, h0.data(), kH, kH, true, h1.data());
    denseRow(w2, b2, h1.data(), kH, kClasses, false, z.data());
    out[k] = scoreOfLogits(z.data(), kClasses, data.label(idx[k]));
  }
  return out;
}

std::vector<double> ranks(const std::vector<float>& v) {
  std::vector<uint32_t> order(v.size());
  for (uint32_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (std::size_t k = 0; k < order.size(); ++k)
    r[order[k]] = static_cast<double>(k);
  return r;
}

// Spearman's rank correlation (ties broken by order: the scores are continuous).
double spearman(const std::vector<float>& a, const std::vector<float>& b) {
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  double d2 = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    d2 += (ra[i] - rb[i]) * (ra[i] - rb[i]);
  return 1.0 - 6.0 * d2 / (n * (n * n - 1.0));
}

// The share of a's top quarter that is also in b's top quarter.
double topQuarterOverlap(const std::vector<float>& a, const std::vector<float>& b) {
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double cut = 0.75 * static_cast<double>(a.size());
  int both = 0, top = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (ra[i] >= cut) {
      ++top;
      both += rb[i] >= cut ? 1 : 0;
    }
  return top > 0 ? static_cast<double>(both) / top : 0.0;
}

// Trains the MLP uniformly and, at a few points, compares on 4,096 training examples the
// exact scores with the pooled pass's and with the exact scores of 100 and 500 steps
// before (what a table holds).
void approxSection(const Dataset& train) {
  std::printf("\n%-34s %8s %12s %12s %12s %12s\n", "scores vs exact (4096 examples)", "step", "pooled rho",
              "pooled top25", "100 old rho", "500 old rho");
  Trainer t = makeTrainer(kMlp, train, 32, SamplingMode::kUniform);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(train.size() - 1));
  std::vector<uint32_t> idx(4096);
  for (uint32_t& i : idx)
    i = pick(rng);
  std::vector<float> x(idx.size() * train.featureDim());
  train.gather(idx, x);
  auto exact = [&]() {
    std::span<const float> p = t.model().forward(x.data(), static_cast<int>(idx.size()));
    std::vector<float> s(idx.size());
    for (std::size_t k = 0; k < idx.size(); ++k) {
      float acc = 0.0f;
      for (int c = 0; c < 10; ++c) {
        const float d = p[k * 10 + c] - (c == train.label(idx[k]) ? 1.0f : 0.0f);
        acc += d * d;
      }
      s[k] = std::sqrt(acc);
    }
    return s;
  };
  int done = 0;
  uint64_t seed = 1;
  std::vector<std::pair<int, std::vector<float>>> history;  // exact scores by step
  for (int at : {100, 400, 500, 900, 1000, 1500, 1900, 2000}) {
    advance(t, at - done, 0.01f, seed++);
    done = at;
    history.emplace_back(at, exact());
    if (at != 100 && at != 500 && at != 1000 && at != 2000) continue;  // the others: for the staleness columns
    const std::vector<float>& now = history.back().second;
    const std::vector<float> pooled = approxScores(t.model().params(), train, idx);
    auto old = [&](int ago) {
      for (const auto& [step, scores] : history)
        if (step == at - ago) return spearman(now, scores);
      return std::nan("");
    };
    std::printf("%-34s %8d %12.3f %12.3f %12.3f %12.3f\n", "", at, spearman(now, pooled),
                topQuarterOverlap(now, pooled), old(100), old(500));
  }
}

// ---- 4. the starling-client binary: stripped size, peak RSS on a 6,000-example shard ----

#ifndef STARLING_CLIENT_BIN
#define STARLING_CLIENT_BIN ""
#endif
#ifndef STARLING_COORDINATOR_BIN
#define STARLING_COORDINATOR_BIN ""
#endif

struct ClientFootprint {
  double binMb = -1;   // stripped size, 10^6 bytes
  double rssMib = -1;  // peak resident set, 2^20 bytes
  std::string note;    // why a number is missing
};

// Starts argv with stdout and stderr appended to logPath; returns the pid (-1 on failure).
pid_t spawn(const std::vector<std::string>& argv, const std::string& logPath) {
  std::vector<char*> args;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// The port in the coordinator's "listening on 127.0.0.1:PORT" line, waiting up to 10 s.
int waitForPort(const std::string& logPath) {
  for (int i = 0; i < 200; ++i) {
    if (FILE* f = std::fopen(logPath.c_str(), "r")) {
      char line[1024];
      int port = -1;
      while (std::fgets(line, sizeof line, f) != nullptr)
        if (const char* at = std::strstr(line, "listening on 127.0.0.1:")) port = std::atoi(at + 23);
      std::fclose(f);
      if (port > 0) return port;
    }
    usleep(50'000);
  }
  return -1;
}

// The federation of examples/fashion-mnist/coordinator.toml (scripts/demo's): one
// local epoch of a 6,000-example shard per round, priority sampling, top-k 1% both
// ways with fp16 values.
const std::vector<std::string> kDemoTraining = {"--lr",
                                                "0.05",
                                                "--tau",
                                                "188",
                                                "--batch-size",
                                                "32",
                                                "--momentum",
                                                "0",
                                                "--priority-sampling",
                                                "true",
                                                "--uplink",
                                                "topk-sampled",
                                                "--uplink-density",
                                                "0.01",
                                                "--downlink",
                                                "topk",
                                                "--downlink-density",
                                                "0.01",
                                                "--fp16-values",
                                                "true"};
// The same without compression: dense updates and broadcasts (the client's worst case).
const std::vector<std::string> kUncompressedTraining = {
    "--lr", "0.05", "--tau", "188", "--batch-size", "32", "--momentum", "0", "--priority-sampling", "true"};

// The size of `strip`'s copy of the client, and that copy's peak RSS (wait4's
// ru_maxrss) while it trains on shard 0/10 of the training set (6,000 examples) for a
// coordinator process on 127.0.0.1: 3 rounds of the MLP 784-200-200-10 with `training`.
ClientFootprint measureClient(const Args& args, const std::vector<std::string>& training) {
  ClientFootprint fp;
  const std::string client = args.clientBin;
  const std::string coordinator = args.coordinatorBin;
  if (client.empty() || access(client.c_str(), X_OK) != 0) {
    fp.note = "no starling-client at '" + client + "' (build client/starling-client first)";
    return fp;
  }
  char tmpl[] = "/tmp/bench-train-client-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    fp.note = "mkdtemp failed";
    return fp;
  }
  const std::string dir = tmpl;
  const std::string stripped = dir + "/starling-client";
  if (std::system(("strip -o '" + stripped + "' '" + client + "'").c_str()) == 0) {
    std::error_code ec;
    auto bytes = std::filesystem::file_size(stripped, ec);
    if (!ec) fp.binMb = static_cast<double>(bytes) / 1e6;
  } else {
    fp.note = "strip failed";
  }

  if (coordinator.empty() || access(coordinator.c_str(), X_OK) != 0) {
    fp.note = "no starling-coordinator at '" + coordinator + "'";
  } else if (std::system(("'" + coordinator + "' init --out '" + dir + "/certs' --clients 1 >/dev/null").c_str()) !=
             0) {
    fp.note = "starling-coordinator init failed";
  } else {
    const std::string coordLog = dir + "/coordinator.log";
    const std::string clientLog = dir + "/client.log";
    std::vector<std::string> coordArgs = {
        coordinator,       "run",     "--certs", dir + "/certs", "--listen", "127.0.0.1:0",         "--db",
        dir + "/bench.db", "--model", kMlp,      "--rounds",     "3",        "--clients-per-round", "1"};
    coordArgs.insert(coordArgs.end(), training.begin(), training.end());
    pid_t coord = spawn(coordArgs, coordLog);
    const int port = coord > 0 ? waitForPort(coordLog) : -1;
    if (port < 0) {
      fp.note = "the coordinator did not start (see " + coordLog + ")";
    } else {
      // The stripped copy runs: the measured binary is the one whose size is reported.
      pid_t pid = spawn({stripped, "--coordinator", "127.0.0.1:" + std::to_string(port), "--certs", dir + "/certs",
                         "--id", "client-0", "--data", args.data, "--shard", "0/10", "--log-level", "warn"},
                        clientLog);
      int status = 0;
      struct rusage usage {};
      struct rusage self {};
      getrusage(RUSAGE_SELF, &self);
      if (pid > 0 && wait4(pid, &status, 0, &usage) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        // ru_maxrss is in KiB on Linux, and at least this process's peak at the spawn
        // (see main): a value that low measures the bench, not the client.
        if (usage.ru_maxrss > self.ru_maxrss)
          fp.rssMib = static_cast<double>(usage.ru_maxrss) / 1024.0;
        else
          fp.note =
              "the client's peak RSS is hidden by the bench's own (" + std::to_string(self.ru_maxrss / 1024) + " MiB)";
      } else {
        fp.note = "the client failed (see " + clientLog + ")";
      }
    }
    if (coord > 0) {
      kill(coord, SIGTERM);
      waitpid(coord, nullptr, 0);
    }
  }
  if (fp.note.empty()) std::filesystem::remove_all(dir);
  return fp;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--data")
      args.data = value();
    else if (a == "--torch-script")
      args.torchScript = value();
    else if (a == "--cnn-epochs")
      args.cnnEpochs = std::atoi(value().c_str());
    else if (a == "--eval-every")
      args.evalEvery = std::max(1, std::atoi(value().c_str()));
    else if (a == "--seeds")
      args.seeds = std::max(1, std::atoi(value().c_str()));
    else if (a == "--quick")
      args.quick = true;
    else if (a == "--rows")
      args.rows = value();
    else if (a == "--lambda")
      args.sampler.lambda = number(a, value());
    else if (a == "--ageing")
      args.sampler.ageing = number(a, value());
    else if (a == "--candidate-factor")
      args.sampler.candidateFactor = std::max(1, std::atoi(value().c_str()));
    else if (a == "--scout-factor")
      args.sampler.scoutFactor = std::clamp(static_cast<float>(std::atof(value().c_str())), 0.0f, 64.0f);
    else if (a == "--scout-uniform")
      args.sampler.scoutSweep = false;
    else if (a == "--scout-thread")
      args.sampler.scoutThread = true;

    else if (a == "--only")
      args.only = value();
    else if (a == "--model")
      args.model = value();
    else if (a == "--target")
      args.target = number(a, value());
    else if (a == "--lr")
      args.lr = static_cast<float>(std::atof(value().c_str()));
    else if (a == "--client-bin")
      args.clientBin = value();
    else if (a == "--coordinator-bin")
      args.coordinatorBin = value();
    else
      die("unknown argument " + a + " (see the comment at the top of bench/train.cpp)");
  }
  if (args.only == "approx") {  // not part of the full run
    auto fm = starling::data::loadFashionMnist(args.data);
    if (!fm) die(fm.status().toString());
    approxSection(fm->train);
    return 0;
  }
  if (args.only == "sparse") {  // synthetic data: no Fashion-MNIST needed
    sparseSection(args.quick);
    return 0;
  }
  if (!args.only.empty() && args.only != "throughput" && args.only != "accuracy" && args.only != "sampling" &&
      args.only != "client" && args.only != "split")
    die("--only takes throughput, accuracy, sampling, split, client or sparse, not " + args.only);
  // --data FILE: the sampling sections only, on a LIBSVM file.
  const bool fromFile = std::filesystem::is_regular_file(args.data);
  if (fromFile && !args.only.empty() && args.only != "sampling" && args.only != "split")
    die("--data " + args.data + " is a file: only --only sampling or --only split run on it");
  if (fromFile && args.only.empty()) args.only = "sampling";
  auto runs = [&](const char* section) { return args.only.empty() || args.only == section; };
  // 4 first: a spawned child's ru_maxrss counts the spawning process's resident set
  // (Linux carries the old address space's high-water mark across exec), so the client
  // is measured while this process is still small, before it loads the data set.
  ClientFootprint fp;
  ClientFootprint dense;
  if (runs("client")) {
    fp = measureClient(args, kDemoTraining);
    dense = measureClient(args, kUncompressedTraining);
  }

  Dataset train;
  Dataset test;
  if (fromFile) {
    loadFile(args.data, train, test);
    if (args.model.empty())
      args.model = "mlp:" + std::to_string(train.featureDim()) + "-32-" + std::to_string(train.numClasses());
    std::printf("bench-train: %s, %zu train / %zu test (every fifth example), %zu features%s, one thread\n\n",
                args.data.c_str(), train.size(), test.size(), train.featureDim(), train.isSparse() ? " (CSR)" : "");
  } else {
    auto fm = starling::data::loadFashionMnist(args.data);
    if (!fm) die(fm.status().toString());
    train = std::move(fm->train);
    test = std::move(fm->test);
    std::printf("bench-train: Fashion-MNIST %zu train / %zu test, one thread\n\n", train.size(), test.size());
  }
  if (args.model.empty()) args.model = kMlp;
  if (args.only == "split") splitSection(args, train);

  // 1. Throughput.
  std::string torchNote;
  std::vector<std::pair<int, double>> torch;
  if (runs("throughput")) torch = runTorch(args, torchNote);
  if (runs("throughput"))
    std::printf("%-34s %6s %16s %16s %8s\n", "local SGD, mlp:784-200-200-10", "batch", "starling ex/s", "pytorch ex/s",
                "ratio");
  double exPerS32 = 0.0;
  double torch32 = 0.0;
  for (int b : {32, 64}) {
    if (!runs("throughput")) break;
    Trainer t = makeTrainer(kMlp, train, b, SamplingMode::kUniform);
    advance(t, 50, 0.01f, 1);  // warm-up: grows the workspaces
    const int steps = (args.quick ? 6400 : 64000) / b;
    double best = 0.0;
    for (int rep = 0; rep < 3; ++rep)
      best = std::max(best, steps * b / advance(t, steps, 0.01f, 2 + rep));
    double theirs = 0.0;
    for (auto [tb, rate] : torch)
      if (tb == b) theirs = rate;
    char torchCol[32];
    char ratioCol[32];
    if (theirs > 0) {
      std::snprintf(torchCol, sizeof torchCol, "%.0f", theirs);
      std::snprintf(ratioCol, sizeof ratioCol, "%.2fx", best / theirs);
    } else {
      std::snprintf(torchCol, sizeof torchCol, "%s", torchNote.c_str());
      std::snprintf(ratioCol, sizeof ratioCol, "-");
    }
    std::printf("%-34s %6d %16.0f %16s %8s\n", "", b, best, torchCol, ratioCol);
    if (b == 32) {
      exPerS32 = best;
      torch32 = theirs;
    }
  }

  // 2. Centralized accuracy.
  if (runs("accuracy"))
    std::printf("\n%-44s %6s %10s %10s\n", "centralized, batch 32, momentum 0.9", "epoch", "test acc", "train s");
  double mlpAcc = 0.0;
  if (runs("accuracy")) {
    Trainer t = makeTrainer(kMlp, train, 32, SamplingMode::kUniform);
    const int epochs = args.quick ? 1 : 5;
    const int stepsPerEpoch = static_cast<int>(train.size() / 32);
    double seconds = 0.0;
    for (int e = 1; e <= epochs; ++e) {
      seconds += advance(t, stepsPerEpoch, 0.01f, 100 + e);
      mlpAcc = accuracy(t, test);
      std::printf("%-44s %6d %9.2f%% %10.1f\n", e == 1 ? kMlp : "", e, 100 * mlpAcc, seconds);
    }
  }
  double cnnAcc = 0.0;
  if (runs("accuracy")) {
    Trainer t = makeTrainer(kCnn, train, 32, SamplingMode::kUniform);
    const int stepsPerEpoch = static_cast<int>(train.size() / 32);
    const int epochs = args.quick ? 1 : args.cnnEpochs;
    const int steps = args.quick ? stepsPerEpoch / 10 : stepsPerEpoch;
    double seconds = 0.0;
    float lr = 0.01f;
    for (int e = 1; e <= epochs; ++e) {
      if (e > 2) lr /= 5;  // step decay after two epochs: +1.5 points over a constant rate
      seconds += advance(t, steps, lr, 200 + e);
      cnnAcc = accuracy(t, test);
      std::printf("%-44s %6d %9.2f%% %10.1f\n", e == 1 ? kCnn : "", e, 100 * cnnAcc, seconds);
    }
  }

  // 3. Priority vs uniform sampling to 85%.
  const double target = args.target > 0.0 ? args.target : args.quick ? 0.70 : 0.85;
  const int maxSteps = args.quick ? 2000 : 30000;
  if (runs("sampling")) {
    std::printf(
        "\nsampler: lambda %g, ageing %g, B = %db, %gb scouts%s (--lambda, --ageing, --candidate-factor, "
        "--scout-factor), %d seeds\n",
        args.sampler.lambda, args.sampler.ageing, args.sampler.candidateFactor, args.sampler.scoutFactor,
        args.sampler.scoutSweep ? " (sweep)" : " (uniform)", args.seeds);
    char title[96];
    std::snprintf(title, sizeof title, "%s to %.0f%% test acc, b 32, mean of seeds", fromFile ? "model" : "MLP",
                  100 * target);
    if (fromFile) std::printf("model %s, lr %g\n", args.model.c_str(), args.lr);
    std::printf("%-50s %8s %8s %8s %12s %9s\n", title, "steps", "train s", "cpu s", "prioritized", "last acc");
  }
  struct Row {
    const char* key;  // its name in --rows
    const char* name;
    SamplingMode mode;
    Proposal proposal;
    ToTarget r;
    int reached = 0;
  };
  Row rows[] = {
      {"uniform", "uniform", SamplingMode::kUniform, Proposal::kTable, {}},
      {"table", "priority (always, table proposal)", SamplingMode::kPriority, Proposal::kTable, {}},
      {"adaptive", "adaptive (tau_vr switch, table proposal)", SamplingMode::kAdaptive, Proposal::kTable, {}},
      {"candidates", "priority (always, B candidates scored)", SamplingMode::kPriority, Proposal::kCandidates, {}}};
  auto chosen = [&](const Row& row) {
    return ("," + args.rows + ",").find(std::string(",") + row.key + ",") != std::string::npos;
  };
  // Mean over seeds: steps to a target are noisy (test accuracy wobbles about 1% from
  // one evaluation to the next at that stage). The rows take turns seed by seed, so that
  // a change in the machine's load falls on all of them.
  for (int s = 1; s <= args.seeds && runs("sampling"); ++s)
    for (Row& row : rows) {
      if (!chosen(row)) continue;
      ToTarget one = stepsTo(target, row.mode, row.proposal, train, test, args, maxSteps, static_cast<uint64_t>(s));
      if (one.steps < 0) continue;
      ++row.reached;
      row.r.steps = (row.r.steps < 0 ? 0 : row.r.steps) + one.steps;
      row.r.seconds += one.seconds;
      row.r.cpuSeconds += one.cpuSeconds;
      row.r.prioritized += one.prioritized;
      row.r.finalAccuracy += one.finalAccuracy;
    }
  for (Row& row : rows) {
    if (!runs("sampling")) break;
    if (!chosen(row)) continue;
    const int reached = row.reached;
    char steps[32];
    if (reached < args.seeds) {
      // Some seeds never reached the target: the other columns are means over those that did.
      row.r.steps = -1;
      std::snprintf(steps, sizeof steps, ">%d", maxSteps);
      const int k = std::max(1, reached);
      row.r.seconds /= k;
      row.r.cpuSeconds /= k;
      row.r.prioritized /= k;
      row.r.finalAccuracy /= k;
    } else {
      row.r.steps /= reached;
      row.r.seconds /= reached;
      row.r.cpuSeconds /= reached;
      row.r.prioritized /= reached;
      row.r.finalAccuracy /= reached;
      std::snprintf(steps, sizeof steps, "%d", row.r.steps);
    }
    std::printf("%-50s %8s %8.2f %8.2f %12d %8.2f%%\n", row.name, steps, row.r.seconds, row.r.cpuSeconds,
                row.r.prioritized, 100 * row.r.finalAccuracy);
  }
  const ToTarget& u = rows[0].r;
  const ToTarget& p = rows[1].r;
  char stepRatio[32] = "n/a";
  char wallRatio[32] = "n/a";
  char cpuRatio[32] = "n/a";
  if (u.steps > 0 && p.steps > 0) {
    std::snprintf(stepRatio, sizeof stepRatio, "%.2f", static_cast<double>(u.steps) / p.steps);
    std::snprintf(wallRatio, sizeof wallRatio, "%.2f", u.seconds / p.seconds);
    std::snprintf(cpuRatio, sizeof cpuRatio, "%.2f", u.cpuSeconds / p.cpuSeconds);
  }
  const ToTarget& a = rows[2].r;
  char adaptiveStepRatio[32] = "n/a";
  char adaptiveWallRatio[32] = "n/a";
  if (u.steps > 0 && a.steps > 0) {
    std::snprintf(adaptiveStepRatio, sizeof adaptiveStepRatio, "%.2f", static_cast<double>(u.steps) / a.steps);
    std::snprintf(adaptiveWallRatio, sizeof adaptiveWallRatio, "%.2f", u.seconds / a.seconds);
  }
  char torchCol[32] = "not_installed";
  if (torch32 > 0) std::snprintf(torchCol, sizeof torchCol, "%.0f", torch32);

  // 4. The client binary.
  char binCol[32] = "n/a";
  char rssCol[32] = "n/a";
  char denseCol[32] = "n/a";
  if (fp.binMb >= 0) std::snprintf(binCol, sizeof binCol, "%.2f", fp.binMb);
  if (fp.rssMib >= 0) std::snprintf(rssCol, sizeof rssCol, "%.1f", fp.rssMib);
  if (dense.rssMib >= 0) std::snprintf(denseCol, sizeof denseCol, "%.1f", dense.rssMib);
  if (runs("client")) {
    std::printf("\n%-56s %10s %10s\n", "starling-client (stripped), shard 0/10, mlp:784-200-200-10", "MB", "peak MiB");
    std::printf("%-56s %10s %10s\n", "demo federation (top-k 1%, fp16)   goal: <= 3, <= 24", binCol, rssCol);
    std::printf("%-56s %10s %10s\n", "uncompressed updates and broadcasts", "", denseCol);
    if (!fp.note.empty()) std::printf("  (%s)\n", fp.note.c_str());
  }
  if (args.only.empty()) sparseSection(args.quick);
  std::printf(
      "\nsummary: ex_per_s_b32=%.0f torch_ex_per_s_b32=%s mlp_acc_5ep=%.4f cnn_acc=%.4f "
      "priority_step_ratio=%s priority_wall_ratio=%s client_bin_mb=%s client_rss_mib=%s "
      "adaptive_step_ratio=%s adaptive_wall_ratio=%s priority_cpu_ratio=%s\n",
      exPerS32, torchCol, mlpAcc, cnnAcc, stepRatio, wallRatio, binCol, rssCol, adaptiveStepRatio, adaptiveWallRatio,
      cpuRatio);
  return 0;
}
