#include "shard_map.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace starling::coordinator {
namespace {

// The first position in [from, indices.size()) whose index is >= bound, galloping from
// `from`: O(log distance).
std::size_t gallop(std::span<const uint32_t> indices, std::size_t from, std::size_t bound) {
  const std::size_t n = indices.size();
  std::size_t lo = from;  // indices[lo] < bound holds for lo > from, or lo == from
  std::size_t step = 1;
  while (lo + step < n && indices[lo + step] < bound) {
    lo += step;
    step *= 2;
  }
  const std::size_t hi = std::min(lo + step, n);
  return static_cast<std::size_t>(std::lower_bound(indices.begin() + static_cast<std::ptrdiff_t>(lo),
                                                   indices.begin() + static_cast<std::ptrdiff_t>(hi), bound) -
                                  indices.begin());
}

}  // namespace

ShardMap::ShardMap(std::size_t dim, uint32_t shards, std::size_t restBegin)
    : dim_(dim), shards_(shards), sizes_(shards, 0) {
  const std::size_t n = dim - restBegin;
  rest_.reserve(shards);
  for (uint32_t s = 0; s < shards; ++s) {
    rest_.push_back(ShardInterval{restBegin + n * s / shards, restBegin + n * (s + 1) / shards, s});
    sizes_[s] = rest_.back().end - rest_.back().begin;
  }
}

Result<ShardMap> ShardMap::ranges(std::size_t dim, uint32_t shards) {
  if (shards == 0) return Status(StatusCode::kInvalidArgument, "the engine needs at least one shard");
  if (shards > dim)
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{} shards for a model of {} parameters: at most one shard per parameter", shards, dim));
  return ShardMap(dim, shards, 0);
}

Result<ShardMap> ShardMap::fromRows(std::size_t dim, uint32_t shards, uint32_t rowWidth, std::size_t rowCount,
                                    std::span<const uint32_t> rows, std::span<const uint32_t> shardOf,
                                    RowLayout layout) {
  auto bad = [](std::string what) { return Status(StatusCode::kInvalidArgument, "shard map: " + std::move(what)); };
  if (shards == 0) return bad("the engine needs at least one shard");
  if (shards > dim) return bad(fmt::format("{} shards for a model of {} parameters", shards, dim));
  if (rowWidth == 0) return bad("the row width must be at least 1");
  if (rowCount > dim / rowWidth)
    return bad(fmt::format("{} rows of {} parameters are more than the model's {}", rowCount, rowWidth, dim));
  if (rows.size() != shardOf.size())
    return bad(fmt::format("{} rows but {} shards given for them", rows.size(), shardOf.size()));
  constexpr uint32_t kUnplaced = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> owner(rowCount, kUnplaced);
  std::vector<std::size_t> count(shards, 0);
  for (std::size_t j = 0; j < rows.size(); ++j) {
    if (rows[j] >= rowCount) return bad(fmt::format("row {} is past the layer's {} rows", rows[j], rowCount));
    if (j > 0 && rows[j] <= rows[j - 1])
      return bad(fmt::format("rows must be ascending and unique: {} after {}", rows[j], rows[j - 1]));
    if (shardOf[j] >= shards)
      return bad(fmt::format("row {} is placed on shard {} of {} (0-based)", rows[j], shardOf[j], shards));
    owner[rows[j]] = shardOf[j];
    ++count[shardOf[j]];
  }
  // The rows no client touched go, in order, to the shards short of rowCount / S rows:
  // the deficits add up to at least their number.
  uint32_t s = 0;
  auto deficit = [&](uint32_t t) {
    const std::size_t target = rowCount * (t + 1) / shards - rowCount * t / shards;
    return count[t] < target;
  };
  for (std::size_t r = 0; r < rowCount; ++r) {
    if (owner[r] != kUnplaced) continue;
    while (s + 1 < shards && !deficit(s))
      ++s;
    owner[r] = s;
    ++count[s];
  }
  ShardMap map(dim, shards, rowCount * rowWidth);
  for (uint32_t t = 0; t < shards; ++t)
    map.sizes_[t] += count[t] * rowWidth;
  map.rowWidth_ = rowWidth;
  map.rowCount_ = rowCount;
  map.layout_ = layout;
  if (shards <= 256)
    map.rowOwner8_.assign(owner.begin(), owner.end());
  else
    map.rowOwner32_ = std::move(owner);
  return map;
}

uint32_t ShardMap::ownerOf(std::size_t p) const {
  if (p < rowCount_ * rowWidth_) return rowOwner(layout_ == RowLayout::kContiguous ? p / rowWidth_ : p % rowCount_);
  return std::upper_bound(rest_.begin(), rest_.end(), p,
                          [](std::size_t i, const ShardInterval& iv) { return i < iv.end; })
      ->shard;
}

