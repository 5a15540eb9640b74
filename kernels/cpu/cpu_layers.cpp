// The layer ops of kernels::cpu_backend: activations, convolution (im2col + gemm), pooling,
// dropout and batch norm. Each loop here is the reference order the cuda kernels repeat
// (kernels/cuda/cuda_layers.cu): where a cuda kernel must equal this one bit for bit, both do the
// same float operations in the same order (no FMA: the library builds with -ffp-contract=off).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <optional>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/enforce.hpp"
#include "kernels/counter_rng.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/cpu_gemm.hpp"
#include "kernels/layer_geometry.hpp"
#include "kernels/layer_shapes_check.hpp"

namespace coach::kernels {
namespace {

/// Enforces a shape's validity (a programming error otherwise: backend.hpp).
template <class Shape>
void enforce_valid(const Shape& s, const char* op) {
  const auto ok = validate(s);
  COACH_ENFORCE(ok.has_value(), ok ? op : ok.error().message.c_str());
}

/// Columns of one image: row (c R + r) S + q, column oh out_w + ow holds
/// x[c, oh stride_h - pad_h + r, ow stride_w - pad_w + q], or 0 in the padding. The rows are
/// short (out_w floats): plain loops, not memcpy and memset calls, whose call cost was most of
/// the time (the attribute keeps g++ from turning the loops back into those calls).
__attribute__((optimize("no-tree-loop-distribute-patterns"))) void im2col(const conv2d_shape& s,
                                                                          const float* x,
                                                                          float* col) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  const std::size_t plane = std::size_t(oh_n) * std::size_t(ow_n);
  for (int c = 0; c < s.channels; ++c)
    for (int r = 0; r < s.kernel_h; ++r)
      for (int q = 0; q < s.kernel_w; ++q) {
        float* dst = col + (std::size_t(c * s.kernel_h + r) * s.kernel_w + q) * plane;
        // iw = ow stride_w - pad_w + q; with stride 1: zeros left of the plane, one contiguous
        // run, zeros right.
        const int shift = q - s.pad_w;
        const int lo = std::clamp(-shift, 0, ow_n);
        const int hi = std::clamp(s.width - shift, lo, ow_n);
        if (s.stride_h == 1 && s.stride_w == 1 && s.width == ow_n) {
          // Rows of the plane are rows of the image ("same" padding): the rows inside the image
          // are one run of the image shifted by (r - pad_h) rows and `shift` columns, copied in
          // one loop; then each row's entries left of lo and right of hi (which the run filled
          // from the neighbouring rows) and the rows outside the image are zeroed.
          const int oh_lo = std::clamp(s.pad_h - r, 0, oh_n);
          const int oh_hi = std::clamp(s.height + s.pad_h - r, oh_lo, oh_n);
          for (std::size_t i = 0; i < std::size_t(oh_lo) * ow_n; ++i) dst[i] = 0.0f;
          if (oh_hi > oh_lo) {
            const std::ptrdiff_t from =
                (std::ptrdiff_t(c) * s.height + (oh_lo - s.pad_h + r)) * std::ptrdiff_t(s.width) +
                shift;
            float* run = dst + std::size_t(oh_lo) * ow_n;
            const std::size_t len = std::size_t(oh_hi - oh_lo) * ow_n;
            // The run's first and last entries may lie outside the image (the shift): they
            // are among those zeroed below, so they are not read.
            const std::size_t skip_front = std::size_t(std::max(0, -shift));
            const std::size_t skip_back = std::size_t(std::max(0, shift));
            for (std::size_t i = skip_front; i + skip_back < len; ++i)
              run[i] = x[std::size_t(from + std::ptrdiff_t(i))];
            for (int oh = oh_lo; oh < oh_hi; ++oh) {
              float* row = dst + std::size_t(oh) * ow_n;
              for (int ow = 0; ow < lo; ++ow) row[ow] = 0.0f;
              for (int ow = hi; ow < ow_n; ++ow) row[ow] = 0.0f;
            }
          }
          for (std::size_t i = std::size_t(oh_hi) * ow_n; i < plane; ++i) dst[i] = 0.0f;
          continue;
        }
        for (int oh = 0; oh < oh_n; ++oh) {
          const int ih = oh * s.stride_h - s.pad_h + r;
          float* row = dst + std::size_t(oh) * ow_n;
          if (ih < 0 || ih >= s.height) {
            for (int ow = 0; ow < ow_n; ++ow) row[ow] = 0.0f;
            continue;
          }
          const float* src = x + (std::size_t(c) * s.height + ih) * s.width;
          if (s.stride_w == 1) {
            for (int ow = 0; ow < lo; ++ow) row[ow] = 0.0f;
            for (int ow = lo; ow < hi; ++ow) row[ow] = src[ow + shift];
            for (int ow = hi; ow < ow_n; ++ow) row[ow] = 0.0f;
            continue;
          }
          for (int ow = 0; ow < ow_n; ++ow) {
            const int iw = ow * s.stride_w - s.pad_w + q;
            row[ow] = (iw >= 0 && iw < s.width) ? src[iw] : 0.0f;
          }
        }
      }
}

/// The adjoint of im2col for one image: dx[c, ih, iw] = the sum of the column entries that
/// im2col copied from (c, ih, iw), added in geometry::col2im_sum's order (output rows, then
/// columns, ascending: r and q descending) from 0, so the same bits; as a scatter over the
/// column rows, which reads the columns in order (the gather per input cost as much as the
/// product).
/// With `avx2` (a CPU that has it), a stride-1 convolution's goes through detail::col2im_avx2
/// (cpu_gemm.hpp): the same bits.
void col2im(const conv2d_shape& s, const float* col, float* dx, bool avx2) {
  if (avx2 && s.stride_h == 1 && s.stride_w == 1 && s.kernel_w <= detail::col2im_avx2_max_kw) {
    detail::col2im_avx2(s, col, dx);
    return;
  }
  const int oh_n = s.out_h(), ow_n = s.out_w();
  const std::size_t plane = std::size_t(oh_n) * std::size_t(ow_n);
  std::fill(dx, dx + std::size_t(s.channels) * s.height * s.width, 0.0f);
  for (int c = 0; c < s.channels; ++c)
    for (int r = s.kernel_h - 1; r >= 0; --r)
      for (int q = s.kernel_w - 1; q >= 0; --q) {
        const float* src = col + (std::size_t(c * s.kernel_h + r) * s.kernel_w + q) * plane;
        const int shift = q - s.pad_w;
        const int lo = std::clamp(-shift, 0, ow_n);
        const int hi = std::clamp(s.width - shift, lo, ow_n);
        for (int oh = 0; oh < oh_n; ++oh) {
          const int ih = oh * s.stride_h - s.pad_h + r;
          if (ih < 0 || ih >= s.height) continue;
          float* drow = dx + (std::size_t(c) * s.height + ih) * s.width;
          const float* crow = src + std::size_t(oh) * ow_n;
          if (s.stride_w == 1) {
            for (int ow = lo; ow < hi; ++ow) drow[ow + shift] = drow[ow + shift] + crow[ow];
            continue;
          }
          for (int ow = 0; ow < ow_n; ++ow) {
            const int iw = ow * s.stride_w - s.pad_w + q;
            if (iw >= 0 && iw < s.width) drow[iw] = drow[iw] + crow[ow];
          }
        }
      }
}

/// Sum in double of term(j) over channel c's elements j = (n, position) of an N x C x S tensor,
/// in (n, position) order; term gets the element's index in the tensor.
template <class Term>
double channel_sum(int batch, int channels, std::size_t spatial, int c, Term term) {
  const std::size_t stride = std::size_t(channels) * spatial;
  double acc = 0.0;
  for (std::size_t n = 0; n < std::size_t(batch); ++n) {
    const std::size_t base = n * stride + std::size_t(c) * spatial;
    for (std::size_t i = 0; i < spatial; ++i) acc += term(base + i);
  }
  return acc;
}

/// Max pooling's step: x[i] replaces (best, at) when larger, or when NaN over a number
/// (geometry::max_window's rule). Masks, not a branch (g++ turns ?: back into one): on real
/// activations the comparison goes either way about as often, and the mispredicted branch cost
/// more than the window did (pooling 16x28x28 x 64 images: 14 ms before, a third of it after).
inline void take_larger(float& best, std::int32_t& at, const float* x, std::int32_t i) {
  const float v = x[i];
  const bool take = (v > best) | ((v != v) & (best == best));
  const std::uint32_t mask = 0u - std::uint32_t(take);
  best = std::bit_cast<float>((std::bit_cast<std::uint32_t>(v) & mask) |
                              (std::bit_cast<std::uint32_t>(best) & ~mask));
  at = std::int32_t((std::uint32_t(i) & mask) | (std::uint32_t(at) & ~mask));
}

#if defined(__SSE2__)
/// take_larger on four windows at once: lanes where v wins take v and its indices.
inline void take_larger4(__m128& best, __m128i& at, __m128 v, __m128i index) {
  const __m128 nan_over = _mm_and_ps(_mm_cmpunord_ps(v, v), _mm_cmpord_ps(best, best));
  const __m128 m = _mm_or_ps(_mm_cmpgt_ps(v, best), nan_over);
  best = _mm_or_ps(_mm_and_ps(m, v), _mm_andnot_ps(m, best));
  const __m128i mi = _mm_castps_si128(m);
  at = _mm_or_si128(_mm_and_si128(mi, index), _mm_andnot_si128(mi, at));
}

/// Four adjacent 2 x 2 windows with stride 2 whose first starts at x[start] (all inside the
/// plane): take_larger's comparisons in its order, lane by lane (the same bits), for the
/// common pooling layer (SSE2, in every x86-64 CPU).
inline void max_pool_2x2_four(const float* x, int width, int start, float* y, std::int32_t* arg) {
  const float* r0 = x + start;
  const float* r1 = r0 + width;
  const __m128 a0 = _mm_loadu_ps(r0), b0 = _mm_loadu_ps(r0 + 4);
  const __m128 a1 = _mm_loadu_ps(r1), b1 = _mm_loadu_ps(r1 + 4);
  const __m128i first = _mm_setr_epi32(start, start + 2, start + 4, start + 6);
  __m128 best = _mm_shuffle_ps(a0, b0, _MM_SHUFFLE(2, 0, 2, 0));  // columns 0, 2, 4, 6
  __m128i at = first;
  take_larger4(best, at, _mm_shuffle_ps(a0, b0, _MM_SHUFFLE(3, 1, 3, 1)),
               _mm_add_epi32(first, _mm_set1_epi32(1)));
  take_larger4(best, at, _mm_shuffle_ps(a1, b1, _MM_SHUFFLE(2, 0, 2, 0)),
               _mm_add_epi32(first, _mm_set1_epi32(width)));
  take_larger4(best, at, _mm_shuffle_ps(a1, b1, _MM_SHUFFLE(3, 1, 3, 1)),
               _mm_add_epi32(first, _mm_set1_epi32(width + 1)));
  _mm_storeu_ps(y, best);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(arg), at);
}
#endif

