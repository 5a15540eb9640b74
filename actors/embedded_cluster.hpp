#pragma once
// actors::train_embedded: the whole cluster in this process (scheduler, job master, shards,
// workers, evaluator in one CAF actor system over the in-process transport). `coach train`,
// the end-to-end tests and train_bench run jobs through it.

#include <atomic>
#include <functional>

#include "common/error.hpp"
#include "scheduler/job_report.hpp"
#include "scheduler/job_spec.hpp"

namespace coach::actors {

/// Options of an embedded run. Zero or empty means "as the job spec says".
struct train_options {
  std::uint32_t workers = 0;  ///< overrides the spec's workers.initial; must lie in [min, max]
  std::uint32_t shards = 0;   ///< overrides the spec's shards.initial; must lie in [min, max]
  std::optional<kernels::backend_kind> backend;  ///< overrides the spec's backend
  /// Called on the calling thread a few times a second while an epoch trains.
  std::function<void(const scheduler::progress_event&)> on_progress;
  /// Called on the calling thread after each epoch is evaluated.
  std::function<void(const scheduler::epoch_report&)> on_epoch;
  /// When it becomes true, the job stops at the next step boundary (result.cancelled).
  const std::atomic<bool>* stop = nullptr;
  /// CAF scheduler threads for message handling (workers compute on threads of their own).
  std::size_t caf_threads = 2;
  /// Fault injection (tests): worker `rank` dies in step `step` after pushing to its first shard.
  std::optional<std::pair<std::uint32_t, std::int64_t>> kill_worker;
  /// Test hook (bench/consistency_bench): how many times as long worker `rank` takes over step
  /// `step` (>= 1); empty: full speed.
  std::function<double(std::uint32_t rank, std::int64_t step)> slowdown;
};

/// Runs `spec` to completion (or cancellation) and returns its result, final parameters
/// included. Errors: the data set cannot be loaded, a count lies outside the spec's range, the
/// backend cannot run here, or the host lacks the resources.
result<scheduler::job_result> train_embedded(const scheduler::job_spec& spec,
                                             const train_options& opt = {});

}  // namespace coach::actors
