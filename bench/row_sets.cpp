// bench/row_sets: clients' row sets (issue 22) in bytes, exact and coarsened, on power-law and LIBSVM data
//
// For each data set, partitioned IID among clients: per client the features its
// examples touch (data::featuresTouched), as a compression::RowSet, coded with
// encodeRowSet; then coarsened into buckets of B rows (B = 16, 256), the bucket set's
// bytes and the rows the buckets cover (what a client would pull and push instead of
// its own rows: the privacy note's cost). Baselines in the same run: the entropy of a
// uniformly random set of the same size (log2 C(universe, rows)), a bitmap of the
// universe, and 4 bytes per row (a plain uint32 list).
//
//   bench-row_sets [--examples N] [--clients C] [--features D] [--tokens K]
//                  [--exponent S] [--seed SEED] [--libsvm FILE [--libsvm-clients C]]
//
// Defaults: 100,000 power-law examples (K = 32 tokens, s = 1.1, D = 2^20) over 100
// clients. Last line: summary: power_law_bits_per_row=... power_law_bytes_b16_vs_exact=...
// power_law_rows_b256_vs_exact=...

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "starling/compression/row_set.hpp"
#include "starling/data/dataset.hpp"
#include "starling/data/loaders.hpp"
#include "starling/data/partition.hpp"
#include "starling/data/synthetic.hpp"
#include "starling/data/touched_features.hpp"

namespace {

using namespace starling;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench-row_sets: %s\n", what.c_str());
  std::exit(2);
}

double entropyBits(double universe, double n) {
  return (std::lgamma(universe + 1.0) - std::lgamma(n + 1.0) - std::lgamma(universe - n + 1.0)) / std::log(2.0);
}

// Sums over the clients of one data set.
struct Totals {
  double clients = 0;
  double rows = 0;          // rows touched
  double bytes = 0;         // encodeRowSet of the exact set
  double entropyBytes = 0;  // log2 C(universe, rows) / 8
  double bucketBytes[2] = {0, 0};
  double coveredRows[2] = {0, 0};
  double maxRows = 0;
};

constexpr std::uint32_t kBuckets[2] = {16, 256};

Totals measure(const data::Dataset& d, const data::Partition& parts) {
  const auto universe = static_cast<std::uint32_t>(d.featureDim());
  Totals t;
  for (const auto& examples : parts) {
    const compression::RowSet rows =
        compression::RowSet::fromSorted(data::featuresTouched(d, examples), universe).value();
    const std::vector<std::uint8_t> bytes = compression::encodeRowSet(rows);
    if (compression::decodeRowSet(bytes, universe).value() != rows) die("row set did not survive its coding");
    t.clients += 1;
    t.rows += static_cast<double>(rows.size());
    t.maxRows = std::max(t.maxRows, static_cast<double>(rows.size()));
    t.bytes += static_cast<double>(bytes.size());
    t.entropyBytes += entropyBits(universe, static_cast<double>(rows.size())) / 8.0;
    for (int b = 0; b < 2; ++b) {
      const compression::RowSet buckets = compression::coarsen(rows, kBuckets[b]).value();
      t.bucketBytes[b] += static_cast<double>(compression::encodeRowSet(buckets).size());
      t.coveredRows[b] += static_cast<double>(compression::coveredRows(buckets, kBuckets[b], universe)->size());
    }
  }
  return t;
}

