#pragma once
// scheduler::job_spec: a training job as the user describes it in YAML (`coach train JOB.yaml`,
// `coach submit JOB.yaml`), parsed and validated in one place.
//
// A complete spec, every field shown (comments say what each accepts):
//
//   name: fashion-mlp            # required; letters, digits, '.', '_', '-' (at most 128)
//   dataset:                     # required
//     format: idx                # idx (default) | csv
//     path: /usr/share/datasets/fashion-mnist   # required; idx: a directory, csv: a file
//     train_limit: 0             # keep the first N training samples; 0 (default) = all
//     test_limit: 0              # keep the first N test samples; 0 (default) = all
//     # test_fraction: 0.2       # csv only: fraction held out for test, in (0, 1); default 0.2
//   model:                       # required
//     type: mlp                  # mlp (default; the only type)
//     hidden: [256, 128]         # hidden widths, each in [1, 1048576]; [] = softmax regression;
//                                # default [128]
//     activation: relu           # relu (default; the only one)
//   optimizer:                   # required
//     type: momentum             # required: sgd | momentum | adam
//     learning_rate: 0.05        # > 0; default 0.01 (sgd, momentum), 0.001 (adam)
//     momentum: 0.9              # momentum only, in [0, 1); default 0.9
//     weight_decay: 0            # >= 0; default 0
//     # beta1: 0.9               # adam only, in [0, 1); default 0.9
//     # beta2: 0.999             # adam only, in [0, 1); default 0.999
//     # epsilon: 1e-8            # adam only, > 0; default 1e-8
//   batch_size: 64               # required; in [1, 1048576]
//   epochs: 5                    # required; >= 1
//   consistency: bsp             # bsp (default) | averaging:K (K >= 1: each worker trains K
//                                # local steps, the shards average the models by samples)
//                                # | ssp:S (S >= 0: a worker runs at most S steps ahead of the
//                                # slowest) | asp (each gradient applied alone, on arrival)
//   seed: 42                     # unsigned 64-bit; default 1
//   workers: {min: 1, max: 4, initial: 2}   # or N, meaning min = max = initial = N; default 1
//   shards: 2                    # same forms as workers; default 1
//   gpus_per_worker: 0           # >= 0; default 0
//   backend: auto                # auto (default) | cpu | cuda
//   slice_size: 16384            # floats per slice of the parameter vector, >= 1; default 16384
//   host_reduce: false           # true: the workers of one host sum their gradients and push
//                                # once per host (worker/host_reducer.hpp); default false
//   placement: dltap             # spread | best-fit | random | dltap: where a cluster puts the
//                                # job's parts (scheduler/placement.hpp); default: the
//                                # scheduler's (coach-node --placement)
//   function: {deadline_s: 30, memory_mb: 512, chunks_per_invocation: 8}
//                                # optional: run workers as bounded functions
//                                (worker/invocation.hpp); # deadline_s and memory_mb >= 0, 0 =
//                                unlimited, default 0; # chunks_per_invocation in [1, 1000000],
//                                default 8
//   schedule:                    # optional: elastic changes at given steps (coach train)
//     - {at_step: 20, workers: 3}   # rescale the workers to 3 (within workers.min..max)
//     - {at_step: 40, shards: 3}    # rescale the shards to 3 (within shards.min..max)
//     - {at_step: 60, migrate: 0}   # move shard 0 whole to a new shard
//                                # at_step >= 1 and strictly increasing; one change per entry
//
// In the map form of workers/shards, a missing min is 1, a missing initial is min and a missing
// max is the larger of min and initial; then 1 <= min <= initial <= max must hold.
//
// A relative dataset path is resolved against the current working directory of the process that
// parses the spec, and stored absolute, so the spec means the same after it travels to a daemon.
//
// Errors: every problem gives one line `SOURCE:LINE: field 'dotted.path' ...` naming the first
// field at fault (1-based line): unknown fields (with a "did you mean" when one is close), wrong
// types, values out of range, unknown enum values (listing the allowed ones), missing required
// fields, an empty document, a top level that is not a map. Codes: invalid_argument for all of
// those, parse_error for malformed YAML (the line yaml-cpp reports), not_found for a missing file,
// invalid_argument for averaging:K with optimizer adam (the workers run the optimizer locally,
// without state across rounds).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "ps/optimizer.hpp"
#include "worker/dataset.hpp"
#include "worker/model_config.hpp"

