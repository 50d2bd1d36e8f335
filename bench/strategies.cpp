// bench/strategies: simulated fleet, bytes and virtual time to 85% per strategy, and the simulator's own cost
//
// The job (issue 6): Fashion-MNIST, MLP 784-200-200-10, 100 virtual clients
// (Dirichlet 0.5), 10 per round (13 selected), uplink 1 Mbit/s, downlink 5 Mbit/s,
// 100 ms latency, device speeds spread over 10x, 10% dropout. Each strategy adds one
// technique to the row above it; each runs until it first reaches 85% test accuracy
// (full test set) or --rounds. FedAvg fp32 is the baseline, measured in the same run.
// Then the simulator's own cost: 10,000 virtual clients, --sim10k-rounds rounds of
// 100 clients, in a child process (wall seconds and wait4()'s peak RSS).
//
// Everything runs through tests/harness (starling-sim's library): the coordinator's
// RoundEngine and the client runtime, in virtual time.
//
// The devices: training throughput log-uniform between 0.2 and 2 GFLOP/s achieved
// (forward + backward of the MLP, 1.2 MFLOP per trained example). The fastest is
// about one core of a low-end Arm phone or Raspberry Pi 3 class board (Cortex-A53 at
// 1.2 GHz: 9.6 GFLOP/s fp32 peak with NEON FMA, so about 20% of peak); the slowest a
// throttled or background-limited core, or a Cortex-M7 class microcontroller with an
// fp32 FPU (about 1 GFLOP/s peak at 480 MHz). For scale: one core of the x86 server
// these benchmarks run on trains this MLP at about 78,000 examples/s (docs/model.md),
// about 93 GFLOP/s, 46x the fastest device.

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sim.hpp"

