#pragma once
// Applying a placement of clients on relays (docs/placement.md, "Applying a
// placement"): the coordinator reads the file `starling-coordinator placement --out`
// writes (server.placement-file), keeps it in its database (meta "placement", so a
// restarted coordinator applies the same one) and sends it to its relays in their
// assignments; a relay redirects the clients placed on another relay at its next round.
//
// Values and pure functions; any thread.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::coordinator {

struct RelayPlacementMap {
  uint64_t version = 0;  // 0 = none applied
  // (client id, relay id), by client id.
  std::vector<std::pair<std::string, std::string>> clients;

  // "version V" then "client ID RELAY" lines: what the database keeps.
  std::string text() const;
  static Result<RelayPlacementMap> parse(std::string_view text);
  friend bool operator==(const RelayPlacementMap&, const RelayPlacementMap&) = default;
};

// The clients of a placement file: "client ID RELAY" lines, RELAY a relay's identity
// (relay-3) or its number (3, for relay-3: the names `starling-coordinator init
// --relays` gives); "row ROW SHARD" lines, blank lines and # comments are skipped.
// kInvalidArgument naming file:line for anything else, or a client given twice.
Result<std::vector<std::pair<std::string, std::string>>> readRelayPlacement(const std::string& path);

// The rows of a placement file and their shards: "row ROW SHARD" lines (placement
// --shards S --out), as EngineConfig::ShardRows takes them; other lines skipped.
// kInvalidArgument naming file:line for a malformed one or a row given twice.
struct RowShards {
  std::vector<uint32_t> rows;
  std::vector<uint32_t> shardOf;
  uint32_t shards = 0;   // the largest shard + 1
  uint64_t version = 0;  // the coordinator's count of maps applied (0: none yet)

  // "version V" then "row ROW SHARD" lines: what the database keeps.
  std::string text() const;
  static Result<RowShards> parse(std::string_view text);
  // The same rows on the same shards (whatever the versions).
  bool samePlacement(const RowShards& other) const { return rows == other.rows && shardOf == other.shardOf; }
};
Result<RowShards> readRowShards(const std::string& path);

}  // namespace starling::coordinator
