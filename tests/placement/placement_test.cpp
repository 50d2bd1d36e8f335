// Placement by graph partition (coordinator/placement.cpp): clients on relays and rows
// on shards, METIS against random and hash, on a community-structured instance whose
// good placement is known; the metrics against an independent count; the errors.

#include "placement.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "starling/util/mix.hpp"

#include "placement_file.hpp"

using namespace starling;
using namespace starling::coordinator;

namespace {

constexpr uint64_t kUniverse = uint64_t{1} << 20;

// The instance of tests/placement/make_row_sets.py (with its own generator): client i
// in community i % communities; each of `draws` draws is, with probability 0.93, a row
// of its community's block of `block` rows (skewed to the block's start), with 0.06 one
// of the 256 hot rows every community shares, with 0.01 any row.
std::vector<ClientRows> communities(int clients, int communities, uint64_t seed, int block = 1024, int draws = 300) {
  std::vector<ClientRows> out;
  uint64_t state = seed;
  auto uniform = [&state] { return double(splitmixNext(state) >> 11) * 0x1.0p-53; };
  const uint64_t stride = kUniverse / uint64_t(communities);
  constexpr uint64_t kHot = 256;
  for (int i = 0; i < clients; ++i) {
    std::set<uint32_t> rows;
    const uint64_t k = uint64_t(i % communities);
    for (int d = 0; d < draws; ++d) {
      const double x = uniform(), u = uniform();
      if (x < 0.93)
        rows.insert(static_cast<uint32_t>(k * stride + uint64_t(block * u * u)));
      else if (x < 0.99)
        rows.insert(static_cast<uint32_t>(kUniverse - kHot + uint64_t(double(kHot) * u)));
      else
        rows.insert(static_cast<uint32_t>(double(kUniverse) * u));
    }
    out.push_back({fmt::format("client-{}", i), std::vector<uint32_t>(rows.begin(), rows.end())});
  }
  return out;
}

// The traffic of an assignment counted independently: a std::set per relay.
uint64_t trafficBySets(const std::vector<ClientRows>& clients, const std::vector<uint32_t>& relayOf) {
  std::map<uint32_t, std::set<uint32_t>> unions;
  for (std::size_t i = 0; i < clients.size(); ++i)
    unions[relayOf[i]].insert(clients[i].rows.begin(), clients[i].rows.end());
  uint64_t total = 0;
  for (const auto& [relay, rows] : unions)
    total += rows.size();
  return total;
}

template <typename T>
T ok(Result<T> r) {
  INFO(r.status().message());
  REQUIRE(r.isOk());
  return std::move(r).value();
}

std::string errorOf(const Status& st) {
  REQUIRE_FALSE(st.isOk());
  return st.message();
}

template <typename T>
std::string errorOf(const Result<T>& r) {
  REQUIRE_FALSE(r.isOk());
  return r.status().message();
}

RelayPlacementOptions relayOptions(RelayMethod method, uint32_t relays = 8, uint64_t seed = 1) {
  RelayPlacementOptions o;
  o.method = method;
  o.relays = relays;
  o.seed = seed;
  return o;
}

}  // namespace

TEST_CASE("METIS places a community-structured fleet with 4x less relay traffic than random, within 10% sizes",
          "[placement]") {
  const auto clients = communities(400, 8, 7);
  const auto random = ok(placeClients(clients, kUniverse, relayOptions(RelayMethod::kRandom)));
  for (MetisGraph graph : {MetisGraph::kBipartiteCut, MetisGraph::kBipartiteVolume, MetisGraph::kClients}) {
    SECTION(metisGraphName(graph)) {
      auto options = relayOptions(RelayMethod::kMetis);
      options.graph = graph;
      const auto metis = ok(placeClients(clients, kUniverse, options));
      INFO(fmt::format("metis {} random {}", metis.trafficRows, random.trafficRows));
      CHECK(double(random.trafficRows) >= 4.0 * double(metis.trafficRows));
      CHECK(metis.trafficRows == trafficBySets(clients, metis.relayOf));
      CHECK(metis.sizeMaxOverMean <= 1.10);
      for (uint32_t size : metis.clientsPerRelay)
        CHECK(size >= 45);  // the refinement's lower bound: ceil(0.9 x 50)
      CHECK(metis.seconds > 0);
    }
  }
}

