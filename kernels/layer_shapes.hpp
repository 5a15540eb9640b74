#pragma once
// The shapes of the layer ops of kernels::backend (convolution, pooling, batch norm).
//
// Tensors are batch-major NCHW and dense: element (n, c, h, w) of an N x C x H x W tensor sits at
// ((n * C + c) * H + h) * W + w. A dense layer's output (N x F, row-major) is the same tensor with
// C = F and H = W = 1.
//
// Output sizes follow the usual floor rule: out = (in + 2 * pad - window) / stride + 1. Sizes are
// int (as gemm's), element counts std::size_t. validate() (layer_shapes_check.hpp) rejects a shape
// whose counts do not fit an int (the kernels index planes and columns with int).
//
// This header is included by nvcc (kernels/cuda/cuda_layers.cu, at most C++20): C++17 only.

#include <cstddef>

#include "kernels/host_device.hpp"

namespace coach::kernels {

/// A 2-D convolution (cross-correlation, as every framework computes it): input N x C x H x W,
/// weights K x C x R x S, bias K, output N x K x out_h() x out_w().
struct conv2d_shape {
  int batch = 1;     ///< N
  int channels = 1;  ///< C, input channels
  int height = 1;    ///< H
  int width = 1;     ///< W
  int filters = 1;   ///< K, output channels
  int kernel_h = 1;  ///< R
  int kernel_w = 1;  ///< S
  int stride_h = 1;
  int stride_w = 1;
  int pad_h = 0;  ///< zeros added above and below
  int pad_w = 0;  ///< zeros added left and right

  /// (H + 2 pad_h - R) / stride_h + 1.
  COACH_HOST_DEVICE int out_h() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  /// (W + 2 pad_w - S) / stride_w + 1.
  COACH_HOST_DEVICE int out_w() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
  /// Output positions per image and filter: out_h out_w.
  COACH_HOST_DEVICE int out_plane() const { return out_h() * out_w(); }
  /// C H W.
  COACH_HOST_DEVICE std::size_t image_size() const {
    return std::size_t(channels) * height * width;
  }
  /// N C H W.
  COACH_HOST_DEVICE std::size_t input_size() const { return std::size_t(batch) * image_size(); }
  /// K out_h out_w.
  COACH_HOST_DEVICE std::size_t output_image_size() const {
    return std::size_t(filters) * out_plane();
  }
  /// N K out_h out_w.
  COACH_HOST_DEVICE std::size_t output_size() const {
    return std::size_t(batch) * output_image_size();
  }
  /// K C R S.
  COACH_HOST_DEVICE std::size_t weight_size() const { return std::size_t(filters) * column_rows(); }
  /// Rows of the column matrix of one image: C R S.
  COACH_HOST_DEVICE std::size_t column_rows() const {
    return std::size_t(channels) * kernel_h * kernel_w;
  }
  /// Floats of the column matrix of one image: C R S out_h out_w.
  COACH_HOST_DEVICE std::size_t column_size() const {
    return column_rows() * std::size_t(out_plane());
  }
  /// True when the column matrix of an image is the image itself (1 x 1 kernel, stride 1, no
  /// padding): the backends then skip im2col.
  COACH_HOST_DEVICE bool is_pointwise() const {
    return kernel_h == 1 && kernel_w == 1 && stride_h == 1 && stride_w == 1 && pad_h == 0 &&
           pad_w == 0;
  }
};

/// A 2-D pooling window over an N x C x H x W input; output N x C x out_h() x out_w().
struct pool2d_shape {
  int batch = 1;
  int channels = 1;
  int height = 1;
  int width = 1;
  int window_h = 2;
  int window_w = 2;
  int stride_h = 2;
  int stride_w = 2;
  int pad_h = 0;  ///< max pooling never picks a pad; average pooling counts pads as zeros
  int pad_w = 0;

  COACH_HOST_DEVICE int out_h() const { return (height + 2 * pad_h - window_h) / stride_h + 1; }
  COACH_HOST_DEVICE int out_w() const { return (width + 2 * pad_w - window_w) / stride_w + 1; }
  /// H W.
  COACH_HOST_DEVICE int in_plane() const { return height * width; }
  /// out_h out_w.
  COACH_HOST_DEVICE int out_plane() const { return out_h() * out_w(); }
  /// Planes: N C.
  COACH_HOST_DEVICE std::size_t planes() const { return std::size_t(batch) * channels; }
  /// N C H W.
  COACH_HOST_DEVICE std::size_t input_size() const { return planes() * std::size_t(in_plane()); }
  /// N C out_h out_w.
  COACH_HOST_DEVICE std::size_t output_size() const { return planes() * std::size_t(out_plane()); }
};

/// Batch normalization over an N x C x S tensor (S = H W; S = 1 after a dense layer): statistics
/// per channel c over the N S elements (n, c, *).
struct batch_norm_shape {
  int batch = 1;     ///< N
  int channels = 1;  ///< C
  int spatial = 1;   ///< S = H W

  /// N C S.
  COACH_HOST_DEVICE std::size_t size() const { return std::size_t(batch) * channels * spatial; }
  /// Elements per channel: N S.
  COACH_HOST_DEVICE std::size_t per_channel() const { return std::size_t(batch) * spatial; }
};

/// Hyper-parameters of batch normalization (PyTorch's defaults and meaning).
struct batch_norm_options {
  /// running = (1 - momentum) * running + momentum * batch statistic.
  float momentum = 0.1f;
  /// Added to the variance before the square root.
  float epsilon = 1e-5f;
};

}  // namespace coach::kernels
