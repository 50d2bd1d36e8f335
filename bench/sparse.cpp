// bench/sparse: sparse pull and push and placement by graph partition (issue 22), on spam and power-law data
//
// Per data set (the SpamAssassin corpus hashed to 2^20 features when --spam-dir names
// it, and always a power-law set from data::powerLawSparse, seeded), one simulated
// federation (starling-sim's parts: the RoundEngine, the Learner, the codecs, the frames)
// runs four strategies side by side on the same fleet and seeds:
//   dense        every client trains the whole model (train.sparse-rows off), fp32;
//   sparse       clients offer their rows (sim.row-bucket) and train the compact model;
//   dense-topk   as dense with top-k both ways and error feedback;
//   sparse-topk  as sparse with the same top-k.
// Bytes per round are the frames the coordinator sent and received (RoundAssign and
// Update), averaged over the rounds; accuracy is on the held-out test set after the last
// round. Then, from the clients' row sets (the covered rows they offered): clients among
// R relays by METIS against a seeded random placement (the relay <-> coordinator traffic
// per round in rows: the sum over relays of the union of their clients' rows; and
// measured: the sparse strategy run through R sparse relays in the simulator, the
// summary's metis_vs_random_traffic is its coordinator bytes' ratio), and rows
// among S coordinator shards (load = clients touching a row; METIS with a 10% bound,
// LPT beside it).
//
//   bench-sparse [--spam-dir DIR] [--clients N] [--per-round K] [--rounds R] [--tau T]
//                [--lr LR] [--density D] [--bucket B] [--relays R] [--shards S]
//                [--partition P] [--powerlaw-examples N] [--powerlaw-features D] [--seed S]
//
// Last line (spam's figures when --spam-dir is given, else the power-law set's):
// summary: sparse_vs_dense_bytes=... sparse_topk_vs_dense_bytes=... metis_vs_random_traffic=...
// shard_imbalance=... acc_delta=... partition_s=...

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "starling/client/sparse_rows.hpp"
#include "starling/data/synthetic.hpp"

#include "placement.hpp"
#include "sim.hpp"

namespace {

using namespace starling;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench-sparse: %s\n", what.c_str());
  std::exit(2);
}

struct Options {
  std::string spamDir;
  uint32_t clients = 100;
  uint32_t perRound = 10;
  uint64_t rounds = 20;
  uint32_t tau = 20;
  double lr = 8;  // the rows are L2-normalized (as bench/tasks.py's spam runs)
  double density = 0.25;
  uint32_t bucket = 1;
  uint32_t relays = 8;
  uint32_t shards = 8;
  std::string partition = "iid";
  std::size_t powerLawExamples = 20000;
  uint32_t powerLawFeatures = 1u << 20;
  uint64_t seed = 1;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--spam-dir")
      o.spamDir = next();
    else if (a == "--clients")
      o.clients = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--per-round")
      o.perRound = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--rounds")
      o.rounds = std::stoull(next());
    else if (a == "--tau")
      o.tau = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--lr")
      o.lr = std::stod(next());
    else if (a == "--density")
      o.density = std::stod(next());
    else if (a == "--bucket")
      o.bucket = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--relays")
      o.relays = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--shards")
      o.shards = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--partition")
      o.partition = next();
    else if (a == "--powerlaw-examples")
      o.powerLawExamples = std::stoull(next());
    else if (a == "--powerlaw-features")
      o.powerLawFeatures = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--seed")
      o.seed = std::stoull(next());
    else
      die("unknown option " + a);
  }
  return o;
}

// A data set as LIBSVM text (1-based indices; the last line ends with an explicit zero
// at the last feature, so that the file has the data set's width).
void writeLibsvm(const data::Dataset& d, const std::vector<uint32_t>& rows, const std::string& path) {
  std::ofstream out(path);
  data::SparseBatch b;
  d.gatherSparse(rows, b);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    out << (d.label(rows[r]) == 1 ? "+1" : "-1");
    for (std::size_t e = b.offsets[r]; e < b.offsets[r + 1]; ++e)
      out << ' ' << b.indices[e] + 1 << ':' << b.values[e];
    if (r + 1 == rows.size()) out << ' ' << d.featureDim() << ":0";
    out << '\n';
  }
  if (!out) die("writing " + path);
}

