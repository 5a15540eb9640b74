#pragma once
// worker::device_reducer: host reduction (`host_reduce: true`) for workers whose gradients live in
// device memory. The same contract as worker::host_reducer (one push per shard for the host, on
// behalf of the lowest local member; the others push empty contributions), but the gradients never
// leave the devices until the sum is taken: each local worker's gradient is summed on its device,
// the devices' sums are all-reduced across the devices (NCCL), and only the result is downloaded,
// once, instead of one download per worker.
//
// The sum, per step, whoever deposits last:
//   1. On each device, the gradients of the local members on it in rank order: the first copied,
//      the others added one by one (backend::axpy with alpha 1, which is exact addition).
//   2. The devices' partial sums all-reduced across the devices (kernels::device_all_reduce; a
//      host with one GPU takes this path with a group of one rank, which leaves the sum as it is).
//   3. The first device's buffer downloaded into host memory and pushed.
// On one device the sum is (((g_a + g_b) + g_c) ...) in rank order: the bits of host_reducer's for
// the same gradients. Across devices NCCL's order applies (its last bits may differ).
//
// The reducer owns one backend per device it has seen (its own stream, so it never shares a
// worker's), and one slot per deposit on it: a deposit copies the worker's gradient into a slot
// and waits for the copy, so the worker may write its gradient buffer again as soon as deposit
// returns (ssp lets a worker compute its next step before the host's sum is pushed).
//
// Threads: deposit may be called concurrently (workers are detached actors). Errors: CUDA and
// NCCL failures throw kernels::cuda_error, as every backend op does.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/buffer_pool.hpp"
#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "worker/host_reducer.hpp"

namespace coach::worker {

class device_reducer {
 public:
  /// Makes the reducer's own backend on a device (e.g. kernels::make_backend(kind, device)).
  using backend_factory = std::function<result<std::unique_ptr<kernels::backend>>(int device)>;
  /// Makes an all-reduce over one backend per device (kernels::make_device_all_reduce); absent
  /// for host backends, whose deposits are all in one memory.
  using all_reduce_factory = std::function<result<std::unique_ptr<kernels::device_all_reduce>>(
      std::span<kernels::backend* const>)>;

  device_reducer(std::size_t num_params, backend_factory make_backend,
                 all_reduce_factory make_all_reduce);
  ~device_reducer();
  device_reducer(const device_reducer&) = delete;
  device_reducer& operator=(const device_reducer&) = delete;

  using outcome = host_reducer::outcome;

  /// Deposits `rank`'s gradient for `step`: `grad`, num_params floats of `be`'s memory (ignored
  /// when samples == 0), written by ops enqueued on `be`. `local_members` as for host_reducer.
  /// Errors (protocol_error): a rank not among the local members, a second deposit for a step,
  /// no gradient with samples; (internal) a device backend or all-reduce that cannot be made.
  result<outcome> deposit(std::int64_t step, std::span<const std::uint32_t> local_members,
                          std::uint32_t rank, std::uint64_t samples, kernels::backend& be,
                          const float* grad);

  /// Steps with deposits still waiting for local members.
  std::size_t open_steps() const;
  /// Completed steps whose sum went through the device all-reduce (for tests and logs).
  std::uint64_t all_reduces() const;

 private:
  struct device_state {
    std::unique_ptr<kernels::backend> be;
    std::vector<float*> free_slots;
  };
  struct entry {
    std::uint64_t samples = 0;
    int device = -1;
    float* slot = nullptr;
  };

  /// The reducer's backend on `device`, made on first use. REQUIRES: mu_ held.
  result<device_state*> device_of(int device);
  /// The sum of a complete step into `out` (host memory). REQUIRES: mu_ held.
  result<void> reduce(const std::map<std::uint32_t, entry>& deposits, outcome& out);
  /// Returns the step's slots to their devices. REQUIRES: mu_ held.
  void release(const std::map<std::uint32_t, entry>& deposits);

  std::size_t n_;
  backend_factory make_backend_;
  all_reduce_factory make_all_reduce_;
  mutable std::mutex mu_;
  std::map<int, device_state> devices_;
  /// All-reduces made so far, by the devices they span (in order).
  std::map<std::vector<int>, std::unique_ptr<kernels::device_all_reduce>> groups_;
  std::map<std::int64_t, std::map<std::uint32_t, entry>> open_;  ///< step -> rank -> deposit
  std::unique_ptr<buffer_pool> sums_;
  std::uint64_t all_reduces_ = 0;
};

}  // namespace coach::worker
