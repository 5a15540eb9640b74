#pragma once
// worker::clip_gradient: gradient-norm clipping, done where the whole gradient exists. A shard
// holds only some slices of the vector, so it cannot know the norm; each worker clips its own
// step's mean gradient before pushing. The shards apply the samples-weighted mean of the
// workers' mean gradients, whose norm is then at most the limit too (the triangle inequality);
// with one worker the result is PyTorch's clip_grad_norm_ of the mean gradient (without its
// 1e-6 added to the norm: the clipped norm is the limit, to float rounding).

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/backend.hpp"
#include "worker/network.hpp"

namespace coach::worker {

/// Clips a gradient by the norm of its mean. `grad` (n floats of `be`'s memory) holds the SUM of
/// the gradients of `samples` samples; the norm considered is the L2 norm of grad / samples
/// over every key outside `skip` (batch norm's statistic ranges, which hold statistics, not
/// gradients), summed in double. If it exceeds `max_norm`, those keys of grad are scaled by the
/// float max_norm / norm (the keys in `skip` are never touched). Returns the norm before
/// clipping; 0 when samples is 0 (nothing is done). max_norm == 0 only measures. A norm that is
/// not finite is returned and nothing is scaled.
/// REQUIRES: max_norm >= 0; `skip` ascending, disjoint, within [0, n).
double clip_gradient(kernels::backend& be, float* grad, std::size_t n, std::uint64_t samples,
                     float max_norm, std::span<const statistic_range> skip);

}  // namespace coach::worker
