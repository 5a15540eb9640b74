#pragma once
// scheduler::train_events: `coach train --events FILE`, one JSON object a line while the job
// runs, so that a run can be followed (tail -f) or fed to other tools as it goes:
//
//   {"event": "start", "time": 1764102345.1, "job": "digits", "epochs": 20, "workers": 2, "shards":
//   2}
//   {"event": "change", "time": ..., "epoch": 3, "samples_done": 512, "workers": 3, "shards": 2,
//   "changes_done": 1}
//   {"event": "epoch", "time": ..., "epoch": 3, "train_loss": ..., "test_loss": ...,
//   "test_accuracy": ...,
//    "seconds": ..., "samples_per_s": ..., "workers": 3, "shards": 2}
//   {"event": "end", "time": ..., "state": "succeeded", "test_accuracy": ..., "seconds": ...,
//   "epochs_done": 20}
//
// epochs are 1-based as the report's; "time" is Unix seconds. A change line comes when a
// progress report shows a change of workers or shards in effect (its count went up), or else
// before an epoch line whose workers or shards differ from the last line's (an epoch too short
// for a progress report; that line has no samples_done). Every line is flushed as written.
//
// Not thread-safe: the caller serializes the calls (coach train's callbacks come from one
// actor at a time, and the caller holds a mutex).

#include <cstdint>
#include <cstdio>
#include <string>

#include "common/error.hpp"
#include "report/job_report.hpp"

namespace coach::scheduler {

class train_events {
 public:
  /// Opens (truncates) `path`. io_error naming it when it cannot be written.
  static result<train_events> open(const std::string& path);
  train_events(train_events&& o) noexcept : file_(o.file_) { o.file_ = nullptr; }
  train_events& operator=(train_events&&) = delete;
  ~train_events();

  void start(const std::string& job, std::uint32_t epochs, std::uint32_t workers,
             std::uint32_t shards);
  void progress(const progress_event& p);
  void epoch(const epoch_report& e);
  /// `state`: "succeeded", "cancelled" or "failed".
  void end(const std::string& state, double test_accuracy, double seconds, std::size_t epochs_done);

 private:
  explicit train_events(std::FILE* f) : file_(f) {}
  void line(const std::string& json);
  std::FILE* file_ = nullptr;
  std::uint32_t changes_seen_ = 0;
  std::uint32_t workers_ = 0, shards_ = 0;  ///< the allocation of the last line
};

}  // namespace coach::scheduler
