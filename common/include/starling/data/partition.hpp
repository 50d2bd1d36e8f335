#pragma once
// Partitioners: split a dataset's examples among simulated clients.
//
// Every partitioner returns one list of example indices per client. Each index in
// [0, n) appears in exactly one list, and each list is sorted ascending. The result
// depends only on the arguments: the randomness comes from a SplitMix64-seeded
// xoshiro256** generator and samplers written here (not std:: distributions, whose
// output differs between standard libraries), so a seed gives the same partition on
// every platform. (Dirichlet proportions go through log/exp/sqrt; a libm that rounds
// those differently in the last bit could, rarely, move an example.)
//
// Arguments a caller must get right (numClients >= 1, alpha > 0, k >= 1, labels >= 0)
// are preconditions: violating one throws std::invalid_argument. Configuration code
// validates user input before calling.
//
// Pure functions; any thread may call them.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/util/status.hpp"

namespace starling::data {

// partition[c] lists the examples of client c.
using Partition = std::vector<std::vector<uint32_t>>;

// IID: a seeded shuffle cut into numClients contiguous pieces; sizes differ by at most one
// (the first n % numClients clients get one more).
Partition partitionIid(std::size_t numExamples, std::size_t numClients, uint64_t seed);
Partition partitionIid(std::span<const int32_t> labels, std::size_t numClients, uint64_t seed);

// Label skew, Dirichlet(alpha): for each class, proportions p ~ Dir(alpha, ..., alpha)
// over the clients, and that class's (shuffled) examples are dealt out in those
// proportions (largest remainder, so the counts add up exactly). Small alpha (0.1)
// gives each client few classes; large alpha (100) approaches IID.
// No client is left empty when n >= numClients: each empty client, in index order, takes
// one example from the client holding the most (lowest index on a tie).
Partition partitionDirichlet(std::span<const int32_t> labels, std::size_t numClients, double alpha, uint64_t seed);

// Pathological non-IID, k classes per client (McMahan et al.'s shards): the classes that
// occur are put in a seeded random cyclic order and client c takes the k consecutive
// classes starting at position c * k (mod the number of classes), so classes are shared
// as evenly as possible. Each class's shuffled examples are cut into equal shards, one
// per client holding it. k larger than the number of classes gives every client every
// class. When numClients * k is smaller than the number of classes, the classes no client
// took are dealt round-robin from client 0, so those clients hold more than k classes and
// every example still has a client. A client can end up empty only when its classes have
// fewer examples than clients sharing them.
Partition partitionKClasses(std::span<const int32_t> labels, std::size_t numClients, int k, uint64_t seed);

// The partitioner a command line or a config names: "iid", "dirichlet:ALPHA" (ALPHA > 0)
// or "classes:K" (K >= 1). Unlike the functions above, a bad spec or numClients == 0 is
// a kInvalidArgument value, for code that takes the spec from a person.
Result<Partition> partitionBySpec(std::span<const int32_t> labels, std::size_t numClients, std::string_view spec,
                                  uint64_t seed);

// By a natural grouping (partition "by-column:NAME"): whole groups go to clients, the
// largest first, each to the client holding the fewest examples so far (lowest index on
// a tie). Deterministic; a client is empty only when there are fewer groups than clients.
Partition partitionByGroup(std::span<const uint32_t> groups, std::size_t numClients);

// The group column a partition spec names ("by-column:NAME" -> "NAME"), or "".
std::string groupColumnOf(std::string_view spec);

// The directory a partition spec names ("files:DIR" -> "DIR": one data file per client,
// load.hpp loadFilesPartition), or "".
std::string filesDirOf(std::string_view spec);

// partitionBySpec over a data set: also "by-column:NAME", which takes the data set's
// groups (loaded with DataOptions::groupColumn = NAME). The class-cut partitions
// (dirichlet, classes) refuse a regression data set. "files:DIR" is refused: its
// clients come from the files (loadFilesPartition), not from one data set.
Result<Partition> partitionDataset(const Dataset& dataset, std::size_t numClients, std::string_view spec,
                                   uint64_t seed);

// Clients as index views of one shared array: client c's examples are
// indices[offsets[c] .. offsets[c + 1]), ascending (an example drawn twice appears twice).
struct IndexViews {
  std::vector<uint64_t> offsets{};  // numClients + 1 entries, offsets[0] = 0
  std::vector<uint32_t> indices{};
  std::size_t clients() const { return offsets.empty() ? 0 : offsets.size() - 1; }
  std::span<const uint32_t> of(std::size_t c) const {
    return {indices.data() + offsets[c], static_cast<std::size_t>(offsets[c + 1] - offsets[c])};
  }
};

// With replacement, for a population larger than the data (docs/simulation.md, "A
// million clients"): every client draws `perClient` examples from the whole data set,
// independently of the other clients, from a generator seeded by (seed, c) alone, so
// client c's examples do not depend on numClients (nor on which process draws them).
// - "iid": each draw uniform over all examples.
// - "dirichlet:ALPHA": the client's class proportions p ~ Dir(ALPHA, ..., ALPHA) over the
//   classes that occur; each draw picks a class by p, then an example of it uniformly.
// - "classes:K": K distinct classes of those that occur, uniformly at random (all of them
//   when K is at least their number); each draw picks one of them uniformly, then an
//   example of it uniformly.
// "by-column:NAME" and "files:DIR" are refused (their groups are the clients), as are the
// class cuts on a regression data set, perClient == 0, an empty data set or
// numClients == 0 (kInvalidArgument).
Result<IndexViews> partitionWithReplacement(const Dataset& dataset, std::size_t numClients, std::size_t perClient,
                                            std::string_view spec, uint64_t seed);

}  // namespace starling::data
