#pragma once
// The packed matrix products of kernels::cpu_backend: AVX-512 where the CPU has AVX-512F, AVX2/FMA
// where it has those (read once, at run time: the library itself is built for baseline x86-64, so
// it runs on any x86-64 CPU, and Eigen's SSE2 product remains the fallback).
//
// Layout: the classic blocked scheme. op(B) is packed in KC x NC panels of NR-column strips,
// op(A) in MC x KC blocks of MR-row strips, and an MR x NR register tile accumulates one strip
// pair with fused multiply-adds: 6 x 16 (two 8-float vectors a row) with AVX2, 8 x 32 (two
// 16-float vectors a row) with AVX-512.
//
// Rounding: every element of C is the fused multiply-add chain over p = 0 .. k-1 in order, in
// blocks of KC terms (KC is the same for both); each block's sum is scaled by alpha and added to
// C (the first to beta C). An element therefore depends only on its row of op(A), its column of
// op(B), k, alpha and beta: not on m, n, the leading dimensions, where it lies in C, or which of
// the two kernels ran, so AVX2 and AVX-512 machines train to the same bits. Its result differs in
// the last bits from Eigen's product, so runs compare bit for bit only on CPUs that take a packed
// path.
//
// Files: cpu_gemm_tiles.hpp holds the blocked loop, the packing and both tiles; cpu_gemm.cpp the
// plain products and packed_a; cpu_gemm_columns.cpp the convolutions' columns packed from the
// image.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/layer_shapes.hpp"

namespace coach::kernels::detail {

/// True when this CPU has AVX2 and FMA (read once).
bool cpu_has_avx2_fma() noexcept;

/// True when this CPU has AVX-512F as well as AVX2 and FMA (read once).
bool cpu_has_avx512f() noexcept;

/// C = alpha op(A) op(B) + beta C for row-major matrices, as backend::gemm: op(A) is m x k,
/// op(B) k x n, C m x n with leading dimension ldc; beta == 0 does not read C. Requires m, n and
/// k > 0, leading dimensions at least the stored row lengths, and cpu_has_avx2_fma(). Packing
/// buffers are per thread and kept for the thread's life.
void avx2_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
               int lda, const float* b, int ldb, float beta, float* c, int ldc);

/// avx2_gemm's product with the 8 x 32 AVX-512 tile: the same bits. Requires cpu_has_avx512f().
void avx512_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc);

/// Which register tile a packed product runs: cpu_gemm's avx2_fma (6 x 16) or avx512 (8 x 32).
enum class tile_isa { avx2, avx512 };

/// True when this CPU runs `isa`'s tile (cpu_has_avx2_fma() or cpu_has_avx512f()).
bool cpu_has(tile_isa isa) noexcept;

/// True when the column products below serve convolution `s` with `isa`'s tile on this CPU:
/// cpu_has(isa), stride 1, output rows as wide as the input's (out_w == W), not pointwise. They
/// compute what im2col of one image followed by the product computes, to the same bits (and the
/// same bits with either tile), without forming the columns: each packed strip of the column
/// matrix is read straight from the image with masked loads (16 entries a load with AVX-512, 8
/// with AVX2).
bool columns_packed_from_image(tile_isa isa, const conv2d_shape& s) noexcept;

/// op(A) (m x k) packed once in `isa`'s layout, for products that share it: a convolution's
/// weights across the images of a batch. Requires cpu_has(isa).
class packed_a {
 public:
  packed_a(tile_isa isa, bool trans_a, int m, int k, const float* a, int lda);

  tile_isa isa() const noexcept { return isa_; }
  int rows() const noexcept { return m_; }
  int depth() const noexcept { return k_; }
  /// The packed block of rows [i0, ...) and inner terms [p0, p0 + kb) (p0 a multiple of the
  /// 256-term block, kb that block's length).
  const float* block(int i0, int p0, int kb) const noexcept;

 private:
  tile_isa isa_ = tile_isa::avx2;
  int m_ = 0, k_ = 0, m_pad_ = 0;
  std::vector<float> data_;
};

/// The product with op(A) packed before, on a.isa()'s tile: C = alpha op(A) op(B) + beta C,
/// op(B) a.depth() x n. The bits of avx2_gemm.
void packed_gemm(const packed_a& a, bool trans_b, int n, float alpha, const float* b, int ldb,
                 float beta, float* c, int ldc);

/// What the column products below need of a convolution's shape, made once per batch: for each
/// kernel row r (column q), which output positions meet the image, 16 positions a mask (the
/// AVX-512 loads' masks); and for each kernel offset (r, q), a lane mask a position (-1 where
/// the position meets the image, 0 elsewhere and past the plane, up to a multiple of 16: the
/// AVX2 loads' masks, read as they are). out_w == W is assumed: position j is row j / W, column
/// j % W.
class column_masks {
 public:
  explicit column_masks(const conv2d_shape& s);
  const conv2d_shape& shape() const noexcept { return s_; }
  const std::uint16_t* rows(int r) const noexcept {
    return rows_.data() + std::size_t(r) * chunks_;
  }
  const std::uint16_t* columns(int q) const noexcept {
    return columns_.data() + std::size_t(q) * chunks_;
  }
  /// Kernel offset (r, q)'s lane masks, 16 x chunks of them.
  const std::int32_t* lanes(int r, int q) const noexcept {
    return lanes_.data() + std::size_t(r * s_.kernel_w + q) * chunks_ * 16;
  }

 private:
  conv2d_shape s_;
  int chunks_ = 0;
  std::vector<std::uint16_t> rows_;     ///< [r][chunk of 16 output positions]
  std::vector<std::uint16_t> columns_;  ///< [q][chunk]
  std::vector<std::int32_t> lanes_;     ///< [r S + q][position], 16 x chunks a row
};

/// C = alpha op(A) cols + beta C on a.isa()'s tile, cols the C R S x out_h out_w column matrix
/// of `image` (one C H W image of masks.shape()): a is m x C R S, C is m x out_h out_w (ldc). The
/// forward convolution with A = W. Requires columns_packed_from_image(a.isa(), masks.shape()).
void gemm_columns(const column_masks& masks, const float* image, const packed_a& a, float alpha,
                  float beta, float* c, int ldc);

/// C = alpha A cols^T + beta C on `isa`'s tile: A is m x out_h out_w, C is m x C R S. The filter
/// gradient with A = dy of the image. Requires columns_packed_from_image(isa, masks.shape()).
void gemm_columns_t(tile_isa isa, const column_masks& masks, const float* image, int m, float alpha,
                    const float* a, int lda, float beta, float* c, int ldc);

/// The widest kernel col2im_avx2 takes.
inline constexpr int col2im_avx2_max_kw = 32;

/// The adjoint of im2col for one image of a stride-1 convolution (cpu_layers.cpp's col2im, whose
/// order of additions it keeps: the same bits), with AVX2: dx (C H W) from col (C R S x out_h
/// out_w). Requires cpu_has_avx2_fma(), stride 1 and kernel_w <= col2im_avx2_max_kw.
void col2im_avx2(const conv2d_shape& s, const float* col, float* dx);

}  // namespace coach::kernels::detail
