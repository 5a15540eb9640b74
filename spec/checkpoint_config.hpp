#pragma once
// scheduler::checkpoint_config: where a job writes its checkpoints and how often (`coach train
// --checkpoint FILE --checkpoint-every SECONDS`; the spec's `checkpoint: {path, every_s}` fills
// the same struct), and checkpoint_schedule, which decides which epochs' ends are checkpointed.
//
// Checkpoints are taken at epochs' ends only: a resumed job restarts the data order of its
// first epoch from the start (master::chunk_dispenser), so a checkpoint within an epoch could
// not be resumed bit for bit without also keeping the dispenser's place and the epoch's partial
// statistics. The decision for an epoch is made as the step that hands out its last chunk opens
// (the job master asks then for the shards' state at the epoch's end; master/job_master.cpp).

#include <cstdint>
#include <string>

#include "common/clock.hpp"

namespace coach::scheduler {

struct checkpoint_config {
  /// The checkpoint file (spec/checkpoint_file.hpp), replaced atomically by each new
  /// checkpoint. Empty (default): no checkpoints.
  std::string path;
  /// Seconds between checkpoints, >= 0. 0 (default): the end of every epoch. s > 0: the end of
  /// the first epoch that ends s seconds or more after the last checkpoint (the run's start
  /// counts as one). Whatever s, the end of the job's last epoch is always checkpointed, so the
  /// file holds the final state (a run can go on with more epochs).
  double every_s = 0;
  /// Whether the spec (or --checkpoint-every) set every_s. A cluster scheduler writes a job's
  /// checkpoints to its store every every_s seconds when set, else every
  /// default_store_every_s.
  bool every_s_given = false;
  static constexpr double default_store_every_s = 60;
  bool enabled() const noexcept { return !path.empty(); }
  /// Seconds between a cluster scheduler's stored checkpoints of the job.
  double store_every_s() const noexcept { return every_s_given ? every_s : default_store_every_s; }
};

/// Which epochs' ends a job checkpoints, by checkpoint_config::every_s. Plain logic over an
/// injected clock (tests drive it with manual_clock). Threads: one owner (the job master).
class checkpoint_schedule {
 public:
  /// For a job of `epochs` epochs; counts from clock.now() (the run's start). REQUIRES:
  /// every_s >= 0; `clock` outlives the schedule.
  checkpoint_schedule(double every_s, std::uint32_t epochs, const clock_source& clock);
  /// Whether the end of `epoch` is checkpointed, asked once per epoch, when its last step opens:
  /// true for the last epoch (epochs - 1), for every epoch when every_s is 0, else when every_s
  /// seconds or more passed since the last epoch it said yes to (or since construction).
  bool due(std::uint32_t epoch);

 private:
  double every_s_;
  std::uint32_t epochs_;
  const clock_source& clock_;
  time_point last_;
};

}  // namespace coach::scheduler