namespace {

using namespace starling;

struct Options {
  std::string data;        // Fashion-MNIST directory ("" = the Debian package's)
  uint64_t rounds = 300;   // most rounds per strategy (all on's first round at 85% was 151-290)
  uint32_t tau = 50;       // local steps of every strategy but the last (about 2.7 epochs of a shard)
  uint32_t fullTau = 200;  // all on: longer local training, as bench/federation's "full"
  double lr = 0.05;
  uint32_t testExamples = 0;  // 0 = the full test set
  uint64_t sim10kRounds = 100;
  uint32_t sim10kTau = 1;
  // All on: each selected client of measured speed gets the steps it can do in the
  // time the median of the round's measured speeds needs for tau (0 = off).
  double budgetQuantile = 0.5;
  // All on: sticky client sampling (GlueFL): a group of this many recently selected
  // clients supplies stickyFraction of each round's selected (0 = off).
  uint32_t stickyClients = 40;
  double stickyFraction = 0.8;
  // All on: GlueFL's shared downlink mask, the fraction of a broadcast's coordinates
  // kept from the previous broadcast's (0 = off).
  double downlinkShared = 0.8;
  // All on: ternary values (sign bits + one scale per 256 values) on both links.
  bool ternary = true;
  // All on: the global model rounded to this many mantissa bits where a broadcast
  // changes it, and catch-up values as XORs of those bits (23 = off).
  uint32_t modelMantissaBits = 8;
  // All on: each replayed broadcast's indices coded against the previous broadcast's.
  bool relativeIndices = true;
  // All on: the server's learning rate (FedOpt's eta_s; 1 = plain averaging).
  double serverLr = 2.0;
  // All on: the uplink's density after the rows above (0.2% from "+tau ..." on; 0 = keep).
  double uplinkDensity = 0.006;
  // All on: sticky updates weigh by their examples alone, not by their selection weights.
  bool stickyUnweighted = true;
  bool skipStrategies = false, skipSim10k = false;
};

sim::SimSettings fleet(const Options& o) {
  sim::SimSettings s;
  s.clients = 100;
  s.partition = "dirichlet:0.5";
  s.data = o.data;
  s.testExamples = o.testExamples;
  s.deviceGflops = 2.0;
  s.speedSpread = 10.0;
  s.uplinkMbps = 1.0;
  s.downlinkMbps = 5.0;
  s.latencyMs = 100;
  s.dropout = 0.1;
  s.targetAccuracy = 0.85;
  s.stopAtTarget = true;
  return s;
}

sim::Strategy base(const Options& o, const std::string& name) {
  sim::Strategy st;
  st.name = name;
  auto& e = st.engine;
  st.task.model = "mlp:784-200-200-10";
  e.rounds = o.rounds;
  e.clientsPerRound = 10;
  e.deadlineMs = 300'000;
  e.lr = o.lr;
  e.tau = o.tau;
  e.tauMax = std::max<uint32_t>(1000, o.fullTau);
  e.uplink = e.downlink = "identity";
  e.errorFeedback = false;
  return st;
}

std::vector<sim::Strategy> strategies(const Options& o) {
  std::vector<sim::Strategy> out;
  out.push_back(base(o, "fedavg-fp32"));
  sim::Strategy s = base(o, "+uplink topk 1% + EF");
  s.engine.uplink = "topk-sampled";
  s.engine.uplinkDensity = 0.01;
  s.engine.errorFeedback = true;
  out.push_back(s);
  s.name = "+downlink topk 1% fp16";
  s.engine.downlink = "topk";
  s.engine.downlinkDensity = 0.01;
  s.engine.fp16Values = true;
  out.push_back(s);
  s.name = "+ADACOMM";
  s.engine.adaptiveTau = true;
  out.push_back(s);
  s.name = "+priority sampling";
  s.task.prioritySampling = true;
  out.push_back(s);
  s.name = fmt::format("+tau {}, 0.2%/0.4%, budgets", o.fullTau);
  s.engine.tau = o.fullTau;
  s.engine.budgetQuantile = o.budgetQuantile;
  s.engine.uplinkDensity = 0.002;
  s.engine.downlinkDensity = 0.004;
  out.push_back(s);
  if (o.stickyClients > 0) {
    s.name = fmt::format("all on: +sticky {} ({:.0f}%)", o.stickyClients, o.stickyFraction * 100);
    s.engine.stickyClients = o.stickyClients;
    s.engine.stickyFraction = o.stickyFraction;
    out.push_back(s);
  }
  if (o.downlinkShared > 0) {
    s.name = fmt::format("all on: +shared mask {:.0f}%", o.downlinkShared * 100);
    s.engine.downlinkShared = o.downlinkShared;
    out.push_back(s);
  }
  if (o.ternary) {
    s.name = "all on: +ternary values";
    s.engine.uplinkTernary = s.engine.downlinkTernary = true;
    out.push_back(s);
  }
  if (o.modelMantissaBits < 23) {
    s.name = fmt::format("all on: +{}-bit model, XORs", o.modelMantissaBits);
    s.engine.modelMantissaBits = o.modelMantissaBits;
    s.engine.catchUpXorRounds = 300;
    out.push_back(s);
  }
  if (o.relativeIndices) {
    s.name = "all on: +relative indices";
    s.engine.downlinkRelativeIndices = true;
    out.push_back(s);
  }
  if (o.serverLr != 1.0) {
    s.name = fmt::format("all on: +server lr {:g}", o.serverLr);
    s.engine.serverLr = o.serverLr;
    out.push_back(s);
  }
  if (o.uplinkDensity > 0 && o.uplinkDensity != s.engine.uplinkDensity) {
    s.name = fmt::format("all on: +uplink {:g}%", o.uplinkDensity * 100);
    s.engine.uplinkDensity = o.uplinkDensity;
    out.push_back(s);
  }
  if (o.stickyUnweighted && o.stickyClients > 0) {
    s.name = "all on: +unweighted sticky";
    s.engine.stickyReweight = false;
    out.push_back(s);
  }
  return out;
}

struct Sim10k {
  double wallS = 0;
  double rssMiB = 0;
  uint64_t rounds = 0;
  bool ok = false;
};

// 10,000 virtual clients, rounds of 100, in a child so that its peak RSS is its own.
Sim10k runSim10k(const Options& o) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const auto started = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    sim::SimSettings s = fleet(o);
    s.clients = 10'000;
    s.testExamples = 2000;
    s.stopAtTarget = false;
    sim::Strategy st = base(o, "sim10k");
    auto& e = st.engine;
    e.rounds = o.sim10kRounds;
    e.clientsPerRound = 100;
    e.tau = o.sim10kTau;
    e.uplink = "topk-sampled";
    e.uplinkDensity = 0.002;
    e.downlink = "topk";
    e.downlinkDensity = 0.004;
    e.fp16Values = true;
    e.uplinkTernary = e.downlinkTernary = o.ternary;
    e.errorFeedback = true;
    st.task.evalEvery = 10;
    uint64_t rounds = 0;
    auto fleet10k = sim::Fleet::create(s, st.task.model);
    if (fleet10k) {
      auto r = sim::runStrategy(*fleet10k, st, [&](const sim::RoundRow& row) {
        std::fprintf(stderr, "\rsim10k round %llu/%llu", static_cast<unsigned long long>(row.round),
                     static_cast<unsigned long long>(o.sim10kRounds));
      });
      if (r) rounds = r->rounds.size();
    }
    std::fprintf(stderr, "\n");
    const std::string msg = std::to_string(rounds);
    (void)!write(fds[1], msg.data(), msg.size());
    _exit(rounds > 0 ? 0 : 1);
  }
  close(fds[1]);
  char buf[32] = {};
  (void)!read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  Sim10k r;
  r.wallS = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  r.rssMiB = double(ru.ru_maxrss) / 1024.0;
  r.rounds = std::strtoull(buf, nullptr, 10);
  r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return r;
}

