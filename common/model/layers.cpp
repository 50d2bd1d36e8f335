// Forward and backward kernels of the layers, in Eigen over maps of the flat buffers.
//
// Storage: a batch of activations is row-major (example i is contiguous), which Eigen
// sees as a column-major (features x batch) matrix. Dense weights are row-major
// {out, in}; conv weights row-major {out, in * kh * kw} (PyTorch's order); an image
// example is C x H x W (a 1-D series C x 1 x L).
#include <Eigen/Core>
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <utility>

#include "starling/model/fixed_order_sum.hpp"

#include "network.hpp"

namespace starling::model::detail {
namespace {

using ColMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::Matrix<float, Eigen::Dynamic, 1>;

// Row-major (C*kh*kw) x (Ho*Wo) matrix of the patches of one C x H x W example, zero
// where a patch reaches into the padding.
void im2col(const Layer& l, const float* x, float* col) {
  const int kh = l.kernelH;
  const int kw = l.kernel;
  const int ho = l.out.h;
  const int wo = l.out.w;
  const int p = ho * wo;
  const bool plain = l.strideH == 1 && l.strideW == 1 && l.padH == 0 && l.padW == 0;
  for (int c = 0; c < l.in.c; ++c)
    for (int ki = 0; ki < kh; ++ki)
      for (int kj = 0; kj < kw; ++kj) {
        float* row = col + (static_cast<std::size_t>((c * kh + ki) * kw + kj)) * p;
        const float* xc = x + static_cast<std::size_t>(c) * l.in.h * l.in.w;
        if (plain) {
          for (int oi = 0; oi < ho; ++oi) {
            const float* src = xc + static_cast<std::size_t>(oi + ki) * l.in.w + kj;
            std::copy(src, src + wo, row + oi * wo);
          }
          continue;
        }
        for (int oi = 0; oi < ho; ++oi) {
          const int ii = oi * l.strideH - l.padH + ki;
          float* dst = row + oi * wo;
          if (ii < 0 || ii >= l.in.h) {
            std::fill(dst, dst + wo, 0.0f);
            continue;
          }
          const float* src = xc + static_cast<std::size_t>(ii) * l.in.w;
          for (int oj = 0; oj < wo; ++oj) {
            const int jj = oj * l.strideW - l.padW + kj;
            dst[oj] = jj >= 0 && jj < l.in.w ? src[jj] : 0.0f;
          }
        }
      }
}

// Adds the patch gradients back onto the input gradient (dx must start at zero); what
// fell on the padding is dropped.
void col2im(const Layer& l, const float* dcol, float* dx) {
  const int kh = l.kernelH;
  const int kw = l.kernel;
  const int ho = l.out.h;
  const int wo = l.out.w;
  const int p = ho * wo;
  for (int c = 0; c < l.in.c; ++c)
    for (int ki = 0; ki < kh; ++ki)
      for (int kj = 0; kj < kw; ++kj) {
        const float* row = dcol + (static_cast<std::size_t>((c * kh + ki) * kw + kj)) * p;
        float* dxc = dx + static_cast<std::size_t>(c) * l.in.h * l.in.w;
        for (int oi = 0; oi < ho; ++oi) {
          const int ii = oi * l.strideH - l.padH + ki;
          if (ii < 0 || ii >= l.in.h) continue;
          float* dst = dxc + static_cast<std::size_t>(ii) * l.in.w;
          const float* src = row + oi * wo;
          if (l.strideW == 1 && l.padW == 0) {
            for (int oj = 0; oj < wo; ++oj)
              dst[oj + kj] += src[oj];
            continue;
          }
          for (int oj = 0; oj < wo; ++oj) {
            const int jj = oj * l.strideW - l.padW + kj;
            if (jj >= 0 && jj < l.in.w) dst[jj] += src[oj];
          }
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
  const int r = l.in.c * l.kernelH * l.kernel;
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
  const int r = l.in.c * l.kernelH * l.kernel;
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

// Max and average pooling: windows of kernelH x kernel at strides strideH x strideW
// (the window: they do not overlap), no padding.
void poolForward(const Layer& l, const float* x, float* y, int n) {
  const int kh = l.kernelH;
  const int kw = l.kernel;
  const bool average = l.kind == LayerKind::kAvgPool;
  const float inv = 1.0f / static_cast<float>(kh * kw);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < l.out.c; ++c) {
      const float* xc = x + static_cast<std::size_t>(i) * l.in.size() + static_cast<std::size_t>(c) * l.in.h * l.in.w;
      float* yc = y + static_cast<std::size_t>(i) * l.out.size() + static_cast<std::size_t>(c) * l.out.h * l.out.w;
      for (int oi = 0; oi < l.out.h; ++oi)
        for (int oj = 0; oj < l.out.w; ++oj) {
          const float* win = xc + static_cast<std::size_t>(oi * l.strideH) * l.in.w + oj * l.strideW;
          float m = average ? 0.0f : -std::numeric_limits<float>::infinity();
          for (int a = 0; a < kh; ++a)
            for (int b = 0; b < kw; ++b)
              m = average ? m + win[a * l.in.w + b] : std::max(m, win[a * l.in.w + b]);
          yc[oi * l.out.w + oj] = average ? m * inv : m;
        }
    }
}

// Max pooling routes each output gradient to the first input that attained the
// maximum; average pooling spreads it evenly over the window.
void poolBackward(const Layer& l, const float* x, const float* y, const float* dy, float* dx, int n) {
  const int kh = l.kernelH;
  const int kw = l.kernel;
  const bool average = l.kind == LayerKind::kAvgPool;
  const float inv = 1.0f / static_cast<float>(kh * kw);
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
          const std::size_t win = inBase + static_cast<std::size_t>(oi * l.strideH) * l.in.w + oj * l.strideW;
          bool done = false;
          for (int a = 0; a < kh && !done; ++a)
            for (int b = 0; b < kw && !done; ++b) {
              const std::size_t at = win + static_cast<std::size_t>(a) * l.in.w + b;
              if (average) {
                dx[at] += g * inv;
              } else if (x[at] == m) {
                dx[at] += g;
                done = true;
              }
            }
        }
    }
}

// Global average pooling: C x H x W -> C.
void globalPoolForward(const Layer& l, const float* x, float* y, int n) {
  const std::size_t area = static_cast<std::size_t>(l.in.h) * l.in.w;
  const float inv = 1.0f / static_cast<float>(area);
  for (std::size_t k = 0; k < static_cast<std::size_t>(n) * l.in.c; ++k) {
    const float* xc = x + k * area;
    float s = 0.0f;
    for (std::size_t j = 0; j < area; ++j)
      s += xc[j];
    y[k] = s * inv;
  }
}

void globalPoolBackward(const Layer& l, const float* dy, float* dx, int n) {
  const std::size_t area = static_cast<std::size_t>(l.in.h) * l.in.w;
  const float inv = 1.0f / static_cast<float>(area);
  for (std::size_t k = 0; k < static_cast<std::size_t>(n) * l.in.c; ++k)
    std::fill(dx + k * area, dx + (k + 1) * area, dy[k] * inv);
}

// Batch normalization per channel over the batch and the H x W positions. Training:
// the batch's mean and biased variance (recorded in net.batchStats); otherwise the
// running statistics. Sums in double, in a fixed order.
struct ChannelStats {
  double mean = 0.0;
  double var = 0.0;
};

ChannelStats channelStats(const Layer& l, const float* x, int n, int c) {
  const std::size_t area = static_cast<std::size_t>(l.in.h) * l.in.w;
  double s = 0.0;
  double s2 = 0.0;
  for (int i = 0; i < n; ++i) {
    const float* xc = x + static_cast<std::size_t>(i) * l.in.size() + static_cast<std::size_t>(c) * area;
    for (std::size_t j = 0; j < area; ++j)
      s += xc[j];
  }
  const double count = static_cast<double>(area) * n;
  const double mean = s / count;
  for (int i = 0; i < n; ++i) {
    const float* xc = x + static_cast<std::size_t>(i) * l.in.size() + static_cast<std::size_t>(c) * area;
    for (std::size_t j = 0; j < area; ++j) {
      const double d = xc[j] - mean;
      s2 += d * d;
    }
  }
  return {mean, s2 / count};
}

// The mean and 1/sqrt(var + eps) channel c is normalized with.
std::pair<float, float> normalization(const Layer& l, const float* params, const float* x, int n, int c,
                                      bool training) {
  if (!training) return {params[l.meanOffset + c], 1.0f / std::sqrt(params[l.varOffset + c] + l.eps)};
  const ChannelStats st = channelStats(l, x, n, c);
  return {static_cast<float>(st.mean), static_cast<float>(1.0 / std::sqrt(st.var + l.eps))};
}

void batchNormForward(const Layer& l, const float* params, const float* x, float* y, int n, Network& net) {
  const std::size_t area = static_cast<std::size_t>(l.in.h) * l.in.w;
  for (int c = 0; c < l.in.c; ++c) {
    float mean = params[l.meanOffset + c];
    float invStd = 1.0f / std::sqrt(params[l.varOffset + c] + l.eps);
    if (net.training) {
      const ChannelStats st = channelStats(l, x, n, c);
      net.batchStats[l.statsOffset + c] = static_cast<float>(st.mean);
      net.batchStats[l.statsOffset + l.in.c + c] = static_cast<float>(st.var);
      mean = static_cast<float>(st.mean);
      invStd = static_cast<float>(1.0 / std::sqrt(st.var + l.eps));
    }
    const float scale = params[l.weightOffset + c] * invStd;
    const float shift = params[l.biasOffset + c] - mean * scale;
    for (int i = 0; i < n; ++i) {
      const std::size_t at = static_cast<std::size_t>(i) * l.in.size() + static_cast<std::size_t>(c) * area;
      for (std::size_t j = 0; j < area; ++j)
        y[at + j] = x[at + j] * scale + shift;
    }
  }
}

// Training: dx = gamma / sigma * (dy - mean(dy) - xhat * mean(dy * xhat)); otherwise
// the running statistics are constants and dx = gamma / sigma * dy.
void batchNormBackward(const Layer& l, const float* params, const float* x, const float* dy, float* dx, float* grad,
                       int n, const Network& net) {
  const std::size_t area = static_cast<std::size_t>(l.in.h) * l.in.w;
  const double count = static_cast<double>(area) * n;
  for (int c = 0; c < l.in.c; ++c) {
    const auto [mean, invStd] = normalization(l, params, x, n, c, net.training);
    double sumDy = 0.0;
    double sumDyXhat = 0.0;
    for (int i = 0; i < n; ++i) {
      const std::size_t at = static_cast<std::size_t>(i) * l.in.size() + static_cast<std::size_t>(c) * area;
      for (std::size_t j = 0; j < area; ++j) {
        sumDy += dy[at + j];
        sumDyXhat += static_cast<double>(dy[at + j]) * ((x[at + j] - mean) * invStd);
      }
    }
    grad[l.weightOffset + c] = static_cast<float>(sumDyXhat);
    grad[l.biasOffset + c] = static_cast<float>(sumDy);
    grad[l.meanOffset + c] = 0.0f;
    grad[l.varOffset + c] = 0.0f;
    if (dx == nullptr) continue;
    const float scale = params[l.weightOffset + c] * invStd;
    const float meanDy = net.training ? static_cast<float>(sumDy / count) : 0.0f;
    const float meanDyXhat = net.training ? static_cast<float>(sumDyXhat / count) : 0.0f;
    for (int i = 0; i < n; ++i) {
      const std::size_t at = static_cast<std::size_t>(i) * l.in.size() + static_cast<std::size_t>(c) * area;
      for (std::size_t j = 0; j < area; ++j) {
        const float xhat = (x[at + j] - mean) * invStd;
        dx[at + j] = scale * (dy[at + j] - meanDy - xhat * meanDyXhat);
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
    case LayerKind::kAvgPool:
      poolForward(l, x, y, n);
      return;
    case LayerKind::kGlobalAvgPool:
      globalPoolForward(l, x, y, n);
      return;
    case LayerKind::kBatchNorm:
      batchNormForward(l, params, x, y, n, net);
      return;
    case LayerKind::kLeakyRelu: {
      const std::size_t m = static_cast<std::size_t>(n) * l.in.size();
      for (std::size_t i = 0; i < m; ++i)
        y[i] = x[i] > 0.0f ? x[i] : l.alpha * x[i];
      return;
    }
    case LayerKind::kClip: {
      const std::size_t m = static_cast<std::size_t>(n) * l.in.size();
      for (std::size_t i = 0; i < m; ++i)
        y[i] = std::min(std::max(x[i], l.alpha), l.beta);
      return;
    }
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
    case LayerKind::kAvgPool:
      if (dx != nullptr) poolBackward(l, x, y, dy, dx, n);
      return;
    case LayerKind::kGlobalAvgPool:
      if (dx != nullptr) globalPoolBackward(l, dy, dx, n);
      return;
    case LayerKind::kBatchNorm:
      batchNormBackward(l, params, x, dy, dx, grad, n, net);
      return;
    case LayerKind::kLeakyRelu: {
      if (dx == nullptr) return;
      const std::size_t m = static_cast<std::size_t>(n) * l.in.size();
      for (std::size_t i = 0; i < m; ++i)
        dx[i] = x[i] > 0.0f ? dy[i] : l.alpha * dy[i];
      return;
    }
    case LayerKind::kClip: {
      // Like torch.clamp: the gradient passes where lo <= x <= hi.
      if (dx == nullptr) return;
      const std::size_t m = static_cast<std::size_t>(n) * l.in.size();
      for (std::size_t i = 0; i < m; ++i)
        dx[i] = x[i] >= l.alpha && x[i] <= l.beta ? dy[i] : 0.0f;
      return;
    }
    case LayerKind::kGru:
      gruBackward(l, params, x, dy, dx, grad, n, net);
      return;
  }
}

void updateRunningStats(const Network& net, float* params, int batch) {
  for (const Layer& l : net.layers) {
    if (l.kind != LayerKind::kBatchNorm) continue;
    const double count = static_cast<double>(l.in.h) * l.in.w * batch;
    const float unbias = count > 1.0 ? static_cast<float>(count / (count - 1.0)) : 1.0f;
    for (int c = 0; c < l.in.c; ++c) {
      float& mean = params[l.meanOffset + c];
      float& var = params[l.varOffset + c];
      mean = (1.0f - kBatchNormMomentum) * mean + kBatchNormMomentum * net.batchStats[l.statsOffset + c];
      var =
          (1.0f - kBatchNormMomentum) * var + kBatchNormMomentum * unbias * net.batchStats[l.statsOffset + l.in.c + c];
    }
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
      colSize = std::max(colSize, static_cast<std::size_t>(l.in.c) * l.kernelH * l.kernel * l.out.h * l.out.w);
  }
  gradA.resize(static_cast<std::size_t>(batch) * widest);
  gradB.resize(static_cast<std::size_t>(batch) * widest);
  probs.resize(static_cast<std::size_t>(batch) * classes);
  col.resize(colSize);
  dcol.resize(colSize);
  capacity = batch;
}

}  // namespace starling::model::detail
