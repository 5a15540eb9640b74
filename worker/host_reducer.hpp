#pragma once
// worker::host_reducer: sums the gradients of a job's workers that run in one process (one host)
// so that the host pushes one gradient per shard instead of one per worker (DESIGN.md
// "Kernels": local reduction before one push per host; the job spec's `host_reduce: true`).
//
// Each step, every local member deposits its gradient (the sum over its batch, host memory) with
// the step's members from its job configuration. The deposit that completes the step's local
// members gets the sum: it pushes it on behalf of the leader, the lowest local member, with the
// samples of all; every other local member pushes an empty contribution (0 samples) under its
// own rank, so each shard still hears from every member, as BSP requires. The sum is taken in
// rank order whoever arrives last, and the leader's place in the shards' rank-order sum is
// fixed, so a run stays a pure function of its seed and membership; its last bits differ from
// a run without host reduction ((a + b) + (c + d) is not a + b + c + d in floats).
//
// Membership: the caller names a step's local members: the step's members (from its job
// configuration) that run in this process, known from where the job placed each rank, not from
// which workers happen to have started yet (a worker may compute step 0 before another local
// worker's thread has begun). Local workers agree on a step's members, since a step's
// configuration reaches every worker before its grant. A local worker that dies without its
// process leaves its step incomplete (the others wait); coach-node runs workers in its own
// process, so they die together, and the embedded cluster refuses host reduction with fault
// injection.
//
// Threads: deposit may be called concurrently (workers are detached actors).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>

#include "common/buffer_pool.hpp"
#include "common/error.hpp"

namespace coach::worker {

class host_reducer {
 public:
  explicit host_reducer(std::size_t num_params);

  /// What a deposit tells its worker to push.
  struct outcome {
    /// This deposit completed the step: push `sum` (null when no local member had samples)
    /// with `samples` on behalf of `leader`.
    bool complete = false;
    /// The step's lowest local member (always set): a worker that is not the leader pushes an
    /// empty contribution of its own; the leader's push is the sum.
    std::uint32_t leader = 0;
    std::uint64_t samples = 0;
    std::shared_ptr<const float_buffer> sum;
  };

  /// Deposits `rank`'s gradient for `step` (`grad` null or ignored when samples == 0).
  /// `local_members`: the step's members that run in this process, ascending, the same in every
  /// deposit of the step. Errors (protocol_error): a rank not among them, a second deposit for a
  /// step, a gradient of the wrong size.
  result<outcome> deposit(std::int64_t step, std::span<const std::uint32_t> local_members,
                          std::uint32_t rank, std::uint64_t samples,
                          std::shared_ptr<const float_buffer> grad);

  /// Steps with deposits still waiting for local members (for tests and diagnostics).
  std::size_t open_steps() const;

 private:
  struct entry {
    std::uint64_t samples = 0;
    std::shared_ptr<const float_buffer> grad;
  };

  std::size_t n_;
  mutable std::mutex mu_;
  std::map<std::int64_t, std::map<std::uint32_t, entry>> open_;  ///< step -> rank -> deposit
  std::unique_ptr<buffer_pool> sums_;
};

}  // namespace coach::worker
