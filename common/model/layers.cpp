// Forward and backward kernels of the layers, in Eigen over maps of the flat buffers.
//
// Storage: a batch of activations is row-major (example i is contiguous), which Eigen
// sees as a column-major (features x batch) matrix. Dense weights are row-major
// {out, in}; conv weights row-major {out, in * k * k} (PyTorch's order); an image
// example is C x H x W.
#include <Eigen/Core>
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "starling/model/fixed_order_sum.hpp"

#include "network.hpp"

namespace starling::model::detail {
namespace {

using ColMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::Matrix<float, Eigen::Dynamic, 1>;

// Row-major (C*k*k) x (Ho*Wo) matrix of the patches of one C x H x W example.
void im2col(const Layer& l, const float* x, float* col) {
  const int k = l.kernel;
  const int ho = l.out.h;
  const int wo = l.out.w;
  const int p = ho * wo;
  for (int c = 0; c < l.in.c; ++c)
    for (int ki = 0; ki < k; ++ki)
      for (int kj = 0; kj < k; ++kj) {
        float* row = col + (static_cast<std::size_t>((c * k + ki) * k + kj)) * p;
        for (int oi = 0; oi < ho; ++oi) {
          const float* src = x + (static_cast<std::size_t>(c) * l.in.h + oi + ki) * l.in.w + kj;
          std::copy(src, src + wo, row + oi * wo);
        }
      }
}

// Adds the patch gradients back onto the input gradient (dx must start at zero).
void col2im(const Layer& l, const float* dcol, float* dx) {
  const int k = l.kernel;
  const int ho = l.out.h;
  const int wo = l.out.w;
  const int p = ho * wo;
  for (int c = 0; c < l.in.c; ++c)
    for (int ki = 0; ki < k; ++ki)
      for (int kj = 0; kj < k; ++kj) {
        const float* row = dcol + (static_cast<std::size_t>((c * k + ki) * k + kj)) * p;
        for (int oi = 0; oi < ho; ++oi) {
          float* dst = dx + (static_cast<std::size_t>(c) * l.in.h + oi + ki) * l.in.w + kj;
          const float* src = row + oi * wo;
          for (int oj = 0; oj < wo; ++oj)
            dst[oj] += src[oj];
        }
      }
}

void denseForward(const Layer& l, const float* params, const float* x, float* y, int n) {
  const int in = l.in.c;
  const int out = l.out.c;
  Eigen::Map<const RowMat> w(params + l.weightOffset, out, in);
  Eigen::Map<const Vec> b(params + l.biasOffset, out);
  Eigen::Map<const ColMat> xs(x, in, n);
  Eigen::Map<ColMat> ys(y, out, n);
  ys.noalias() = w * xs;
  ys.colwise() += b;
}

void denseBackward(const Layer& l, const float* params, const float* x, const float* dy, float* dx, float* grad,
                   int n) {
  const int in = l.in.c;
  const int out = l.out.c;
  Eigen::Map<const ColMat> xs(x, in, n);
  Eigen::Map<const ColMat> dys(dy, out, n);
  Eigen::Map<RowMat> dw(grad + l.weightOffset, out, in);
  Eigen::Map<Vec> db(grad + l.biasOffset, out);
  dw.noalias() = dys * xs.transpose();
  // Column by column rather than dys.rowwise().sum(): Eigen would sum the rows of db
  // before the first aligned one differently from the rest (fixed_order_sum.hpp). Each
  // element adds its n terms in order wherever grad lies.
  db.setZero();
  for (int j = 0; j < n; ++j)
    db += dys.col(j);
  if (dx != nullptr) {
    Eigen::Map<const RowMat> w(params + l.weightOffset, out, in);
    Eigen::Map<ColMat> dxs(dx, in, n);
    dxs.noalias() = w.transpose() * dys;
  }
}

void convForward(const Layer& l, const float* params, const float* x, float* y, int n, Network& net) {
  const int r = l.in.c * l.kernel * l.kernel;
  const int p = l.out.h * l.out.w;
  const int out = l.out.c;
  Eigen::Map<const RowMat> w(params + l.weightOffset, out, r);
  Eigen::Map<const Vec> b(params + l.biasOffset, out);
  Eigen::Map<const RowMat> col(net.col.data(), r, p);
  for (int i = 0; i < n; ++i) {
    im2col(l, x + static_cast<std::size_t>(i) * l.in.size(), net.col.data());
    Eigen::Map<RowMat> ys(y + static_cast<std::size_t>(i) * l.out.size(), out, p);
    ys.noalias() = w * col;
    ys.colwise() += b;
  }
}

void convBackward(const Layer& l, const float* params, const float* x, const float* dy, float* dx, float* grad, int n,
                  Network& net) {
  const int r = l.in.c * l.kernel * l.kernel;
  const int p = l.out.h * l.out.w;
  const int out = l.out.c;
  Eigen::Map<const RowMat> w(params + l.weightOffset, out, r);
  Eigen::Map<RowMat> dw(grad + l.weightOffset, out, r);
  Eigen::Map<Vec> db(grad + l.biasOffset, out);
  Eigen::Map<const RowMat> col(net.col.data(), r, p);
  Eigen::Map<RowMat> dcol(net.dcol.data(), r, p);
  dw.setZero();
  db.setZero();
  for (int i = 0; i < n; ++i) {
    im2col(l, x + static_cast<std::size_t>(i) * l.in.size(), net.col.data());
    Eigen::Map<const RowMat> dys(dy + static_cast<std::size_t>(i) * l.out.size(), out, p);
    dw.noalias() += dys * col.transpose();
    for (int o = 0; o < out; ++o)
      db(o) += fixedOrderSum({dys.row(o).data(), static_cast<std::size_t>(p)});
    if (dx != nullptr) {
      float* dxi = dx + static_cast<std::size_t>(i) * l.in.size();
      std::fill(dxi, dxi + l.in.size(), 0.0f);
      dcol.noalias() = w.transpose() * dys;
      col2im(l, net.dcol.data(), dxi);
    }
  }
}

void poolForward(const Layer& l, const float* x, float* y, int n) {
  const int s = l.kernel;
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < l.out.c; ++c) {
      const float* xc = x + static_cast<std::size_t>(i) * l.in.size() + static_cast<std::size_t>(c) * l.in.h * l.in.w;
      float* yc = y + static_cast<std::size_t>(i) * l.out.size() + static_cast<std::size_t>(c) * l.out.h * l.out.w;
      for (int oi = 0; oi < l.out.h; ++oi)
        for (int oj = 0; oj < l.out.w; ++oj) {
          float m = -std::numeric_limits<float>::infinity();
          for (int a = 0; a < s; ++a)
            for (int b = 0; b < s; ++b)
              m = std::max(m, xc[(oi * s + a) * l.in.w + oj * s + b]);
          yc[oi * l.out.w + oj] = m;
        }
    }
}

// Routes each output gradient to the first input that attained the maximum.
void poolBackward(const Layer& l, const float* x, const float* y, const float* dy, float* dx, int n) {
  const int s = l.kernel;
  std::fill(dx, dx + static_cast<std::size_t>(n) * l.in.size(), 0.0f);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < l.out.c; ++c) {
      const std::size_t inBase =
          static_cast<std::size_t>(i) * l.in.size() + static_cast<std::size_t>(c) * l.in.h * l.in.w;
      const std::size_t outBase =
          static_cast<std::size_t>(i) * l.out.size() + static_cast<std::size_t>(c) * l.out.h * l.out.w;
      for (int oi = 0; oi < l.out.h; ++oi)
        for (int oj = 0; oj < l.out.w; ++oj) {
          const float m = y[outBase + oi * l.out.w + oj];
          const float g = dy[outBase + oi * l.out.w + oj];
          bool done = false;
          for (int a = 0; a < s && !done; ++a)
            for (int b = 0; b < s && !done; ++b) {
              const std::size_t at = inBase + (oi * s + a) * l.in.w + oj * s + b;
              if (x[at] == m) {
                dx[at] += g;
                done = true;
              }
            }
        }
    }
}

