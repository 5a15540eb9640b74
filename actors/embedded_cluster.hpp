#pragma once
// actors::train_embedded: the whole cluster in this process (scheduler, job master, shards,
// workers, evaluator in one CAF actor system over the in-process transport). `coach train`,
// the end-to-end tests and train_bench run jobs through it.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/job_context.hpp"
#include "actors/transport.hpp"
#include "common/error.hpp"
#include "report/job_report.hpp"
#include "spec/checkpoint_config.hpp"
#include "spec/checkpoint_file.hpp"
#include "spec/job_spec.hpp"

namespace coach::actors {

/// A checkpoint written (or not) at the end of an epoch.
struct checkpoint_written {
  std::uint32_t epochs_completed = 0;
  std::int64_t step = 0;  ///< the checkpoint's version: the step a resume starts at
  std::string path;
  std::optional<coach::error> failure;  ///< set: the file could not be written (the run goes on)
};

/// Options of an embedded run. Zero or empty means "as the job spec says".
struct train_options {
  std::uint32_t workers = 0;  ///< overrides the spec's workers.initial; must lie in [min, max]
  std::uint32_t shards = 0;   ///< overrides the spec's shards.initial; must lie in [min, max]
  std::optional<kernels::backend_kind> backend;      ///< overrides the spec's backend
  std::optional<kernels::math_precision> precision;  ///< overrides the spec's precision
  /// Called on the calling thread a few times a second while an epoch trains.
  std::function<void(const scheduler::progress_event&)> on_progress;
  /// Called on the calling thread after each epoch is evaluated.
  std::function<void(const scheduler::epoch_report&)> on_epoch;
  /// When it becomes true, the job stops at the next step boundary (result.cancelled).
  const std::atomic<bool>* stop = nullptr;
  /// CAF scheduler threads for message handling (workers compute on threads of their own).
  std::size_t caf_threads = 2;
  /// Fault injection (tests): wraps the in-process transport of the run, e.g. in a
  /// faulty_transport (actors/faulty_transport.hpp) that crashes a worker; empty: none.
  std::function<std::shared_ptr<transport>(std::shared_ptr<transport>)> wrap_transport;
  /// Test hook (bench/consistency_bench): how many times as long worker `rank` takes over step
  /// `step` (>= 1); empty: full speed.
  std::function<double(std::uint32_t rank, std::int64_t step)> slowdown;
  /// Test hook: each completed step's samples and loss (actors/job_context.hpp step_trace),
  /// called on the job master's thread.
  std::function<void(const step_trace&)> on_step;
  /// Test hook: >= 0 cancels the job as step `cancel_at_step` opens (result.steps is then
  /// that step): where a Ctrl-C between steps would stop it, at a known step; -1: never.
  std::int64_t cancel_at_step = -1;
  /// Checkpoints at epochs' ends (spec/checkpoint_config.hpp); an empty path: none.
  scheduler::checkpoint_config checkpoint;
  /// A checkpoint file to resume from (coach train --resume): the run goes on from its epoch
  /// and step with its parameters and optimizer state, to the spec's epochs, and under BSP ends
  /// bitwise where the run it continues would have (same spec, workers and seed). workers and
  /// shards 0 then mean the checkpoint's. Empty: from the seed.
  std::string resume;
  /// Called on the calling thread once the checkpoint to resume from is read and checked.
  std::function<void(const scheduler::checkpoint_info&)> on_resume;
  /// Called on the calling thread after each checkpoint, written or failed (after on_epoch).
  std::function<void(const checkpoint_written&)> on_checkpoint;
  /// A script's model: the interpreter that runs it (empty: worker::default_python()).
  std::string python;
};

/// Runs `spec` to completion (or cancellation) and returns its result, final parameters
/// included. Errors: the data set cannot be loaded, a count lies outside the spec's range, the
/// backend cannot run here, the host lacks the resources, the checkpoint's directory does not
/// exist, or the checkpoint to resume from cannot be read or does not fit the spec
/// (scheduler::load_checkpoint).
result<scheduler::job_result> train_embedded(const scheduler::job_spec& spec,
                                             const train_options& opt = {});

}  // namespace coach::actors
