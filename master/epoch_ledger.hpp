#pragma once
// master::epoch_ledger: the statistics of a job's epochs while its steps run, as plain logic
// with an injected clock. The job master (master/job_master.hpp) tells it when an epoch
// begins, when each of its steps opens, the layout it ends with (workers and shards when its
// last chunk is handed out), what each report of its chunks carried (samples, loss, compute
// time), when its last chunk completed and its evaluation. An epoch's report
// (scheduler::epoch_report) comes once, when the epoch is both complete and evaluated, in
// whichever order those come; its time runs from its beginning to its last chunk's completion
// (the evaluation is not included). tests/unit/master/epoch_ledger_test.cpp drives it with a manual
// clock.
//
// Threads: one owner (the master).

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "common/clock.hpp"
#include "report/job_report.hpp"

namespace coach::master {

using scheduler::clock_source;
using scheduler::epoch_report;
using scheduler::epoch_segment;
using scheduler::progress_event;
using scheduler::time_point;
using scheduler::to_seconds;

class epoch_ledger {
 public:
  /// `clock` must outlive the ledger.
  explicit epoch_ledger(const clock_source& clock) : clock_(clock) {}

  /// Epoch `epoch` begins now.
  void begin(std::uint32_t epoch);
  /// Step `step` of `epoch` opened with `workers` and `shards`: a layout other than the previous
  /// step's begins a new segment of the epoch (epoch_report::segments).
  void step_opened(std::uint32_t epoch, std::int64_t step, std::uint32_t workers,
                   std::uint32_t shards);
  /// The step that hands out `epoch`'s last chunk opened with this layout.
  void ends_with(std::uint32_t epoch, std::uint32_t workers, std::uint32_t shards);
  /// A report of chunks of `epoch` computed at step `step`: their samples, the loss summed over
  /// them and the forward and backward time.
  void reported(std::uint32_t epoch, std::int64_t step, std::uint64_t samples, double loss_sum,
                std::uint64_t compute_us);
  /// Every chunk of `epoch` completed now.
  void completed(std::uint32_t epoch);
  /// The test set's totals after `epoch`, and for a click-through-rate model its AUC and log
  /// loss (NaN otherwise).
  void evaluated(std::uint32_t epoch, std::int64_t correct, std::int64_t total, double loss_sum,
                 double auc = std::numeric_limits<double>::quiet_NaN(),
                 double log_loss = std::numeric_limits<double>::quiet_NaN());

  /// The report of `epoch` once it is complete and evaluated; nullopt before, and after it was
  /// given once.
  std::optional<epoch_report> take_report(std::uint32_t epoch);

  /// The running figures of `epoch` for a progress line: samples done, mean loss so far,
  /// seconds since it began and samples/s (the caller fills in the rest).
  progress_event progress(std::uint32_t epoch) const;

 private:
  struct evaluation {
    std::int64_t correct = 0;
    std::int64_t total = 0;
    double loss_sum = 0;
    double auc = 0;
    double log_loss = 0;
  };
  struct segment {
    epoch_segment figures;
    time_point start{};
  };
  struct stats {
    std::vector<segment> segments;
    std::optional<time_point> end;  ///< when every chunk completed
    double loss_sum = 0;
    std::uint64_t samples = 0;
    std::int64_t steps = 0;
    std::uint64_t compute_us = 0;
    std::optional<time_point> start;
    std::optional<double> seconds;  ///< set when every chunk completed
    std::uint32_t workers = 0;
    std::uint32_t shards = 0;
    std::optional<evaluation> eval;
    bool reported = false;
  };
  double since_start(const stats& e) const;

  const clock_source& clock_;
  std::map<std::uint32_t, stats> epochs_;
};

}  // namespace coach::master
