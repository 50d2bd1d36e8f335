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
// Then Overlap Local-SGD (issue 21, --overlap-only runs only this): 16 clients, all of
// them in every round (overlap needs a client's next round to follow its last), IID,
// speeds over 2x, no dropout, the same links; FedAvg fp32 both ways (dense, so the
// uplink carries the whole gap; a light compression would change bytes, not time) with
// and without train.overlap. tau 220 makes the slowest client's compute (7.6 s) about a
// round's links (dense model up at 1 Mbit/s and down at 5: 7.9 s), where hiding one
// behind the other can halve a round. alpha 0.3 with anchor momentum 0.7: the pull-back
// costs a fraction alpha of each round's progress and momentum wins it back (alpha 0.2
// without momentum, the reference default, needs about 40% more rounds than FedAvg;
// docs/simulation.md has the measurements). Median time and bytes to 85% over 3 fleet
// seeds.
//
// Then tiers (issue 21, --tiers-only runs only this): 10,000 clients flat against the same
// clients under 100 relays (starling-relay's parts in the simulator), with the
// coordinator's link limited and without a limit; the figure is the virtual time per
// committed global round, tiered / flat (runTiers() below has the setting).
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

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "starling/data/load.hpp"

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
  // The heterogeneous fleet's all-on compression rows: their downlink density.
  double allOnDownlinkDensity = 0.004;
  // All on: sticky updates weigh by their examples alone, not by their selection weights.
  bool stickyUnweighted = true;
  bool skipStrategies = false, skipSim10k = false, skipHetero = false;
  // The heterogeneous fleet (issue 20): seeds, the shard partition's target, the
  // asynchronous strategies' concurrency and server lr, their most server steps.
  uint32_t heteroSeeds = 3;
  std::vector<std::string> heteroOnly;  // --hetero-only: strategies whose name contains one of these
  double shardTarget = 0.70;
  uint32_t concurrency = 20;
  double asyncServerLr = 0.5;
  uint64_t asyncRounds = 600;
  // Overlap Local-SGD: the fleet's size (all in every round), tau, alpha, partition.
  bool skipOverlap = false;
  uint32_t overlapClients = 16;
  uint32_t overlapTau = 220;
  double overlapAlpha = 0.3;
  double overlapBeta = 0.7;
  uint32_t overlapSeeds = 3;
  double overlapServerLr = 1;  // the overlap strategy's server lr (FedAvg's is 1)
  std::string overlapPartition = "iid";
  // Tiers: 10,000 clients flat or under relays, with the coordinator's link a bottleneck.
  bool skipTiers = false;
  uint32_t tiersRelays = 100;
  uint32_t tiersPerRound = 500;  // client updates per global round, both layouts
  uint32_t tiersLocalRounds = 1;
  // Relays' updates that close a global round (0 = relays / 1.3: the coordinator
  // over-selects relays as the flat coordinator over-selects clients).
  uint32_t tiersCoordinatorK = 0;
  bool tiersDense = false;          // FedAvg fp32 both ways instead of sim10k's compression
  double tiersClientLatencyMs = 0;  // relay <-> client latency (0 = the clients' 100 ms)
  uint64_t tiersRounds = 30;
  uint32_t tiersTau = 10;
  double tiersCoordinatorMbps = 100;
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

// The heterogeneous fleet: speeds log-normal with sigma ln(10) / (2 x 1.645) = 0.70 (the
// 95th percentile 10x the 5th), links 1 Mbit/s up and 5 down spread over 4x per client,
// 10% dropout with clients back after 30 s, 100 clients, K = 10 updates per server step.
sim::SimSettings heteroFleet(const Options& o, const std::string& partition, uint64_t seed, double target) {
  sim::SimSettings s = fleet(o);
  s.partition = partition;
  s.seed = seed;
  s.speedDistribution = "lognormal";
  s.speedSigma = std::log(10.0) / (2 * 1.6449);
  s.linkSpread = 4;
  s.rejoinMs = 30'000;
  s.targetAccuracy = target;
  s.testExamples = o.testExamples > 0 ? o.testExamples : 2000;
  return s;
}

