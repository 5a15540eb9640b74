// The convolutions' column products (cpu_gemm.hpp): im2col's columns packed straight from the
// image into the blocked product's strips, for the AVX-512 tile (16 entries a masked load, a
// 16 x 16 register transpose) and the AVX2 tile (8 entries a masked load, an 8 x 8 transpose);
// and col2im at stride 1 with AVX2.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/enforce.hpp"
#include "kernels/cpu/cpu_gemm.hpp"
#include "kernels/cpu/cpu_gemm_tiles.hpp"
#include "kernels/layer_shapes.hpp"

namespace coach::kernels::detail {

column_masks::column_masks(const conv2d_shape& s) : s_(s), chunks_((s.out_plane() + 15) / 16) {
  rows_.assign(std::size_t(s.kernel_h) * chunks_, 0);
  columns_.assign(std::size_t(s.kernel_w) * chunks_, 0);
  lanes_.assign(std::size_t(s.kernel_h) * s.kernel_w * chunks_ * 16, 0);
  for (int j = 0; j < s.out_plane(); ++j) {
    const int oh = j / s.width, ow = j % s.width;
    const auto bit = std::uint16_t(1u << (j % 16));
    for (int r = 0; r < s.kernel_h; ++r)
      if (const int ih = oh - s.pad_h + r; ih >= 0 && ih < s.height)
        rows_[std::size_t(r) * chunks_ + j / 16] |= bit;
    for (int q = 0; q < s.kernel_w; ++q)
      if (const int iw = ow - s.pad_w + q; iw >= 0 && iw < s.width)
        columns_[std::size_t(q) * chunks_ + j / 16] |= bit;
  }
  for (int r = 0; r < s.kernel_h; ++r)
    for (int q = 0; q < s.kernel_w; ++q) {
      std::int32_t* row = lanes_.data() + std::size_t(r * s.kernel_w + q) * chunks_ * 16;
      for (int j = 0; j < s.out_plane(); ++j) {
        const auto bit = 1u << (j % 16);
        if ((rows(r)[j / 16] & columns(q)[j / 16] & bit) != 0) row[j] = -1;
      }
    }
}

bool columns_packed_from_image(tile_isa isa, const conv2d_shape& s) noexcept {
  return cpu_has(isa) && s.stride_h == 1 && s.stride_w == 1 && s.out_w() == s.width &&
         !s.is_pointwise();
}

#if defined(COACH_X86)
namespace {

// --- register transposes ---------------------------------------------------------------------

// g++ 12 warns that the unpack intrinsics' undefined pass-through operand "may be used
// uninitialized" (it is masked off entirely): a false report, silenced for these helpers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

/// The 64-bit halves' interleavings of a and b (unpacklo_pd and unpackhi_pd on floats).
COACH_AVX512 inline __m512 lo(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
COACH_AVX512 inline __m512 hi(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

/// Transposes the 16 x 16 matrix whose rows are v[0 .. 16): afterwards v[u] holds column u.
/// Pairs of rows are interleaved by floats, then by float pairs (each 128-bit lane now holds a
/// 4 x 4 block's column), then the 128-bit lanes of four vectors are transposed.
COACH_AVX512 inline void transpose16(__m512 (&v)[16]) {
  __m512 t[16];
  for (int j = 0; j < 8; ++j) {
    t[2 * j] = _mm512_unpacklo_ps(v[2 * j], v[2 * j + 1]);
    t[2 * j + 1] = _mm512_unpackhi_ps(v[2 * j], v[2 * j + 1]);
  }
  __m512 u[16];  // u[4 i + k], lane L: rows 4 i .. 4 i + 3 of column 4 L + k
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = lo(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = hi(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = lo(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = hi(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x44);
    const __m512 v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xEE);
    v[k] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    v[4 + k] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    v[8 + k] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    v[12 + k] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

/// Transposes the 8 x 8 matrix whose rows are v[0 .. 8): afterwards v[u] holds column u. Pairs
/// of rows are interleaved by floats, then by float pairs (each 128-bit lane now holds a 4 x 4
/// block's column), then the 128-bit lanes of row-block pairs are exchanged.
COACH_AVX2 inline void transpose8(__m256 (&v)[8]) {
  __m256 t[8];
  for (int j = 0; j < 4; ++j) {
    t[2 * j] = _mm256_unpacklo_ps(v[2 * j], v[2 * j + 1]);
    t[2 * j + 1] = _mm256_unpackhi_ps(v[2 * j], v[2 * j + 1]);
  }
  __m256 s[8];  // s[4 i + k], lane L: rows 4 i .. 4 i + 3 of column 4 L + k
  for (int i = 0; i < 2; ++i) {
    s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_permute2f128_ps(s[k], s[4 + k], 0x20);
    v[4 + k] = _mm256_permute2f128_ps(s[k], s[4 + k], 0x31);
  }
}

#pragma GCC diagnostic pop

// --- the column matrix read from the image ---------------------------------------------------

/// The column matrix of one image of a convolution of stride 1 whose output rows are as wide as
/// the input's (columns_packed_from_image), never formed: entry (row (c R + r) S + q, column
/// j = oh W + ow) is x[c, oh - pad_h + r, ow - pad_w + q], or 0 in the padding. With out_w == W,
/// row (c, r, q) is the image read from offset c H W + (r - pad_h) W + (q - pad_w) on, so each
/// packed run of 16 entries is one masked load; the masks (which output rows meet the image
/// at kernel row r, which output columns at kernel column q) come from column_masks, made once
/// per batch.
class image_columns {
 public:
  image_columns(const column_masks& masks, const float* image)
      : s_(masks.shape()), masks_(masks), x_(image) {}

  /// pack_b's layout of rows [p0, p0 + kb) x columns [j0, j0 + nb) (strips of 32 columns).
  COACH_AVX512 void pack_rows16(int p0, int kb, int j0, int nb, float* dst) const {
    constexpr int nr = tiles::avx512_kernel::nr;
    // A strip at a time, as pack_rows8.
    row_view rows[tiles::kc];
    for (int p = p0; p < p0 + kb; ++p) rows[p - p0] = view(p);
    for (int js = 0; js < nb; js += nr, dst += std::size_t(kb) * nr) {
      const int first = std::min(16, nb - js), second = std::min(16, nb - js - 16);
      for (int i = 0; i < kb; ++i) {
        _mm512_storeu_ps(dst + std::size_t(i) * nr, rows[i].load16(j0 + js, first));
        _mm512_storeu_ps(dst + std::size_t(i) * nr + 16, rows[i].load16(j0 + js + 16, second));
      }
    }
  }

  /// pack_b's layout of the transpose's rows [p0, p0 + kb) (output positions) x columns
  /// [j0, j0 + nb) (column-matrix rows): for each 16 positions, the runs of 16 column-matrix
  /// rows are loaded and transposed in registers, then stored as 16 strip rows' halves.
  COACH_AVX512 void pack_transposed16(int p0, int kb, int j0, int nb, float* dst) const {
    constexpr int nr = tiles::avx512_kernel::nr;
    row_view rows[nr];
    for (int js = 0; js < nb; js += nr) {
      float* strip = dst + std::size_t(js / nr) * kb * nr;
      const int width = std::min(nr, nb - js);
      for (int i = 0; i < width; ++i) rows[i] = view(j0 + js + i);
      for (int t = 0; t < kb; t += 16) {
        const int count = std::min(16, kb - t);
        for (int half = 0; half < nr; half += 16) {
          __m512 v[16];
          for (int i = 0; i < 16; ++i)
            v[i] = half + i < width ? rows[half + i].load16(p0 + t, count) : _mm512_setzero_ps();
          transpose16(v);
          for (int u = 0; u < count; ++u)
            _mm512_storeu_ps(strip + std::size_t(t + u) * nr + half, v[u]);
        }
      }
    }
  }

  /// pack_rows16 for the AVX2 tile: strips of 16 columns, 8 entries a masked load.
  COACH_AVX2 void pack_rows8(int p0, int kb, int j0, int nb, float* dst) const {
    constexpr int nr = tiles::avx2_kernel::nr;
    // A strip at a time, its rows in order: the stores run through memory (a row at a time,
    // they went to every strip in turn, 16 KB apart, and cost as much as the loads). Past the
    // last column (nb is no multiple of 16 only at the plane's end) the lane masks are 0: those
    // entries are the zeros pack_b writes there.
    row_view rows[tiles::kc];
    for (int p = p0; p < p0 + kb; ++p) rows[p - p0] = view(p);
    for (int j = j0; j < j0 + nb; j += nr, dst += std::size_t(kb) * nr)
      for (int i = 0; i < kb; ++i) {
        _mm256_storeu_ps(dst + std::size_t(i) * nr, rows[i].load8(j));
        _mm256_storeu_ps(dst + std::size_t(i) * nr + 8, rows[i].load8(j + 8));
      }
  }

  /// pack_transposed16 for the AVX2 tile: runs of 8 column-matrix rows through an 8 x 8
  /// register transpose, stored as 8 strip rows' halves (strips of 16 columns).
  COACH_AVX2 void pack_transposed8(int p0, int kb, int j0, int nb, float* dst) const {
    constexpr int nr = tiles::avx2_kernel::nr;
    row_view rows[nr];
    for (int js = 0; js < nb; js += nr) {
      float* strip = dst + std::size_t(js / nr) * kb * nr;
      const int width = std::min(nr, nb - js);
      for (int i = 0; i < width; ++i) rows[i] = view(j0 + js + i);
      for (int t = 0; t < kb; t += 8) {
        const int count = std::min(8, kb - t);
        for (int half = 0; half < nr; half += 8) {
          __m256 v[8];
          for (int i = 0; i < 8; ++i)
            v[i] = half + i < width ? rows[half + i].load8(p0 + t) : _mm256_setzero_ps();
          transpose8(v);
          for (int u = 0; u < count; ++u)
            _mm256_storeu_ps(strip + std::size_t(t + u) * nr + half, v[u]);
        }
      }
    }
  }

 private:
  /// Row (c, r, q) of the column matrix.
  struct row_view {
    const float* base;          ///< x + c H W (the channel's plane)
    std::ptrdiff_t shift;       ///< (r - pad_h) W + (q - pad_w): entry j reads base[j + shift]
    const std::uint16_t* rows;  ///< column_masks::rows(r)
    const std::uint16_t* cols;  ///< column_masks::columns(q)
    const std::int32_t* lanes;  ///< column_masks::lanes(r, q)

    /// Entries [j, j + count) in the low lanes, zeros elsewhere (count <= 0: all zeros). j is a
    /// multiple of 16 in every call (strip widths, kc and nc are), so it starts a mask chunk.
    COACH_AVX512 __m512 load16(int j, int count) const {
      if (count <= 0) return _mm512_setzero_ps();
      const int chunk = j / 16;
      auto mask = std::uint32_t(rows[chunk] & cols[chunk]);
      if (count < 16) mask &= (1u << count) - 1u;
      // Masked-off lanes are neither read nor faulted on, so the address may lie before the
      // plane (the padding above and left of it).
      const auto addr = reinterpret_cast<std::uintptr_t>(base) +
                        std::uintptr_t(std::ptrdiff_t(j) + shift) * sizeof(float);
      return _mm512_maskz_loadu_ps(__mmask16(mask), reinterpret_cast<const float*>(addr));
    }

    /// Entries [j, j + 8) for the AVX2 tile, each where its lane mask (column_masks::lanes) is
    /// set, 0 elsewhere: past the plane too (j + 8 <= the masks' 16 x chunks). vmaskmovps
    /// neither reads nor faults on masked-off lanes, so the address may lie outside the plane.
    COACH_AVX2 __m256 load8(int j) const {
      const __m256i mask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes + j));
      return _mm256_maskload_ps(reinterpret_cast<const float*>(address(j)), mask);
    }

    /// The address of entry j (it may lie outside the plane where the entry is masked off).
    std::uintptr_t address(int j) const {
      return reinterpret_cast<std::uintptr_t>(base) +
             std::uintptr_t(std::ptrdiff_t(j) + shift) * sizeof(float);
    }
  };

  row_view view(int p) const {
    const int per_channel = s_.kernel_h * s_.kernel_w;
    const int c = p / per_channel, r = (p / s_.kernel_w) % s_.kernel_h, q = p % s_.kernel_w;
    return {x_ + std::size_t(c) * s_.height * s_.width,
            std::ptrdiff_t(r - s_.pad_h) * s_.width + (q - s_.pad_w), masks_.rows(r),
            masks_.columns(q), masks_.lanes(r, q)};
  }

  const conv2d_shape& s_;
  const column_masks& masks_;
  const float* x_;
};

}  // namespace

void gemm_columns(const column_masks& masks, const float* image, const packed_a& a, float alpha,
                  float beta, float* c, int ldc) {
  const conv2d_shape& s = masks.shape();
  COACH_ENFORCE(a.depth() == int(s.column_rows()), "packed_a depth is not the columns' rows");
  const image_columns cols(masks, image);
  auto a_block = [&a](int i0, int, int p0, int kb, float*) { return a.block(i0, p0, kb); };
  if (a.isa() == tile_isa::avx512) {
    tiles::blocked_gemm<tiles::avx512_kernel>(
        a.rows(), s.out_plane(), a.depth(), alpha, a_block,
        [&](int p0, int kb, int j0, int nb, float* dst) { cols.pack_rows16(p0, kb, j0, nb, dst); },
        beta, c, ldc);
    return;
  }
  tiles::blocked_gemm<tiles::avx2_kernel>(
      a.rows(), s.out_plane(), a.depth(), alpha, a_block,
      [&](int p0, int kb, int j0, int nb, float* dst) { cols.pack_rows8(p0, kb, j0, nb, dst); },
      beta, c, ldc);
}

void gemm_columns_t(tile_isa isa, const column_masks& masks, const float* image, int m, float alpha,
                    const float* a, int lda, float beta, float* c, int ldc) {
  const conv2d_shape& s = masks.shape();
  const image_columns cols(masks, image);
  const int n = int(s.column_rows()), k = s.out_plane();
  if (isa == tile_isa::avx512) {
    using K = tiles::avx512_kernel;
    tiles::blocked_gemm<K>(
        m, n, k, alpha, tiles::packing_a<K::mr>(false, a, lda),
        [&](int p0, int kb, int j0, int nb, float* dst) {
          cols.pack_transposed16(p0, kb, j0, nb, dst);
        },
        beta, c, ldc);
    return;
  }
  using K = tiles::avx2_kernel;
  tiles::blocked_gemm<K>(
      m, n, k, alpha, tiles::packing_a<K::mr>(false, a, lda),
      [&](int p0, int kb, int j0, int nb, float* dst) {
        cols.pack_transposed8(p0, kb, j0, nb, dst);
      },
      beta, c, ldc);
}

// --- col2im ----------------------------------------------------------------------------------

// col2im at stride 1 with AVX2, as a gather: each run of 8 inputs of a row sums its column
// entries in registers, kernel rows r then columns q descending (col2im's order), from 0; an
// entry that does not exist (its output outside the plane) is skipped by a blend, not added as
// a 0 (which would turn a -0 sum into +0): each input gets the adds of the scalar loop in its
// order, the same bits. The scatter stored and reloaded each input once per kernel offset, a
// float to the side of the store before it, which the store buffer cannot forward.
COACH_AVX2 void col2im_avx2(const conv2d_shape& s, const float* col, float* dx) {
  const int oh_n = s.out_h(), ow_n = s.out_w(), kh = s.kernel_h, kw = s.kernel_w;
  const std::size_t plane = std::size_t(oh_n) * std::size_t(ow_n);
  __m256i exists[col2im_avx2_max_kw];  // for the chunk: lanes whose output column exists, per q
  for (int iw0 = 0; iw0 < s.width; iw0 += 8) {
    const __m256i iw =
        _mm256_add_epi32(_mm256_set1_epi32(iw0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i in_row = _mm256_cmpgt_epi32(_mm256_set1_epi32(s.width), iw);
    for (int q = 0; q < kw; ++q) {
      const __m256i ow = _mm256_sub_epi32(iw, _mm256_set1_epi32(q - s.pad_w));
      exists[q] = _mm256_and_si256(
          in_row, _mm256_and_si256(_mm256_cmpgt_epi32(ow, _mm256_set1_epi32(-1)),
                                   _mm256_cmpgt_epi32(_mm256_set1_epi32(ow_n), ow)));
    }
    for (int c = 0; c < s.channels; ++c)
      for (int ih = 0; ih < s.height; ++ih) {
        __m256 acc = _mm256_setzero_ps();
        for (int r = kh - 1; r >= 0; --r) {
          const int oh = ih + s.pad_h - r;
          if (oh < 0 || oh >= oh_n) continue;
          for (int q = kw - 1; q >= 0; --q) {
            if (_mm256_testz_si256(exists[q], exists[q])) continue;
            // Lanes masked off are neither read nor faulted on: the address may lie outside.
            const auto at =
                reinterpret_cast<std::uintptr_t>(col + (std::size_t(c * kh + r) * kw + q) * plane +
                                                 std::size_t(oh) * ow_n) +
                std::uintptr_t(std::ptrdiff_t(iw0 + s.pad_w - q) * 4);
            const __m256 v = _mm256_maskload_ps(reinterpret_cast<const float*>(at), exists[q]);
            acc = _mm256_blendv_ps(acc, _mm256_add_ps(acc, v), _mm256_castsi256_ps(exists[q]));
          }
        }
        _mm256_maskstore_ps(dx + (std::size_t(c) * s.height + ih) * s.width + iw0, in_row, acc);
      }
  }
}

#else  // not x86: columns_packed_from_image is false, so these are never called

void gemm_columns(const column_masks&, const float*, const packed_a&, float, float, float*, int) {
  COACH_ENFORCE(false, "gemm_columns called on a CPU that is not x86");
}

void gemm_columns_t(tile_isa, const column_masks&, const float*, int, float, const float*, int,
                    float, float*, int) {
  COACH_ENFORCE(false, "gemm_columns_t called on a CPU that is not x86");
}

void col2im_avx2(const conv2d_shape&, const float*, float*) {
  COACH_ENFORCE(false, "col2im_avx2 called on a CPU that is not x86");
}

#endif

}  // namespace coach::kernels::detail
