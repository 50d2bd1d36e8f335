#pragma once
// Shards: the engine's S shards (docs/coordinator.md "Shards"). A ShardPool of S - 1
// threads and the caller runs each shard's part of a step; in each step every
// coordinate is touched by one shard only, with the same arithmetic as the unsharded
// code, so the results are the same bits whatever S (and whatever the map).
//  - Sparse updates go by the ShardMap: shard s adds the entries of the parameters it
//    owns, so the map decides the load (a placement balances the rows clients touch).
//  - Element-wise passes over every parameter (a dense update, the round's scaling, the
//    server optimizer, the moving average) go by S equal contiguous ranges whatever the
//    map: balanced by construction, and a map's fine-grained rows would make threads
//    write neighbouring rows, which share cache lines.
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
#include "starling/model/model.hpp"
#include "starling/util/status.hpp"

#include "engine/shard_map.hpp"
#include "engine/shard_pool.hpp"

namespace starling::coordinator {

class Shards {
 public:
  // bench-shards on 2 cores: one top-k update on the pool (S = 2) was slower than on
  // the calling thread up to 2^16 entries (0.73x-0.96x) and faster from 2^17 (1.4x-3.7x).
  static constexpr std::size_t kInlineBelow = std::size_t{1} << 17;

  // S = map.shards(): starts S - 1 threads. inlineBelow: kInlineBelow but in
  // measurements (bench-shards runs the pool at every size with 0).
  explicit Shards(ShardMap map, std::size_t inlineBelow = kInlineBelow);

  uint32_t count() const { return map_.shards(); }
  // Whether work of this many elements runs on the calling thread (below inlineBelow).
  bool inlines(std::size_t work) const { return work < inlineBelow_; }
  const ShardMap& map() const { return map_; }
  // Replaces the map between steps (a shard map applied mid-run): the same number of
  // shards over the same parameters, so the pool and the ranges stay. kInvalidArgument
  // otherwise.
  Status setMap(ShardMap map);
  // task(shard) for every shard, each once: on the pool when work (elements) is at
  // least kInlineBelow, else one after another on the calling thread.
  void forEach(std::size_t work, const std::function<void(uint32_t)>& task);
  // fn(begin, end) over [0, dim) cut into S equal ranges, each on one thread (range s
  // is shard s's); below inlineBelow parameters, fn(0, dim) on the calling thread. For
  // element-wise steps, whose result does not depend on how [0, dim) is cut.
  void forRanges(const std::function<void(std::size_t, std::size_t)>& fn);
  // Parameters in shard s's range (forRanges).
  std::size_t rangeSize(uint32_t s) const { return ranges_.sizes()[s]; }
  // A sparse tensor's indices split by owner (ShardMap::split), valid until the next call.
  const std::vector<std::vector<EntryRun>>& split(std::span<const uint32_t> indices);

 private:
  ShardMap map_;
  ShardMap ranges_;  // S equal ranges, for forRanges
  std::size_t inlineBelow_;
  ShardPool pool_;
  std::vector<std::vector<EntryRun>> runs_;
};

// The first layer's rows of `model` as EngineConfig::shardRows takes them, rows[j]
// placed on shardOf[j] (checked when the map is made): one row per input feature, its
// parameters those model::Model::firstLayerRows names (embedbag: a row of the table;
// linear, mlp: a column of dense0.weight). kInvalidArgument naming the model for one
// without such rows (cnn, gru).
Result<EngineConfig::ShardRows> shardRowsOf(const model::Model& model, std::vector<uint32_t> rows,
                                            std::vector<uint32_t> shardOf);

// The engine's shards from EngineConfig::shards (0: one per core, at most one per
// parameter) and shardRows, for a model of dim parameters; null when that is one shard
// (the engine's path without threads). Errors: the shard map's (ShardMap::fromRows).
Result<std::unique_ptr<Shards>> makeShards(const EngineConfig& config, std::size_t dim);

}  // namespace starling::coordinator
