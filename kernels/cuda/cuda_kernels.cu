// Device kernels of the cuda backend (see cuda_kernels.hpp for the contracts and the rounding
// rules). Elementwise kernels use grid-stride loops, so any n runs with a bounded grid and needs
// no alignment: a shard may start an update at any element.

#include <cuda_bf16.h>
#include <cmath>

#include "kernels/cuda/cuda_device.cuh"
#include "kernels/cuda/cuda_kernels.hpp"

namespace coach::kernels::detail {
namespace {

// --- rows and columns -----------------------------------------------------------------------

__global__ void scale_matrix_kernel(float* c, int rows, int cols, int ld, float beta) {
  const std::size_t total = std::size_t(rows) * std::size_t(cols);
  for (std::size_t i = first_index(); i < total; i += grid_stride()) {
    float* p = c + (i / std::size_t(cols)) * std::size_t(ld) + i % std::size_t(cols);
    *p = beta == 0.0f ? 0.0f : *p * beta;
  }
}

__global__ void bias_add_kernel(float* y, const float* bias, int rows, int cols) {
  const std::size_t total = std::size_t(rows) * std::size_t(cols);
  for (std::size_t i = first_index(); i < total; i += grid_stride())
    y[i] = y[i] + bias[i % std::size_t(cols)];
}

__global__ void column_sum_kernel(const float* x, int rows, int cols, float beta, float* out) {
  // One thread per column, rows in order: the cpu's order (out = beta * out, then row by row),
  // and neighbouring threads read neighbouring columns of a row (coalesced).
  for (std::size_t c = first_index(); c < std::size_t(cols); c += grid_stride()) {
    float acc = beta == 0.0f ? 0.0f : (beta == 1.0f ? out[c] : out[c] * beta);
    for (std::size_t r = 0; r < std::size_t(rows); ++r) acc = acc + x[r * std::size_t(cols) + c];
    out[c] = acc;
  }
}

// --- elementwise ----------------------------------------------------------------------------

__global__ void relu_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void relu_grad_kernel(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float d = dy[i];
    dx[i] = y[i] > 0.0f ? d : 0.0f;
  }
}

__global__ void axpy_kernel(std::size_t n, float alpha, const float* x, float* y) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = y[i] + alpha * x[i];
}

__global__ void scale_kernel(std::size_t n, float alpha, float* x) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) x[i] = x[i] * alpha;
}

// --- softmax cross-entropy and accuracy -----------------------------------------------------

/// One warp per row. dlogits may alias logits: each lane writes only the columns it read, and
/// every lane has read the row's maximum inputs and x[label] before the first write.
__global__ void softmax_xent_kernel(const float* logits, const std::int32_t* labels, int rows,
                                    int cols, float* dlogits, double* row_loss) {
  const int lane = int(threadIdx.x) % warp;
  const std::size_t row = std::size_t(blockIdx.x) * warps_per_block + threadIdx.x / warp;
  if (row >= std::size_t(rows)) return;  // the whole warp leaves together
  const float* x = logits + row * std::size_t(cols);
  float* d = dlogits + row * std::size_t(cols);
  const int label = labels[row];

  float mx = -INFINITY;
  for (int c = lane; c < cols; c += warp) mx = fmaxf(mx, x[c]);
  for (int off = warp / 2; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(full_mask, mx, off));
  const float x_label = x[label];
  __syncwarp();

  // Shifting by the row maximum keeps every exponent <= 0: no overflow, and the sum is >= 1.
  float s = 0.0f;
  for (int c = lane; c < cols; c += warp) {
    const float e = expf(x[c] - mx);
    d[c] = e;
    s = s + e;
  }
  // A butterfly: every lane ends with the same sum (float addition is commutative).
  for (int off = warp / 2; off > 0; off /= 2) s = s + __shfl_xor_sync(full_mask, s, off);
  for (int c = lane; c < cols; c += warp) {
    float q = d[c] / s;
    if (c == label) q = q - 1.0f;
    d[c] = q;
  }
  if (lane == 0) row_loss[row] = log(double(s)) - (double(x_label) - double(mx));
}

__global__ void count_correct_kernel(const float* logits, const std::int32_t* labels, int rows,
                                     int cols, unsigned long long* count) {
  __shared__ double scratch[cuda_block];
  double hits = 0.0;  // exact: a block counts far fewer than 2^53 rows
  for (std::size_t r = first_index(); r < std::size_t(rows); r += grid_stride()) {
    const float* row = logits + r * std::size_t(cols);
    int best = 0;
    float best_value = row[0];
    for (int c = 1; c < cols; ++c) {
      const float v = row[c];
      if (v > best_value) {  // strict: a tie keeps the first maximum, as on the cpu
        best_value = v;
        best = c;
      }
    }
    if (best == labels[r]) hits += 1.0;
  }
  const double total = block_sum(hits, scratch);
  // Integer atomics commute exactly: the count does not depend on the blocks' order.
  if (threadIdx.x == 0 && total > 0.0) atomicAdd(count, static_cast<unsigned long long>(total));
}

