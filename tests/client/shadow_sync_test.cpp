// ShadowSync (client/shadow_sync.hpp): the S-EASGD and S-MA mixes against NumPy, the
// uplink memory's invariant over rounds with a rejected update when the updates come
// from the app's steps, and the snapshot a round sends is a state the app's model was
// in while another thread kept stepping.

#include "starling/client/shadow_sync.hpp"

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "starling/client/learner.hpp"
#include "starling/compression/compressed.hpp"
#include "starling/compression/payload.hpp"
#include "starling/util/checksum.hpp"

#include "client/update_helpers.hpp"
#include "support/command_output.hpp"
#include "trainer/toy_data.hpp"

using namespace starling;
using namespace starling::client;
using namespace std::chrono_literals;
using starling::client::test::checkAuditInvariant;
using starling::client::test::sent;

namespace {

constexpr const char* kSpec = "mlp:8-16-4";
constexpr uint32_t kTau = 3;

wire::WelcomeMsg task(bool topk) {
  wire::WelcomeMsg w;
  w.clientId = "client-1";
  w.task = "toy";
  w.modelSpec = kSpec;
  w.hyper = wire::HyperParameters{0.05f, 0.9f, 0.0f, 8, kTau, 0.0f, false, 7, 0.0f, 0.0f, 0.0f};
  w.compression = topk ? wire::CompressionSettings{"topk", 0.25f, "identity", 1.0f, true, false, 0.0f, false, 23}
                       : wire::CompressionSettings{"identity", 1.0f, "identity", 1.0f, false, false, 0.0f, false, 23};
  w.initSeed = 3;
  return w;
}

// The global model of round r: the round-0 model moved by a deterministic amount.
std::vector<float> globalModel(uint64_t r) {
  model::Model m = test::toyModel(kSpec, 3);
  std::vector<float> g(m.params().begin(), m.params().end());
  for (std::size_t i = 0; i < g.size(); ++i)
    g[i] += 0.01f * float(r) * std::sin(float(i) + float(r));
  return g;
}

wire::RoundAssignMsg assign(uint64_t round, uint64_t base, std::span<const float> model, uint32_t deadlineMs = 0) {
  wire::RoundAssignMsg a{round, base, kTau, 0.05f, 1.0f, deadlineMs, {}, 0, wire::denseView(model), std::nullopt};
  a.baseChecksum = checksum64(model);
  return a;
}

ShadowSyncOptions options(SyncVariant variant) {
  ShadowSyncOptions o;
  o.variant = variant;
  o.alpha = 0.5f;
  o.featureDim = 8;
  o.numClasses = 4;
  return o;
}

// A Learner without a Trainer of its own (ParticipantOptions::localWork's) that has
// joined the task, and a ShadowSync of `variant` for it.
struct Synced {
  data::Dataset shard;
  wire::WelcomeMsg welcome;
  Learner learner;
  std::unique_ptr<ShadowSync> sync;
  Synced(uint64_t seed, SyncVariant variant, bool topk, bool audit = false)
      : shard(test::blobs(64, 8, 4, seed)), welcome(task(topk)), learner(learnerOptions(seed, audit), nullptr) {
    REQUIRE(learner.welcome(welcome, shard).isOk());
    auto made = ShadowSync::create(options(variant));
    REQUIRE(made.isOk());
    sync = std::move(*made);
    REQUIRE(sync->welcome(welcome).isOk());
  }
  static LearnerOptions learnerOptions(uint64_t seed, bool audit) {
    LearnerOptions lo{seed, audit};
    lo.trains = false;
    return lo;
  }
};

// The app: steps on minibatches of `shard` until `done`, on the calling thread.
struct App {
  const data::Dataset& shard;
  std::mt19937_64 rng{5};
  std::vector<float> x;
  std::vector<int32_t> y;
  explicit App(const data::Dataset& s) : shard(s) {}
  Result<double> step(ShadowSync& sync) {
    constexpr std::size_t b = 8;
    std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(shard.size() - 1));
    std::vector<uint32_t> rows(b);
    for (auto& r : rows)
      r = pick(rng);
    x.resize(b * shard.featureDim());
    shard.gather(rows, x);
    y.resize(b);
    for (std::size_t i = 0; i < b; ++i)
      y[i] = static_cast<int32_t>(model::labelValue(shard, rows[i]));
    return sync.step(x.data(), y.data(), b);
  }
};

