#pragma once
// actors::dashboard: what the scheduler's node serves at / (--metrics-listen): the page, its
// script and style (dashboard/, compiled in), and /api/state, one JSON object rendered from the
// records `coach nodes` and `coach status --json` show, with each job's curves (its epochs'
// figures) and its history (coach logs). Plain functions: the HTTP server and the scheduler
// actor that call them are elsewhere (apps/coach_node.cpp, cluster_scheduler.cpp).

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/control.hpp"
#include "report/job_report.hpp"
#include "scheduler/job_status.hpp"

namespace coach::actors {

/// One job as the dashboard shows it.
struct dashboard_job {
  scheduler::job_status status;
  std::vector<scheduler::epoch_report> curve;
  std::vector<scheduler::job_event> events;
};

/// Points of a curve /api/state sends at most (about: the last epoch always comes too).
inline constexpr std::size_t max_curve_points = 500;

/// The state /api/state serves. `admin`: the page may change the policy and cancel jobs. A
/// curve longer than max_curve_points is thinned evenly.
std::string dashboard_state(const std::vector<dashboard_job>& jobs,
                            const std::vector<node_status>& nodes, std::string_view policy,
                            bool admin);

/// A file of the page by name ("index.html", "app.js", "style.css"): its content type and
/// bytes; empty for any other name.
std::pair<std::string_view, std::string_view> dashboard_asset(std::string_view name);

}  // namespace coach::actors
