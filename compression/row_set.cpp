#include "starling/compression/row_set.hpp"

#include <algorithm>
#include <cassert>
#include <string>

#include "starling/compression/encoding.hpp"
#include "starling/compression/payload.hpp"

#include "bit_io.hpp"
#include "codec_status.hpp"
#include "index_codes.hpp"

namespace starling::compression {

using detail::invalid;
using detail::malformed;
using detail::str;

Result<RowSet> RowSet::fromSorted(std::vector<std::uint32_t> rows, std::uint32_t universe) {
  for (std::size_t j = 0; j < rows.size(); ++j) {
    if (rows[j] >= universe) {
      return invalid("row set: row " + str(rows[j]) + " at position " + str(j) + " is not below the universe of " +
                     str(universe) + " rows");
    }
    if (j > 0 && rows[j] <= rows[j - 1]) {
      return invalid("row set: rows not increasing at position " + str(j) + " (" + str(rows[j - 1]) + " then " +
                     str(rows[j]) + ")");
    }
  }
  return RowSet(std::move(rows), universe);
}

Result<RowSet> RowSet::fromRows(std::vector<std::uint32_t> rows, std::uint32_t universe) {
  for (std::size_t j = 0; j < rows.size(); ++j) {
    if (rows[j] >= universe) {
      return invalid("row set: row " + str(rows[j]) + " at position " + str(j) + " is not below the universe of " +
                     str(universe) + " rows");
    }
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return RowSet(std::move(rows), universe);
}

bool RowSet::contains(std::uint32_t row) const {
  return std::binary_search(rows_.begin(), rows_.end(), row);
}

namespace {

// ceil(universe / bucketRows), bucketRows >= 1.
std::uint32_t bucketCount(std::uint32_t universe, std::uint32_t bucketRows) {
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(universe) + bucketRows - 1) / bucketRows);
}

}  // namespace

Result<RowSet> coarsen(const RowSet& rows, std::uint32_t bucketRows) {
  if (bucketRows == 0) return invalid("row set coarsening: buckets of 0 rows (B must be at least 1)");
  std::vector<std::uint32_t> buckets;
  for (std::uint32_t row : rows.rows()) {
    const std::uint32_t b = row / bucketRows;
    if (buckets.empty() || buckets.back() != b) buckets.push_back(b);  // rows increase, so buckets do
  }
  return RowSet::fromSorted(std::move(buckets), bucketCount(rows.universe(), bucketRows));
}

Result<RowSet> coveredRows(const RowSet& buckets, std::uint32_t bucketRows, std::uint32_t universe) {
  if (bucketRows == 0) return invalid("row set coarsening: buckets of 0 rows (B must be at least 1)");
  if (buckets.universe() != bucketCount(universe, bucketRows)) {
    return invalid("row set coarsening: " + str(buckets.universe()) + " buckets of " + str(bucketRows) +
                   " rows do not cover a universe of " + str(universe) + " rows (expected " +
                   str(bucketCount(universe, bucketRows)) + " buckets)");
  }
  std::vector<std::uint32_t> rows;
  for (std::uint32_t b : buckets.rows()) {
    const std::uint64_t first = static_cast<std::uint64_t>(b) * bucketRows;
    const std::uint64_t end = std::min<std::uint64_t>(first + bucketRows, universe);
    for (std::uint64_t row = first; row < end; ++row)
      rows.push_back(static_cast<std::uint32_t>(row));
  }
  return RowSet::fromSorted(std::move(rows), universe);
}

std::vector<std::uint8_t> encodeRowSet(const RowSet& rows) {
  const std::vector<std::uint32_t> list(rows.rows().begin(), rows.rows().end());
  IndexFormat format = IndexFormat::kDeltaVarint;
  std::vector<std::uint8_t> indices;
  const Status status = detail::encodeIndexList(list, rows.universe(), format, indices);
  assert(status.isOk() && "a RowSet holds increasing rows below its universe");
  (void)status;
  std::vector<std::uint8_t> out;
  out.reserve(1 + 5 + indices.size());
  out.push_back(static_cast<std::uint8_t>(format));
  detail::putVarint(static_cast<std::uint32_t>(list.size()), out);
  out.insert(out.end(), indices.begin(), indices.end());
  return out;
}

Result<RowSet> decodeRowSet(std::span<const std::uint8_t> bytes, std::uint32_t universe) {
  if (bytes.empty()) return malformed("row set of 0 bytes: no index format byte");
  const auto format = static_cast<IndexFormat>(bytes[0]);
  if (format != IndexFormat::kDeltaVarint && format != IndexFormat::kBitmap && format != IndexFormat::kRice) {
    return malformed("row set with index format " + indexFormatName(format) +
                     " (expected delta-varint (1), bitmap (2) or rice (3))");
  }
  std::size_t pos = 1;
  std::uint64_t n = 0;
  if (const char* bad = detail::getVarint(bytes.data(), bytes.size(), pos, n)) {
    return malformed(std::string("row set: its row count ") + bad);
  }
  if (n > universe) return malformed("row set of " + str(n) + " rows over a universe of " + str(universe) + " rows");
  // Every row takes at least a byte as a varint, a bit as a Rice code (after r's byte)
  // and a bit of a bitmap: a count the bytes cannot hold is refused before anything is
  // allocated for it.
  const std::size_t rest = bytes.size() - pos;
  const std::uint64_t most = format == IndexFormat::kDeltaVarint ? rest
                             : format == IndexFormat::kRice      ? (rest == 0 ? 0 : 8 * (rest - 1))
                                                                 : 8 * static_cast<std::uint64_t>(rest);
  if (n > most) {
    return malformed("row set truncated: " + str(n) + " rows in " + str(rest) + " bytes of " + indexFormatName(format) +
                     " indices");
  }
  PayloadView view;
  view.encoding = Encoding::kTopK;
  view.count = universe;
  view.selected = static_cast<std::uint32_t>(n);
  view.indexFormat = format;
  view.indices = bytes.subspan(pos);
  std::vector<std::uint32_t> rows;
  const Status status = detail::decodeIndices(view, nullptr, rows);
  if (!status) return malformed("row set: " + status.message());
  return RowSet::fromSorted(std::move(rows), universe);
}

Result<RowSet> decodeCoveredRows(std::span<const std::uint8_t> bytes, std::uint32_t bucketRows,
                                 std::uint32_t universe) {
  if (bucketRows == 0) return invalid("row set coarsening: buckets of 0 rows (B must be at least 1)");
  auto buckets = decodeRowSet(bytes, bucketCount(universe, bucketRows));
  if (!buckets) return buckets.status();
  return coveredRows(*buckets, bucketRows, universe);
}

}  // namespace starling::compression