int usage() {
  std::fprintf(
      stderr,
      "usage: bench-strategies [--data DIR] [--rounds N] [--tau N] [--full-tau N] [--lr F] [--budget-quantile Q]\n"
      "       [--sticky-clients N (0 = off)] [--sticky-fraction F] [--downlink-shared F (0 = off)]\n"
      "       [--no-ternary] [--model-mantissa-bits N (23 = off)] [--server-lr F (1 = off)]\n"
      "       [--no-relative-indices] [--uplink-density F (0 = 0.2%%)] [--sticky-reweight]\n"
      "       [--test-examples N] [--sim10k-rounds N]\n"
      "       [--sim10k-tau N] [--skip-strategies] [--skip-sim10k]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--skip-strategies")
      o.skipStrategies = true;
    else if (a == "--no-ternary")
      o.ternary = false;
    else if (a == "--no-relative-indices")
      o.relativeIndices = false;
    else if (a == "--sticky-reweight")
      o.stickyUnweighted = false;
    else if (a == "--skip-sim10k")
      o.skipSim10k = true;
    else if (a == "--data" && (v = next()))
      o.data = v;
    else if (a == "--rounds" && (v = next()))
      o.rounds = std::strtoull(v, nullptr, 10);
    else if (a == "--tau" && (v = next()))
      o.tau = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--full-tau" && (v = next()))
      o.fullTau = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--budget-quantile" && (v = next()))
      o.budgetQuantile = std::atof(v);
    else if (a == "--sticky-clients" && (v = next()))
      o.stickyClients = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--sticky-fraction" && (v = next()))
      o.stickyFraction = std::atof(v);
    else if (a == "--downlink-shared" && (v = next()))
      o.downlinkShared = std::atof(v);
    else if (a == "--model-mantissa-bits" && (v = next()))
      o.modelMantissaBits = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--server-lr" && (v = next()))
      o.serverLr = std::atof(v);
    else if (a == "--uplink-density" && (v = next()))
      o.uplinkDensity = std::atof(v);
    else if (a == "--lr" && (v = next()))
      o.lr = std::atof(v);
    else if (a == "--test-examples" && (v = next()))
      o.testExamples = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--sim10k-rounds" && (v = next()))
      o.sim10kRounds = std::strtoull(v, nullptr, 10);
    else if (a == "--sim10k-tau" && (v = next()))
      o.sim10kTau = static_cast<uint32_t>(std::atoi(v));
    else
      return usage();
  }

  Sim10k s10k;
  if (!o.skipSim10k) s10k = runSim10k(o);

  double bytesRatio = 0, timeRatio = 0;
  if (!o.skipStrategies) {
    std::printf(
        "bench/strategies: MLP 784-200-200-10, 100 clients Dirichlet 0.5, 10/round (13 selected), up 1 Mbit/s, "
        "down 5 Mbit/s,\n100 ms latency, speeds over 10x (fastest 2 GFLOP/s), 10%% dropout; lr %g, tau %u (all on: "
        "%u, budgets at speed quantile %g, sticky group %u drawing %g of the selected%s, shared mask %g, server lr %g, "
        "uplink %g%%); each strategy stops at 85%% or %llu rounds.\n\n",
        o.lr, o.tau, o.fullTau, o.budgetQuantile, o.stickyClients, o.stickyFraction,
        o.stickyUnweighted ? " (unweighted)" : "", o.downlinkShared, o.serverLr,
        (o.uplinkDensity > 0 ? o.uplinkDensity : 0.002) * 100, static_cast<unsigned long long>(o.rounds));
    auto fl = sim::Fleet::create(fleet(o), "mlp:784-200-200-10");
    if (!fl) {
      std::fprintf(stderr, "bench-strategies: %s\n", fl.status().message().c_str());
      return 1;
    }
    std::vector<sim::StrategyResult> results;
    for (const auto& st : strategies(o)) {
      auto r = sim::runStrategy(*fl, st, [&](const sim::RoundRow& row) {
        std::fprintf(stderr, "\r%-28s round %4llu  acc %5.2f%%  %8.2f MB", st.name.c_str(),
                     static_cast<unsigned long long>(row.round), row.accuracy ? *row.accuracy * 100 : 0.0,
                     double(row.totalBytes) / 1e6);
      });
      std::fprintf(stderr, "\n");
      if (!r) {
        std::fprintf(stderr, "bench-strategies: %s: %s\n", st.name.c_str(), r.status().message().c_str());
        return 1;
      }
      std::fprintf(stderr, "  (%.0f s wall)\n", r->wallSeconds);
      results.push_back(std::move(*r));
    }
    const auto b = results.front().firstAtOrAbove(0.85);
    const auto a = results.back().firstAtOrAbove(0.85);
    if (a && b) {
      bytesRatio = double(b->totalBytes) / double(a->totalBytes);
      timeRatio = b->virtualSeconds / a->virtualSeconds;
    }
    std::printf("%s\n", sim::summaryTable(results, 0.85).c_str());
    std::printf("goals: all on >= 100x fewer bytes (%s) and >= 10x less virtual time (%s) than FedAvg fp32 to 85%%\n",
                a && b ? fmt::format("{:.1f}x", bytesRatio).c_str() : "not measured: 85% not reached",
                a && b ? fmt::format("{:.1f}x", timeRatio).c_str() : "-");
  }
  if (!o.skipSim10k)
    std::printf(
        "simulator cost: 10,000 virtual clients, %llu rounds of 100 (tau %u, all-on compression): %.1f s wall, "
        "peak RSS %.0f MiB%s\n",
        static_cast<unsigned long long>(s10k.rounds), o.sim10kTau, s10k.wallS, s10k.rssMiB, s10k.ok ? "" : " (FAILED)");
  std::printf("summary: bytes_ratio=%.1f time_ratio=%.1f sim10k_wall_s=%.1f sim10k_rss_mib=%.0f\n", bytesRatio,
              timeRatio, s10k.wallS, s10k.rssMiB);
  return 0;
}
