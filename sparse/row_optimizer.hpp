#pragma once
// sparse::row_optimizer: the update a shard applies to each row of an embedding table that a step
// touched, and only to those ("lazy"): a row no batch of the step looked up keeps its values and
// its state, as TensorFlow's LazyAdam and PyTorch's SparseAdam / sparse Adagrad do. Touching
// every row of a 10^8-row table each step is what sparse tables exist to avoid.
//
// With g a touched row's gradient for the step (the workers' sums, added in rank order, times
// 1 / the step's samples), lr the step's rate and wd the weight decay (L2, added to g),
// elementwise:
//   sgd        w -= lr * g
//   adagrad    a += g * g;  w -= lr * g / (sqrt(a) + epsilon)   (Duchi et al. 2011; PyTorch's form,
//              a starts at initial_accumulator)
//   lazy_adam  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//              w -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + epsilon)
//              (Kingma & Ba with PyTorch's arrangement of the bias correction), t the job's step
//              number counted from 1 (every step the shard applies, touched or not: the global
//              step of TensorFlow's LazyAdam, so a row's update depends on when it is touched,
//              not on how often, and every shard computes the same t).
// The per-step factors (the corrections) are computed in double and rounded to float once per
// step (row_step), so every shard, and a shard that took the rows over, updates alike.
//
// State per element: sgd none, adagrad 1 (a), lazy_adam 2 (m, v), stored after the row's values.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/error.hpp"

namespace coach::sparse {

enum class row_optimizer_kind { sgd, adagrad, lazy_adam };

/// "sgd" | "adagrad" | "lazy_adam"; anything else: invalid_argument naming the value and these.
result<row_optimizer_kind> parse_row_optimizer_kind(std::string_view text);
/// The spec spelling of a kind.
std::string_view to_string(row_optimizer_kind kind) noexcept;

/// The optimizer of a job's sparse tables (spec `sparse_optimizer:`), with documented defaults.
struct row_optimizer_config {
  row_optimizer_kind kind = row_optimizer_kind::adagrad;
  float learning_rate = 0.01f;
  float weight_decay = 0.0f;         ///< L2 on the touched rows: g += weight_decay * w
  float epsilon = 1e-10f;            ///< adagrad's default (PyTorch's); lazy_adam: 1e-8 usual
  float initial_accumulator = 0.0f;  ///< adagrad: a's value at a row's creation, >= 0
  float beta1 = 0.9f;                ///< lazy_adam, in [0, 1)
  float beta2 = 0.999f;              ///< lazy_adam, in [0, 1)

  /// Floats of state per element of a row: 0, 1 or 2.
  std::size_t state_per_element() const noexcept;
  /// invalid_argument naming the field when a value is out of its range.
  result<void> validate() const;
  friend bool operator==(const row_optimizer_config&, const row_optimizer_config&) = default;
};

/// The factors of one step, the same for every row and every shard.
struct row_step {
  float learning_rate = 0;
  float step_size = 0;       ///< lazy_adam: lr / (1 - b1^t)
  float inv_sqrt_bias2 = 0;  ///< lazy_adam: 1 / sqrt(1 - b2^t)
};

/// The factors of step number `t` (>= 1) at rate `learning_rate`.
row_step make_row_step(const row_optimizer_config& c, float learning_rate, std::int64_t t);

/// Writes the initial optimizer state of a new row into `state` (dim * state_per_element floats).
void init_row_state(const row_optimizer_config& c, std::span<float> state);

/// Updates one row: `values` (dim floats) and `state` (dim * state_per_element floats) with its
/// step gradient `grad` (dim floats, already scaled by 1 / samples).
void update_row(const row_optimizer_config& c, const row_step& s, std::span<float> values,
                std::span<float> state, std::span<const float> grad);

}  // namespace coach::sparse
