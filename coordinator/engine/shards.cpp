#include "shards.hpp"

#include <fmt/format.h>

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
    const ShardInterval& range = ranges_.restRange(s);
    fn(range.begin, range.end);
  });
}

Status Shards::setMap(ShardMap map) {
  if (map.shards() != map_.shards() || map.dim() != map_.dim())
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the shard map places {} parameters on {} shards; the engine has {} on {}", map.dim(),
                              map.shards(), map_.dim(), map_.shards()));
  map_ = std::move(map);
  return Status::ok();
}

const std::vector<std::vector<EntryRun>>& Shards::split(std::span<const uint32_t> indices) {
  map_.split(indices, runs_);
  return runs_;
}

Result<EngineConfig::ShardRows> shardRowsOf(const model::Model& model, std::vector<uint32_t> rows,
                                            std::vector<uint32_t> shardOf) {
  auto first = model.firstLayerRows(std::vector<uint32_t>{0});
  if (!first) return first.status();
  EngineConfig::ShardRows out;
  out.rowCount = model.inputDim();
  // One range: a row of consecutive parameters; one a parameter: a column (with one
  // row or one output the two are the same).
  out.columns = first->size() > 1;
  for (const model::ParamRange& r : *first)
    out.rowWidth += static_cast<uint32_t>(r.count);
  // The map's formula must name the model's parameters: rows 0, 1 and the last, and
  // the dense rest right after the rows.
  auto positions = [&](std::span<const model::ParamRange> ranges) {
    std::vector<std::size_t> p;
    for (const model::ParamRange& r : ranges)
      for (std::size_t i = r.offset; i < r.offset + r.count; ++i)
        p.push_back(i);
    return p;
  };
  const auto last = static_cast<uint32_t>(out.rowCount - 1);
  for (const uint32_t row : {0u, std::min(1u, last), last}) {
    auto ranges = model.firstLayerRows(std::vector<uint32_t>{row});
    if (!ranges) return ranges.status();
    std::vector<std::size_t> expected;
    for (std::size_t k = 0; k < out.rowWidth; ++k)
      expected.push_back(out.columns ? row + k * out.rowCount : row * out.rowWidth + k);
    if (positions(*ranges) != expected || model.denseParams().offset != out.rowCount * out.rowWidth)
      return Status(
          StatusCode::kInternal,
          fmt::format("the first layer of model {} is neither rows nor columns of its first tensor", model.spec()));
  }
  out.rows = std::move(rows);
  out.shardOf = std::move(shardOf);
  return out;
}

Result<std::unique_ptr<Shards>> makeShards(const EngineConfig& config, std::size_t dim) {
  uint32_t n = config.shards;
  if (n == 0)
    n = std::clamp<uint32_t>(std::thread::hardware_concurrency(), 1,
                             static_cast<uint32_t>(std::min<std::size_t>(dim, UINT32_MAX)));
  if (n == 1) return std::unique_ptr<Shards>();
  const EngineConfig::ShardRows& rows = config.shardRows;
  auto map = rows.rowWidth == 0 ? ShardMap::ranges(dim, n)
                                : ShardMap::fromRows(dim, n, rows.rowWidth, rows.rowCount, rows.rows, rows.shardOf,
                                                     rows.columns ? RowLayout::kColumns : RowLayout::kContiguous);
  if (!map) return map.status();
  return std::make_unique<Shards>(std::move(*map));
}

}  // namespace starling::coordinator
