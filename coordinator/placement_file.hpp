#pragma once
// The files of `starling-coordinator placement` (docs/placement.md): the clients' row
// sets it reads and the placement it writes. Any thread; no state.

#include <cstdint>
#include <string>
#include <vector>

#include "starling/util/status.hpp"

#include "placement.hpp"

namespace starling::coordinator {

// Reads one client per line, "CLIENT_ID ROW ROW ..." (rows in any order, repeats
// dropped; '#' starts a comment; blank lines skipped). universe > 0 bounds the rows
// (each < universe); 0 leaves them unbounded. Errors name file:line and what is wrong.
Result<std::vector<ClientRows>> readRowSets(const std::string& path, uint64_t universe);

// Writes "client ID RELAY" per client and, with shards, "row ROW SHARD" per touched
// row, after '#' lines saying what was placed how.
Status writePlacement(const std::string& path, const std::vector<ClientRows>& clients, const RelayPlacement& relays,
                      const std::string& relayMethod, const ShardPlacement* shards, const std::string& shardMethod);

}  // namespace starling::coordinator
