#include "starling/compression/topk.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "starling/compression/fp16.hpp"

#include "random.hpp"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace starling::compression {

// Magnitudes are handled as the bit patterns of |v_i| read as unsigned integers: for
// non-negative floats their order is the float order, infinity sorts above every
// finite value and NaN above infinity. So the comparisons below are a total order
// (no undefined behaviour in std::nth_element) and one integer compare against
// kInfinityBits finds every non-finite element.

namespace {

constexpr std::uint32_t kAbsMask = 0x7fffffffu;
constexpr std::uint32_t kInfinityBits = 0x7f800000u;

// Sampled mode: runs of this many consecutive elements (one cache line) form the
// sample; the sample is sized so that about kSampleHits of its elements lie above the
// threshold, which keeps the relative error of the estimated count near
// 1 / sqrt(kSampleHits) (3%): on i.i.d. inputs, fewer than k (a second pass) or more
// than 1.3k is rarer than once in 2000 calls.
constexpr std::uint32_t kRun = 16;
constexpr double kSampleHits = 1024.0;
constexpr double kMinSampleHits = 128.0;
constexpr double kTargetFactor = 1.12;  // aim at 1.12k candidates
constexpr std::uint32_t kMaxRetries = 10;
constexpr std::size_t kMinSampledSize = std::size_t{1} << 15;

inline std::uint32_t magnitudeBits(float x) {
  return std::bit_cast<std::uint32_t>(x) & kAbsMask;
}

Status nonFinite(std::span<const float> v) {
  Status status = checkInput(v);
  if (status.isOk()) return {StatusCode::kInternal, "top-k: a non-finite magnitude vanished"};
  return status;
}

// Writes the k elements of largest magnitude (ties to the lowest indices) in
// increasing index order, with their values, into out. mags[i] holds the magnitude
// bits of v[i] and is permuted.
void selectExactly(std::span<const float> v, std::uint32_t k, std::uint32_t* mags, Compressed& out) {
  const std::size_t n = v.size();
  std::nth_element(mags, mags + (k - 1), mags + n, std::greater<std::uint32_t>());
  const std::uint32_t threshold = mags[k - 1];
  std::uint32_t greater = 0;
  for (std::uint32_t j = 0; j + 1 < k; ++j)
    greater += mags[j] > threshold ? 1u : 0u;
  std::uint32_t ties = k - greater;  // >= 1: mags[k - 1] itself

  out.indices.resize(k);
  out.values.resize(k);
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n && m < k; ++i) {
    const std::uint32_t a = magnitudeBits(v[i]);
    if (a > threshold || (a == threshold && ties > 0)) {
      if (a == threshold) --ties;
      out.indices[m] = static_cast<std::uint32_t>(i);
      out.values[m] = v[i];
      ++m;
    }
  }
}

// Writes every i with |v_i| >= threshold to indices, and the bits of v_i to values;
// returns how many. Grows both buffers as needed (to at most d + 16 entries).
std::size_t scanCandidates(std::span<const float> v, std::uint32_t threshold, std::vector<std::uint32_t>& indices,
                           std::vector<std::uint32_t>& values) {
  const std::size_t d = v.size();
  std::size_t n = 0;
  auto reserve = [&](std::size_t need) {
    if (need > indices.size()) {
      const std::size_t size = std::max({indices.size() * 2, need, std::size_t{1024}});
      indices.resize(size);
      values.resize(size);
    }
  };
  reserve(1024);
  const float* data = v.data();
  std::size_t i = 0;
#if defined(__AVX512F__)
  const __m512i absMask = _mm512_set1_epi32(static_cast<int>(kAbsMask));
  const __m512i limit = _mm512_set1_epi32(static_cast<int>(threshold));
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; i + 16 <= d; i += 16) {
    const __m512i x = _mm512_loadu_si512(data + i);
    const __mmask16 mask = _mm512_cmpge_epu32_mask(_mm512_and_si512(x, absMask), limit);
    if (mask == 0) continue;
    reserve(n + 16);
    const __m512i index = _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int>(i)));
    _mm512_mask_compressstoreu_epi32(indices.data() + n, mask, index);
    _mm512_mask_compressstoreu_epi32(values.data() + n, mask, x);
    n += static_cast<std::size_t>(std::popcount(static_cast<unsigned>(mask)));
  }
