// The two-step placement problem (two_step.hpp): METIS beats random on a small
// power-law instance, the same seed gives the same placement, the traffic, server
// loads and pairs recounted by brute force with std::set, top-k's pushes as stated,
// and bad arguments refused by name.
#include "two_step.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "starling/data/synthetic.hpp"

#include "placement.hpp"

namespace starling::sim {
namespace {

data::Dataset powerLaw(std::size_t examples = 2000, uint64_t seed = 7) {
  data::PowerLawOptions o;
  o.examples = examples;
  o.features = 1u << 14;
  o.tokens = 16;
  o.seed = seed;
  auto d = data::powerLawSparse(o);
  REQUIRE(d);
  return std::move(*d);
}

TwoStepOptions small(double density = 0) {
  TwoStepOptions o;
  o.workers = 8;
  o.servers = 4;
  o.iterations = 3;
  o.density = density;
  return o;
}

const TwoStepRow& rowOf(const TwoStepReport& r, const std::string& step1, const std::string& step2) {
  for (const auto& row : r.rows)
    if (row.step1 == step1 && row.step2 == step2) return row;
  FAIL("no row " << step1 << "/" << step2);
  return r.rows.front();
}

// Everything a row reports, recounted from the data set and the placement alone.
void recount(const data::Dataset& d, const TwoStepOptions& o, const TwoStepRow& row) {
  const TimeModel& m = o.time;
  REQUIRE(row.workerOf.size() == d.size());
  std::vector<std::set<uint32_t>> touched(o.workers);
  std::vector<std::size_t> examples(o.workers, 0);
  data::SparseBatch batch;
  for (uint32_t i = 0; i < d.size(); ++i) {
    const std::vector<uint32_t> one{i};
    d.gatherSparse(one, batch);
    REQUIRE(row.workerOf[i] < o.workers);
    ++examples[row.workerOf[i]];
    for (std::size_t k = 0; k < batch.nnz(); ++k)
      if (batch.values[k] != 0) touched[row.workerOf[i]].insert(batch.indices[k]);
  }
  std::map<uint32_t, uint32_t> serverOf;
  for (std::size_t k = 0; k < row.rows.size(); ++k)
    serverOf[row.rows[k]] = row.serverOf[k];
  std::set<uint32_t> all;
  for (const auto& s : touched)
    all.insert(s.begin(), s.end());
  CHECK(serverOf.size() == all.size());  // every touched row on one server, no other row
  std::set<std::pair<uint32_t, uint32_t>> pairs;
  std::vector<double> serverBytes(o.servers, 0);
  double traffic = 0, pulls = 0, pushes = 0;
  for (uint32_t w = 0; w < o.workers; ++w) {
    REQUIRE(std::vector<uint32_t>(touched[w].begin(), touched[w].end()) == row.workerRows[w]);
    std::vector<double> moved(o.servers, 0);
    std::set<uint32_t> servers;
    for (std::size_t k = 0; k < row.workerRows[w].size(); ++k) {
      const uint32_t s = serverOf.at(row.workerRows[w][k]);
      servers.insert(s);
      moved[s] += row.pullCounts[w][k] + row.pushCounts[w][k];
      pulls += row.pullCounts[w][k];
      pushes += row.pushCounts[w][k];
    }
    for (uint32_t s : servers) {
      pairs.emplace(w, s);
      const double bytes = moved[s] / o.iterations * m.bytesPerRow + 2.0 * m.headerBytes;
      traffic += bytes;
      serverBytes[s] += bytes;
    }
  }
  CHECK(row.pairs == pairs.size());
  CHECK(row.trafficBytes == Approx(traffic).epsilon(1e-9));
  CHECK(row.pullRows == Approx(pulls / o.iterations).epsilon(1e-9));
  CHECK(row.pushRows == Approx(pushes / o.iterations).epsilon(1e-9));
  double sum = 0, max = 0;
  for (double b : serverBytes) {
    sum += b;
    max = std::max(max, b);
  }
  CHECK(row.serverLoadMaxOverMean == Approx(max / (sum / o.servers)).epsilon(1e-9));
  const double mean = double(d.size()) / o.workers;
  CHECK(row.examplesMaxOverMean ==
        Approx(double(*std::max_element(examples.begin(), examples.end())) / mean).epsilon(1e-9));
}

TEST_CASE("two-step: METIS in both steps moves fewer bytes than random and hash on power-law data", "[twostep]") {
  const auto d = powerLaw();
  const auto o = small();
  auto r = runTwoStep(d, "power law", o);
  REQUIRE(r);
  REQUIRE(r->rows.size() == 6);
  const auto& random = rowOf(*r, "random", "hash");
  const auto& metis = rowOf(*r, "metis", "metis");
  INFO(twoStepTable(*r));
  CHECK(metis.trafficBytes * 1.05 < random.trafficBytes);
  CHECK(metis.pullRows < random.pullRows);
  // Step 1 keeps the examples balanced; random deals them evenly.
  CHECK(metis.examplesMaxOverMean <= 1 + o.tolerance + 1e-9);
  CHECK(random.examplesMaxOverMean <= 1.0 + double(o.workers) / double(d.size()) + 1e-9);
  // Step 2: LPT and METIS balance the servers' bytes (headers aside, METIS within its
  // tolerance of the rows' load).
  CHECK(rowOf(*r, "metis", "lpt").serverLoadMaxOverMean < 1.02);
  CHECK(metis.serverLoadMaxOverMean < 1 + o.tolerance + 0.02);
  // The table ends with the summary line.
  const std::string table = twoStepTable(*r);
  CHECK(table.find("\nsummary: twostep_traffic_ratio=") != std::string::npos);
  CHECK(table.back() == '\n');
}

TEST_CASE("two-step: the metrics equal a brute-force recount of the placement", "[twostep]") {
  const auto d = powerLaw(600);
  SECTION("every row pushed and pulled") {
    const auto o = small();
    auto r = runTwoStep(d, "power law", o);
    REQUIRE(r);
    std::set<uint32_t> all;
    data::SparseBatch batch;
    for (uint32_t i = 0; i < d.size(); ++i) {
      d.gatherSparse(std::vector<uint32_t>{i}, batch);
      all.insert(batch.indices.begin(), batch.indices.end());
    }
    CHECK(r->rowsTouched == all.size());
    for (const auto& row : r->rows) {
      INFO(row.step1 << "/" << row.step2);
      recount(d, o, row);
      CHECK(row.pullRows >= double(r->rowsTouched));
      // Without compression every touched row moves both ways every iteration.
      for (uint32_t w = 0; w < o.workers; ++w)
        for (std::size_t k = 0; k < row.workerRows[w].size(); ++k) {
          REQUIRE(row.pullCounts[w][k] == o.iterations);
          REQUIRE(row.pushCounts[w][k] == o.iterations);
        }
    }
  }
  SECTION("top-k pushes round(density x rows) per worker and iteration; pulls only what was pushed") {
    const auto o = small(0.05);
    auto r = runTwoStep(d, "power law", o);
    REQUIRE(r);
    for (const auto& row : r->rows) {
      INFO(row.step1 << "/" << row.step2);
      recount(d, o, row);
      std::set<uint32_t> pushedByAnyone;
      for (uint32_t w = 0; w < o.workers; ++w) {
        uint64_t pushes = 0;
        for (std::size_t k = 0; k < row.workerRows[w].size(); ++k) {
          pushes += row.pushCounts[w][k];
          if (row.pushCounts[w][k] > 0) pushedByAnyone.insert(row.workerRows[w][k]);
        }
        const auto n = double(row.workerRows[w].size());
        const auto k = std::clamp(std::round(o.density * n), 1.0, n);
        CHECK(pushes == uint64_t(k) * o.iterations);
      }
      // A worker pulls a row only in iterations some worker pushed it: never a row
      // nobody pushed, and at most once per iteration.
      for (uint32_t w = 0; w < o.workers; ++w)
        for (std::size_t k = 0; k < row.workerRows[w].size(); ++k) {
          CHECK(row.pullCounts[w][k] <= o.iterations);
          if (row.pullCounts[w][k] > 0) CHECK(pushedByAnyone.count(row.workerRows[w][k]) == 1);
        }
    }
    auto full = runTwoStep(d, "power law", small());
    REQUIRE(full);
    CHECK(rowOf(*r, "metis", "metis").trafficBytes * 5 < rowOf(*full, "metis", "metis").trafficBytes);
  }
}

TEST_CASE("two-step: the same seed gives the same placement and traffic", "[twostep]") {
  const auto d = powerLaw(800);
  const auto o = small(0.1);
  auto a = runTwoStep(d, "power law", o);
  auto b = runTwoStep(d, "power law", o);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(a->rows.size() == b->rows.size());
  for (std::size_t i = 0; i < a->rows.size(); ++i) {
    CHECK(a->rows[i].workerOf == b->rows[i].workerOf);
    CHECK(a->rows[i].serverOf == b->rows[i].serverOf);
    CHECK(a->rows[i].pullCounts == b->rows[i].pullCounts);
    CHECK(a->rows[i].pushCounts == b->rows[i].pushCounts);
    CHECK(a->rows[i].trafficBytes == b->rows[i].trafficBytes);
    CHECK(a->rows[i].iterationSeconds == b->rows[i].iterationSeconds);
  }
  CHECK(twoStepDump(*a) == twoStepDump(*b));
  auto other = o;
  other.seed = 2;
  auto c = runTwoStep(d, "power law", other);
  REQUIRE(c);
  CHECK(c->rows.front().workerOf != a->rows.front().workerOf);  // random's shuffle follows the seed
}

TEST_CASE("two-step: the modelled time follows the stated model", "[twostep]") {
  const auto d = powerLaw(400);
  auto o = small();
  o.time.computeSecondsPerNonZero = 0;
  o.time.latencySeconds = 0;
  o.time.messageSeconds = 0;
  auto r = runTwoStep(d, "power law", o);
  REQUIRE(r);
  // Bytes alone: the busiest node's bytes over the bandwidth, so at least the mean
  // server's and at most all the traffic.
  for (const auto& row : r->rows) {
    CHECK(row.iterationSeconds >= row.trafficBytes / o.servers / o.time.bandwidth * (1 - 1e-12));
    CHECK(row.iterationSeconds <= row.trafficBytes / o.time.bandwidth);
  }
  o.time.computeSecondsPerNonZero = 1;  // compute dominates: the largest worker's non-zeros
  auto slow = runTwoStep(d, "power law", o);
  REQUIRE(slow);
  const auto& row = slow->rows.front();
  std::vector<double> nnz(o.workers, 0);
  data::SparseBatch batch;
  for (uint32_t i = 0; i < d.size(); ++i) {
    d.gatherSparse(std::vector<uint32_t>{i}, batch);
    nnz[row.workerOf[i]] += double(batch.nnz());
  }
  CHECK(row.iterationSeconds == Approx(*std::max_element(nnz.begin(), nnz.end())).epsilon(1e-6));
}

TEST_CASE("two-step: bad arguments are refused by name", "[twostep]") {
  const auto d = powerLaw(50);
  auto fails = [&](const data::Dataset& data, TwoStepOptions o, const std::string& words) {
    auto r = runTwoStep(data, "x", o);
    REQUIRE_FALSE(r);
    INFO(r.status().message());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message().find(words) != std::string::npos);
  };
  const std::vector<std::pair<std::function<void(TwoStepOptions&)>, std::string>> cases{
      {[](TwoStepOptions& o) { o.workers = 0; }, "the number of workers must be at least 1"},
      {[](TwoStepOptions& o) { o.servers = 0; }, "the number of servers must be at least 1"},
      {[](TwoStepOptions& o) { o.workers = 51; }, "more workers (51) than examples (50)"},
      {[](TwoStepOptions& o) { o.servers = 1u << 20; }, "more servers (1048576) than rows the examples touch"},
      {[](TwoStepOptions& o) { o.density = 1.5; }, "the density 1.5 is not in [0, 1]"},
      {[](TwoStepOptions& o) { o.iterations = 0; }, "iterations must be at least 1"},
  };
  for (const auto& [change, words] : cases) {
    auto o = small();
    change(o);
    fails(d, o, words);
  }
  auto dense = data::Dataset::fromFloats(std::vector<float>(60 * 4, 1.0f), std::vector<int32_t>(60, 1), 4, 2);
  REQUIRE(dense);
  fails(*dense, small(), "the data set is dense");
  auto classes = data::Dataset::fromSparse({0, 1, 2, 3}, {0, 1, 2}, {1, 1, 1}, {0, 1, 2}, 3, 3);
  REQUIRE(classes);
  auto one = small();
  one.workers = 1;
  one.servers = 1;
  fails(*classes, one, "needs labels 0/1, not 3 classes");
}

TEST_CASE("two-step: --balance nonzeros keeps every worker's non-zeros within the tolerance", "[twostep]") {
  const auto d = powerLaw(1500);
  auto o = small();
  o.balance = Balance::kNonZeros;
  auto r = runTwoStep(d, "power law", o);
  REQUIRE(r);
  const auto& metis = rowOf(*r, "metis", "metis");
  const auto& random = rowOf(*r, "random", "hash");
  INFO(twoStepTable(*r));
  CHECK(metis.nonZerosMaxOverMean <= 1 + o.tolerance + 1e-9);
  CHECK(random.nonZerosMaxOverMean <= 1.02);  // each example onto the lightest worker
  CHECK(metis.trafficBytes < random.trafficBytes);
  recount(d, o, metis);
}

TEST_CASE("placeWeightedClients: relays balance the clients' weights", "[twostep][placement]") {
  using coordinator::ClientRows;
  // 40 clients in 4 groups of shared rows; client i weighs 1 + (i % 7).
  std::vector<ClientRows> clients;
  std::vector<uint32_t> weights;
  for (uint32_t i = 0; i < 40; ++i) {
    ClientRows c;
    c.id = "c" + std::to_string(i);
    for (uint32_t k = 0; k < 20; ++k)
      c.rows.push_back((i % 4) * 100 + (i * 7 + k * 3) % 100);
    std::sort(c.rows.begin(), c.rows.end());
    c.rows.erase(std::unique(c.rows.begin(), c.rows.end()), c.rows.end());
    clients.push_back(std::move(c));
    weights.push_back(1 + i % 7);
  }
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  uint64_t traffic[2] = {0, 0};  // random's, METIS's
  for (auto method : {coordinator::RelayMethod::kMetis, coordinator::RelayMethod::kRandom}) {
    coordinator::RelayPlacementOptions o;
    o.relays = 4;
    o.method = method;
    auto p = coordinator::placeWeightedClients(clients, weights, 400, o);
    REQUIRE(p);
    std::vector<double> load(4, 0);
    for (std::size_t i = 0; i < clients.size(); ++i)
      load[p->relayOf[i]] += weights[i];
    const double max = *std::max_element(load.begin(), load.end());
    CHECK(p->weightMaxOverMean == Approx(max / (total / 4)));
    CHECK(p->weightMaxOverMean <= 1 + o.tolerance + 1e-9);
    traffic[method == coordinator::RelayMethod::kMetis] = p->trafficRows;
  }
  CHECK(traffic[1] * 1.4 < traffic[0]);  // random spreads every group over all relays
  coordinator::RelayPlacementOptions o;
  o.relays = 4;
  auto fewer = coordinator::placeWeightedClients(clients, std::vector<uint32_t>(3, 1), 400, o);
  REQUIRE_FALSE(fewer);
  CHECK(fewer.status().message() == "3 weights for 40 clients");
  auto zero = coordinator::placeWeightedClients(clients, std::vector<uint32_t>(40, 0), 400, o);
  REQUIRE_FALSE(zero);
  CHECK(zero.status().message() == "every weight is 0: nothing to balance");
}

TEST_CASE("placeWeightedRows: a row's load is the sum of its weights", "[twostep][placement]") {
  using coordinator::ClientRows;
  const std::vector<ClientRows> clients{{"a", {1, 2, 3}}, {"b", {3, 4}}, {"c", {5}}};
  const std::vector<std::vector<uint32_t>> weights{{1, 2, 3}, {4, 5}, {6}};
  for (auto method : {coordinator::ShardMethod::kRange, coordinator::ShardMethod::kHash, coordinator::ShardMethod::kLpt,
                      coordinator::ShardMethod::kMetis}) {
    coordinator::ShardPlacementOptions o;
    o.shards = 2;
    o.method = method;
    auto p = coordinator::placeWeightedRows(clients, weights, 16, o);
    REQUIRE(p);
    const std::map<uint32_t, uint64_t> load{{1, 1}, {2, 2}, {3, 7}, {4, 5}, {5, 6}};
    std::vector<uint64_t> perShard(2, 0);
    for (std::size_t k = 0; k < p->rows.size(); ++k)
      perShard[p->shardOf[k]] += load.at(p->rows[k]);
    CHECK(perShard == p->loadPerShard);
    if (method == coordinator::ShardMethod::kLpt) CHECK(p->loadMaxOverMean == Approx(11.0 / 10.5));
  }
  coordinator::ShardPlacementOptions o;
  o.shards = 2;
  auto wrongShape =
      coordinator::placeWeightedRows(clients, std::vector<std::vector<uint32_t>>{{1, 2, 3}, {4}, {6}}, 16, o);
  REQUIRE_FALSE(wrongShape);
  CHECK(wrongShape.status().message() == "client 'b': 1 weights for 2 rows");
  auto zero =
      coordinator::placeWeightedRows(clients, std::vector<std::vector<uint32_t>>{{0, 0, 0}, {0, 0}, {0}}, 16, o);
  REQUIRE_FALSE(zero);
  CHECK(zero.status().message() == "every weight is 0: no load to balance");
  auto fewer = coordinator::placeWeightedRows(clients, std::vector<std::vector<uint32_t>>{{1, 2, 3}}, 16, o);
  REQUIRE_FALSE(fewer);
  CHECK(fewer.status().message() == "weights for 1 clients, not 3");
}

}  // namespace
}  // namespace starling::sim