/// The tile of a packed product (none for Eigen's): what the convolutions' batch-wide packing
/// and their columns read from the image run on.
std::optional<detail::tile_isa> packed_tile(cpu_gemm g) {
  if (g == cpu_gemm::avx512) return detail::tile_isa::avx512;
  if (g == cpu_gemm::avx2_fma) return detail::tile_isa::avx2;
  return std::nullopt;
}

}  // namespace

// --- index memory ---------------------------------------------------------------------------

std::int32_t* cpu_backend::alloc_indices(std::size_t n) {
  COACH_ENFORCE(n <= std::numeric_limits<std::size_t>::max() / sizeof(std::int32_t),
                "alloc_indices size overflows");
  const std::size_t bytes = n * sizeof(std::int32_t);
  void* p = ::operator new (bytes, std::align_val_t{64});
  if (bytes > 0) std::memset(p, 0, bytes);
  return static_cast<std::int32_t*>(p);
}

void cpu_backend::free_indices(std::int32_t* p) noexcept {
  if (p != nullptr) ::operator delete (p, std::align_val_t{64});
}

float* cpu_backend::columns(std::size_t floats) {
  if (columns_.size() < floats) columns_.resize(floats);
  return columns_.data();
}

// --- activations ----------------------------------------------------------------------------

