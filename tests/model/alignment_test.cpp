// Determinism across addresses: the same model, seed and batch train to the same bits
// wherever in memory the caller's buffers lie, and the sums the model and the trainer
// reduce with do not depend on the address (docs/model.md, "Determinism").
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "starling/model/fixed_order_sum.hpp"
#include "starling/model/model.hpp"

using starling::model::fixedOrderSquaredNorm;
using starling::model::fixedOrderSum;
using starling::model::Model;

namespace {

// A float buffer that starts `shift` floats into a larger allocation, so that its
// address modulo 64 bytes differs from one shift to the next.
class ShiftedBuffer {
 public:
  ShiftedBuffer(std::size_t size, std::size_t shift) : storage_(size + 16, 0.0f), shift_(shift), size_(size) {}
  float* data() { return storage_.data() + shift_; }
  std::span<float> span() { return {data(), size_}; }

 private:
  std::vector<float> storage_;
  std::size_t shift_;
  std::size_t size_;
};

// The parameters after `steps` plain SGD steps (lr 0.1) on one batch, the input and the
// gradient placed `shift` floats into their allocations.
std::vector<float> train(const std::string& spec, const std::vector<float>& x, const std::vector<float>& y, int steps,
                         std::size_t shift) {
  auto m = Model::fromSpec(spec);
  REQUIRE(m.isOk());
  m->initialize(7);
  ShiftedBuffer input(x.size(), shift);
  std::copy(x.begin(), x.end(), input.data());
  ShiftedBuffer grad(m->numParams(), shift);
  for (int s = 0; s < steps; ++s) {
    m->forwardBackward(input.data(), y.data(), nullptr, static_cast<int>(y.size()), grad.span());
    for (std::size_t i = 0; i < m->numParams(); ++i)
      m->params()[i] -= 0.1f * grad.data()[i];
  }
  return {m->params().begin(), m->params().end()};
}

}  // namespace

TEST_CASE("training gives the same bits wherever the caller's buffers lie", "[model][determinism]") {
  // Sizes large enough for Eigen's matrix-product kernels (smaller products take
  // another path), batches whose bias gradients span several SIMD registers.
  const std::string spec = GENERATE(std::string("mlp:64-48-10"), std::string("cnn:1x12x12-c4k3-p2-f24-10"));
  auto probe = Model::fromSpec(spec);
  REQUIRE(probe.isOk());
  const int batch = 24;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, probe->numClasses() - 1);
  std::vector<float> x(static_cast<std::size_t>(batch) * probe->inputDim());
  for (float& v : x)
    v = normal(rng);
  std::vector<float> y(batch);
  for (float& v : y)
    v = static_cast<float>(label(rng));

  const std::vector<float> reference = train(spec, x, y, 4, 0);
  for (std::size_t shift = 1; shift < 16; ++shift) {
    DYNAMIC_SECTION(spec << ", buffers shifted by " << shift * sizeof(float) << " bytes") {
      const std::vector<float> shifted = train(spec, x, y, 4, shift);
      REQUIRE(shifted.size() == reference.size());
      CHECK(std::memcmp(shifted.data(), reference.data(), reference.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("fixed-order sums give the same bits wherever the values lie", "[model][determinism]") {
  // A length that is not a multiple of the lanes, values of mixed magnitude and sign so
  // that any other order would round differently.
  const std::size_t n = 1003;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values)
    v = normal(rng) * std::exp2(static_cast<float>(rng() % 24));
  ShiftedBuffer first(n, 0);
  std::copy(values.begin(), values.end(), first.data());
  const float sum = fixedOrderSum(first.span());
  const float squares = fixedOrderSquaredNorm(first.span());
  for (std::size_t shift = 1; shift < 16; ++shift) {
    ShiftedBuffer buffer(n, shift);
    std::copy(values.begin(), values.end(), buffer.data());
    CHECK(std::bit_cast<uint32_t>(fixedOrderSum(buffer.span())) == std::bit_cast<uint32_t>(sum));
    CHECK(std::bit_cast<uint32_t>(fixedOrderSquaredNorm(buffer.span())) == std::bit_cast<uint32_t>(squares));
  }
}