TEST_CASE("a placement is a function of its input and seed", "[placement]") {
  const auto clients = communities(200, 5, 3);
  for (RelayMethod method : {RelayMethod::kMetis, RelayMethod::kRandom, RelayMethod::kHash}) {
    SECTION(relayMethodName(method)) {
      const auto a = ok(placeClients(clients, kUniverse, relayOptions(method, 8, 11)));
      const auto b = ok(placeClients(clients, kUniverse, relayOptions(method, 8, 11)));
      CHECK(a.relayOf == b.relayOf);
      CHECK(a.trafficRows == b.trafficRows);
    }
  }
  SECTION("random's seed changes the shuffle; hash ignores it") {
    CHECK(ok(placeClients(clients, kUniverse, relayOptions(RelayMethod::kRandom, 8, 1))).relayOf !=
          ok(placeClients(clients, kUniverse, relayOptions(RelayMethod::kRandom, 8, 2))).relayOf);
    CHECK(ok(placeClients(clients, kUniverse, relayOptions(RelayMethod::kHash, 8, 1))).relayOf ==
          ok(placeClients(clients, kUniverse, relayOptions(RelayMethod::kHash, 8, 2))).relayOf);
  }
}

TEST_CASE("the baselines behave as stated", "[placement]") {
  const auto clients = communities(203, 8, 5);
  SECTION("random deals the clients round-robin: sizes differ by at most one") {
    const auto p = ok(placeClients(clients, kUniverse, relayOptions(RelayMethod::kRandom)));
    const auto [lo, hi] = std::minmax_element(p.clientsPerRelay.begin(), p.clientsPerRelay.end());
    CHECK(*hi - *lo <= 1);
    CHECK(p.trafficRows == trafficBySets(clients, p.relayOf));
  }
  SECTION("hash places a client by its id alone: the same relay in any fleet") {
    const auto all = ok(placeClients(clients, kUniverse, relayOptions(RelayMethod::kHash)));
    const std::vector<ClientRows> some(clients.begin() + 100, clients.begin() + 150);
    const auto part = ok(placeClients(some, kUniverse, relayOptions(RelayMethod::kHash)));
    for (std::size_t i = 0; i < some.size(); ++i)
      CHECK(part.relayOf[i] == all.relayOf[100 + i]);
    CHECK(all.trafficRows == trafficBySets(clients, all.relayOf));
    // Sizes are not balanced, only roughly uniform: every relay gets some.
    for (uint32_t size : all.clientsPerRelay)
      CHECK(size > 0);
  }
  SECTION("one relay carries the union of all rows whatever the method") {
    std::set<uint32_t> all;
    for (const auto& c : clients)
      all.insert(c.rows.begin(), c.rows.end());
    for (RelayMethod method : {RelayMethod::kMetis, RelayMethod::kRandom, RelayMethod::kHash})
      CHECK(ok(placeClients(clients, kUniverse, relayOptions(method, 1))).trafficRows == all.size());
  }
}

TEST_CASE("METIS finds the obvious placement of a small fleet", "[placement]") {
  // Two groups of four clients, each group sharing its own rows, and one row (99) all
  // share: the best two relays are the groups, 2 x (3 + 1) rows plus the private ones.
  std::vector<ClientRows> clients;
  for (int i = 0; i < 8; ++i) {
    const uint32_t base = i % 2 == 0 ? 10 : 20;
    clients.push_back({fmt::format("c{}", i), {base, base + 1, base + 2, uint32_t(40 + i), 99}});
  }
  const auto p = ok(placeClients(clients, 100, relayOptions(RelayMethod::kMetis, 2)));
  CHECK(p.trafficRows == 2 * 4 + 8);
  for (int i = 2; i < 8; ++i)
    CHECK(p.relayOf[std::size_t(i)] == p.relayOf[std::size_t(i % 2)]);
  CHECK(p.relayOf[0] != p.relayOf[1]);
  const auto evaluated = ok(evaluateRelays(clients, 100, p.relayOf, 2));
  CHECK(evaluated.trafficRows == p.trafficRows);
  CHECK(evaluated.rowsPerRelay == std::vector<uint64_t>{8, 8});
}