#elif defined(__AVX2__)
  const __m256i absMask = _mm256_set1_epi32(static_cast<int>(kAbsMask));
  // a >= threshold  <=>  a > threshold - 1 (as signed: magnitudes are below 2^31).
  const __m256i below = _mm256_set1_epi32(static_cast<int>(threshold) - 1);
  for (; i + 16 <= d; i += 16) {
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i + 8));
    const auto m0 = static_cast<std::uint32_t>(
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_and_si256(x0, absMask), below))));
    const auto m1 = static_cast<std::uint32_t>(
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_and_si256(x1, absMask), below))));
    std::uint32_t mask = m0 | (m1 << 8);
    if (mask == 0) continue;
    reserve(n + 16);
    while (mask != 0) {
      const auto j = static_cast<std::uint32_t>(std::countr_zero(mask));
      indices[n] = static_cast<std::uint32_t>(i) + j;
      values[n] = std::bit_cast<std::uint32_t>(data[i + j]);
      ++n;
      mask &= mask - 1;
    }
  }
#endif
  for (; i < d; ++i) {
    if (magnitudeBits(data[i]) >= threshold) {
      reserve(n + 1);
      indices[n] = static_cast<std::uint32_t>(i);
      values[n] = std::bit_cast<std::uint32_t>(data[i]);
      ++n;
    }
  }
  return n;
}

// Like selectExactly, over n candidates given as (index, value bits) pairs in
// increasing index order; reads nothing of v. The k-th largest magnitude is found by
// a histogram of the top 15 magnitude bits (exponent and 7 mantissa bits), then a
// selection within its bucket only. mags is scratch of n entries; histogram of
// kBuckets entries.
constexpr unsigned kBucketShift = 16;
constexpr std::size_t kBuckets = std::size_t{1} << (31 - kBucketShift);

void selectFromCandidates(const std::uint32_t* indices, const std::uint32_t* values, std::size_t n, std::uint32_t k,
                          std::uint32_t* mags, std::uint32_t* histogram, Compressed& out) {
  std::fill(histogram, histogram + kBuckets, 0u);
  for (std::size_t j = 0; j < n; ++j)
    ++histogram[(values[j] & kAbsMask) >> kBucketShift];
  std::size_t above = 0;  // candidates in buckets above `bucket`
  std::size_t bucket = kBuckets - 1;
  while (above + histogram[bucket] < k)
    above += histogram[bucket--];
  std::size_t m = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const std::uint32_t a = values[j] & kAbsMask;
    if ((a >> kBucketShift) == bucket) mags[m++] = a;
  }
  const std::size_t need = k - above;  // 1 <= need <= m
  std::nth_element(mags, mags + (need - 1), mags + m, std::greater<std::uint32_t>());
  const std::uint32_t threshold = mags[need - 1];
  auto greater = static_cast<std::uint32_t>(above);
  for (std::size_t j = 0; j + 1 < need; ++j)
    greater += mags[j] > threshold ? 1u : 0u;
  std::uint32_t ties = k - greater;

  out.indices.resize(k);
  out.values.resize(k);
  std::uint32_t taken = 0;
  for (std::size_t j = 0; j < n && taken < k; ++j) {
    const std::uint32_t a = values[j] & kAbsMask;
    if (a > threshold || (a == threshold && ties > 0)) {
      if (a == threshold) --ties;
      out.indices[taken] = indices[j];
      out.values[taken] = std::bit_cast<float>(values[j]);
      ++taken;
    }
  }
}

}  // namespace