void cpu_backend::tanh(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

void cpu_backend::tanh_grad(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = y[i];
    dx[i] = dy[i] * (1.0f - v * v);
  }
}

void cpu_backend::sigmoid(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void cpu_backend::sigmoid_grad(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = y[i];
    dx[i] = dy[i] * (v * (1.0f - v));
  }
}

void cpu_backend::gelu(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = geometry::gelu_value(v, std::tanh(geometry::gelu_inner(v)));
  }
}

void cpu_backend::gelu_grad(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i];
    dx[i] = dy[i] * geometry::gelu_slope(v, std::tanh(geometry::gelu_inner(v)));
  }
}

// --- convolution ----------------------------------------------------------------------------

void cpu_backend::conv2d_forward(const conv2d_shape& s, const float* x, const float* w,
                                 const float* bias, float* y) {
  enforce_valid(s, "conv2d_forward");
  if (precision_ != math_precision::fp32) {
    x = rounded(0, x, s.input_size());
    w = rounded(1, w, s.weight_size());
  }
  const int k = s.filters;
  const int crs = int(s.column_rows());
  const int plane = s.out_h() * s.out_w();
  const std::size_t x_image = std::size_t(s.channels) * s.height * s.width;
  const std::size_t y_image = std::size_t(k) * plane;
  const auto isa = packed_tile(gemm_);
  const bool implicit = isa && detail::columns_packed_from_image(*isa, s);
  float* col = s.is_pointwise() || implicit ? nullptr : columns(s.column_size());
  std::optional<detail::packed_a> packed_w;
  std::optional<detail::column_masks> masks;
  if (implicit) {
    packed_w.emplace(*isa, false, k, crs, w, crs);
    masks.emplace(s);
  }
  for (int n = 0; n < s.batch; ++n) {
    const float* xn = x + std::size_t(n) * x_image;
    float* yn = y + std::size_t(n) * y_image;
    if (implicit)
      detail::gemm_columns(*masks, xn, *packed_w, 1.0f, 0.0f, yn, plane);
    else {
      if (col != nullptr) im2col(s, xn, col);
      product(false, false, k, plane, crs, 1.0f, w, crs, col != nullptr ? col : xn, plane, 0.0f, yn,
              plane);
    }
    // bf16: the output rounded once, as cuDNN's bfloat16 tensors hold it (the bias is added
    // to the rounded value, in float).
    if (precision_ == math_precision::bf16) round_into(precision_, yn, y_image, yn);
    if (bias != nullptr)
      for (int f = 0; f < k; ++f) {
        float* row = yn + std::size_t(f) * plane;
        const float b = bias[f];
        for (int p = 0; p < plane; ++p) row[p] = row[p] + b;
      }
  }
}

