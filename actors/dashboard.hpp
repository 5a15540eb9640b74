#pragma once
// actors::dashboard: what the scheduler's node serves at / (--metrics-listen): the page with
// the state at the time it was asked embedded (so it shows the cluster at once, before its first
// poll), its script and style (dashboard/, compiled in), and /api/state, one JSON object
// rendered from the records `coach nodes` and `coach status --json` show, with each job's curves
// (its epochs' figures and where it is in the current epoch) and its history (coach logs). A
// node that is not the scheduler serves worker_page at / instead. Plain functions: the HTTP
// server and the scheduler actor that call them are elsewhere (apps/coach_node.cpp,
// cluster_scheduler.cpp). docs/operations.md, "Dashboard".

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

/// How long a lost node (its heartbeats stopped) stays listed, marked lost, before the
/// dashboard drops it: 10 minutes after its last heartbeat.
inline constexpr double lost_node_listed_s = 600;

/// The state /api/state serves. `admin`: the page may change the policy and cancel jobs. A
/// curve longer than max_curve_points is thinned evenly. Jobs come newest first (by id); a
/// job's `loss` is null until its first progress report and its `test_accuracy` until its first
/// epoch ends; `live` is where its current epoch
/// stands ({epoch: finished epochs + the share of this one's samples done, train_loss}) while
/// it runs. Nodes come as the node table lists them, each with `state` alive, draining or lost;
/// a lost node is dropped lost_node_listed_s after its last heartbeat.
std::string dashboard_state(const std::vector<dashboard_job>& jobs,
                            const std::vector<node_status>& nodes, std::string_view policy,
                            bool admin);

/// The page served at / and /index.html: dashboard/index.html with `state_json` (what
/// dashboard_state returned; empty: none, the page then asks /api/state at once) embedded as
/// its first state, so the page is drawn as it loads.
std::string dashboard_page(std::string_view state_json);

/// The page a coach-node that is not the scheduler serves at /: it says so, names the node and
/// the scheduler's address it joined, and where the dashboard is (the scheduler's node's
/// --metrics-listen address).
std::string worker_page(std::string_view node_name, std::string_view scheduler_address);

/// A file of the page by name ("index.html", "app.js", "style.css"): its content type and
/// bytes; empty for any other name.
std::pair<std::string_view, std::string_view> dashboard_asset(std::string_view name);

}  // namespace coach::actors
