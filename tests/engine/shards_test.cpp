// The engine's shards (coordinator/engine/shards.cpp, docs/coordinator.md "Shards"):
// the shard map, the pool, and a real engine run giving the same bits whatever the
// number of shards.

#include "engine/shards.hpp"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "starling/coordinator/round_engine.hpp"
#include "starling/model/model.hpp"

#include "engine/shard_map.hpp"
#include "engine/shard_pool.hpp"
#include "engine/splitmix.hpp"
#include "fixtures.hpp"
#include "placement.hpp"

using namespace starling;
using namespace starling::coordinator;
using starling::coordinator::testing::created;

namespace {

// The owner of every parameter, from the map's row owners and an independent layout:
// the rows laid out by nested loops (a contiguous row's W parameters; a column's one
// per output row of the {W, rows} matrix), the rest cut into S equal ranges here. Each
// agrees with ownerOf().
std::vector<uint32_t> owners(const ShardMap& map, uint32_t rowWidth = 0) {
  std::vector<uint32_t> owner(map.dim(), UINT32_MAX);
  const std::size_t rows = map.rowCount();
  REQUIRE((rows == 0) == (rowWidth == 0));
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t k = 0; k < rowWidth; ++k)
      owner[map.rowLayout() == RowLayout::kContiguous ? r * rowWidth + k : k * rows + r] = map.rowOwner(r);
  const std::size_t restBegin = rows * rowWidth;
  const std::size_t rest = map.dim() - restBegin;
  for (uint32_t s = 0; s < map.shards(); ++s) {
    REQUIRE(map.restRange(s).begin == restBegin + rest * s / map.shards());
    REQUIRE(map.restRange(s).end == restBegin + rest * (s + 1) / map.shards());
    for (std::size_t i = restBegin + rest * s / map.shards(); i < restBegin + rest * (s + 1) / map.shards(); ++i)
      owner[i] = s;
  }
  std::vector<std::size_t> sizes(map.shards(), 0);
  for (std::size_t i = 0; i < owner.size(); ++i) {
    REQUIRE(owner[i] < map.shards());
    REQUIRE(map.ownerOf(i) == owner[i]);
    ++sizes[owner[i]];
  }
  REQUIRE(std::equal(sizes.begin(), sizes.end(), map.sizes().begin(), map.sizes().end()));
  return owner;
}

