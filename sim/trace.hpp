#pragma once
// scheduler::trace: the job traces and model curves coach-sim reads, and the generator that
// writes traces (examples/traces/README.md documents both formats with examples).
//
// A trace is CSV: a header naming the columns (any order), then one job per line.
//   submit_time  required  seconds from the trace's start, >= 0
//   duration     required  seconds the job runs at num_gpus GPUs (and num_shards shards), > 0
//   num_gpus     required  GPUs the job asks for, an integer >= 1 (one worker per GPU)
//   model        optional  a name in the models file; empty or absent: "default"
//   min_gpus     optional  fewest GPUs an elastic job runs with; default 1
//   max_gpus     optional  most GPUs an elastic job may grow to; default max_scale × num_gpus
//   num_shards   optional  shards the job asks for; default: the best for num_gpus under its
//                          model (a user who tuned the job)
//   elastic      optional  1 (default) or 0: a job that runs only as asked
// Lines that start with '#' and blank lines are skipped; cells are trimmed; no quoting.
//
// A models file is CSV too: columns model, theta0, theta1, theta2, theta3, theta4: the true
// epoch time t(w, p) = θ0 + θ1/w + θ2·w/p + θ3·w + θ4·p in seconds (perf_model.hpp explains
// the terms), with the parameter server's traffic inside one host. Two optional columns add
// the network (sim/sim.hpp): param_mb, the model's parameters in MB (10^6 bytes), and
// steps, the steps of one epoch at one worker (w workers take steps/w each); absent or 0: no
// network time. The simulator runs each job at 1/(t + network time) epochs per second; the
// coach policy must learn the curve from the epochs it sees.
//
// Errors name the file and the line: parse_error for a malformed cell or row, invalid_argument
// for a value out of range or an unknown column, not_found for a missing file, io_error for an
// unreadable one.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "report/perf_model.hpp"

namespace coach::scheduler {

/// One job of a trace.
struct trace_job {
  std::size_t line = 0;    ///< 1-based line in its file (for messages); 0 if generated
  double submit_time = 0;  ///< seconds
  double duration = 0;     ///< seconds at num_gpus GPUs
  int num_gpus = 1;
  std::string model = "default";
  std::optional<int> min_gpus;
  std::optional<int> max_gpus;
  std::optional<int> num_shards;
  bool elastic = true;
};

/// A parsed trace, jobs in file order.
struct trace {
  std::string source;  ///< the file name, for messages
  std::vector<trace_job> jobs;
};

/// The true speed curve of one model.
struct model_curve {
  std::string name;
  perf_theta theta{};
  double param_mb = 0;  ///< parameters, MB; 0: no network time
  double steps = 0;     ///< steps of one epoch at one worker
};

/// The models a trace may name.
struct model_table {
  std::vector<model_curve> models;
  /// The curve of `name`, or nullptr.
  const model_curve* find(std::string_view name) const noexcept;
  /// The table used without a models file: one model, "default", θ = (10, 600, 4, 1, 2)
  /// (a 600 s epoch on one GPU that scales to about 7x at 16 GPUs).
  static model_table builtin();
};

/// Parses a trace (see the file comment). Errors name `source` and the line.
result<trace> parse_trace(std::string_view text, std::string_view source);
/// Reads and parses the trace at `path`.
result<trace> load_trace(const std::string& path);

/// Parses a models file. Errors name `source` and the line; a model listed twice is one.
result<model_table> parse_models(std::string_view text, std::string_view source);
/// Reads and parses the models file at `path`.
result<model_table> load_models(const std::string& path);

/// How generate_trace draws jobs (defaults give a few hours of a busy 64-GPU cluster).
struct trace_generator_options {
  std::size_t jobs = 400;
  std::uint64_t seed = 1;
  int nodes = 8;  ///< the cluster the arrival rate is scaled to
  int gpus_per_node = 8;
  /// Offered load: GPU-seconds asked for per GPU-second of the cluster, over the arrivals.
  double load = 1.0;
  double median_duration_s = 1800;  ///< durations are log-normal with this median
  double duration_sigma = 1.2;      ///< and this spread (of the log)
  double min_duration_s = 60;
  double max_duration_s = 12 * 3600;
};

/// Draws a trace: GPUs from {1: 45%, 2: 20%, 4: 20%, 8: 10%, 16: 5%} (at most the cluster's
/// GPUs), log-normal durations, models uniformly from `models`, Poisson arrivals at the rate
/// that offers `load`. A pure function of its arguments (own generators, not <random>'s
/// distributions, whose output differs between standard libraries).
std::vector<trace_job> generate_trace(const trace_generator_options& options,
                                      const model_table& models);

/// The CSV of `jobs` (columns submit_time, duration, num_gpus, model), after `comment` lines
/// (each prefixed with "# ").
std::string format_trace(std::span<const trace_job> jobs, std::string_view comment = {});

}  // namespace coach::scheduler
