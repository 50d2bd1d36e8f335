#include "placement.hpp"

#include <metis.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>
#include <unordered_map>
#include <utility>

#include "starling/util/mix.hpp"

namespace starling::coordinator {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The rows some client touches, renumbered 0..T-1 in ascending order, and each
// client's rows in that numbering (still ascending).
struct Compact {
  std::vector<uint32_t> rows;                // dense id -> row
  std::vector<std::vector<uint32_t>> dense;  // per client
  std::vector<uint32_t> load;                // per dense id: clients touching it
};

// weights, when not empty, holds per client one weight per entry of its rows: the
// load a (client, row) pair adds (1 each when empty).
Compact compact(std::span<const ClientRows> clients, std::span<const std::vector<uint32_t>> weights = {}) {
  Compact c;
  std::size_t total = 0;
  for (const auto& client : clients)
    total += client.rows.size();
  c.rows.reserve(total);
  for (const auto& client : clients)
    c.rows.insert(c.rows.end(), client.rows.begin(), client.rows.end());
  std::sort(c.rows.begin(), c.rows.end());
  c.rows.erase(std::unique(c.rows.begin(), c.rows.end()), c.rows.end());
  c.load.assign(c.rows.size(), 0);
  c.dense.resize(clients.size());
  for (std::size_t i = 0; i < clients.size(); ++i) {
    auto& d = c.dense[i];
    d.reserve(clients[i].rows.size());
    auto from = c.rows.begin();
    for (uint32_t row : clients[i].rows) {
      from = std::lower_bound(from, c.rows.end(), row);
      const auto id = static_cast<uint32_t>(from - c.rows.begin());
      c.load[id] += weights.empty() ? 1 : weights[i][d.size()];
      d.push_back(id);
    }
  }
  return c;
}

// A graph in METIS's compressed form; vwgt/vsize/adjwgt empty means "all 1".
struct MetisInput {
  std::vector<idx_t> xadj{0};
  std::vector<idx_t> adjncy;
  std::vector<idx_t> vwgt;
  std::vector<idx_t> vsize;
  std::vector<idx_t> adjwgt;
};

// Partitions g into parts; every vertex's part in [0, parts).
Result<std::vector<idx_t>> metisPartition(MetisInput& g, uint32_t parts, double tolerance, uint64_t seed, bool volume) {
  if (g.adjncy.size() > std::size_t(std::numeric_limits<idx_t>::max()))
    return Status(StatusCode::kOutOfRange, "a graph of " + std::to_string(g.adjncy.size()) +
                                               " edge ends is past METIS's 32-bit indices: place fewer clients");
  idx_t n = static_cast<idx_t>(g.xadj.size() - 1);
  std::vector<idx_t> part(static_cast<std::size_t>(n), 0);
  if (parts <= 1 || n == 0) return part;
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_OBJTYPE] = volume ? METIS_OBJTYPE_VOL : METIS_OBJTYPE_CUT;
  options[METIS_OPTION_SEED] = static_cast<idx_t>(seed & 0x7fffffff);
  // ufactor is the allowed imbalance in thousandths (1 + ufactor / 1000).
  options[METIS_OPTION_UFACTOR] = static_cast<idx_t>(std::max(1.0, std::floor(tolerance * 1000)));
  options[METIS_OPTION_NUMBERING] = 0;
  idx_t ncon = 1;
  idx_t nparts = static_cast<idx_t>(parts);
  idx_t objval = 0;
  auto data = [](std::vector<idx_t>& v) { return v.empty() ? nullptr : v.data(); };
  const int rc = METIS_PartGraphKway(&n, &ncon, g.xadj.data(), data(g.adjncy), data(g.vwgt), data(g.vsize),
                                     data(g.adjwgt), &nparts, nullptr, nullptr, options, &objval, part.data());
  if (rc != METIS_OK)
    return Status(StatusCode::kInternal, "METIS_PartGraphKway failed (" +
                                             std::string(rc == METIS_ERROR_MEMORY  ? "out of memory"
                                                         : rc == METIS_ERROR_INPUT ? "input error"
                                                                                   : "error") +
                                             ") on a graph of " + std::to_string(n) + " vertices");
  return part;
}

