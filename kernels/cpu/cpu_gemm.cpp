// The AVX2/FMA and AVX-512 products (cpu_gemm.hpp). Only the functions marked COACH_AVX2 or
// COACH_AVX512 use the extensions; everything else in this file is baseline code, so nothing the
// linker might share with other files (templates, inline functions) is compiled for them.

#include "kernels/cpu/cpu_gemm.hpp"

#if defined(__x86_64__) || defined(__i386__)
#define COACH_X86 1
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/enforce.hpp"
#include "kernels/layer_shapes.hpp"

namespace coach::kernels::detail {

column_masks::column_masks(const conv2d_shape& s) : s_(s), chunks_((s.out_plane() + 15) / 16) {
  rows_.assign(std::size_t(s.kernel_h) * chunks_, 0);
  columns_.assign(std::size_t(s.kernel_w) * chunks_, 0);
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
}

#if defined(COACH_X86)
namespace {

#define COACH_AVX2 __attribute__((target("avx2,fma")))
#define COACH_AVX512 __attribute__((target("avx512f,avx2,fma")))

constexpr int kc = 256;      ///< inner-dimension block: an A strip and a B strip stay in L1
constexpr int nc = 3072;     ///< columns of a packed B panel (a multiple of every nr; ~3 MiB)
constexpr int mc_max = 128;  ///< the largest mc below

/// The packing buffers of the calling thread, shared by both kernels.
struct pack_buffers {
  std::vector<float> a = std::vector<float>(std::size_t(mc_max) * kc);
  std::vector<float> b = std::vector<float>(std::size_t(nc) * kc);
};

pack_buffers& buffers() {
  thread_local pack_buffers mine;
  return mine;
}

/// Packs op(B)[p0 .. p0+kb) x [j0 .. j0+nb) as strips of NR columns: strip s holds, for each p,
/// NR consecutive floats (zeros past the last column).
template <int NR>
void pack_b(bool trans_b, const float* b, int ldb, int p0, int kb, int j0, int nb, float* dst) {
  for (int js = 0; js < nb; js += NR) {
    const int width = std::min(NR, nb - js);
    float* strip = dst + std::size_t(js / NR) * kb * NR;
    if (!trans_b) {
      for (int p = 0; p < kb; ++p) {
        const float* src = b + std::size_t(p0 + p) * ldb + j0 + js;
        float* d = strip + std::size_t(p) * NR;
        std::copy(src, src + width, d);
        std::fill(d + width, d + NR, 0.0f);
      }
      continue;
    }
    for (int q = 0; q < NR; ++q) {
      if (q >= width) {
        for (int p = 0; p < kb; ++p) strip[std::size_t(p) * NR + q] = 0.0f;
        continue;
      }
      const float* src = b + std::size_t(j0 + js + q) * ldb + p0;
      for (int p = 0; p < kb; ++p) strip[std::size_t(p) * NR + q] = src[p];
    }
  }
}

/// Packs op(A)[i0 .. i0+mb) x [p0 .. p0+kb) as strips of MR rows: strip s holds, for each p, MR
/// consecutive floats (zeros past the last row).
template <int MR>
void pack_a(bool trans_a, const float* a, int lda, int i0, int mb, int p0, int kb, float* dst) {
  for (int is = 0; is < mb; is += MR) {
    const int height = std::min(MR, mb - is);
    float* strip = dst + std::size_t(is / MR) * kb * MR;
    if (trans_a) {
      for (int p = 0; p < kb; ++p) {
        const float* src = a + std::size_t(p0 + p) * lda + i0 + is;
        float* d = strip + std::size_t(p) * MR;
        std::copy(src, src + height, d);
        std::fill(d + height, d + MR, 0.0f);
      }
      continue;
    }
    for (int r = 0; r < MR; ++r) {
      if (r >= height) {
        for (int p = 0; p < kb; ++p) strip[std::size_t(p) * MR + r] = 0.0f;
        continue;
      }
      const float* src = a + std::size_t(i0 + is + r) * lda + p0;
      for (int p = 0; p < kb; ++p) strip[std::size_t(p) * MR + r] = src[p];
    }
  }
}

/// How a tile's sums enter C.
struct tile_store {
  float alpha;
  float beta;   ///< the first block's factor on C (later blocks add to C)
  bool first;   ///< the first block over the inner dimension
  int rows;     ///< valid rows of the tile (<= mr)
  int columns;  ///< valid columns of the tile (<= nr)
};

// --- AVX2: a 6 x 16 tile ---------------------------------------------------------------------

/// c (8 floats) = alpha acc + (first ? beta c : c), C not read when first and beta == 0.
COACH_AVX2 inline __m256 combined(__m256 acc, const float* c, const tile_store& t) {
  const __m256 scaled = _mm256_mul_ps(_mm256_set1_ps(t.alpha), acc);
  if (!t.first) return _mm256_add_ps(_mm256_loadu_ps(c), scaled);
  if (t.beta == 0.0f) return scaled;
  return _mm256_add_ps(scaled, _mm256_mul_ps(_mm256_set1_ps(t.beta), _mm256_loadu_ps(c)));
}

struct avx2_kernel {
  static constexpr int mr = 6;    ///< rows of the register tile
  static constexpr int nr = 16;   ///< columns of the register tile (two 8-float vectors)
  static constexpr int mc = 120;  ///< rows of a packed A block (a multiple of mr; in L2)

