#pragma once
// The studies of `coach experiment` (apps/coach_experiment.hpp), each on a session to a running
// cluster: each prints its table on stdout, writes its table and chart to o.out and returns the
// command's exit code (0; 1 when a job failed or the cluster could not be reached).

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>

#include "apps/coach_experiment.hpp"
#include "apps/experiment_session.hpp"

namespace coach::apps::experiment {

/// A grid of (workers, shards), each with 1, 2 and 3 copies at once and alone on one node.
int scaling(session& s, const YAML::Node& base, const experiment_options& o);
/// The grid one job at a time; the model fitted on its first half predicts the rest.
int prediction(session& s, const YAML::Node& base, const experiment_options& o);
/// A static and an elastic job, each while a program that is not Coach's holds the CPUs.
int dynamic(session& s, const YAML::Node& base, const experiment_options& o);
/// Five jobs 1 s apart under each policy, swapped live between the runs.
int policies(session& s, const YAML::Node& base, const experiment_options& o);
/// CPU slots of each local node: --cpus, else the study's.
int study_cpus(const experiment_options& o);

/// The epochs a job of scaling or prediction needs for its time to mean training: its first
/// epoch holds the job's start (tens of ms, the whole epoch of a small job) and is left out
/// when there are more (report/experiment.hpp, typical_epoch), the median of the rest taken.
inline constexpr int min_timed_epochs = 3;

/// For scaling and prediction with fewer than min_timed_epochs epochs: why their figures
/// (epoch times, the model's error) measure start-up more than training; else nothing.
std::optional<std::string> too_few_epochs(const experiment_options& o);

}  // namespace coach::apps::experiment
