#pragma once
// ps::shard: the state and logic of one parameter-server shard, without actors or sockets.
//
// A shard owns some key ranges of the flat parameter vector (from the shard map), their optimizer
// state, and aggregates the gradients workers push. In BSP a step completes when every member of
// the step has pushed; the shard then sums the contributions in rank order (so the result does
// not depend on arrival order), scales by 1 / total samples and applies the optimizer in place.
// Because the update is elementwise, the parameters after any step are bitwise the same however
// the vector is cut into shards.
//
// Not thread-safe: its actor calls it from one message handler at a time.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "common/buffer_pool.hpp"
#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "ps/optimizer.hpp"
#include "ps/shard_map.hpp"

namespace coach::ps {

/// One worker's gradient for one step, restricted to a shard's ranges.
struct contribution {
  std::uint32_t rank = 0;
  std::uint64_t samples = 0;  ///< samples behind the gradient; 0 = no data this step (parts empty)
  double loss_sum = 0;        ///< sum of the per-sample losses (reporting only)
  /// Gradient of the SUM of per-sample losses, one span per range of the shard, in the shard's
  /// range order, each of that range's size. Empty when samples == 0.
  std::vector<std::span<const float>> parts;
  std::shared_ptr<const void> keep_alive;  ///< owns the memory behind parts
};

class shard {
 public:
  /// A shard owning `ranges` with initial values `initial` (the ranges' values concatenated).
  /// `be` runs the optimizer; REQUIRES: a backend whose memory is host memory (cpu).
  shard(std::uint32_t id, const optimizer_config& opt, kernels::backend& be,
        std::vector<key_range> ranges, std::span<const float> initial);

  std::uint32_t id() const noexcept { return id_; }
  const std::vector<key_range>& ranges() const noexcept { return ranges_; }
  /// Floats owned (sum of range sizes).
  std::size_t size() const noexcept { return values_->size(); }
  /// Current values of the ranges, concatenated.
  std::span<const float> values() const noexcept { return values_->span(); }
  /// The current values as a shared, immutable buffer (no copy): valid for as long as the
  /// caller holds it. The shard never writes a buffer it has shared: the next update copies the
  /// values to a fresh buffer first if anyone still holds this one (copy on write). In BSP the
  /// holders (workers) let go before the next step completes, so no copy is made.
  std::shared_ptr<const float_buffer> share_values() const noexcept { return values_; }
  /// Steps applied so far: the version of values(). Step s's gradients are computed on version s.
  std::int64_t applied_steps() const noexcept { return applied_; }

  /// Sets the ranks expected to contribute to each step from now on.
  /// REQUIRES: no step is partially pushed.
  void set_members(std::vector<std::uint32_t> ranks);
  const std::vector<std::uint32_t>& members() const noexcept { return members_; }

  /// Adds a worker's contribution to step `step`. Returns true when it completed the step (the
  /// update is applied and applied_steps() advanced). Errors (protocol_error, naming the rank and
  /// step): a step other than the open one, a rank not in the membership, a second push from one
  /// rank, parts that do not match the ranges.
  result<bool> push(std::int64_t step, contribution c);

  /// Totals of the last applied step.
  std::uint64_t last_step_samples() const noexcept { return last_samples_; }
  double last_step_loss() const noexcept { return last_loss_; }

 private:
  void apply();

  std::uint32_t id_;
  optimizer_config opt_;
  kernels::backend& be_;
  std::vector<key_range> ranges_;
  std::vector<std::size_t> offsets_;   ///< offset of each range within values_
  std::unique_ptr<buffer_pool> pool_;  ///< buffers for values_ (copy on write)
  std::shared_ptr<float_buffer> values_;
  std::vector<float> state_a_;  ///< momentum velocity or Adam m
  std::vector<float> state_b_;  ///< Adam v
  std::vector<float> acc_;      ///< aggregation buffer
  std::vector<std::uint32_t> members_;
  std::map<std::uint32_t, contribution> pending_;  ///< by rank: summed in rank order
  std::int64_t applied_ = 0;
  std::int64_t updates_ = 0;  ///< applied steps with samples (Adam's t)
  std::uint64_t last_samples_ = 0;
  double last_loss_ = 0;
};

}  // namespace coach::ps