// --- reductions -----------------------------------------------------------------------------

template <bool squares>
__global__ void partial_sum_kernel(const float* x, std::size_t n, double* partials) {
  __shared__ double scratch[cuda_block];
  double acc = 0.0;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const double v = x[i];
    acc += squares ? v * v : v;
  }
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

/// One block: thread t adds x[t], x[t + cuda_block], ... in order, then the tree.
__global__ void sum_doubles_kernel(const double* x, std::size_t n, double* out) {
  __shared__ double scratch[cuda_block];
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < n; i += cuda_block) acc += x[i];
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = total;
}

// --- optimizer updates ----------------------------------------------------------------------

__global__ void sgd_kernel(float* w, const float* g, std::size_t n, float grad_scale, float lr,
                           float wd) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float wi = w[i];
    w[i] = wi - lr * (grad_scale * g[i] + wd * wi);
  }
}

__global__ void momentum_kernel(float* w, float* v, const float* g, std::size_t n, float grad_scale,
                                float lr, float mu, float wd) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float wi = w[i];
    const float vi = mu * v[i] + (grad_scale * g[i] + wd * wi);
    v[i] = vi;
    w[i] = wi - lr * vi;
  }
}

__global__ void adam_kernel(float* w, float* m, float* v, const float* g, std::size_t n,
                            adam_constants k) {
  const float one_minus_b1 = 1.0f - k.beta1;
  const float one_minus_b2 = 1.0f - k.beta2;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    // AdamW shrinks w first and keeps the decay out of the gradient (the cpu's adamw loop).
    const float wi = k.decoupled ? w[i] * k.decay : w[i];
    const float gp = k.decoupled ? k.grad_scale * g[i] : k.grad_scale * g[i] + k.weight_decay * wi;
    const float mi = k.beta1 * m[i] + one_minus_b1 * gp;
    const float vi = k.beta2 * v[i] + one_minus_b2 * (gp * gp);
    m[i] = mi;
    v[i] = vi;
    // lr * (m / bc1) / (sqrt(v / bc2) + eps) == step * m / (sqrt(v) * inv_sqrt_bc2 + eps), the
    // cpu's form; sqrtf and '/' are correctly rounded (no fast math).
    w[i] = wi - k.step * mi / (sqrtf(vi) * k.inv_sqrt_bc2 + k.epsilon);
  }
}

}  // namespace

cudaError_t launch_scale_matrix(launch l, float* c, int rows, int cols, int ld, float beta) {
  const std::size_t total = std::size_t(rows) * std::size_t(cols);
  if (total == 0) return cudaSuccess;
  scale_matrix_kernel<<<blocks_for(total, l.max_blocks), cuda_block, 0, l.stream>>>(c, rows, cols,
                                                                                    ld, beta);
  return cudaGetLastError();
}

__global__ void to_bf16_kernel(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const __nv_bfloat16 b = __float2bfloat16_rn(src[i]);
    dst[i] = *reinterpret_cast<const std::uint16_t*>(&b);
  }
}

__global__ void from_bf16_kernel(const std::uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    dst[i] = __uint_as_float(std::uint32_t(src[i]) << 16);
}

__global__ void round_bf16_kernel(float* x, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}

cudaError_t launch_round_bf16(launch l, float* x, std::size_t n) {
  if (n == 0) return cudaSuccess;
  round_bf16_kernel<<<blocks_for(n, l.max_blocks), cuda_block, 0, l.stream>>>(x, n);
  return cudaGetLastError();
}

cudaError_t launch_to_bf16(launch l, const float* src, std::uint16_t* dst, std::size_t n) {
  if (n == 0) return cudaSuccess;
  to_bf16_kernel<<<blocks_for(n, l.max_blocks), cuda_block, 0, l.stream>>>(src, dst, n);
  return cudaGetLastError();
}

cudaError_t launch_from_bf16(launch l, const std::uint16_t* src, float* dst, std::size_t n) {
  if (n == 0) return cudaSuccess;
  from_bf16_kernel<<<blocks_for(n, l.max_blocks), cuda_block, 0, l.stream>>>(src, dst, n);
  return cudaGetLastError();
}

