#pragma once
// Top-k: keeps the k elements of largest magnitude, sends their indices and values.
// A contraction with delta = k / d. Ties at the k-th magnitude go to the lowest
// indices, so exactly k elements are kept and the result is deterministic.
//
// Exact mode selects over all d magnitudes (std::nth_element on a copy).
// Sampled mode is DGC's threshold (Lin et al., ICLR 2018): estimate the magnitude
// threshold from a sample of runs of consecutive elements at random positions (sized
// for about 1024 sample elements above the threshold, at most half of d), keep the
// candidates at or above it in one pass over v, and select exactly k among the
// candidates. The first threshold aims at 1.12k candidates; if fewer than k pass, the
// threshold is lowered (to the sample's statistic at twice the rank, then by 0.8) and
// the pass repeats, at most 10 times before falling back to exact selection. The
// result is always the exact top-k; only the time differs. Small tensors (d < 32768),
// and densities so low that a sample of half of d would hold fewer than 128 elements
// above the threshold, use exact mode.

#include <cstdint>
#include <vector>

#include "starling/compression/compressor.hpp"

namespace starling::compression {

struct TopKOptions {
  // kFp32, kFp16, or kSignBits: sparse ternary (makeTernary below).
  ValueFormat values = ValueFormat::kFp32;
  bool sampled = false;
};

// Sparse ternary values (STC, Sattler et al. 2019): replaces the values of a top-k
// tensor by +s or -s (their signs), s = the mean magnitude of the selected values of
// its block: kTernaryBlock consecutive selected values (in index order, so a block lies
// within a layer or spans two, and layers of different scales keep them). Sets
// valueFormat = kSignBits, block = kTernaryBlock, one scale per block. On the wire one
// bit per value plus 32 / kTernaryBlock. Still a contraction: in each block B of the
// selected set, sum_B (|v_i| - s_B)^2 = ||v_B||^2 - |B| s_B^2, so
// ||C(v) - v||^2 = ||v||^2 - sum_B |B| s_B^2, and |B| s_B^2 >= ||v_B||^2 / |B|, so
// delta >= 1/d (top-k alone has k/d). Error feedback keeps the magnitudes rounded away.
inline constexpr std::uint32_t kTernaryBlock = 256;
void makeTernary(Compressed& c);

// What the last compress() call did; for tests and benchmarks.
struct TopKStats {
  std::uint32_t k = 0;
  bool exact = true;                  // exact selection over all d elements
  std::uint32_t sampleSize = 0;       // elements in the threshold sample
  std::uint32_t passes = 0;           // passes over v that compare against a threshold
  std::uint64_t firstCandidates = 0;  // candidates of the first pass, before truncation
  std::uint64_t candidates = 0;       // candidates of the last pass, before truncation
  float threshold = 0.0f;             // the last pass's threshold
};

class TopKCompressor final : public Compressor {
 public:
  explicit TopKCompressor(TopKOptions options = {});

  std::string_view name() const override { return options_.sampled ? "topk-sampled" : "topk"; }
  Status compress(std::span<const float> v, const CompressParams& params, Compressed& out) override;

  const TopKStats& lastStats() const { return stats_; }

 private:
  Status compressExact(std::span<const float> v, std::uint32_t k, Compressed& out);
  Status compressSampled(std::span<const float> v, std::uint32_t k, std::uint64_t seed, Compressed& out);

  TopKOptions options_;
  TopKStats stats_;
  std::vector<std::uint32_t> magnitudes_;       // scratch: bits of |v|, or of the sample
  std::vector<std::uint32_t> subsample_;        // scratch: every 8th sample element
  std::vector<std::uint32_t> candidates_;       // scratch: candidate indices
  std::vector<std::uint32_t> candidateValues_;  // scratch: bits of the candidates' values
  std::vector<std::uint32_t> histogram_;        // scratch: candidate magnitudes by bucket
};

}  // namespace starling::compression
