#pragma once
// kernels::geometry: the per-element arithmetic of the layer ops, written once and compiled by
// both the host compiler (kernels/cpu/cpu_layers.cpp) and nvcc (kernels/cuda/cuda_layers.cu).
// Every backend computes an output element by calling the same function here, so pooling, col2im,
// batch norm's normalization and gradients, and gelu's slope do the same float operations in the
// same order on every backend (no FMA on either side: kernels/CMakeLists.txt), and agree bit for
// bit given equal inputs.
//
// Gathers instead of scatters: an input element's gradient sums the outputs whose window holds it,
// in ascending output order. No atomics, so the result is deterministic on the device too.
//
// C++17 and nvcc-compatible, like layer_shapes.hpp.

#include <math.h>

#include <cstddef>
#include <cstdint>

#include "kernels/host_device.hpp"
#include "kernels/layer_shapes.hpp"

namespace coach::kernels::geometry {

// --- windows --------------------------------------------------------------------------------

/// A half-open range [lo, hi) of output positions along one axis.
struct span {
  int lo = 0;
  int hi = 0;
};

/// The outputs o (of `out`) whose window [o stride - pad, o stride - pad + window) holds input
/// position i.
COACH_HOST_DEVICE inline span windows_over(int i, int pad, int window, int stride, int out) {
  const int first = i + pad - window + 1;  // o stride >= first
  span s;
  s.lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  s.hi = (i + pad) / stride + 1;  // i + pad >= 0
  if (s.hi > out) s.hi = out;
  return s;
}

/// dx[c, ih, iw] of one image from its column matrix (plane = out_h out_w columns): the sum of the
/// entries im2col copied from (c, ih, iw), over output rows then columns, ascending.
COACH_HOST_DEVICE inline float col2im_sum(const conv2d_shape& s, const float* col,
                                          std::size_t plane, int c, int ih, int iw) {
  const span rows = windows_over(ih, s.pad_h, s.kernel_h, s.stride_h, s.out_h());
  const span cols = windows_over(iw, s.pad_w, s.kernel_w, s.stride_w, s.out_w());
  const int ow_n = s.out_w();
  float acc = 0.0f;
  for (int oh = rows.lo; oh < rows.hi; ++oh) {
    const int r = ih + s.pad_h - oh * s.stride_h;
    for (int ow = cols.lo; ow < cols.hi; ++ow) {
      const int q = iw + s.pad_w - ow * s.stride_w;
      const std::size_t row = (std::size_t(c) * s.kernel_h + r) * s.kernel_w + q;
      acc = acc + col[row * plane + std::size_t(oh) * ow_n + ow];
    }
  }
  return acc;
}

/// A window's maximum and where it sits in the input plane (h W + w).
struct window_max {
  float value = 0.0f;
  std::int32_t index = 0;
};

/// The maximum of output o's window over one input plane: the first maximum in row-major window
/// order, a NaN winning over numbers (the first NaN), pads never considered.
COACH_HOST_DEVICE inline window_max max_window(const pool2d_shape& s, const float* x, int o) {
  const int oh = o / s.out_w(), ow = o % s.out_w();
  const int h0 = oh * s.stride_h - s.pad_h, w0 = ow * s.stride_w - s.pad_w;
  window_max best;
  bool have = false;
  for (int r = 0; r < s.window_h; ++r) {
    const int ih = h0 + r;
    if (ih < 0 || ih >= s.height) continue;
    for (int q = 0; q < s.window_w; ++q) {
      const int iw = w0 + q;
      if (iw < 0 || iw >= s.width) continue;
      const float v = x[ih * s.width + iw];
      const bool v_nan = v != v, best_nan = best.value != best.value;
      if (!have || v > best.value || (v_nan && !best_nan)) {
        best.value = v;
        best.index = ih * s.width + iw;
        have = true;
      }
    }
  }
  return best;
}

/// dx at input i of one plane: the dy of every window over i whose argmax is i, ascending.
COACH_HOST_DEVICE inline float max_pool_gather(const pool2d_shape& s, const float* dy,
                                               const std::int32_t* argmax, int i) {
  const int ih = i / s.width, iw = i % s.width;
  const span rows = windows_over(ih, s.pad_h, s.window_h, s.stride_h, s.out_h());
  const span cols = windows_over(iw, s.pad_w, s.window_w, s.stride_w, s.out_w());
  float acc = 0.0f;
  for (int oh = rows.lo; oh < rows.hi; ++oh)
    for (int ow = cols.lo; ow < cols.hi; ++ow) {
      const int o = oh * s.out_w() + ow;
      if (argmax[o] == i) acc = acc + dy[o];
    }
  return acc;
}

/// The mean of output o's window over one input plane: the in-bounds inputs summed in row-major
/// window order, divided by the window's area (pads count as zeros).
COACH_HOST_DEVICE inline float avg_window(const pool2d_shape& s, const float* x, int o) {
  const int oh = o / s.out_w(), ow = o % s.out_w();
  const int h0 = oh * s.stride_h - s.pad_h, w0 = ow * s.stride_w - s.pad_w;
  float acc = 0.0f;
  for (int r = 0; r < s.window_h; ++r) {
    const int ih = h0 + r;
    if (ih < 0 || ih >= s.height) continue;
    for (int q = 0; q < s.window_w; ++q) {
      const int iw = w0 + q;
      if (iw >= 0 && iw < s.width) acc = acc + x[ih * s.width + iw];
    }
  }
  return acc / float(s.window_h * s.window_w);
}

/// dx at input i of one plane: the dy of every window over i, ascending, divided by the area.
COACH_HOST_DEVICE inline float avg_pool_gather(const pool2d_shape& s, const float* dy, int i) {
  const int ih = i / s.width, iw = i % s.width;
  const span rows = windows_over(ih, s.pad_h, s.window_h, s.stride_h, s.out_h());
  const span cols = windows_over(iw, s.pad_w, s.window_w, s.stride_w, s.out_w());
  float acc = 0.0f;
  for (int oh = rows.lo; oh < rows.hi; ++oh)
    for (int ow = cols.lo; ow < cols.hi; ++ow) acc = acc + dy[oh * s.out_w() + ow];
  return acc / float(s.window_h * s.window_w);
}

// --- gelu (tanh approximation) --------------------------------------------------------------

/// sqrt(2 / pi).
inline constexpr float gelu_k0 = 0.7978845608028654f;
inline constexpr float gelu_k1 = 0.044715f;

/// The argument of gelu's tanh: k0 (x + k1 x^3).
COACH_HOST_DEVICE inline float gelu_inner(float x) {
  return gelu_k0 * (x + gelu_k1 * (x * x * x));
}

/// gelu(x) given t = tanh(gelu_inner(x)).
COACH_HOST_DEVICE inline float gelu_value(float x, float t) {
  return 0.5f * x * (1.0f + t);
}

/// d gelu / dx given t = tanh(gelu_inner(x)):
/// 0.5 (1 + t) + 0.5 x (1 - t^2) k0 (1 + 3 k1 x^2).
COACH_HOST_DEVICE inline float gelu_slope(float x, float t) {
  const float inner_slope = gelu_k0 * (1.0f + 3.0f * gelu_k1 * (x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * ((1.0f - t * t) * inner_slope);
}

// --- batch norm -----------------------------------------------------------------------------

/// A channel's batch statistics, as stored.
struct batch_stats {
  float mean = 0.0f;
  float inv_std = 1.0f;       ///< 1 / sqrt(biased variance + eps)
  float unbiased_var = 0.0f;  ///< for the running variance (biased when m == 1)
};

/// The statistics of a channel from its mean and its sum of squared deviations `sq` over m
/// elements (both computed in double), rounded to float once.
COACH_HOST_DEVICE inline batch_stats channel_stats(double mean, double sq, std::size_t m,
                                                   float eps) {
  const double var = sq / double(m);
  batch_stats out;
  out.mean = float(mean);
  out.inv_std = float(1.0 / ::sqrt(var + double(eps)));
  out.unbiased_var = float(m > 1 ? sq / double(m - 1) : var);
  return out;
}

/// (1 - momentum) running + momentum batch, in float.
COACH_HOST_DEVICE inline float blend(float running, float batch, float momentum) {
  return (1.0f - momentum) * running + momentum * batch;
}

/// gamma ((x - mean) inv_std) + beta.
COACH_HOST_DEVICE inline float normalize(float x, float mean, float inv_std, float gamma,
                                         float beta) {
  return gamma * ((x - mean) * inv_std) + beta;
}

/// Inference's 1 / sqrt(running_var + eps), in float.
COACH_HOST_DEVICE inline float inference_inv_std(float running_var, float eps) {
  return 1.0f / ::sqrtf(running_var + eps);
}

/// A channel's constants of batch_norm_backward's dx.
struct bn_grad_constants {
  float mean = 0.0f;
  float inv_std = 1.0f;
  float scale = 1.0f;        ///< gamma inv_std
  float mean_dy = 0.0f;      ///< dbeta / m
  float mean_dyxhat = 0.0f;  ///< dgamma / m
};

COACH_HOST_DEVICE inline bn_grad_constants bn_backward_constants(float gamma, float mean,
                                                                 float inv_std, float dbeta,
                                                                 float dgamma, std::size_t m) {
  bn_grad_constants k;
  k.mean = mean;
  k.inv_std = inv_std;
  k.scale = gamma * inv_std;
  k.mean_dy = dbeta / float(m);
  k.mean_dyxhat = dgamma / float(m);
  return k;
}

/// xhat = (x - mean) inv_std, as forward computed it.
COACH_HOST_DEVICE inline float xhat(float x, float mean, float inv_std) {
  return (x - mean) * inv_std;
}

/// dx = scale (dy - mean_dy - xhat mean_dyxhat).
COACH_HOST_DEVICE inline float bn_backward_dx(float x, float dy, const bn_grad_constants& k) {
  return k.scale * (dy - k.mean_dy - xhat(x, k.mean, k.inv_std) * k.mean_dyxhat);
}

}  // namespace coach::kernels::geometry