// The bipartite graph: vertices 0..n-1 the clients, then the rows for which keep[t]
// holds. Weights and sizes are set by the caller.
MetisInput bipartite(const Compact& c, const std::vector<bool>& keep, std::vector<idx_t>& vertexOfRow) {
  const std::size_t n = c.dense.size();
  vertexOfRow.assign(c.rows.size(), -1);
  idx_t next = static_cast<idx_t>(n);
  for (std::size_t t = 0; t < c.rows.size(); ++t)
    if (keep[t]) vertexOfRow[t] = next++;
  std::vector<std::vector<idx_t>> clientsOfRow(static_cast<std::size_t>(next) - n);
  MetisInput g;
  g.xadj.reserve(static_cast<std::size_t>(next) + 1);
  for (std::size_t i = 0; i < n; ++i) {
    for (uint32_t t : c.dense[i])
      if (vertexOfRow[t] >= 0) {
        g.adjncy.push_back(vertexOfRow[t]);
        clientsOfRow[static_cast<std::size_t>(vertexOfRow[t]) - n].push_back(static_cast<idx_t>(i));
      }
    g.xadj.push_back(static_cast<idx_t>(g.adjncy.size()));
  }
  for (const auto& list : clientsOfRow) {
    g.adjncy.insert(g.adjncy.end(), list.begin(), list.end());
    g.xadj.push_back(static_cast<idx_t>(g.adjncy.size()));
  }
  return g;
}

// The clients' graph: an edge per pair sharing rows of at most maxLoad clients, each
// shared row adding kScale / (k - 1) (k its clients) to the pair's weight.
MetisInput clientGraph(const Compact& c, uint32_t maxLoad) {
  constexpr uint32_t kScale = 840;  // divisible by 1..8: small k get exact shares
  const std::size_t n = c.dense.size();
  std::vector<std::vector<uint32_t>> clientsOfRow(c.rows.size());
  for (std::size_t i = 0; i < n; ++i)
    for (uint32_t t : c.dense[i])
      if (c.load[t] >= 2 && c.load[t] <= maxLoad) clientsOfRow[t].push_back(static_cast<uint32_t>(i));
  std::unordered_map<uint64_t, uint32_t> weight;
  for (const auto& list : clientsOfRow) {
    if (list.size() < 2) continue;
    const uint32_t w = std::max<uint32_t>(1, kScale / static_cast<uint32_t>(list.size() - 1));
    for (std::size_t a = 0; a < list.size(); ++a)
      for (std::size_t b = a + 1; b < list.size(); ++b)
        weight[uint64_t(list[a]) * n + list[b]] += w;
  }
  std::vector<std::vector<std::pair<idx_t, idx_t>>> adjacency(n);
  for (const auto& [key, w] : weight) {
    const auto a = static_cast<std::size_t>(key / n), b = static_cast<std::size_t>(key % n);
    adjacency[a].emplace_back(static_cast<idx_t>(b), static_cast<idx_t>(w));
    adjacency[b].emplace_back(static_cast<idx_t>(a), static_cast<idx_t>(w));
  }
  MetisInput g;
  for (auto& list : adjacency) {
    std::sort(list.begin(), list.end());  // the hash map's order must not reach METIS
    for (const auto& [v, w] : list) {
      g.adjncy.push_back(v);
      g.adjwgt.push_back(w);
    }
    g.xadj.push_back(static_cast<idx_t>(g.adjncy.size()));
  }
  return g;
}

// A client's weight in the balance: 1 each, or weights[i].
struct Weights {
  std::span<const uint32_t> weights;
  uint64_t operator()(std::size_t i) const { return weights.empty() ? 1 : weights[i]; }
};

