// Layer kernels of the cuda backend (contracts in cuda_layers.hpp). Elementwise and gather
// kernels use grid-stride loops over their outputs; per-channel reductions use one block per
// channel and the fixed-order block_sum, so no result depends on scheduling.

#include <math.h>

#include "kernels/counter_rng.hpp"
#include "kernels/cuda/cuda_device.cuh"
#include "kernels/cuda/cuda_layers.hpp"
#include "kernels/layer_geometry.hpp"

namespace coach::kernels::detail {
namespace {

// --- activations ----------------------------------------------------------------------------

__global__ void tanh_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = tanhf(x[i]);
}

__global__ void tanh_grad_kernel(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = y[i];
    dx[i] = dy[i] * (1.0f - v * v);
  }
}

__global__ void sigmoid_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = 1.0f / (1.0f + expf(-x[i]));
}

__global__ void sigmoid_grad_kernel(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = y[i];
    dx[i] = dy[i] * (v * (1.0f - v));
  }
}

__global__ void gelu_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    y[i] = geometry::gelu_value(v, tanhf(geometry::gelu_inner(v)));
  }
}

__global__ void gelu_grad_kernel(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    dx[i] = dy[i] * geometry::gelu_slope(v, tanhf(geometry::gelu_inner(v)));
  }
}

// --- convolution ----------------------------------------------------------------------------

__global__ void im2col_kernel(conv2d_shape s, const float* x, std::size_t total, float* col) {
  const std::size_t plane = std::size_t(s.out_plane());
  const std::size_t per_image = std::size_t(s.channels) * s.kernel_h * s.kernel_w * plane;
  const std::size_t image = std::size_t(s.channels) * s.height * s.width;
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride()) {
    const std::size_t g = idx / per_image, rem = idx % per_image;
    const int row = int(rem / plane), p = int(rem % plane);
    const int q = row % s.kernel_w, r = (row / s.kernel_w) % s.kernel_h;
    const int c = row / (s.kernel_w * s.kernel_h);
    const int ih = (p / s.out_w()) * s.stride_h - s.pad_h + r;
    const int iw = (p % s.out_w()) * s.stride_w - s.pad_w + q;
    float v = 0.0f;
    if (ih >= 0 && ih < s.height && iw >= 0 && iw < s.width)
      v = x[g * image + (std::size_t(c) * s.height + ih) * s.width + iw];
    col[idx] = v;
  }
}

__global__ void col2im_kernel(conv2d_shape s, const float* col, std::size_t total, float* dx) {
  const std::size_t plane = std::size_t(s.out_plane());
  const std::size_t per_image = std::size_t(s.channels) * s.kernel_h * s.kernel_w * plane;
  const std::size_t image = std::size_t(s.channels) * s.height * s.width;
  const std::size_t in_plane = std::size_t(s.height) * s.width;
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride()) {
    const std::size_t g = idx / image, rem = idx % image;
    const int c = int(rem / in_plane);
    const int pix = int(rem % in_plane);
    dx[idx] = geometry::col2im_sum(s, col + g * per_image, plane, c, pix / s.width, pix % s.width);
  }
}

__global__ void channel_bias_kernel(float* y, const float* bias, std::size_t total, int channels,
                                    std::size_t plane) {
  for (std::size_t i = first_index(); i < total; i += grid_stride())
    y[i] = y[i] + bias[(i / plane) % std::size_t(channels)];
}

/// Element j (in (n, position) order) of channel c of a batch x channels x spatial tensor.
__device__ std::size_t channel_element(std::size_t j, int c, int channels, std::size_t spatial) {
  return ((j / spatial) * std::size_t(channels) + std::size_t(c)) * spatial + j % spatial;
}

/// One block per channel: thread t adds elements t, t + cuda_block, ... in order, then the tree.
__global__ void channel_sum_kernel(const float* x, int batch, int channels, std::size_t spatial,
                                   float* out) {
  __shared__ double scratch[cuda_block];
  const int c = int(blockIdx.x);
  const std::size_t m = std::size_t(batch) * spatial;
  double acc = 0.0;
  for (std::size_t j = threadIdx.x; j < m; j += cuda_block)
    acc += double(x[channel_element(j, c, channels, spatial)]);
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) out[c] = float(total);
}

__global__ void sum_parts_kernel(const float* parts, int count, std::size_t n, bool accumulate,
                                 float* out) {
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    float acc = accumulate ? out[e] + parts[e] : parts[e];
    for (int p = 1; p < count; ++p) acc += parts[std::size_t(p) * n + e];
    out[e] = acc;
  }
}

// --- pooling --------------------------------------------------------------------------------

