#pragma once
// Placement by graph partition (docs/placement.md; ALGORITHMS.md §9 of the design):
// from the clients' row sets (the first-layer / embedding rows their data touches),
// (a) clients among R relays so that the relay <-> coordinator traffic per round, the
// sum over relays of |union of their clients' rows|, is small with relay sizes within
// a tolerance; (b) rows among S coordinator shards with balanced load (a row's load is
// the number of clients touching it). METIS (multilevel k-way partitioning) against
// random and hash baselines, with the metrics to compare them.
//
// Pure functions: no files, no sockets, no global state; any thread. METIS runs with
// a fixed seed, so a placement is a function of its input and options.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::coordinator {

// One client and the rows its data touches (sorted, unique, each < the universe).
struct ClientRows {
  std::string id;
  std::vector<uint32_t> rows;
};

enum class RelayMethod {
  kMetis,   // METIS on a graph of the clients and their rows (MetisGraph)
  kRandom,  // a seeded shuffle dealt round-robin: sizes differ by at most one
  kHash,    // hash of the client id mod R: what a client can compute alone; sizes vary
};

// The graph METIS partitions for RelayMethod::kMetis (docs/placement.md measures them).
enum class MetisGraph {
  // Clients (weight 1) and the rows touched by 2+ clients (weight 0), an edge per
  // (client, row); METIS minimizes the communication volume with each row's size 1
  // and each client's 0, which is the sum over rows of the number of relays whose
  // clients touch it minus one: the traffic, less a constant.
  kBipartiteVolume,
  // The same graph, METIS minimizing the edge cut (rows' edges to other relays).
  kBipartiteCut,
  // Clients only, an edge per pair sharing rows, weighted by the shared rows, each
  // row counting 1/(k - 1) for its k clients; rows of more than 2 n / R clients are
  // left out (their edges grow as k^2 and they span relays whatever the placement).
  kClients,
};

struct RelayPlacementOptions {
  uint32_t relays = 8;
  RelayMethod method = RelayMethod::kMetis;
  // The default: as good as the others on the measured instances, and the fastest
  // (docs/placement.md).
  MetisGraph graph = MetisGraph::kBipartiteCut;
  // METIS and the fix-up after it keep every relay at most (1 + tolerance) x n / R
  // clients (rounded up to at least ceil(n / R)). Random meets it by construction;
  // hash does not try.
  double tolerance = 0.10;
  uint64_t seed = 1;  // random's shuffle and METIS's seed
  // After METIS: passes of greedy single-client moves that lower the traffic itself
  // and keep every relay within [ceil((1 - tolerance) n / R) or less, the cap]
  // (0: none). Needs R x (rows touched) counters; skipped above 2^27 of them.
  int refinePasses = 8;
};

struct RelayPlacement {
  std::vector<uint32_t> relayOf;          // per client, in input order
  std::vector<uint32_t> clientsPerRelay;  // per relay
  std::vector<uint64_t> rowsPerRelay;     // per relay: |union of its clients' rows|
  uint64_t trafficRows = 0;               // the sum of rowsPerRelay: rows per round each way
  double sizeMaxOverMean = 0;             // max clients per relay / (n / R): 1 is balanced
  // placeWeightedClients(): the heaviest relay's weight over the mean (else as above).
  double weightMaxOverMean = 0;
  double seconds = 0;  // building the graph and partitioning
};

enum class ShardMethod {
  kRange,  // contiguous ranges of row ids, cut where the cumulative load crosses i/S
  kHash,   // a hash of the row id mod S
  kLpt,    // longest processing time: heaviest row first onto the least loaded shard
  // METIS on the bipartite graph, rows weighted by load, minimizing the communication
  // volume (a client's rows on few shards); then the heaviest rows that fit move out
  // of shards above (1 + tolerance) x the mean load.
  kMetis,
};

