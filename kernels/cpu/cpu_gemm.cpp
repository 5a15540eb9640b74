// The AVX2/FMA gemm (cpu_gemm.hpp). Only the functions marked COACH_AVX2 use the extensions;
// everything else in this file is baseline code, so nothing the linker might share with other
// files (templates, inline functions) is compiled for AVX2.

#include "kernels/cpu/cpu_gemm.hpp"

#if defined(__x86_64__) || defined(__i386__)
#define COACH_X86 1
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstddef>
#include <vector>

#include "common/enforce.hpp"

namespace coach::kernels::detail {

#if defined(COACH_X86)
namespace {

#define COACH_AVX2 __attribute__((target("avx2,fma")))

constexpr int mr = 6;     ///< rows of the register tile
constexpr int nr = 16;    ///< columns of the register tile (two 8-float vectors)
constexpr int kc = 256;   ///< inner-dimension block: an A strip and a B strip stay in L1
constexpr int mc = 120;   ///< rows of a packed A block (a multiple of mr; ~120 KiB, in L2)
constexpr int nc = 3072;  ///< columns of a packed B panel (a multiple of nr; ~3 MiB)

/// The packing buffers of the calling thread.
struct pack_buffers {
  std::vector<float> a = std::vector<float>(std::size_t(mc) * kc);
  std::vector<float> b = std::vector<float>(std::size_t(nc) * kc);
};

pack_buffers& buffers() {
  thread_local pack_buffers mine;
  return mine;
}

/// Packs op(B)[p0 .. p0+kb) x [j0 .. j0+nb) as strips of nr columns: strip s holds, for each p,
/// nr consecutive floats (zeros past the last column).
void pack_b(bool trans_b, const float* b, int ldb, int p0, int kb, int j0, int nb, float* dst) {
  for (int js = 0; js < nb; js += nr) {
    const int width = std::min(nr, nb - js);
    float* strip = dst + std::size_t(js / nr) * kb * nr;
    if (!trans_b) {
      for (int p = 0; p < kb; ++p) {
        const float* src = b + std::size_t(p0 + p) * ldb + j0 + js;
        float* d = strip + std::size_t(p) * nr;
        std::copy(src, src + width, d);
        std::fill(d + width, d + nr, 0.0f);
      }
      continue;
    }
    for (int q = 0; q < nr; ++q) {
      if (q >= width) {
        for (int p = 0; p < kb; ++p) strip[std::size_t(p) * nr + q] = 0.0f;
        continue;
      }
      const float* src = b + std::size_t(j0 + js + q) * ldb + p0;
      for (int p = 0; p < kb; ++p) strip[std::size_t(p) * nr + q] = src[p];
    }
  }
}

/// Packs op(A)[i0 .. i0+mb) x [p0 .. p0+kb) as strips of mr rows: strip s holds, for each p, mr
/// consecutive floats (zeros past the last row).
void pack_a(bool trans_a, const float* a, int lda, int i0, int mb, int p0, int kb, float* dst) {
  for (int is = 0; is < mb; is += mr) {
    const int height = std::min(mr, mb - is);
    float* strip = dst + std::size_t(is / mr) * kb * mr;
    if (trans_a) {
      for (int p = 0; p < kb; ++p) {
        const float* src = a + std::size_t(p0 + p) * lda + i0 + is;
        float* d = strip + std::size_t(p) * mr;
        std::copy(src, src + height, d);
        std::fill(d + height, d + mr, 0.0f);
      }
      continue;
    }
    for (int r = 0; r < mr; ++r) {
      if (r >= height) {
        for (int p = 0; p < kb; ++p) strip[std::size_t(p) * mr + r] = 0.0f;
        continue;
      }
      const float* src = a + std::size_t(i0 + is + r) * lda + p0;
      for (int p = 0; p < kb; ++p) strip[std::size_t(p) * mr + r] = src[p];
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

/// c (8 floats) = alpha acc + (first ? beta c : c), C not read when first and beta == 0.
COACH_AVX2 inline __m256 combined(__m256 acc, const float* c, const tile_store& t) {
  const __m256 scaled = _mm256_mul_ps(_mm256_set1_ps(t.alpha), acc);
  if (!t.first) return _mm256_add_ps(_mm256_loadu_ps(c), scaled);
  if (t.beta == 0.0f) return scaled;
  return _mm256_add_ps(scaled, _mm256_mul_ps(_mm256_set1_ps(t.beta), _mm256_loadu_ps(c)));
}

/// One 6 x 16 tile: the fused multiply-add chains over kb packed columns of A and rows of B,
/// then stored into C (a partial tile goes through a local copy of its valid part). The twelve
/// accumulators are named variables: an array of them is kept on the stack by g++ 12, which
/// stores every one of them on every step.
COACH_AVX2 void tile(int kb, const float* pa, const float* pb, float* c, int ldc,
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

}  // namespace

bool cpu_has_avx2_fma() noexcept {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

void avx2_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
               int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  pack_buffers& buf = buffers();
  for (int jc = 0; jc < n; jc += nc) {
    const int nb = std::min(nc, n - jc);
    for (int pc = 0; pc < k; pc += kc) {
      const int kb = std::min(kc, k - pc);
      pack_b(trans_b, b, ldb, pc, kb, jc, nb, buf.b.data());
      for (int ic = 0; ic < m; ic += mc) {
        const int mb = std::min(mc, m - ic);
        pack_a(trans_a, a, lda, ic, mb, pc, kb, buf.a.data());
        for (int jr = 0; jr < nb; jr += nr)
          for (int ir = 0; ir < mb; ir += mr) {
            const tile_store t{alpha, beta, pc == 0, std::min(mr, mb - ir), std::min(nr, nb - jr)};
            tile(kb, buf.a.data() + std::size_t(ir / mr) * kb * mr,
                 buf.b.data() + std::size_t(jr / nr) * kb * nr,
                 c + std::size_t(ic + ir) * ldc + jc + jr, ldc, t);
          }
      }
    }
  }
}

#undef COACH_AVX2

#else  // not x86: Eigen's product only

bool cpu_has_avx2_fma() noexcept {
  return false;
}

void avx2_gemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float,
               float*, int) {
  COACH_ENFORCE(false, "avx2_gemm called on a CPU that is not x86");
}

#endif

}  // namespace coach::kernels::detail
