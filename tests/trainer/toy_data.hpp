#pragma once
// Small synthetic data sets with fixed seeds for the trainer and sampler tests.

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/model/model.hpp"

namespace starling::client::test {

// classes Gaussian blobs in dim dimensions, centres on a scaled simplex-like grid far
// enough apart that the classes are linearly separable (up to rare outliers).
inline data::Dataset blobs(int n, int dim, int classes, uint64_t seed, float spread = 0.5f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<std::vector<float>> centres(classes, std::vector<float>(dim));
  for (auto& c : centres)
    for (float& v : c)
      v = 3.0f * g(rng);
  std::vector<float> x(static_cast<std::size_t>(n) * dim);
  std::vector<int32_t> y(n);
  for (int i = 0; i < n; ++i) {
    y[i] = i % classes;
    for (int j = 0; j < dim; ++j)
      x[static_cast<std::size_t>(i) * dim + j] = centres[y[i]][j] + spread * g(rng);
  }
  auto ds = data::Dataset::fromFloats(std::move(x), std::move(y), dim, classes);
  return std::move(ds).value();
}

// A model built from spec and initialized with seed; fails the test on a bad spec.
inline model::Model toyModel(const char* spec, uint64_t seed) {
  auto m = model::Model::fromSpec(spec);
  REQUIRE(m.isOk());
  m->initialize(seed);
  return std::move(m).value();
}

}  // namespace starling::client::test
