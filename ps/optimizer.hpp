#pragma once
// ps::optimizer: the update rule a shard applies to its slices, with its per-parameter state.
// The update is elementwise, so cutting the parameter vector into slices and shards never changes
// the result (DESIGN.md "Shard map").

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.hpp"
#include "kernels/backend.hpp"

namespace coach::ps {

/// Which rule: plain SGD, SGD with heavy-ball momentum, or Adam.
enum class optimizer_kind { sgd, momentum, adam };

/// Parses "sgd" | "momentum" | "adam"; anything else is invalid_argument naming the value.
result<optimizer_kind> parse_optimizer_kind(std::string_view text);
/// The spec spelling of a kind ("sgd", "momentum", "adam").
std::string_view to_string(optimizer_kind kind) noexcept;

/// The optimizer of a job, as given in its spec (`optimizer:` section).
struct optimizer_config {
  optimizer_kind kind = optimizer_kind::sgd;
  kernels::sgd_options sgd;    ///< used by sgd and momentum (momentum = 0 for plain sgd)
  kernels::adam_options adam;  ///< used by adam
  /// Floats of state kept per parameter: 0 (sgd), 1 (momentum), 2 (adam).
  std::size_t state_per_param() const noexcept;
};

}  // namespace coach::ps
