// Float accuracy of the activations: a tanh network and a GRU against the same networks
// computed here in double, example by example, from the layouts' documented order. The
// arrays' sizes (37 x 63, 23 x 11) are odd, so that both Eigen's packet and scalar code
// run whatever the alignment. Measured, the
// largest error of a probability (tanh network, GRU):
//   x86-64 (AVX-512):                                  1.7e-7, 4.9e-8
//   armhf NEON under qemu-arm:                         1.2e-7, 4.9e-8
//   armhf NEON with Eigen's packet division in tanh
//   and the GRU's sigmoid (a 16-bit reciprocal
//   estimate; meson.build, gru.cpp):                   1.5e-6, 1.2e-6
// The bound, 4e-7, lies between.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "starling/model/model.hpp"

using starling::model::Model;

namespace {

Model build(const std::string& spec) {
  auto m = Model::fromSpec(spec);
  REQUIRE(m.isOk());
  m->initialize(5);
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  for (float& p : m->params())
    p += u(rng);  // biases non-zero too
  return std::move(m).value();
}

const float* tensor(const Model& m, const std::string& name) {
  const auto* t = m.layout().find(name);
  REQUIRE(t != nullptr);
  return m.params().data() + t->offset;
}

std::vector<double> softmax(std::vector<double> z) {
  const double top = *std::max_element(z.begin(), z.end());
  double sum = 0.0;
  for (double& v : z)
    sum += v = std::exp(v - top);
  for (double& v : z)
    v /= sum;
  return z;
}

// y = W x + b with W {out, in} row-major.
std::vector<double> dense(const float* w, const float* b, const std::vector<double>& x, int out) {
  std::vector<double> y(static_cast<std::size_t>(out));
  for (int o = 0; o < out; ++o) {
    double s = b[o];
    for (std::size_t i = 0; i < x.size(); ++i)
      s += double(w[static_cast<std::size_t>(o) * x.size() + i]) * x[i];
    y[static_cast<std::size_t>(o)] = s;
  }
  return y;
}

double sigmoid(double v) {
  return 1.0 / (1.0 + std::exp(-v));
}

// The largest |float - double| over the batch's outputs, against reference(example).
template <class Reference>
double worstError(Model& m, const std::vector<float>& x, int n, Reference reference) {
  const auto out = m.forward(x.data(), n);
  const auto classes = static_cast<std::size_t>(m.numClasses());
  REQUIRE(out.size() == classes * static_cast<std::size_t>(n));
  double worst = 0.0;
  const auto dim = static_cast<std::size_t>(m.inputDim());
  for (int i = 0; i < n; ++i) {
    const std::vector<double> want = reference(x.data() + static_cast<std::size_t>(i) * dim);
    for (std::size_t k = 0; k < classes; ++k)
      worst = std::max(worst, std::abs(double(out[static_cast<std::size_t>(i) * classes + k]) - want[k]));
  }
  return worst;
}

std::vector<float> inputs(std::size_t count, float scale) {
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> x(count);
  for (float& v : x)
    v = u(rng);
  return x;
}

}  // namespace

TEST_CASE("a tanh network's outputs are accurate to float precision", "[model][precision]") {
  constexpr int in = 16, hidden = 63, classes = 5, n = 37;
  Model m = build("mlp:tanh:16-63-5");
  const std::vector<float> x = inputs(static_cast<std::size_t>(n) * in, 2.0f);
  const double worst = worstError(m, x, n, [&](const float* xi) {
    std::vector<double> h =
        dense(tensor(m, "dense0.weight"), tensor(m, "dense0.bias"), std::vector<double>(xi, xi + in), hidden);
    for (double& v : h)
      v = std::tanh(v);
    return softmax(dense(tensor(m, "dense1.weight"), tensor(m, "dense1.bias"), h, classes));
  });
  INFO("largest error of a probability: " << worst);
  CHECK(worst < 4e-7);
}

TEST_CASE("a GRU's outputs are accurate to float precision", "[model][precision][gru]") {
  // ONNX's GRU with linear_before_reset = 1; gates z, r, h in W {1,3H,F}, R {1,3H,H},
  // B {1,6H} = [Wb, Rb]; the input is example-major, steps x features.
  constexpr int steps = 7, features = 3, hidden = 11, classes = 4, n = 23;
  Model m = build("gru:7x3-11-4");
  const std::vector<float> x = inputs(static_cast<std::size_t>(n) * steps * features, 1.5f);
  const float* w = tensor(m, "gru.W");
  const float* r = tensor(m, "gru.R");
  const float* b = tensor(m, "gru.B");
  const double worst = worstError(m, x, n, [&](const float* xi) {
    std::vector<double> h(hidden, 0.0);
    for (int t = 0; t < steps; ++t) {
      const std::vector<double> xt(xi + t * features, xi + (t + 1) * features);
      const std::vector<double> gx = dense(w, b, xt, 3 * hidden);
      const std::vector<double> gh = dense(r, b + 3 * hidden, h, 3 * hidden);
      for (int j = 0; j < hidden; ++j) {
        const double z = sigmoid(gx[j] + gh[j]);
        const double rr = sigmoid(gx[hidden + j] + gh[hidden + j]);
        const double nn = std::tanh(gx[2 * hidden + j] + rr * gh[2 * hidden + j]);
        h[j] = (1.0 - z) * nn + z * h[j];
      }
    }
    return softmax(dense(tensor(m, "dense0.weight"), tensor(m, "dense0.bias"), h, classes));
  });
  INFO("largest error of a probability: " << worst);
  CHECK(worst < 4e-7);
}
