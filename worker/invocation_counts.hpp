#pragma once
// worker::invocation_counts: how a function-mode worker's invocations ended, as the job report
// and `coach status` show them. A header of its own, without the runner's process machinery,
// for the reports that carry it (report/job_report.hpp); counted by worker::function_runner.

#include <algorithm>
#include <cstdint>

namespace coach::worker {

/// Counts of a worker's invocations (or, summed, of a job's).
struct invocation_counts {
  std::uint64_t started = 0;
  std::uint64_t completed = 0;          ///< answered all their tasks and exited
  std::uint64_t timed_out = 0;          ///< killed at the deadline
  std::uint64_t out_of_memory = 0;      ///< killed or failed for memory
  std::uint64_t failed = 0;             ///< ended otherwise without answering (crash, bad exit)
  std::uint64_t peak_memory_bytes = 0;  ///< of one invocation, the largest seen
  std::uint64_t tasks = 0;              ///< answered

  /// Sums the counts; the peak is the larger of the two.
  invocation_counts& operator+=(const invocation_counts& o) {
    started += o.started;
    completed += o.completed;
    timed_out += o.timed_out;
    out_of_memory += o.out_of_memory;
    failed += o.failed;
    peak_memory_bytes = std::max(peak_memory_bytes, o.peak_memory_bytes);
    tasks += o.tasks;
    return *this;
  }
  friend bool operator==(const invocation_counts&, const invocation_counts&) = default;
};

}  // namespace coach::worker