TopKCompressor::TopKCompressor(TopKOptions options) : options_(options) {}

Status TopKCompressor::compress(std::span<const float> v, const CompressParams& params, Compressed& out) {
  if (v.empty()) return checkInput(v);
  Result<std::uint32_t> k = selectedCount(v.size(), params.density);
  if (!k) return k.status();
  out.clear();
  out.encoding = Encoding::kTopK;
  out.count = static_cast<std::uint32_t>(v.size());
  out.valueFormat = options_.values;
  stats_ = TopKStats{};
  stats_.k = *k;
  Status status = options_.sampled ? compressSampled(v, *k, params.seed, out) : compressExact(v, *k, out);
  if (!status) return status;
  if (options_.values == ValueFormat::kFp16) roundToHalfSaturating(out.values, out.values);
  if (options_.values == ValueFormat::kSignBits) makeTernary(out);
  return Status::ok();
}

void makeTernary(Compressed& c) {
  const std::size_t n = c.values.size();
  c.valueFormat = ValueFormat::kSignBits;
  c.block = kTernaryBlock;
  c.scales.assign((n + kTernaryBlock - 1) / kTernaryBlock, 0.0f);
  for (std::size_t b = 0; b < c.scales.size(); ++b) {
    const std::size_t begin = b * kTernaryBlock, end = std::min(n, begin + kTernaryBlock);
    double sum = 0.0;
    for (std::size_t j = begin; j < end; ++j)
      sum += std::fabs(static_cast<double>(c.values[j]));
    const float scale = static_cast<float>(sum / static_cast<double>(end - begin));
    c.scales[b] = scale;
    for (std::size_t j = begin; j < end; ++j)
      c.values[j] = std::signbit(c.values[j]) ? -scale : scale;
  }
}

Status TopKCompressor::compressExact(std::span<const float> v, std::uint32_t k, Compressed& out) {
  if (v.size() > std::numeric_limits<std::uint32_t>::max()) return checkInput(v);
  stats_.exact = true;
  stats_.passes = 1;
  magnitudes_.resize(v.size());
  std::uint32_t maxBits = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    magnitudes_[i] = magnitudeBits(v[i]);
    maxBits = std::max(maxBits, magnitudes_[i]);
  }
  if (maxBits >= kInfinityBits) return nonFinite(v);
  selectExactly(v, k, magnitudes_.data(), out);
  return Status::ok();
}