  /// One 6 x 16 tile: the fused multiply-add chains over kb packed columns of A and rows of B,
  /// then stored into C (a partial tile goes through a local copy of its valid part). The
  /// twelve accumulators are named variables: an array of them is kept on the stack by g++ 12,
  /// which stores every one of them on every step.
  COACH_AVX2 static void tile(int kb, const float* pa, const float* pb, float* c, int ldc,
                              const tile_store& t) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int p = 0; p < kb; ++p, pa += mr, pb += nr) {
      const __m256 b0 = _mm256_loadu_ps(pb);
      const __m256 b1 = _mm256_loadu_ps(pb + 8);
      __m256 av = _mm256_broadcast_ss(pa);
      c00 = _mm256_fmadd_ps(av, b0, c00);
      c01 = _mm256_fmadd_ps(av, b1, c01);
      av = _mm256_broadcast_ss(pa + 1);
      c10 = _mm256_fmadd_ps(av, b0, c10);
      c11 = _mm256_fmadd_ps(av, b1, c11);
      av = _mm256_broadcast_ss(pa + 2);
      c20 = _mm256_fmadd_ps(av, b0, c20);
      c21 = _mm256_fmadd_ps(av, b1, c21);
      av = _mm256_broadcast_ss(pa + 3);
      c30 = _mm256_fmadd_ps(av, b0, c30);
      c31 = _mm256_fmadd_ps(av, b1, c31);
      av = _mm256_broadcast_ss(pa + 4);
      c40 = _mm256_fmadd_ps(av, b0, c40);
      c41 = _mm256_fmadd_ps(av, b1, c41);
      av = _mm256_broadcast_ss(pa + 5);
      c50 = _mm256_fmadd_ps(av, b0, c50);
      c51 = _mm256_fmadd_ps(av, b1, c51);
    }
    const __m256 acc[mr][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                               {c30, c31}, {c40, c41}, {c50, c51}};
    if (t.rows == mr && t.columns == nr) {
      for (int r = 0; r < mr; ++r) {
        float* row = c + std::size_t(r) * ldc;
        _mm256_storeu_ps(row, combined(acc[r][0], row, t));
        _mm256_storeu_ps(row + 8, combined(acc[r][1], row + 8, t));
      }
      return;
    }
    alignas(32) float local[mr][nr] = {};
    const bool reads_c = !t.first || t.beta != 0.0f;
    for (int r = 0; r < t.rows; ++r) {
      float* row = c + std::size_t(r) * ldc;
      if (reads_c) std::copy(row, row + t.columns, local[r]);
      _mm256_store_ps(local[r], combined(acc[r][0], local[r], t));
      _mm256_store_ps(local[r] + 8, combined(acc[r][1], local[r] + 8, t));
      std::copy(local[r], local[r] + t.columns, row);
    }
  }
};

// --- AVX-512: an 8 x 32 tile -----------------------------------------------------------------

/// The masked 16 floats of c = alpha acc + (first ? beta c : c): the AVX2 combination's
/// operations in its order, so the same bits.
COACH_AVX512 inline void store_combined(__m512 acc, float* c, __mmask16 mask, const tile_store& t) {
  const __m512 scaled = _mm512_mul_ps(_mm512_set1_ps(t.alpha), acc);
  __m512 out = scaled;
  if (!t.first)
    out = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, c), scaled);
  else if (t.beta != 0.0f)
    out = _mm512_add_ps(scaled,
                        _mm512_mul_ps(_mm512_set1_ps(t.beta), _mm512_maskz_loadu_ps(mask, c)));
  _mm512_mask_storeu_ps(c, mask, out);
}

