#pragma once
// The layer kernels of kernels::cuda_backend (cuda_layers.cu), behind host functions that enqueue
// them, as cuda_kernels.hpp does for the dense ops (same launch struct, same status rules, C++17
// only). The per-element arithmetic comes from kernels/layer_geometry.hpp, which the cpu backend
// calls too: pooling, col2im, dropout and batch norm's elementwise steps equal the cpu's bit for
// bit on equal inputs. Per-channel sums run one block per channel, accumulating in double in a
// fixed order (deterministic; equal to the cpu's sums up to double rounding).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.hpp"
#include "kernels/layer_shapes.hpp"

namespace coach::kernels::detail {

/// y = tanhf(x).
cudaError_t launch_tanh(launch l, const float* x, float* y, std::size_t n);
/// dx = dy (1 - y y).
cudaError_t launch_tanh_grad(launch l, const float* y, const float* dy, float* dx, std::size_t n);
/// y = 1 / (1 + expf(-x)).
cudaError_t launch_sigmoid(launch l, const float* x, float* y, std::size_t n);
/// dx = dy (y (1 - y)).
cudaError_t launch_sigmoid_grad(launch l, const float* y, const float* dy, float* dx,
                                std::size_t n);
/// gelu, tanh approximation (geometry::gelu_value).
cudaError_t launch_gelu(launch l, const float* x, float* y, std::size_t n);
/// dx = dy geometry::gelu_slope(x).
cudaError_t launch_gelu_grad(launch l, const float* x, const float* dy, float* dx, std::size_t n);

/// The column matrices of `images` consecutive images of x, one after the other (each
/// s.column_size() floats), as the cpu's im2col lays one out.
cudaError_t launch_im2col(launch l, const conv2d_shape& s, const float* x, int images, float* col);
/// dx of `images` consecutive images from their column matrices (geometry::col2im_sum).
cudaError_t launch_col2im(launch l, const conv2d_shape& s, const float* col, int images, float* dx);
/// y[n, c, p] += bias[c] for a batch x channels x plane tensor.
cudaError_t launch_channel_bias(launch l, float* y, const float* bias, int batch, int channels,
                                std::size_t plane);
/// out[c] = the sum over n and p of x[n, c, p] (batch x channels x spatial), in double, rounded
/// to float once.
cudaError_t launch_channel_sum(launch l, const float* x, int batch, int channels,
                               std::size_t spatial, float* out);

/// out[e] = (accumulate ? out[e] + parts[0][e] : parts[0][e]) + parts[1][e] + ... in part
/// order, for e < n, parts `count` arrays of n floats one after another (count >= 1): the
/// per-image filter gradients of a chunk added in image order.
cudaError_t launch_sum_parts(launch l, const float* parts, int count, std::size_t n,
                             bool accumulate, float* out);

/// See backend::max_pool2d_forward.
cudaError_t launch_max_pool_forward(launch l, const pool2d_shape& s, const float* x, float* y,
                                    std::int32_t* argmax);
/// See backend::max_pool2d_backward (one thread per input, gathering).
cudaError_t launch_max_pool_backward(launch l, const pool2d_shape& s, const float* dy,
                                     const std::int32_t* argmax, float* dx);
/// See backend::avg_pool2d_forward.
cudaError_t launch_avg_pool_forward(launch l, const pool2d_shape& s, const float* x, float* y);
/// See backend::avg_pool2d_backward (one thread per input, gathering).
cudaError_t launch_avg_pool_backward(launch l, const pool2d_shape& s, const float* dy, float* dx);

/// y[i] = x[i] * scale where counter_rng::uniform24(key, i) >= threshold, else 0.
cudaError_t launch_dropout(launch l, const float* x, float* y, std::size_t n, std::uint64_t key,
                           std::uint32_t threshold, float scale);

/// Per channel (one block each): mean and inverse std into saved_mean / saved_inv_std, running
/// statistics blended with momentum (geometry::channel_stats, geometry::blend).
cudaError_t launch_batch_norm_stats(launch l, const batch_norm_shape& s, const float* x, float eps,
                                    float momentum, float* running_mean, float* running_var,
                                    float* saved_mean, float* saved_inv_std);
/// y = geometry::normalize(x, mean[c], inv_std[c], gamma[c], beta[c]).
cudaError_t launch_batch_norm_apply(launch l, const batch_norm_shape& s, const float* x,
                                    const float* mean, const float* inv_std, const float* gamma,
                                    const float* beta, float* y);
/// y = normalize with geometry::inference_inv_std(running_var[c], eps).
cudaError_t launch_batch_norm_inference(launch l, const batch_norm_shape& s, const float* x,
                                        const float* gamma, const float* beta,
                                        const float* running_mean, const float* running_var,
                                        float eps, float* y);
/// Per channel (one block each): dbeta = sum dy, dgamma = sum dy xhat, in double.
cudaError_t launch_batch_norm_grad_sums(launch l, const batch_norm_shape& s, const float* x,
                                        const float* dy, const float* mean, const float* inv_std,
                                        float* dgamma, float* dbeta);
/// dx = geometry::bn_backward_dx with each channel's constants.
cudaError_t launch_batch_norm_dx(launch l, const batch_norm_shape& s, const float* x,
                                 const float* dy, const float* gamma, const float* mean,
                                 const float* inv_std, const float* dgamma, const float* dbeta,
                                 float* dx);

}  // namespace coach::kernels::detail
