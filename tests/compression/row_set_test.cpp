// Row sets (compression/row_set.hpp): the set's invariants, coarsening into buckets, and
// the bytes: decodeRowSet(encodeRowSet(s), universe) == s, a cost near the entropy of
// the set, and malformed bytes refused with an error that names the problem.

#include "starling/compression/row_set.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "starling/compression/encoding.hpp"

using namespace starling;
using namespace starling::compression;

namespace {

RowSet make(std::vector<std::uint32_t> rows, std::uint32_t universe) {
  auto s = RowSet::fromRows(std::move(rows), universe);
  REQUIRE(s.isOk());
  return std::move(s).value();
}

// n distinct rows drawn uniformly below universe (Floyd's algorithm).
RowSet randomSet(std::uint32_t universe, std::uint32_t n, std::mt19937_64& rng) {
  std::set<std::uint32_t> chosen;
  for (std::uint32_t j = universe - n; j < universe; ++j) {
    const auto t = static_cast<std::uint32_t>(std::uniform_int_distribution<std::uint64_t>(0, j)(rng));
    if (!chosen.insert(t).second) chosen.insert(j);
  }
  return make({chosen.begin(), chosen.end()}, universe);
}

RowSet roundTrip(const RowSet& s) {
  const std::vector<std::uint8_t> bytes = encodeRowSet(s);
  auto back = decodeRowSet(bytes, s.universe());
  INFO(back.status().toString());
  REQUIRE(back.isOk());
  return std::move(back).value();
}

// log2 C(u, n): the bits any code needs, on average, for a uniformly random n-subset.
double entropyBits(std::uint32_t universe, std::uint32_t n) {
  return (std::lgamma(universe + 1.0) - std::lgamma(n + 1.0) - std::lgamma(universe - n + 1.0)) / std::log(2.0);
}

std::string decodeError(std::vector<std::uint8_t> bytes, std::uint32_t universe) {
  auto r = decodeRowSet(bytes, universe);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == StatusCode::kMalformed);
  return r.status().message();
}

void putVarint(std::uint32_t x, std::vector<std::uint8_t>& out) {
  while (x >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(x | 0x80));
    x >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(x));
}

}  // namespace

