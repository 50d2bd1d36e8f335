#pragma once
// A small sparse classification data set for tests of sparse models: n examples over
// dim features, each with up to `perExample` features drawn from `used` evenly spaced
// ones (feature (u x dim / used) + a jitter below 3), values in [0.5, 1.4], the label the
// smallest feature mod `classes`. Seeded; the same on every machine.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "starling/data/dataset.hpp"

namespace starling::test {

inline data::Dataset sparseData(std::size_t n, std::size_t dim, std::size_t used, int perExample, int classes,
                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t stride = dim / used;
  std::vector<uint64_t> offsets{0};
  std::vector<uint32_t> indices;
  std::vector<float> values;
  std::vector<int32_t> labels;
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<uint32_t> f;
    for (int k = 0; k < perExample; ++k)
      f.push_back(static_cast<uint32_t>((rng() % used) * stride + rng() % std::min<std::size_t>(3, stride)));
    std::sort(f.begin(), f.end());
    f.erase(std::unique(f.begin(), f.end()), f.end());
    for (uint32_t j : f) {
      indices.push_back(j);
      values.push_back(0.5f + float(rng() % 10) / 10.0f);
    }
    offsets.push_back(indices.size());
    labels.push_back(static_cast<int32_t>(f.front() % static_cast<uint32_t>(classes)));
  }
  auto d = data::Dataset::fromSparse(offsets, indices, values, labels, dim, classes);
  REQUIRE(d.isOk());
  return std::move(d).value();
}

}  // namespace starling::test