__global__ void max_pool_forward_kernel(pool2d_shape s, const float* x, std::size_t total, float* y,
                                        std::int32_t* argmax) {
  const std::size_t out_plane = std::size_t(s.out_plane());
  const std::size_t in_plane = std::size_t(s.in_plane());
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride()) {
    const std::size_t nc = idx / out_plane;
    const geometry::window_max best =
        geometry::max_window(s, x + nc * in_plane, int(idx % out_plane));
    y[idx] = best.value;
    argmax[idx] = best.index;
  }
}

__global__ void max_pool_backward_kernel(pool2d_shape s, const float* dy,
                                         const std::int32_t* argmax, std::size_t total, float* dx) {
  const std::size_t out_plane = std::size_t(s.out_plane());
  const std::size_t in_plane = std::size_t(s.in_plane());
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride()) {
    const std::size_t nc = idx / in_plane;
    dx[idx] = geometry::max_pool_gather(s, dy + nc * out_plane, argmax + nc * out_plane,
                                        int(idx % in_plane));
  }
}

__global__ void avg_pool_forward_kernel(pool2d_shape s, const float* x, std::size_t total,
                                        float* y) {
  const std::size_t out_plane = std::size_t(s.out_plane());
  const std::size_t in_plane = std::size_t(s.in_plane());
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride())
    y[idx] = geometry::avg_window(s, x + (idx / out_plane) * in_plane, int(idx % out_plane));
}

__global__ void avg_pool_backward_kernel(pool2d_shape s, const float* dy, std::size_t total,
                                         float* dx) {
  const std::size_t out_plane = std::size_t(s.out_plane());
  const std::size_t in_plane = std::size_t(s.in_plane());
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride())
    dx[idx] = geometry::avg_pool_gather(s, dy + (idx / in_plane) * out_plane, int(idx % in_plane));
}

// --- dropout --------------------------------------------------------------------------------

__global__ void dropout_kernel(const float* x, float* y, std::size_t n, std::uint64_t key,
                               std::uint32_t threshold, float scale) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    y[i] = counter_rng::uniform24(key, i) >= threshold ? x[i] * scale : 0.0f;
}

// --- batch norm -----------------------------------------------------------------------------

__global__ void batch_norm_stats_kernel(batch_norm_shape s, const float* x, float eps,
                                        float momentum, float* running_mean, float* running_var,
                                        float* saved_mean, float* saved_inv_std) {
  __shared__ double scratch[cuda_block];
  const int c = int(blockIdx.x);
  const std::size_t spatial = std::size_t(s.spatial);
  const std::size_t m = s.per_channel();
  double acc = 0.0;
  for (std::size_t j = threadIdx.x; j < m; j += cuda_block)
    acc += double(x[channel_element(j, c, s.channels, spatial)]);
  const double mean = block_sum(acc, scratch) / double(m);
  double sq = 0.0;
  for (std::size_t j = threadIdx.x; j < m; j += cuda_block) {
    const double d = double(x[channel_element(j, c, s.channels, spatial)]) - mean;
    sq += d * d;
  }
  const double total_sq = block_sum(sq, scratch);
  if (threadIdx.x == 0) {
    const geometry::batch_stats stats = geometry::channel_stats(mean, total_sq, m, eps);
    saved_mean[c] = stats.mean;
    saved_inv_std[c] = stats.inv_std;
    running_mean[c] = geometry::blend(running_mean[c], stats.mean, momentum);
    running_var[c] = geometry::blend(running_var[c], stats.unbiased_var, momentum);
  }
}

__global__ void batch_norm_apply_kernel(batch_norm_shape s, const float* x, const float* mean,
                                        const float* inv_std, const float* gamma, const float* beta,
                                        std::size_t total, float* y) {
  const std::size_t spatial = std::size_t(s.spatial);
  for (std::size_t i = first_index(); i < total; i += grid_stride()) {
    const std::size_t c = (i / spatial) % std::size_t(s.channels);
    y[i] = geometry::normalize(x[i], mean[c], inv_std[c], gamma[c], beta[c]);
  }
}

__global__ void batch_norm_inference_kernel(batch_norm_shape s, const float* x, const float* gamma,
                                            const float* beta, const float* running_mean,
                                            const float* running_var, float eps, std::size_t total,
                                            float* y) {
  const std::size_t spatial = std::size_t(s.spatial);
  for (std::size_t i = first_index(); i < total; i += grid_stride()) {
    const std::size_t c = (i / spatial) % std::size_t(s.channels);
    const float inv = geometry::inference_inv_std(running_var[c], eps);
    y[i] = geometry::normalize(x[i], running_mean[c], inv, gamma[c], beta[c]);
  }
}