// Moves clients out of relays above cap, each time the client of the fullest relay
// whose move to the emptiest relay adds the fewest rows to the traffic (with weights,
// among the clients that keep the emptiest relay within cap; none: it stops).
void enforceCap(const Compact& c, std::vector<uint32_t>& relayOf, uint32_t relays, uint64_t cap, Weights weight) {
  std::vector<uint64_t> size(relays, 0);
  for (std::size_t i = 0; i < relayOf.size(); ++i)
    size[relayOf[i]] += weight(i);
  std::vector<uint32_t> countInSource(c.rows.size());
  std::vector<bool> inTarget(c.rows.size());
  for (;;) {
    const auto source = static_cast<uint32_t>(std::max_element(size.begin(), size.end()) - size.begin());
    if (size[source] <= cap) return;
    const auto target = static_cast<uint32_t>(std::min_element(size.begin(), size.end()) - size.begin());
    std::fill(countInSource.begin(), countInSource.end(), 0);
    std::fill(inTarget.begin(), inTarget.end(), false);
    for (std::size_t i = 0; i < relayOf.size(); ++i)
      for (uint32_t t : c.dense[i]) {
        if (relayOf[i] == source) ++countInSource[t];
        if (relayOf[i] == target) inTarget[t] = true;
      }
    std::size_t best = relayOf.size();
    int64_t bestCost = 0;
    for (std::size_t i = 0; i < relayOf.size(); ++i) {
      if (relayOf[i] != source || size[target] + weight(i) > std::max(cap, size[target] + 1)) continue;
      int64_t cost = 0;
      for (uint32_t t : c.dense[i])
        cost += (inTarget[t] ? 0 : 1) - (countInSource[t] == 1 ? 1 : 0);
      if (best == relayOf.size() || cost < bestCost) {
        best = i;
        bestCost = cost;
      }
    }
    if (best == relayOf.size()) return;
    relayOf[best] = target;
    size[source] -= weight(best);
    size[target] += weight(best);
  }
}

// Greedy refinement on the traffic itself: passes over the clients, moving each to
// the relay where it adds the fewest rows less what leaving its relay saves, when that
// gains and both relays stay within [lower, cap] clients; stops after a pass without a
// move or after maxPasses. counts[r * T + t] is how many clients of relay r touch t.
// Memory: R x T counters (skipped above kMaxRefineCounters).
void refine(const Compact& c, std::vector<uint32_t>& relayOf, uint32_t relays, uint64_t lower, uint64_t cap,
            int maxPasses, Weights weight) {
  constexpr std::size_t kMaxRefineCounters = std::size_t{1} << 27;
  const std::size_t rows = c.rows.size();
  if (relays < 2 || std::size_t(relays) * rows > kMaxRefineCounters) return;
  std::vector<uint32_t> counts(std::size_t(relays) * rows, 0);
  std::vector<uint64_t> size(relays, 0);
  for (std::size_t i = 0; i < relayOf.size(); ++i) {
    size[relayOf[i]] += weight(i);
    for (uint32_t t : c.dense[i])
      ++counts[std::size_t(relayOf[i]) * rows + t];
  }
  std::vector<int64_t> added(relays);
  for (int pass = 0; pass < maxPasses; ++pass) {
    bool moved = false;
    for (std::size_t i = 0; i < relayOf.size(); ++i) {
      const uint32_t from = relayOf[i];
      if (size[from] < lower + weight(i)) continue;
      int64_t saved = 0;
      std::fill(added.begin(), added.end(), 0);
      for (uint32_t t : c.dense[i]) {
        if (counts[std::size_t(from) * rows + t] == 1) ++saved;
        for (uint32_t r = 0; r < relays; ++r)
          if (counts[std::size_t(r) * rows + t] == 0) ++added[r];
      }
      uint32_t best = from;
      int64_t bestGain = 0;
      for (uint32_t r = 0; r < relays; ++r)
        if (r != from && size[r] + weight(i) <= cap && saved - added[r] > bestGain) {
          best = r;
          bestGain = saved - added[r];
        }
      if (best == from) continue;
      for (uint32_t t : c.dense[i]) {
        --counts[std::size_t(from) * rows + t];
        ++counts[std::size_t(best) * rows + t];
      }
      size[from] -= weight(i);
      size[best] += weight(i);
      relayOf[i] = best;
      moved = true;
    }
    if (!moved) return;
  }
}

