#pragma once
// worker::detail: a layer's kernel geometry for a batch, shared by the network's checks
// (network.cpp) and its runner (network_runner.cpp). Private to those two.

#include "kernels/backend.hpp"
#include "worker/network.hpp"

namespace coach::worker::detail {

/// The pooling or convolution geometry of a layer for one sample.
inline kernels::conv2d_shape conv_of(const layer& l, int batch) {
  kernels::conv2d_shape s;
  s.batch = batch;
  s.channels = l.in[0];
  s.height = l.in[1];
  s.width = l.in[2];
  s.filters = l.cfg.channels;
  s.kernel_h = s.kernel_w = l.cfg.kernel;
  s.stride_h = s.stride_w = l.cfg.stride;
  s.pad_h = s.pad_w = l.cfg.padding;
  return s;
}

inline kernels::pool2d_shape pool_of(const layer& l, int batch) {
  kernels::pool2d_shape s;
  s.batch = batch;
  s.channels = l.in[0];
  s.height = l.in[1];
  s.width = l.in[2];
  s.window_h = s.window_w = l.cfg.kernel;
  s.stride_h = s.stride_w = l.cfg.stride;
  s.pad_h = s.pad_w = l.cfg.padding;
  return s;
}

inline kernels::batch_norm_shape norm_of(const layer& l, int batch) {
  return kernels::batch_norm_shape{batch, l.in[0], l.in[1] * l.in[2]};
}

}  // namespace coach::worker::detail