// kEmbedBag on dense rows: y = E^T x + b, E {in, out} row-major; the mean divides E^T x
// by the sum of the row's values.
void embedForward(const Layer& l, const float* params, const float* x, float* y, int n) {
  const int in = l.in.c;
  const int out = l.out.c;
  Eigen::Map<const RowMat> e(params + l.weightOffset, in, out);
  Eigen::Map<const Vec> b(params + l.biasOffset, out);
  Eigen::Map<const ColMat> xs(x, in, n);
  Eigen::Map<ColMat> ys(y, out, n);
  ys.noalias() = e.transpose() * xs;
  if (l.mean)
    for (int j = 0; j < n; ++j)
      ys.col(j) *= bagScale(x + static_cast<std::size_t>(j) * in, static_cast<std::size_t>(in));
  ys.colwise() += b;
}

void embedBackward(const Layer& l, const float* params, const float* x, const float* dy, float* dx, float* grad,
                   int n) {
  const int in = l.in.c;
  const int out = l.out.c;
  Eigen::Map<const ColMat> xs(x, in, n);
  Eigen::Map<const ColMat> dys(dy, out, n);
  Eigen::Map<RowMat> de(grad + l.weightOffset, in, out);
  Eigen::Map<Vec> db(grad + l.biasOffset, out);
  db.setZero();
  for (int j = 0; j < n; ++j)
    db += dys.col(j);
  if (!l.mean) {
    de.noalias() = xs * dys.transpose();
    if (dx != nullptr) {
      Eigen::Map<const RowMat> e(params + l.weightOffset, in, out);
      Eigen::Map<ColMat> dxs(dx, in, n);
      dxs.noalias() = e * dys;
    }
    return;
  }
  // The mean: y = s E^T x + b with s = 1 / sum(x), so dE = x (s dy)^T and
  // dx = s (E dy - (dy . s E^T x)).
  ColMat scaled = dys;
  for (int j = 0; j < n; ++j)
    scaled.col(j) *= bagScale(x + static_cast<std::size_t>(j) * in, static_cast<std::size_t>(in));
  de.noalias() = xs * scaled.transpose();
  if (dx != nullptr) {
    Eigen::Map<const RowMat> e(params + l.weightOffset, in, out);
    Eigen::Map<ColMat> dxs(dx, in, n);
    for (int j = 0; j < n; ++j) {
      const float s = bagScale(x + static_cast<std::size_t>(j) * in, static_cast<std::size_t>(in));
      const Vec u = s * (e.transpose() * xs.col(j));
      dxs.col(j) = e * scaled.col(j);
      dxs.col(j).array() -= s * u.dot(dys.col(j));
    }
  }
}

}  // namespace