TEST_CASE("a row set is sorted, unique and below its universe", "[row-set]") {
  const RowSet s = make({9, 3, 3, 0, 7}, 10);
  CHECK(std::vector<std::uint32_t>(s.rows().begin(), s.rows().end()) == std::vector<std::uint32_t>{0, 3, 7, 9});
  CHECK(s.universe() == 10);
  CHECK(s.contains(7));
  CHECK_FALSE(s.contains(8));

  auto outside = RowSet::fromRows({1, 10}, 10);
  REQUIRE_FALSE(outside.isOk());
  CHECK(outside.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(outside.status().message(), Catch::Contains("row 10 at position 1"));
  auto unsorted = RowSet::fromSorted({1, 5, 5}, 10);
  REQUIRE_FALSE(unsorted.isOk());
  CHECK_THAT(unsorted.status().message(), Catch::Contains("not increasing at position 2"));
}

TEST_CASE("coarsening maps row j to bucket j / B and covers the rows it came from", "[row-set]") {
  const RowSet s = make({0, 1, 15, 16, 17, 40, 99}, 100);
  SECTION("B = 16") {
    auto b = coarsen(s, 16);
    REQUIRE(b.isOk());
    CHECK(std::vector<std::uint32_t>(b->rows().begin(), b->rows().end()) == std::vector<std::uint32_t>{0, 1, 2, 6});
    CHECK(b->universe() == 7);  // ceil(100 / 16)
    auto covered = coveredRows(*b, 16, 100);
    REQUIRE(covered.isOk());
    CHECK(covered->size() == 16 + 16 + 16 + 4);  // the last bucket stops at the universe
    CHECK(covered->rows().back() == 99);
    for (std::uint32_t row : s.rows())
      CHECK(covered->contains(row));
  }
  SECTION("B = 1 is the identity") {
    auto b = coarsen(s, 1);
    REQUIRE(b.isOk());
    CHECK(*b == s);
  }
  SECTION("B above the universe: one bucket") {
    auto b = coarsen(s, 256);
    REQUIRE(b.isOk());
    CHECK(b->size() == 1);
    CHECK(b->universe() == 1);
    CHECK(coveredRows(*b, 256, 100)->size() == 100);
  }
  SECTION("bad arguments") {
    CHECK(coarsen(s, 0).status().code() == StatusCode::kInvalidArgument);
    auto b = coarsen(s, 16);
    auto wrong = coveredRows(*b, 16, 200);
    REQUIRE_FALSE(wrong.isOk());
    CHECK_THAT(wrong.status().message(), Catch::Contains("expected 13 buckets"));
  }
  SECTION("random sets against a direct reference") {
    std::mt19937_64 rng(7);
    for (std::uint32_t bucket : {2u, 3u, 16u, 256u}) {
      const RowSet r = randomSet(5000, 300, rng);
      std::set<std::uint32_t> expected;
      for (std::uint32_t row : r.rows())
        expected.insert(row / bucket);
      auto b = coarsen(r, bucket);
      REQUIRE(b.isOk());
      CHECK(std::vector<std::uint32_t>(b->rows().begin(), b->rows().end()) ==
            std::vector<std::uint32_t>(expected.begin(), expected.end()));
    }
  }
}

TEST_CASE("row sets survive encode and decode", "[row-set]") {
  std::mt19937_64 rng(22);
  SECTION("empty, also over no rows") {
    CHECK(roundTrip(make({}, 1000)) == make({}, 1000));
    CHECK(roundTrip(RowSet()) == RowSet());
    CHECK(encodeRowSet(make({}, 1u << 20)).size() == 2);  // format and count
  }
  SECTION("full") {
    std::vector<std::uint32_t> all(4099);
    for (std::uint32_t i = 0; i < all.size(); ++i)
      all[i] = i;
    const RowSet s = make(all, 4099);
    CHECK(roundTrip(s) == s);
    CHECK(encodeRowSet(s).size() <= 3 + (4099 + 7) / 8);  // a bitmap at most
  }
  SECTION("single rows: first, last, middle") {
    for (std::uint32_t row : {0u, 12345u, (1u << 20) - 1}) {
      const RowSet s = make({row}, 1u << 20);
      CHECK(roundTrip(s) == s);
      CHECK(encodeRowSet(s).size() <= 6);
    }
  }
  SECTION("dense runs with gaps between them") {
    std::vector<std::uint32_t> rows;
    for (std::uint32_t start : {0u, 1000u, 70000u, 500000u})
      for (std::uint32_t i = 0; i < 700; ++i)
        rows.push_back(start + i);
    const RowSet s = make(rows, 1u << 20);
    CHECK(roundTrip(s) == s);
  }
  SECTION("huge gaps, up to the largest universe") {
    const RowSet s = make({0, 1, 1u << 30, 0xfffffffdu, 0xfffffffeu}, 0xffffffffu);
    CHECK(roundTrip(s) == s);
    const RowSet ends = make({0, (1u << 20) - 1}, 1u << 20);
    CHECK(roundTrip(ends) == ends);
  }
  SECTION("random sets over 2^20 rows cost close to their entropy") {
    const std::uint32_t universe = 1u << 20;
    for (std::uint32_t n : {1u, 10u, 1000u, 10000u, 100000u, 500000u, universe - 3}) {
      const RowSet s = randomSet(universe, n, rng);
      CHECK(roundTrip(s) == s);
      const double bits = 8.0 * static_cast<double>(encodeRowSet(s).size());
      const double entropy = entropyBits(universe, n);
      INFO("n = " << n << ": " << bits / n << " bits per row, entropy " << entropy / n);
      if (n >= 1000 && n <= universe / 2) CHECK(bits <= 1.06 * entropy + 48);
    }
  }
  SECTION("the sparse sets are Rice-coded, the dense ones bitmaps") {
    CHECK(encodeRowSet(randomSet(1u << 20, 5000, rng))[0] == static_cast<std::uint8_t>(IndexFormat::kRice));
    CHECK(encodeRowSet(randomSet(1u << 16, 40000, rng))[0] == static_cast<std::uint8_t>(IndexFormat::kBitmap));
    CHECK(encodeRowSet(make({3}, 100))[0] == static_cast<std::uint8_t>(IndexFormat::kDeltaVarint));
  }
  SECTION("many small random sets") {
    for (int trial = 0; trial < 500; ++trial) {
      const auto universe = static_cast<std::uint32_t>(1 + rng() % 3000);
      const auto n = static_cast<std::uint32_t>(rng() % (universe + 1));
      const RowSet s = randomSet(universe, n, rng);
      CHECK(roundTrip(s) == s);
    }
  }
}

TEST_CASE("decodeRowSet refuses malformed bytes with an error naming the problem", "[row-set]") {
  const std::uint8_t varint = static_cast<std::uint8_t>(IndexFormat::kDeltaVarint);
  const std::uint8_t bitmap = static_cast<std::uint8_t>(IndexFormat::kBitmap);
  const std::uint8_t rice = static_cast<std::uint8_t>(IndexFormat::kRice);

  CHECK_THAT(decodeError({}, 10), Catch::Contains("no index format byte"));
  CHECK_THAT(decodeError({0, 0}, 10), Catch::Contains("index format none"));
  CHECK_THAT(decodeError({static_cast<std::uint8_t>(IndexFormat::kRelative), 0}, 10),
             Catch::Contains("index format relative"));
  CHECK_THAT(decodeError({9, 0}, 10), Catch::Contains("unknown(9)"));
  CHECK_THAT(decodeError({rice}, 10), Catch::Contains("row count is truncated"));
  CHECK_THAT(decodeError({rice, 0x80}, 10), Catch::Contains("row count is truncated"));
  CHECK_THAT(decodeError({rice, 0xff, 0xff, 0xff, 0xff, 0x7f}, 10), Catch::Contains("exceeds 32 bits"));
  CHECK_THAT(decodeError({rice, 11, 0, 0}, 10), Catch::Contains("11 rows over a universe of 10 rows"));
  // A count the remaining bytes cannot describe is refused before any allocation.
  std::vector<std::uint8_t> huge{rice};
  putVarint(4000000000u, huge);
  huge.insert(huge.end(), {0, 0, 0});
  CHECK_THAT(decodeError(huge, 0xffffffffu), Catch::Contains("row set truncated: 4000000000 rows in 3 bytes"));
  CHECK_THAT(decodeError({varint, 3, 1, 2}, 10), Catch::Contains("row set truncated: 3 rows in 2 bytes"));
  CHECK_THAT(decodeError({bitmap, 17, 0xff, 0xff}, 1000), Catch::Contains("row set truncated: 17 rows in 2 bytes"));

  // Out of range, not increasing, trailing bytes (delta varint).
  CHECK_THAT(decodeError({varint, 2, 4, 6}, 10), Catch::Contains("index 10 at position 1 out of range for 10"));
  CHECK_THAT(decodeError({varint, 3, 4, 1, 0}, 10), Catch::Contains("not increasing at position 2"));
  CHECK_THAT(decodeError({varint, 1, 4, 0}, 10), Catch::Contains("1 trailing bytes"));
  CHECK_THAT(decodeError({varint, 1, 0x84}, 10), Catch::Contains("is truncated"));

  // Bitmap: wrong length, bits past the universe, a population other than the count.
  CHECK_THAT(decodeError({bitmap, 1, 1}, 16), Catch::Contains("index bitmap of 1 bytes for 16 elements"));
  CHECK_THAT(decodeError({bitmap, 1, 0x80}, 7), Catch::Contains("bits set beyond element 7"));
  CHECK_THAT(decodeError({bitmap, 2, 0x01}, 8), Catch::Contains("holds 1 elements, selected says 2"));

  // Rice: truncated, out of range, padding, trailing bytes.
  std::mt19937_64 rng(5);
  const RowSet s = randomSet(1u << 20, 2000, rng);
  std::vector<std::uint8_t> good = encodeRowSet(s);
  REQUIRE(good[0] == rice);
  std::vector<std::uint8_t> cut(good.begin(), good.end() - 20);
  CHECK_THAT(decodeError(cut, 1u << 20), Catch::Contains("truncated"));
  std::vector<std::uint8_t> longer = good;
  longer.push_back(0);
  CHECK_THAT(decodeError(longer, 1u << 20), Catch::Contains("trailing bytes"));
  // The same bytes over a smaller universe: the last rows fall outside it.
  CHECK_THAT(decodeError(good, s.rows().back()), Catch::Contains("out of range"));
  // r = 0, count 1, a unary run of ones past a universe of 4.
  CHECK_THAT(decodeError({rice, 1, 0, 0xff}, 4), Catch::Contains("runs past 4 elements"));
  // r = 0, count 1: the gap 0 (bit 0), then a set padding bit.
  CHECK_THAT(decodeError({rice, 1, 0, 0x02}, 4), Catch::Contains("nonzero padding"));
  CHECK_THAT(decodeError({rice, 1, 25, 0}, 4), Catch::Contains("rice parameter 25 above 24"));
}

TEST_CASE("corrupted row sets decode to an error or to a valid set", "[row-set]") {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 3000; ++trial) {
    const auto universe = static_cast<std::uint32_t>(1 + rng() % 100000);
    const auto n = static_cast<std::uint32_t>(rng() % std::min<std::uint32_t>(universe + 1, 3000));
    std::vector<std::uint8_t> bytes = encodeRowSet(randomSet(universe, n, rng));
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f)
      bytes[rng() % bytes.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
    if (rng() % 4 == 0) bytes.resize(rng() % (bytes.size() + 1));
    auto back = decodeRowSet(bytes, universe);
    if (!back.isOk()) {
      CHECK(back.status().code() == StatusCode::kMalformed);
      continue;
    }
    CHECK(back->universe() == universe);
    CHECK(std::is_sorted(back->rows().begin(), back->rows().end()));
    CHECK(roundTrip(*back) == *back);
  }
}