void print(const char* name, const data::Dataset& d, const Totals& t) {
  const double c = t.clients;
  const double universe = static_cast<double>(d.featureDim());
  std::printf("\n%s: %zu examples, %zu features, %.0f clients\n", name, d.size(), d.featureDim(), c);
  std::printf("  rows touched per client: mean %.1f (%.3f%% of the features), max %.0f\n", t.rows / c,
              100.0 * t.rows / c / universe, t.maxRows);
  std::printf("  %-34s %12s %12s %14s\n", "per client", "bytes", "bits/row", "rows moved");
  std::printf("  %-34s %12.1f %12.3f %14.1f\n", "row set, exact (encodeRowSet)", t.bytes / c, 8.0 * t.bytes / t.rows,
              t.rows / c);
  std::printf("  %-34s %12.1f %12.3f %14s\n", "  entropy log2 C(D, rows) / 8", t.entropyBytes / c,
              8.0 * t.entropyBytes / t.rows, "");
  std::printf("  %-34s %12.1f %12.3f %14s\n", "  bitmap of the D features", std::ceil(universe / 8.0),
              8.0 * std::ceil(universe / 8.0) * c / t.rows, "");
  std::printf("  %-34s %12.1f %12.3f %14s\n", "  uint32 per row", 4.0 * t.rows / c, 32.0, "");
  for (int b = 0; b < 2; ++b) {
    const std::string label = "coarsened, B = " + std::to_string(kBuckets[b]);
    std::printf("  %-34s %12.1f %12.3f %14.1f\n", label.c_str(), t.bucketBytes[b] / c, 8.0 * t.bucketBytes[b] / t.rows,
                t.coveredRows[b] / c);
  }
  std::printf(
      "  (bits/row: per row touched; rows moved: the rows a client pulls and pushes, x %.2f at B = 16, x %.2f "
      "at B = 256)\n",
      t.coveredRows[0] / t.rows, t.coveredRows[1] / t.rows);
}

}  // namespace

int main(int argc, char** argv) {
  data::PowerLawOptions o;
  o.examples = 100000;
  std::size_t clients = 100;
  std::string libsvm;
  std::size_t libsvmClients = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) die("missing the value of " + arg);
    const char* v = argv[++i];
    if (arg == "--examples") {
      o.examples = std::strtoull(v, nullptr, 10);
    } else if (arg == "--clients") {
      clients = std::strtoull(v, nullptr, 10);
    } else if (arg == "--features") {
      o.features = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (arg == "--tokens") {
      o.tokens = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (arg == "--exponent") {
      o.exponent = std::strtod(v, nullptr);
    } else if (arg == "--seed") {
      o.seed = std::strtoull(v, nullptr, 10);
    } else if (arg == "--libsvm") {
      libsvm = v;
    } else if (arg == "--libsvm-clients") {
      libsvmClients = std::strtoull(v, nullptr, 10);
    } else {
      die("unknown option " + arg);
    }
  }
  if (clients == 0 || libsvmClients == 0) die("--clients and --libsvm-clients must be at least 1");

  auto synthetic = data::powerLawSparse(o);
  if (!synthetic) die(synthetic.status().toString());
  const Totals p = measure(*synthetic, data::partitionIid(synthetic->size(), clients, o.seed));
  std::printf("# bench-row_sets: power law K = %u tokens, s = %.2f, seed %llu; IID partitions\n", o.tokens, o.exponent,
              static_cast<unsigned long long>(o.seed));
  print("power law", *synthetic, p);

  if (!libsvm.empty()) {
    auto d = data::loadLibsvm(libsvm);
    if (!d) die(d.status().toString());
    const Totals t = measure(*d, data::partitionIid(d->size(), libsvmClients, 1));
    print(libsvm.c_str(), *d, t);
  }
  std::printf(
      "\nsummary: power_law_rows_per_client=%.0f power_law_bits_per_row=%.3f power_law_bytes_b16_vs_exact=%.3f "
      "power_law_bytes_b256_vs_exact=%.3f power_law_rows_b16_vs_exact=%.2f power_law_rows_b256_vs_exact=%.2f\n",
      p.rows / p.clients, 8.0 * p.bytes / p.rows, p.bucketBytes[0] / p.bytes, p.bucketBytes[1] / p.bytes,
      p.coveredRows[0] / p.rows, p.coveredRows[1] / p.rows);
  return 0;
}
