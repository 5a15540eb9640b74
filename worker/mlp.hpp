#pragma once
// worker::mlp: a multi-layer perceptron whose parameters live in one flat vector, and
// worker::mlp_runner, which runs forward and backward passes of it on a kernels::backend.
//
// Flat layout (the shard map cuts this vector into slices): for each layer l in order,
// W_l (in_l x out_l, row-major) followed by b_l (out_l).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "worker/dataset.hpp"
#include "worker/model_config.hpp"

namespace coach::worker {

/// One dense layer's shape and where its weights and bias sit in the flat vector.
struct layer_shape {
  int in = 0;
  int out = 0;
  std::size_t w_offset = 0;  ///< first float of W (in x out)
  std::size_t b_offset = 0;  ///< first float of b (out)
};

/// The architecture of an MLP: shapes and the flat parameter layout. Cheap to copy.
class mlp {
 public:
  /// REQUIRES: inputs >= 1, classes >= 2, every hidden width >= 1 (the job spec validates them).
  mlp(const model_config& cfg, int inputs, int classes);

  std::size_t num_params() const noexcept { return num_params_; }
  const std::vector<layer_shape>& layers() const noexcept { return layers_; }
  int inputs() const noexcept { return layers_.front().in; }
  int classes() const noexcept { return layers_.back().out; }
  /// Widest layer output (sizes the activation buffers).
  int widest() const noexcept;

  /// Fills `params` (host memory, num_params() floats) with the initial values for `seed`:
  /// He-uniform weights, zero biases. A pure function of (architecture, seed).
  void init_params(std::span<float> params, std::uint64_t seed) const;

 private:
  std::vector<layer_shape> layers_;
  std::size_t num_params_ = 0;
};

/// Runs an mlp on a backend. Owns the activation buffers for batches of up to max_batch rows.
/// Not thread-safe: one runner per worker thread.
class mlp_runner {
 public:
  mlp_runner(const mlp& model, kernels::backend& be, int max_batch);
  ~mlp_runner();
  mlp_runner(const mlp_runner&) = delete;
  mlp_runner& operator=(const mlp_runner&) = delete;

  /// Gathers rows `indices` of `data` (at most max_batch of them), runs forward and backward with
  /// `params` (backend memory) and writes the gradient of the SUM of the per-sample losses into
  /// `grad` (backend memory, num_params floats). Returns that loss sum.
  double forward_backward(const float* params, const dataset& data,
                          std::span<const std::uint32_t> indices, float* grad);

  /// Evaluation result over a data set.
  struct evaluation {
    std::int64_t correct = 0;
    std::int64_t total = 0;
    double loss_sum = 0;
    double accuracy() const noexcept { return total ? double(correct) / double(total) : 0.0; }
  };

  /// Classifies every row of `data` with `params` (backend memory), in batches of max_batch.
  evaluation evaluate(const float* params, const dataset& data);

 private:
  /// Forward pass of `rows` rows already in input_; leaves logits in acts_.back().
  void forward(const float* params, int rows);
  void gather(const dataset& data, std::span<const std::uint32_t> indices);

  mlp model_;
  kernels::backend& be_;
  int max_batch_;
  std::vector<float> staging_x_;      ///< host rows gathered before upload
  std::vector<std::int32_t> labels_;  ///< host labels of the gathered rows
  float* input_ = nullptr;            ///< backend: max_batch x inputs
  std::vector<float*> acts_;          ///< backend: per layer, max_batch x out (post-activation)
  float* delta_a_ = nullptr;          ///< backend: max_batch x widest
  float* delta_b_ = nullptr;          ///< backend: max_batch x widest
};

}  // namespace coach::worker