// Moves rows out of shards loaded above cap, heaviest fitting row first, each onto the
// least loaded shard while it stays within cap: few rows moved. Best effort when a
// single row outweighs the room left.
void enforceLoadCap(const Compact& c, std::vector<uint32_t>& shardOf, uint32_t shards, uint64_t cap) {
  std::vector<uint64_t> load(shards, 0);
  std::vector<std::vector<uint32_t>> members(shards);
  for (std::size_t t = 0; t < shardOf.size(); ++t) {
    load[shardOf[t]] += c.load[t];
    members[shardOf[t]].push_back(static_cast<uint32_t>(t));
  }
  for (uint32_t a = 0; a < shards; ++a) {
    if (load[a] <= cap) continue;
    auto& rows = members[a];
    std::stable_sort(rows.begin(), rows.end(), [&](uint32_t x, uint32_t y) { return c.load[x] > c.load[y]; });
    for (uint32_t t : rows) {
      if (load[a] <= cap) break;
      const auto b = static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
      if (b == a || load[b] + c.load[t] > cap) continue;
      shardOf[t] = b;
      load[a] -= c.load[t];
      load[b] += c.load[t];
    }
  }
}

// Each item of order in turn onto the least loaded of bins (the lowest of equals), a
// bin's load being the weight(item) of its items; sets binOf[item]. Longest processing
// time first when order is by weight, descending.
template <typename Weight>
void dealToLightest(std::span<const uint32_t> order, uint32_t bins, Weight weight, std::vector<uint32_t>& binOf) {
  using Entry = std::pair<uint64_t, uint32_t>;  // (load, bin): the least loaded, then lowest, on top
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (uint32_t b = 0; b < bins; ++b)
    heap.emplace(0, b);
  for (uint32_t item : order) {
    auto [load, b] = heap.top();
    heap.pop();
    binOf[item] = b;
    heap.emplace(load + weight(item), b);
  }
}

uint64_t hashId(const std::string& id) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then the project's mixer
  for (unsigned char ch : id)
    h = (h ^ ch) * 0x100000001b3ull;
  return mix64(h);
}

RelayPlacement relayMetrics(const Compact& c, std::span<const uint32_t> relayOf, uint32_t relays) {
  RelayPlacement p;
  p.relayOf.assign(relayOf.begin(), relayOf.end());
  p.clientsPerRelay.assign(relays, 0);
  p.rowsPerRelay.assign(relays, 0);
  std::vector<std::vector<std::size_t>> members(relays);
  for (std::size_t i = 0; i < relayOf.size(); ++i)
    members[relayOf[i]].push_back(i);
  std::vector<uint32_t> seenBy(c.rows.size(), 0);  // relay + 1 that last counted the row
  for (uint32_t r = 0; r < relays; ++r) {
    p.clientsPerRelay[r] = static_cast<uint32_t>(members[r].size());
    for (std::size_t i : members[r])
      for (uint32_t t : c.dense[i])
        if (seenBy[t] != r + 1) {
          seenBy[t] = r + 1;
          ++p.rowsPerRelay[r];
        }
    p.trafficRows += p.rowsPerRelay[r];
  }
  const double mean = double(relayOf.size()) / relays;
  p.sizeMaxOverMean = *std::max_element(p.clientsPerRelay.begin(), p.clientsPerRelay.end()) / mean;
  p.weightMaxOverMean = p.sizeMaxOverMean;
  return p;
}

Status checkRelays(std::size_t clients, uint32_t relays) {
  if (relays == 0) return Status(StatusCode::kInvalidArgument, "the number of relays must be at least 1");
  if (relays > clients)
    return Status(StatusCode::kInvalidArgument,
                  "more relays (" + std::to_string(relays) + ") than clients (" + std::to_string(clients) + ")");
  return Status::ok();
}

}  // namespace

