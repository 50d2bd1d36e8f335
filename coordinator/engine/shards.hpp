#pragma once
// Shards: the engine's S shards (docs/coordinator.md "Shards"). A ShardMap says which
// shard owns each parameter; a ShardPool of S - 1 threads and the caller runs each
// shard's part of a step. The Aggregator adds every update by shard and the
// ServerOptimizer steps by shard through it; each coordinate is touched by one shard
// only, with the same arithmetic as the unsharded code, so the results are the same
// bits whatever S (and whatever the map).
//
// Work below kInlineBelow elements runs on the calling thread: waking the workers
// costs more than it saves there (measured by bench-shards, docs/coordinator.md).
//
// Owned by the RoundEngine; the parts hold a pointer. One caller at a time (the
// engine's owner).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "starling/coordinator/round_engine.hpp"
#include "starling/util/status.hpp"

#include "engine/shard_map.hpp"
#include "engine/shard_pool.hpp"

namespace starling::coordinator {

class Shards {
 public:
  static constexpr std::size_t kInlineBelow = std::size_t{1} << 15;

  // S = map.shards(): starts S - 1 threads.
  explicit Shards(ShardMap map);

  uint32_t count() const { return map_.shards(); }
  const ShardMap& map() const { return map_; }
  // task(shard) for every shard, each once: on the pool when work (elements) is at
  // least kInlineBelow, else one after another on the calling thread.
  void forEach(std::size_t work, const std::function<void(uint32_t)>& task);
  // fn(begin, end) over [0, dim): every interval of the map, each shard's on one
  // thread; below kInlineBelow parameters, fn(0, dim) on the calling thread. For
  // element-wise steps, whose result does not depend on how the range is cut.
  void forIntervals(const std::function<void(std::size_t, std::size_t)>& fn);
  // A sparse tensor's indices split by owner (ShardMap::split), valid until the next call.
  const std::vector<std::vector<EntryRun>>& split(std::span<const uint32_t> indices);

 private:
  ShardMap map_;
  ShardPool pool_;
  std::vector<std::vector<EntryRun>> runs_;
};

// The engine's shards from EngineConfig::shards (0: one per core, at most one per
// parameter) and shardRows, for a model of dim parameters; null when that is one shard
// (the engine's path without threads). Errors: the shard map's (ShardMap::fromRows).
Result<std::unique_ptr<Shards>> makeShards(const EngineConfig& config, std::size_t dim);

}  // namespace starling::coordinator
