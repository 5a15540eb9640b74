#pragma once
// worker::local_averaging: one worker's part of a model-averaging step (`consistency:
// averaging:K`). From the parameters w0 it pulled, the worker trains one local step per chunk
// of its grant (up to K) with the job's SGD (plain or momentum; the velocity starts at zero
// each round), then pushes d = n * (w0 - w), n the samples it trained on. The shard sums the
// members' d in rank order, scales by 1 / (their total samples) and subtracts the result (an SGD
// update with learning rate 1: ps::shard_optimizer), so the new parameters are the members'
// models averaged with weights n_i / sum(n): w0 - sum(n_i (w0 - w_i)) / sum(n_i).
//
// Deterministic like BSP: every member starts from the same version and the shard's sum runs in
// rank order, so a run repeats bit for bit and does not depend on how the vector is sharded.
//
// Not thread-safe: one per worker.

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "worker/dataset.hpp"
#include "worker/network.hpp"

namespace coach::worker {

class local_averaging {
 public:
  /// A trainer of `num_params` parameters on `be` (backend memory throughout), whose local steps
  /// use `opt` (momentum 0: plain SGD).
  local_averaging(kernels::backend& be, std::size_t num_params, const kernels::sgd_options& opt);
  ~local_averaging();
  local_averaging(const local_averaging&) = delete;
  local_averaging& operator=(const local_averaging&) = delete;

  /// What a round did.
  struct outcome {
    std::uint64_t samples = 0;  ///< n
    double loss_sum = 0;        ///< summed over the local steps (each at its own parameters)
  };
  /// Trains on `data`'s rows `indices`, cut into local steps of `sizes` (their sum is
  /// indices.size(); each at most the runner's max batch), `passes` times over them, starting
  /// from `w0` (backend memory, only read). Writes d = n * (w0 - w) to `delta` (backend memory,
  /// num_params floats), n the samples trained on (indices.size() * passes). Batch norm's
  /// running statistics are not trained: each local step folds its batch's statistics into
  /// them with the layer's momentum, so the shards average them like any key. `noise` seeds
  /// dropout (noise_key of the worker and step; each local step derives its own).
  outcome run(network_runner& runner, const float* w0, const dataset& data,
              std::span<const std::uint32_t> indices, std::span<const std::uint32_t> sizes,
              float* delta, std::uint32_t passes = 1, std::uint64_t noise = 0);

 private:
  kernels::backend& be_;
  std::size_t n_;
  kernels::sgd_options opt_;
  float* w_ = nullptr;        ///< the local model
  float* g_ = nullptr;        ///< one local step's gradient
  float* v_ = nullptr;        ///< momentum velocity (momentum > 0 only)
  float* stats_ = nullptr;    ///< blended statistics of one local step (every range, in order)
  std::vector<float> zeros_;  ///< host zeros that reset v_ each round (momentum > 0 only)
};

}  // namespace coach::worker