// The compression every strategy but FedAvg uses: top-k 1% both ways, fp16 values,
// error feedback on both ends.
void compress(sim::Strategy& s) {
  s.engine.uplink = "topk-sampled";
  s.engine.uplinkDensity = 0.01;
  s.engine.downlink = "topk";
  s.engine.downlinkDensity = 0.01;
  s.engine.fp16Values = true;
  s.engine.errorFeedback = true;
}

// All on's compression (the strategies table's last rows), without its scheduling: top-k
// 0.6% up and 0.4% down with ternary values, GlueFL's shared mask, the 8-bit model
// with XOR catch-ups, relative indices.
void compressAllOn(const Options& o, sim::Strategy& s) {
  compress(s);
  s.engine.uplinkDensity = o.uplinkDensity > 0 ? o.uplinkDensity : 0.002;
  s.engine.downlinkDensity = o.allOnDownlinkDensity;
  s.engine.uplinkTernary = s.engine.downlinkTernary = o.ternary;
  s.engine.downlinkShared = o.downlinkShared;
  s.engine.modelMantissaBits = o.modelMantissaBits;
  s.engine.catchUpXorRounds = o.modelMantissaBits < 23 ? 300 : 0;
  s.engine.downlinkRelativeIndices = o.relativeIndices;
}

std::vector<sim::Strategy> heteroStrategies(const Options& o) {
  std::vector<sim::Strategy> out;
  out.push_back(base(o, "sync fedavg fp32"));
  sim::Strategy s = base(o, "sync top-k 1% + EF");
  compress(s);
  out.push_back(s);
  auto async = [&](const std::string& name, const std::string& mode) {
    sim::Strategy a = base(o, name);
    compress(a);
    a.engine.mode = mode;
    a.engine.rounds = o.asyncRounds;
    a.engine.concurrency = o.concurrency;
    a.engine.serverLr = o.asyncServerLr;
    a.engine.maxStaleness = 2 * o.concurrency / a.engine.clientsPerRound + 2;
    return a;
  };
  out.push_back(async(fmt::format("async C={} + top-k", o.concurrency), "async"));
  for (uint32_t bound : {1u, 2u, 4u, 8u}) {
    sim::Strategy a = async(fmt::format("ssp {} C={} + top-k", bound, o.concurrency), "ssp");
    a.engine.stalenessBound = bound;
    out.push_back(a);
  }
  sim::Strategy d = async(fmt::format("dssp 1..8 C={} + top-k", o.concurrency), "dssp");
  d.engine.stalenessBound = 1;
  d.engine.stalenessMax = 8;
  out.push_back(d);
  // Sync with the same compression, the slow clients' work cut two ways: fewer steps
  // (step budgets at the median speed) or smaller minibatches (dynamic batch sizes,
  // scaled to the mean speed, or to the median's like the budgets: the summary's
  // dbs_vs_budgets_time compares those two, like for like).
  sim::Strategy budgets = base(o, "sync top-k + step budgets");
  compress(budgets);
  budgets.engine.budgetQuantile = o.budgetQuantile;
  out.push_back(budgets);
  sim::Strategy dbs = base(o, "sync top-k + DBS");
  compress(dbs);
  dbs.engine.dynamicBatch = true;
  out.push_back(dbs);
  sim::Strategy dbsQ = base(o, "sync top-k + DBS at the median");
  compress(dbsQ);
  dbsQ.engine.dynamicBatch = true;
  dbsQ.engine.budgetQuantile = o.budgetQuantile;
  out.push_back(dbsQ);
  // Both modes with all on's compression.
  sim::Strategy lean = base(o, "sync all-on compression");
  compressAllOn(o, lean);
  out.push_back(lean);
  sim::Strategy leanAsync = async(fmt::format("async C={} + all-on compression", o.concurrency), "async");
  compressAllOn(o, leanAsync);
  out.push_back(leanAsync);
  return out;
}

// The strategies --hetero-only keeps: those whose name contains one of its items (all
// when empty).
std::vector<sim::Strategy> heteroSelected(const Options& o) {
  std::vector<sim::Strategy> out;
  for (auto& st : heteroStrategies(o)) {
    bool keep = o.heteroOnly.empty();
    for (const std::string& part : o.heteroOnly)
      keep = keep || st.name.find(part) != std::string::npos;
    if (keep) out.push_back(std::move(st));
  }
  return out;
}

