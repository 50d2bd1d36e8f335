// Applying a placement of clients on relays (relay_placement.hpp).
#include "starling/coordinator/relay_placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

namespace starling::coordinator {
namespace {

// The clients of "client ID RELAY" lines (other kinds skipped when skipOthers), sorted
// by id; `where` prefixes an error with the line.
Result<std::vector<std::pair<std::string, std::string>>> readClients(std::istream& in, const std::string& where,
                                                                     bool skipOthers, uint64_t* version) {
  std::map<std::string, std::string> clients;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    const std::string at = fmt::format("{}:{}: ", where, n);
    std::istringstream fields(line);
    std::string kind, id, relay, extra;
    fields >> kind;
    if (kind.empty() || kind[0] == '#') continue;
    if (version != nullptr && kind == "version") {
      if (!(fields >> *version) || *version == 0) return Status(StatusCode::kInvalidArgument, at + "a bad version");
      continue;
    }
    if (kind != "client") {
      if (skipOthers) continue;
      return Status(StatusCode::kInvalidArgument, at + "expected 'client ID RELAY', not '" + line + "'");
    }
    if (!(fields >> id >> relay) || (fields >> extra))
      return Status(StatusCode::kInvalidArgument, at + "expected 'client ID RELAY', not '" + line + "'");
    if (std::all_of(relay.begin(), relay.end(), [](unsigned char c) { return std::isdigit(c) != 0; }))
      relay = "relay-" + relay;
    if (!clients.emplace(id, relay).second)
      return Status(StatusCode::kInvalidArgument, at + "client '" + id + "' is placed twice");
  }
  return std::vector<std::pair<std::string, std::string>>(clients.begin(), clients.end());
}

// The rows of "row ROW SHARD" lines (other kinds skipped; a "version V" line read into
// *version when given); `where` prefixes an error with the line.
Result<RowShards> readRowLines(std::istream& in, const std::string& where, uint64_t* version) {
  std::map<uint32_t, uint32_t> rows;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    std::istringstream fields(line);
    std::string kind, extra;
    uint64_t row = 0, shard = 0;
    fields >> kind;
    if (version != nullptr && kind == "version") {
      if (!(fields >> *version) || *version == 0)
        return Status(StatusCode::kInvalidArgument, fmt::format("{}:{}: a bad version", where, n));
      continue;
    }
    if (kind != "row") continue;
    if (!(fields >> row >> shard) || (fields >> extra) || row > UINT32_MAX || shard >= (1u << 16))
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("{}:{}: expected 'row ROW SHARD', not '{}'", where, n, line));
    if (!rows.emplace(static_cast<uint32_t>(row), static_cast<uint32_t>(shard)).second)
      return Status(StatusCode::kInvalidArgument, fmt::format("{}:{}: row {} is placed twice", where, n, row));
  }
  RowShards out;
  for (const auto& [row, shard] : rows) {
    out.rows.push_back(row);
    out.shardOf.push_back(shard);
    out.shards = std::max(out.shards, shard + 1);
  }
  if (out.rows.empty()) return Status(StatusCode::kInvalidArgument, where + " places no rows");
  return out;
}

}  // namespace

std::string RelayPlacementMap::text() const {
  std::string out = fmt::format("version {}\n", version);
  for (const auto& [client, relay] : clients)
    out += fmt::format("client {} {}\n", client, relay);
  return out;
}

Result<RelayPlacementMap> RelayPlacementMap::parse(std::string_view text) {
  std::istringstream in{std::string(text)};
  RelayPlacementMap map;
  auto clients = readClients(in, "the database's placement", false, &map.version);
  if (!clients) return clients.status();
  if (map.version == 0) return Status(StatusCode::kInvalidArgument, "the database's placement has no version");
  map.clients = std::move(*clients);
  return map;
}

Result<std::vector<std::pair<std::string, std::string>>> readRelayPlacement(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kNotFound, "cannot read the placement file '" + path + "'");
  return readClients(in, path, true, nullptr);
}

Result<RowShards> readRowShards(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kNotFound, "cannot read the shard map '" + path + "'");
  return readRowLines(in, path, nullptr);
}

std::string RowShards::text() const {
  std::string out = fmt::format("version {}\n", version);
  for (std::size_t j = 0; j < rows.size(); ++j)
    out += fmt::format("row {} {}\n", rows[j], shardOf[j]);
  return out;
}

Result<RowShards> RowShards::parse(std::string_view text) {
  std::istringstream in{std::string(text)};
  uint64_t version = 0;
  auto map = readRowLines(in, "the database's shard map", &version);
  if (!map) return map.status();
  if (version == 0) return Status(StatusCode::kInvalidArgument, "the database's shard map has no version");
  map->version = version;
  return map;
}

}  // namespace starling::coordinator
