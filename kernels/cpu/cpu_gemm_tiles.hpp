#pragma once
// The blocked product of kernels/cpu/cpu_gemm.hpp and its two register tiles, shared by
// cpu_gemm.cpp (the plain products) and cpu_gemm_columns.cpp (the convolutions' columns packed
// straight from the image). Private to those two files. Only the functions marked COACH_AVX2 or
// COACH_AVX512 use the extensions; both files compile this header with the same flags, so the
// linker's one copy of each inline function is the same code.

#if defined(__x86_64__) || defined(__i386__)
#define COACH_X86 1
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(COACH_X86)
namespace coach::kernels::detail::tiles {

#define COACH_AVX2 __attribute__((target("avx2,fma")))
#define COACH_AVX512 __attribute__((target("avx512f,avx2,fma")))

inline constexpr int kc = 256;   ///< inner-dimension block: an A strip and a B strip stay in L1
inline constexpr int nc = 3072;  ///< columns of a packed B panel (a multiple of every nr; ~3 MiB)
inline constexpr int mc_max = 128;  ///< the largest mc below

/// The packing buffers of the calling thread, shared by both kernels.
struct pack_buffers {
  std::vector<float> a = std::vector<float>(std::size_t(mc_max) * kc);
  std::vector<float> b = std::vector<float>(std::size_t(nc) * kc);
};

inline pack_buffers& buffers() {
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
/// consecutive floats (zeros past the last row). op(A)'s columns are op(A)^T's rows, so this is
/// pack_b of op(A)^T (A transposed the other way).
template <int MR>
void pack_a(bool trans_a, const float* a, int lda, int i0, int mb, int p0, int kb, float* dst) {
  pack_b<MR>(!trans_a, a, lda, p0, kb, i0, mb, dst);
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
    if (t.columns <= 8) {
      half_tile(kb, pa, pb, c, ldc, t);
      return;
    }
    if (t.rows <= 2) {
      short_tile<2>(kb, pa, pb, c, ldc, t);
      return;
    }
    if (t.rows <= 4) {
      short_tile<4>(kb, pa, pb, c, ldc, t);
      return;
    }
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
    store(acc, c, ldc, t);
  }

  /// The tile's sums acc[r] (rows r < t.rows) into C; a partial tile goes through a local copy
  /// of its valid part.
  COACH_AVX2 static void store(const __m256 (*acc)[2], float* c, int ldc, const tile_store& t) {
    if (t.columns == nr) {
      for (int r = 0; r < t.rows; ++r) {
        float* row = c + std::size_t(r) * ldc;
        _mm256_storeu_ps(row, combined(acc[r][0], row, t));
        _mm256_storeu_ps(row + 8, combined(acc[r][1], row + 8, t));
      }
      return;
    }
    alignas(32) float local[nr] = {};
    const bool reads_c = !t.first || t.beta != 0.0f;
    for (int r = 0; r < t.rows; ++r) {
      float* row = c + std::size_t(r) * ldc;
      if (reads_c) std::copy(row, row + t.columns, local);
      _mm256_store_ps(local, combined(acc[r][0], local, t));
      _mm256_store_ps(local + 8, combined(acc[r][1], local + 8, t));
      std::copy(local, local + t.columns, row);
    }
  }

  /// A tile of at most R (2 or 4) valid rows (the last strip of a C whose rows are no multiple
  /// of 6, as 32 filters' 5 x 6 + 2): only those rows' chains, the same ones.
  template <int R>
  COACH_AVX2 static void short_tile(int kb, const float* pa, const float* pb, float* c, int ldc,
                                    const tile_store& t) {
    static_assert(R == 2 || R == 4);
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00;
    __m256 c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    for (int p = 0; p < kb; ++p, pa += mr, pb += nr) {
      const __m256 b0 = _mm256_loadu_ps(pb);
      const __m256 b1 = _mm256_loadu_ps(pb + 8);
      __m256 av = _mm256_broadcast_ss(pa);
      c00 = _mm256_fmadd_ps(av, b0, c00);
      c01 = _mm256_fmadd_ps(av, b1, c01);
      av = _mm256_broadcast_ss(pa + 1);
      c10 = _mm256_fmadd_ps(av, b0, c10);
      c11 = _mm256_fmadd_ps(av, b1, c11);
      if constexpr (R == 4) {
        av = _mm256_broadcast_ss(pa + 2);
        c20 = _mm256_fmadd_ps(av, b0, c20);
        c21 = _mm256_fmadd_ps(av, b1, c21);
        av = _mm256_broadcast_ss(pa + 3);
        c30 = _mm256_fmadd_ps(av, b0, c30);
        c31 = _mm256_fmadd_ps(av, b1, c31);
      }
    }
    const __m256 acc[4][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
    store(acc, c, ldc, t);
  }

  /// A tile of at most 8 valid columns (the last strip of a row of C, as for a 14 x 14 plane's
  /// 196 = 12 x 16 + 4 columns): only the strips' first halves, the same chains.
  COACH_AVX2 static void half_tile(int kb, const float* pa, const float* pb, float* c, int ldc,
                                   const tile_store& t) {
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    for (int p = 0; p < kb; ++p, pa += mr, pb += nr) {
      const __m256 b0 = _mm256_loadu_ps(pb);
      c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(pa), b0, c0);
      c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(pa + 1), b0, c1);
      c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(pa + 2), b0, c2);
      c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(pa + 3), b0, c3);
      c4 = _mm256_fmadd_ps(_mm256_broadcast_ss(pa + 4), b0, c4);
      c5 = _mm256_fmadd_ps(_mm256_broadcast_ss(pa + 5), b0, c5);
    }
    const __m256 acc[mr] = {c0, c1, c2, c3, c4, c5};
    alignas(32) float local[8] = {};
    const bool reads_c = !t.first || t.beta != 0.0f;
    for (int r = 0; r < t.rows; ++r) {
      float* row = c + std::size_t(r) * ldc;
      if (reads_c) std::copy(row, row + t.columns, local);
      _mm256_store_ps(local, combined(acc[r], local, t));
      std::copy(local, local + t.columns, row);
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

}  // namespace coach::kernels::detail::tiles
#endif