Status validateClientRows(std::span<const ClientRows> clients, uint64_t universe) {
  if (clients.empty()) return Status(StatusCode::kInvalidArgument, "no clients to place");
  std::unordered_map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    const auto& client = clients[i];
    if (client.id.empty()) return Status(StatusCode::kInvalidArgument, "client #" + std::to_string(i) + " has no id");
    if (auto [it, fresh] = seen.emplace(client.id, i); !fresh)
      return Status(StatusCode::kInvalidArgument, "client '" + client.id + "' appears twice (#" +
                                                      std::to_string(it->second) + " and #" + std::to_string(i) + ")");
    for (std::size_t j = 0; j < client.rows.size(); ++j) {
      if (client.rows[j] >= universe)
        return Status(StatusCode::kOutOfRange, "client '" + client.id + "': row " + std::to_string(client.rows[j]) +
                                                   " is past the universe of " + std::to_string(universe) + " rows");
      if (j > 0 && client.rows[j] <= client.rows[j - 1])
        return Status(StatusCode::kInvalidArgument, "client '" + client.id + "': rows not sorted and unique at " +
                                                        std::to_string(client.rows[j - 1]) + ", " +
                                                        std::to_string(client.rows[j]));
    }
  }
  return Status::ok();
}

Result<RelayPlacement> evaluateRelays(std::span<const ClientRows> clients, uint64_t universe,
                                      std::span<const uint32_t> relayOf, uint32_t relays) {
  STARLING_RETURN_IF_ERROR(validateClientRows(clients, universe));
  STARLING_RETURN_IF_ERROR(checkRelays(clients.size(), relays));
  if (relayOf.size() != clients.size())
    return Status(StatusCode::kInvalidArgument, "an assignment of " + std::to_string(relayOf.size()) + " clients for " +
                                                    std::to_string(clients.size()));
  for (std::size_t i = 0; i < relayOf.size(); ++i)
    if (relayOf[i] >= relays)
      return Status(StatusCode::kOutOfRange, "client '" + clients[i].id + "' on relay " + std::to_string(relayOf[i]) +
                                                 " of " + std::to_string(relays));
  return relayMetrics(compact(clients), relayOf, relays);
}

Result<RelayPlacement> placeClients(std::span<const ClientRows> clients, uint64_t universe,
                                    const RelayPlacementOptions& options) {
  return placeWeightedClients(clients, {}, universe, options);
}