TEST_CASE("the tolerance bounds the relay sizes METIS may leave", "[placement]") {
  // Three communities on two relays: a community must be split.
  const auto clients = communities(90, 3, 9);
  for (double tolerance : {0.0, 0.05, 0.2}) {
    auto options = relayOptions(RelayMethod::kMetis, 2);
    options.tolerance = tolerance;
    const auto p = ok(placeClients(clients, kUniverse, options));
    INFO("tolerance " << tolerance);
    CHECK(*std::max_element(p.clientsPerRelay.begin(), p.clientsPerRelay.end()) <=
          std::max(45.0, std::floor(45 * (1 + tolerance) + 1e-9)));
    CHECK(p.trafficRows == trafficBySets(clients, p.relayOf));
  }
}

TEST_CASE("rows on shards: every method's load adds up; METIS, LPT and range within 10% of balanced", "[placement]") {
  const auto clients = communities(400, 8, 7);
  uint64_t entries = 0;
  std::map<uint32_t, uint64_t> load;
  for (const auto& c : clients) {
    entries += c.rows.size();
    for (uint32_t r : c.rows)
      ++load[r];
  }
  std::map<ShardMethod, double> spans;
  for (ShardMethod method : {ShardMethod::kRange, ShardMethod::kHash, ShardMethod::kLpt, ShardMethod::kMetis}) {
    ShardPlacementOptions options;
    options.shards = 8;
    options.method = method;
    const auto p = ok(placeRows(clients, kUniverse, options));
    INFO(shardMethodName(method) << ": max/mean " << p.loadMaxOverMean);
    REQUIRE(p.rows.size() == load.size());
    std::vector<uint64_t> recount(8, 0);
    for (std::size_t t = 0; t < p.rows.size(); ++t)
      recount[p.shardOf[t]] += load.at(p.rows[t]);
    CHECK(recount == p.loadPerShard);
    const uint64_t total = std::accumulate(recount.begin(), recount.end(), uint64_t{0});
    CHECK(total == entries);
    CHECK(p.loadMaxOverMean == Approx(double(*std::max_element(recount.begin(), recount.end())) / (double(total) / 8)));
    if (method != ShardMethod::kHash) CHECK(p.loadMaxOverMean <= 1.10);
    if (method == ShardMethod::kRange) CHECK(std::is_sorted(p.shardOf.begin(), p.shardOf.end()));
    spans[method] = p.shardsPerClient;
  }
  // Hash and LPT scatter a client's rows over every shard; METIS keeps them on fewer.
  CHECK(spans[ShardMethod::kHash] == Approx(8.0));
  CHECK(spans[ShardMethod::kMetis] < 0.75 * spans[ShardMethod::kHash]);
}

TEST_CASE("placement refuses what it cannot place, naming it", "[placement]") {
  const auto clients = communities(10, 2, 1, 64, 20);
  CHECK(errorOf(placeClients({}, kUniverse, relayOptions(RelayMethod::kMetis))) == "no clients to place");
  CHECK(errorOf(placeClients(clients, kUniverse, relayOptions(RelayMethod::kMetis, 0))) ==
        "the number of relays must be at least 1");
  CHECK(errorOf(placeClients(clients, kUniverse, relayOptions(RelayMethod::kRandom, 11))) ==
        "more relays (11) than clients (10)");
  auto bad = clients;
  bad[3].rows.push_back(uint32_t(kUniverse));
  CHECK(errorOf(placeClients(bad, kUniverse, relayOptions(RelayMethod::kMetis))) ==
        "client 'client-3': row 1048576 is past the universe of 1048576 rows");
  bad = clients;
  std::swap(bad[2].rows[0], bad[2].rows[1]);
  CHECK_THAT(errorOf(placeClients(bad, kUniverse, relayOptions(RelayMethod::kMetis))),
             Catch::StartsWith("client 'client-2': rows not sorted and unique at"));
  bad = clients;
  bad[5].id = "client-1";
  CHECK(errorOf(validateClientRows(bad, kUniverse)) == "client 'client-1' appears twice (#1 and #5)");
  ShardPlacementOptions shards;
  shards.shards = 0;
  CHECK(errorOf(placeRows(clients, kUniverse, shards)) == "the number of shards must be at least 1");
  shards.shards = 100000;
  CHECK_THAT(errorOf(placeRows(clients, kUniverse, shards)),
             Catch::StartsWith("more shards (100000) than rows touched"));
  const std::vector<uint32_t> wrong(10, 3);
  CHECK(errorOf(evaluateRelays(clients, kUniverse, wrong, 3)) == "client 'client-0' on relay 3 of 3");
  CHECK(errorOf(parseRelayMethod("best")) == "the placement method must be one of metis, random, hash, not 'best'");
}

