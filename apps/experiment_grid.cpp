// coach experiment scaling and prediction: the grid of (workers, shards) measured with real jobs
// (apps/experiment_studies.hpp).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/experiment_studies.hpp"
#include "common/format.hpp"
#include "report/experiment.hpp"

namespace coach::apps::experiment {
namespace {

namespace ex = scheduler::experiment;
using namespace std::chrono_literals;

/// The study's job: the base spec with its name, epochs, allocation (fixed: no policy resizes
/// it) and placement set.
struct job_shape {
  int workers = 1;
  int shards = 1;
  std::string placement = "spread";
};

result<std::string> job_yaml(const YAML::Node& base, const experiment_options& o,
                             const std::string& name, const job_shape& s) {
  YAML::Node n = YAML::Clone(base);
  n["name"] = name;
  n["epochs"] = o.epochs;
  n["workers"] = s.workers;
  n["shards"] = s.shards;
  n["placement"] = s.placement;
  n["backend"] = "cpu";
  if (o.train_limit > 0) n["dataset"]["train_limit"] = o.train_limit;
  YAML::Emitter e;
  e << n;
  if (!e.good())
    return fail(errc::invalid_argument, "cannot write the job spec: {}", e.GetLastError());
  return std::string(e.c_str());
}

/// Runs `copies` copies of one shape at once; their typical epoch times (ex::typical_epoch).
result<std::vector<double>> run_shape(session& s, const YAML::Node& base,
                                      const experiment_options& o, const job_shape& shape,
                                      int copies) {
  std::vector<std::uint64_t> jobs;
  for (int c = 0; c < copies; ++c) {
    const auto name = coach::format("{}-w{}-p{}-x{}-{}", shape.placement, shape.workers,
                                    shape.shards, copies, c + 1);
    auto yaml = job_yaml(base, o, name, shape);
    if (!yaml) return std::unexpected(yaml.error());
    auto id = s.submit(*yaml, name);
    if (!id) return std::unexpected(id.error());
    jobs.push_back(*id);
  }
  auto done = s.wait_all(jobs);
  if (!done) return std::unexpected(done.error());
  std::vector<double> out;
  for (const auto& st : *done)
    if (auto t = ex::typical_epoch(st.epoch_seconds)) out.push_back(*t);
  return out;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

std::string fixed(double v) {
  return coach::format("{:.3f}", v);
}

/// 1-4 workers with 1 and 2 shards, in an order that covers the range first (its corners, then
/// between them), so that the prediction study's first half spans what the rest asks about.
const std::vector<job_shape> grid = {{1, 1}, {4, 2}, {1, 2}, {4, 1},
                                     {2, 1}, {3, 2}, {3, 1}, {2, 2}};

std::string shape_label(const job_shape& s) {
  return coach::format("{}w/{}p", s.workers, s.shards);
}

/// The grid with `copies` jobs at once (and, for `single`, each shape on one node as well).
/// Named series of epoch times, one value per grid point, in the order measured.
using grid_series = std::vector<std::pair<std::string, std::vector<std::optional<double>>>>;

result<grid_series> measure_grid(session& s, const YAML::Node& base, const experiment_options& o,
                                 const std::vector<int>& concurrency, bool single) {
  grid_series series;
  for (int copies : concurrency) {
    series.emplace_back(coach::format("{} job(s) at once", copies),
                        std::vector<std::optional<double>>{});
    auto& row = series.back().second;
    for (const auto& shape : grid) {
      // --repeat runs of the shape, one after the other: the median of their means (this
      // machine's noise is tens of percent from one run to the next).
      std::vector<double> runs;
      for (int k = 0; k < std::max(1, o.repeat); ++k) {
        auto t = run_shape(s, base, o, shape, copies);
        if (!t) return std::unexpected(t.error());
        runs.push_back(mean(*t));
      }
      std::sort(runs.begin(), runs.end());
      const double m = runs.size() % 2 ? runs[runs.size() / 2]
                                       : (runs[runs.size() / 2 - 1] + runs[runs.size() / 2]) / 2;
      row.push_back(m);
      say(coach::format("{} x{}: epoch {:.3f} s", shape_label(shape), copies, m));
    }
  }
  if (single) {
    series.emplace_back("1 job on one node", std::vector<std::optional<double>>{});
    auto& row = series.back().second;
    for (auto shape : grid) {
      shape.placement = "best-fit";  // every part on the first node with room: one node
      auto t = run_shape(s, base, o, shape, 1);
      if (!t) return std::unexpected(t.error());
      row.push_back(mean(*t));
      say(coach::format("{} on one node: epoch {:.3f} s", shape_label(shape), mean(*t)));
    }
  }
  return series;
}

}  // namespace

int scaling(session& s, const YAML::Node& base, const experiment_options& o) {
  auto series = measure_grid(s, base, o, {1, 2, 3}, true);
  if (!series) return say(series.error().message), 1;
  std::vector<std::string> header{"allocation"};
  for (const auto& [name, _] : *series) header.push_back(name + ": epoch s (speed-up)");
  // Rows and chart by workers, then shards (the grid is measured in another order).
  std::vector<std::size_t> order(grid.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [](std::size_t a, std::size_t b) {
    return std::pair(grid[a].workers, grid[a].shards) < std::pair(grid[b].workers, grid[b].shards);
  });
  const std::size_t base_point = order.front();  // 1 worker, 1 shard: the speed-ups' base
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i : order) {
    std::vector<std::string> row{shape_label(grid[i])};
    for (const auto& [name, ys] : *series) {
      const auto& y = ys[i];
      const auto& first = ys[base_point];
      row.push_back(y && first && *y > 0 ? coach::format("{} ({:.2f}x)", fixed(*y), *first / *y)
                                         : std::string("-"));
    }
    rows.push_back(row);
  }
  auto table = ex::markdown_table(header, rows);
  if (const auto why = too_few_epochs(o)) table += "\n**Warning**: " + *why + ".\n";
  std::printf("%s", table.c_str());
  write(fs::path(o.out) / "scaling.md", table);
  std::vector<ex::chart_series> cs;
  for (const auto& [name, ys] : *series) {
    cs.push_back({name, {}});
    for (std::size_t i : order) cs.back().y.push_back(ys[i]);
  }
  std::vector<std::string> labels;
  for (std::size_t i : order) labels.push_back(shape_label(grid[i]));
  write(
      fs::path(o.out) / "scaling.svg",
      ex::line_chart_svg("Epoch time by allocation", "workers / shards", "epoch (s)", labels, cs));
  return 0;
}

int prediction(session& s, const YAML::Node& base, const experiment_options& o) {
  auto series = measure_grid(s, base, o, {1}, false);
  if (!series) return say(series.error().message), 1;
  const auto& ys = series->front().second;
  std::vector<ex::measured_point> points;
  for (std::size_t i = 0; i < grid.size(); ++i)
    points.push_back({grid[i].workers, grid[i].shards, ys[i].value_or(0)});
  const std::size_t k = (points.size() + 1) / 2;
  const auto r = ex::predict_from_first(points, k);
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : r.points)
    rows.push_back(
        {coach::format("{}w/{}p", p.measured.workers, p.measured.shards), fixed(p.measured.epoch_s),
         fixed(p.predicted_s),
         p.fitted ? "fitted"
                  : coach::format("{:.1f}%", 100 * std::abs(p.predicted_s - p.measured.epoch_s) /
                                                 p.measured.epoch_s)});
  auto table = ex::markdown_table({"allocation", "measured epoch s", "predicted s", "error"}, rows);
  table += coach::format(
      "\nFitted on the first {} of {} points. Mean error on the others: **{:.1f}%**. Fastest "
      "measured: {}w/{}p ({:.3f} s); predicted fastest: {}w/{}p ({:.3f} s measured): regret "
      "**{:.1f}%**.\n",
      k, points.size(), 100 * r.mean_abs_rel_error, r.best.workers, r.best.shards, r.best.epoch_s,
      r.predicted_best.workers, r.predicted_best.shards, r.predicted_best.epoch_s, 100 * r.regret);
  if (const auto why = too_few_epochs(o)) table += "\n**Warning**: " + *why + ".\n";
  std::printf("%s", table.c_str());
  write(fs::path(o.out) / "prediction.md", table);
  std::vector<std::optional<double>> measured, predicted;
  std::vector<std::string> labels;
  for (const auto& p : r.points) {
    measured.push_back(p.measured.epoch_s);
    predicted.push_back(p.predicted_s);
    labels.push_back(coach::format("{}w/{}p", p.measured.workers, p.measured.shards));
  }
  write(fs::path(o.out) / "prediction.svg",
        ex::line_chart_svg(coach::format("Measured and predicted (fitted on the first {})", k),
                           "workers / shards", "epoch (s)", labels,
                           {{"measured", measured}, {"predicted", predicted}}));
  return 0;
}

}  // namespace coach::apps::experiment
