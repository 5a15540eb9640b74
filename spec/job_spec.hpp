#pragma once
// scheduler::job_spec: a training job as the user describes it in YAML (`coach train JOB.yaml`,
// `coach submit JOB.yaml`), parsed and validated in one place.
//
// A complete spec, every field shown (comments say what each accepts):
//
//   name: fashion-mlp            # required; letters, digits, '.', '_', '-' (at most 128)
//   dataset:                     # required; the formats are described in worker/dataset.hpp
//     format: idx                # idx (default) | csv | npy | ctr
//     path: /usr/share/datasets/fashion-mnist   # required; idx, npy: a directory, csv, ctr: a
//                                # file
//     train_limit: 0             # keep the first N training samples; 0 (default) = all
//     test_limit: 0              # keep the first N test samples; 0 (default) = all
//     normalize: max             # none | max (default: features divided by the largest value
//                                # read; idx: by 255) | standardize (per feature, (x - mean) /
//                                # std of the training rows; std 0 counts as 1)
//     # test_fraction: 0.2       # csv, and npy without x_test.npy and y_test.npy: fraction of
//                                # the rows held out for test, in (0, 1); default 0.2; ctr:
//                                # the file's last rows, in file order
//     # n_dense: 13              # ctr only: integer columns after the label, in [0, 4096];
//                                # default 13 (ctr's normalize defaults to none: log(1 + x))
//     # n_fields: 26             # ctr only: categorical columns after them; default 26
//     # header: false            # csv only: true: the first row holds column names; default
//                                # false (a first row that is not numbers is then an error)
//     # label_column: -1         # csv only: the label's column, 0-based, negative from the end;
//                                # default -1 (the last); or a header name (needs header: true;
//                                # quote a name that looks like a number: '3')
//     # delimiter: ","           # csv only: one character (",", ";", "|", ...) or tab ("\t");
//                                # default ","
//   model:                       # required; either the mlp shorthand ...
//     type: mlp                  # mlp (the default without 'layers') | layers
//     hidden: [256, 128]         # mlp: hidden widths, each in [1, 1048576]; [] = softmax
//                                # regression; default [128]
//     activation: relu           # mlp: relu (default; the only one)
//     # embeddings:              # ctr only (docs/sparse.md): tables in front of the layers
//     #   - fields: all          # all (default) | [i, ...], distinct, each < dataset.n_fields
//     #     rows: 1000000        # required, in [1, 2^40]: ids are hashed into them
//     #     dim: 16              # required, in [1, 65536]
//     #     pooling: sum         # sum (default) | mean
//     #     init_scale: 0.01     # >= 0; default 0.01
//     #     per_field: true      # true (default): a table per field; false: one shared table
//     # interaction: none        # with embeddings only: none (default) | dot: the layers also
//     #                          # get every two tables' pooled dot product, T(T-1)/2 inputs
//     #                          # (DLRM); dot needs every entry of one dim
//   # sparse_optimizer:          # optional, needs model.embeddings: the rows' optimizer
//   #   type: adagrad            # sgd | adagrad (default) | lazy_adam
//   #   learning_rate: 0.01      # > 0; default 0.01
//   #   weight_decay: 0          # >= 0; default 0
//   #   epsilon: 1e-10           # adagrad, lazy_adam: > 0; default 1e-10 (lazy_adam 1e-8)
//   #   initial_accumulator: 0   # adagrad only, >= 0; default 0
//   #   beta1: 0.9               # lazy_adam only, in [0, 1); default 0.9
//   #   beta2: 0.999             # lazy_adam only, in [0, 1); default 0.999
//   # ... or a list of layers (worker/network.hpp), softmax cross-entropy after the last:
//   # model:
//   #   input_shape: [1, 28, 28] # optional [C, H, W]; default: the data set's (IDX: 1 x rows x
//   #                            # cols, other data 1 x 1 x features); C H W = the features
//   #   layers:                  # a layer name, or a map with a 'type':
//   #     - {type: conv2d, channels: 16, kernel: 5, stride: 1, padding: 2}
//   #                            # channels, kernel required; stride default 1; padding < kernel
//   #     - relu                 # also tanh, sigmoid, gelu (tanh approximation)
//   #     - {type: max_pool2d, kernel: 2, stride: 2, padding: 0}   # or avg_pool2d; kernel
//   #                            # default 2, stride default the kernel
//   #     - {type: batch_norm, momentum: 0.1, epsilon: 1e-5}  # per channel; running statistics
//   #                            # kept in the shards
//   #     - flatten
//   #     - {type: dropout, p: 0.5}   # p in [0, 1)
//   #     - {type: dense, units: 128}
//   #     - dense                # the last layer must be dense; its units (optional) are the
//   #                            # data set's classes
//   #   Shapes are checked when the data set is loaded: "layers[2] conv2d: input 7x7 is smaller
//   #   than kernel 9".
//   optimizer:                   # required
//     type: momentum             # required: sgd | momentum | adam | adamw (PyTorch's AdamW)
//     learning_rate: 0.05        # > 0; default 0.01 (sgd, momentum), 0.001 (adam, adamw)
//     momentum: 0.9              # momentum only, in [0, 1); default 0.9
//     weight_decay: 0            # >= 0; default 0 (adamw: 0.01). sgd, momentum, adam: L2 added
//                                # to the gradient; adamw: decoupled, w -= lr * wd * w first
//     # beta1: 0.9               # adam, adamw only, in [0, 1); default 0.9
//     # beta2: 0.999             # adam, adamw only, in [0, 1); default 0.999
//     # epsilon: 1e-8            # adam, adamw only, > 0; default 1e-8
//     # clip_norm: 1.0           # > 0: each worker scales its mean gradient down to this norm
//                                # (worker/gradient_clip.hpp); default 0 = off
//     # schedule: {type: cosine, min_lr: 0, warmup_epochs: 1}
//                                # learning-rate schedule over the epoch progress p (samples
//                                # applied / training samples; ps/optimizer.hpp); default constant;
//                                # refused with averaging:K (workers train at a constant rate)
//                                #  type: constant (default) | step | cosine
//                                #  every_epochs: E  step only, required, > 0; the rate is
//                                #                   lr * gamma^floor(p / E)
//                                #  gamma: 0.1       step only, in (0, 1]; default 0.1
//                                #  min_lr: 0        cosine only, in [0, learning_rate); default
//                                #                   0; the rate is min_lr + (lr - min_lr) *
//                                #                   (1 + cos(pi * min(p, epochs) / epochs)) / 2
//                                #  warmup_epochs: 0 any type, >= 0; default 0: the rate times
//                                #                   min(1, p / warmup_epochs)
//   batch_size: 64               # this or batch: required; in [1, 1048576]: the batch of
//                                # each of the initial workers; under bsp and ssp the global
//                                # batch (batch_size × workers.initial) stays fixed whatever
//                                # the workers: the members of a step share its samples (so a
//                                # rescale changes speed, not what is learnt); under asp and
//                                # averaging:K, each worker's batch
//   batch: {global: 256}         # bsp, ssp: every step covers 256 samples, shared out among
//                                # its members, whatever their number
//   batch: {per_worker: 64}      # each worker 64 samples a step: the global batch grows and
//                                # shrinks with the workers
//   batch: {per_worker: 64, lr_scaling: linear}   # bsp, ssp: the rate as configured at the
//                                # initial workers' global batch, times the step's samples over
//                                # it (linear) or its square root (sqrt), or by AdaScale's gain
//                                # estimated from the gradients' noise (adascale,
//                                # ps/adascale.hpp); none (default) keeps it
//   epochs: 5                    # required; >= 1
//   consistency: bsp             # bsp (default) | averaging:K (K >= 1: each worker trains K
//                                # local steps, the shards average the models by samples)
//                                # | ssp:S (S >= 0: a worker runs at most S steps ahead of the
//                                # slowest) | asp (each gradient applied alone, on arrival)
//   seed: 42                     # unsigned 64-bit; default 1
//   workers: {min: 1, max: 4, initial: 2}   # or N, meaning min = max = initial = N; default 1
//   shards: 2                    # same forms as workers; default 1
//   gpus_per_worker: 0           # >= 0; default 0: cuda workers share the devices round-robin;
//                                # g >= 1: g devices of its own each (worker/device_assignment.hpp)
//   backend: auto                # auto (default) | cpu | cuda
//   precision: fp32              # fp32 (default) | tf32 | bf16: the operands of the workers'
//                                # matrix products rounded to that format (on cuda: tensor
//                                # cores), float accumulation; parameters, pushes and the
//                                # shards' optimizer stay float32 (kernels/precision.hpp)
//   slice_size: 16384            # floats per slice of the parameter vector, >= 1; default 16384
//                                # (1024 for a model with embeddings: its rows ride with the
//                                # keys, docs/sparse.md)
//   host_reduce: false           # true: the workers of one host sum their gradients and push
//                                # once per host (worker/host_reducer.hpp; on cuda on the
//                                # devices with NCCL, worker/device_reducer.hpp); default false
//   placement: dltap             # spread | best-fit | random | dltap: where a cluster puts the
//                                # job's parts (scheduler/placement.hpp); default: the
//                                # scheduler's (coach-node --placement)
//   replicas: 1                  # copies of each shard in a cluster, in [1, 4]; default 1: no
//                                # backup. R > 1: R - 1 backups on other nodes take over when
//                                # the primary's node is lost (docs/design.md "Shard
//                                # replicas"); needs consistency bsp
//   function: {deadline_s: 30, memory_mb: 512, chunks_per_invocation: 8}
//                                # optional: run workers as bounded functions
//                                (worker/invocation.hpp); # deadline_s and memory_mb >= 0, 0 =
//                                unlimited, default 0; # chunks_per_invocation in [1, 1000000],
//                                default 8
//   checkpoint: {path: ck.safetensors, every_s: 600}
//                                # optional: checkpoints (parameters and optimizer state) at
//                                # epochs' ends (a relative path as dataset.path's); every_s
//                                # >= 0, default 0: every epoch (spec/checkpoint_config.hpp)
//                                # In a cluster, the scheduler's store keeps one every every_s
//                                # (default 60; path optional there)
//   output: model.safetensors    # optional: the final model, written when the job succeeds
//                                # (a relative path as dataset.path's; --save wins)
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
// invalid_argument for averaging:K with optimizer adam or adamw (the workers run the optimizer
// locally, without state across rounds).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "ps/change_kind.hpp"
#include "ps/consistency.hpp"
#include "ps/optimizer.hpp"
#include "sparse/row_optimizer.hpp"
#include "spec/checkpoint_config.hpp"
#include "worker/dataset.hpp"
#include "worker/external_layout.hpp"
#include "worker/model_config.hpp"

