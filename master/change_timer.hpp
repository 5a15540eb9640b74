#pragma once
// master::change_timer: how long each change of a running job took and what it cost the
// steps around it (scheduler::change_report), as plain logic with an injected clock. The job
// master (master/job_master.hpp) tells it of every completed step and of each change's
// milestones; tests/unit/master/change_timer_test.cpp drives it with a manual clock.
//
// Before a change: over the up to 20 steps completed before its request (not those waiting at
// its boundary), the median gap between completed steps (step_ms), the longest gap less the
// median (step_spread_ms: the noise a pause is measured against) and samples/s. At its first
// step: the gap since the step before (gap_ms), the pause it added (gap_ms - step_ms, at least
// 0) and, when it added workers, request to that step (join_ms). After: samples/s over up to 20
// steps. Migrations: request to the new shard prepared (prepare_ms), orders sent to the last
// slice adopted (transfer_ms).
//
// Threads: one owner (the master).

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "report/job_report.hpp"

namespace coach::master {

using scheduler::change_report;
using scheduler::clock_source;
using scheduler::time_point;

class change_timer {
 public:
  /// `clock` must outlive the timer.
  explicit change_timer(const clock_source& clock) : clock_(clock) {}

  time_point now() const { return clock_.now(); }

  /// A change (`what`) begins at step `step`; asked for at `requested` (nullopt: now, a change
  /// of the spec's schedule), its new shard ready at `prepared` (a migration started ahead).
  void begin(std::string what, std::int64_t step, std::optional<time_point> requested = {},
             std::optional<time_point> prepared = {});
  /// Milestones of the change begun last (ignored before the first).
  void adds_workers();
  void add_moved_bytes(std::uint64_t bytes);
  void orders_sent();
  void transfers_done();

  /// Step `step` completed (every member reported) with `samples` samples.
  void step_completed(std::int64_t step, std::uint64_t samples);

  /// Changes whose first step completed.
  std::uint32_t changes_done() const;
  /// Every change begun, in order.
  std::vector<change_report> reports() const;

 private:
  struct step_done {
    std::int64_t step = 0;
    time_point at;
    std::uint64_t samples = 0;
    double gap_ms = 0;  ///< since the step completed before it
  };
  struct timing {
    change_report rep;
    time_point requested;
    std::optional<time_point> orders_sent;
    bool adds_workers = false;
    bool boundary_done = false;
    std::size_t steps_after = 0;
    std::uint64_t samples_after = 0;
    time_point after_start;
  };

  const clock_source& clock_;
  std::deque<step_done> recent_;  ///< the last 21 completed steps
  std::vector<timing> timings_;
};

}  // namespace coach::master
