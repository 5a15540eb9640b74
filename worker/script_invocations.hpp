#pragma once
// worker::script_invocations: the processes of a script that compute one worker's steps, one at
// a time, taken from the job's external_pool.
//
// Without limits (a job without `function:`) one process computes every step of the worker and
// any failure of it is the worker's (the worker ends; its chunks go back to the job).
//
// In function mode (`function: {deadline_s, memory_mb, chunks_per_invocation}`) each process
// is an invocation, as coach-invocation's are for a model of layers (function_runner.hpp): it
// answers at most chunks_per_invocation steps and is then stopped (its `job.steps()` ends),
// the next invocation's process having been started beside its last step; the deadline counts
// from the invocation's first step (its start-up is bounded by model.start_timeout_s instead:
// a warm process is ready before its invocation); the memory cap is put on each process as it
// starts (external_pool, script_options::memory_bytes). An invocation that ends without
// answering its step (killed at its deadline, out of memory, killed by a signal, dead) is
// counted, and the step goes to a fresh process with the same parameters: nothing answered is
// lost, nothing is answered twice. `max_attempts` fresh processes in a row that fail the same
// step are an error naming the limits. A script's own error (an exception other than a failed
// allocation, junk on the channel, other samples than asked) is not retried: it is the error.
//
// Not thread-safe: one per worker, called from its compute thread.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/error.hpp"
#include "worker/external_pool.hpp"
#include "worker/external_process.hpp"
#include "worker/invocation_counts.hpp"

namespace coach::worker {

/// Function mode's limits on a script's processes (the memory cap is the pool's).
struct script_limits {
  std::chrono::milliseconds deadline{0};   ///< from an invocation's first step; 0: none
  std::uint32_t steps_per_invocation = 8;  ///< >= 1
  std::uint64_t memory_bytes = 0;          ///< the pool's cap, for messages
  std::uint32_t max_attempts = 5;
};

class script_invocations {
 public:
  /// `who` names the processes ("worker 2"); `limits` empty: not function mode.
  script_invocations(std::shared_ptr<external_pool> pool, std::string who,
                     std::optional<script_limits> limits);
  /// Stops the current process (its steps() end; the script runs on to its end) and logs where
  /// the handoff's time went.
  ~script_invocations();
  script_invocations(const script_invocations&) = delete;
  script_invocations& operator=(const script_invocations&) = delete;

  /// Step `step` of worker `rank` (external_process::step). Errors: the process's (not function
  /// mode, or a script's own error); resource_exhausted when max_attempts invocations in a row
  /// ended without answering it (naming the last one's end and the limits).
  /// `rows`: a script with tables, the step's rows (external_process::step).
  result<external_step> step(std::int64_t step, std::uint32_t rank, const float* params,
                             std::span<const std::uint32_t> indices, float* grad,
                             const external_step_rows* rows = nullptr);
  /// A script with tables: the rows step `step` looks up (external_process::lookup), asked of
  /// the current process (taken from the pool when there is none). In function mode under the
  /// invocation's deadline, on a fresh process when that one ends without answering, as step();
  /// a step whose process did not answer its lookup asks it again first.
  result<std::vector<std::vector<std::uint64_t>>> lookup(std::int64_t step,
                                                         std::span<const std::uint32_t> indices);

  /// Function mode: how its invocations ended so far.
  const invocation_counts& counts() const noexcept { return counts_; }
  bool bounded() const noexcept { return limits_.has_value(); }
  /// The current process (tests: to kill it as a failing machine would); null between two.
  external_process* current() const noexcept { return current_.get(); }

 private:
  /// Ends the current process after its last step (function mode): stopped in the background.
  void retire();
  /// Drops the current process that failed, counting how it ended.
  void drop_failed();
  using bounded_call =
      std::function<result<void>(external_process&, const invocation_deadline* deadline)>;
  /// Function mode: `call` on the current invocation's process (one started when there is
  /// none) under its deadline; a process that ends without answering (deadline, memory, crash)
  /// is counted and dropped and `call` goes to a fresh one, max_attempts in a row at most.
  /// `task`: a step (counted, and the invocation retired after its steps_per_invocation).
  result<void> bounded(std::int64_t step, const bounded_call& call, bool task);

  std::shared_ptr<external_pool> pool_;
  std::string who_;
  std::optional<script_limits> limits_;
  std::unique_ptr<external_process> current_;
  std::uint32_t answered_ = 0;  ///< by the current process
  std::chrono::steady_clock::time_point invoked_{};
  bool next_started_ = false;      ///< the next invocation's process was started beside this one's
  std::int64_t lookup_step_ = -1;  ///< the step whose lookup the current process answered
  invocation_counts counts_;
  external_totals totals_;  ///< of the processes before the current one
};

}  // namespace coach::worker
