#pragma once
// scheduler::checkpoint_file: a job's checkpoint as a file, written by `coach train
// --checkpoint` and read by `coach train --resume` (docs/design.md "Checkpoints").
//
// A checkpoint is a saved model (worker/model_file.hpp): the same tensors and metadata as
// `coach train --save`, so `coach eval`, `coach predict` and PyTorch read it as one. Besides,
// it holds the shards' optimizer state as tensors named after PyTorch's optimizer state, one
// per parameter tensor NAME (batch norm's running statistics have none), shaped and laid out
// as that tensor:
//   optimizer.momentum_buffer.NAME                      momentum (v = momentum v + g)
//   optimizer.exp_avg.NAME, optimizer.exp_avg_sq.NAME   adam, adamw (m and v, not corrected)
// and the metadata entry `coach.checkpoint`, a JSON object (checkpoint_info): the epochs
// completed, the step counters the optimizer and the data order go on from, and what of the
// run a resume must agree with. `coach.epochs` is the epochs completed.
//
// Written like every safetensors file here: to a temporary file, flushed to the disk, renamed
// over the old one (worker::write_safetensors), so a crash never leaves half a checkpoint.

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "ps/training_state.hpp"
#include "report/job_report.hpp"
#include "spec/job_spec.hpp"
#include "worker/dataset.hpp"
#include "worker/model_file.hpp"
#include "worker/network.hpp"

namespace coach::scheduler {

/// The final model of `spec`'s job: result.params as a saved model (worker/model_file.hpp) with
/// the data set's class names and transform and coach.name, coach.epochs and
/// coach.test_accuracy, written to `path` (atomically): `coach train --save` and a spec's
/// `output:`. Errors: invalid_argument when the result's parameters do not fit the model on
/// the result's data shape, io_error naming the path.
result<void> write_model(const std::string& path, const job_spec& spec, const job_result& result);

/// The network a saved model (or checkpoint) file holds: its coach.model section and
/// coach.classes, and for a model with embedding tables coach.features and coach.fields (the
/// data set's columns its tables were resolved against, as write_model records them). Errors
/// (invalid_argument, naming `path` and the key): metadata missing or not counts; unsupported
/// for a script's model (its framework loads it); the network's own errors.
result<worker::network> network_of_model_file(const worker::safetensors_file& file,
                                              const std::string& path);

/// The `coach.checkpoint` metadata of a checkpoint.
struct checkpoint_info {
  std::uint32_t epochs_completed = 0;  ///< epochs [0, epochs_completed) trained: the next one
  std::int64_t version = 0;            ///< steps applied: the resumed job's first step
  std::int64_t updates = 0;            ///< steps applied with samples (Adam's t)
  std::uint64_t samples_applied = 0;   ///< the learning-rate schedule's position
  std::uint32_t workers = 0;           ///< workers at the checkpoint (a resume's default)
  std::uint32_t shards = 0;            ///< shards at the checkpoint (a resume's default)
  std::uint64_t seed = 0;              ///< the spec's seed (the data set's split and order)
  std::string optimizer;               ///< the spec's optimizer type: sgd, momentum, adam, adamw
  std::size_t state_per_param = 0;     ///< optimizer floats per key on the shards (0, 1, 2)
  std::uint64_t train_samples = 0;     ///< rows of the training set (the schedule's unit)
  int batch_size = 0;                  ///< the spec's (informative)
  int epochs = 0;                      ///< the spec's epochs (informative)
  std::string consistency;             ///< the spec's consistency, e.g. "bsp" (informative)
  friend bool operator==(const checkpoint_info&, const checkpoint_info&) = default;
};

/// The metadata of a checkpoint of `spec`'s job at `state`, after `epochs_completed` epochs,
/// with `workers` workers and `shards` shards, on a training set of `train_samples` rows.
checkpoint_info describe_checkpoint(const job_spec& spec, const ps::training_state& state,
                                    std::uint32_t epochs_completed, std::uint32_t workers,
                                    std::uint32_t shards, std::uint64_t train_samples);

/// The checkpoint file of `state` for the network `net` of `spec`'s job: pack_model's tensors
/// and metadata (class names and transform of `labels`), the optimizer tensors, `info` as
/// `coach.checkpoint`, coach.name and coach.epochs, and `extra`.
/// REQUIRES: ps::check(state, net.num_params(), info.state_per_param) passed.
worker::safetensors_file pack_checkpoint(const worker::network& net,
                                         const ps::training_state& state,
                                         const checkpoint_info& info, const std::string& name,
                                         const worker::model_labels& labels,
                                         const std::map<std::string, std::string>& extra = {});

/// pack_checkpoint written to `path` (atomically). Errors: io_error naming the path.
result<void> write_checkpoint(const std::string& path, const worker::network& net,
                              const ps::training_state& state, const checkpoint_info& info,
                              const std::string& name, const worker::model_labels& labels,
                              const std::map<std::string, std::string>& extra = {});

/// The `coach.checkpoint` entry of a file. Errors: invalid_argument when the file has none (a
/// model saved by --save: no optimizer state), parse_error when it does not parse.
result<checkpoint_info> checkpoint_info_of(const worker::safetensors_file& file);

/// A checkpoint read back for a resume.
struct loaded_checkpoint {
  checkpoint_info info;
  ps::training_state state;
};

/// Reads the checkpoint `path` to resume `spec`'s job, whose network on its data set is `net`
/// and whose training set has `train_samples` rows. Every error is one line starting with the
/// path: not_found (no file), parse_error (not a safetensors file, metadata that does not
/// parse), invalid_argument (not a checkpoint; another model, optimizer type, optimizer state,
/// training set size or seed than the spec's; every epoch of the spec trained already; a
/// tensor missing or of another shape).
result<loaded_checkpoint> load_checkpoint(const std::string& path, const job_spec& spec,
                                          const worker::network& net, std::uint64_t train_samples);

}  // namespace coach::scheduler