namespace coach::scheduler {

/// How many of something (workers, shards) a job may have: 1 <= min <= initial <= max.
struct count_range {
  int min = 1;
  int max = 1;
  int initial = 1;  ///< how many the job starts with
};

/// How shards combine the gradients of a step (DESIGN.md "Data path of one step").
enum class consistency_kind { bsp, ssp, asp, averaging };

/// The `consistency:` field.
struct consistency_config {
  consistency_kind kind = consistency_kind::bsp;
  int staleness = 0;    ///< ssp:S: how many steps a worker may run ahead of the slowest
  int local_steps = 0;  ///< averaging:K: local steps between two averagings
};

/// Limits of a worker run as a serverless function. 0 means unlimited.
struct function_limits {
  double deadline_s = 0;                    ///< wall-clock seconds per invocation
  std::uint64_t memory_mb = 0;              ///< memory cap per invocation
  std::uint32_t chunks_per_invocation = 8;  ///< steps one invocation trains, then exits (>= 1)
};

/// One elastic change of a job's schedule (`schedule:`), taking effect at step `at_step`.
struct schedule_action {
  enum class kind_type { workers, shards, migrate };
  std::int64_t at_step = 1;
  kind_type kind = kind_type::workers;
  std::uint32_t value = 0;  ///< workers: the new count; shards: the new count; migrate: shard id
  friend bool operator==(const schedule_action&, const schedule_action&) = default;
};

/// A validated job spec.
struct job_spec {
  std::string name;
  worker::dataset_config dataset;  ///< path is absolute
  worker::model_config model;
  ps::optimizer_config optimizer;
  int batch_size = 64;
  int epochs = 1;
  consistency_config consistency;
  std::uint64_t seed = 1;
  count_range workers;
  count_range shards;
  int gpus_per_worker = 0;
  kernels::backend_kind backend = kernels::backend_kind::auto_select;
  std::size_t slice_size = 16384;           ///< floats per slice of the parameter vector
  bool host_reduce = false;                 ///< one push per host (worker/host_reducer.hpp)
  std::string placement;                    ///< a placement's name; empty: the scheduler's
  std::optional<function_limits> function;  ///< set: workers run as bounded functions
  std::vector<schedule_action> schedule;    ///< by at_step, ascending
};

/// "bsp", "ssp:3", "asp", "averaging:4".
std::string to_string(const consistency_config& c);

/// The rule a job's shards apply: the spec's optimizer, except under averaging:K, where the
/// workers run it locally (worker/local_averaging.hpp) and a shard subtracts the samples-weighted
/// mean of the members' deltas: plain SGD with learning rate 1 and no weight decay.
ps::optimizer_config shard_optimizer(const job_spec& spec);

/// Parses and validates a spec. `source_name` (a file name, or e.g. "<stdin>") starts every error
/// message. Never throws.
result<job_spec> parse_job_spec(std::string_view yaml_text, std::string_view source_name);

/// As above, resolving a relative dataset path against `base_dir` (the submitter's working
/// directory, when the spec travels to a daemon) instead of this process's; empty: the cwd.
result<job_spec> parse_job_spec(std::string_view yaml_text, std::string_view source_name,
                                std::string_view base_dir);

/// Reads the file at `path` and parses it (errors name the file). not_found when it is missing.
result<job_spec> load_job_spec(const std::string& path);

}  // namespace coach::scheduler