struct avx512_kernel {
  static constexpr int mr = 8;    ///< rows of the register tile
  static constexpr int nr = 32;   ///< columns of the register tile (two 16-float vectors)
  static constexpr int mc = 128;  ///< rows of a packed A block (a multiple of mr; in L2)

  /// One 8 x 32 tile: for each element the fused multiply-add chain of avx2_kernel::tile, in
  /// the same order, hence the same bits; sixteen named accumulators, partial tiles stored
  /// through masks.
  COACH_AVX512 static void tile(int kb, const float* pa, const float* pb, float* c, int ldc,
                                const tile_store& t) {
    if (t.columns <= 16) {
      half_tile(kb, pa, pb, c, ldc, t);
      return;
    }
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    __m512 c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    for (int p = 0; p < kb; ++p, pa += mr, pb += nr) {
      const __m512 b0 = _mm512_loadu_ps(pb);
      const __m512 b1 = _mm512_loadu_ps(pb + 16);
#define COACH_ROW(r)                            \
  {                                             \
    const __m512 av = _mm512_set1_ps(pa[r]);    \
    c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0); \
    c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1); \
  }
      COACH_ROW(0)
      COACH_ROW(1) COACH_ROW(2) COACH_ROW(3) COACH_ROW(4) COACH_ROW(5) COACH_ROW(6) COACH_ROW(7)
#undef COACH_ROW
    }
    const __m512 acc[mr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                               {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
    const __mmask16 m0 = t.columns >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << t.columns) - 1u);
    const __mmask16 m1 = t.columns >= 32   ? __mmask16(0xFFFF)
                         : t.columns <= 16 ? __mmask16(0)
                                           : __mmask16((1u << (t.columns - 16)) - 1u);
    for (int r = 0; r < t.rows; ++r) {
      float* row = c + std::size_t(r) * ldc;
      store_combined(acc[r][0], row, m0, t);
      if (m1 != 0) store_combined(acc[r][1], row + 16, m1, t);
    }
  }

  /// A tile of at most 16 valid columns (the last strip of a row of C, as for a 14 x 14 plane's
  /// 196 columns): only the strips' first halves, the same chains.
  COACH_AVX512 static void half_tile(int kb, const float* pa, const float* pb, float* c, int ldc,
                                     const tile_store& t) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
    for (int p = 0; p < kb; ++p, pa += mr, pb += nr) {
      const __m512 b0 = _mm512_loadu_ps(pb);
      c0 = _mm512_fmadd_ps(_mm512_set1_ps(pa[0]), b0, c0);
      c1 = _mm512_fmadd_ps(_mm512_set1_ps(pa[1]), b0, c1);
      c2 = _mm512_fmadd_ps(_mm512_set1_ps(pa[2]), b0, c2);
      c3 = _mm512_fmadd_ps(_mm512_set1_ps(pa[3]), b0, c3);
      c4 = _mm512_fmadd_ps(_mm512_set1_ps(pa[4]), b0, c4);
      c5 = _mm512_fmadd_ps(_mm512_set1_ps(pa[5]), b0, c5);
      c6 = _mm512_fmadd_ps(_mm512_set1_ps(pa[6]), b0, c6);
      c7 = _mm512_fmadd_ps(_mm512_set1_ps(pa[7]), b0, c7);
    }
    const __m512 acc[mr] = {c0, c1, c2, c3, c4, c5, c6, c7};
    const auto mask = __mmask16(t.columns >= 16 ? 0xFFFFu : (1u << t.columns) - 1u);
    for (int r = 0; r < t.rows; ++r) store_combined(acc[r], c + std::size_t(r) * ldc, mask, t);
  }
};

/// The blocked product with Kernel's tile: B packed in kc x nc panels by pack_b_panel(p0, kb, j0,
/// nb, dst) (pack_b's layout); A's mc x kc blocks given by a_block(i0, mb, p0, kb, scratch),
/// which packs into scratch (pack_a's layout) or returns a block packed before.
template <class Kernel, class PackA, class PackB>
void blocked_gemm(int m, int n, int k, float alpha, PackA&& a_block, PackB&& pack_b_panel,
                  float beta, float* c, int ldc) {
  constexpr int mr = Kernel::mr, nr = Kernel::nr, mc = Kernel::mc;
  static_assert(mc % mr == 0 && nc % nr == 0 && mc <= mc_max);
  pack_buffers& buf = buffers();
  for (int jc = 0; jc < n; jc += nc) {
    const int nb = std::min(nc, n - jc);
    for (int pc = 0; pc < k; pc += kc) {
      const int kb = std::min(kc, k - pc);
      pack_b_panel(pc, kb, jc, nb, buf.b.data());
      for (int ic = 0; ic < m; ic += mc) {
        const int mb = std::min(mc, m - ic);
        const float* pa = a_block(ic, mb, pc, kb, buf.a.data());
        for (int jr = 0; jr < nb; jr += nr)
          for (int ir = 0; ir < mb; ir += mr) {
            const tile_store t{alpha, beta, pc == 0, std::min(mr, mb - ir), std::min(nr, nb - jr)};
            Kernel::tile(kb, pa + std::size_t(ir / mr) * kb * mr,
                         buf.b.data() + std::size_t(jr / nr) * kb * nr,
                         c + std::size_t(ic + ir) * ldc + jc + jr, ldc, t);
          }
      }
    }
  }
}

