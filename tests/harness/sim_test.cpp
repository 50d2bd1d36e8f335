// The simulated federation: it trains, it is deterministic, its clock and links
// follow the model it states, and dropouts and deadlines make stragglers.
#include "sim.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "starling/data/loaders.hpp"

#include "engine/privacy.hpp"
#include "sim_config.hpp"

namespace starling::sim {
namespace {

bool haveData() {
  return std::filesystem::exists(data::defaultFashionMnistDir() + "/train-labels-idx1-ubyte.gz") ||
         std::filesystem::exists(data::defaultFashionMnistDir() + "/train-labels-idx1-ubyte");
}

// A small, fast fleet: 50 IID clients on a 5,000-example sample, mlp:784-32-10.
SimSettings smallFleet() {
  SimSettings s;
  s.clients = 50;
  s.partition = "iid";
  s.trainExamples = 5000;
  s.testExamples = 1000;
  s.deviceGflops = 1.0;
  s.speedSpread = 4.0;
  s.uplinkMbps = 1.0;
  s.downlinkMbps = 5.0;
  s.latencyMs = 100;
  return s;
}

Strategy smallStrategy(const std::string& name = "small") {
  Strategy st;
  st.name = name;
  Strategy& c = st;
  c.task.model = "mlp:784-32-10";
  c.engine.rounds = 15;
  c.engine.clientsPerRound = 10;
  c.engine.tau = 10;
  c.engine.lr = 0.1;
  c.engine.deadlineMs = 120'000;
  c.engine.errorFeedback = false;
  return st;
}

// One client, one round, equal speeds: the round lasts exactly the downlink, the
// compute and the uplink of the frames it counted, on links of up / down Mbit/s and
// latency ms.
void checkOneRoundTime(SimSettings s, double up, double down, double latency) {
  s.clients = 1;
  s.trainExamples = 1000;
  s.speedSpread = 1;
  auto fleet = Fleet::create(s, "mlp:784-32-10");
  REQUIRE(fleet);
  Strategy st = smallStrategy();
  st.engine.rounds = 1;
  st.engine.clientsPerRound = 1;
  st.engine.overSelection = 1.0;
  auto r = runStrategy(*fleet, st);
  REQUIRE(r);
  REQUIRE(r->rounds.size() == 1);
  const RoundRow& row = r->rounds[0];
  CHECK(row.bytesUp > 784 * 32 * 4);  // a dense fp32 update in a frame
  const uint64_t examples = uint64_t(st.engine.tau) * st.task.batchSize;
  const double compute = computeSeconds(fleet->flopsPerExample(), examples, 2 * 256, s.deviceGflops * 1e9);
  const double expected =
      double(linkMicros(row.bytesDown, down, latency) + linkMicros(row.bytesUp, up, latency)) / 1e6 + compute;
  CHECK(row.virtualSeconds == Approx(expected).margin(2e-6));
}

// A CSV regression of 1,000 rows, target = 2a - b + 0.5 + noise (sd 0.1), seeded, in
// the temporary directory under `name`; returns its path.
std::string writeRegressionCsv(const std::string& name, uint64_t seed) {
  const auto path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream out(path);
  out << "a,b,target\n";
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::normal_distribution<double> noise(0, 0.1);
  for (int i = 0; i < 1000; ++i) {
    const double a = u(rng), b = u(rng);
    out << a << ',' << b << ',' << 2 * a - b + 0.5 + noise(rng) << '\n';
  }
  return path;
}

// The tests tagged [fashion-mnist] need the data set: meson runs them through
// tests/harness/needs_data.sh, which reports them skipped (exit 77) without it.
void requireData() {
  INFO("no Fashion-MNIST in " << data::defaultFashionMnistDir() << " (scripts/setup installs dataset-fashion-mnist)");
  REQUIRE(haveData());
}

}  // namespace

TEST_CASE("50 virtual clients train an MLP to the target accuracy", "[harness][fashion-mnist]") {
  requireData();
  auto fleet = Fleet::create(smallFleet(), "mlp:784-32-10");
  REQUIRE(fleet);
  SECTION("FedAvg fp32") {
    auto r = runStrategy(*fleet, smallStrategy());
    REQUIRE(r);
    CHECK(r->stopped.empty());
    REQUIRE(r->firstAtOrAbove(0.70));
    CHECK(r->rounds.back().virtualSeconds > 0);
  }
  SECTION("double top-k with error feedback") {
    Strategy st = smallStrategy("compressed");
    st.engine.uplink = "topk";
    st.engine.uplinkDensity = 0.05;
    st.engine.downlink = "topk";
    st.engine.downlinkDensity = 0.1;
    st.engine.errorFeedback = true;
    st.engine.fp16Values = true;
    st.engine.rounds = 25;
    auto r = runStrategy(*fleet, st);
    REQUIRE(r);
    REQUIRE(r->firstAtOrAbove(0.70));
    auto dense = runStrategy(*fleet, smallStrategy());
    REQUIRE(dense);
    // Per round, the compressed uplink carries far fewer bytes.
    CHECK(r->rounds[3].bytesUp * 5 < dense->rounds[3].bytesUp);
  }
}

TEST_CASE("the simulation is deterministic for a seed", "[harness][fashion-mnist]") {
  requireData();
  SimSettings s = smallFleet();
  s.dropout = 0.2;
  Strategy st = smallStrategy();
  st.engine.rounds = 4;
  st.task.prioritySampling = true;
  auto fleet = Fleet::create(s, st.task.model);
  REQUIRE(fleet);
  auto a = runStrategy(*fleet, st);
  auto b = runStrategy(*fleet, st);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(roundsCsv(*a) == roundsCsv(*b));
  s.seed = 2;
  auto other = Fleet::create(s, st.task.model);
  REQUIRE(other);
  auto c = runStrategy(*other, st);
  REQUIRE(c);
  CHECK(roundsCsv(*a) != roundsCsv(*c));
}

TEST_CASE("dropouts and deadlines make stragglers", "[harness][fashion-mnist]") {
  requireData();
  SECTION("dropouts") {
    SimSettings s = smallFleet();
    s.dropout = 0.5;
    auto fleet = Fleet::create(s, "mlp:784-32-10");
    REQUIRE(fleet);
    Strategy st = smallStrategy();
    st.engine.rounds = 5;
    auto r = runStrategy(*fleet, st);
    REQUIRE(r);
    uint32_t dropped = 0;
    for (const auto& row : r->rounds)
      dropped += row.dropped;
    CHECK(dropped > 0);
  }
  SECTION("a deadline the slow devices cannot meet") {
    SimSettings s = smallFleet();
    s.speedSpread = 10;
    s.deviceGflops = 0.1;
    s.maxVirtualHours = 1;
    auto fleet = Fleet::create(s, "mlp:784-32-10");
    REQUIRE(fleet);
    Strategy st = smallStrategy();
    st.engine.rounds = 5;
    st.engine.stepBudgets = false;
    // Compute takes 0.75 s on the fastest device, 7.5 s on the slowest; links about 1 s.
    st.engine.deadlineMs = 3'000;
    auto r = runStrategy(*fleet, st);
    REQUIRE(r);
    uint32_t stragglers = 0;
    for (const auto& row : r->rounds)
      stragglers += row.stragglers;
    CHECK(stragglers > 0);
  }
}

TEST_CASE("link time is latency plus bytes over bandwidth", "[harness][fashion-mnist]") {
  CHECK(linkMicros(0, 1.0, 100) == 100'000);
  CHECK(linkMicros(125'000, 1.0, 0) == 1'000'000);  // 1 Mbit at 1 Mbit/s
  CHECK(linkMicros(125'000, 5.0, 50) == 250'000);
  CHECK(computeSeconds(1e6, 10, 0, 3e6) == Approx(10.0));
  CHECK(computeSeconds(1e6, 0, 30, 3e6) == Approx(10.0));
  requireData();
  SimSettings s = smallFleet();
  s.uplinkMbps = 0.5;
  s.downlinkMbps = 2.0;
  s.latencyMs = 40;
  checkOneRoundTime(s, 0.5, 2.0, 40);
}

}  // namespace starling::sim

namespace starling::sim {

TEST_CASE("clients that build the round-0 model catch up from it, not with a dense download",
          "[harness][fashion-mnist]") {
  requireData();
  Strategy st = smallStrategy("compressed");
  st.engine.rounds = 6;
  st.engine.downlink = "topk";
  st.engine.downlinkDensity = 0.02;
  st.engine.uplink = "topk";
  st.engine.uplinkDensity = 0.02;
  st.engine.errorFeedback = true;
  auto downBytes = [&](bool clientsInitialize, bool preloaded) {
    SimSettings s = smallFleet();
    s.preloadedModel = preloaded;
    st.engine.clientsInitialize = clientsInitialize;
    auto fleet = Fleet::create(s, st.task.model);
    REQUIRE(fleet);
    auto r = runStrategy(*fleet, st);
    REQUIRE(r);
    REQUIRE(r->rounds.size() == 6);
    uint64_t bytes = 0;
    for (std::size_t i = 1; i < r->rounds.size(); ++i)
      bytes += r->rounds[i].bytesDown;
    return bytes;
  };
  // After round 1 nearly every selected client is new: a dense model each (over
  // 100 KB) when clients do not build the round-0 model, a few sparse broadcasts or
  // the values they changed when they do (as starling-client does after Welcome,
  // saying it holds nothing), the same bytes as clients that ship with it.
  const uint64_t dense = downBytes(false, false);
  const uint64_t built = downBytes(true, false);
  const uint64_t preloaded = downBytes(true, true);
  CHECK(built * 5 < dense);
  CHECK(built == preloaded);
}

}  // namespace starling::sim

namespace starling::sim {

TEST_CASE("the example config reads shared settings, [sim] and per-strategy overrides", "[harness][config]") {
  CLI::App app;
  coordinator::DaemonConfig base;
  SimSettings settings;
  coordinator::ConfigBinder binder(app, base);
  bindSimSettings(binder, settings);
  const char* argv[] = {"starling-sim", "--dropout", "0.25"};
  app.parse(3, argv);
  std::vector<Strategy> strategies;
  Status st = loadConfig(STARLING_EXAMPLE_SIM_CONFIG, binder, base, strategies);
  REQUIRE(st);
  CHECK(settings.clients == 100);
  CHECK(settings.partition == "dirichlet:0.5");
  CHECK(settings.dropout == 0.25);  // the flag overrides the file's 0.1
  REQUIRE(strategies.size() == 7);
  CHECK(strategies[0].name == "fedavg-fp32");
  CHECK(strategies[0].engine.uplink == "identity");
  CHECK_FALSE(strategies[0].engine.errorFeedback);
  CHECK(strategies[0].engine.tau == 50);
  const Strategy& all = strategies.back();
  CHECK(all.engine.uplink == "topk-sampled");
  CHECK(all.engine.uplinkDensity == Approx(0.006));
  CHECK(all.engine.tau == 200);
  CHECK(all.engine.adaptiveTau);
  CHECK(all.task.prioritySampling);
  CHECK(all.engine.rounds == 100);  // shared, not overridden
  CHECK(all.engine.stickyClients == 40);
  CHECK(all.engine.stickyFraction == Approx(0.8));
  CHECK_FALSE(all.engine.stickyReweight);
  CHECK(strategies[5].engine.stickyReweight);  // the default
  CHECK(all.engine.downlinkShared == Approx(0.8));
  CHECK(strategies[5].engine.stickyClients == 0);  // all-on-uniform: the default

  SECTION("relative downlink indices: a strategy key, refused without a top-k downlink") {
    const auto path = std::filesystem::temp_directory_path() / "starling-sim-relative.toml";
    {
      std::ofstream out(path);
      out << "[[strategy]]\nname = \"x\"\ncompression = { downlink = \"topk\", downlink-relative-indices = true }\n"
          << "[[strategy]]\nname = \"y\"\ncompression = { downlink-relative-indices = true }\n";
    }
    std::vector<Strategy> two;
    const Status refused = loadConfig(path.string(), binder, base, two);  // y: identity downlink
    CHECK_FALSE(refused);
    CHECK(refused.message().find("strategy 2 'y'") != std::string::npos);
    CHECK(refused.message().find("downlink-relative-indices needs a topk") != std::string::npos);
    {
      std::ofstream out(path);
      out << "[[strategy]]\nname = \"x\"\ncompression = { downlink = \"topk\", downlink-relative-indices = true }\n";
    }
    std::vector<Strategy> one;
    REQUIRE(loadConfig(path.string(), binder, base, one));
    REQUIRE(one.size() == 1);
    CHECK(one[0].engine.downlinkRelativeIndices);
    CHECK_FALSE(strategies[0].engine.downlinkRelativeIndices);  // off by default
    std::filesystem::remove(path);
  }
  SECTION("a [sim] key inside a strategy is an error") {
    const auto path = std::filesystem::temp_directory_path() / "starling-sim-bad.toml";
    {
      std::ofstream out(path);
      out << "[[strategy]]\nname = \"x\"\nsim = { clients = 5 }\n";
    }
    std::vector<Strategy> bad;
    Status err = loadConfig(path.string(), binder, base, bad);
    CHECK_FALSE(err);
    CHECK(err.message().find("sim.clients") != std::string::npos);
    std::filesystem::remove(path);
  }
}

}  // namespace starling::sim

namespace starling::sim {
namespace {

std::string writeFile(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace

TEST_CASE("per-client links: a trace line per client, or a spread around the fleet's figures",
          "[harness][fashion-mnist][links]") {
  requireData();
  SimSettings s = smallFleet();
  s.clients = 4;
  s.trainExamples = 1000;
  s.linkTrace = writeFile("starling-sim-links.txt", "# up down latency\n0.5 2 40   # slow\n\n2 8 10\n");
  auto traced = Fleet::create(s, "mlp:784-32-10");
  REQUIRE(traced);
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& c = traced->clients()[i];
    CHECK(c.uplinkMbps == (i % 2 == 0 ? 0.5 : 2.0));
    CHECK(c.downlinkMbps == (i % 2 == 0 ? 2.0 : 8.0));
    CHECK(c.latencyMs == (i % 2 == 0 ? 40.0 : 10.0));
  }

  s.linkTrace.clear();
  s.clients = 50;
  auto alike = Fleet::create(s, "mlp:784-32-10");
  s.linkSpread = 4;
  auto spread = Fleet::create(s, "mlp:784-32-10");
  REQUIRE(alike);
  REQUIRE(spread);
  double slowest = 1, fastest = 0;
  for (std::size_t i = 0; i < 50; ++i) {
    const auto& a = alike->clients()[i];
    const auto& c = spread->clients()[i];
    CHECK(a.uplinkMbps == s.uplinkMbps);
    CHECK(a.latencyMs == s.latencyMs);
    CHECK(c.flopsPerSecond == a.flopsPerSecond);  // its own random stream
    // One factor f in [1, 4] per client: both bandwidths / f, the latency x f.
    const double f = s.uplinkMbps / c.uplinkMbps;
    CHECK(f >= 1.0);
    CHECK(f <= 4.0);
    CHECK(c.downlinkMbps == Approx(s.downlinkMbps / f));
    CHECK(c.latencyMs == Approx(s.latencyMs * f));
    slowest = std::min(slowest, 1 / f);
    fastest = std::max(fastest, 1 / f);
  }
  CHECK(fastest / slowest > 2.0);

  SECTION("a round lasts its client's own links") {
    SimSettings one = smallFleet();  // its 1 and 5 Mbit/s and 100 ms: the trace overrides them
    one.linkTrace = writeFile("starling-sim-link.txt", "0.5 2 40\n");
    checkOneRoundTime(one, 0.5, 2.0, 40);
  }

  SECTION("a malformed trace is refused, naming the line") {
    for (const char* text : {"0.5 2\n", "0.5 2 40 7\n", "1 2 3\n0 2 3\n", "1 2 x\n", "# nothing\n"}) {
      INFO(text);
      s.linkTrace = writeFile("starling-sim-links-bad.txt", text);
      auto bad = Fleet::create(s, "mlp:784-32-10");
      REQUIRE_FALSE(bad);
      const std::string m = bad.status().message();
      CHECK(m.find("starling-sim-links-bad.txt") != std::string::npos);
      CHECK((m.find("line") != std::string::npos || m.find("empty") != std::string::npos));
    }
    s.linkTrace = "/nonexistent/links.txt";
    CHECK_FALSE(Fleet::create(s, "mlp:784-32-10"));
  }
}

TEST_CASE("availability traces: windows parsed in order, refused with the line that is wrong",
          "[harness][availability]") {
  const auto ok =
      readAvailabilityTrace(writeFile("starling-sim-avail.txt", "# device start end\n0 0 10\n0 20 30\n2 5 6\n"), 0);
  REQUIRE(ok);
  REQUIRE(ok->size() == 3);
  CHECK((*ok)[0].size() == 2);
  CHECK((*ok)[0][1].start == 20);
  CHECK((*ok)[0][1].end == 30);
  CHECK((*ok)[1].empty());  // device 1: never online
  CHECK((*ok)[2].size() == 1);
  struct Bad {
    const char* text;
    double period;
    const char* says;
  };
  for (const Bad& b :
       {Bad{"0 10 10\n", 0, "start < end"}, Bad{"0 20 10\n", 0, "start < end"}, Bad{"0 0 10\n0 5 20\n", 0, "line 2"},
        Bad{"0.5 0 10\n", 0, "device"}, Bad{"-1 0 10\n", 0, "device"}, Bad{"0 0 150\n", 100, "period"},
        Bad{"0 0\n", 0, "line 1"}, Bad{"\n# none\n", 0, "empty"}}) {
    INFO(b.text);
    auto r = readAvailabilityTrace(writeFile("starling-sim-avail-bad.txt", b.text), b.period);
    REQUIRE_FALSE(r);
    CHECK(r.status().message().find(b.says) != std::string::npos);
  }
}

TEST_CASE("availability traces: clients train only inside their windows", "[harness][fashion-mnist][availability]") {
  requireData();
  // Half the fleet (device 0) is always online, the other half (device 1) for the first
  // 10 s of every 20; a round needs 30 idle clients, so it can start only while the
  // second half is online, and the rounds open at the 10 s mark lose it.
  SimSettings s = smallFleet();
  s.availabilityTrace = writeFile("starling-sim-avail-half.txt", "0 0 20\n1 0 10\n");
  s.availabilityPeriodS = 20;
  auto fleet = Fleet::create(s, "mlp:784-32-10");
  REQUIRE(fleet);
  CHECK(fleet->windows(0).size() == 1);
  CHECK(fleet->windows(1)[0].end == 10);
  Strategy st = smallStrategy();
  st.engine.rounds = 20;
  st.engine.clientsPerRound = 30;
  st.engine.overSelection = 1.0;
  auto r = runStrategy(*fleet, st);
  REQUIRE(r);
  CHECK(r->stopped.empty());
  REQUIRE(r->rounds.size() == 20);
  CHECK(r->rounds.back().virtualSeconds > 20);  // it waited through an offline half
  uint32_t dropped = 0;
  for (const RoundRow& row : r->rounds) {
    INFO("round " << row.round << " started at " << row.startedSeconds << " s");
    CHECK(std::fmod(row.startedSeconds, 20.0) < 10.0);
    dropped += row.dropped;
  }
  CHECK(dropped > 0);

  SECTION("without a period the trace plays once: the fleet is gone after its last window") {
    s.availabilityTrace = writeFile("starling-sim-avail-once.txt", "0 0 20\n1 0 6\n");
    s.availabilityPeriodS = 0;
    auto once = Fleet::create(s, "mlp:784-32-10");
    REQUIRE(once);
    auto r2 = runStrategy(*once, st);
    REQUIRE(r2);
    CHECK_FALSE(r2->stopped.empty());
    REQUIRE_FALSE(r2->rounds.empty());
    CHECK(r2->rounds.size() < 20);
    for (const RoundRow& row : r2->rounds)
      CHECK(row.startedSeconds < 6.0);
  }
}

}  // namespace starling::sim

namespace starling::sim {

// 4 clients, iid, over the whole of a CSV regression file (a fifth of it the test set),
// a quarter of each shard held out for evaluation.
// 4 clients on an iid split of a CSV regression file; evalFraction of each held out.
Result<Fleet> regressionFleet(const std::string& path, data::DataOptions options = {}, double evalFraction = 0.25,
                              double speedSpread = 4.0, double deviceGflops = 1.0) {
  SimSettings s = smallFleet();
  s.speedSpread = speedSpread;
  s.deviceGflops = deviceGflops;
  s.data = path;
  s.clients = 4;
  s.partition = "iid";
  s.trainExamples = 0;
  s.testExamples = 0;
  s.evalFraction = evalFraction;
  options.task = data::TaskKind::kRegression;
  return Fleet::create(s, "linear", options);
}

TEST_CASE("federated evaluation: the clients' held-out sums, from a CSV regression", "[harness][federated-eval]") {
  const std::string path = writeRegressionCsv("starling-sim-regression.csv", 3);
  auto fleet = regressionFleet(path);
  REQUIRE(fleet);
  CHECK(fleet->modelSpec() == "linear:2-1/mse");
  std::size_t held = 0, trained = 0;
  for (const auto& c : fleet->clients()) {
    held += c.heldOut.size();
    trained += c.examples.size();
  }
  CHECK(held + trained == fleet->train().size());  // 800: a fifth of the file is the test set
  CHECK(held == 200);
  Strategy st = smallStrategy("federated-eval");
  st.task.model = fleet->modelSpec();
  st.task.kind = "regression";
  st.engine.rounds = 6;
  st.engine.clientsPerRound = 4;
  st.engine.overSelection = 1.0;
  st.engine.federatedEvalEvery = 1;
  auto r = runStrategy(*fleet, st);
  REQUIRE(r);
  REQUIRE(r->rounds.size() == 6);
  CHECK(r->rounds[0].fedExamples == 0);  // round 1 trains from the round-0 model: nothing to evaluate
  for (std::size_t k = 1; k < r->rounds.size(); ++k) {
    CHECK(r->rounds[k].fedExamples == held);  // every client's held-out examples, once
    REQUIRE(r->rounds[k].fedRmse.has_value());
    CHECK_FALSE(r->rounds[k].fedAccuracy.has_value());
  }
  // Learning shows on the held-out examples, and ends near the test set's figure.
  CHECK(*r->rounds.back().fedRmse < *r->rounds[1].fedRmse);
  REQUIRE(r->rounds.back().rmse.has_value());
  CHECK(*r->rounds.back().fedRmse == Approx(*r->rounds.back().rmse).epsilon(0.5));
  // A regression's report plots its RMSE (it has no accuracy), with no target line.
  const std::string svg = reportSvg({*r}, 0.85);
  CHECK(svg.find("Test RMSE vs bytes") != std::string::npos);
  CHECK(svg.find("points='") != std::string::npos);
  CHECK(svg.find("points=''") == std::string::npos);
  CHECK(svg.find("dashed: target") == std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace starling::sim

namespace starling::sim {

TEST_CASE("partition files:DIR: client i trains on the i-th file of the directory", "[harness][files]") {
  const auto dir = std::filesystem::temp_directory_path() / "starling-sim-files";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // Three clients of 100, 200 and 300 examples; y = [x0 + x1 > 0].
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int c = 0; c < 3; ++c) {
    std::ofstream out(dir / ("client-" + std::to_string(c) + ".csv"));
    out << "x0,x1,label\n";
    for (int i = 0; i < 100 * (c + 1); ++i) {
      const double a = u(rng), b = u(rng);
      out << a << ',' << b << ',' << (a + b > 0 ? 1 : 0) << '\n';
    }
  }
  SimSettings s = smallFleet();
  s.clients = 3;
  s.partition = "files:" + dir.string();
  s.trainExamples = 0;
  s.testExamples = 0;
  auto fleet = Fleet::create(s, "linear");
  INFO(fleet.status().message());
  REQUIRE(fleet);
  // A fifth of the 600 examples is the test set; each client keeps the rest of its file.
  CHECK(fleet->test().size() == 120);
  CHECK(fleet->train().size() == 480);
  REQUIRE(fleet->clients().size() == 3);
  std::size_t at = 0;
  for (int c = 0; c < 3; ++c) {
    const auto& rows = fleet->clients()[c].examples;
    CHECK(rows.size() == Approx(80.0 * (c + 1)).margin(25));
    // Contiguous: file c's rows follow file c - 1's.
    CHECK(rows.front() == at);
    CHECK(rows.back() == at + rows.size() - 1);
    at += rows.size();
  }
  Strategy st = smallStrategy("files");
  st.task.model = fleet->modelSpec();
  st.engine.rounds = 5;
  st.engine.clientsPerRound = 3;
  st.engine.overSelection = 1.0;
  auto r = runStrategy(*fleet, st);
  REQUIRE(r);
  REQUIRE(r->rounds.back().accuracy.has_value());
  CHECK(*r->rounds.back().accuracy > 0.8);

  SECTION("the number of clients must match the files, and sim.data is refused") {
    s.clients = 4;
    auto wrong = Fleet::create(s, "linear");
    REQUIRE_FALSE(wrong);
    CHECK_THAT(wrong.status().message(), Catch::Contains("3 data files for 4 clients"));
    s.clients = 3;
    s.data = (dir / "client-0.csv").string();
    auto withData = Fleet::create(s, "linear");
    REQUIRE_FALSE(withData);
    CHECK_THAT(withData.status().message(), Catch::Contains("sim.data is not used with sim.partition files:DIR"));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace starling::sim

namespace starling::sim {

TEST_CASE("task.model onnx:PATH: the file's weights are the round-0 model", "[harness][onnx]") {
  if (std::system("/usr/bin/python3 -c 'import onnx, numpy' >/dev/null 2>&1") != 0) {
    WARN("/usr/bin/python3 lacks onnx or numpy: the ONNX file cannot be made, case skipped");
    return;
  }
  const auto dir = std::filesystem::temp_directory_path() / "starling-sim-onnx";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // A Gemm 2 -> 2 and a Softmax, made by python3-onnx: class 1 when x0 + x1 > 0.
  const std::string onnxPath = (dir / "linear.onnx").string();
  const std::string script =
      "import numpy as np, onnx\n"
      "from onnx import helper, numpy_helper, TensorProto as T\n"
      "w = numpy_helper.from_array(np.array([[-2, -2], [2, 2]], np.float32), 'w')\n"
      "b = numpy_helper.from_array(np.array([0.5, 0.5], np.float32), 'b')\n"
      "g = helper.make_graph([helper.make_node('Gemm', ['x', 'w', 'b'], ['z'], transB=1),\n"
      "  helper.make_node('Softmax', ['z'], ['p'], axis=1)], 'g',\n"
      "  [helper.make_tensor_value_info('x', T.FLOAT, ['n', 2])],\n"
      "  [helper.make_tensor_value_info('p', T.FLOAT, ['n', 2])], [w, b])\n"
      "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])\n"
      "m.ir_version = 8\n"
      "onnx.checker.check_model(m)\n"
      "onnx.save(m, '" +
      onnxPath + "')\n";
  std::ofstream(dir / "make.py") << script;
  REQUIRE(std::system(("/usr/bin/python3 " + (dir / "make.py").string()).c_str()) == 0);
  const std::string csv = (dir / "data.csv").string();
  {
    std::ofstream out(csv);
    out << "x0,x1,label\n";
    std::mt19937_64 rng(9);
    std::uniform_real_distribution<double> u(-1, 1);
    for (int i = 0; i < 500; ++i) {
      const double a = u(rng), b = u(rng);
      out << a << ',' << b << ',' << (a + b > 0 ? 1 : 0) << '\n';
    }
  }
  SimSettings s = smallFleet();
  s.data = csv;
  s.clients = 4;
  s.trainExamples = 0;
  s.testExamples = 0;
  auto fleet = Fleet::create(s, "onnx:" + onnxPath);
  INFO(fleet.status().message());
  REQUIRE(fleet);
  CHECK(fleet->modelSpec() == "linear:2-2");
  // dense0.weight {2, 2} row-major, then dense0.bias.
  CHECK(fleet->initialModel() == std::vector<float>{-2, -2, 2, 2, 0.5f, 0.5f});

  Strategy st = smallStrategy("onnx");
  st.task.model = fleet->modelSpec();
  st.engine.rounds = 1;
  st.engine.clientsPerRound = 4;
  st.engine.overSelection = 1.0;
  st.engine.lr = 1e-6;  // training barely moves it: what is measured is the file's model
  auto r = runStrategy(*fleet, st);
  REQUIRE(r);
  REQUIRE(r->rounds.back().accuracy.has_value());
  CHECK(*r->rounds.back().accuracy > 0.95);
  // The same fleet initialized from a seed instead: far from it after the same round.
  auto seeded = Fleet::create(s, "linear");
  REQUIRE(seeded);
  CHECK(seeded->initialModel().empty());
  auto r2 = runStrategy(*seeded, st);
  REQUIRE(r2);
  CHECK(*r2->rounds.back().accuracy < 0.9);

  auto missing = Fleet::create(s, "onnx:" + (dir / "none.onnx").string());
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.status().message(), Catch::Contains("none.onnx"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("standardize: the simulator's statistics round equals NumPy over the union of the shards",
          "[harness][standardize]") {
  // Columns on scales 1, 1000 and 0.01; a fifth of the file becomes the test set and a
  // quarter of each shard is held out (not counted in the statistics).
  const auto dir = std::filesystem::temp_directory_path();
  const auto path = (dir / "starling-sim-standardize.csv").string();
  {
    std::ofstream out(path);
    out << "a,b,c,target\n";
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(-1, 1);
    std::normal_distribution<double> noise(0, 0.1);
    for (int i = 0; i < 1000; ++i) {
      const double a = u(rng), b = 3000 + 2500 * (u(rng) + 1), c = 0.01 * u(rng);
      out << a << ',' << b << ',' << c << ',' << 1.5 * a - 0.002 * (b - 5500) + 50 * c + noise(rng) << '\n';
    }
  }
  auto fleet = regressionFleet(path);
  INFO(fleet.status().message());
  REQUIRE(fleet);
  Strategy st = smallStrategy("standardize");
  st.task.model = fleet->modelSpec();
  st.task.kind = "regression";
  st.task.standardize = true;
  st.engine.rounds = 8;
  st.engine.clientsPerRound = 4;
  st.engine.overSelection = 1.0;
  st.engine.lr = 0.1;
  auto r = runStrategy(*fleet, st);
  REQUIRE(r);

  // The reference: the clients' training rows, as the fleet holds them, through NumPy.
  std::vector<uint32_t> rows;
  for (const auto& c : fleet->clients())
    rows.insert(rows.end(), c.examples.begin(), c.examples.end());
  CHECK(r->statsClients == 4);
  CHECK(r->statsExamples == rows.size());
  CHECK(r->scaling.centre);
  std::vector<float> x(rows.size() * 3);
  fleet->train().gather(rows, x);
  const auto rowsPath = dir / "starling-sim-standardize-rows.txt";
  {
    std::ofstream out(rowsPath);
    char buf[32];
    for (std::size_t i = 0; i < x.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%.9g", double(x[i]));
      out << buf << ((i + 1) % 3 == 0 ? "\n" : " ");
    }
  }
  const std::string cmd =
      "/usr/bin/python3 -c \"import numpy as np, sys; x = np.loadtxt(sys.argv[1], "
      "dtype=np.float32).astype(np.float64); print(*x.mean(axis=0), *x.std(axis=0))\" " +
      rowsPath.string() + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::vector<double> ref;
  double v = 0;
  while (std::fscanf(p, "%lf", &v) == 1)
    ref.push_back(v);
  pclose(p);
  if (ref.size() != 6) {
    WARN("numpy (/usr/bin/python3 with numpy) is missing: the statistics are not compared");
  } else {
    for (std::size_t j = 0; j < 3; ++j) {
      INFO("feature " << j);
      CHECK(r->scaling.mean[j] == Approx(ref[j]).epsilon(1e-9));
      CHECK(r->scaling.std[j] == Approx(ref[3 + j]).epsilon(1e-9));
    }
  }
  // Trained on z-scores, the linear model reaches the noise with a learning rate that
  // the raw column of thousands would make diverge.
  REQUIRE(r->rounds.back().rmse.has_value());
  CHECK(*r->rounds.back().rmse < 0.3);
  std::filesystem::remove(path);
  std::filesystem::remove(rowsPath);
}

TEST_CASE("categorical vocabulary: the simulator agrees the daemon's vocabulary over the clients' values",
          "[harness][categorical]") {
  // Six cities of very different frequencies; with 5 slots (4 values + other) and a
  // minimum count of 20, the rarest (Rome, Lyon) share the other slot: they have the
  // same effect, so the linear model can still fit the target exactly.
  const auto path = (std::filesystem::temp_directory_path() / "starling-sim-vocabulary.csv").string();
  const std::vector<std::pair<std::string, double>> cities = {{"Oslo", 1.0}, {"Paris", -1.0}, {"Bergen", 2.0},
                                                              {"Lima", 0.5}, {"Rome", -2.0},  {"Lyon", -2.0}};
  const std::vector<double> weights = {0.3, 0.25, 0.2, 0.15, 0.07, 0.03};
  {
    std::ofstream out(path);
    out << "city,a,target\n";
    std::mt19937_64 rng(5);
    std::discrete_distribution<int> pick(weights.begin(), weights.end());
    std::uniform_real_distribution<double> u(-1, 1);
    std::normal_distribution<double> noise(0, 0.05);
    for (int i = 0; i < 1500; ++i) {
      const int c = pick(rng);
      const double a = u(rng);
      out << cities[c].first << ',' << a << ',' << cities[c].second + 0.5 * a + noise(rng) << '\n';
    }
  }
  data::DataOptions options;
  options.categorical = {"city"};
  options.categoricalBuckets = 5;
  auto fleet = regressionFleet(path, options, 0);
  INFO(fleet.status().message());
  REQUIRE(fleet);
  Strategy st = smallStrategy("vocabulary");
  st.task.model = fleet->modelSpec();
  st.task.kind = "regression";
  st.task.categorical = "city";
  st.task.categoricalBuckets = 5;
  st.task.categoricalVocabulary = true;
  st.task.vocabularyMinCount = 20;
  st.engine.rounds = 10;
  st.engine.clientsPerRound = 4;
  st.engine.overSelection = 1.0;
  st.engine.lr = 0.2;
  auto r = runStrategy(*fleet, st);
  INFO((r ? "" : r.status().message()));
  REQUIRE(r);

  // The reference: count the clients' training values here, keep those with >= 20,
  // the 4 most frequent (ties by value), sorted.
  std::map<std::string, uint64_t> counts;
  for (const auto& c : fleet->clients())
    for (uint32_t i : c.examples)
      ++counts[fleet->train().categories().value(i, 0)];
  std::vector<std::pair<uint64_t, std::string>> byCount;
  for (const auto& [v, n] : counts)
    if (n >= 20) byCount.emplace_back(n, v);
  std::sort(byCount.begin(), byCount.end(),
            [](const auto& x, const auto& y) { return x.first != y.first ? x.first > y.first : x.second < y.second; });
  std::vector<std::string> expected;
  for (std::size_t k = 0; k < std::min<std::size_t>(4, byCount.size()); ++k)
    expected.push_back(byCount[k].second);
  std::sort(expected.begin(), expected.end());
  CHECK(expected == std::vector<std::string>{"Bergen", "Lima", "Oslo", "Paris"});
  CHECK(r->vocabulary == data::CategoryVocabulary{{"city", expected}});
  CHECK(r->scaling.empty());  // no --standardize: only the vocabulary
  REQUIRE(r->rounds.back().rmse.has_value());
  CHECK(*r->rounds.back().rmse < 0.15);
  std::filesystem::remove(path);
}

TEST_CASE("dynamic batch sizes: equal clients train as sync does, unequal ones' compute evens out", "[harness][dbs]") {
  const std::string path = writeRegressionCsv("starling-sim-dbs.csv", 9);
  Strategy st = smallStrategy("dbs");
  st.task.kind = "regression";
  st.engine.tau = 50;  // minibatches, not the loss probe's forward passes, are most of the compute
  st.engine.rounds = 6;
  st.engine.clientsPerRound = 4;
  st.engine.overSelection = 1.0;
  st.engine.lr = 0.1;
  auto runBoth = [&](double spread) {
    // Slow devices (1 MFLOP/s), so that compute takes tens of ms (durations are whole ms).
    auto fleet = regressionFleet(path, {}, 0, spread, 1e-3);
    REQUIRE(fleet);
    st.task.model = fleet->modelSpec();
    Strategy dbs = st;
    dbs.engine.dynamicBatch = true;
    auto plain = runStrategy(*fleet, st);
    auto scaled = runStrategy(*fleet, dbs);
    REQUIRE(plain);
    REQUIRE(scaled);
    return std::pair{std::move(*plain), std::move(*scaled)};
  };
  SECTION("equal speeds: every scale is 1, the runs are the same") {
    auto [plain, scaled] = runBoth(1.0);
    REQUIRE(plain.rounds.size() == scaled.rounds.size());
    for (std::size_t r = 0; r < plain.rounds.size(); ++r) {
      INFO("round " << r + 1);
      CHECK(plain.rounds[r].rmse == scaled.rounds[r].rmse);
      CHECK(plain.rounds[r].virtualSeconds == scaled.rounds[r].virtualSeconds);
    }
  }
  SECTION("speeds 4x apart: once measured, the slowest client's compute shrinks and the model still fits") {
    auto [plain, scaled] = runBoth(4.0);
    // Round 1 measures the speeds (scale 1, the same round); from round 2 on the slow
    // clients' minibatches shrink and the fast ones' grow, all doing tau steps.
    CHECK(scaled.rounds[0].computeMaxSeconds == plain.rounds[0].computeMaxSeconds);
    for (std::size_t r = 1; r < plain.rounds.size(); ++r) {
      INFO("round " << r + 1);
      CHECK(scaled.rounds[r].computeMaxSeconds < 0.8 * plain.rounds[r].computeMaxSeconds);
    }
    REQUIRE(scaled.rounds.back().rmse.has_value());
    CHECK(*scaled.rounds.back().rmse < 0.3);
  }
  std::filesystem::remove(path);
}

TEST_CASE("overlap: without link time it changes nothing in virtual time, on slow links it shortens rounds",
          "[harness][overlap]") {
  const std::string path = writeRegressionCsv("starling-sim-overlap.csv", 17);
  SimSettings s = smallFleet();
  s.data = path;
  s.clients = 4;
  s.partition = "iid";
  s.trainExamples = 0;
  s.testExamples = 0;
  s.speedSpread = 1.0;
  s.deviceGflops = 1e-3;  // slow devices: compute takes tens of ms (durations are whole ms)
  Strategy st = smallStrategy("plain");
  st.task.kind = "regression";
  st.engine.tau = 100;
  st.engine.rounds = 8;
  st.engine.clientsPerRound = 4;
  st.engine.overSelection = 1.0;
  st.engine.lr = 0.1;
  Strategy overlapped = st;
  overlapped.name = "overlap";
  overlapped.task.overlap = 0.2f;
  const auto runBoth = [&](const SimSettings& settings) {
    data::DataOptions o;
    o.task = data::TaskKind::kRegression;
    auto fleet = Fleet::create(settings, "linear", o);
    REQUIRE(fleet);
    st.task.model = overlapped.task.model = fleet->modelSpec();
    auto plain = runStrategy(*fleet, st);
    auto over = runStrategy(*fleet, overlapped);
    REQUIRE(plain);
    REQUIRE(over);
    REQUIRE(plain->rounds.size() == over->rounds.size());
    return std::pair{std::move(*plain), std::move(*over)};
  };
  SECTION("no link time: the same virtual time round by round, a model as good") {
    s.uplinkMbps = s.downlinkMbps = 1e9;  // a frame takes under a microsecond
    s.latencyMs = 0;
    auto [plain, over] = runBoth(s);
    for (std::size_t r = 0; r < plain.rounds.size(); ++r) {
      INFO("round " << r + 1);
      CHECK(over.rounds[r].virtualSeconds == Approx(plain.rounds[r].virtualSeconds).margin(1e-5));
    }
    REQUIRE(over.rounds.back().rmse.has_value());
    CHECK(*over.rounds.back().rmse < 0.3);
  }
  SECTION("links as slow as the compute: each round after the first hides the compute behind the links") {
    s.latencyMs = 20;
    auto [plain, over] = runBoth(s);
    const auto period = [](const StrategyResult& r) {
      return (r.rounds.back().virtualSeconds - r.rounds[0].virtualSeconds) / double(r.rounds.size() - 1);
    };
    CHECK(over.rounds[0].virtualSeconds == Approx(plain.rounds[0].virtualSeconds));  // round 1 has no background
    CHECK(plain.rounds[1].computeMaxSeconds > 0.03);
    // A round: links + compute without overlap, max(links, compute) with it.
    CHECK(period(over) < 0.8 * period(plain));
    REQUIRE(over.rounds.back().rmse.has_value());
    CHECK(*over.rounds.back().rmse < 0.3);
    CHECK(over.rounds.back().bytesUp == plain.rounds.back().bytesUp);
  }
  std::filesystem::remove(path);
}

// Tiers: relays run by starling-relay's parts between the coordinator and the clients.
// Their tests train a linear regression on writeRegressionCsv's file at `path`.
SimSettings regressionFleet(const std::string& path, uint32_t clients) {
  SimSettings s = smallFleet();
  s.data = path;
  s.clients = clients;
  s.trainExamples = s.testExamples = 0;
  return s;
}

Fleet makeRegressionFleet(const SimSettings& s) {
  data::DataOptions o;
  o.task = data::TaskKind::kRegression;
  auto fleet = Fleet::create(s, "linear", o);
  REQUIRE(fleet);
  return std::move(*fleet);
}

Strategy regressionStrategy(const std::string& name, const Fleet& fleet) {
  Strategy st = smallStrategy(name);
  st.task.kind = "regression";
  st.task.model = fleet.modelSpec();
  return st;
}

TEST_CASE("tiers: one relay over every client: its rounds are FedAvg's, L local rounds = L rounds",
          "[harness][tiers]") {
  const std::string path = writeRegressionCsv("starling-sim-tiers.csv", 23);
  SimSettings s = regressionFleet(path, 8);
  s.speedSpread = 1.0;
  const Fleet fleet = makeRegressionFleet(s);
  Strategy flat = regressionStrategy("flat", fleet);
  // Minibatches are drawn with replacement from the round's seed, which a relay's round
  // numbers change: 2,048 draws from a client's 125 examples make every step close to
  // the full-batch one, so the runs differ by little more than float rounding.
  flat.task.batchSize = 2048;
  flat.engine.tau = 5;
  flat.engine.rounds = 6;
  flat.engine.clientsPerRound = 8;
  flat.engine.overSelection = 1.0;
  auto plain = runStrategy(fleet, flat);
  REQUIRE(plain);
  REQUIRE(plain->rounds.size() == 6);
  // The same federation with other minibatch draws (the task's seed): how far two runs
  // that differ only by their draws drift apart, round by round.
  Strategy reseeded = flat;
  reseeded.engine.seed = 7;
  auto other = runStrategy(fleet, reseeded);
  REQUIRE(other);
  REQUIRE(other->rounds.size() == 6);
  const auto drift = [](const StrategyResult& a, const StrategyResult& b, std::size_t step) {
    double sum = 0;
    for (std::size_t i = 0; i < a.rounds.size(); ++i)
      sum += std::abs(*a.rounds[i].testLoss / *b.rounds[step * i + step - 1].testLoss - 1);
    return sum / double(a.rounds.size());
  };
  const double seedDrift = drift(*other, *plain, 1);
  INFO("mean relative drift of the test loss between two draws: " << seedDrift);
  CHECK(seedDrift < 5e-3);

  Strategy tiered = flat;
  tiered.name = "tiered";
  tiered.engine.clientsPerRound = 1;  // the coordinator's one client is the relay
  TierSettings t;
  t.relays = 1;
  t.clientsPerRound = 8;
  t.overSelection = 1.0;
  SECTION("one local round per global round: the same model every round") {
    tiered.tiers = t;
    auto r = runStrategy(fleet, tiered);
    REQUIRE(r);
    REQUIRE(r->rounds.size() == 6);
    for (std::size_t i = 0; i < 6; ++i) {
      INFO("round " << i + 1);
      CHECK(r->rounds[i].committed);
      CHECK(r->rounds[i].participants == 1);
      REQUIRE(r->rounds[i].testLoss.has_value());
      CHECK(*r->rounds[i].testLoss == Approx(*plain->rounds[i].testLoss).epsilon(1e-2));
      // The relay's clients' frames are the edge's; the coordinator carries one update.
      CHECK(r->rounds[i].edgeBytesUp > 7 * r->rounds[i].bytesUp);
      CHECK(plain->rounds[i].edgeBytesUp == 0);
      // The relay's hop costs time: each global round ends later than the flat round.
      CHECK(r->rounds[i].virtualSeconds > plain->rounds[i].virtualSeconds);
    }
    CHECK(*r->rounds.back().rmse == Approx(*plain->rounds.back().rmse).epsilon(1e-2));
    CHECK(drift(*r, *plain, 1) < 2 * seedDrift);  // no further than another draw
  }
  SECTION("two local rounds per global round: global round g is flat round 2g") {
    t.localRounds = 2;
    tiered.tiers = t;
    tiered.engine.rounds = 3;
    auto r = runStrategy(fleet, tiered);
    REQUIRE(r);
    REQUIRE(r->rounds.size() == 3);
    for (std::size_t g = 0; g < 3; ++g) {
      INFO("global round " << g + 1);
      REQUIRE(r->rounds[g].testLoss.has_value());
      CHECK(*r->rounds[g].testLoss == Approx(*plain->rounds[2 * g + 1].testLoss).epsilon(1e-2));
    }
    CHECK(drift(*r, *plain, 2) < 2 * seedDrift);
  }
  std::filesystem::remove(path);
}

TEST_CASE("tiers: the coordinator's link carries its transfers one after another; relays carry their clients'",
          "[harness][tiers]") {
  const std::string path = writeRegressionCsv("starling-sim-tiers-links.csv", 29);
  SimSettings s = regressionFleet(path, 30);
  s.speedSpread = 1.0;
  s.uplinkMbps = s.downlinkMbps = 10;
  s.latencyMs = 10;
  const Fleet fleet = makeRegressionFleet(s);
  Strategy st = regressionStrategy("flat", fleet);
  st.engine.rounds = 4;
  st.engine.clientsPerRound = 30;
  st.engine.overSelection = 1.0;
  const auto run = [&](const Strategy& strategy) {
    auto r = runStrategy(fleet, strategy);
    REQUIRE(r);
    REQUIRE(r->rounds.size() == strategy.engine.rounds);
    return std::move(*r);
  };
  const StrategyResult free = run(st);
  TierSettings narrow;
  narrow.coordinatorMbps = 0.05;  // 30 updates of a few hundred bytes take seconds through it
  Strategy limited = st;
  limited.tiers = narrow;
  const StrategyResult queued = run(limited);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("round " << i + 1);
    const double started = queued.rounds[i].startedSeconds;
    const double through = double(queued.rounds[i].bytesUp) * 8 / 0.05e6;  // the uplink's share alone
    CHECK(queued.rounds[i].virtualSeconds - started >= through);
    CHECK(queued.rounds[i].virtualSeconds - started > free.rounds[i].virtualSeconds - free.rounds[i].startedSeconds);
  }
  // The same 30 clients under 3 relays: the coordinator's link carries 3 updates a round.
  Strategy tiered = st;
  tiered.engine.clientsPerRound = 3;
  TierSettings t = narrow;
  t.relays = 3;
  t.clientsPerRound = 10;
  t.overSelection = 1.0;
  tiered.tiers = t;
  const StrategyResult relayed = run(tiered);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("round " << i + 1);
    CHECK(relayed.rounds[i].committed);
    CHECK(relayed.rounds[i].participants == 3);
    CHECK(relayed.rounds[i].bytesUp * 5 < queued.rounds[i].bytesUp);
    CHECK(relayed.rounds[i].virtualSeconds - relayed.rounds[i].startedSeconds <
          queued.rounds[i].virtualSeconds - queued.rounds[i].startedSeconds);
  }
  // Relays near their clients: 1 ms instead of the clients' 10 ms one way, two messages
  // on a local round's critical path (the assignment down, the update up): 18 ms less.
  tiered.tiers->clientLatencyMs = 1;
  const StrategyResult near = run(tiered);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("round " << i + 1);
    const double saved = (relayed.rounds[i].virtualSeconds - relayed.rounds[i].startedSeconds) -
                         (near.rounds[i].virtualSeconds - near.rounds[i].startedSeconds);
    CHECK(saved == Approx(0.018).margin(0.002));
  }
  std::filesystem::remove(path);
}

TEST_CASE("tiers: a relay whose local rounds outlast 90% of the coordinator's deadline sends nothing",
          "[harness][tiers]") {
  const std::string path = writeRegressionCsv("starling-sim-tiers-late.csv", 31);
  SimSettings s = regressionFleet(path, 6);
  s.maxVirtualHours = 0.02;  // 72 s
  const Fleet fleet = makeRegressionFleet(s);
  Strategy st = regressionStrategy("late relays", fleet);
  st.engine.clientsPerRound = 2;
  st.engine.overSelection = 1.0;
  st.engine.deadlineMs = 2'000;
  TierSettings t;
  t.relays = 2;
  t.clientsPerRound = 3;
  t.overSelection = 1.0;
  t.localRounds = 50;  // each local round takes over 0.2 s of links alone
  t.deadlineMs = 60'000;
  st.tiers = t;
  auto r = runStrategy(fleet, st);
  REQUIRE(r);
  REQUIRE(!r->rounds.empty());
  for (const RoundRow& row : r->rounds) {
    INFO("round " << row.round);
    CHECK_FALSE(row.committed);
    CHECK(row.participants == 0);
    CHECK(row.bytesUp == 0);
    CHECK(row.edgeBytesUp > 0);  // the relays' clients trained
  }
  // Each relay joins again after giving up and is assigned the next round.
  CHECK(r->rounds.back().selected == 2);
  std::filesystem::remove(path);
}

TEST_CASE("tiers: relays under an asynchronous coordinator: every server step from relays' updates",
          "[harness][tiers]") {
  const std::string path = writeRegressionCsv("starling-sim-tiers-async.csv", 37);
  const Fleet fleet = makeRegressionFleet(regressionFleet(path, 30));
  Strategy st = regressionStrategy("async relays", fleet);
  st.engine.mode = "async";
  st.engine.clientsPerRound = 2;
  st.engine.concurrency = 3;
  st.engine.bufferSize = 2;
  st.engine.rounds = 10;
  st.engine.errorFeedback = true;
  st.engine.uplink = "topk";
  st.engine.uplinkDensity = 0.5;
  TierSettings t;
  t.relays = 3;
  t.clientsPerRound = 5;
  st.tiers = t;
  auto r = runStrategy(fleet, st);
  REQUIRE(r);
  REQUIRE(r->rounds.size() == 10);
  uint64_t edge = 0;
  for (const RoundRow& row : r->rounds) {
    INFO("server step " << row.round);
    CHECK(row.committed);
    CHECK(row.participants == 2);  // the buffer: two relays' updates
    edge += row.edgeBytesUp;
  }
  CHECK(edge > 10 * r->rounds.back().bytesUp);  // the relays' clients trained (more than the coordinator saw)
  REQUIRE(r->rounds.front().rmse.has_value());
  REQUIRE(r->rounds.back().rmse.has_value());
  CHECK(*r->rounds.back().rmse < 0.5 * *r->rounds.front().rmse);
  std::filesystem::remove(path);
}

}  // namespace starling::sim

namespace starling::sim {

// Sparse models in the simulator (sim.row-bucket): the same parts as the daemon's
// (client::offerRows, coordinator::ClientRowSet, the engine's view catch-up). Clients
// training the compact model of their rows learn what clients training the whole model
// learn, on power-law LIBSVM data written here, while the coordinator's frames shrink.
// A sparse binary task's settings: the LIBSVM texts written to files named NAME-train
// and NAME-test, N clients by `partition`, rows offered in buckets of 1, no dropouts.
SimSettings sparseSettings(const std::string& name, const std::string& train, const std::string& test, uint32_t clients,
                           const std::string& partition) {
  SimSettings s;
  s.data = writeFile(name + "-train.libsvm", train);
  s.testData = writeFile(name + "-test.libsvm", test);
  s.clients = clients;
  s.partition = partition;
  s.dropout = 0;
  s.rowBucket = 1;
  return s;
}

data::DataOptions binaryTask() {
  data::DataOptions options;
  options.task = data::TaskKind::kBinary;
  return options;
}

TEST_CASE("clients that train their rows learn what whole-model clients learn, for fewer bytes",
          "[harness][sparse-rows]") {
  // 600 examples over 4,096 features, 6 distinct features each, skewed towards low ids;
  // the label is the parity of the smallest feature.
  std::mt19937_64 rng(5);
  std::string train, test;
  for (int i = 0; i < 800; ++i) {
    std::vector<uint32_t> f;
    for (int k = 0; k < 6; ++k) {
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      f.push_back(1 + static_cast<uint32_t>(std::exp(std::log(4096.0) * u * u)) % 4096);
    }
    std::sort(f.begin(), f.end());
    f.erase(std::unique(f.begin(), f.end()), f.end());
    std::string line = f.front() % 2 == 0 ? "+1" : "-1";
    for (uint32_t j : f)
      line += " " + std::to_string(j) + ":1";
    if (i == 0 || i == 600) line += " 4096:0";  // both files 4,096 features wide
    (i < 600 ? train : test) += line + "\n";
  }
  const SimSettings s = sparseSettings("starling-sim-sparse", train, test, 12, "iid");
  const data::DataOptions options = binaryTask();
  auto fleet = Fleet::create(s, "linear", options);
  REQUIRE(fleet.isOk());
  auto run = [&](bool sparse, bool topk) {
    Strategy st;
    st.name = sparse ? "sparse" : "dense";
    st.task.model = fleet->modelSpec();
    st.task.kind = "binary";
    st.task.batchSize = 8;
    st.task.sparseRows = sparse;
    st.engine.rounds = 6;
    st.engine.clientsPerRound = 4;
    st.engine.overSelection = 1.0;
    st.engine.tau = 10;
    st.engine.lr = 0.5;
    st.engine.stepBudgets = false;
    st.engine.errorFeedback = topk;
    if (topk) {
      st.engine.uplink = st.engine.downlink = "topk";
      st.engine.uplinkDensity = st.engine.downlinkDensity = 0.5;
    }
    auto r = runStrategy(*fleet, st);
    REQUIRE(r.isOk());
    REQUIRE(r->rounds.size() == 6);
    return std::move(r).value();
  };
  const StrategyResult dense = run(false, false), sparse = run(true, false);
  uint64_t denseBytes = 0, sparseBytes = 0;
  for (std::size_t k = 0; k < 6; ++k) {
    INFO("round " << k + 1);
    CHECK(sparse.rounds[k].committed);
    // The same training: the same examples, steps and arithmetic on the rows.
    CHECK(sparse.rounds[k].accuracy == dense.rounds[k].accuracy);
    CHECK(sparse.rounds[k].testLoss.value_or(-1) == Approx(dense.rounds[k].testLoss.value_or(-2)).epsilon(1e-5));
    denseBytes += dense.rounds[k].bytesUp + dense.rounds[k].bytesDown;
    sparseBytes += sparse.rounds[k].bytesUp + sparse.rounds[k].bytesDown;
  }
  CHECK(sparseBytes * 3 < denseBytes);
  // Top-k over the rows still trains (error feedback at the compact size).
  const StrategyResult topk = run(true, true);
  CHECK(topk.rounds.back().accuracy.value_or(0) > 0.6);
}

}  // namespace starling::sim

namespace starling::sim {

TEST_CASE(
    "sparse relays train upstream their clients' rows only: the same model, fewer bytes; METIS placement "
    "fewer still",
    "[harness][sparse-rows][tiers]") {
  // 8 clients (one group each) in two communities of features: clients 0-3 draw from
  // [1, 2000], clients 4-7 from [2001, 4000], plus one of 20 shared features; the label
  // is the parity of the smallest community feature.
  std::mt19937_64 rng(11);
  std::string train, test;
  for (int i = 0; i < 1000; ++i) {
    const int client = i % 8, community = i < 800 ? client / 4 : (i / 2) % 2;
    std::vector<uint32_t> f;
    for (int k = 0; k < 6; ++k) {
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      f.push_back(1 + 2000 * community + static_cast<uint32_t>(1999 * u * u));
    }
    std::sort(f.begin(), f.end());
    f.erase(std::unique(f.begin(), f.end()), f.end());
    std::string line = f.front() % 2 == 0 ? "+1" : "-1";
    if (i < 800) line += " client:" + std::to_string(client);  // the group (the test set has none)
    for (uint32_t j : f)
      line += " " + std::to_string(j) + ":1";
    line += " " + std::to_string(4001 + rng() % 20) + ":1";
    if (i == 0 || i == 800) line += " 4096:0";  // both files 4,096 features wide
    (i < 800 ? train : test) += line + "\n";
  }
  const SimSettings s = sparseSettings("starling-sim-relay-rows", train, test, 8, "by-column:client");
  const data::DataOptions options = binaryTask();
  auto fleet = Fleet::create(s, "linear", options);
  REQUIRE(fleet.isOk());
  auto run = [&](bool sparseRelays, const std::string& placement) {
    Strategy st;
    st.name = placement + (sparseRelays ? "-sparse" : "-whole");
    st.task.model = fleet->modelSpec();
    st.task.kind = "binary";
    st.task.batchSize = 8;
    st.engine.rounds = 5;
    st.engine.clientsPerRound = 2;  // both relays
    st.engine.overSelection = 1.0;
    st.engine.tau = 10;
    st.engine.lr = 0.5;
    st.engine.stepBudgets = false;
    TierSettings t;
    t.relays = 2;
    t.clientsPerRound = 4;
    t.overSelection = 1.0;
    t.sparseRows = sparseRelays;
    t.placement = placement;
    st.tiers = t;
    return runStrategy(*fleet, st);
  };
  auto whole = run(false, "mod"), sparse = run(true, "mod"), metis = run(true, "metis");
  REQUIRE(whole.isOk());
  REQUIRE(sparse.isOk());
  REQUIRE(metis.isOk());
  REQUIRE(whole->rounds.size() == 5);
  REQUIRE(sparse->rounds.size() == 5);
  REQUIRE(metis->rounds.size() == 5);
  const auto coordinatorBytes = [](const StrategyResult& r) {
    uint64_t b = 0;
    for (const RoundRow& row : r.rounds)
      b += row.bytesUp + row.bytesDown;
    return b;
  };
  for (std::size_t k = 0; k < 5; ++k) {
    INFO("round " << k + 1);
    CHECK(sparse->rounds[k].committed);
    // The same training: the relays' clients train the same rows from the same values.
    CHECK(sparse->rounds[k].accuracy == whole->rounds[k].accuracy);
    CHECK(sparse->rounds[k].testLoss.value_or(-1) == Approx(whole->rounds[k].testLoss.value_or(-2)).epsilon(1e-5));
    // What the relays' clients move is the same; only the relay <-> coordinator part shrinks.
    CHECK(sparse->rounds[k].edgeBytesUp == whole->rounds[k].edgeBytesUp);
  }
  INFO("coordinator bytes: whole-model relays " << coordinatorBytes(*whole) << ", sparse relays (mod) "
                                                << coordinatorBytes(*sparse) << ", sparse relays (METIS) "
                                                << coordinatorBytes(*metis));
  CHECK(coordinatorBytes(*sparse) < coordinatorBytes(*whole));
  // Client i under relay i mod 2 mixes the communities; METIS gives each its own relay.
  CHECK(coordinatorBytes(*metis) * 5 < coordinatorBytes(*sparse) * 4);
  CHECK(metis->placementSeconds > 0);
  CHECK(metis->rounds.back().accuracy.value_or(0) > 0.55);

  auto noRows = [&] {
    SimSettings flat = s;
    flat.rowBucket = 0;
    auto f = Fleet::create(flat, "linear", options);
    REQUIRE(f.isOk());
    Strategy st;
    st.task.model = f->modelSpec();
    st.task.kind = "binary";
    st.engine.rounds = 1;
    TierSettings t;
    t.relays = 2;
    t.sparseRows = true;
    st.tiers = t;
    return runStrategy(*f, st);
  }();
  CHECK(noRows.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(noRows.status().message(), Catch::Contains("sim.row-bucket"));
  auto bogus = run(true, "nearest");
  CHECK(bogus.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(bogus.status().message(), Catch::Contains("mod, metis or random"));
}

}  // namespace starling::sim

namespace starling::sim {
namespace {

// A CSV of 4 classes, 125 rows each (two features near the class's corner), seeded; a
// fifth of it is held out as the test set (sim.test-data unset): 400 training rows.
std::string writeClassesCsv(const std::string& name) {
  const auto path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream out(path);
  out << "a,b,label\n";
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0, 0.3);
  for (int i = 0; i < 500; ++i) {
    const int label = i % 4;
    out << (label & 1) + noise(rng) << ',' << (label >> 1) + noise(rng) << ',' << label << '\n';
  }
  return path;
}

Result<Fleet> drawnFleet(const std::string& path, uint32_t clients, const std::string& partition,
                         uint32_t clientExamples = 0) {
  SimSettings s = smallFleet();
  s.data = path;
  s.clients = clients;
  s.partition = partition;
  s.trainExamples = 0;
  s.testExamples = 0;
  s.clientExamples = clientExamples;
  return Fleet::create(s, "linear");
}

// The largest share of one class among a client's examples, averaged over the clients.
double meanTopClassShare(const Fleet& fleet) {
  double sum = 0;
  for (const auto& c : fleet.clients()) {
    std::vector<int> counts(4, 0);
    for (uint32_t i : c.examples)
      ++counts[static_cast<std::size_t>(fleet.train().labels()[i])];
    sum += double(*std::max_element(counts.begin(), counts.end())) / double(c.examples.size());
  }
  return sum / double(fleet.clients().size());
}

}  // namespace

TEST_CASE("with replacement: more clients than examples each draw theirs, by the partition's distribution",
          "[harness][drawn]") {
  const std::string path = writeClassesCsv("starling-sim-classes.csv");
  SECTION("iid: every client draws 32, uniformly, the same for any population") {
    auto fleet = drawnFleet(path, 2000, "iid");
    REQUIRE(fleet);
    REQUIRE(fleet->train().size() == 400);
    CHECK(fleet->drawn());
    std::vector<uint64_t> counts(fleet->train().size(), 0);
    for (const auto& c : fleet->clients()) {
      REQUIRE(c.examples.size() == kDrawnExamples);
      CHECK(std::is_sorted(c.examples.begin(), c.examples.end()));
      for (uint32_t i : c.examples)
        ++counts.at(i);
    }
    // 64,000 draws over 400 examples: chi-square with 399 degrees of freedom (mean 399,
    // sd 28) under uniform draws.
    const double expected = 2000.0 * kDrawnExamples / 400.0;
    double chi2 = 0;
    for (uint64_t n : counts)
      chi2 += (double(n) - expected) * (double(n) - expected) / expected;
    CHECK(chi2 < 399 + 5 * 28.2);
    CHECK(chi2 > 399 - 5 * 28.2);
    // Seeded by the client alone: the same in another run and in a smaller population.
    auto again = drawnFleet(path, 2000, "iid");
    auto fewer = drawnFleet(path, 500, "iid");
    REQUIRE(again);
    REQUIRE(fewer);
    for (std::size_t i = 0; i < 500; ++i) {
      const auto& a = fleet->clients()[i].examples;
      CHECK(std::equal(a.begin(), a.end(), again->clients()[i].examples.begin(), again->clients()[i].examples.end()));
      CHECK(std::equal(a.begin(), a.end(), fewer->clients()[i].examples.begin(), fewer->clients()[i].examples.end()));
    }
    // Different clients draw differently.
    const auto& a = fleet->clients()[0].examples;
    const auto& b = fleet->clients()[1].examples;
    CHECK_FALSE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  }
  SECTION("sim.client-examples draws that many with replacement, whatever the population") {
    auto fleet = drawnFleet(path, 10, "iid", 100);
    REQUIRE(fleet);
    CHECK(fleet->drawn());
    for (const auto& c : fleet->clients())
      CHECK(c.examples.size() == 100);
    auto split = drawnFleet(path, 10, "iid");  // fewer clients than examples: the split, as before
    REQUIRE(split);
    CHECK_FALSE(split->drawn());
    std::size_t total = 0;
    for (const auto& c : split->clients())
      total += c.examples.size();
    CHECK(total == 400);
  }
  SECTION("classes:K: K classes per client; dirichlet:ALPHA: skew that follows alpha") {
    auto two = drawnFleet(path, 1000, "classes:2");
    REQUIRE(two);
    std::vector<uint64_t> perClass(4, 0);
    for (const auto& c : two->clients()) {
      std::vector<int> seen;
      for (uint32_t i : c.examples) {
        seen.push_back(two->train().labels()[i]);
        ++perClass[static_cast<std::size_t>(seen.back())];
      }
      std::sort(seen.begin(), seen.end());
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      CHECK(seen.size() <= 2);
    }
    // Classes chosen uniformly: each is one of a client's two with probability 1/2 (500
    // of 1,000 clients, sd 16) and takes half its 32 draws: 8,000 each, sd about 260.
    for (uint64_t n : perClass)
      CHECK(double(n) == Approx(8000).margin(5 * 260));
    auto skewed = drawnFleet(path, 1000, "dirichlet:0.05");
    auto even = drawnFleet(path, 1000, "dirichlet:1000");
    REQUIRE(skewed);
    REQUIRE(even);
    CHECK(meanTopClassShare(*skewed) > 0.85);
    CHECK(meanTopClassShare(*even) < 0.45);  // 32 draws of 4 near-equal classes: about 0.37
  }
  SECTION("refused with a reason") {
    auto bad = drawnFleet(path, 1000, "dirichlet:0");
    REQUIRE_FALSE(bad);
    CHECK(bad.status().message().find("ALPHA > 0") != std::string::npos);
    SimSettings s = smallFleet();
    s.data = writeRegressionCsv("starling-sim-drawn-regression.csv", 5);
    s.clients = 2000;
    s.partition = "dirichlet:0.5";
    s.trainExamples = s.testExamples = 0;
    data::DataOptions options;
    options.task = data::TaskKind::kRegression;
    auto regression = Fleet::create(s, "linear", options);
    REQUIRE_FALSE(regression);
    CHECK(regression.status().message().find("regression takes iid") != std::string::npos);
    std::filesystem::remove(s.data);
  }
  std::filesystem::remove(path);
}

TEST_CASE("a million clients pass validation and cost tens of bytes each until they train",
          "[harness][drawn][million]") {
  CLI::App app;
  coordinator::DaemonConfig base;
  SimSettings settings = smallFleet();
  coordinator::ConfigBinder binder(app, base);
  bindSimSettings(binder, settings);
  const char* argv[] = {"starling-sim", "--clients", "1000000", "--learner-clients", "64"};
  app.parse(5, argv);
  CHECK(settings.clients == 1'000'000);
  CHECK(settings.learnerClients == 64);
  const std::string path = writeClassesCsv("starling-sim-million.csv");
  settings.data = path;
  settings.partition = "dirichlet:0.5";
  settings.trainExamples = settings.testExamples = 0;
  auto fleet = Fleet::create(settings, "linear");
  REQUIRE(fleet);
  REQUIRE(fleet->clients().size() == 1'000'000);
  CHECK(fleet->drawn());
  for (std::size_t i : {std::size_t{0}, std::size_t{499'999}, std::size_t{999'999}})
    CHECK(fleet->clients()[i].examples.size() == kDrawnExamples);
  // Three rounds of 20 clients over the million, with error feedback and a Learner bound
  // of 64 (fewer than the 60 trained plus those awaiting verdicts would need once more).
  Strategy st = smallStrategy("million");
  st.task.model = fleet->modelSpec();
  st.engine.rounds = 3;
  st.engine.clientsPerRound = 20;
  st.engine.overSelection = 1.0;
  st.engine.errorFeedback = true;
  st.engine.uplink = "topk";
  st.engine.uplinkDensity = 0.5;
  auto r = runStrategy(*fleet, st);
  REQUIRE(r);
  REQUIRE(r->rounds.size() == 3);
  for (const auto& row : r->rounds) {
    CHECK(row.committed);
    CHECK(row.participants == 20);
  }
  std::filesystem::remove(path);
}

TEST_CASE("a Learner bound below the clients trained evicts the least recently trained, deterministically",
          "[harness][drawn]") {
  const std::string path = writeClassesCsv("starling-sim-evict.csv");
  auto fleet = drawnFleet(path, 40, "iid", 50);
  REQUIRE(fleet);
  Strategy st = smallStrategy("evict");
  st.task.model = fleet->modelSpec();
  st.engine.rounds = 8;
  st.engine.clientsPerRound = 10;
  st.engine.overSelection = 1.0;
  st.engine.errorFeedback = true;
  st.engine.uplink = "topk";
  st.engine.uplinkDensity = 0.34;
  auto unbounded = runStrategy(*fleet, st);
  REQUIRE(unbounded);
  SimSettings s = fleet->settings();
  s.learnerClients = 12;  // fewer than the 40 clients that train
  auto bounded = Fleet::create(s, "linear");
  REQUIRE(bounded);
  auto a = runStrategy(*bounded, st);
  auto b = runStrategy(*bounded, st);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(a->rounds.size() == 8);
  REQUIRE(b->rounds.size() == 8);
  for (std::size_t k = 0; k < 8; ++k)
    CHECK(a->rounds[k].modelChecksum == b->rounds[k].modelChecksum);
  // Evicted clients lose their uplink memories: the models part from the unbounded run's.
  CHECK(a->rounds.back().modelChecksum != unbounded->rounds.back().modelChecksum);
  std::filesystem::remove(path);
}

TEST_CASE("privacy in the simulator: poisson rounds of top-k uplinks, epsilon per round as the accountant's",
          "[harness][fashion-mnist][privacy]") {
  requireData();
  auto fleet = Fleet::create(smallFleet(), "mlp:784-32-10");
  REQUIRE(fleet);
  Strategy st = smallStrategy("private");
  st.engine.rounds = 8;
  st.engine.minClients = 50;
  st.engine.sampling = "poisson";
  st.engine.samplingRate = 0.2;
  st.engine.clipNorm = 0.5;
  st.engine.noiseMultiplier = 1.0;
  st.engine.uplink = "topk";
  st.engine.uplinkDensity = 0.05;
  st.engine.errorFeedback = true;
  auto r = runStrategy(*fleet, st);
  REQUIRE(r);
  REQUIRE(r->rounds.size() == 8);
  std::set<uint32_t> sizes;
  for (std::size_t i = 0; i < r->rounds.size(); ++i) {
    const RoundRow& row = r->rounds[i];
    REQUIRE(row.committed);
    sizes.insert(row.selected);
    coordinator::PrivacyAccountant a;
    REQUIRE(a.addRounds(0.2, 1.0, i + 1).isOk());
    REQUIRE(row.epsilon.has_value());
    CHECK(*row.epsilon == Approx(a.spent(1e-5).epsilon).epsilon(1e-12));
  }
  CHECK(sizes.size() > 1);  // Poisson: the rounds draw different numbers of clients
  // The same seed, the same noise: the run is reproducible.
  auto again = runStrategy(*fleet, st);
  REQUIRE(again);
  CHECK(again->rounds.back().modelChecksum == r->rounds.back().modelChecksum);
}

TEST_CASE("distributed noise in the simulator: the clients' shares are the round's noise, accounted as central's",
          "[harness][fashion-mnist][privacy]") {
  requireData();
  auto fleet = Fleet::create(smallFleet(), "mlp:784-32-10");
  REQUIRE(fleet);
  auto run = [&](const std::string& placement, double sigma) {
    Strategy st = smallStrategy("noise-" + placement);
    st.engine.rounds = 10;
    st.engine.overSelection = 1.0;
    st.engine.clipNorm = 0.5;
    st.engine.noiseMultiplier = sigma;
    st.engine.noisePlacement = placement;
    auto r = runStrategy(*fleet, st);
    REQUIRE(r);
    REQUIRE(r->rounds.size() == 10);
    REQUIRE(r->finalAccuracy());
    return *r;
  };
  const StrategyResult clipped = run("central", 0.0);
  // sigma = 20 over K = 10 clients: N(0, 1) a coordinate a round drowns the model, from
  // the engine or from the clients' ten shares of N(0, 0.1).
  const StrategyResult loudCentral = run("central", 20.0);
  const StrategyResult loudShares = run("distributed", 20.0);
  CHECK(*clipped.finalAccuracy() > 0.6);
  CHECK(*loudCentral.finalAccuracy() < 0.35);
  CHECK(*loudShares.finalAccuracy() < 0.35);
  // A usable sigma: it trains, epsilon is central noise's round by round (the
  // fixed-size accountant at q = 10 over the idle clients, at least 10 / 50), and the
  // same seed gives the same shares.
  const StrategyResult shares = run("distributed", 0.5);
  const StrategyResult central = run("central", 0.5);
  CHECK(*shares.finalAccuracy() > *clipped.finalAccuracy() - 0.1);
  coordinator::PrivacyAccountant a;
  REQUIRE(a.addRoundsWithoutReplacement(10.0 / 50.0, 0.5 / 2, shares.rounds.size()).isOk());
  for (std::size_t i = 0; i < shares.rounds.size(); ++i) {
    REQUIRE(shares.rounds[i].epsilon.has_value());
    REQUIRE(central.rounds[i].epsilon.has_value());
    CHECK(std::isfinite(*shares.rounds[i].epsilon));
    CHECK(*shares.rounds[i].epsilon == *central.rounds[i].epsilon);
  }
  CHECK(*shares.rounds.back().epsilon >= a.spent(1e-5).epsilon);
  CHECK(shares.rounds.back().modelChecksum != central.rounds.back().modelChecksum);
  CHECK(run("distributed", 0.5).rounds.back().modelChecksum == shares.rounds.back().modelChecksum);
}

TEST_CASE("privacy in the simulator's FedBuff: per-client accounting, and the budget ends training",
          "[harness][fashion-mnist][privacy]") {
  requireData();
  auto fleet = Fleet::create(smallFleet(), "mlp:784-32-10");
  REQUIRE(fleet);
  Strategy st = smallStrategy("fedbuff-private");
  st.engine.mode = "async";
  st.engine.rounds = 200;
  st.engine.clientsPerRound = 10;  // the buffer's K
  st.engine.concurrency = 20;
  st.engine.clipNorm = 0.5;
  st.engine.noiseMultiplier = 1.0;
  st.engine.targetEpsilon = 30;
  auto r = runStrategy(*fleet, st);
  REQUIRE(r);
  // Each of the 50 clients can afford a few updates: the budget, not the round limit,
  // ends training, and no step passed it.
  REQUIRE_FALSE(r->rounds.empty());
  CHECK(r->rounds.size() < 200);
  double last = 0;
  for (const RoundRow& row : r->rounds) {
    REQUIRE(row.epsilon.has_value());
    CHECK(*row.epsilon <= 30);
    CHECK(*row.epsilon >= last);
    last = *row.epsilon;
  }
  CHECK(last > 20);  // it went near the target
  REQUIRE(r->finalAccuracy());
  CHECK(*r->finalAccuracy() > 0.5);
}

TEST_CASE("attack models in the simulator: hostile clients ruin the mean, not the median",
          "[harness][fashion-mnist][attack]") {
  requireData();
  SimSettings s = smallFleet();
  s.attack = "sign-flip:10";
  s.attackers = 0.3;
  auto fleet = Fleet::create(s, "mlp:784-32-10");
  REQUIRE(fleet);
  Strategy mean = smallStrategy("mean");
  mean.engine.maxNormRatio = 0;
  mean.engine.rounds = 10;
  Strategy median = mean;
  median.name = "median";
  median.engine.aggregation = "median";
  auto m = runStrategy(*fleet, mean);
  auto d = runStrategy(*fleet, median);
  REQUIRE(m);
  REQUIRE(d);
  REQUIRE(m->finalAccuracy());
  REQUIRE(d->finalAccuracy());
  CHECK(*m->finalAccuracy() < 0.3);
  CHECK(*d->finalAccuracy() > 0.5);
  SECTION("label flipping trains on flipped labels: with every client hostile the model learns them") {
    SimSettings all = smallFleet();
    all.attack = "label-flip";
    all.attackers = 1.0;
    auto flipped = Fleet::create(all, "mlp:784-32-10");
    REQUIRE(flipped);
    auto f = runStrategy(*flipped, mean);
    REQUIRE(f);
    REQUIRE(f->finalAccuracy());
    CHECK(*f->finalAccuracy() < 0.1);  // it predicts 9 - y
  }
  SECTION("an unknown attack is refused by name") {
    SimSettings bad = smallFleet();
    bad.attack = "flip";
    auto fb = Fleet::create(bad, "mlp:784-32-10");
    REQUIRE(fb);
    auto r = runStrategy(*fb, mean);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.status().message(), Catch::Contains("unknown attack 'flip'"));
  }
}

}  // namespace starling::sim
