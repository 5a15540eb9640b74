#pragma once
// scheduler::perf_tracker: one job's record against the performance model (perf_model), fed its
// epochs. An epoch that spans a change of workers or shards is split by the steps run under each
// allocation (epoch_report::segments): each part long enough to say something is observed on
// its own, as the epoch time it implies (its seconds scaled by the epoch's samples over its
// own), so the model is fitted to what each allocation did, not to the allocation of an epoch's
// last step. Each observation is predicted first (the model as refitted after everything before
// it), so every prediction is honest; for every change, the prediction made for the new
// allocation before any of its steps was seen is kept beside the speed then observed
// (`coach status JOB --json` "model.changes", the report's "model"). Plain logic: the job
// registry keeps one per job, `coach train` one for its report.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.hpp"
#include "report/job_report.hpp"
#include "report/perf_model.hpp"

namespace coach::scheduler {

/// What one part of an epoch says of one allocation.
struct perf_observation {
  int workers = 0;
  int shards = 0;
  double epoch_seconds = 0;  ///< the epoch time it implies
};

/// The observations an epoch gives: the whole epoch when it ran under one allocation; else each
/// segment with at least min_segment_steps steps and a tenth of the epoch's samples (shorter
/// ones are mostly the change's pause), scaled to the epoch's samples.
std::vector<perf_observation> observations_of(const epoch_report& e);
inline constexpr std::int64_t min_segment_steps = 3;

/// One change of allocation as the model saw it coming.
struct change_prediction {
  std::uint32_t epoch = 0;  ///< 0-based: the epoch in which the new allocation was first seen
  int from_workers = 0, from_shards = 0;
  int workers = 0, shards = 0;
  std::optional<double> predicted_s;  ///< before any of its steps; nullopt: nothing to go on
  double observed_s = 0;              ///< the epoch time its first observation implies
  /// |predicted − observed| / observed; nullopt without a prediction.
  std::optional<double> error() const;
};

class perf_tracker {
 public:
  perf_tracker(std::uint64_t job, std::string model) : job_(job), model_(std::move(model)) {}

  /// Feeds epoch `e` into `m` (observations_of, each predicted then observed); returns the
  /// prediction of its last observation (nullopt: none, or no observation).
  std::optional<double> epoch(const epoch_report& e, perf_model& m);

  /// The last observation's prediction (nullopt: none) and epoch time.
  std::optional<double> last_predicted() const { return last_predicted_; }
  double last_observed() const { return last_observed_; }
  std::size_t predictions() const { return predictions_; }
  std::optional<double> mean_abs_rel_error() const;
  const std::vector<change_prediction>& changes() const { return changes_; }
  /// Over the changes that had a prediction.
  std::optional<double> mean_change_error() const;

  /// {"predictions", "mean_abs_rel_error", "last_predicted_s", "last_observed_s", "changes":
  /// [{"epoch" (1-based), "from": [w, p], "to": [w, p], "predicted_epoch_s",
  /// "observed_epoch_s", "error"}], "mean_change_error"}; null where a figure is missing.
  json to_json() const;

  /// Changes kept (the latest).
  static constexpr std::size_t max_changes = 200;

 private:
  std::uint64_t job_;
  std::string model_;
  std::optional<double> last_predicted_;
  double last_observed_ = 0;
  std::size_t predictions_ = 0;
  double abs_rel_error_ = 0;
  std::optional<std::pair<int, int>> last_alloc_;
  std::vector<change_prediction> changes_;
  double change_error_sum_ = 0;
  std::size_t change_predictions_ = 0;
};

}  // namespace coach::scheduler