TEST_CASE("the row-set file: one client per line, errors at file:line", "[placement]") {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("starling-placement-{}", ::getpid());
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  SECTION("comments, blank lines, rows in any order with repeats") {
    const auto path = write("ok.txt", "# two clients\n\nalice 9 3 3 7  # trailing comment\n  bob\t2 1\ncarol\n");
    const auto clients = ok(readRowSets(path, 0));
    REQUIRE(clients.size() == 3);
    CHECK(clients[0].id == "alice");
    CHECK(clients[0].rows == std::vector<uint32_t>{3, 7, 9});
    CHECK(clients[1].rows == std::vector<uint32_t>{1, 2});
    CHECK(clients[2].rows.empty());
  }
  SECTION("malformed lines") {
    const auto notNumber = write("a.txt", "alice 1 2\nbob 3 x4\n");
    CHECK(errorOf(readRowSets(notNumber, 0)) ==
          notNumber + ":2: row 'x4' of client 'bob' is not a number in 0..4294967295");
    const auto negative = write("b.txt", "alice -1\n");
    CHECK_THAT(errorOf(readRowSets(negative, 0)), Catch::StartsWith(negative + ":1: row '-1'"));
    const auto tooBig = write("c.txt", "alice 4294967296\n");
    CHECK_THAT(errorOf(readRowSets(tooBig, 0)), Catch::StartsWith(tooBig + ":1: row '4294967296'"));
    const auto twice = write("d.txt", "alice 1\n# x\nalice 2\n");
    CHECK(errorOf(readRowSets(twice, 0)) == twice + ":3: client 'alice' was already given on line 1");
    const auto past = write("e.txt", "alice 1\nbob 5 100\n");
    CHECK(errorOf(readRowSets(past, 100)) == past + ":2: row 100 of client 'bob' is past the universe of 100 rows");
    const auto empty = write("f.txt", "# nothing\n\n");
    CHECK(errorOf(readRowSets(empty, 0)) == empty + ": no clients (expected lines CLIENT_ID ROW ROW ...)");
    CHECK(errorOf(readRowSets((dir / "missing.txt").string(), 0)) ==
          "cannot open row-set file '" + (dir / "missing.txt").string() + "'");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a recomputed placement keeps each part on the relay that holds most of its clients", "[placement]") {
  // Parts 0 and 1 of a new placement hold mostly relay 1's and relay 0's clients now.
  const std::vector<uint32_t> placed{0, 0, 0, 1, 1, 1, 2, 2};
  const std::vector<uint32_t> current{1, 1, 0, 0, 0, 2, 2, 2};
  auto kept = keepRelays(placed, current, 3);
  REQUIRE(kept.isOk());
  CHECK(*kept == std::vector<uint32_t>{1, 1, 1, 0, 0, 0, 2, 2});
  // Brute force over the 6 relabellings: none keeps more clients where they are.
  const auto stay = [&](const std::vector<uint32_t>& relayOf) {
    int n = 0;
    for (std::size_t i = 0; i < relayOf.size(); ++i)
      n += relayOf[i] == current[i];
    return n;
  };
  std::vector<uint32_t> perm{0, 1, 2};
  do {
    std::vector<uint32_t> relabelled(placed.size());
    for (std::size_t i = 0; i < placed.size(); ++i)
      relabelled[i] = perm[placed[i]];
    CHECK(stay(relabelled) <= stay(*kept));
  } while (std::next_permutation(perm.begin(), perm.end()));
  CHECK(keepRelays(placed, std::vector<uint32_t>{0}, 3).status().code() == StatusCode::kInvalidArgument);
  CHECK(keepRelays(std::vector<uint32_t>{3}, std::vector<uint32_t>{0}, 3).status().code() ==
        StatusCode::kInvalidArgument);
}
