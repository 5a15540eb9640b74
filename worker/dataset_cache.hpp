#pragma once
// worker::load_dataset_shared: one loaded copy of a data set per process. The scheduler, the
// node agent and every job on a node that train on the same data set (same files, split and
// limits) share one read-only dataset_pair; it is freed when the last holder lets go.
//
// Threads: safe to call from any thread. Two callers that ask for the same data set at once may
// both load it; the first to finish is kept and both get that one.

#include <cstdint>
#include <memory>

#include "common/error.hpp"
#include "worker/dataset.hpp"

namespace coach::worker {

/// load_dataset(cfg, seed), loaded once per process while someone holds the result.
/// Errors: those of load_dataset (nothing is kept).
result<std::shared_ptr<const dataset_pair>> load_dataset_shared(const dataset_config& cfg,
                                                                std::uint64_t seed);

/// A data set as load_dataset_shared_tracked hands it out.
struct shared_dataset {
  std::shared_ptr<const dataset_pair> data;
  /// True when this call read the files; false when it got the copy another holder in this
  /// process keeps (the one that loaded it has had its warnings to print).
  bool loaded_here = false;
};

/// load_dataset_shared, also saying whether this call loaded the data set: a caller that prints
/// the data set's warnings leaves them to the holder that loaded a copy it finds.
/// Errors: those of load_dataset (nothing is kept).
result<shared_dataset> load_dataset_shared_tracked(const dataset_config& cfg, std::uint64_t seed);

}  // namespace coach::worker