void sparseForward(const Layer& l, const float* params, const data::SparseBatch& x, float* y) {
  const std::size_t in = static_cast<std::size_t>(l.in.c);
  const int out = l.out.c;
  const float* w = params + l.weightOffset;
  const float* b = params + l.biasOffset;
  const std::size_t rows = x.rows();
  for (std::size_t r = 0; r < rows; ++r) {
    float* __restrict yr = y + r * out;
    std::copy_n(b, out, yr);
    const float scale = l.mean ? bagScale(x.values.data() + x.offsets[r], x.offsets[r + 1] - x.offsets[r]) : 1.0f;
    for (uint64_t k = x.offsets[r]; k < x.offsets[r + 1]; ++k) {
      const std::size_t i = x.indices[k];
      const float v = scale * x.values[k];
      assert(i < in);
      if (l.kind == LayerKind::kEmbedBag) {
        const float* __restrict e = w + i * out;
        for (int o = 0; o < out; ++o)
          yr[o] += v * e[o];
      } else {
        for (int o = 0; o < out; ++o)
          yr[o] += v * w[o * in + i];
      }
    }
  }
}

void sparseBackward(const Layer& l, const data::SparseBatch& x, const float* dy, float* grad, Network& net) {
  const std::size_t in = static_cast<std::size_t>(l.in.c);
  const int out = l.out.c;
  float* dw = grad + l.weightOffset;
  const bool embed = l.kind == LayerKind::kEmbedBag;
  // The distinct features of the batch: zero their gradient once.
  if (net.seenAt.size() != in) net.seenAt.assign(in, 0);
  if (++net.pass == 0) {  // the counter wrapped: forget every mark
    std::fill(net.seenAt.begin(), net.seenAt.end(), 0);
    net.pass = 1;
  }
  net.features.clear();
  for (uint32_t i : x.indices) {
    assert(i < in);
    if (net.seenAt[i] == net.pass) continue;
    net.seenAt[i] = net.pass;
    net.features.push_back(i);
    if (embed) {
      std::fill_n(dw + static_cast<std::size_t>(i) * out, out, 0.0f);
    } else {
      for (int o = 0; o < out; ++o)
        dw[o * in + i] = 0.0f;
    }
  }
  const std::size_t rows = x.rows();
  float* db = grad + l.biasOffset;
  std::fill_n(db, out, 0.0f);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* __restrict dyr = dy + r * out;
    for (int o = 0; o < out; ++o)
      db[o] += dyr[o];
    const float scale = l.mean ? bagScale(x.values.data() + x.offsets[r], x.offsets[r + 1] - x.offsets[r]) : 1.0f;
    for (uint64_t k = x.offsets[r]; k < x.offsets[r + 1]; ++k) {
      const std::size_t i = x.indices[k];
      const float v = scale * x.values[k];
      if (embed) {
        float* __restrict g = dw + i * out;
        for (int o = 0; o < out; ++o)
          g[o] += v * dyr[o];
      } else {
        for (int o = 0; o < out; ++o)
          dw[o * in + i] += v * dyr[o];
      }
    }
  }
}