void cpu_backend::conv2d_backward_data(const conv2d_shape& s, const float* dy, const float* w,
                                       float* dx) {
  enforce_valid(s, "conv2d_backward_data");
  if (precision_ != math_precision::fp32) {
    dy = rounded(0, dy, s.output_size());
    w = rounded(1, w, s.weight_size());
  }
  const int k = s.filters;
  const int crs = int(s.column_rows());
  const int plane = s.out_h() * s.out_w();
  const std::size_t x_image = std::size_t(s.channels) * s.height * s.width;
  const std::size_t y_image = std::size_t(k) * plane;
  float* col = s.is_pointwise() ? nullptr : columns(s.column_size());
  // W^T packed once for the batch where a packed product runs.
  std::optional<detail::packed_a> packed_wt;
  if (const auto isa = packed_tile(gemm_)) packed_wt.emplace(*isa, true, crs, k, w, crs);
  for (int n = 0; n < s.batch; ++n) {
    const float* dyn = dy + std::size_t(n) * y_image;
    float* dxn = dx + std::size_t(n) * x_image;
    // columns = W^T dy_n (C R S x out positions); a pointwise convolution's columns are dx_n.
    float* out = col != nullptr ? col : dxn;
    if (packed_wt)
      detail::packed_gemm(*packed_wt, false, plane, 1.0f, dyn, plane, 0.0f, out, plane);
    else
      product(true, false, crs, plane, k, 1.0f, w, crs, dyn, plane, 0.0f, out, plane);
    if (col != nullptr) col2im(s, col, dxn, gemm_ != cpu_gemm::eigen);
    if (precision_ == math_precision::bf16) round_into(precision_, dxn, x_image, dxn);
  }
}