/// a_block for blocked_gemm that packs op(A) block by block.
template <int MR>
auto packing_a(bool trans_a, const float* a, int lda) {
  return [=](int i0, int mb, int p0, int kb, float* scratch) -> const float* {
    pack_a<MR>(trans_a, a, lda, i0, mb, p0, kb, scratch);
    return scratch;
  };
}

// --- im2col's columns packed straight from the image (AVX-512) -------------------------------

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

#pragma GCC diagnostic pop

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
  COACH_AVX512 void pack_rows(int p0, int kb, int j0, int nb, float* dst) const {
    constexpr int nr = avx512_kernel::nr;
    for (int p = p0; p < p0 + kb; ++p) {
      const row_view row = view(p);
      float* d = dst + std::size_t(p - p0) * nr;
      for (int js = 0; js < nb; js += nr, d += std::size_t(kb) * nr) {
        _mm512_storeu_ps(d, row.load16(j0 + js, std::min(16, nb - js)));
        _mm512_storeu_ps(d + 16, row.load16(j0 + js + 16, std::min(16, nb - js - 16)));
      }
    }
  }

  /// pack_b's layout of the transpose's rows [p0, p0 + kb) (output positions) x columns
  /// [j0, j0 + nb) (column-matrix rows): for each 16 positions, the runs of 16 column-matrix
  /// rows are loaded and transposed in registers, then stored as 16 strip rows' halves.
  COACH_AVX512 void pack_transposed(int p0, int kb, int j0, int nb, float* dst) const {
    constexpr int nr = avx512_kernel::nr;
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

 private:
  /// Row (c, r, q) of the column matrix.
  struct row_view {
    const float* base;          ///< x + c H W (the channel's plane)
    std::ptrdiff_t shift;       ///< (r - pad_h) W + (q - pad_w): entry j reads base[j + shift]
    const std::uint16_t* rows;  ///< column_masks::rows(r)
    const std::uint16_t* cols;  ///< column_masks::columns(q)

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
  };

  row_view view(int p) const {
    const int per_channel = s_.kernel_h * s_.kernel_w;
    const int c = p / per_channel, r = (p / s_.kernel_w) % s_.kernel_h, q = p % s_.kernel_w;
    return {x_ + std::size_t(c) * s_.height * s_.width,
            std::ptrdiff_t(r - s_.pad_h) * s_.width + (q - s_.pad_w), masks_.rows(r),
            masks_.columns(q)};
  }

  const conv2d_shape& s_;
  const column_masks& masks_;
  const float* x_;
};

}  // namespace

bool cpu_has_avx2_fma() noexcept {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

bool cpu_has_avx512f() noexcept {
  static const bool has = cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f");
  return has;
}

void avx2_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
               int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  blocked_gemm<avx2_kernel>(
      m, n, k, alpha, packing_a<avx2_kernel::mr>(trans_a, a, lda),
      [&](int p0, int kb, int j0, int nb, float* dst) {
        pack_b<avx2_kernel::nr>(trans_b, b, ldb, p0, kb, j0, nb, dst);
      },
      beta, c, ldc);
}

void avx512_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  blocked_gemm<avx512_kernel>(
      m, n, k, alpha, packing_a<avx512_kernel::mr>(trans_a, a, lda),
      [&](int p0, int kb, int j0, int nb, float* dst) {
        pack_b<avx512_kernel::nr>(trans_b, b, ldb, p0, kb, j0, nb, dst);
      },
      beta, c, ldc);
}

