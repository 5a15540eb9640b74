// The AVX2/FMA and AVX-512 plain products and packed_a (cpu_gemm.hpp); the blocked loop and the
// tiles are cpu_gemm_tiles.hpp's.

#include "kernels/cpu/cpu_gemm.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "common/enforce.hpp"
#include "kernels/cpu/cpu_gemm_tiles.hpp"

namespace coach::kernels::detail {

bool cpu_has(tile_isa isa) noexcept {
  return isa == tile_isa::avx512 ? cpu_has_avx512f() : cpu_has_avx2_fma();
}

#if defined(COACH_X86)

bool cpu_has_avx2_fma() noexcept {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

bool cpu_has_avx512f() noexcept {
  static const bool has = cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f");
  return has;
}

namespace {

/// pack_b_panel for blocked_gemm: op(B) packed into NR-column strips.
template <int NR>
auto packing_b(bool trans_b, const float* b, int ldb) {
  return [=](int p0, int kb, int j0, int nb, float* dst) {
    tiles::pack_b<NR>(trans_b, b, ldb, p0, kb, j0, nb, dst);
  };
}

/// a_block for blocked_gemm that returns the blocks of a.
auto prepacked(const packed_a& a) {
  return [&a](int i0, int, int p0, int kb, float*) { return a.block(i0, p0, kb); };
}

}  // namespace

void avx2_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
               int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  using K = tiles::avx2_kernel;
  tiles::blocked_gemm<K>(m, n, k, alpha, tiles::packing_a<K::mr>(trans_a, a, lda),
                         packing_b<K::nr>(trans_b, b, ldb), beta, c, ldc);
}

void avx512_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  using K = tiles::avx512_kernel;
  tiles::blocked_gemm<K>(m, n, k, alpha, tiles::packing_a<K::mr>(trans_a, a, lda),
                         packing_b<K::nr>(trans_b, b, ldb), beta, c, ldc);
}

packed_a::packed_a(tile_isa isa, bool trans_a, int m, int k, const float* a, int lda)
    : isa_(isa), m_(m), k_(k) {
  COACH_ENFORCE(m > 0 && k > 0, "packed_a needs m and k > 0");
  COACH_ENFORCE(cpu_has(isa), "packed_a made for a tile this CPU does not run");
  const int mr = isa == tile_isa::avx512 ? tiles::avx512_kernel::mr : tiles::avx2_kernel::mr;
  m_pad_ = (m + mr - 1) / mr * mr;
  data_.resize(std::size_t(m_pad_) * k);
  // Block (p0, i0) of blocked_gemm lies at p0 m_pad + i0 kb: every earlier kc block is kc deep.
  for (int p0 = 0; p0 < k; p0 += tiles::kc) {
    const int kb = std::min(tiles::kc, k - p0);
    float* dst = data_.data() + std::size_t(p0) * m_pad_;
    if (isa == tile_isa::avx512)
      tiles::pack_a<tiles::avx512_kernel::mr>(trans_a, a, lda, 0, m, p0, kb, dst);
    else
      tiles::pack_a<tiles::avx2_kernel::mr>(trans_a, a, lda, 0, m, p0, kb, dst);
  }
}

const float* packed_a::block(int i0, int p0, int kb) const noexcept {
  return data_.data() + std::size_t(p0) * m_pad_ + std::size_t(i0) * kb;
}

void packed_gemm(const packed_a& a, bool trans_b, int n, float alpha, const float* b, int ldb,
                 float beta, float* c, int ldc) {
  if (a.isa() == tile_isa::avx512) {
    using K = tiles::avx512_kernel;
    tiles::blocked_gemm<K>(a.rows(), n, a.depth(), alpha, prepacked(a),
                           packing_b<K::nr>(trans_b, b, ldb), beta, c, ldc);
    return;
  }
  using K = tiles::avx2_kernel;
  tiles::blocked_gemm<K>(a.rows(), n, a.depth(), alpha, prepacked(a),
                         packing_b<K::nr>(trans_b, b, ldb), beta, c, ldc);
}

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

packed_a::packed_a(tile_isa, bool, int, int, const float*, int) {
  COACH_ENFORCE(false, "packed_a made on a CPU that is not x86");
}

const float* packed_a::block(int, int, int) const noexcept {
  return nullptr;
}

void packed_gemm(const packed_a&, bool, int, float, const float*, int, float, float*, int) {
  COACH_ENFORCE(false, "packed_gemm called on a CPU that is not x86");
}

#endif

}  // namespace coach::kernels::detail
