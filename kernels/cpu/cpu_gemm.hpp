#pragma once
// The packed AVX2/FMA matrix product of kernels::cpu_backend, used where the CPU has both
// extensions (read once, at run time: the library itself is built for baseline x86-64, so it runs
// on any x86-64 CPU, and Eigen's SSE2 product remains the fallback).
//
// Layout: the classic blocked scheme. op(B) is packed in KC x NC panels of 16-column strips,
// op(A) in MC x KC blocks of 6-row strips, and a 6 x 16 register tile accumulates one strip pair
// with fused multiply-adds.
//
// Rounding: every element of C is the fused multiply-add chain over p = 0 .. k-1 in order, in
// blocks of KC terms; each block's sum is scaled by alpha and added to C (the first to beta C).
// An element therefore depends only on its row of op(A), its column of op(B), k, alpha and
// beta: not on m, n, the leading dimensions or where it lies in C. Its result differs in the last
// bits from Eigen's product, so runs compare bit for bit only on CPUs that take the same path.

namespace coach::kernels::detail {

/// True when this CPU has AVX2 and FMA (read once).
bool cpu_has_avx2_fma() noexcept;

/// C = alpha op(A) op(B) + beta C for row-major matrices, as backend::gemm: op(A) is m x k,
/// op(B) k x n, C m x n with leading dimension ldc; beta == 0 does not read C. Requires m, n and
/// k > 0, leading dimensions at least the stored row lengths, and cpu_has_avx2_fma(). Packing
/// buffers are per thread and kept for the thread's life.
void avx2_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
               int lda, const float* b, int ldb, float beta, float* c, int ldc);

}  // namespace coach::kernels::detail