packed_a::packed_a(bool trans_a, int m, int k, const float* a, int lda)
    : m_(m), k_(k), m_pad_((m + avx512_kernel::mr - 1) / avx512_kernel::mr * avx512_kernel::mr) {
  COACH_ENFORCE(m > 0 && k > 0, "packed_a needs m and k > 0");
  data_.resize(std::size_t(m_pad_) * k);
  // Block (p0, i0) of blocked_gemm lies at p0 m_pad + i0 kb: every earlier kc block is kc deep.
  for (int p0 = 0; p0 < k; p0 += kc) {
    const int kb = std::min(kc, k - p0);
    pack_a<avx512_kernel::mr>(trans_a, a, lda, 0, m, p0, kb,
                              data_.data() + std::size_t(p0) * m_pad_);
  }
}

const float* packed_a::block(int i0, int p0, int kb) const noexcept {
  return data_.data() + std::size_t(p0) * m_pad_ + std::size_t(i0) * kb;
}

namespace {

/// a_block for blocked_gemm that returns the blocks of a.
auto prepacked(const packed_a& a) {
  return [&a](int i0, int, int p0, int kb, float*) { return a.block(i0, p0, kb); };
}

}  // namespace

void avx512_gemm_packed(const packed_a& a, bool trans_b, int n, float alpha, const float* b,
                        int ldb, float beta, float* c, int ldc) {
  blocked_gemm<avx512_kernel>(
      a.rows(), n, a.depth(), alpha, prepacked(a),
      [&](int p0, int kb, int j0, int nb, float* dst) {
        pack_b<avx512_kernel::nr>(trans_b, b, ldb, p0, kb, j0, nb, dst);
      },
      beta, c, ldc);
}

bool columns_packed_from_image(const conv2d_shape& s) noexcept {
  return cpu_has_avx512f() && s.stride_h == 1 && s.stride_w == 1 && s.out_w() == s.width &&
         !s.is_pointwise();
}

void avx512_gemm_columns(const column_masks& masks, const float* image, const packed_a& a,
                         float alpha, float beta, float* c, int ldc) {
  const conv2d_shape& s = masks.shape();
  COACH_ENFORCE(a.depth() == int(s.column_rows()), "packed_a depth is not the columns' rows");
  const image_columns cols(masks, image);
  blocked_gemm<avx512_kernel>(
      a.rows(), s.out_plane(), a.depth(), alpha, prepacked(a),
      [&](int p0, int kb, int j0, int nb, float* dst) { cols.pack_rows(p0, kb, j0, nb, dst); },
      beta, c, ldc);
}

void avx512_gemm_columns_t(const column_masks& masks, const float* image, int m, float alpha,
                           const float* a, int lda, float beta, float* c, int ldc) {
  const conv2d_shape& s = masks.shape();
  const image_columns cols(masks, image);
  blocked_gemm<avx512_kernel>(
      m, int(s.column_rows()), s.out_plane(), alpha, packing_a<avx512_kernel::mr>(false, a, lda),
      [&](int p0, int kb, int j0, int nb, float* dst) {
        cols.pack_transposed(p0, kb, j0, nb, dst);
      },
      beta, c, ldc);
}

#undef COACH_AVX512
#undef COACH_AVX2

#else  // not x86: Eigen's product only

bool cpu_has_avx2_fma() noexcept {
  return false;
}

bool cpu_has_avx512f() noexcept {
  return false;
}

void avx2_gemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float,
               float*, int) {
  COACH_ENFORCE(false, "avx2_gemm called on a CPU that is not x86");
}

void avx512_gemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float,
                 float*, int) {
  COACH_ENFORCE(false, "avx512_gemm called on a CPU that is not x86");
}

bool columns_packed_from_image(const conv2d_shape&) noexcept {
  return false;
}

packed_a::packed_a(bool, int, int, const float*, int) {
  COACH_ENFORCE(false, "packed_a made on a CPU that is not x86");
}

const float* packed_a::block(int, int, int) const noexcept {
  return nullptr;
}

void avx512_gemm_packed(const packed_a&, bool, int, float, const float*, int, float, float*, int) {
  COACH_ENFORCE(false, "avx512_gemm_packed called on a CPU that is not x86");
}

void avx512_gemm_columns(const column_masks&, const float*, const packed_a&, float, float, float*,
                         int) {
  COACH_ENFORCE(false, "avx512_gemm_columns called on a CPU that is not x86");
}

void avx512_gemm_columns_t(const column_masks&, const float*, int, float, const float*, int, float,
                           float*, int) {
  COACH_ENFORCE(false, "avx512_gemm_columns_t called on a CPU that is not x86");
}

#endif

}  // namespace coach::kernels::detail