void cpu_backend::conv2d_backward_filter(const conv2d_shape& s, const float* x, const float* dy,
                                         float* dw, float* db) {
  enforce_valid(s, "conv2d_backward_filter");
  // db sums the float dy: the bias gradient is no product, so it is never rounded.
  const float* dy_float = dy;
  if (precision_ != math_precision::fp32) {
    x = rounded(0, x, s.input_size());
    dy = rounded(1, dy, s.output_size());
  }
  const int k = s.filters;
  const int crs = int(s.column_rows());
  const int plane = s.out_h() * s.out_w();
  const std::size_t x_image = std::size_t(s.channels) * s.height * s.width;
  const std::size_t y_image = std::size_t(k) * plane;
  const auto isa = packed_tile(gemm_);
  const bool implicit = isa && detail::columns_packed_from_image(*isa, s);
  float* col = s.is_pointwise() || implicit ? nullptr : columns(s.column_size());
  std::optional<detail::column_masks> masks;
  if (implicit) masks.emplace(s);
  for (int n = 0; n < s.batch; ++n) {
    const float* xn = x + std::size_t(n) * x_image;
    const float* dyn = dy + std::size_t(n) * y_image;
    const float beta = n == 0 ? 0.0f : 1.0f;
    // dW (+)= dy_n col^T, images in order.
    if (implicit) {
      detail::gemm_columns_t(*isa, *masks, xn, k, 1.0f, dyn, plane, beta, dw, crs);
      continue;
    }
    if (col != nullptr) im2col(s, xn, col);
    product(false, true, k, crs, plane, 1.0f, dyn, plane, col != nullptr ? col : xn, plane, beta,
            dw, crs);
  }
  if (precision_ == math_precision::bf16) round_into(precision_, dw, s.weight_size(), dw);
  if (db == nullptr) return;
  for (int f = 0; f < k; ++f)
    db[f] = float(channel_sum(s.batch, k, std::size_t(plane), f,
                              [&](std::size_t i) { return double(dy_float[i]); }));
}

// --- pooling --------------------------------------------------------------------------------

void cpu_backend::max_pool2d_forward(const pool2d_shape& s, const float* x, float* y,
                                     std::int32_t* argmax) {
  enforce_valid(s, "max_pool2d_forward");
  const std::size_t in_plane = std::size_t(s.height) * s.width;
  const std::size_t out_plane = std::size_t(s.out_h()) * s.out_w();
  if (s.pad_h == 0 && s.pad_w == 0) {
    // Every window lies inside the plane: geometry::max_window's comparisons in its order, without
    // its per-output division and bounds checks (the common case; the same bits). A 2 x 2 window
    // is unrolled; its first comparison, of the start with itself, never takes.
    const int oh_n = s.out_h(), ow_n = s.out_w(), width = s.width;
    const int sh = s.stride_h, sw = s.stride_w, wh = s.window_h, ww = s.window_w;
    const bool two_by_two = wh == 2 && ww == 2;
    for (std::size_t nc = 0; nc < std::size_t(s.batch) * s.channels; ++nc) {
      const float* xp = x + nc * in_plane;
      float* yp = y + nc * out_plane;
      std::int32_t* ap = argmax + nc * out_plane;
      for (int oh = 0; oh < oh_n; ++oh) {
        int ow = 0;
#if defined(__SSE2__)
        if (two_by_two && sh == 2 && sw == 2)
          for (; ow + 4 <= ow_n; ow += 4)
            max_pool_2x2_four(xp, width, oh * 2 * width + ow * 2, yp + oh * ow_n + ow,
                              ap + oh * ow_n + ow);
#endif
        for (; ow < ow_n; ++ow) {
          const int start = oh * sh * width + ow * sw;
          float best = xp[start];
          std::int32_t at = start;
          if (two_by_two) {
            take_larger(best, at, xp, start + 1);
            take_larger(best, at, xp, start + width);
            take_larger(best, at, xp, start + width + 1);
          } else {
            for (int r = 0; r < wh; ++r)
              for (int q = 0; q < ww; ++q) take_larger(best, at, xp, start + r * width + q);
          }
          yp[oh * ow_n + ow] = best;
          ap[oh * ow_n + ow] = at;
        }
      }
    }
    return;
  }
  for (std::size_t nc = 0; nc < std::size_t(s.batch) * s.channels; ++nc)
    for (std::size_t o = 0; o < out_plane; ++o) {
      const auto best = geometry::max_window(s, x + nc * in_plane, int(o));
      y[nc * out_plane + o] = best.value;
      argmax[nc * out_plane + o] = best.index;
    }
}