__global__ void batch_norm_grad_sums_kernel(batch_norm_shape s, const float* x, const float* dy,
                                            const float* mean, const float* inv_std, float* dgamma,
                                            float* dbeta) {
  __shared__ double scratch[cuda_block];
  const int c = int(blockIdx.x);
  const std::size_t spatial = std::size_t(s.spatial);
  const std::size_t m = s.per_channel();
  const float mu = mean[c], inv = inv_std[c];
  double sum_dy = 0.0, sum_dyx = 0.0;
  for (std::size_t j = threadIdx.x; j < m; j += cuda_block) {
    const std::size_t i = channel_element(j, c, s.channels, spatial);
    const double d = double(dy[i]);
    sum_dy += d;
    sum_dyx += d * double(geometry::xhat(x[i], mu, inv));
  }
  const double total_dy = block_sum(sum_dy, scratch);
  const double total_dyx = block_sum(sum_dyx, scratch);
  if (threadIdx.x == 0) {
    dbeta[c] = float(total_dy);
    dgamma[c] = float(total_dyx);
  }
}

__global__ void batch_norm_dx_kernel(batch_norm_shape s, const float* x, const float* dy,
                                     const float* gamma, const float* mean, const float* inv_std,
                                     const float* dgamma, const float* dbeta, std::size_t total,
                                     float* dx) {
  const std::size_t spatial = std::size_t(s.spatial);
  const std::size_t m = s.per_channel();
  for (std::size_t i = first_index(); i < total; i += grid_stride()) {
    const std::size_t c = (i / spatial) % std::size_t(s.channels);
    const geometry::bn_grad_constants k =
        geometry::bn_backward_constants(gamma[c], mean[c], inv_std[c], dbeta[c], dgamma[c], m);
    dx[i] = geometry::bn_backward_dx(x[i], dy[i], k);
  }
}

/// Grid of a grid-stride kernel over n elements.
int grid(launch l, std::size_t n) {
  return blocks_for(n, l.max_blocks);
}

}  // namespace

// --- activations ----------------------------------------------------------------------------