struct StrategyFigures {
  std::string name;
  double bytesPerRound = 0;  // both ways
  double upPerRound = 0, downPerRound = 0;
  double accuracy = 0;
};

struct DataFigures {
  std::string name;
  std::string partition;
  std::size_t features = 0, clients = 0;
  double meanRows = 0;        // covered rows per client
  uint64_t distinctRows = 0;  // touched by some client: the traffic if one relay held every client
  std::vector<StrategyFigures> strategies;
  coordinator::RelayPlacement metis, random;
  // Measured in the simulator: the sparse strategy through R sparse relays
  // (sim.relay-sparse-rows), clients placed at random and by METIS; the coordinator's
  // bytes per round both ways and the final accuracy.
  StrategyFigures relaysRandom, relaysMetis;
  coordinator::ShardPlacement shardsMetis, shardsLpt;
  double sparseVsDense = 0, topkVsDense = 0, accDelta = 0;
};

// One strategy on the fleet, with progress on stderr: its bytes per round and accuracy.
StrategyFigures runMeasured(const sim::Fleet& fleet, const sim::Strategy& st, const std::string& name,
                            const Options& o) {
  auto r = sim::runStrategy(fleet, st, [&](const sim::RoundRow& row) {
    std::fprintf(stderr, "\r%s %-14s round %llu/%llu", name.c_str(), st.name.c_str(),
                 static_cast<unsigned long long>(row.round), static_cast<unsigned long long>(o.rounds));
  });
  std::fprintf(stderr, "\n");
  if (!r) die(name + " " + st.name + ": " + r.status().message());
  StrategyFigures sf;
  sf.name = st.name;
  uint64_t up = 0, down = 0, committed = 0;
  for (const sim::RoundRow& row : r->rounds) {
    up += row.bytesUp;
    down += row.bytesDown;
    committed += row.committed ? 1 : 0;
  }
  if (committed == 0) die(name + " " + st.name + ": no round committed");
  sf.upPerRound = double(up) / double(r->rounds.size());
  sf.downPerRound = double(down) / double(r->rounds.size());
  sf.bytesPerRound = sf.upPerRound + sf.downPerRound;
  sf.accuracy = r->finalAccuracy().value_or(0);
  return sf;
}