struct HeteroRow {
  std::string name;
  std::vector<double> seconds, bytes;  // to the target, per seed (NaN: not reached)
  double finalAcc = 0;
};

double median(std::vector<double> v) {
  for (double& x : v)  // NaN (not reached) counts as infinitely slow
    if (std::isnan(x)) x = std::numeric_limits<double>::infinity();
  std::sort(v.begin(), v.end());
  return v.empty() ? std::numeric_limits<double>::infinity() : v[v.size() / 2];
}

// Runs every strategy on both partitions over the seeds; returns the IID rows (the
// summary's ratios are on them) after printing both tables.
std::vector<HeteroRow> runHetero(const Options& o) {
  std::vector<HeteroRow> iidRows;
  for (const auto& [partition, target] : {std::pair<std::string, double>{"iid", 0.85}, {"classes:2", o.shardTarget}}) {
    std::vector<HeteroRow> rows;
    for (const auto& st : heteroSelected(o))
      rows.push_back({st.name, {}, {}, 0});
    for (uint32_t seed = 1; seed <= o.heteroSeeds; ++seed) {
      auto fl = sim::Fleet::create(heteroFleet(o, partition, seed, target), "mlp:784-200-200-10");
      if (!fl) {
        std::fprintf(stderr, "bench-strategies: %s\n", fl.status().message().c_str());
        std::exit(1);
      }
      std::size_t i = 0;
      for (auto st : heteroSelected(o)) {
        st.engine.seed = seed;
        auto r = sim::runStrategy(*fl, st, [&](const sim::RoundRow& row) {
          std::fprintf(stderr, "\rhetero %-9s seed %u %-24s step %4llu  acc %5.2f%%  %7.1f virtual min",
                       partition.c_str(), seed, st.name.c_str(), static_cast<unsigned long long>(row.round),
                       row.accuracy ? *row.accuracy * 100 : 0.0, row.virtualSeconds / 60);
        });
        std::fprintf(stderr, "\n");
        if (!r) {
          std::fprintf(stderr, "bench-strategies: %s: %s\n", st.name.c_str(), r.status().message().c_str());
          std::exit(1);
        }
        const auto at = r->firstAtOrAbove(target);
        rows[i].seconds.push_back(at ? at->virtualSeconds : std::nan(""));
        rows[i].bytes.push_back(at ? double(at->totalBytes) : std::nan(""));
        rows[i].finalAcc += r->finalAccuracy().value_or(0) / o.heteroSeeds;
        ++i;
      }
    }
    std::printf("heterogeneous fleet, %s, target %.0f%%: median over %u seeds (fleet seeds 1..%u)\n", partition.c_str(),
                target * 100, o.heteroSeeds, o.heteroSeeds);
    std::printf("%-26s %12s %12s %10s %10s %10s\n", "strategy", "time (min)", "bytes (MB)", "time x", "bytes x",
                "final acc");
    const double t0 = median(rows.front().seconds), b0 = median(rows.front().bytes);
    for (const HeteroRow& r : rows) {
      const double t = median(r.seconds), b = median(r.bytes);
      std::printf("%-26s %12s %12s %10s %10s %9.2f%%\n", r.name.c_str(),
                  std::isinf(t) ? "not reached" : fmt::format("{:.1f}", t / 60).c_str(),
                  std::isinf(b) ? "-" : fmt::format("{:.1f}", b / 1e6).c_str(),
                  std::isinf(t) ? "-" : fmt::format("{:.2f}", t0 / t).c_str(),
                  std::isinf(b) ? "-" : fmt::format("{:.1f}", b0 / b).c_str(), r.finalAcc * 100);
    }
    std::printf("\n");
    if (partition == "iid") iidRows = rows;
  }
  return iidRows;
}

// Overlap Local-SGD against the same fleet and strategy without it (see the top), over
// fleet seeds 1..overlapSeeds: medians of the time and bytes to 85%.
struct OverlapResult {
  double ratio = 0;       // median time to 85% without / with overlap (0: not measured)
  double bytesRatio = 0;  // median bytes (both ways) to 85%, with / without
  double perRoundBytesRatio = 0;
};