template <typename Owner>
std::size_t ShardMap::splitRows(std::span<const uint32_t> indices, const std::vector<Owner>& owner,
                                std::vector<std::vector<EntryRun>>& out) const {
  // First the rows touched, each with its first entry and its shard: one division and
  // one lookup per row. No branch depends on a lookup, so the (cache-missing) lookups
  // of many rows are in flight at once; a branch on each made the split cost as much as
  // the add (bench-shards).
  const std::size_t n = indices.size();
  const std::size_t rowEnd = rowCount_ * rowWidth_;
  std::vector<std::size_t> starts;
  std::vector<uint32_t> shardOf;
  std::size_t j = 0;
  while (j < n && indices[j] < rowEnd) {
    const std::size_t row = indices[j] / rowWidth_;
    starts.push_back(j);
    shardOf.push_back(owner[row]);
    const std::size_t rowLimit = (row + 1) * rowWidth_;
    ++j;
    while (j < n && indices[j] < rowLimit)
      ++j;
  }
  starts.push_back(j);
  // Then a run per stretch of rows of one shard.
  for (std::size_t k = 0; k < shardOf.size();) {
    std::size_t next = k + 1;
    while (next < shardOf.size() && shardOf[next] == shardOf[k])
      ++next;
    out[shardOf[k]].push_back(EntryRun{starts[k], starts[next]});
    k = next;
  }
  return j;
}

template <typename Owner>
std::size_t ShardMap::splitColumns(std::span<const uint32_t> indices, const std::vector<Owner>& owner,
                                   std::vector<std::vector<EntryRun>>& out) const {
  // One pass over the entries in the rows, with no branch on a lookup (a branch on
  // each was 1.5-3.4x slower in a micro-benchmark of 2^20 rows x 2 and x 16 on 2
  // shards): each entry's shard and whether it starts a run go to buffers of this
  // thread's (reused: an update's entries would otherwise cost an allocation, past
  // 128 KB an mmap, per split); then a pass over the runs. An entry's row is its index
  // less o x rowCount, o its output: indices increase, so o only grows.
  thread_local std::vector<uint32_t> runShard;
  thread_local std::vector<std::size_t> starts;
  const std::size_t n = indices.size();
  const std::size_t rowEnd = rowCount_ * rowWidth_;
  const std::size_t end = n > 0 && indices[n - 1] < rowEnd ? n : gallop(indices, 0, rowEnd);
  runShard.resize(end + 1);
  starts.resize(end + 1);
  std::size_t base = 0;  // o x rowCount
  std::size_t runs = 0;
  uint32_t previous = std::numeric_limits<uint32_t>::max();
  for (std::size_t j = 0; j < end; ++j) {
    const std::size_t i = indices[j];
    while (i - base >= rowCount_)
      base += rowCount_;
    const uint32_t s = owner[i - base];
    starts[runs] = j;  // run `runs` starts here if s is not the previous entry's shard
    runShard[runs] = s;
    runs += s != previous;
    previous = s;
  }
  starts[runs] = end;
  for (std::size_t k = 0; k < runs; ++k)
    out[runShard[k]].push_back(EntryRun{starts[k], starts[k + 1]});
  return end;
}

void ShardMap::split(std::span<const uint32_t> indices, std::vector<std::vector<EntryRun>>& out) const {
  out.resize(shards_);
  for (auto& runs : out)
    runs.clear();
  std::size_t j = 0;
  if (rowCount_ > 0) {
    if (layout_ == RowLayout::kContiguous)
      j = rowOwner8_.empty() ? splitRows(indices, rowOwner32_, out) : splitRows(indices, rowOwner8_, out);
    else
      j = rowOwner8_.empty() ? splitColumns(indices, rowOwner32_, out) : splitColumns(indices, rowOwner8_, out);
  }
  splitRest(indices, j, out);
}

void ShardMap::splitRest(std::span<const uint32_t> indices, std::size_t j,
                         std::vector<std::vector<EntryRun>>& out) const {
  const std::size_t n = indices.size();
  if (j == n) return;
  auto endsAfter = [](std::size_t i, const ShardInterval& iv) { return i < iv.end; };
  // The range holding indices[j]: rest_ is ascending and contiguous.
  auto k = std::upper_bound(rest_.begin(), rest_.end(), std::size_t{indices[j]}, endsAfter);
  while (j < n && k != rest_.end()) {  // k at the end: an index >= dim, outside the contract
    if (indices[j] >= k->end) {
      k = std::upper_bound(k + 1, rest_.end(), std::size_t{indices[j]}, endsAfter);
      continue;
    }
    const std::size_t last = gallop(indices, j, k->end);
    out[k->shard].push_back(EntryRun{j, last});
    j = last;
  }
}

}  // namespace starling::coordinator