void cpu_backend::max_pool2d_backward(const pool2d_shape& s, const float* dy,
                                      const std::int32_t* argmax, float* dx) {
  enforce_valid(s, "max_pool2d_backward");
  const std::size_t in_plane = std::size_t(s.height) * s.width;
  const std::size_t out_plane = std::size_t(s.out_h()) * s.out_w();
  if (s.stride_h >= s.window_h && s.stride_w >= s.window_w) {
    // Windows do not overlap: each input has at most one window, so its gather is 0 + that dy.
    for (std::size_t nc = 0; nc < std::size_t(s.batch) * s.channels; ++nc) {
      float* dxp = dx + nc * in_plane;
      std::fill_n(dxp, in_plane, 0.0f);
      for (std::size_t o = 0; o < out_plane; ++o) {
        float& d = dxp[argmax[nc * out_plane + o]];
        d = d + dy[nc * out_plane + o];
      }
    }
    return;
  }
  for (std::size_t nc = 0; nc < std::size_t(s.batch) * s.channels; ++nc)
    for (std::size_t i = 0; i < in_plane; ++i)
      dx[nc * in_plane + i] =
          geometry::max_pool_gather(s, dy + nc * out_plane, argmax + nc * out_plane, int(i));
}

void cpu_backend::avg_pool2d_forward(const pool2d_shape& s, const float* x, float* y) {
  enforce_valid(s, "avg_pool2d_forward");
  const std::size_t in_plane = std::size_t(s.height) * s.width;
  const std::size_t out_plane = std::size_t(s.out_h()) * s.out_w();
  for (std::size_t nc = 0; nc < std::size_t(s.batch) * s.channels; ++nc)
    for (std::size_t o = 0; o < out_plane; ++o)
      y[nc * out_plane + o] = geometry::avg_window(s, x + nc * in_plane, int(o));
}

void cpu_backend::avg_pool2d_backward(const pool2d_shape& s, const float* dy, float* dx) {
  enforce_valid(s, "avg_pool2d_backward");
  const std::size_t in_plane = std::size_t(s.height) * s.width;
  const std::size_t out_plane = std::size_t(s.out_h()) * s.out_w();
  for (std::size_t nc = 0; nc < std::size_t(s.batch) * s.channels; ++nc)
    for (std::size_t i = 0; i < in_plane; ++i)
      dx[nc * in_plane + i] = geometry::avg_pool_gather(s, dy + nc * out_plane, int(i));
}

// --- dropout --------------------------------------------------------------------------------

void cpu_backend::dropout_forward(const float* x, float* y, std::size_t n, float p,
                                  std::uint64_t seed, std::uint64_t step) {
  COACH_ENFORCE(p >= 0.0f && p < 1.0f, "dropout needs 0 <= p < 1");
  const std::uint64_t key = counter_rng::key(seed, step);
  const std::uint32_t threshold = counter_rng::drop_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  for (std::size_t i = 0; i < n; ++i)
    y[i] = counter_rng::uniform24(key, i) >= threshold ? x[i] * scale : 0.0f;
}

void cpu_backend::dropout_backward(const float* dy, float* dx, std::size_t n, float p,
                                   std::uint64_t seed, std::uint64_t step) {
  // The same mask and scale as forward: the gradient of y = x * scale * keep.
  dropout_forward(dy, dx, n, p, seed, step);
}

// --- batch norm -----------------------------------------------------------------------------