DataFigures measure(const std::string& name, const std::string& train, const std::string& test, Options o) {
  DataFigures f;
  f.partition = o.partition;
  f.name = name;
  sim::SimSettings s;
  s.data = train;
  s.testData = test;
  s.clients = o.clients;
  s.partition = o.partition;
  s.seed = o.seed;
  s.rowBucket = o.bucket;
  s.dropout = 0;
  s.targetAccuracy = 2;  // never: every strategy runs its rounds
  data::DataOptions dataOptions;
  dataOptions.task = data::TaskKind::kBinary;
  auto fleet = sim::Fleet::create(s, "linear", dataOptions);
  if (!fleet) die(name + ": " + fleet.status().message());
  f.features = fleet->train().featureDim();

  std::vector<sim::Strategy> strategies(4);
  const char* names[4] = {"dense", "sparse", "dense-topk", "sparse-topk"};
  for (int k = 0; k < 4; ++k) {
    sim::Strategy& st = strategies[k];
    st.name = names[k];
    st.task.model = fleet->modelSpec();
    st.task.kind = "binary";
    st.task.batchSize = 16;
    st.task.sparseRows = k % 2 == 1;
    st.task.evalEvery = static_cast<uint32_t>(o.rounds);
    auto& e = st.engine;
    e.rounds = o.rounds;
    e.clientsPerRound = o.perRound;
    e.overSelection = 1.0;
    e.tau = o.tau;
    e.lr = o.lr;
    e.stepBudgets = false;
    e.seed = o.seed;
    if (k >= 2) {
      e.uplink = "topk";
      e.downlink = "topk";
      e.uplinkDensity = e.downlinkDensity = o.density;
      e.errorFeedback = true;
    } else {
      e.errorFeedback = false;
    }
    f.strategies.push_back(runMeasured(*fleet, st, name, o));
  }
  // The sparse strategy through sparse relays, placed at random and by METIS.
  for (const char* placement : {"random", "metis"}) {
    sim::Strategy st = strategies[1];
    st.name = std::string("relays-") + placement;
    st.engine.clientsPerRound = o.relays;  // every relay, each with its share of the clients a round
    sim::TierSettings t;
    t.relays = o.relays;
    t.clientsPerRound = std::max<uint32_t>(1, o.perRound / o.relays);
    t.overSelection = 1.0;
    t.sparseRows = true;
    t.placement = placement;
    st.tiers = t;
    const StrategyFigures sf = runMeasured(*fleet, st, name, o);
    (placement == std::string("metis") ? f.relaysMetis : f.relaysRandom) = sf;
  }
  f.sparseVsDense = f.strategies[0].bytesPerRound / f.strategies[1].bytesPerRound;
  f.topkVsDense = f.strategies[0].bytesPerRound / f.strategies[3].bytesPerRound;
  f.accDelta = 100 * std::max(std::abs(f.strategies[1].accuracy - f.strategies[0].accuracy),
                              std::abs(f.strategies[3].accuracy - f.strategies[2].accuracy));

  // The clients' row sets as they offer them.
  std::vector<coordinator::ClientRows> rows;
  for (std::size_t i = 0; i < fleet->clients().size(); ++i) {
    const auto& c = fleet->clients()[i];
    if (c.examples.empty()) continue;
    const data::Dataset shard = fleet->train().subset(c.examples);
    const std::vector<const data::Dataset*> parts{&shard};
    auto offer = client::offerRows(parts, o.bucket);
    if (!offer) continue;  // touches nothing
    rows.push_back({fmt::format("client-{}", i), std::move(offer->covered)});
    f.meanRows += double(rows.back().rows.size());
  }
  f.clients = rows.size();
  f.meanRows /= double(std::max<std::size_t>(1, rows.size()));
  {
    std::vector<bool> seen(f.features, false);
    for (const auto& c : rows)
      for (uint32_t r : c.rows)
        if (!seen[r]) {
          seen[r] = true;
          ++f.distinctRows;
        }
  }
  coordinator::RelayPlacementOptions ro;
  ro.relays = o.relays;
  ro.seed = o.seed;
  auto metis = coordinator::placeClients(rows, f.features, ro);
  ro.method = coordinator::RelayMethod::kRandom;
  auto random = coordinator::placeClients(rows, f.features, ro);
  if (!metis || !random) die(name + ": relay placement: " + (metis ? random.status() : metis.status()).message());
  f.metis = *metis;
  f.random = *random;
  coordinator::ShardPlacementOptions so;
  so.shards = o.shards;
  so.seed = o.seed;
  auto sm = coordinator::placeRows(rows, f.features, so);
  so.method = coordinator::ShardMethod::kLpt;
  auto sl = coordinator::placeRows(rows, f.features, so);
  if (!sm || !sl) die(name + ": shard placement: " + (sm ? sl.status() : sm.status()).message());
  f.shardsMetis = *sm;
  f.shardsLpt = *sl;
  return f;
}

