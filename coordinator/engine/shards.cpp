#include "shards.hpp"

#include <algorithm>
#include <thread>
#include <utility>

namespace starling::coordinator {

namespace {

ShardMap equalRanges(const ShardMap& map) {
  auto ranges = ShardMap::ranges(map.dim(), map.shards());  // map has at most dim shards
  return std::move(*ranges);
}

}  // namespace

Shards::Shards(ShardMap map, std::size_t inlineBelow)
    : map_(std::move(map)), ranges_(equalRanges(map_)), inlineBelow_(inlineBelow), pool_(map_.shards() - 1) {}

void Shards::forEach(std::size_t work, const std::function<void(uint32_t)>& task) {
  if (work < inlineBelow_) {
    for (uint32_t s = 0; s < count(); ++s)
      task(s);
    return;
  }
  pool_.run(count(), task);
}

void Shards::forRanges(const std::function<void(std::size_t, std::size_t)>& fn) {
  if (map_.dim() < inlineBelow_) {
    fn(0, map_.dim());
    return;
  }
  pool_.run(count(), [&](uint32_t s) {
    for (const ShardInterval& iv : ranges_.intervalsOf(s))
      fn(iv.begin, iv.end);
  });
}

const std::vector<std::vector<EntryRun>>& Shards::split(std::span<const uint32_t> indices) {
  map_.split(indices, runs_);
  return runs_;
}

Result<std::unique_ptr<Shards>> makeShards(const EngineConfig& config, std::size_t dim) {
  uint32_t n = config.shards;
  if (n == 0)
    n = std::clamp<uint32_t>(std::thread::hardware_concurrency(), 1,
                             static_cast<uint32_t>(std::min<std::size_t>(dim, UINT32_MAX)));
  if (n == 1) return std::unique_ptr<Shards>();
  const EngineConfig::ShardRows& rows = config.shardRows;
  auto map = rows.rowWidth == 0 ? ShardMap::ranges(dim, n)
                                : ShardMap::fromRows(dim, n, rows.rowWidth, rows.rowCount, rows.rows, rows.shardOf);
  if (!map) return map.status();
  return std::make_unique<Shards>(std::move(*map));
}

}  // namespace starling::coordinator