Result<RelayPlacement> placeWeightedClients(std::span<const ClientRows> clients, std::span<const uint32_t> weights,
                                            uint64_t universe, const RelayPlacementOptions& options) {
  STARLING_RETURN_IF_ERROR(validateClientRows(clients, universe));
  STARLING_RETURN_IF_ERROR(checkRelays(clients.size(), options.relays));
  if (!(options.tolerance >= 0)) return Status(StatusCode::kInvalidArgument, "the tolerance must be >= 0");
  const Weights weight{weights};
  uint64_t totalWeight = clients.size();
  if (!weights.empty()) {
    if (weights.size() != clients.size())
      return Status(StatusCode::kInvalidArgument,
                    std::to_string(weights.size()) + " weights for " + std::to_string(clients.size()) + " clients");
    totalWeight = std::accumulate(weights.begin(), weights.end(), uint64_t{0});
    if (totalWeight == 0) return Status(StatusCode::kInvalidArgument, "every weight is 0: nothing to balance");
    // The weights are METIS vertex weights (idx_t, 32 bits): their sum must fit.
    if (totalWeight > uint64_t(std::numeric_limits<int32_t>::max()))
      return Status(StatusCode::kOutOfRange,
                    "the weights add up to " + std::to_string(totalWeight) + ", past 2^31 - 1");
  }
  const auto start = Clock::now();
  const Compact c = compact(clients);
  const std::size_t n = clients.size();
  const uint32_t relays = options.relays;
  std::vector<uint32_t> relayOf(n, 0);
  switch (options.method) {
    case RelayMethod::kRandom: {
      std::vector<uint32_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      uint64_t state = options.seed;
      for (std::size_t i = n; i > 1; --i)
        std::swap(order[i - 1], order[splitmixNext(state) % i]);
      if (weights.empty()) {
        for (std::size_t i = 0; i < n; ++i)
          relayOf[order[i]] = static_cast<uint32_t>(i % relays);
        break;
      }
      dealToLightest(order, relays, weight, relayOf);
      break;
    }
    case RelayMethod::kHash:
      for (std::size_t i = 0; i < n; ++i)
        relayOf[i] = static_cast<uint32_t>(hashId(clients[i].id) % relays);
      break;
    case RelayMethod::kMetis: {
      MetisInput g;
      const bool volume = options.graph == MetisGraph::kBipartiteVolume;
      if (options.graph == MetisGraph::kClients) {
        g = clientGraph(c, static_cast<uint32_t>(std::max<std::size_t>(2, 2 * n / relays)));
        if (!weights.empty()) g.vwgt.assign(weights.begin(), weights.end());
      } else {
        // A row of one client costs one row wherever that client goes: left out.
        std::vector<bool> keep(c.rows.size());
        for (std::size_t t = 0; t < keep.size(); ++t)
          keep[t] = c.load[t] >= 2;
        std::vector<idx_t> vertexOfRow;
        g = bipartite(c, keep, vertexOfRow);
        const std::size_t vertices = g.xadj.size() - 1;
        g.vwgt.assign(vertices, 0);
        for (std::size_t i = 0; i < n; ++i)
          g.vwgt[i] = static_cast<idx_t>(weight(i));
        if (volume) {
          g.vsize.assign(vertices, 1);
          std::fill(g.vsize.begin(), g.vsize.begin() + static_cast<std::ptrdiff_t>(n), 0);
        }
      }
      auto part = metisPartition(g, relays, options.tolerance, options.seed, volume);
      if (!part) return part.status();
      for (std::size_t i = 0; i < n; ++i)
        relayOf[i] = static_cast<uint32_t>((*part)[i]);
      const auto mean = double(totalWeight) / relays;
      const auto cap = std::max(static_cast<uint64_t>(std::ceil(mean)),
                                static_cast<uint64_t>(std::floor(mean * (1 + options.tolerance) + 1e-9)));
      enforceCap(c, relayOf, relays, cap, weight);
      if (options.refinePasses > 0) {
        const auto lower = std::min(static_cast<uint64_t>(std::floor(mean)),
                                    static_cast<uint64_t>(std::ceil(mean * (1 - options.tolerance) - 1e-9)));
        refine(c, relayOf, relays, lower, cap, options.refinePasses, weight);
      }
      break;
    }
  }
  const double seconds = secondsSince(start);
  RelayPlacement p = relayMetrics(c, relayOf, relays);
  p.seconds = seconds;
  if (!weights.empty()) {
    std::vector<uint64_t> load(relays, 0);
    for (std::size_t i = 0; i < n; ++i)
      load[relayOf[i]] += weight(i);
    p.weightMaxOverMean = double(*std::max_element(load.begin(), load.end())) / (double(totalWeight) / relays);
  }
  return p;
}

Result<ShardPlacement> placeRows(std::span<const ClientRows> clients, uint64_t universe,
                                 const ShardPlacementOptions& options) {
  return placeWeightedRows(clients, {}, universe, options);
}