Status TopKCompressor::compressSampled(std::span<const float> v, std::uint32_t k, std::uint64_t seed, Compressed& out) {
  const std::size_t d = v.size();
  const double fraction = static_cast<double>(k) / static_cast<double>(d);
  // At most half of d is sampled; below kMinSampleHits expected hits the
  // threshold estimate is too rough to pay, and exact selection is used.
  const std::size_t sampleSize =
      std::min(static_cast<std::size_t>(std::ceil(kSampleHits / fraction / kRun)), d / 2 / kRun) * kRun;
  if (d < kMinSampledSize || static_cast<double>(sampleSize) * fraction < kMinSampleHits ||
      d > std::numeric_limits<std::uint32_t>::max()) {
    return compressExact(v, k, out);
  }
  stats_.exact = false;
  stats_.sampleSize = static_cast<std::uint32_t>(sampleSize);

  // The sample: one run at a random offset in each of `runs` equal strata.
  const std::size_t runs = sampleSize / kRun;
  const std::size_t stratum = d / runs;  // >= 2 kRun since sampleSize <= d / 2
  detail::SplitMix64 rng(detail::mix64(seed ^ detail::kStreamTopKSample));
  magnitudes_.resize(sampleSize);
  for (std::size_t r = 0; r < runs; ++r) {
    const std::size_t start = r * stratum + rng.below(stratum - kRun + 1);
    for (std::uint32_t j = 0; j < kRun; ++j)
      magnitudes_[r * kRun + j] = magnitudeBits(v[start + j]);
  }

  // The threshold keeps a fraction kTargetFactor * k / d of the sample: the sample's
  // rank-th largest magnitude. Selecting it directly in a large sample dominates the
  // cost at low densities, so first every 8th sample element gives a lower bound (its
  // statistic at 3/8 of the rank, so about 3 rank elements lie above it), the
  // elements above the bound move to the front, and the selection runs among them.
  auto sampleBegin = magnitudes_.begin();
  auto sampleEnd = magnitudes_.begin() + static_cast<std::ptrdiff_t>(sampleSize);
  std::size_t rank = std::min(sampleSize, static_cast<std::size_t>(std::ceil(kTargetFactor * fraction * sampleSize)));
  auto selectEnd = sampleEnd;
  const std::size_t subRank = (3 * rank + 7) / 8;
  const std::size_t subSize = sampleSize / 8;
  if (subRank >= 32 && 4 * subRank <= subSize) {  // worth it only for a small rank
    subsample_.resize(subSize);
    for (std::size_t j = 0; j < subsample_.size(); ++j)
      subsample_[j] = magnitudes_[8 * j];
    std::nth_element(subsample_.begin(), subsample_.begin() + static_cast<std::ptrdiff_t>(subRank - 1),
                     subsample_.end(), std::greater<std::uint32_t>());
    const std::uint32_t bound = subsample_[subRank - 1];
    const auto mid = std::partition(sampleBegin, sampleEnd, [bound](std::uint32_t a) { return a >= bound; });
    if (mid - sampleBegin >= static_cast<std::ptrdiff_t>(rank)) selectEnd = mid;
  }
  std::nth_element(sampleBegin, sampleBegin + static_cast<std::ptrdiff_t>(rank - 1), selectEnd,
                   std::greater<std::uint32_t>());
  std::uint32_t threshold = magnitudes_[rank - 1];

  for (std::uint32_t pass = 0;; ++pass) {
    // Every non-finite element is at or above a finite threshold, so it becomes a
    // candidate and the check below sees it.
    if (threshold >= kInfinityBits) return nonFinite(v);
    const std::size_t n = scanCandidates(v, threshold, candidates_, candidateValues_);
    stats_.passes = pass + 1;
    stats_.threshold = std::bit_cast<float>(threshold);
    stats_.candidates = n;
    if (pass == 0) stats_.firstCandidates = n;
    if (n >= k) {
      std::uint32_t maxBits = 0;
      for (std::size_t j = 0; j < n; ++j)
        maxBits = std::max(maxBits, candidateValues_[j] & kAbsMask);
      if (maxBits >= kInfinityBits) return nonFinite(v);
      magnitudes_.resize(std::max(magnitudes_.size(), n));
      histogram_.resize(kBuckets);
      selectFromCandidates(candidates_.data(), candidateValues_.data(), n, k, magnitudes_.data(), histogram_.data(),
                           out);
      return Status::ok();
    }
    if (pass + 1 > kMaxRetries) break;
    // Too few: lower the threshold, first to the sample's statistic at twice the
    // rank, and by DGC's factor 0.8 when the sample has nothing lower to offer.
    std::uint32_t lower = 0;
    const std::size_t nextRank = rank * 2;
    if (nextRank <= sampleSize) {
      std::nth_element(sampleBegin + static_cast<std::ptrdiff_t>(rank),
                       sampleBegin + static_cast<std::ptrdiff_t>(nextRank - 1), sampleEnd,
                       std::greater<std::uint32_t>());
      lower = magnitudes_[nextRank - 1];
      rank = nextRank;
    }
    if (lower >= threshold || nextRank > sampleSize) {
      lower = std::bit_cast<std::uint32_t>(std::bit_cast<float>(threshold) * 0.8f);
      rank = sampleSize + 1;  // the sample is exhausted
    }
    threshold = lower;
  }
  return compressExact(v, k, out);
}

}  // namespace starling::compression