OverlapResult runOverlap(const Options& o) {
  sim::Strategy plain = base(o, "fedavg fp32");
  plain.engine.clientsPerRound = o.overlapClients;
  plain.engine.overSelection = 1.0;
  plain.engine.tau = o.overlapTau;
  sim::Strategy over = plain;
  over.name = fmt::format("+ overlap {:g}", o.overlapAlpha);
  over.task.overlap = static_cast<float>(o.overlapAlpha);
  over.task.overlapMomentum = static_cast<float>(o.overlapBeta);
  over.engine.serverLr = o.overlapServerLr;
  if (o.overlapBeta > 0) over.name += fmt::format(" beta {:g}", o.overlapBeta);
  if (o.overlapServerLr != 1) over.name += fmt::format(" server lr {:g}", o.overlapServerLr);
  std::printf(
      "overlap: %u clients (%s), all in every round, speeds over 2x (fastest 2 GFLOP/s), up 1 Mbit/s, down 5 Mbit/s, "
      "100 ms latency, no dropout; MLP 784-200-200-10, FedAvg fp32 both ways, lr %g, tau %u; to 85%%, fleet seeds "
      "1..%u\n",
      o.overlapClients, o.overlapPartition.c_str(), o.lr, o.overlapTau, o.overlapSeeds);
  std::printf("%-28s %5s %11s %7s %9s %10s %10s %11s %10s\n", "strategy", "seed", "time (min)", "rounds", "s/round",
              "up (MB)", "down (MB)", "MB/round>1", "final acc");
  std::vector<double> seconds[2], bytes[2], perRound[2];
  for (uint32_t seed = 1; seed <= o.overlapSeeds; ++seed) {
    sim::SimSettings s = fleet(o);
    s.clients = o.overlapClients;
    s.partition = o.overlapPartition;
    s.speedSpread = 2.0;
    s.dropout = 0;
    s.seed = seed;
    auto fl = sim::Fleet::create(s, "mlp:784-200-200-10");
    if (!fl) {
      std::fprintf(stderr, "bench-strategies: %s\n", fl.status().message().c_str());
      std::exit(1);
    }
    int k = 0;
    for (sim::Strategy st : {plain, over}) {
      st.engine.seed = seed;
      auto r = sim::runStrategy(*fl, st, [&](const sim::RoundRow& row) {
        std::fprintf(stderr, "\r%-28s seed %u round %4llu  acc %5.2f%%  %7.1f virtual min", st.name.c_str(), seed,
                     static_cast<unsigned long long>(row.round), row.accuracy ? *row.accuracy * 100 : 0.0,
                     row.virtualSeconds / 60);
      });
      std::fprintf(stderr, "\n");
      if (!r) {
        std::fprintf(stderr, "bench-strategies: %s: %s\n", st.name.c_str(), r.status().message().c_str());
        std::exit(1);
      }
      const auto target = r->firstAtOrAbove(0.85);
      // Round 1 differs (clients start from the round-0 model, nothing to catch up): bytes
      // per round are those of the later rounds.
      uint64_t up = 0, down = 0, first = 0;
      for (const sim::RoundRow& row : r->rounds) {
        if (target && row.round > target->round) break;
        up += row.bytesUp;
        down += row.bytesDown;
        if (row.round == 1) first = row.bytesUp + row.bytesDown;
      }
      const sim::RoundRow& last = target ? *target : r->rounds.back();
      const double rounds = static_cast<double>(last.round);
      std::printf("%-28s %5u %11s %7.0f %9.2f %10.1f %10.1f %11.2f %9.2f%%\n", st.name.c_str(), seed,
                  target ? fmt::format("{:.2f}", last.virtualSeconds / 60).c_str() : "not reached", rounds,
                  last.virtualSeconds / rounds, double(up) / 1e6, double(down) / 1e6,
                  double(up + down - first) / 1e6 / std::max(1.0, rounds - 1), r->finalAccuracy().value_or(0) * 100);
      seconds[k].push_back(target ? last.virtualSeconds : std::nan(""));
      bytes[k].push_back(target ? double(up + down) : std::nan(""));
      perRound[k].push_back(double(up + down - first) / std::max(1.0, rounds - 1));
      ++k;
    }
  }
  OverlapResult out;
  const double t0 = median(seconds[0]), t1 = median(seconds[1]);
  if (!std::isinf(t0) && !std::isinf(t1)) {
    out.ratio = t0 / t1;
    out.bytesRatio = median(bytes[1]) / median(bytes[0]);
  }
  out.perRoundBytesRatio = median(perRound[1]) / median(perRound[0]);
  std::printf(
      "median time to 85%%: %.2f min without, %.2f with overlap (%s); bytes per round after the first with / without "
      "%.3f, bytes to "
      "85%% with / without %s\n",
      t0 / 60, t1 / 60, out.ratio > 0 ? fmt::format("{:.2f}x", out.ratio).c_str() : "not measured: 85% not reached",
      out.perRoundBytesRatio, out.ratio > 0 ? fmt::format("{:.2f}", out.bytesRatio).c_str() : "-");
  std::printf("goal: overlap >= 1.3x faster to 85%% than without, bytes unchanged\n\n");
  return out;
}

