// bench-compression: throughput and bits per element of every compressor and of the
// payload codec on one core, beside this machine's STREAM-style copy bandwidth
// measured in the same run.
//
// One table: for d in {200k, 1M, 10M} and densities {1%, 0.1%} (top-k and rand-k;
// the dense, sign and QSGD compressors do not depend on density and run once per d),
// elements per second of compress, encode (Compressed -> Payload) and decode
// (Payload -> Compressed), and the bits per element of the finished Flatbuffers
// table. Times are medians of repeated runs. Top-k and rand-k send fp16 values.
// Last line:
//   summary: topk_sampled_speedup_10m=X topk_sampled_copy_fraction=Y
//            topk1pct_bits_per_elem=Z sign_bits_per_elem=W
// where X and Y are the worse of the two densities at d = 10M, Y compares the rate at
// which sampled top-k reads its input (4 d bytes per call) with the copy bandwidth
// (bytes read + written per second, as STREAM counts them), and Z and W are the
// largest over d.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "starling/compression/compressor.hpp"
#include "starling/compression/payload.hpp"
#include "starling/compression/topk.hpp"
#include "starling/compression/wire_codec.hpp"

using namespace starling;
using namespace starling::compression;

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of fn() over repetitions filling about `budget` seconds (3 to 31 runs).
template <typename Fn>
double medianSeconds(Fn&& fn, double budget = 0.15) {
  auto once = [&] {
    const auto start = Clock::now();
    fn();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  std::vector<double> times{once()};
  const int reps = std::clamp(static_cast<int>(budget / std::max(times[0], 1e-9)), 3, 31);
  for (int i = 0; i < reps; ++i)
    times.push_back(once());
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

void check(const Status& s, const char* what) {
  if (!s.isOk()) {
    std::fprintf(stderr, "%s: %s\n", what, s.toString().c_str());
    std::exit(1);
  }
}

// STREAM "copy" a[i] = b[i] over arrays larger than the caches: bytes read + written
// per second, best of several runs (STREAM reports the best).
double copyBandwidth() {
  const std::size_t n = 20'000'000;
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  double best = 1e30;
  for (int i = 0; i < 8; ++i) {
    const auto start = Clock::now();
    std::copy(b.begin(), b.end(), a.begin());
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    b[i] = a[n - 1 - i];  // keep the copies observable
  }
  return 2.0 * sizeof(float) * n / best;
}

struct Row {
  std::size_t d;
  double density;  // 0 for compressors that do not use it
  std::string name;
  double compress, encode, decode;  // seconds
  double bits;                      // per element, Flatbuffers table included
};

}  // namespace

int main() {
  const double copyBw = copyBandwidth();
  std::printf("# bench-compression: one core; STREAM copy bandwidth %.2f GB/s (read + write)\n", copyBw / 1e9);
  std::printf("# rates in million elements per second of the full tensor; top-k and rand-k send fp16\n");
  std::printf("# passes: mean threshold passes over the input per top-k call (1 = no retry)\n");
  std::printf("%-9s %-8s %-13s %11s %11s %11s %10s %12s %7s\n", "d", "density", "compressor", "compress", "encode",
              "decode", "bits/elem", "input GB/s", "passes");

  std::vector<Row> rows;
  double worstSpeedup = 1e30, worstFraction = 1e30, topkBits = 0, signBits = 0;
  CompressorOptions options;
  options.values = ValueFormat::kFp16;

  for (std::size_t d : {std::size_t{200'000}, std::size_t{1'000'000}, std::size_t{10'000'000}}) {
    std::mt19937_64 rng(d);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(d);
    for (float& x : v)
      x = normal(rng);

    struct Case {
      const char* name;
      double density;
    };
    std::vector<Case> cases = {{"identity", 0}, {"fp16", 0}, {"sign", 0}, {"qsgd", 0}};
    for (double density : {0.01, 0.001}) {
      for (const char* name : {"topk", "topk-sampled", "randk"})
        cases.push_back({name, density});
    }
    double exactTime[2] = {0, 0};
    for (const Case& c : cases) {
      auto made = makeCompressor(c.name, options);
      check(made.status(), c.name);
      Compressor& compressor = **made;
      // A new seed per call, as every round has its own.
      CompressParams params{c.density > 0 ? c.density : 1.0, 12345};
      Compressed q;
      Payload p;
      Compressed back;
      Row row{d, c.density, c.name, 0, 0, 0, 0};
      std::uint64_t passes = 0, calls = 0;
      row.compress = medianSeconds([&] {
        ++params.seed;
        check(compressor.compress(v, params, q), c.name);
        if (auto* topk = dynamic_cast<TopKCompressor*>(&compressor)) {
          passes += topk->lastStats().passes;
          ++calls;
        }
      });
      row.encode = medianSeconds([&] { check(encode(q, p), "encode"); });
      row.decode = medianSeconds([&] { check(decode(p, static_cast<std::uint32_t>(d), back), "decode"); });
      if (!(back == q)) {
        std::fprintf(stderr, "%s: decode(encode(q)) differs from q\n", c.name);
        return 1;
      }
      flatbuffers::FlatBufferBuilder builder(p.byteSize() + 1024);
      builder.Finish(toWire(builder, p));
      row.bits = 8.0 * builder.GetSize() / static_cast<double>(d);

      const double mega = static_cast<double>(d) / 1e6;
      char density[16] = "-";
      if (c.density > 0) std::snprintf(density, sizeof density, "%g%%", c.density * 100);
      const bool topk = row.name == "topk" || row.name == "topk-sampled";
      char input[16] = "";
      char passesText[16] = "";
      if (topk) std::snprintf(input, sizeof input, "%.2f", 4.0 * d / row.compress / 1e9);
      if (topk && calls > 0) std::snprintf(passesText, sizeof passesText, "%.2f", static_cast<double>(passes) / calls);
      std::printf("%-9zu %-8s %-13s %11.1f %11.1f %11.1f %10.4f %12s %7s\n", d, density, c.name, mega / row.compress,
                  mega / row.encode, mega / row.decode, row.bits, input, passesText);
      std::fflush(stdout);

      const int densityIndex = c.density == 0.01 ? 0 : 1;
      if (row.name == "topk") exactTime[densityIndex] = row.compress;
      if (row.name == "topk-sampled" && d == 10'000'000) {
        worstSpeedup = std::min(worstSpeedup, exactTime[densityIndex] / row.compress);
        worstFraction = std::min(worstFraction, (4.0 * d / row.compress) / copyBw);
      }
      if (row.name == "topk-sampled" && c.density == 0.01) topkBits = std::max(topkBits, row.bits);
      if (row.name == "sign") signBits = std::max(signBits, row.bits);
      rows.push_back(row);
    }
  }
  std::printf(
      "summary: topk_sampled_speedup_10m=%.1f topk_sampled_copy_fraction=%.2f "
      "topk1pct_bits_per_elem=%.3f sign_bits_per_elem=%.4f\n",
      worstSpeedup, worstFraction, topkBits, signBits);
  return 0;
}
