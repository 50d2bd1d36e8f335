#include "placement_file.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <string_view>
#include <unordered_map>

namespace starling::coordinator {

namespace {

bool isSpace(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\r';
}

// The next whitespace-separated token of line from pos; empty at the end.
std::string_view nextToken(std::string_view line, std::size_t& pos) {
  while (pos < line.size() && isSpace(line[pos]))
    ++pos;
  const std::size_t start = pos;
  while (pos < line.size() && !isSpace(line[pos]))
    ++pos;
  return line.substr(start, pos - start);
}

// A decimal number without sign within 32 bits; nullopt otherwise.
std::optional<uint32_t> parseRow(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  uint64_t v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return std::nullopt;
    v = v * 10 + uint64_t(ch - '0');
  }
  if (v > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(v);
}

std::string shown(std::string_view s) {
  return "'" + std::string(s.substr(0, 40)) + (s.size() > 40 ? "...'" : "'");
}

}  // namespace

Result<std::vector<ClientRows>> readRowSets(const std::string& path, uint64_t universe) {
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kNotFound, "cannot open row-set file '" + path + "'");
  std::vector<ClientRows> clients;
  std::unordered_map<std::string, std::size_t> lineOf;
  std::string text;
  std::size_t lineNo = 0;
  while (std::getline(in, text)) {
    ++lineNo;
    const std::string where = path + ":" + std::to_string(lineNo) + ": ";
    std::string_view line(text);
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::size_t pos = 0;
    const std::string_view id = nextToken(line, pos);
    if (id.empty()) continue;
    if (auto [it, fresh] = lineOf.emplace(std::string(id), lineNo); !fresh)
      return Status(StatusCode::kMalformed,
                    where + "client " + shown(id) + " was already given on line " + std::to_string(it->second));
    ClientRows client;
    client.id = std::string(id);
    for (std::string_view token = nextToken(line, pos); !token.empty(); token = nextToken(line, pos)) {
      const auto row = parseRow(token);
      if (!row)
        return Status(StatusCode::kMalformed,
                      where + "row " + shown(token) + " of client " + shown(id) + " is not a number in 0..4294967295");
      if (universe > 0 && *row >= universe)
        return Status(StatusCode::kOutOfRange, where + "row " + std::to_string(*row) + " of client " + shown(id) +
                                                   " is past the universe of " + std::to_string(universe) + " rows");
      client.rows.push_back(*row);
    }
    std::sort(client.rows.begin(), client.rows.end());
    client.rows.erase(std::unique(client.rows.begin(), client.rows.end()), client.rows.end());
    clients.push_back(std::move(client));
  }
  if (in.bad()) return Status(StatusCode::kIo, "reading row-set file '" + path + "' failed");
  if (clients.empty())
    return Status(StatusCode::kInvalidArgument, path + ": no clients (expected lines CLIENT_ID ROW ROW ...)");
  return clients;
}

Status writePlacement(const std::string& path, const std::vector<ClientRows>& clients, const RelayPlacement& relays,
                      const std::string& relayMethod, const ShardPlacement* shards, const std::string& shardMethod) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return Status(StatusCode::kIo, "cannot write placement file '" + path + "'");
  out << "# starling-coordinator placement: " << clients.size() << " clients on " << relays.clientsPerRelay.size()
      << " relays by " << relayMethod << ", traffic " << relays.trafficRows << " rows per round\n";
  if (shards)
    out << "# " << shards->rows.size() << " rows on " << shards->loadPerShard.size() << " shards by " << shardMethod
        << ", load max/mean " << shards->loadMaxOverMean << "\n";
  out << "# client ID RELAY";
  if (shards) out << " | row ROW SHARD";
  out << "\n";
  for (std::size_t i = 0; i < clients.size(); ++i)
    out << "client " << clients[i].id << " " << relays.relayOf[i] << "\n";
  if (shards)
    for (std::size_t t = 0; t < shards->rows.size(); ++t)
      out << "row " << shards->rows[t] << " " << shards->shardOf[t] << "\n";
  out.flush();
  if (!out) return Status(StatusCode::kIo, "writing placement file '" + path + "' failed");
  return Status::ok();
}

}  // namespace starling::coordinator