// Tiers (issue 21): 10,000 clients of the base fleet (Dirichlet 0.5, 1/5 Mbit/s, 100 ms,
// speeds over 10x, 10% dropout), sim10k's compression (top-k 0.2% up, 0.4% down, fp16,
// ternary, error feedback), --tiers-per-round client updates per global round (x 1.3
// assigned). Flat: every client talks to the coordinator. Tiered: --tiers-relays relays,
// client i under relay i mod R, each relay's local round K = per-round / R (x 1.3),
// --tiers-local-rounds per global round; the coordinator over-selects relays as the flat
// one over-selects clients (K = R / 1.3, all R assigned; --tiers-coordinator-k); a
// relay's link to the coordinator 100 Mbit/s each way with 20 ms latency, its own link
// (towards its clients) as wide as the coordinator's. Both layouts with the coordinator's
// link at --tiers-coordinator-mbps each way, a tenth of it, and without any limit. The
// figure: virtual time per committed global round, tiered / flat, at the first (goal <= 1).
struct TierRow {
  std::string name;
  double secondsPerRound = 0;
  uint64_t rounds = 0;
  double coordBytesPerRound = 0, edgeBytesPerRound = 0;
  double finalAccuracy = 0;
};

double runTiers(const Options& o) {
  sim::SimSettings s = fleet(o);
  s.clients = 10'000;
  s.testExamples = 2000;
  s.stopAtTarget = false;
  // A layout whose rounds all miss the 300 s deadline (dense updates through a narrow
  // coordinator link) stops here instead of running for 1,000 virtual hours.
  s.maxVirtualHours = 3;
  auto fl = sim::Fleet::create(s, "mlp:784-200-200-10");
  if (!fl) {
    std::fprintf(stderr, "bench-strategies: %s\n", fl.status().message().c_str());
    std::exit(1);
  }
  sim::Strategy flat = base(o, "flat");
  auto& e = flat.engine;
  e.rounds = o.tiersRounds;
  e.clientsPerRound = o.tiersPerRound;
  e.tau = o.tiersTau;
  e.uplink = "topk-sampled";
  e.uplinkDensity = 0.002;
  e.downlink = "topk";
  e.downlinkDensity = 0.004;
  e.fp16Values = true;
  e.uplinkTernary = e.downlinkTernary = true;
  e.errorFeedback = true;
  if (o.tiersDense) {
    e.uplink = e.downlink = "identity";
    e.fp16Values = e.uplinkTernary = e.downlinkTernary = e.errorFeedback = false;
  }
  sim::Strategy tiered = flat;
  tiered.name = fmt::format("{} relays", o.tiersRelays);
  tiered.engine.clientsPerRound =
      o.tiersCoordinatorK > 0
          ? std::min(o.tiersCoordinatorK, o.tiersRelays)
          : std::max<uint32_t>(1, static_cast<uint32_t>(std::lround(o.tiersRelays / flat.engine.overSelection)));
  tiered.engine.overSelection = double(o.tiersRelays) / tiered.engine.clientsPerRound;
  sim::TierSettings t;
  t.relays = o.tiersRelays;
  t.clientsPerRound = std::max<uint32_t>(1, o.tiersPerRound / o.tiersRelays);
  t.localRounds = o.tiersLocalRounds;
  t.clientLatencyMs = o.tiersClientLatencyMs;
  tiered.tiers = t;

  std::printf(
      "\ntiers: 10,000 clients (Dirichlet 0.5, up 1 / down 5 Mbit/s, 100 ms, speeds over 10x, 10%% dropout), MLP "
      "784-200-200-10, %s, tau %u, %u client updates per global round (x 1.3 "
      "assigned), %llu global rounds; tiered: %u relays (%u close a round), %u local round(s) each, relay <-> "
      "coordinator 100 Mbit/s 20 ms, relay <-> client latency %s\n",
      o.tiersDense ? "FedAvg fp32 both ways" : "top-k 0.2%/0.4% fp16 ternary + EF", o.tiersTau, o.tiersPerRound,
      static_cast<unsigned long long>(o.tiersRounds), o.tiersRelays, tiered.engine.clientsPerRound, o.tiersLocalRounds,
      o.tiersClientLatencyMs > 0 ? fmt::format("{:g} ms", o.tiersClientLatencyMs).c_str() : "the clients' own");
  std::printf("%-34s %9s %7s %12s %14s %14s %10s\n", "layout", "s/round", "rounds", "coord conns", "coord MB/round",
              "edge MB/round", "final acc");
  std::vector<TierRow> rows;
  for (double mbps : {o.tiersCoordinatorMbps, o.tiersCoordinatorMbps / 10, 0.0}) {
    for (const sim::Strategy& st : {flat, tiered}) {
      sim::Strategy run = st;
      const std::string link = mbps > 0 ? fmt::format("coordinator {:g} Mbit/s", mbps) : "unlimited";
      run.name = fmt::format("{}, {}", st.name, link);
      sim::TierSettings layout = st.tiers.value_or(sim::TierSettings{});
      layout.coordinatorMbps = mbps;
      if (layout.relays > 0) layout.linkMbps = mbps;  // each relay's link as wide as the coordinator's
      run.tiers = layout;
      auto r = sim::runStrategy(*fl, run, [&](const sim::RoundRow& row) {
        std::fprintf(stderr, "\r%-40s round %4llu  %8.1f virtual s", run.name.c_str(),
                     static_cast<unsigned long long>(row.round), row.virtualSeconds);
      });
      std::fprintf(stderr, "\n");
      if (!r) {
        std::fprintf(stderr, "bench-strategies: %s: %s\n", run.name.c_str(), r.status().message().c_str());
        std::exit(1);
      }
      TierRow row;
      row.name = run.name;
      uint64_t coord = 0, edge = 0;
      for (const sim::RoundRow& x : r->rounds) {
        row.rounds += x.committed ? 1 : 0;
        coord += x.bytesUp + x.bytesDown;
        edge += x.edgeBytesUp + x.edgeBytesDown;
      }
      const double n = double(std::max<uint64_t>(row.rounds, 1));
      // No committed round: infinitely long rounds.
      row.secondsPerRound =
          row.rounds == 0 ? std::numeric_limits<double>::infinity() : r->rounds.back().virtualSeconds / n;
      row.coordBytesPerRound = double(coord) / n;
      row.edgeBytesPerRound = double(edge) / n;
      row.finalAccuracy = r->finalAccuracy().value_or(0);
      if (!r->stopped.empty()) std::printf("  (%s stopped: %s)\n", run.name.c_str(), r->stopped.c_str());
      std::printf("%-34s %9.2f %7llu %12u %14.2f %14.2f %9.2f%%\n", row.name.c_str(), row.secondsPerRound,
                  static_cast<unsigned long long>(row.rounds), run.tiers->relays > 0 ? run.tiers->relays : s.clients,
                  row.coordBytesPerRound / 1e6, row.edgeBytesPerRound / 1e6, row.finalAccuracy * 100);
      rows.push_back(row);
    }
  }
  const double ratio = rows[1].secondsPerRound / rows[0].secondsPerRound;
  std::printf(
      "time per global round, tiered / flat: %.2f with the coordinator's link at %g Mbit/s, %.2f at %g Mbit/s, %.2f "
      "without a limit (goal: <= 1 at 10,000 clients under %u relays)\n",
      ratio, o.tiersCoordinatorMbps, rows[3].secondsPerRound / rows[2].secondsPerRound, o.tiersCoordinatorMbps / 10,
      rows[5].secondsPerRound / rows[4].secondsPerRound, o.tiersRelays);
  return ratio;
}

