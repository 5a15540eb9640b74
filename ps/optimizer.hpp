#pragma once
// ps::optimizer: the update rule a shard applies to its slices, with its per-parameter state.
// The update is elementwise, so cutting the parameter vector into slices and shards never changes
// the result (DESIGN.md "Shard map").
//
// Learning-rate schedule: its position is the EPOCH PROGRESS p = samples applied so far /
// samples per epoch, a double. p does not depend on how many workers share a step (elastic jobs
// change that) nor on the consistency mode, and every shard sees every step's samples, so every
// shard computes the same rate for a step. The rate of a step is taken at p BEFORE that step's
// samples are added, computed in double and rounded to float once (learning_rate_at).
//
// Statistic ranges: keys the optimizer does not train (batch norm's running mean and variance,
// which live in the parameter vector so that they move with the slices). For them the shard
// folds the samples-weighted mean of what the workers pushed into the running value:
// w = (1 - momentum) * w + momentum * (g / samples), elementwise (ps/shard.hpp).

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "ps/shard_map.hpp"

namespace coach::ps {

/// Which rule: plain SGD, SGD with heavy-ball momentum, or Adam (AdamW is adam with
/// adam.decoupled set: the same state, the weight decay decoupled from the gradient).
enum class optimizer_kind { sgd, momentum, adam };

/// Parses "sgd" | "momentum" | "adam"; anything else is invalid_argument naming the value.
result<optimizer_kind> parse_optimizer_kind(std::string_view text);
/// The spec spelling of a kind ("sgd", "momentum", "adam").
std::string_view to_string(optimizer_kind kind) noexcept;

/// The shape of a learning-rate schedule (`optimizer.schedule.type`).
enum class schedule_kind { constant, step, cosine };

/// The spec spelling of a schedule kind ("constant", "step", "cosine").
std::string_view to_string(schedule_kind kind) noexcept;

/// A learning-rate schedule over the epoch progress p (see the top of this file). With lr the
/// configured rate:
///   constant: lr
///   step:     lr * gamma ^ floor(p / every_epochs)
///   cosine:   min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * min(p, epochs) / epochs))
/// each times the warm-up factor min(1, p / warmup_epochs) (1 when warmup_epochs is 0): the
/// rate rises linearly from 0 at p = 0 to the schedule's own at p = warmup_epochs, so the very
/// first step has rate 0 when there is a warm-up.
/// How the rate follows a step's samples when the global batch changes with the workers
/// (spec `batch: {per_worker: N, lr_scaling: ...}`): none keeps it; linear multiplies it by
/// step samples / reference_batch (Goyal et al. 2017), sqrt by the square root of that;
/// adascale by the gain the step's gradient noise gives (ps/adascale.hpp), applied by the shard.
enum class lr_scaling_kind { none, linear, sqrt, adascale };

struct lr_schedule {
  schedule_kind kind = schedule_kind::constant;
  double every_epochs = 1.0;   ///< step: epochs between two decays, > 0
  double gamma = 0.1;          ///< step: factor of each decay, in (0, 1]
  double min_lr = 0.0;         ///< cosine: rate reached at the last epoch, in [0, lr)
  double warmup_epochs = 0.0;  ///< every kind: length of the linear warm-up in epochs, >= 0
  friend bool operator==(const lr_schedule&, const lr_schedule&) = default;
};

/// Keys of the flat vector holding running statistics (batch norm's running mean or variance),
/// folded in with `momentum` instead of trained (see the top of this file).
struct statistic_range {
  key_range keys;
  float momentum = 0.1f;  ///< weight of the new batch value, in [0, 1] (PyTorch's momentum)
  friend bool operator==(const statistic_range&, const statistic_range&) = default;
};

/// The optimizer of a job, as given in its spec (`optimizer:` section), completed by whoever
/// builds a shard with what the spec cannot say (samples_per_epoch, epochs, statistics:
/// scheduler::shard_optimizer(spec, train_rows, statistics)).
struct optimizer_config {
  optimizer_kind kind = optimizer_kind::sgd;
  kernels::sgd_options sgd;    ///< used by sgd and momentum (momentum = 0 for plain sgd)
  kernels::adam_options adam;  ///< used by adam (adam.decoupled: AdamW)
  lr_schedule schedule;        ///< scales the learning rate of sgd, momentum and adam alike
  /// Samples of one epoch (the training set's rows): the unit of the schedule's position.
  /// 0 only where the rate does not depend on it (!scheduled()).
  std::uint64_t samples_per_epoch = 0;
  std::int64_t epochs = 1;  ///< the job's epochs: the cosine schedule's length (>= 1)
  /// Keys folded in as running statistics, not trained: ascending, disjoint, non-empty.
  std::vector<statistic_range> statistics;
  /// Gradient-norm clipping (spec `optimizer.clip_norm`): the largest norm of a worker's mean
  /// gradient; 0 = off. Applied by the workers (worker/gradient_clip.hpp), where the whole
  /// gradient exists; a shard ignores it.
  float clip_norm = 0.0f;
  /// The rate as configured holds for steps of reference_batch samples; lr_scaling says how it
  /// follows others. reference_batch 0: never scaled.
  lr_scaling_kind lr_scaling = lr_scaling_kind::none;
  std::uint64_t reference_batch = 0;

  /// `rate` for a step of `step_samples` (lr_scaling); exactly `rate` when not scaled or when
  /// the step has reference_batch samples.
  float scaled_rate(float rate, std::uint64_t step_samples) const noexcept;

  /// Floats of state kept per parameter: 0 (sgd), 1 (momentum), 2 (adam, adamw).
  std::size_t state_per_param() const noexcept;
  /// The spec's `type`: "sgd", "momentum", "adam" or "adamw".
  std::string_view type_name() const noexcept;
  /// The configured learning rate: adam.learning_rate for adam, sgd.learning_rate otherwise.
  float base_learning_rate() const noexcept;
  /// Whether the rate changes with the progress (a schedule other than constant, or a warm-up).
  bool scheduled() const noexcept;
  /// Epoch progress after `samples_applied` samples: samples_applied / samples_per_epoch, in
  /// double (0 when samples_per_epoch is 0).
  double progress(std::uint64_t samples_applied) const noexcept;
  /// The learning rate at epoch progress p (the formulas of lr_schedule), computed in double
  /// and rounded to float once; exactly base_learning_rate() when !scheduled().
  float learning_rate_at(double progress) const noexcept;
};

}  // namespace coach::ps
