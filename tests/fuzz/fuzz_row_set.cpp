// Fuzz target: the row-set decoder (compression/row_set.hpp). What decodeRowSet accepts
// must be a valid set (increasing, below the universe) that survives encode -> decode
// unchanged, and its coarsening must cover it.
//
// Input layout: the universe (u32 LE, taken modulo 2^20 + 1, the size of a hashed
// feature space), then the row set's bytes.

#include <cstring>
#include <vector>

#include "starling/compression/row_set.hpp"

#include "fuzz_support.hpp"

using namespace starling;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint32_t universe = 0;
  const size_t head = size < sizeof universe ? size : sizeof universe;
  std::memcpy(&universe, data, head);  // little-endian host, as the fuzzing machines are
  universe %= (1u << 20) + 1;
  auto rows = compression::decodeRowSet({data + head, size - head}, universe);
  if (!rows) {
    STARLING_FUZZ_CHECK(rows.status().code() == StatusCode::kMalformed);
    return 0;
  }
  STARLING_FUZZ_CHECK(rows->universe() == universe);
  const auto list = rows->rows();
  for (size_t j = 0; j < list.size(); ++j)
    STARLING_FUZZ_CHECK(list[j] < universe && (j == 0 || list[j] > list[j - 1]));
  const std::vector<uint8_t> again = compression::encodeRowSet(*rows);
  auto back = compression::decodeRowSet(again, universe);
  STARLING_FUZZ_CHECK(back.isOk() && *back == *rows);
  auto buckets = compression::coarsen(*rows, 16);
  STARLING_FUZZ_CHECK(buckets.isOk());
  auto covered = compression::coveredRows(*buckets, 16, universe);
  STARLING_FUZZ_CHECK(covered.isOk());
  for (uint32_t row : list)
    STARLING_FUZZ_CHECK(covered->contains(row));
  return 0;
}