Result<ShardPlacement> placeWeightedRows(std::span<const ClientRows> clients,
                                         std::span<const std::vector<uint32_t>> weights, uint64_t universe,
                                         const ShardPlacementOptions& options) {
  STARLING_RETURN_IF_ERROR(validateClientRows(clients, universe));
  if (!weights.empty()) {
    if (weights.size() != clients.size())
      return Status(StatusCode::kInvalidArgument, "weights for " + std::to_string(weights.size()) + " clients, not " +
                                                      std::to_string(clients.size()));
    uint64_t total = 0;
    for (std::size_t i = 0; i < clients.size(); ++i) {
      if (weights[i].size() != clients[i].rows.size())
        return Status(StatusCode::kInvalidArgument, "client '" + clients[i].id +
                                                        "': " + std::to_string(weights[i].size()) + " weights for " +
                                                        std::to_string(clients[i].rows.size()) + " rows");
      for (uint32_t w : weights[i])
        total += w;
    }
    // A row's load is a METIS vertex weight (idx_t, 32 bits): their sum must fit.
    if (total > uint64_t(std::numeric_limits<int32_t>::max()))
      return Status(StatusCode::kOutOfRange, "the weights add up to " + std::to_string(total) + ", past 2^31 - 1");
    if (total == 0) return Status(StatusCode::kInvalidArgument, "every weight is 0: no load to balance");
  }
  const uint32_t shards = options.shards;
  if (shards == 0) return Status(StatusCode::kInvalidArgument, "the number of shards must be at least 1");
  if (!(options.tolerance >= 0)) return Status(StatusCode::kInvalidArgument, "the tolerance must be >= 0");
  const auto start = Clock::now();
  const Compact c = compact(clients, weights);
  const std::size_t rows = c.rows.size();
  if (shards > rows)
    return Status(StatusCode::kInvalidArgument,
                  "more shards (" + std::to_string(shards) + ") than rows touched (" + std::to_string(rows) + ")");
  const uint64_t total = std::accumulate(c.load.begin(), c.load.end(), uint64_t{0});
  std::vector<uint32_t> shardOf(rows, 0);
  switch (options.method) {
    case ShardMethod::kRange: {
      uint64_t before = 0;
      for (std::size_t t = 0; t < rows; ++t) {
        // The shard in which the row's load midpoint falls: non-decreasing in t.
        const double mid = double(before) + c.load[t] / 2.0;
        shardOf[t] = std::min(shards - 1, static_cast<uint32_t>(mid * shards / double(total)));
        before += c.load[t];
      }
      break;
    }
    case ShardMethod::kHash:
      for (std::size_t t = 0; t < rows; ++t)
        shardOf[t] = static_cast<uint32_t>(mix64(c.rows[t]) % shards);
      break;
    case ShardMethod::kLpt: {
      std::vector<uint32_t> order(rows);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return c.load[a] > c.load[b]; });
      dealToLightest(
          order, shards, [&](std::size_t t) { return uint64_t{c.load[t]}; }, shardOf);
      break;
    }
    case ShardMethod::kMetis: {
      std::vector<idx_t> vertexOfRow;
      MetisInput g = bipartite(c, std::vector<bool>(rows, true), vertexOfRow);
      const std::size_t n = clients.size();
      g.vwgt.assign(n, 0);
      g.vsize.assign(n, 1);
      for (std::size_t t = 0; t < rows; ++t) {
        g.vwgt.push_back(static_cast<idx_t>(c.load[t]));
        g.vsize.push_back(0);
      }
      auto part = metisPartition(g, shards, options.tolerance, options.seed, true);
      if (!part) return part.status();
      for (std::size_t t = 0; t < rows; ++t)
        shardOf[t] = static_cast<uint32_t>((*part)[static_cast<std::size_t>(vertexOfRow[t])]);
      enforceLoadCap(c, shardOf, shards,
                     static_cast<uint64_t>(std::floor(double(total) / shards * (1 + options.tolerance))));
      break;
    }
  }
  ShardPlacement p;
  p.seconds = secondsSince(start);
  p.loadPerShard.assign(shards, 0);
  for (std::size_t t = 0; t < rows; ++t)
    p.loadPerShard[shardOf[t]] += c.load[t];
  p.loadMaxOverMean =
      double(*std::max_element(p.loadPerShard.begin(), p.loadPerShard.end())) / (double(total) / shards);
  std::vector<std::size_t> seenBy(shards, clients.size());
  uint64_t spans = 0;
  for (std::size_t i = 0; i < clients.size(); ++i)
    for (uint32_t t : c.dense[i])
      if (seenBy[shardOf[t]] != i) {
        seenBy[shardOf[t]] = i;
        ++spans;
      }
  p.shardsPerClient = double(spans) / double(clients.size());
  p.rows = c.rows;
  p.shardOf = std::move(shardOf);
  return p;
}

