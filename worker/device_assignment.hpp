#pragma once
// worker::device_assignment: which CUDA device each worker in this process runs on, across every
// job the process runs (docs/cuda.md "Devices"): one per process (the embedded cluster of
// `coach train`, each coach-node). Devices are the indices this process sees, so
// CUDA_VISIBLE_DEVICES applies (device 0 is the first visible one).
//
// A worker of a job with `gpus_per_worker: g` (g >= 1) holds g consecutive devices of its own:
// the block no other worker holds as its own with the fewest workers sharing it (the lowest on
// ties), and runs on the first of them; when every block has an owner it is refused with the
// reason. "Consecutive" is within the devices it may hand out (coach-node --gpus 0,2,3: 2 and 3
// make a block of two, and so do 0 and 2). A worker with g = 0 (the default) owns no device: it
// shares the one the fewest workers of this process use, among those nobody owns while there are
// such (so k shared workers on d devices spread round-robin). A worker's devices are released when
// it stops, and a later worker may take them.
//
// Threads: every member may be called concurrently (workers stop on their own threads).

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"

namespace coach::worker {

class device_assignment {
 public:
  /// A worker: its job and rank.
  using holder = std::pair<std::uint64_t, std::uint32_t>;

  /// Devices 0 .. devices - 1 (`devices`: how many this process sees, kernels::device_count()).
  explicit device_assignment(int devices);
  /// The devices in `ids` only (coach-node --gpus), ascending, without repeats.
  explicit device_assignment(std::vector<int> ids);

  /// The device worker `rank` of `job` runs on, taking its devices (the same again for a worker
  /// that holds some). Errors: resource_exhausted when no device is visible, or, with
  /// gpus_per_worker g >= 1, when every block of g devices has an owner (the message names them).
  result<int> take(std::uint64_t job, std::uint32_t rank, int gpus_per_worker);
  /// Releases the worker's devices (nothing when it holds none).
  void release(std::uint64_t job, std::uint32_t rank);

  /// The first device it hands out (a coach-node's first of --gpus), for work that shares a
  /// device without holding it (a job's evaluation); nothing when it has none.
  std::optional<int> first() const noexcept {
    return ids_.empty() ? std::nullopt : std::optional<int>(ids_.front());
  }

  /// What one worker holds.
  struct hold_info {
    std::uint64_t job = 0;
    std::uint32_t rank = 0;
    std::vector<int> devices;  ///< the first is the one it runs on
    bool own = false;          ///< gpus_per_worker >= 1
  };
  /// The devices each worker holds, by job and rank.
  std::vector<hold_info> holds() const;
  /// The devices each worker holds.
  std::map<holder, std::vector<int>> held() const;
  /// "job 1 worker 0: device 0 (own), job 2 worker 3: device 1" ("" when none is held).
  std::string describe() const;

 private:
  struct hold {
    std::vector<int> devices;
    bool own = false;  ///< gpus_per_worker >= 1: nobody else may own these
  };

  std::vector<int> ids_;  ///< the devices it hands out, ascending
  mutable std::mutex mu_;
  std::map<holder, hold> held_;
};

}  // namespace coach::worker
