// `coach experiment STUDY` (apps/coach_experiment.hpp): runs real training jobs on a cluster and
// writes what they measured.
//
//   scaling     a grid of (workers, shards), each with 1, 2 and 3 copies of the job at once,
//               spread over the nodes, and each alone on one node: epoch time and speed-up.
//   prediction  the grid alone (one job at a time); the performance model fitted on its first
//               half predicts the rest: error and regret (report/experiment.hpp).
//   dynamic     a static and an elastic job, each while a program that is not Coach's holds
//               the host's CPUs for a while: time, accuracy, workers held.
//   policies    five elastic jobs 1 s apart under fifo, elastic-fifo, round-robin and coach,
//               set live between the runs: makespan, mean turnaround and wait.

#include "coach_experiment.hpp"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include <yaml-cpp/yaml.h>

#include "actors/curve_keys.hpp"
#include "apps/experiment_session.hpp"
#include "apps/experiment_studies.hpp"
#include "common/format.hpp"

namespace coach::apps {

using namespace experiment;

namespace experiment {

/// CPU slots of each local node: --cpus, else the study's. dynamic: near the host's cores, so
/// that what the program takes is what the jobs lack; policies: 2, so that the five jobs
/// (12 workers asked) contend for the 6 slots of three nodes; else 8.
int study_cpus(const experiment_options& o) {
  if (o.cpus > 0) return o.cpus;
  if (o.study == "dynamic") return int(std::max(1u, std::thread::hardware_concurrency())) + 2;
  return o.study == "policies" ? 2 : 8;
}

}  // namespace experiment

namespace experiment {

std::optional<std::string> too_few_epochs(const experiment_options& o) {
  if (o.epochs >= min_timed_epochs || (o.study != "scaling" && o.study != "prediction"))
    return std::nullopt;
  return coach::format(
      "--epochs {} is too short to time: a job's first epoch includes its start, so it is left "
      "out when there are more; the epoch times, and the model's error fitted on them, mean "
      "something from --epochs {} (the median of {} timed epochs a job)",
      o.epochs, min_timed_epochs, min_timed_epochs - 1);
}

}  // namespace experiment

int run_experiment(const experiment_options& o) {
  if (o.study != "scaling" && o.study != "prediction" && o.study != "dynamic" &&
      o.study != "policies") {
    std::fprintf(stderr,
                 "coach: experiment: unknown study '%s' (known: scaling, prediction, dynamic, "
                 "policies)\n",
                 o.study.c_str());
    return 2;
  }
  // Said before the study runs (and again under its table): a short run measures start-up.
  if (const auto why = too_few_epochs(o)) say("warning: " + *why);
  const int cpus = study_cpus(o);
  YAML::Node base;
  try {
    base = YAML::LoadFile(o.spec);
  } catch (const YAML::Exception& e) {
    std::fprintf(stderr, "coach: experiment: %s: %s\n", o.spec.c_str(), e.what());
    return 2;
  }
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) {
    std::fprintf(stderr, "coach: experiment: cannot create %s: %s\n", o.out.c_str(),
                 ec.message().c_str());
    return 2;
  }
  auto security = actors::load_security(o.key_file, "", o.server_key_file);
  if (!security) return say(security.error().message), 2;
  for (const auto& w : security->warnings) say("warning: " + w);
  local_cluster cluster;
  std::string at = o.at;
  if (at.empty()) {
    const auto logs = fs::path(o.out) / "logs";
    fs::create_directories(logs, ec);
    // round-robin's turns: a few seconds, as the study's jobs last seconds.
    const std::vector<std::string> sched_args{"--rr-slice", "5"};
    auto started =
        cluster.start(o.study == "dynamic" ? 1 : o.local, cpus, logs, o.key_file, sched_args);
    if (!started) return say(started.error().message), 1;
    at = *started;
    say(coach::format("{} coach-node(s) of {} CPU slots on this machine, scheduler at {}",
                      o.study == "dynamic" ? 1 : o.local, cpus, at));
  }
  // The study's jobs are the spec's: its relative paths mean its folder, as in coach train.
  const std::string spec_dir = fs::absolute(o.spec, ec).parent_path().string();
  auto s = session::open(at, std::move(*security), spec_dir);
  if (!s) return say(s.error().message), 2;
  if (auto up = s->await_nodes(!o.at.empty() || o.study == "dynamic" ? 1 : std::size_t(o.local));
      !up)
    return say(up.error().message), 1;
  const int rc = o.study == "dynamic"    ? dynamic(*s, base, o)
                 : o.study == "policies" ? policies(*s, base, o)
                 : o.study == "scaling"  ? scaling(*s, base, o)
                                         : prediction(*s, base, o);
  // The study's jobs are its own: they leave the cluster's list with it.
  s->forget_jobs();
  return rc;
}

}  // namespace coach::apps
