// kGru: one GRU layer over a sequence, forward and backward through time.
//
// With x_t the features of step t and h_{t-1} the previous hidden state (h_{-1} = 0):
//   z = sigmoid(W_z x_t + Wb_z + R_z h_{t-1} + Rb_z)
//   r = sigmoid(W_r x_t + Wb_r + R_r h_{t-1} + Rb_r)
//   n = tanh(W_h x_t + Wb_h + r * (R_h h_{t-1} + Rb_h))
//   h_t = (1 - z) * n + z * h_{t-1}
// the equations of ONNX's GRU with linear_before_reset = 1 (which is PyTorch's GRU). With
// Layer::resetBefore (spec marker "lbr0:", ONNX's linear_before_reset = 0) the reset gate
// scales h before R_h:
//   n = tanh(W_h x_t + Wb_h + R_h (r * h_{t-1}) + Rb_h)
// The layer's output is h_{T-1}. Batches are column-major (hidden x batch), as in
// layers.cpp.
#include <Eigen/Core>

#include "network.hpp"

namespace starling::model::detail {
namespace {

using ColMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::Matrix<float, Eigen::Dynamic, 1>;

struct GruShape {
  int steps, features, hidden;
  explicit GruShape(const Layer& l) : steps(l.steps), features(l.in.c / l.steps), hidden(l.out.c) {}
  // One step's record in the cache: z, r, n (3H x batch), n's recurrent term (R_h h + Rb_h,
  // or R_h (r * h) + Rb_h with resetBefore; H x batch), h_t.
  std::size_t stepFloats(int batch) const { return static_cast<std::size_t>(5) * hidden * batch; }
};

// 1 / (1 + e^-a). On 32-bit ARM, Eigen's NEON division is a reciprocal estimate good
// to about 16 bits (meson.build): there the division is scalar.
Eigen::ArrayXXf sigmoid(const Eigen::ArrayXXf& a) {
#if defined(__arm__)
  return (1.0f + (-a).exp()).unaryExpr([](float d) { return 1.0f / d; });
#else
  return (1.0f + (-a).exp()).inverse();
#endif
}

// Runs the sequence; writes the last hidden state into y and, when cache is not null,
// every step's record (GruShape::stepFloats) into it.
void runSequence(const Layer& l, const float* params, const float* x, float* y, int n, float* cache) {
  const GruShape s(l);
  const int h3 = 3 * s.hidden;
  const int hh = s.hidden;
  Eigen::Map<const RowMat> w(params + l.weightOffset, h3, s.features);
  Eigen::Map<const RowMat> r(params + l.weightOffset + static_cast<std::size_t>(h3) * s.features, h3, hh);
  Eigen::Map<const Vec> bw(params + l.biasOffset, h3);
  Eigen::Map<const Vec> br(params + l.biasOffset + h3, h3);
  Eigen::Map<const ColMat> xs(x, static_cast<Eigen::Index>(s.steps) * s.features, n);
  ColMat gx(h3, n);
  ColMat gh(h3, n);
  ColMat h = ColMat::Zero(hh, n);
  for (int t = 0; t < s.steps; ++t) {
    gx.noalias() = w * xs.middleRows(static_cast<Eigen::Index>(t) * s.features, s.features);
    gx.colwise() += bw;
    const Eigen::Index rows = l.resetBefore ? 2 * hh : h3;  // the rows R multiplies by h itself
    gh.topRows(rows).noalias() = r.topRows(rows) * h;
    gh.topRows(rows).colwise() += br.head(rows);
    const Eigen::ArrayXXf z = sigmoid(gx.topRows(hh).array() + gh.topRows(hh).array());
    const Eigen::ArrayXXf rg = sigmoid(gx.middleRows(hh, hh).array() + gh.middleRows(hh, hh).array());
    Eigen::ArrayXXf pre = gx.bottomRows(hh).array();
    if (l.resetBefore) {
      gh.bottomRows(hh).noalias() = r.bottomRows(hh) * (rg * h.array()).matrix();
      gh.bottomRows(hh).colwise() += br.tail(hh);
      pre += gh.bottomRows(hh).array();
    } else {
      pre += rg * gh.bottomRows(hh).array();
    }
    const Eigen::ArrayXXf nn = pre.tanh();
    h = ((1.0f - z) * nn + z * h.array()).matrix();
    if (cache != nullptr) {
      float* c = cache + s.stepFloats(n) * t;
      Eigen::Map<ColMat> gates(c, h3, n);
      gates.topRows(hh) = z.matrix();
      gates.middleRows(hh, hh) = rg.matrix();
      gates.bottomRows(hh) = nn.matrix();
      Eigen::Map<ColMat>(c + static_cast<std::size_t>(h3) * n, hh, n) = gh.bottomRows(hh);
      Eigen::Map<ColMat>(c + static_cast<std::size_t>(4) * hh * n, hh, n) = h;
    }
  }
  Eigen::Map<ColMat>(y, hh, n) = h;
}

// Adds the columns of m in order into v (the same order wherever v lies).
void addColumns(const ColMat& m, float* v) {
  Eigen::Map<Vec> out(v, m.rows());
  for (Eigen::Index j = 0; j < m.cols(); ++j)
    out += m.col(j);
}

}  // namespace

void gruForward(const Layer& l, const float* params, const float* x, float* y, int n) {
  runSequence(l, params, x, y, n, nullptr);
}

// The forward pass is run again to record the steps: the layer's activations are only
// its output, which keeps backwardRows()' compaction of net.acts correct for it.
void gruBackward(const Layer& l, const float* params, const float* x, const float* dy, float* dx, float* grad, int n,
                 Network& net) {
  const GruShape s(l);
  const int h3 = 3 * s.hidden;
  const int hh = s.hidden;
  const std::size_t step = s.stepFloats(n);
  if (net.seq.size() < step * s.steps) net.seq.resize(step * s.steps);
  ColMat last(hh, n);
  runSequence(l, params, x, last.data(), n, net.seq.data());

  Eigen::Map<const RowMat> w(params + l.weightOffset, h3, s.features);
  Eigen::Map<const RowMat> r(params + l.weightOffset + static_cast<std::size_t>(h3) * s.features, h3, hh);
  Eigen::Map<const ColMat> xs(x, static_cast<Eigen::Index>(s.steps) * s.features, n);
  Eigen::Map<RowMat> dw(grad + l.weightOffset, h3, s.features);
  Eigen::Map<RowMat> dr(grad + l.weightOffset + static_cast<std::size_t>(h3) * s.features, h3, hh);
  float* dbw = grad + l.biasOffset;
  float* dbr = grad + l.biasOffset + h3;
  dw.setZero();
  dr.setZero();
  std::fill(dbw, dbw + 2 * h3, 0.0f);

  ColMat dh = Eigen::Map<const ColMat>(dy, hh, n);
  ColMat dgx(h3, n);
  ColMat dgh(h3, n);
  const ColMat zeros = ColMat::Zero(hh, n);
  for (int t = s.steps - 1; t >= 0; --t) {
    const float* c = net.seq.data() + step * t;
    Eigen::Map<const ColMat> gates(c, h3, n);
    Eigen::Map<const ColMat> ghn(c + static_cast<std::size_t>(h3) * n, hh, n);
    const float* prev = t > 0 ? net.seq.data() + step * (t - 1) + static_cast<std::size_t>(4) * hh * n : zeros.data();
    Eigen::Map<const ColMat> hprev(prev, hh, n);
    const auto z = gates.topRows(hh).array();
    const auto rg = gates.middleRows(hh, hh).array();
    const auto nn = gates.bottomRows(hh).array();
    const Eigen::ArrayXXf dn = dh.array() * (1.0f - z) * (1.0f - nn.square());  // at n's pre-activation
    dgx.topRows(hh) = (dh.array() * (hprev.array() - nn) * z * (1.0f - z)).matrix();
    dgx.bottomRows(hh) = dn.matrix();
    ColMat drh;  // resetBefore: the gradient at r * h_{t-1}
    if (l.resetBefore) {
      drh.noalias() = r.bottomRows(hh).transpose() * dn.matrix();
      dgx.middleRows(hh, hh) = (drh.array() * hprev.array() * rg * (1.0f - rg)).matrix();
      dgh.bottomRows(hh) = dn.matrix();
    } else {
      dgx.middleRows(hh, hh) = (dn * ghn.array() * rg * (1.0f - rg)).matrix();
      dgh.bottomRows(hh) = (dn * rg).matrix();
    }
    dgh.topRows(2 * hh) = dgx.topRows(2 * hh);
    dw.noalias() += dgx * xs.middleRows(static_cast<Eigen::Index>(t) * s.features, s.features).transpose();
    if (l.resetBefore) {
      dr.topRows(2 * hh).noalias() += dgh.topRows(2 * hh) * hprev.transpose();
      dr.bottomRows(hh).noalias() += dn.matrix() * (rg * hprev.array()).matrix().transpose();
    } else {
      dr.noalias() += dgh * hprev.transpose();
    }
    addColumns(dgx, dbw);
    addColumns(dgh, dbr);
    if (dx != nullptr) {
      Eigen::Map<ColMat> dxs(dx, static_cast<Eigen::Index>(s.steps) * s.features, n);
      dxs.middleRows(static_cast<Eigen::Index>(t) * s.features, s.features).noalias() = w.transpose() * dgx;
    }
    dh = (dh.array() * z).matrix();
    if (l.resetBefore) {
      dh.noalias() += r.topRows(2 * hh).transpose() * dgh.topRows(2 * hh);
      dh += (rg * drh.array()).matrix();
    } else {
      dh.noalias() += r.transpose() * dgh;
    }
  }
}

float bagScale(const float* values, std::size_t count) {
  float sum = 0.0f;
  for (std::size_t i = 0; i < count; ++i)
    sum += values[i];
  return sum != 0.0f ? 1.0f / sum : 0.0f;
}

}  // namespace starling::model::detail