// One round: work() on a thread of its own while this thread steps as the app.
Result<LocalUpdate> round(ShadowSync& sync, Learner& learner, const wire::RoundAssignMsg& a, App& app,
                          std::vector<uint64_t>* states = nullptr) {
  REQUIRE(learner.catchUp(a).isOk());
  auto work = std::async(std::launch::async, [&] { return sync.work(learner, a); });
  std::vector<float> x(globalModel(0).size());
  while (work.wait_for(0s) != std::future_status::ready) {
    if (!sync.ready()) continue;
    REQUIRE(app.step(sync).isOk());
    if (states != nullptr) {
      REQUIRE(sync.copyModel(x) == x.size());
      states->push_back(checksum64(x));
    }
  }
  return work.get();
}

// NumPy's float32 mixes of x, c, s (one value a line each); empty when it is missing.
std::vector<std::pair<float, float>> numpyMixes(const std::vector<float>& x, const std::vector<float>& c,
                                                const std::vector<float>& s, float alpha) {
  if (access("/usr/bin/python3", X_OK) != 0) return {};
  const auto path = std::filesystem::temp_directory_path() / ("starling-shadow-" + std::to_string(getpid()) + ".txt");
  {
    std::ofstream out(path);
    char buf[64];
    for (std::size_t i = 0; i < x.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%.9g %.9g %.9g\n", double(x[i]), double(c[i]), double(s[i]));
      out << buf;
    }
  }
  char alphaText[32];
  std::snprintf(alphaText, sizeof alphaText, "%.9g", double(alpha));
  const std::string cmd =
      "/usr/bin/python3 -c \"import numpy as np, sys; v = np.loadtxt(sys.argv[1], dtype=np.float32); "
      "x, c, s = v[:, 0], v[:, 1], v[:, 2]; a = np.float32(sys.argv[2]); "
      "e = x - a * (x - c); m = c + (x - s); "
      "[print(repr(float(p)), repr(float(q))) for p, q in zip(e, m)]\" " +
      path.string() + " " + alphaText;
  const std::optional<std::string> text = starling::testing::commandOutput(cmd);
  std::filesystem::remove(path);
  std::vector<std::pair<float, float>> out;
  std::istringstream in(text.value_or(""));
  double e = 0, m = 0;
  while (in >> e >> m)
    out.emplace_back(float(e), float(m));
  if (out.size() != x.size()) WARN("numpy (/usr/bin/python3 with numpy) is missing: no reference");
  return out.size() == x.size() ? out : std::vector<std::pair<float, float>>{};
}

}  // namespace

TEST_CASE("shadow sync: the S-EASGD and S-MA mixes are NumPy's float32 arithmetic", "[client][shadow]") {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(1000), c(1000), s(1000);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = n(rng);
    c[i] = n(rng);
    s[i] = x[i] + 0.1f * n(rng);
  }
  const float alpha = 0.37f;
  const auto reference = numpyMixes(x, c, s, alpha);
  if (reference.empty()) return;
  std::vector<float> e = x, m = x;
  mixElastic(e, c, alpha);
  mixAverage(m, c, s);
  std::size_t differ = 0;
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    worst =
        std::max({worst, double(std::fabs(e[i] - reference[i].first)), double(std::fabs(m[i] - reference[i].second))});
    differ += (e[i] != reference[i].first || m[i] != reference[i].second) ? 1 : 0;
  }
  // The same float32 operations in the same order: equal, or within one rounding where
  // the compiler contracts a multiply-add.
  CHECK(worst < 1e-6);
  CHECK(differ <= x.size() / 2);
}

TEST_CASE("shadow sync: a round mixes the global model in, as the variant says", "[client][shadow]") {
  const SyncVariant variant = GENERATE(SyncVariant::kEasgd, SyncVariant::kMa);
  CAPTURE(variant == SyncVariant::kEasgd ? "S-EASGD" : "S-MA");
  Synced f(31, variant, false);
  Learner& learner = f.learner;
  ShadowSync* sync = f.sync.get();
  App app(f.shard);
  std::vector<float> g = globalModel(0);
  auto first = round(*sync, learner, assign(1, 0, g), app);
  REQUIRE(first.isOk());
  CHECK(first->stats.steps >= int(kTau));
  const std::vector<float> s(sync->snapshot().begin(), sync->snapshot().end());
  // The first round started x from the global model: the update is g - s.
  const std::vector<float> q = sent(*first, g.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    REQUIRE(q[i] == Approx(g[i] - s[i]).margin(1e-6));
  learner.settle(1, true);

  // Round 2 with no steps: a 30 ms budget passes, nothing is sent, and x is the mix.
  std::vector<float> x(g.size());
  REQUIRE(sync->copyModel(x) == x.size());
  g = globalModel(1);
  auto a = assign(2, 1, g, 30);
  REQUIRE(learner.catchUp(a).isOk());
  auto empty = sync->work(learner, a);
  REQUIRE_FALSE(empty.isOk());
  CHECK(empty.status().code() == StatusCode::kTimeout);
  CHECK(sync->stats().emptyRounds == 1);
  CHECK_THAT(sync->stats().lastError, Catch::Contains("no training step"));
  std::vector<float> mixed(g.size());
  REQUIRE(sync->copyModel(mixed) == mixed.size());
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double expect = variant == SyncVariant::kEasgd ? double(x[i]) - 0.5 * (double(x[i]) - double(g[i]))
                                                         : double(g[i]) + (double(x[i]) - double(s[i]));
    worst = std::max(worst, std::fabs(expect - double(mixed[i])));
  }
  CHECK(worst < 1e-5);
  CHECK(sync->stats().mixes == 2);
}