namespace {

// Each option's name, in the order --help lists them.
template <typename E>
struct Named {
  E value;
  const char* name;
};
constexpr Named<RelayMethod> kRelayMethods[] = {
    {RelayMethod::kMetis, "metis"}, {RelayMethod::kRandom, "random"}, {RelayMethod::kHash, "hash"}};
constexpr Named<ShardMethod> kShardMethods[] = {{ShardMethod::kRange, "range"},
                                                {ShardMethod::kHash, "hash"},
                                                {ShardMethod::kLpt, "lpt"},
                                                {ShardMethod::kMetis, "metis"}};
constexpr Named<MetisGraph> kMetisGraphs[] = {{MetisGraph::kBipartiteVolume, "bipartite-volume"},
                                              {MetisGraph::kBipartiteCut, "bipartite-cut"},
                                              {MetisGraph::kClients, "clients"}};

template <typename E, std::size_t N>
const char* nameIn(const Named<E> (&table)[N], E value) {
  for (const auto& entry : table)
    if (entry.value == value) return entry.name;
  return "?";
}

template <typename E, std::size_t N>
Result<E> parseIn(const Named<E> (&table)[N], const std::string& name, const char* what) {
  std::string choices;
  for (const auto& entry : table) {
    if (name == entry.name) return entry.value;
    choices += (choices.empty() ? "" : ", ") + std::string(entry.name);
  }
  return Status(StatusCode::kInvalidArgument,
                std::string(what) + " must be one of " + choices + ", not '" + name + "'");
}

}  // namespace

const char* relayMethodName(RelayMethod method) {
  return nameIn(kRelayMethods, method);
}
const char* shardMethodName(ShardMethod method) {
  return nameIn(kShardMethods, method);
}
const char* metisGraphName(MetisGraph graph) {
  return nameIn(kMetisGraphs, graph);
}
Result<RelayMethod> parseRelayMethod(const std::string& name) {
  return parseIn(kRelayMethods, name, "the placement method");
}
Result<ShardMethod> parseShardMethod(const std::string& name) {
  return parseIn(kShardMethods, name, "the shard method");
}
Result<MetisGraph> parseMetisGraph(const std::string& name) {
  return parseIn(kMetisGraphs, name, "the METIS graph");
}

Result<std::vector<uint32_t>> keepRelays(std::span<const uint32_t> placed, std::span<const uint32_t> current,
                                         uint32_t relays) {
  if (placed.size() != current.size())
    return Status(StatusCode::kInvalidArgument, std::to_string(placed.size()) + " placed clients, " +
                                                    std::to_string(current.size()) + " current ones");
  std::vector<std::vector<uint32_t>> overlap(relays, std::vector<uint32_t>(relays, 0));
  for (std::size_t i = 0; i < placed.size(); ++i) {
    if (placed[i] >= relays || current[i] >= relays)
      return Status(StatusCode::kInvalidArgument,
                    "client " + std::to_string(i) + " is on relay " + std::to_string(current[i]) + " and placed on " +
                        std::to_string(placed[i]) + ", of " + std::to_string(relays) + " relays");
    ++overlap[placed[i]][current[i]];
  }
  std::vector<uint32_t> relayOfPart(relays, relays);
  std::vector<bool> taken(relays, false);
  for (uint32_t step = 0; step < relays; ++step) {
    uint32_t bestPart = 0, bestRelay = 0;
    int64_t best = -1;
    for (uint32_t p = 0; p < relays; ++p)
      for (uint32_t r = 0; r < relays; ++r)
        if (relayOfPart[p] == relays && !taken[r] && int64_t(overlap[p][r]) > best) {
          best = overlap[p][r];
          bestPart = p;
          bestRelay = r;
        }
    relayOfPart[bestPart] = bestRelay;
    taken[bestRelay] = true;
  }
  std::vector<uint32_t> out(placed.size());
  for (std::size_t i = 0; i < placed.size(); ++i)
    out[i] = relayOfPart[placed[i]];
  return out;
}

}  // namespace starling::coordinator