// Checks split() against the owners: every entry once, in order, in its owner's runs.
void checkSplit(const std::vector<uint32_t>& owner, const ShardMap& map, const std::vector<uint32_t>& indices) {
  std::vector<std::vector<EntryRun>> runs;
  map.split(indices, runs);
  REQUIRE(runs.size() == map.shards());
  std::vector<int> seen(indices.size(), 0);
  for (uint32_t s = 0; s < map.shards(); ++s) {
    std::size_t previous = 0;
    for (const EntryRun& r : runs[s]) {
      REQUIRE(r.first < r.last);
      REQUIRE(r.first >= previous);
      previous = r.last;
      for (std::size_t j = r.first; j < r.last; ++j) {
        REQUIRE(owner[indices[j]] == s);
        ++seen[j];
      }
    }
  }
  REQUIRE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

std::vector<uint32_t> randomIndices(std::size_t dim, double p, uint64_t seed) {
  std::vector<uint32_t> out;
  for (std::size_t i = 0; i < dim; ++i)
    if (double(splitmix(seed) >> 11) * 0x1.0p-53 < p) out.push_back(static_cast<uint32_t>(i));
  return out;
}

float uniform(uint64_t& state) {
  return static_cast<float>(double(splitmix(state) >> 11) * 0x1.0p-53 - 0.5);
}

// A model large enough that the shards' steps run on the pool (Shards::kInlineBelow).
constexpr std::size_t kRows = 4128;
constexpr uint32_t kWidth = 32;
constexpr std::size_t kBigDim = kRows * kWidth + 1000;  // rows, then a dense rest

struct Outcome {
  std::vector<float> model;
  std::vector<float> served;
  std::vector<uint64_t> checksums;  // per round ended
  std::vector<double> serverSteps;
  std::vector<uint64_t> loadTotals;  // per committed round: the sum over shards
  std::vector<std::size_t> loadCounts;
  std::vector<std::vector<uint64_t>> loads;  // per committed round: each shard's
};

// A real run: 4 clients, 4 rounds, the updates a seeded function of (client, round):
// dense, or top-k with each client's own support: clients 0 and 1 send every
// coordinate (above Shards::kInlineBelow entries: added on the pool), 2 and 3 a third
// (split by shard and added on the calling thread).
// afterCommit(engine, round), when given, runs after each committed round's summary.
Outcome run(EngineConfig c, bool sparseUpdates, std::size_t dim = kBigDim,
            const std::function<void(RoundEngine&, uint64_t)>& afterCommit = {}) {
  c.rounds = 4;
  c.clientsPerRound = 4;
  c.overSelection = 1.0;
  c.deadlineMs = 100'000;
  c.stepBudgets = false;
  std::vector<float> initial(dim);
  uint64_t init = 7;
  for (float& x : initial)
    x = uniform(init);
  auto engine = created(RoundEngine::create(c, initial));
  Outcome out;
  std::deque<Action> todo;
  int64_t now = 0;
  for (int i = 0; i < 4; ++i)
    for (auto& a : engine->clientJoined("client-" + std::to_string(i), 100 + 10 * uint64_t(i), 0, 0, now))
      todo.push_back(std::move(a));
  std::deque<std::pair<std::string, Assignment>> training;
  bool finished = false;
  while (!finished) {
    while (!todo.empty()) {
      Action a = std::move(todo.front());
      todo.pop_front();
      if (auto* as = std::get_if<Assign>(&a)) training.emplace_back(as->clientId, as->assignment);
      if (auto* ended = std::get_if<RoundEnded>(&a)) {
        const RoundSummary& s = ended->summary;
        out.checksums.push_back(s.modelChecksum);
        out.serverSteps.push_back(s.serverStep);
        if (s.committed) {
          uint64_t total = 0;
          for (uint64_t l : s.shardLoads)
            total += l;
          out.loadTotals.push_back(total);
          out.loadCounts.push_back(s.shardLoads.size());
          out.loads.push_back(s.shardLoads);
          if (afterCommit) afterCommit(*engine, s.round);
        }
      }
      if (std::holds_alternative<Finished>(a)) finished = true;
    }
    if (finished) break;
    REQUIRE_FALSE(training.empty());
    auto [id, as] = std::move(training.front());
    training.pop_front();
    const auto client = static_cast<uint64_t>(id.back() - '0');
    uint64_t seed = client * 1000 + as.round;
    IncomingUpdate u;
    u.round = as.round;
    u.baseRound = as.baseRound;
    u.examples = 100 + 10 * client;
    u.steps = 5 + static_cast<uint32_t>(client);
    u.lossStart = 1.0f;
    u.lossEnd = 0.9f;
    u.durationMs = 10;
    u.delta.count = static_cast<uint32_t>(dim);
    if (sparseUpdates) {
      u.delta.encoding = compression::Encoding::kTopK;
      u.delta.indices = randomIndices(dim, client < 2 ? 1.0 : 0.3, seed * 31 + 5);
      for (std::size_t j = 0; j < u.delta.indices.size(); ++j)
        u.delta.values.push_back(uniform(seed));
    } else {
      u.delta.encoding = compression::Encoding::kDense32;
      u.delta.values.resize(dim);
      for (float& x : u.delta.values)
        x = uniform(seed);
    }
    u.bytesWire = 4 * u.delta.values.size();
    now += 10;
    for (auto& a : engine->updateArrived(id, std::move(u), now))
      todo.push_back(std::move(a));
  }
  out.model.assign(engine->model().begin(), engine->model().end());
  out.served.assign(engine->servedModel().begin(), engine->servedModel().end());
  return out;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void requireSameRun(const Outcome& one, const Outcome& other) {
  REQUIRE(sameBits(one.model, other.model));
  REQUIRE(sameBits(one.served, other.served));
  REQUIRE(one.checksums == other.checksums);
  REQUIRE(one.serverSteps == other.serverSteps);
  REQUIRE(one.loadTotals == other.loadTotals);
}

// The engine with a server optimizer ("", "sgd-momentum", "adam", "yogi", "fedexp"),
// top-k up- and downlinks for sparse updates, the sender mean and a moving average.
EngineConfig configFor(const std::string& optimizer, bool sparseUpdates, bool senderMean) {
  EngineConfig c;
  c.senderMean = senderMean;
  c.modelEma = 0.5;
  if (optimizer == "sgd-momentum") {
    c.serverMomentum = 0.9;
    c.serverLr = 0.7;
  } else if (optimizer == "fedexp") {
    c.extrapolate = true;
  } else {
    c.serverOptimizer = optimizer;
    c.serverLr = 0.01;
  }
  if (sparseUpdates) {
    c.uplink = "topk";
    c.uplinkDensity = 0.3;
    c.downlink = "topk";
    c.downlinkDensity = 0.2;
  }
  return c;
}

// kRows rows placed on 4 shards by LPT from 40 clients touching power-law-like rows of
// the first layer (low row ids are popular), drawn from seed.
ShardPlacement lptPlacement(uint64_t seed) {
  std::vector<ClientRows> clients;
  for (int k = 0; k < 40; ++k) {
    std::set<uint32_t> rows;
    for (int t = 0; t < 200; ++t) {
      const double u = double(splitmix(seed) >> 11) * 0x1.0p-53;
      rows.insert(static_cast<uint32_t>(double(kRows) * u * u * u) % kRows);
    }
    clients.push_back(ClientRows{"c" + std::to_string(k), {rows.begin(), rows.end()}});
  }
  ShardPlacementOptions options;
  options.shards = 4;
  options.method = ShardMethod::kLpt;
  return created(placeRows(clients, kRows, options));
}

}  // namespace

TEST_CASE("shards: range maps cut the parameters into equal contiguous ranges", "[engine][shards]") {
  const ShardMap map = created(ShardMap::ranges(10, 3));
  REQUIRE(owners(map) == std::vector<uint32_t>{0, 0, 0, 1, 1, 1, 2, 2, 2, 2});
  REQUIRE(map.sizes()[0] == 3);
  REQUIRE(map.sizes()[2] == 4);
  REQUIRE(map.restRange(1).begin == 3);
  REQUIRE(map.restRange(1).end == 6);
  REQUIRE_FALSE(ShardMap::ranges(10, 0).isOk());
  REQUIRE_FALSE(ShardMap::ranges(3, 4).isOk());
}

TEST_CASE("shards: a map from rows places the named rows, fills the shards short of rows, splits the rest evenly",
          "[engine][shards]") {
  // 8 rows of 2 parameters, then 4 dense parameters; rows 1, 2 and 6 named. The rows
  // are contiguous (embedbag's table) or columns of a {2, 8} matrix (dense0.weight).
  const RowLayout layout = GENERATE(RowLayout::kContiguous, RowLayout::kColumns);
  CAPTURE(layout == RowLayout::kColumns);
  const std::vector<uint32_t> rows = {1, 2, 6};
  const std::vector<uint32_t> shardOf = {1, 0, 1};
  const ShardMap map = created(ShardMap::fromRows(20, 2, 2, 8, rows, shardOf, layout));
  const std::vector<uint32_t> owner = owners(map, 2);
  auto rowOwner = [&](std::size_t r) {
    const std::size_t second = layout == RowLayout::kColumns ? 8 + r : 2 * r + 1;
    const std::size_t first = layout == RowLayout::kColumns ? r : 2 * r;
    REQUIRE(owner[first] == owner[second]);
    return owner[first];
  };
  REQUIRE(rowOwner(1) == 1);
  REQUIRE(rowOwner(2) == 0);
  REQUIRE(rowOwner(6) == 1);
  // Shard 0 has 1 named row of its 4, shard 1 2: rows 0, 3, 4 fill shard 0, then 5 and 7 shard 1.
  REQUIRE(rowOwner(0) == 0);
  REQUIRE(rowOwner(3) == 0);
  REQUIRE(rowOwner(4) == 0);
  REQUIRE(rowOwner(5) == 1);
  REQUIRE(rowOwner(7) == 1);
  REQUIRE(std::vector<uint32_t>(owner.begin() + 16, owner.end()) == std::vector<uint32_t>{0, 0, 1, 1});
  if (layout == RowLayout::kColumns)  // the first output's row of the matrix, then the second's
    REQUIRE(std::vector<uint32_t>(owner.begin(), owner.begin() + 16) ==
            std::vector<uint32_t>{0, 1, 0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1});
  REQUIRE(map.sizes()[0] == 10);
  REQUIRE(map.sizes()[1] == 10);

  SECTION("bad maps are refused, saying what is wrong") {
    auto message = [&](uint32_t width, std::size_t count, std::vector<uint32_t> named, std::vector<uint32_t> on) {
      auto r = ShardMap::fromRows(20, 2, width, count, named, on, layout);
      REQUIRE_FALSE(r.isOk());
      return r.status().message();
    };
    const std::vector<uint32_t> two = {0, 1};
    CHECK_THAT(message(2, 8, {2, 1}, two), Catch::Contains("ascending"));
    CHECK_THAT(message(2, 8, {1, 8}, two), Catch::Contains("row 8 is past"));
    CHECK_THAT(message(2, 8, two, {0, 2}), Catch::Contains("shard 2 of 2"));
    CHECK_THAT(message(2, 11, two, two), Catch::Contains("more than the model"));
    CHECK_THAT(message(0, 8, two, two), Catch::Contains("row width"));
    CHECK_THAT(message(2, 8, two, {0}), Catch::Contains("2 rows but 1"));
  }
}

TEST_CASE("shards: split puts every index of a sparse tensor in its owner's runs, once, in order", "[engine][shards]") {
  const std::size_t dim = 5000;
  for (double p : {0.0, 0.001, 0.05, 0.5, 1.0}) {
    const std::vector<uint32_t> indices = randomIndices(dim, p, 11);
    for (uint32_t s : {1u, 4u}) {
      const ShardMap map = created(ShardMap::ranges(dim, s));
      checkSplit(owners(map), map, indices);
    }
    // A map of many small intervals: rows of 3 by a seeded shuffle of shards.
    std::vector<uint32_t> rows, shardOf;
    uint64_t seed = 3;
    for (uint32_t r = 0; r < 1600; ++r)
      if (splitmix(seed) % 3 != 0) {
        rows.push_back(r);
        shardOf.push_back(static_cast<uint32_t>(splitmix(seed) % 5));
      }
    for (RowLayout layout : {RowLayout::kContiguous, RowLayout::kColumns}) {
      CAPTURE(p, layout == RowLayout::kColumns);
      const ShardMap map = created(ShardMap::fromRows(dim, 5, 3, 1600, rows, shardOf, layout));
      checkSplit(owners(map, 3), map, indices);
      // Over 256 shards the owner table has four bytes a row.
      std::vector<uint32_t> many(shardOf.size());
      for (std::size_t j = 0; j < shardOf.size(); ++j)
        many[j] = static_cast<uint32_t>(j * 37 % 300);
      const ShardMap wide = created(ShardMap::fromRows(dim, 300, 3, 1600, rows, many, layout));
      checkSplit(owners(wide, 3), wide, indices);
    }
  }
}

TEST_CASE("shards: a model's first-layer rows are the parameters Model::firstLayerRows names", "[engine][shards]") {
  // Each input feature's parameters, as the model lists them, all go to its row's shard;
  // the rest from the first layer's bias on is cut evenly. split() of random indices
  // against that brute-force owner of every parameter.
  const std::string spec = GENERATE(as<std::string>{}, "linear:1000-3", "mlp:tanh:1000-4-2", "embedbag:1000-5-3-2",
                                    "linear:1000-1/logistic", "mlp:1-6-2");
  CAPTURE(spec);
  const model::Model model = created(model::Model::fromSpec(spec));
  std::vector<uint32_t> rows, shardOf;
  uint64_t seed = 17;
  for (uint32_t r = 0; r < model.inputDim(); ++r)
    if (splitmix(seed) % 4 != 0) {
      rows.push_back(r);
      shardOf.push_back(static_cast<uint32_t>(splitmix(seed) % 3));
    }
  const EngineConfig::ShardRows shardRows = created(shardRowsOf(model, rows, shardOf));
  REQUIRE(shardRows.rowCount == model.inputDim());
  REQUIRE(shardRows.rows == rows);
  REQUIRE(shardRows.shardOf == shardOf);
  REQUIRE(shardRows.columns == (spec.starts_with("linear:1000-3") || spec.starts_with("mlp:tanh")));
  const ShardMap map =
      created(ShardMap::fromRows(model.numParams(), 3, shardRows.rowWidth, shardRows.rowCount, rows, shardOf,
                                 shardRows.columns ? RowLayout::kColumns : RowLayout::kContiguous));
  std::vector<uint32_t> owner(model.numParams(), UINT32_MAX);
  for (uint32_t r = 0; r < model.inputDim(); ++r)
    for (const model::ParamRange& range : created(model.firstLayerRows(std::vector<uint32_t>{r})))
      for (std::size_t i = range.offset; i < range.offset + range.count; ++i)
        owner[i] = map.rowOwner(r);
  const model::ParamRange dense = model.denseParams();
  for (uint32_t s = 0; s < 3; ++s)
    for (std::size_t i = dense.offset + dense.count * s / 3; i < dense.offset + dense.count * (s + 1) / 3; ++i)
      owner[i] = s;
  REQUIRE(owners(map, shardRows.rowWidth) == owner);
  for (double p : {0.01, 0.3, 1.0})
    checkSplit(owner, map, randomIndices(model.numParams(), p, 23));

  SECTION("a model without first-layer rows is refused by name") {
    const model::Model cnn = created(model::Model::fromSpec("cnn:1x8x8-c2k3-p2-f4-2"));
    auto refused = shardRowsOf(cnn, rows, shardOf);
    REQUIRE_FALSE(refused.isOk());
    REQUIRE_THAT(refused.status().message(), Catch::Contains("cnn:1x8x8") && Catch::Contains("no first-layer rows"));
  }
}

TEST_CASE("shards: the pool runs every task once, on several threads, and returns when all are done",
          "[engine][shards][concurrent]") {
  ShardPool pool(3);
  REQUIRE(pool.workers() == 3);
  std::vector<int> counts(4, 0);  // each written by its task's thread only
  std::atomic<int> running{0}, most{0};
  for (int round = 0; round < 200; ++round) {
    pool.run(4, [&](uint32_t i) {
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      ++counts[i];
      --running;
    });
    REQUIRE(running.load() == 0);
  }
  REQUIRE(counts == std::vector<int>(4, 200));
  pool.run(0, [](uint32_t) { FAIL("no task"); });
}

TEST_CASE("shards: a run of the engine gives the same bits with 1, 2 and 4 shards", "[engine][shards][concurrent]") {
  REQUIRE(kBigDim >= Shards::kInlineBelow);  // the element-wise steps and whole updates run on the pool
  const bool sparseUpdates = GENERATE(false, true);
  const bool senderMean = GENERATE(false, true);
  const std::string optimizer = GENERATE(as<std::string>{}, "sgd-momentum", "adam", "yogi", "fedexp");
  CAPTURE(sparseUpdates, senderMean, optimizer);
  EngineConfig c = configFor(optimizer, sparseUpdates, senderMean);
  const Outcome one = run(c, sparseUpdates);
  REQUIRE(one.loadTotals.size() == 4);
  REQUIRE(one.loadCounts == std::vector<std::size_t>(4, 1));
  // The run did something: the model moved.
  std::vector<float> initial(kBigDim);
  uint64_t init = 7;
  for (float& x : initial)
    x = uniform(init);
  REQUIRE_FALSE(sameBits(one.model, initial));
  for (uint32_t shards : {2u, 4u}) {
    CAPTURE(shards);
    c.shards = shards;
    const Outcome many = run(c, sparseUpdates);
    requireSameRun(one, many);
    REQUIRE(many.loadCounts == std::vector<std::size_t>(4, shards));
  }
}

TEST_CASE("shards: a placement's row map gives the same bits", "[engine][shards][concurrent]") {
  const ShardPlacement placement = lptPlacement(5);

  EngineConfig c;
  c.serverMomentum = 0.9;
  c.uplink = "topk";
  c.uplinkDensity = 0.3;
  const Outcome one = run(c, true);
  c.shards = 4;
  c.shardRows.rowWidth = kWidth;
  c.shardRows.rowCount = kRows;
  c.shardRows.rows = placement.rows;
  c.shardRows.shardOf = placement.shardOf;
  requireSameRun(one, run(c, true));

  SECTION("a map applied between rounds moves the load, not the bits") {
    // Four range shards for two rounds, then the placement's rows.
    EngineConfig ranges = c;
    ranges.shardRows = {};
    const Outcome byRanges = run(ranges, true);
    requireSameRun(one, byRanges);
    const Outcome switched = run(ranges, true, kBigDim, [&](RoundEngine& engine, uint64_t round) {
      if (round == 2) REQUIRE(engine.setShardRows(c.shardRows).isOk());
    });
    requireSameRun(one, switched);
    const Outcome byRows = run(c, true);
    REQUIRE(switched.loads.size() == 4);
    REQUIRE(byRows.loads != byRanges.loads);  // the maps place the entries differently
    for (std::size_t r = 0; r < 4; ++r) {
      CAPTURE(r);
      REQUIRE(switched.loads[r] == (r < 2 ? byRanges.loads[r] : byRows.loads[r]));
    }
    SECTION("and a map that does not fit is refused; the engine keeps its own") {
      const Outcome refused = run(ranges, true, kBigDim, [&](RoundEngine& engine, uint64_t round) {
        if (round != 2) return;
        EngineConfig::ShardRows bad = c.shardRows;
        bad.shardOf.back() = 4;  // past the 4 shards
        Status st = engine.setShardRows(bad);
        REQUIRE_FALSE(st.isOk());
        REQUIRE_THAT(st.message(), Catch::Contains("shard"));
      });
      REQUIRE(refused.loads == byRanges.loads);
    }
  }
  SECTION("the engine refuses a map for another number of shards") {
    c.shards = 2;
    auto made = RoundEngine::create(c, std::vector<float>(kBigDim, 0.0f));
    REQUIRE_FALSE(made.isOk());
    REQUIRE_THAT(made.status().message(), Catch::Contains("shard map"));
  }
}

TEST_CASE("shards: a row map of a linear or mlp model (rows are columns) gives the same bits",
          "[engine][shards][concurrent]") {
  // Models of about kBigDim parameters whose first layer is dense0.weight {out, in}: a
  // row is a column.
  const std::string spec = GENERATE(as<std::string>{}, "linear:4128-32", "mlp:4128-32-8");
  const bool sparseUpdates = GENERATE(false, true);
  const std::string optimizer = GENERATE(as<std::string>{}, "sgd-momentum", "adam", "yogi", "fedexp");
  CAPTURE(spec, sparseUpdates, optimizer);
  const model::Model model = created(model::Model::fromSpec(spec));
  REQUIRE(model.numParams() >= Shards::kInlineBelow);  // whole updates and element-wise steps on the pool
  REQUIRE(model.inputDim() == kRows);
  const ShardPlacement placement = lptPlacement(9);

  EngineConfig c = configFor(optimizer, sparseUpdates, sparseUpdates);
  const Outcome one = run(c, sparseUpdates, model.numParams());
  c.shards = 4;
  c.shardRows = created(shardRowsOf(model, placement.rows, placement.shardOf));
  REQUIRE(c.shardRows.columns);
  const Outcome many = run(c, sparseUpdates, model.numParams());
  requireSameRun(one, many);
  REQUIRE(many.loadCounts == std::vector<std::size_t>(4, 4));
}

TEST_CASE("shards: 0 shards is one per core", "[engine][shards]") {
  EngineConfig c;
  c.shards = 0;
  const Outcome zero = run(c, false);
  const auto cores = std::max(1u, std::thread::hardware_concurrency());
  REQUIRE(zero.loadCounts == std::vector<std::size_t>(4, cores));
  c.shards = 1;
  requireSameRun(zero, run(c, false));
}