int usage() {
  std::fprintf(
      stderr,
      "usage: bench-strategies [--data DIR] [--rounds N] [--tau N] [--full-tau N] [--lr F] [--budget-quantile Q]\n"
      "       [--sticky-clients N (0 = off)] [--sticky-fraction F] [--downlink-shared F (0 = off)]\n"
      "       [--no-ternary] [--model-mantissa-bits N (23 = off)] [--server-lr F (1 = off)]\n"
      "       [--no-relative-indices] [--uplink-density F (0 = 0.2%%)] [--sticky-reweight]\n"
      "       [--test-examples N] [--sim10k-rounds N]\n"
      "       [--sim10k-tau N] [--skip-strategies] [--skip-sim10k] [--skip-hetero]\n"
      "       [--hetero-seeds N] [--hetero-only NAME,...] [--shard-target F] [--concurrency C] [--async-server-lr F] "
      "[--async-rounds N]\n"
      "       [--all-on-downlink-density F]\n"
      "       [--overlap-only] [--skip-overlap] [--overlap-clients N] [--overlap-tau N] [--overlap-alpha F]\n"
      "       [--overlap-partition P] [--overlap-momentum F] [--overlap-server-lr F]\n"
      "       [--overlap-seeds N]\n"
      "       [--tiers-only] [--skip-tiers] [--tiers-relays R] [--tiers-per-round N] [--tiers-local-rounds L]\n"
      "       [--tiers-rounds N] [--tiers-tau N] [--tiers-coordinator-mbps F] [--tiers-coordinator-k K]\n"
      "       [--tiers-dense] [--tiers-client-latency-ms F]\n");
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
    else if (a == "--overlap-only")
      o.skipStrategies = o.skipSim10k = o.skipHetero = o.skipTiers = true;
    else if (a == "--tiers-only")
      o.skipStrategies = o.skipSim10k = o.skipHetero = o.skipOverlap = true;
    else if (a == "--skip-tiers")
      o.skipTiers = true;
    else if (a == "--tiers-relays" && (v = next()))
      o.tiersRelays = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--tiers-per-round" && (v = next()))
      o.tiersPerRound = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--tiers-local-rounds" && (v = next()))
      o.tiersLocalRounds = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--tiers-coordinator-k" && (v = next()))
      o.tiersCoordinatorK = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--tiers-client-latency-ms" && (v = next()))
      o.tiersClientLatencyMs = std::atof(v);
    else if (a == "--tiers-dense")
      o.tiersDense = true;
    else if (a == "--tiers-rounds" && (v = next()))
      o.tiersRounds = std::strtoull(v, nullptr, 10);
    else if (a == "--tiers-tau" && (v = next()))
      o.tiersTau = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--tiers-coordinator-mbps" && (v = next()))
      o.tiersCoordinatorMbps = std::atof(v);
    else if (a == "--skip-overlap")
      o.skipOverlap = true;
    else if (a == "--overlap-clients" && (v = next()))
      o.overlapClients = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--overlap-tau" && (v = next()))
      o.overlapTau = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--overlap-alpha" && (v = next()))
      o.overlapAlpha = std::atof(v);
    else if (a == "--overlap-seeds" && (v = next()))
      o.overlapSeeds = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--overlap-momentum" && (v = next()))
      o.overlapBeta = std::atof(v);
    else if (a == "--overlap-server-lr" && (v = next()))
      o.overlapServerLr = std::atof(v);
    else if (a == "--overlap-partition" && (v = next()))
      o.overlapPartition = v;
    else if (a == "--no-ternary")
      o.ternary = false;
    else if (a == "--no-relative-indices")
      o.relativeIndices = false;
    else if (a == "--sticky-reweight")
      o.stickyUnweighted = false;
    else if (a == "--skip-sim10k")
      o.skipSim10k = true;
    else if (a == "--skip-hetero")
      o.skipHetero = true;
    else if (a == "--hetero-only" && (v = next()))
      o.heteroOnly = starling::data::splitList(v);
    else if (a == "--hetero-seeds" && (v = next()))
      o.heteroSeeds = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--shard-target" && (v = next()))
      o.shardTarget = std::atof(v);
    else if (a == "--concurrency" && (v = next()))
      o.concurrency = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--async-server-lr" && (v = next()))
      o.asyncServerLr = std::atof(v);
    else if (a == "--all-on-downlink-density" && (v = next()))
      o.allOnDownlinkDensity = std::atof(v);
    else if (a == "--async-rounds" && (v = next()))
      o.asyncRounds = std::strtoull(v, nullptr, 10);
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
  // The heterogeneous fleet: ratios of median virtual time (and bytes) to 85% IID.
  std::string hetero =
      "async_vs_fedavg_time=- async_vs_sync_time=- async_bytes_ratio=- dssp_vs_best_ssp_time=- dbs_vs_budgets_time=-";
  if (!o.skipHetero) {
    const std::vector<HeteroRow> rows = runHetero(o);
    // By name prefix: the median time (or bytes) of the first row whose name starts with
    // it; infinity when --hetero-only left it out or it never reached the target.
    auto find = [&](const std::string& prefix, bool bytes = false) {
      for (const HeteroRow& r : rows)
        if (r.name.starts_with(prefix)) return median(bytes ? r.bytes : r.seconds);
      return std::numeric_limits<double>::infinity();
    };
    auto ratio = [](double a, double b) {
      return std::isinf(a) || std::isinf(b) ? std::string("-") : fmt::format("{:.2f}", a / b);
    };
    const std::string asyncTopK = fmt::format("async C={} + top-k", o.concurrency);
    double bestSsp = std::numeric_limits<double>::infinity();
    for (const HeteroRow& r : rows)
      if (r.name.starts_with("ssp ")) bestSsp = std::min(bestSsp, median(r.seconds));
    hetero = fmt::format(
        "async_vs_fedavg_time={} async_vs_sync_time={} async_bytes_ratio={} dssp_vs_best_ssp_time={} "
        "dbs_vs_budgets_time={}",
        ratio(find("sync fedavg"), find(asyncTopK)), ratio(find("sync top-k 1%"), find(asyncTopK)),
        ratio(find("sync fedavg", true), find(asyncTopK, true)), ratio(bestSsp, find("dssp")),
        ratio(find("sync top-k + step budgets"), find("sync top-k + DBS at the median")));
    // The same three with all on's compression (not in the summary: its rows are the
    // bytes end of the trade-off).
    const std::string asyncAllOn = fmt::format("async C={} + all-on compression", o.concurrency);
    std::printf("all on's compression: async_vs_fedavg_time=%s async_vs_sync_time=%s async_bytes_ratio=%s\n",
                ratio(find("sync fedavg"), find(asyncAllOn)).c_str(),
                ratio(find("sync all-on compression"), find(asyncAllOn)).c_str(),
                ratio(find("sync fedavg", true), find(asyncAllOn, true)).c_str());
    std::printf(
        "goals (IID): async >= 3x less time than sync FedAvg fp32 and >= 2x less than sync with the same compression, "
        "at >= 50x fewer bytes than FedAvg; dssp at least as fast as the best ssp bound (>= 1.0); dynamic batch "
        "sizes faster than step budgets (> 1.0)\n");
  }
  OverlapResult overlap;
  if (!o.skipOverlap) overlap = runOverlap(o);
  const double tiers = o.skipTiers ? 0 : runTiers(o);
  std::printf(
      "summary: bytes_ratio=%.1f time_ratio=%.1f sim10k_wall_s=%.1f sim10k_rss_mib=%.0f %s overlap_time_ratio=%s "
      "sim10k_tier_vs_flat_time=%s\n",
      bytesRatio, timeRatio, s10k.wallS, s10k.rssMiB, hetero.c_str(),
      overlap.ratio > 0 ? fmt::format("{:.2f}", overlap.ratio).c_str() : "-",
      tiers > 0 ? fmt::format("{:.2f}", tiers).c_str() : "-");
  return 0;
}