void cpu_backend::batch_norm_forward_train(const batch_norm_shape& s, const batch_norm_options& o,
                                           const float* x, const float* gamma, const float* beta,
                                           float* y, float* running_mean, float* running_var,
                                           float* saved_mean, float* saved_inv_std) {
  enforce_valid(s, "batch_norm_forward_train");
  const std::size_t m = s.per_channel();
  const std::size_t spatial = std::size_t(s.spatial);
  const std::size_t stride = std::size_t(s.channels) * spatial;
  for (int c = 0; c < s.channels; ++c) {
    const double mean =
        channel_sum(s.batch, s.channels, spatial, c, [&](std::size_t i) { return double(x[i]); }) /
        double(m);
    const double sq = channel_sum(s.batch, s.channels, spatial, c, [&](std::size_t i) {
      const double d = double(x[i]) - mean;
      return d * d;
    });
    const auto stats = geometry::channel_stats(mean, sq, m, o.epsilon);
    saved_mean[c] = stats.mean;
    saved_inv_std[c] = stats.inv_std;
    running_mean[c] = geometry::blend(running_mean[c], stats.mean, o.momentum);
    running_var[c] = geometry::blend(running_var[c], stats.unbiased_var, o.momentum);
  }
  // Normalization after every statistic is known: y may alias x.
  for (std::size_t n = 0; n < std::size_t(s.batch); ++n)
    for (int c = 0; c < s.channels; ++c) {
      const std::size_t base = n * stride + std::size_t(c) * spatial;
      const float mean = saved_mean[c], inv = saved_inv_std[c], g = gamma[c], b = beta[c];
      for (std::size_t i = 0; i < spatial; ++i)
        y[base + i] = geometry::normalize(x[base + i], mean, inv, g, b);
    }
}

void cpu_backend::batch_norm_forward_inference(const batch_norm_shape& s,
                                               const batch_norm_options& o, const float* x,
                                               const float* gamma, const float* beta,
                                               const float* running_mean, const float* running_var,
                                               float* y) {
  enforce_valid(s, "batch_norm_forward_inference");
  const std::size_t spatial = std::size_t(s.spatial);
  const std::size_t stride = std::size_t(s.channels) * spatial;
  for (std::size_t n = 0; n < std::size_t(s.batch); ++n)
    for (int c = 0; c < s.channels; ++c) {
      const std::size_t base = n * stride + std::size_t(c) * spatial;
      const float mean = running_mean[c];
      const float inv = geometry::inference_inv_std(running_var[c], o.epsilon);
      const float g = gamma[c], b = beta[c];
      for (std::size_t i = 0; i < spatial; ++i)
        y[base + i] = geometry::normalize(x[base + i], mean, inv, g, b);
    }
}

void cpu_backend::batch_norm_backward(const batch_norm_shape& s, const float* x, const float* dy,
                                      const float* gamma, const float* saved_mean,
                                      const float* saved_inv_std, float* dx, float* dgamma,
                                      float* dbeta) {
  enforce_valid(s, "batch_norm_backward");
  const std::size_t m = s.per_channel();
  const std::size_t spatial = std::size_t(s.spatial);
  const std::size_t stride = std::size_t(s.channels) * spatial;
  for (int c = 0; c < s.channels; ++c) {
    const float mean = saved_mean[c], inv = saved_inv_std[c];
    dbeta[c] = float(
        channel_sum(s.batch, s.channels, spatial, c, [&](std::size_t i) { return double(dy[i]); }));
    dgamma[c] = float(channel_sum(s.batch, s.channels, spatial, c, [&](std::size_t i) {
      return double(dy[i]) * double(geometry::xhat(x[i], mean, inv));
    }));
  }
  // dx after every channel's sums: dx may alias dy.
  for (std::size_t n = 0; n < std::size_t(s.batch); ++n)
    for (int c = 0; c < s.channels; ++c) {
      const std::size_t base = n * stride + std::size_t(c) * spatial;
      const auto k = geometry::bn_backward_constants(gamma[c], saved_mean[c], saved_inv_std[c],
                                                     dbeta[c], dgamma[c], m);
      for (std::size_t i = 0; i < spatial; ++i)
        dx[base + i] = geometry::bn_backward_dx(x[base + i], dy[base + i], k);
    }
}

}  // namespace coach::kernels