cudaError_t launch_tanh(launch l, const float* x, float* y, std::size_t n) {
  if (n == 0) return cudaSuccess;
  tanh_kernel<<<grid(l, n), cuda_block, 0, l.stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_tanh_grad(launch l, const float* y, const float* dy, float* dx, std::size_t n) {
  if (n == 0) return cudaSuccess;
  tanh_grad_kernel<<<grid(l, n), cuda_block, 0, l.stream>>>(y, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t launch_sigmoid(launch l, const float* x, float* y, std::size_t n) {
  if (n == 0) return cudaSuccess;
  sigmoid_kernel<<<grid(l, n), cuda_block, 0, l.stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_sigmoid_grad(launch l, const float* y, const float* dy, float* dx,
                                std::size_t n) {
  if (n == 0) return cudaSuccess;
  sigmoid_grad_kernel<<<grid(l, n), cuda_block, 0, l.stream>>>(y, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t launch_gelu(launch l, const float* x, float* y, std::size_t n) {
  if (n == 0) return cudaSuccess;
  gelu_kernel<<<grid(l, n), cuda_block, 0, l.stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_gelu_grad(launch l, const float* x, const float* dy, float* dx, std::size_t n) {
  if (n == 0) return cudaSuccess;
  gelu_grad_kernel<<<grid(l, n), cuda_block, 0, l.stream>>>(x, dy, dx, n);
  return cudaGetLastError();
}

// --- convolution ----------------------------------------------------------------------------

cudaError_t launch_im2col(launch l, const conv2d_shape& s, const float* x, int images, float* col) {
  const std::size_t total = std::size_t(images) * s.column_size();
  if (total == 0) return cudaSuccess;
  im2col_kernel<<<grid(l, total), cuda_block, 0, l.stream>>>(s, x, total, col);
  return cudaGetLastError();
}

cudaError_t launch_col2im(launch l, const conv2d_shape& s, const float* col, int images,
                          float* dx) {
  const std::size_t total = std::size_t(images) * s.image_size();
  if (total == 0) return cudaSuccess;
  col2im_kernel<<<grid(l, total), cuda_block, 0, l.stream>>>(s, col, total, dx);
  return cudaGetLastError();
}

cudaError_t launch_channel_bias(launch l, float* y, const float* bias, int batch, int channels,
                                std::size_t plane) {
  const std::size_t total = std::size_t(batch) * std::size_t(channels) * plane;
  if (total == 0) return cudaSuccess;
  channel_bias_kernel<<<grid(l, total), cuda_block, 0, l.stream>>>(y, bias, total, channels, plane);
  return cudaGetLastError();
}

cudaError_t launch_channel_sum(launch l, const float* x, int batch, int channels,
                               std::size_t spatial, float* out) {
  if (channels == 0) return cudaSuccess;
  channel_sum_kernel<<<channels, cuda_block, 0, l.stream>>>(x, batch, channels, spatial, out);
  return cudaGetLastError();
}

cudaError_t launch_sum_parts(launch l, const float* parts, int count, std::size_t n,
                             bool accumulate, float* out) {
  if (n == 0 || count == 0) return cudaSuccess;
  sum_parts_kernel<<<grid(l, n), cuda_block, 0, l.stream>>>(parts, count, n, accumulate, out);
  return cudaGetLastError();
}

// --- pooling --------------------------------------------------------------------------------

cudaError_t launch_max_pool_forward(launch l, const pool2d_shape& s, const float* x, float* y,
                                    std::int32_t* argmax) {
  const std::size_t total = s.output_size();
  max_pool_forward_kernel<<<grid(l, total), cuda_block, 0, l.stream>>>(s, x, total, y, argmax);
  return cudaGetLastError();
}

cudaError_t launch_max_pool_backward(launch l, const pool2d_shape& s, const float* dy,
                                     const std::int32_t* argmax, float* dx) {
  const std::size_t total = s.input_size();
  max_pool_backward_kernel<<<grid(l, total), cuda_block, 0, l.stream>>>(s, dy, argmax, total, dx);
  return cudaGetLastError();
}

cudaError_t launch_avg_pool_forward(launch l, const pool2d_shape& s, const float* x, float* y) {
  const std::size_t total = s.output_size();
  avg_pool_forward_kernel<<<grid(l, total), cuda_block, 0, l.stream>>>(s, x, total, y);
  return cudaGetLastError();
}

cudaError_t launch_avg_pool_backward(launch l, const pool2d_shape& s, const float* dy, float* dx) {
  const std::size_t total = s.input_size();
  avg_pool_backward_kernel<<<grid(l, total), cuda_block, 0, l.stream>>>(s, dy, total, dx);
  return cudaGetLastError();
}

// --- dropout --------------------------------------------------------------------------------

cudaError_t launch_dropout(launch l, const float* x, float* y, std::size_t n, std::uint64_t key,
                           std::uint32_t threshold, float scale) {
  if (n == 0) return cudaSuccess;
  dropout_kernel<<<grid(l, n), cuda_block, 0, l.stream>>>(x, y, n, key, threshold, scale);
  return cudaGetLastError();
}

// --- batch norm -----------------------------------------------------------------------------

cudaError_t launch_batch_norm_stats(launch l, const batch_norm_shape& s, const float* x, float eps,
                                    float momentum, float* running_mean, float* running_var,
                                    float* saved_mean, float* saved_inv_std) {
  batch_norm_stats_kernel<<<s.channels, cuda_block, 0, l.stream>>>(
      s, x, eps, momentum, running_mean, running_var, saved_mean, saved_inv_std);
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_apply(launch l, const batch_norm_shape& s, const float* x,
                                    const float* mean, const float* inv_std, const float* gamma,
                                    const float* beta, float* y) {
  const std::size_t total = s.size();
  batch_norm_apply_kernel<<<grid(l, total), cuda_block, 0, l.stream>>>(s, x, mean, inv_std, gamma,
                                                                       beta, total, y);
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_inference(launch l, const batch_norm_shape& s, const float* x,
                                        const float* gamma, const float* beta,
                                        const float* running_mean, const float* running_var,
                                        float eps, float* y) {
  const std::size_t total = s.size();
  batch_norm_inference_kernel<<<grid(l, total), cuda_block, 0, l.stream>>>(
      s, x, gamma, beta, running_mean, running_var, eps, total, y);
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_grad_sums(launch l, const batch_norm_shape& s, const float* x,
                                        const float* dy, const float* mean, const float* inv_std,
                                        float* dgamma, float* dbeta) {
  batch_norm_grad_sums_kernel<<<s.channels, cuda_block, 0, l.stream>>>(s, x, dy, mean, inv_std,
                                                                       dgamma, dbeta);
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_dx(launch l, const batch_norm_shape& s, const float* x,
                                 const float* dy, const float* gamma, const float* mean,
                                 const float* inv_std, const float* dgamma, const float* dbeta,
                                 float* dx) {
  const std::size_t total = s.size();
  batch_norm_dx_kernel<<<grid(l, total), cuda_block, 0, l.stream>>>(s, x, dy, gamma, mean, inv_std,
                                                                    dgamma, dbeta, total, dx);
  return cudaGetLastError();
}

}  // namespace coach::kernels::detail