void forwardLayer(const Layer& l, const float* params, const float* x, float* y, int n, Network& net) {
  switch (l.kind) {
    case LayerKind::kDense:
      denseForward(l, params, x, y, n);
      return;
    case LayerKind::kEmbedBag:
      embedForward(l, params, x, y, n);
      return;
    case LayerKind::kRelu: {
      const std::size_t m = static_cast<std::size_t>(n) * l.in.size();
      Eigen::Map<const Eigen::ArrayXf> xs(x, static_cast<Eigen::Index>(m));
      Eigen::Map<Eigen::ArrayXf> ys(y, static_cast<Eigen::Index>(m));
      ys = xs.max(0.0f);
      return;
    }
    case LayerKind::kTanh: {
      const std::size_t m = static_cast<std::size_t>(n) * l.in.size();
      Eigen::Map<const Eigen::ArrayXf> xs(x, static_cast<Eigen::Index>(m));
      Eigen::Map<Eigen::ArrayXf> ys(y, static_cast<Eigen::Index>(m));
      ys = xs.tanh();
      return;
    }
    case LayerKind::kSigmoid: {
      const std::size_t m = static_cast<std::size_t>(n) * l.in.size();
      for (std::size_t i = 0; i < m; ++i)
        y[i] = 1.0f / (1.0f + std::exp(-x[i]));
      return;
    }
    case LayerKind::kConv:
      convForward(l, params, x, y, n, net);
      return;
    case LayerKind::kMaxPool:
      poolForward(l, x, y, n);
      return;
    case LayerKind::kGru:
      gruForward(l, params, x, y, n);
      return;
  }
}

void backwardLayer(const Layer& l, const float* params, const float* x, const float* y, const float* dy, float* dx,
                   float* grad, int n, Network& net) {
  switch (l.kind) {
    case LayerKind::kDense:
      denseBackward(l, params, x, dy, dx, grad, n);
      return;
    case LayerKind::kEmbedBag:
      embedBackward(l, params, x, dy, dx, grad, n);
      return;
    case LayerKind::kRelu: {
      if (dx == nullptr) return;
      const std::size_t m = static_cast<std::size_t>(n) * l.in.size();
      Eigen::Map<const Eigen::ArrayXf> ys(y, static_cast<Eigen::Index>(m));
      Eigen::Map<const Eigen::ArrayXf> dys(dy, static_cast<Eigen::Index>(m));
      Eigen::Map<Eigen::ArrayXf> dxs(dx, static_cast<Eigen::Index>(m));
      dxs = (ys > 0.0f).select(dys, 0.0f);
      return;
    }
    case LayerKind::kTanh:
    case LayerKind::kSigmoid: {
      // From the outputs: tanh' = 1 - y^2, sigmoid' = y (1 - y).
      if (dx == nullptr) return;
      const std::size_t m = static_cast<std::size_t>(n) * l.in.size();
      Eigen::Map<const Eigen::ArrayXf> ys(y, static_cast<Eigen::Index>(m));
      Eigen::Map<const Eigen::ArrayXf> dys(dy, static_cast<Eigen::Index>(m));
      Eigen::Map<Eigen::ArrayXf> dxs(dx, static_cast<Eigen::Index>(m));
      if (l.kind == LayerKind::kTanh)
        dxs = dys * (1.0f - ys.square());
      else
        dxs = dys * ys * (1.0f - ys);
      return;
    }
    case LayerKind::kConv:
      convBackward(l, params, x, dy, dx, grad, n, net);
      return;
    case LayerKind::kMaxPool:
      if (dx != nullptr) poolBackward(l, x, y, dy, dx, n);
      return;
    case LayerKind::kGru:
      gruBackward(l, params, x, dy, dx, grad, n, net);
      return;
  }
}

void Network::reserve(int batch) {
  if (batch <= capacity) return;
  // Activation gradients are only needed for the inputs of layers after the first
  // (lossAndBackward passes the first layer no dx), so the input width does not count:
  // a sparse model's 2^20 inputs would otherwise cost batch x 2^20 floats here.
  std::size_t widest = 0;
  std::size_t colSize = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    acts[i].resize(static_cast<std::size_t>(batch) * l.out.size());
    widest = std::max(widest, l.out.size());
    if (l.kind == LayerKind::kConv)
      colSize = std::max(colSize, static_cast<std::size_t>(l.in.c) * l.kernel * l.kernel * l.out.h * l.out.w);
  }
  gradA.resize(static_cast<std::size_t>(batch) * widest);
  gradB.resize(static_cast<std::size_t>(batch) * widest);
  probs.resize(static_cast<std::size_t>(batch) * classes);
  col.resize(colSize);
  dcol.resize(colSize);
  capacity = batch;
}

}  // namespace starling::model::detail
