#pragma once
// scheduler::job_report: what a job reports while it runs (progress) and after each epoch, and
// the JSON form written by `coach train --report FILE` (docs/report.md).

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/json.hpp"
#include "worker/dataset.hpp"
#include "worker/external_layout.hpp"
#include "worker/invocation_counts.hpp"

namespace coach::scheduler {

/// A snapshot of a running epoch, sent a few times a second.
struct progress_event {
  std::uint32_t epoch = 0;          ///< 0-based
  std::uint32_t epochs = 0;         ///< total epochs of the job
  std::uint64_t samples_done = 0;   ///< in this epoch
  std::uint64_t samples_total = 0;  ///< per epoch
  double train_loss = 0;            ///< mean loss over the epoch's samples so far
  double samples_per_s = 0;         ///< over the epoch so far
  double seconds = 0;               ///< since the epoch began
  std::uint32_t workers = 0;        ///< members of the current configuration
  std::uint32_t shards = 0;         ///< shards owning slices now
  std::uint32_t changes_done = 0;   ///< changes of workers or shards in effect (step applied)
  /// Function mode: the invocations of every worker so far, summed.
  std::optional<worker::invocation_counts> invocations;
};

/// One finished epoch.
/// A run of one epoch's steps under one allocation (an epoch that spans a change has several).
struct epoch_segment {
  std::uint32_t workers = 0;
  std::uint32_t shards = 0;
  std::int64_t first_step = 0;
  std::int64_t steps = 0;
  std::uint64_t samples = 0;  ///< training samples its steps reported
  /// From its first step's opening to the next segment's (the last: to the epoch's last chunk
  /// completed).
  double seconds = 0;
};

struct epoch_report {
  std::uint32_t epoch = 0;  ///< 0-based
  double train_loss = 0;    ///< mean training loss over the epoch's samples
  double test_loss = 0;     ///< mean loss on the test set after the epoch
  double test_accuracy = 0;
  /// A click-through-rate model (two classes, sparse tables): the test set's AUC and log loss
  /// of the predicted probability of class 1 (worker/binary_metrics.hpp); NaN otherwise.
  double test_auc = std::numeric_limits<double>::quiet_NaN();
  double test_log_loss = std::numeric_limits<double>::quiet_NaN();
  double seconds = 0;        ///< wall time of the epoch's training (evaluation not included)
  double samples_per_s = 0;  ///< training samples / seconds
  std::uint64_t samples = 0;
  std::int64_t steps = 0;
  /// The workers' forward and backward time summed over the epoch's chunks (the rest of
  /// seconds × workers is waiting: for parameters, for the step's other members, for chunks).
  double compute_seconds = 0;
  std::uint32_t workers = 0;
  std::uint32_t shards = 0;
  /// The epoch's steps by allocation, in order; one entry when it ran under one allocation.
  std::vector<epoch_segment> segments;
  /// lr_scaling adascale: the gain the epoch's last step was applied with (ps/adascale.hpp);
  /// 0 under any other scaling.
  double lr_gain = 0;
};

/// One change of a running job's workers or shards (docs/design.md "Elastic jobs"), timed by
/// its job master. Times in milliseconds; -1 where it does not apply.
struct change_report {
  std::string what;               ///< "workers 3", "shards 2", "migrate 0 to node-b"
  std::int64_t step = 0;          ///< the first step of the new configuration
  double join_ms = -1;            ///< request -> the first step with the new workers is applied
  double transfer_ms = -1;        ///< migrate orders sent -> the last slice adopted
  std::uint64_t moved_bytes = 0;  ///< values and optimizer state of the slices moved
  double gap_ms = -1;             ///< between the step before the change and its first step applied
  double step_ms = -1;            ///< median gap between applied steps before the request
  double pause_ms = -1;           ///< gap_ms - step_ms (the time the change added), at least 0
  double samples_per_s_before = -1;  ///< over up to 20 steps before the request
  double samples_per_s_after = -1;   ///< over up to 20 steps after the change
  /// Request -> the new shard of a migration placed and its memory warmed, while the job went on
  /// training (the change's step boundary comes after it).
  double prepare_ms = -1;
  /// The longest gap before the request less step_ms: how much steps without a change varied,
  /// the noise a pause is measured against.
  double step_spread_ms = -1;
};

/// The outcome of a whole job.
struct job_result {
  std::string name;
  bool cancelled = false;
  std::vector<epoch_report> epochs;
  double test_accuracy = 0;  ///< after the last finished epoch
  double seconds = 0;        ///< whole job, wall time
  std::uint32_t workers = 0;
  std::uint32_t shards = 0;
  std::string backend;
  std::uint64_t num_params = 0;
  std::uint64_t bytes_moved = 0;  ///< data-path bytes counted by the transport
  /// The version of the final parameters: the steps applied since the seed (a resumed run
  /// counts the steps of the run it continues). A cancelled run stops at a step boundary.
  std::int64_t steps = 0;
  std::vector<change_report> changes;  ///< every change of workers or shards, in order
  /// Function mode: the invocations of every worker, summed (worker/function_runner.hpp).
  std::optional<worker::invocation_counts> invocations;
  std::vector<float> params;  ///< final parameters (not written to the report)
  /// The data set's class names (empty for integer labels) and feature transform: what a
  /// saved model keeps (worker/model_file.hpp). Not written to the report.
  std::vector<std::string> class_names;
  worker::feature_transform transform;
  /// One sample's shape {C, H, W} ({0, 0, 0}: flat) and the classes of the data set.
  std::array<int, 3> sample_shape{0, 0, 0};
  std::size_t features = 0;
  int classes = 0;
  std::size_t fields = 0;  ///< categorical fields of a ctr data set (embedding tables), else 0
  /// A model with sparse tables: every shard's rows at the final version
  /// (sparse::row_store's transfer layout, one a shard); what a saved model's tables file
  /// holds. Not written to the report.
  std::vector<std::vector<std::byte>> rows;
  /// A script's model: its registered layout (the saved model's tensors); null otherwise. Not
  /// written to the report.
  std::shared_ptr<const worker::external_model> external;
};

/// Whether training has diverged by epoch `e`'s end: its training loss is not a finite number
/// (the parameters have left the floats: NaN or infinity), which no later epoch can undo. The
/// error (invalid_argument, naming `learning_rate`, the usual cause) fails the job.
std::optional<coach::error> diverged(const epoch_report& e, double learning_rate);

/// One change as a JSON object (docs/report.md lists the fields).
json to_json_value(const change_report& c);
/// A function-mode job's invocation counts as a JSON object.
json to_json_value(const worker::invocation_counts& i);
/// The report as one JSON text, indented, with a final newline (docs/report.md lists the fields).
std::string to_json(const job_result& r);

}  // namespace coach::scheduler
