#pragma once
// apps/coach_train.hpp: `coach train`, the whole cluster in this process
// (actors/embedded_cluster.hpp) on one job spec, with its progress on stderr. Split from
// apps/coach.cpp, which parses the command line and calls run_train.

#include <cstdint>
#include <optional>
#include <string>

namespace coach::apps {

/// What `coach train` is asked besides the spec and the counts.
struct train_flags {
  std::string backend, precision, report_path, save_path;
  std::string resume;             ///< --resume FILE
  std::string events;             ///< --events FILE
  std::string checkpoint;         ///< --checkpoint FILE
  std::optional<double> every_s;  ///< --checkpoint-every SECONDS
  std::string python;             ///< --python PATH: a script model's interpreter
};

/// `coach train`: runs the job spec at `spec_path` with `workers` and `shards` (0: the spec's),
/// showing each epoch's progress on stderr, and writes the outputs `flags` names. SIGINT or
/// SIGTERM stops the run (a second leaves at once). Returns the exit code: 0 done; 1 the job
/// failed or the report could not be written; 2 bad input (spec, flags, an output path);
/// 130 stopped or cancelled.
int run_train(const std::string& spec_path, std::uint32_t workers, std::uint32_t shards,
              const train_flags& flags);

}  // namespace coach::apps