TEST_CASE("shadow sync: the uplink memory's invariant holds over rounds with a rejected update", "[client][shadow]") {
  const SyncVariant variant = GENERATE(SyncVariant::kEasgd, SyncVariant::kMa);
  CAPTURE(variant == SyncVariant::kEasgd ? "S-EASGD" : "S-MA");
  Synced f(32, variant, true, true);
  Learner& learner = f.learner;
  ShadowSync* sync = f.sync.get();
  App app(f.shard);
  const std::size_t d = globalModel(0).size();
  std::vector<double> applied(d, 0.0);
  for (uint64_t r = 1; r <= 6; ++r) {
    const std::vector<float> g = globalModel(r - 1);
    auto u = round(*sync, learner, assign(r, r - 1, g), app);
    REQUIRE(u.isOk());
    const std::vector<float> q = sent(*u, d);
    if (variant == SyncVariant::kEasgd && r > 1) {
      // x was pulled only part of the way: q + e is the gap g - s, not the gap plus the
      // memory again (Learner::Submitted::kCarried).
      double worst = 0;
      for (std::size_t i = 0; i < d; ++i)
        worst = std::max(worst, std::fabs(double(q[i]) + double(learner.memory()[i]) -
                                          (double(g[i]) - double(sync->snapshot()[i]))));
      CHECK(worst < 1e-5);
    }
    const bool accepted = r != 3;
    learner.settle(r, accepted);
    if (accepted)
      for (std::size_t i = 0; i < d; ++i)
        applied[i] += q[i];
  }
  CHECK(learner.stats().roundsRejected == 1);
  CHECK(sync->stats().syncs == 6);
  checkAuditInvariant(learner, applied);
}

TEST_CASE("shadow sync: each snapshot is a state the model was in while the app kept stepping", "[client][shadow]") {
  Synced f(33, SyncVariant::kEasgd, false);
  Learner& learner = f.learner;
  ShadowSync* sync = f.sync.get();
  App app(f.shard);
  for (uint64_t r = 1; r <= 5; ++r) {
    std::vector<uint64_t> states;
    const std::vector<float> g = globalModel(r - 1);
    auto u = round(*sync, learner, assign(r, r - 1, g), app, &states);
    REQUIRE(u.isOk());
    // After the mix x changes only by the app's steps: the snapshot is the state after
    // one of them, not a blend of two.
    const uint64_t snapshot = checksum64(sync->snapshot());
    CHECK(std::find(states.begin(), states.end(), snapshot) != states.end());
    CHECK(u->stats.steps >= int(kTau));
    CHECK(std::isfinite(u->stats.lossEnd));
    learner.settle(r, true);
  }
}

TEST_CASE("shadow sync: stop() ends a round waiting for steps, and refusals say why", "[client][shadow]") {
  Synced f(34, SyncVariant::kMa, false);
  Learner& learner = f.learner;
  const wire::WelcomeMsg& w = f.welcome;
  ShadowSyncOptions bad = options(SyncVariant::kEasgd);
  bad.alpha = 0.0f;
  CHECK_FALSE(ShadowSync::create(bad).isOk());
  bad = options(SyncVariant::kMa);
  bad.featureDim = 9;
  auto wrong = ShadowSync::create(bad);
  REQUIRE(wrong.isOk());
  const Status refused = (*wrong)->welcome(w);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.message(), Catch::Contains("9 features"));

  ShadowSync* sync = f.sync.get();
  App app(f.shard);
  CHECK(app.step(*sync).status().code() == StatusCode::kClosed);  // no model before the first round
  const std::vector<float> g = globalModel(0);
  const auto a = assign(1, 0, g);
  REQUIRE(learner.catchUp(a).isOk());
  auto work = std::async(std::launch::async, [&] { return sync->work(learner, a); });
  while (!sync->ready())
    std::this_thread::yield();
  CHECK(work.wait_for(50ms) == std::future_status::timeout);  // waiting for tau steps
  sync->stop();
  auto u = work.get();
  REQUIRE_FALSE(u.isOk());
  CHECK(u.status().code() == StatusCode::kClosed);
}