void print(const DataFigures& f, const Options& o) {
  std::printf(
      "\n%s: %zu features, %zu clients (%s), %.0f rows per client (buckets of %u), linear/logistic, "
      "%u of them a round, tau %u, %llu rounds\n",
      f.name.c_str(), f.features, f.clients, o.partition.c_str(), f.meanRows, o.bucket, o.perRound, o.tau,
      static_cast<unsigned long long>(o.rounds));
  std::printf("  %-12s %14s %14s %14s %12s %10s\n", "strategy", "bytes/round", "up/round", "down/round", "vs dense",
              "accuracy");
  for (const StrategyFigures& s : f.strategies)
    std::printf("  %-12s %14.0f %14.0f %14.0f %11.1fx %9.2f%%\n", s.name.c_str(), s.bytesPerRound, s.upPerRound,
                s.downPerRound, f.strategies[0].bytesPerRound / s.bytesPerRound, 100 * s.accuracy);
  std::printf("  clients among %u relays: relay <-> coordinator rows per round each way\n", o.relays);
  std::printf("  %-12s %14s %12s %12s %10s\n", "placement", "rows", "vs random", "size max/mean", "seconds");
  for (const auto* p : {&f.random, &f.metis})
    std::printf("  %-12s %14llu %11.2fx %12.2f %10.3f\n", p == &f.metis ? "metis" : "random",
                static_cast<unsigned long long>(p->trafficRows), double(f.random.trafficRows) / double(p->trafficRows),
                p->sizeMaxOverMean, p->seconds);
  std::printf("  %-12s %14llu %11.2fx %12s %10s   (no placement on %u relays does better)\n", "bound",
              static_cast<unsigned long long>(f.distinctRows), double(f.random.trafficRows) / double(f.distinctRows),
              "-", "-", o.relays);
  std::printf("  measured: the sparse strategy through %u sparse relays, coordinator <-> relays\n", o.relays);
  std::printf("  %-14s %14s %14s %14s %10s %10s\n", "placement", "bytes/round", "up/round", "down/round", "vs random",
              "accuracy");
  for (const auto* p : {&f.relaysRandom, &f.relaysMetis})
    std::printf("  %-14s %14.0f %14.0f %14.0f %9.2fx %9.2f%%\n", p->name.c_str(), p->bytesPerRound, p->upPerRound,
                p->downPerRound, f.relaysRandom.bytesPerRound / p->bytesPerRound, 100 * p->accuracy);
  std::printf("  rows among %u shards (load = clients touching a row)\n", o.shards);
  std::printf("  %-12s %14s %16s %10s\n", "method", "load max/mean", "shards/client", "seconds");
  for (const auto* p : {&f.shardsLpt, &f.shardsMetis})
    std::printf("  %-12s %14.3f %16.2f %10.3f\n", p == &f.shardsMetis ? "metis" : "lpt", p->loadMaxOverMean,
                p->shardsPerClient, p->seconds);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::vector<DataFigures> all;
  if (!o.spamDir.empty()) {
    // By sender: each row names its sender's domain (bench/tasks.py's train-sender.libsvm).
    const bool bySender = o.partition.rfind("by-column:", 0) == 0;
    const std::string train = o.spamDir + (bySender ? "/train-sender.libsvm" : "/train.libsvm");
    const std::string test = o.spamDir + "/test.libsvm";
    if (!std::filesystem::exists(train) || !std::filesystem::exists(test))
      die("--spam-dir " + o.spamDir + " has no train.libsvm and test.libsvm");
    all.push_back(measure("spam", train, test, o));
    print(all.back(), o);
  }
  // The power-law set, written as LIBSVM for the simulator (4/5 train, 1/5 test).
  data::PowerLawOptions po;
  po.examples = o.powerLawExamples;
  po.features = o.powerLawFeatures;
  po.seed = o.seed;
  auto d = data::powerLawSparse(po);
  if (!d) die("power-law data: " + d.status().message());
  const std::string dir = std::filesystem::temp_directory_path() / fmt::format("bench-sparse-{}", getpid());
  std::filesystem::create_directories(dir);
  std::vector<uint32_t> trainRows, testRows;
  for (uint32_t i = 0; i < d->size(); ++i)
    (i % 5 == 4 ? testRows : trainRows).push_back(i);
  writeLibsvm(*d, trainRows, dir + "/train.libsvm");
  writeLibsvm(*d, testRows, dir + "/test.libsvm");
  all.push_back(measure(fmt::format("power-law (N {}, D {}, K {}, s {}, seed {})", po.examples, po.features, po.tokens,
                                    po.exponent, po.seed),
                        dir + "/train.libsvm", dir + "/test.libsvm", o));
  print(all.back(), o);
  std::filesystem::remove_all(dir);

  const DataFigures& f = all.front();
  std::printf("\n(summary from %s)\n", f.name.c_str());
  std::printf(
      "summary: sparse_vs_dense_bytes=%.1f sparse_topk_vs_dense_bytes=%.1f metis_vs_random_traffic=%.2f "
      "shard_imbalance=%.3f acc_delta=%.2f partition_s=%.3f\n",
      f.sparseVsDense, f.topkVsDense, f.relaysRandom.bytesPerRound / f.relaysMetis.bytesPerRound,
      f.shardsMetis.loadMaxOverMean - 1.0, f.accDelta, f.metis.seconds);
  return 0;
}
