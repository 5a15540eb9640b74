#pragma once
// master::step_planner: which worker computes what at each step of a job, as plain logic. The
// job master (master/job_master.hpp) asks it when a worker asks for its next step and when a
// worker reports one; it keeps the plan of every open step: the chunk of each member rank, the
// grants handed out and the reports received. Bulk-synchronous (consistency `bsp`): a step
// gives every member of its configuration one chunk (none when the epoch's chunks are all
// out), completes when every member reported, and the next epoch's first step opens only once
// every chunk of the epoch completed. Model averaging (`averaging:K`) is bulk-synchronous too,
// with up to K chunks per member and step (the member trains K local steps, one per chunk, and
// pushes its model's delta). Stale-synchronous (`ssp:S`, max_ahead = S): steps complete as in
// BSP, but a step opens while up to S steps before it are incomplete, so a worker holds a grant
// at most S steps after the oldest step some member has not reported: it runs at most S steps
// ahead of the slowest member (the worker computes from parameters at least S versions old;
// actors/worker_actor.cpp). Asynchronous (`asp`): the master opens a step for each request,
// with the requesting worker its only member. Unit-tested in
// tests/unit/master/step_planner_test.cpp.
//
// Threads: one owner (the master).

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "master/chunk_dispenser.hpp"

namespace coach::master {

/// How a job with a fixed global batch cuts its epochs: chunks of `chunk` samples, `per_step`
/// of them a step (chunk × per_step = the global batch). The chunk is the largest divisor of
/// the global batch that still gives each of `max_workers` members a chunk (1 when none does):
/// a step's members share its chunks, so any worker count covers the same samples.
struct global_cut {
  std::size_t chunk = 1;
  std::uint32_t per_step = 1;
};
global_cut cut_global_batch(std::size_t global_batch, std::uint32_t max_workers);

class step_planner {
 public:
  /// Hands out `dispenser`'s chunks for epochs [first_epoch, epochs), up to `chunks_per_step`
  /// (>= 1) to each member at each step. `max_ahead` >= 0 (ssp:S): a step opens only while the
  /// oldest incomplete step is at most that many steps before it; negative: no such bound (a
  /// BSP worker asks for its next step once it reported the last, and computes it once the
  /// step before is applied). The first step opened is `first_step` (>= 0): a job resumed from
  /// a checkpoint goes on with the step numbers of the run it continues (a worker's dropout
  /// masks depend on them). `dispenser` must outlive the planner.
  /// `global_chunks` > 0 (a fixed global batch, global_cut::per_step): each step takes that
  /// many chunks (fewer at an epoch's end) whatever its members, and gives each member a
  /// contiguous run of them, in member order (chunks_per_step is then ignored); so a step covers
  /// the same samples under any membership.
  step_planner(chunk_dispenser& dispenser, std::uint32_t first_epoch, std::uint32_t epochs,
               std::uint32_t chunks_per_step = 1, std::int64_t max_ahead = -1,
               std::int64_t first_step = 0, std::uint32_t global_chunks = 0);

  /// What opening a step did.
  struct opened {
    bool finished = false;                     ///< training is over: every rank is told to stop
    std::optional<std::uint32_t> epoch_begun;  ///< the step began this epoch
    bool ends_epoch = false;                   ///< it handed out its epoch's last chunk
  };
  /// Opens step open_step() + 1 for `members` (its configuration's ranks); `stop` (the job was
  /// cancelled) makes it the finishing step. nullopt when it cannot open yet: its epoch's chunks
  /// are all out and some are not complete (the next epoch waits for them), or (max_ahead) a
  /// step too far before it is incomplete.
  std::optional<opened> open(std::span<const std::uint32_t> members, bool stop);
  /// The newest step opened; first_step - 1 before the first.
  std::int64_t open_step() const noexcept { return open_step_; }

  /// What a worker is to do at a step.
  struct grant {
    enum class kind {
      stale,     ///< the step is closed (a late request): nothing to answer
      finished,  ///< training is over, or the rank is no member of the step: stop
      no_chunk,  ///< a member without a chunk this step (the epoch's chunks are all out)
      chunk,     ///< compute these chunks (one local step each)
    };
    kind what = kind::stale;
    std::vector<master::chunk> chunks;  ///< 1..chunks_per_step, of one epoch (kind::chunk)
    std::uint32_t epoch = 0;            ///< of the chunks, or the current epoch
  };
  /// The grant of `rank` at the open step `step` (counted: a step is forgotten once every member
  /// fetched its grant and reported).
  grant take(std::uint32_t rank, std::int64_t step);

  /// What a worker's report of a step did.
  struct reported {
    bool known = false;                         ///< a member of an open step (else ignored)
    std::optional<std::uint64_t> step_samples;  ///< the step completed: its samples
    std::vector<master::chunk> chunks_done;     ///< the rank's chunks completed (samples count)
    bool epoch_done = false;                    ///< one of them was its epoch's last
  };
  reported report(std::uint32_t rank, std::int64_t step);

  /// Workers `ranks` left the job from step `from` on: steps from there expect them no more,
  /// and the chunks they held in those steps go back to the dispenser. Returns the epochs whose
  /// chunks went back.
  std::set<std::uint32_t> drop(std::span<const std::uint32_t> ranks, std::int64_t from);

  bool epoch_started() const noexcept { return epoch_started_; }
  /// Steps open now (for tests and the master's statistics).
  std::size_t steps_open() const noexcept { return plans_.size(); }
  /// The open steps in which `rank` holds a grant or a place and has not reported.
  std::vector<std::int64_t> unreported(std::uint32_t rank) const;
  /// The oldest step some member has not reported (open_step() + 1 when none).
  std::int64_t oldest_incomplete() const noexcept;

 private:
  struct plan {
    std::map<std::uint32_t, std::vector<master::chunk>> by_rank;
    bool finished = false;
    std::size_t expected = 0;  ///< grants to hand out, reports to await
    std::size_t fetched = 0;
    std::size_t reported = 0;
    std::set<std::uint32_t> reported_by;
  };
  void forget_if_closed(std::map<std::int64_t, plan>::iterator it);

  chunk_dispenser& dispenser_;
  std::uint32_t first_epoch_;
  std::uint32_t epochs_;
  std::uint32_t chunks_per_step_;
  std::uint32_t global_chunks_;
  std::int64_t max_ahead_;
  bool epoch_started_ = false;
  std::int64_t open_step_ = -1;
  std::map<std::int64_t, plan> plans_;
};

}  // namespace coach::master
