#pragma once
// `coach experiment STUDY`: the founding questions answered with real training jobs on a
// cluster of coach-nodes, one already running (--at) or one started here for the study
// (--local N). Each study writes a Markdown table and an SVG chart to --out
// (docs/experiments.md). The arithmetic is report/experiment.hpp; this runs the jobs.

#include <cstdint>
#include <string>

namespace coach::apps {

struct experiment_options {
  std::string study;  ///< scaling | prediction | dynamic | policies
  std::string at;     ///< a running scheduler; empty: --local
  int local = 3;      ///< coach-nodes started here when `at` is empty
  /// --cpus of each local node (slots, may exceed the host's); 0: the study's (8; policies: 2;
  /// dynamic: the host's cores + 2, so that what a program takes is what the jobs lack).
  int cpus = 0;
  double hog_s = 20;  ///< dynamic: how long the program holds the CPUs after each submit
  /// dynamic: the elastic job's most workers; 0: a worker a core of this host.
  int max_workers = 0;
  std::string spec = "examples/fashion-mlp.yaml";
  int epochs = 3;
  int repeat = 1;  ///< scaling, prediction: runs of each grid point; the median counts
  std::uint64_t train_limit = 20000;  ///< 0: the spec's
  std::string out = "experiments";
  /// This client's key (--key, else $COACH_KEY; given on to local nodes) and the scheduler
  /// node's public key (--server-key, else $COACH_SERVER_KEY), as the job API commands take.
  std::string key_file;
  std::string server_key_file;
};

/// Runs the study; prints progress on stderr and the table on stdout. Exit code as the job API
/// commands: 0, 1 (a job failed, the cluster cannot be reached), 2 (bad arguments).
int run_experiment(const experiment_options& o);

}  // namespace coach::apps
