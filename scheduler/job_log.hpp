#pragma once
// scheduler::job_log: a job's history for `coach logs` and the dashboard, numbered in one
// sequence: its lines (start, placements, changes, failures), the latest max_events, and apart
// from them its epochs' lines, the latest max_epoch_events, so that a long job's epochs do not
// push its start, placements and changes out. Read back merged in sequence order.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "scheduler/job_status.hpp"

namespace coach::scheduler {

class job_log {
 public:
  static constexpr std::size_t max_events = 2000;
  static constexpr std::size_t max_epoch_events = 200;

  /// Adds a line at `time` (Unix seconds).
  void add(double time, std::string line);
  /// Adds an epoch's line.
  void add_epoch(double time, std::string line);
  /// The lines kept with a sequence number above `after`, in sequence order.
  std::vector<job_event> since(std::uint64_t after) const;

 private:
  std::deque<job_event> lines_;
  std::deque<job_event> epochs_;
  std::uint64_t made_ = 0;  ///< lines numbered so far
};

}  // namespace coach::scheduler
