#include "actors/dashboard.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace coach::actors {
namespace {

nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

/// `text` safe inside an HTML element or a double-quoted attribute.
std::string html_escape(std::string_view text) {
  std::string out;
  for (const char c : text) switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  return out;
}

}  // namespace

std::string dashboard_state(const std::vector<dashboard_job>& jobs,
                            const std::vector<node_status>& nodes, std::string_view policy,
                            bool admin) {
  nlohmann::json out;
  out["policy"] = std::string(policy);
  out["admin"] = admin;
  out["nodes"] = nlohmann::json::array();
  for (const auto& n : nodes) {
    // A lost node is listed (marked lost) for a while, then dropped: a node that left for good
    // is not shown forever.
    if (!n.alive && !(n.seconds_since <= lost_node_listed_s)) continue;
    const auto& r = n.last.resources;
    out["nodes"].push_back({{"name", n.last.name},
                            {"address", n.last.address},
                            {"alive", n.alive},
                            {"state", !n.alive          ? "lost"
                                      : n.last.draining ? "draining"
                                                        : "alive"},
                            {"draining", n.last.draining},
                            {"cpus_total", r.cpus_total},
                            {"cpus_free", num(r.cpus_free)},
                            {"cpus_external", num(r.cpus_external)},
                            {"memory_total", r.memory_total},
                            {"memory_free", r.memory_free},
                            {"gpus_total", r.gpus_total.size()},
                            {"gpus_free", r.gpus_free.size()},
                            {"parts", n.last.actors_running},
                            {"seconds_since_heartbeat", num(n.seconds_since)}});
  }
  out["jobs"] = nlohmann::json::array();
  // Newest first: the job just submitted is at the top, above every older one.
  std::vector<const dashboard_job*> newest_first;
  for (const auto& d : jobs) newest_first.push_back(&d);
  std::stable_sort(newest_first.begin(), newest_first.end(),
                   [](const auto* a, const auto* b) { return a->status.job > b->status.job; });
  for (const auto* dp : newest_first) {
    const auto& d = *dp;
    const auto& s = d.status;
    // No loss before the first progress report (a queued job), no accuracy before the first
    // epoch ends: null, not 0.
    const bool finished_epoch = s.epochs_done > 0 || !d.curve.empty();
    const bool has_loss = finished_epoch || s.samples_done > 0;
    nlohmann::json j{
        {"job", s.job},
        {"name", s.name},
        {"state", std::string(scheduler::to_string(s.state))},
        {"epochs_done", s.epochs_done},
        {"epochs_total", s.epochs_total},
        {"test_accuracy", finished_epoch ? num(s.test_accuracy) : nlohmann::json(nullptr)},
        {"loss", has_loss ? num(s.loss) : nlohmann::json(nullptr)},
        {"samples_per_s", num(s.samples_per_second)},
        {"workers", s.workers},
        {"shards", s.shards},
        {"worker_nodes", s.worker_nodes},
        {"shard_nodes", s.shard_nodes},
        {"placement", s.placement},
        {"aggregation_degree", num(s.aggregation_degree)},
        {"waiting", s.waiting},
        {"error", s.error}};
    j["curve"] = nlohmann::json::array();
    j["changes_at"] = nlohmann::json::array();
    // At most about max_curve_points a curve (the page polls every 2 s): every stride-th epoch,
    // the last always; a change is marked wherever it falls.
    const std::size_t stride = d.curve.size() / max_curve_points + 1;
    for (std::size_t i = 0; i < d.curve.size(); ++i) {
      const auto& e = d.curve[i];
      if (i > 0 && (e.workers != d.curve[i - 1].workers || e.shards != d.curve[i - 1].shards))
        j["changes_at"].push_back(double(e.epoch) + 0.5);
      if (i % stride != 0 && i + 1 != d.curve.size()) continue;
      j["curve"].push_back({{"epoch", e.epoch + 1},
                            {"train_loss", num(e.train_loss)},
                            {"test_loss", num(e.test_loss)},
                            {"test_accuracy", num(e.test_accuracy)},
                            {"seconds", num(e.seconds)},
                            {"workers", e.workers},
                            {"shards", e.shards}});
    }
    // Where the current epoch stands: the page plots it between the finished epochs' points,
    // so a curve moves before the first epoch ends.
    j["live"] = nullptr;
    if (s.state == scheduler::job_state::running && has_loss && s.samples_epoch > 0 &&
        std::isfinite(s.loss))
      j["live"] = {{"epoch", double(s.epochs_done) +
                                 std::min(1.0, double(s.samples_done) / double(s.samples_epoch))},
                   {"train_loss", s.loss}};
    j["events"] = nlohmann::json::array();
    for (const auto& e : d.events)
      j["events"].push_back({{"seq", e.seq}, {"time", e.time}, {"text", e.text}});
    out["jobs"].push_back(std::move(j));
  }
  return out.dump();
}

std::string dashboard_page(std::string_view state_json) {
  std::string page(dashboard_asset("index.html").second);
  // Inside <script type="application/json">, "</script>" in a job's name would end the element:
  // '<' (which JSON has inside strings only) travels as its escape.
  std::string state;
  for (const char c : state_json.empty() ? std::string_view("null") : state_json)
    if (c == '<')
      state += "\\u003c";
    else
      state += c;
  const std::string_view marker = "<script id=\"initial-state\" type=\"application/json\">";
  const auto at = page.find(marker);
  const auto end = at == std::string::npos ? at : page.find("</script>", at);
  if (end == std::string::npos) return page;
  page.replace(at + marker.size(), end - at - marker.size(), state);
  return page;
}

std::string worker_page(std::string_view node_name, std::string_view scheduler_address) {
  const auto name = html_escape(node_name);
  const auto sched = html_escape(scheduler_address);
  return "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Coach: " +
         name +
         " is not the scheduler</title>\n</head>\n<body>\n<header><h1>Coach</h1><span>node <b>" +
         name +
         "</b></span></header>\n<main id=\"not-scheduler\">\n<p>This coach-node is not the "
         "scheduler: it runs workers and shards for the scheduler it joined at <code>" +
         sched +
         "</code>.</p>\n<p>The dashboard is served by the scheduler's coach-node, on the HTTP "
         "address given to its <code>--metrics-listen</code> (http://HOST:PORT/ of that "
         "node). This node serves its own figures at <a href=\"/metrics\">/metrics</a>.</p>\n"
         "</main>\n</body>\n</html>\n";
}

}  // namespace coach::actors
