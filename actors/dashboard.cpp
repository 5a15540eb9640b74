#include "actors/dashboard.hpp"

#include <nlohmann/json.hpp>

#include <cmath>

namespace coach::actors {
namespace {

nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
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
    const auto& r = n.last.resources;
    out["nodes"].push_back({{"name", n.last.name},
                            {"address", n.last.address},
                            {"alive", n.alive},
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
  for (const auto& d : jobs) {
    const auto& s = d.status;
    nlohmann::json j{{"job", s.job},
                     {"name", s.name},
                     {"state", std::string(scheduler::to_string(s.state))},
                     {"epochs_done", s.epochs_done},
                     {"epochs_total", s.epochs_total},
                     {"test_accuracy", num(s.test_accuracy)},
                     {"loss", num(s.loss)},
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
    j["events"] = nlohmann::json::array();
    for (const auto& e : d.events)
      j["events"].push_back({{"seq", e.seq}, {"time", e.time}, {"text", e.text}});
    out["jobs"].push_back(std::move(j));
  }
  return out.dump();
}

}  // namespace coach::actors
