#pragma once
// scheduler::experiment: the arithmetic of `coach experiment` (apps/coach_experiment.cpp runs
// the jobs): what a study's measurements say, as plain functions over plain records, and the
// Markdown tables and SVG charts it writes. docs/experiments.md has the studies and their
// results.
//
//   - prediction: fit the performance model (perf_model) on the first k measured (workers,
//     shards) points, predict the others, and report the mean |predicted − observed| / observed
//     and the regret of taking the allocation the model ranks fastest instead of the fastest
//     measured (1 − its speed / the best speed).
//   - policies: from each job's submit, start and end times, the makespan (first submit to last
//     end), the mean turnaround (end − submit) and the mean wait (start − submit).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace coach::scheduler::experiment {

/// One measured allocation: its typical epoch time.
struct measured_point {
  int workers = 1;
  int shards = 1;
  double epoch_s = 0;
};

/// The typical epoch of a run: the median of its epochs after the first (which loads and warms
/// up); the first alone when it has one. nullopt for none.
std::optional<double> typical_epoch(std::span<const double> epoch_seconds);

/// One point predicted from the fit.
struct predicted_point {
  measured_point measured;
  double predicted_s = 0;
  bool fitted = false;  ///< among the first k (the model saw it)
};

struct prediction_study {
  std::size_t fit_points = 0;
  std::vector<predicted_point> points;  ///< every point, in the order given
  double mean_abs_rel_error = 0;        ///< over the points not fitted
  measured_point best;                  ///< the fastest measured
  measured_point predicted_best;        ///< the one the model predicts fastest (as measured)
  double regret = 0;                    ///< 1 − best.epoch_s / predicted_best.epoch_s
};

/// Fits on points[0, k) and predicts every point. REQUIRES: 1 <= k < points.size().
prediction_study predict_from_first(std::span<const measured_point> points, std::size_t k);

/// One job of the policies study.
struct job_times {
  std::string name;
  double submitted = 0;  ///< seconds since the study began
  double started = 0;
  double finished = 0;
};

struct policy_figures {
  double makespan_s = 0;
  double mean_turnaround_s = 0;
  double mean_wait_s = 0;
};
policy_figures policy_metrics(std::span<const job_times> jobs);

/// A Markdown table: a header row, a separator, the rows (cells as given).
std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows);

/// A line chart: one polyline per series over the x labels, a y axis from 0, a legend.
/// Self-contained SVG (no fonts or scripts fetched).
struct chart_series {
  std::string name;
  std::vector<std::optional<double>> y;  ///< one per x label; nullopt: no point
};
std::string line_chart_svg(const std::string& title, const std::string& x_title,
                           const std::string& y_title, const std::vector<std::string>& x_labels,
                           const std::vector<chart_series>& series, int width = 720,
                           int height = 420);

}  // namespace coach::scheduler::experiment