namespace coach::scheduler {

/// How many of something (workers, shards) a job may have: 1 <= min <= initial <= max.
struct count_range {
  int min = 1;
  int max = 1;
  int initial = 1;  ///< how many the job starts with
};

/// Whether a step's samples are fixed (global) or grow with the workers (per_worker).
enum class batch_kind { global, per_worker };

/// How shards combine the gradients of a step (DESIGN.md "Data path of one step").
/// The `consistency:` field (ps/consistency.hpp: the modes' rules).
using consistency_kind = ps::consistency_kind;
using consistency_config = ps::consistency_config;

/// Limits of a worker run as a serverless function. 0 means unlimited.
struct function_limits {
  double deadline_s = 0;                    ///< wall-clock seconds per invocation
  std::uint64_t memory_mb = 0;              ///< memory cap per invocation
  std::uint32_t chunks_per_invocation = 8;  ///< steps one invocation trains, then exits (>= 1)
};

/// One elastic change of a job's schedule (`schedule:`), taking effect at step `at_step`.
struct schedule_action {
  using kind_type = ps::change_kind;
  std::int64_t at_step = 1;
  kind_type kind = kind_type::workers;
  std::uint32_t value = 0;  ///< workers: the new count; shards: the new count; migrate: shard id
  friend bool operator==(const schedule_action&, const schedule_action&) = default;
};

/// A validated job spec.
/// The default slice_size of a model with embedding tables (model.embeddings): its sparse rows
/// ride with the dense keys (ps/shard_rows.hpp), and small slices spread them over the shards.
inline constexpr std::size_t sparse_slice_size = 1024;

struct job_spec {
  std::string name;
  worker::dataset_config dataset;  ///< path is absolute
  worker::model_config model;
  ps::optimizer_config optimizer;
  /// The optimizer of the embedding tables' rows (model.embeddings), applied by the shards.
  sparse::row_optimizer_config sparse_optimizer;
  /// Per worker at the initial worker count (batch: global) or always (per_worker).
  int batch_size = 64;
  batch_kind batch = batch_kind::global;
  /// batch_kind::global: the samples every step covers, whatever the workers (the members of a
  /// step share them); 0 otherwise.
  int global_batch = 0;
  int batch_line = 0;  ///< the line of batch_size or batch
  /// Whether every step covers global_batch samples whatever its members: batch_kind::global
  /// under bsp or ssp (a spec changed after parsing to asp or averaging:K runs per worker).
  bool fixed_global_batch() const noexcept {
    return batch == batch_kind::global && global_batch > 0 &&
           (consistency.kind == consistency_kind::bsp || consistency.kind == consistency_kind::ssp);
  }
  int epochs = 1;
  consistency_config consistency;
  std::uint64_t seed = 1;
  count_range workers;
  count_range shards;
  int gpus_per_worker = 0;
  kernels::backend_kind backend = kernels::backend_kind::auto_select;
  kernels::math_precision precision = kernels::math_precision::fp32;  ///< the workers' products
  std::size_t slice_size = 16384;           ///< floats per slice of the parameter vector
  bool host_reduce = false;                 ///< one push per host (worker/host_reducer.hpp)
  std::string placement;                    ///< a placement's name; empty: the scheduler's
  std::uint32_t replicas = 1;               ///< copies of each shard (1: no backup)
  std::optional<function_limits> function;  ///< set: workers run as bounded functions
  std::vector<schedule_action> schedule;    ///< by at_step, ascending
  /// Checkpoints at epochs' ends (`checkpoint: {path, every_s}`; path absolute); none when the
  /// path is empty. `coach train --checkpoint` overrides it.
  checkpoint_config checkpoint;
  /// The final model as a .safetensors file (`output:`, absolute), written by `coach train`
  /// (unless --save names another) and by a cluster's scheduler when the job succeeds. Empty:
  /// none.
  std::string output;
};

/// "bsp", "ssp:3", "asp", "averaging:4".
std::string to_string(const consistency_config& c);

/// The rule a job's shards apply: the spec's optimizer, except under averaging:K, where the
/// workers run it locally (worker/local_averaging.hpp) and a shard subtracts the samples-weighted
/// mean of the members' deltas: plain SGD with learning rate 1 and no weight decay.
ps::optimizer_config shard_optimizer(const job_spec& spec);

/// shard_optimizer(spec) completed with what only the job's data and model know, as a shard is
/// built with it: samples_per_epoch = `train_rows` (the schedule's unit), epochs = spec.epochs,
/// and the statistic ranges (batch norm's running statistics: ascending, disjoint), which stay
/// empty under averaging:K, where the statistics are averaged like every other key.
ps::optimizer_config shard_optimizer(const job_spec& spec, std::uint64_t train_rows,
                                     std::vector<ps::statistic_range> statistics = {});

/// Parses and validates a spec. `source_name` (a file name, or e.g. "<stdin>") starts every error
/// message. Never throws.
/// The most workers a job can keep busy on `rows` training rows (at least 1): under a fixed
/// global batch, one sample a worker a step (global_batch, and no more than the rows); else one
/// batch of batch_size a worker (the batches in an epoch, a last partial one counted). A
/// worker beyond it has nothing to train, and a thousand of them only use memory (issue 37).
std::uint32_t max_useful_workers(const job_spec& spec, std::size_t rows);

/// The error for asking `workers` workers when max_useful_workers is lower (`what` names where
/// the count came from: "--workers", "workers.initial"), or nothing.
std::optional<error> too_many_workers(const job_spec& spec, std::size_t rows, std::uint32_t workers,
                                      std::string_view what);

/// A layer type of `model: {layers: [...]}` and the fields its map takes besides `type`.
struct layer_type_fields {
  std::string_view type;
  std::span<const std::string_view> fields;
};

/// Every layer type the parser accepts, with its fields: README.md's table of layers is
/// checked against it (tests/unit/spec/layer_table_test.cpp), so the docs cannot drift.
std::span<const layer_type_fields> layer_types();

result<job_spec> parse_job_spec(std::string_view yaml_text, std::string_view source_name);

/// As above, resolving the relative paths of the spec (dataset.path, checkpoint.path, output)
/// against `base_dir`: the spec file's folder, which `coach submit` sends with the spec to a
/// daemon (docs/wire.md, SubmitRequest.baseDir); empty: this process's working directory. A
/// relative script path (model: {script: ...}) resolves against `spec_dir`, or base_dir when
/// that is empty (the same folder for a spec read from a file).
result<job_spec> parse_job_spec(std::string_view yaml_text, std::string_view source_name,
                                std::string_view base_dir, std::string_view spec_dir = {});

/// Reads the file at `path` and parses it (errors name the file), its relative paths resolved
/// against the file's folder, wherever the command runs. not_found when it is missing.
result<job_spec> load_job_spec(const std::string& path);

/// A script's model once its first process registered `layout`: a script that declares
/// embedding tables (coach.torch.Embedding) runs as a model with model.embeddings does, under
/// consistency bsp, without host_reduce (unsupported, one line naming the field and
/// the tables), and gets slice_size 1024 (sparse_slice_size) where the spec leaves the default;
/// `sparse_optimizer:` is for a script that declares tables (invalid_argument otherwise).
result<void> apply_script_tables(job_spec& spec, const worker::external_layout& layout);

/// A model section alone (YAML text of the map under `model:`), checked as in a spec: what a
/// saved model's metadata keeps (worker/model_file.hpp). Errors as parse_job_spec's.
result<worker::model_config> parse_model_yaml(std::string_view yaml_text,
                                              std::string_view source_name);

}  // namespace coach::scheduler