struct ShardPlacementOptions {
  uint32_t shards = 4;
  ShardMethod method = ShardMethod::kMetis;
  double tolerance = 0.10;  // kMetis's load bound: max / mean - 1
  uint64_t seed = 1;
};

struct ShardPlacement {
  std::vector<uint32_t> rows;          // the rows some client touches, ascending
  std::vector<uint32_t> shardOf;       // per entry of rows
  std::vector<uint64_t> loadPerShard;  // per shard: the sum of its rows' loads
  double loadMaxOverMean = 0;          // 1 is balanced
  double shardsPerClient = 0;          // mean number of shards a client's rows fall in
  double seconds = 0;
};

// Checks the input: at least one client, ids unique and non-empty, rows sorted,
// unique and < universe. The errors name the client.
Status validateClientRows(std::span<const ClientRows> clients, uint64_t universe);

// Places clients on relays. Errors: invalid input, no relays, more relays than
// clients, a METIS failure.
Result<RelayPlacement> placeClients(std::span<const ClientRows> clients, uint64_t universe,
                                    const RelayPlacementOptions& options);

// placeClients() balancing weights instead of counts: weights[i] is client i's (e.g.
// the non-zeros of an example, the compute it costs); METIS, the cap and the
// refinement bound each relay's total weight by (1 + tolerance) x the mean (best effort
// where one client outweighs the room left), random deals the shuffled clients each to
// the lightest relay, hash ignores the weights. Empty weights: placeClients(). Errors:
// those of placeClients(), not one weight per client, a total of 0 or past 2^31 - 1.
Result<RelayPlacement> placeWeightedClients(std::span<const ClientRows> clients, std::span<const uint32_t> weights,
                                            uint64_t universe, const RelayPlacementOptions& options);

// The metrics of a given assignment (relayOf: one relay < relays per client);
// seconds is 0.
Result<RelayPlacement> evaluateRelays(std::span<const ClientRows> clients, uint64_t universe,
                                      std::span<const uint32_t> relayOf, uint32_t relays);

// A new placement's parts as the relays that hold most of their clients now: METIS
// numbers its parts arbitrarily, and a placement applied as numbered would move clients
// that could stay. placed[i] and current[i] are client i's part and relay (< relays);
// the parts go to relays greedily, largest overlap first (ties: lowest part, then
// relay). Returns placed relabelled. kInvalidArgument for spans of different sizes or a
// number past relays.
Result<std::vector<uint32_t>> keepRelays(std::span<const uint32_t> placed, std::span<const uint32_t> current,
                                         uint32_t relays);

// Places the touched rows on shards. Errors: invalid input, no shards, more shards
// than touched rows, a METIS failure.
Result<ShardPlacement> placeRows(std::span<const ClientRows> clients, uint64_t universe,
                                 const ShardPlacementOptions& options);

// placeRows() with a weight per (client, row) pair: weights[i][k] is the load that
// clients[i].rows[k] adds to its row (placeRows() counts 1 for each), e.g. the bytes a
// worker pulls and pushes of that row per iteration (tests/harness/two_step.hpp). A
// zero weight keeps the pair in the graph (and in shardsPerClient) but adds no load.
// Errors: those of placeRows(), weights not shaped like the rows, a total of 0 or past
// 2^31 - 1.
Result<ShardPlacement> placeWeightedRows(std::span<const ClientRows> clients,
                                         std::span<const std::vector<uint32_t>> weights, uint64_t universe,
                                         const ShardPlacementOptions& options);

const char* relayMethodName(RelayMethod method);  // "metis", "random", "hash"
const char* shardMethodName(ShardMethod method);  // "range", "hash", "lpt", "metis"
const char* metisGraphName(MetisGraph graph);     // "bipartite-volume", "bipartite-cut", "clients"
Result<RelayMethod> parseRelayMethod(const std::string& name);
Result<ShardMethod> parseShardMethod(const std::string& name);
Result<MetisGraph> parseMetisGraph(const std::string& name);

}  // namespace starling::coordinator