cudaError_t launch_bias_add(launch l, float* y, const float* bias, int rows, int cols) {
  const std::size_t total = std::size_t(rows) * std::size_t(cols);
  if (total == 0) return cudaSuccess;
  bias_add_kernel<<<blocks_for(total, l.max_blocks), cuda_block, 0, l.stream>>>(y, bias, rows,
                                                                                cols);
  return cudaGetLastError();
}

cudaError_t launch_column_sum(launch l, const float* x, int rows, int cols, float beta,
                              float* out) {
  if (cols == 0) return cudaSuccess;
  column_sum_kernel<<<blocks_for(std::size_t(cols), l.max_blocks), cuda_block, 0, l.stream>>>(
      x, rows, cols, beta, out);
  return cudaGetLastError();
}

cudaError_t launch_relu(launch l, const float* x, float* y, std::size_t n) {
  if (n == 0) return cudaSuccess;
  relu_kernel<<<blocks_for(n, l.max_blocks), cuda_block, 0, l.stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_relu_grad(launch l, const float* y, const float* dy, float* dx, std::size_t n) {
  if (n == 0) return cudaSuccess;
  relu_grad_kernel<<<blocks_for(n, l.max_blocks), cuda_block, 0, l.stream>>>(y, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t launch_softmax_xent(launch l, const float* logits, const std::int32_t* labels, int rows,
                                int cols, float* dlogits, double* row_loss) {
  if (rows == 0) return cudaSuccess;
  const int blocks = int((std::size_t(rows) + warps_per_block - 1) / warps_per_block);
  softmax_xent_kernel<<<blocks, cuda_block, 0, l.stream>>>(logits, labels, rows, cols, dlogits,
                                                           row_loss);
  return cudaGetLastError();
}

cudaError_t launch_count_correct(launch l, const float* logits, const std::int32_t* labels,
                                 int rows, int cols, unsigned long long* count) {
  cudaError_t e = cudaMemsetAsync(count, 0, sizeof *count, l.stream);
  if (e != cudaSuccess || rows == 0) return e;
  count_correct_kernel<<<blocks_for(std::size_t(rows), l.max_blocks), cuda_block, 0, l.stream>>>(
      logits, labels, rows, cols, count);
  return cudaGetLastError();
}

cudaError_t launch_axpy(launch l, std::size_t n, float alpha, const float* x, float* y) {
  if (n == 0) return cudaSuccess;
  axpy_kernel<<<blocks_for(n, l.max_blocks), cuda_block, 0, l.stream>>>(n, alpha, x, y);
  return cudaGetLastError();
}

cudaError_t launch_scale(launch l, std::size_t n, float alpha, float* x) {
  if (n == 0) return cudaSuccess;
  scale_kernel<<<blocks_for(n, l.max_blocks), cuda_block, 0, l.stream>>>(n, alpha, x);
  return cudaGetLastError();
}

cudaError_t launch_sum(launch l, const float* x, std::size_t n, bool squares, double* partials,
                       double* out) {
  if (n == 0) return cudaMemsetAsync(out, 0, sizeof *out, l.stream);
  const int blocks = blocks_for(n, cuda_max_partials);
  if (squares)
    partial_sum_kernel<true><<<blocks, cuda_block, 0, l.stream>>>(x, n, partials);
  else
    partial_sum_kernel<false><<<blocks, cuda_block, 0, l.stream>>>(x, n, partials);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return launch_sum_doubles(l, partials, std::size_t(blocks), out);
}

cudaError_t launch_sum_doubles(launch l, const double* x, std::size_t n, double* out) {
  sum_doubles_kernel<<<1, cuda_block, 0, l.stream>>>(x, n, out);
  return cudaGetLastError();
}

cudaError_t launch_sgd_update(launch l, float* w, float* v, const float* g, std::size_t n,
                              float grad_scale, float learning_rate, float momentum,
                              float weight_decay) {
  if (n == 0) return cudaSuccess;
  const int blocks = blocks_for(n, l.max_blocks);
  if (momentum == 0.0f)
    sgd_kernel<<<blocks, cuda_block, 0, l.stream>>>(w, g, n, grad_scale, learning_rate,
                                                    weight_decay);
  else
    momentum_kernel<<<blocks, cuda_block, 0, l.stream>>>(w, v, g, n, grad_scale, learning_rate,
                                                         momentum, weight_decay);
  return cudaGetLastError();
}

cudaError_t launch_adam_update(launch l, float* w, float* m, float* v, const float* g,
                               std::size_t n, const adam_constants& c) {
  if (n == 0) return cudaSuccess;
  adam_kernel<<<blocks_for(n, l.max_blocks), cuda_block, 0, l.stream>>>(w, m, v, g, n, c);
  return cudaGetLastError();
}

}  // namespace coach::kernels::detail
