// scheduler/job_registry_views.cpp: what coach status shows of a job: its snapshot, why it
// waits, and the performance model's view of it (job_registry.hpp).
#include <algorithm>

#include "common/json.hpp"
#include "scheduler/job_registry.hpp"
#include "scheduler/placement.hpp"

namespace coach::scheduler {

job_status job_registry::snapshot(const registered_job& job, perf_model* model,
                                  std::string_view policy) const {
  job_status s = job.status_;
  if (job.running()) s.seconds = now() - job.started_;
  s.waiting = why_waiting(job);
  s.orders = job.orders_.describe([this](std::uint32_t h) { return nodes_.name(h); });
  if (model) s.model_json = model_json(job, *model, policy);
  if (job.launched_ && !job.over()) {
    const auto w = job.alloc_.worker_hosts();
    const auto sh = job.alloc_.shard_hosts();
    if (!w.empty() && !sh.empty()) s.aggregation_degree = aggregation_degree(w, sh);
  }
  return s;
}

std::string job_registry::why_waiting(const registered_job& job) const {
  if (!job.waiting()) return {};
  // What other programs keep busy on the nodes that take work (0 under --cpu-accounting
  // reserved): the reason names that accounting where it holds CPUs back.
  double external = 0;
  for (const auto& [host, n] : nodes_.nodes())
    if (nodes_.usable(host))
      external +=
          std::clamp(n.last.resources.cpus_external, 0.0, double(n.last.resources.cpus_total));
  return scheduler::why_waiting(job, cluster(), jobs_, external);
}

std::string model_json(const registered_job& job, perf_model& model, std::string_view policy) {
  const std::uint64_t id = job.id();
  const auto& name = job.rec().model;
  json theta = nullptr;
  if (auto t = model.job_theta(id, name)) {
    theta = json::array();
    for (double x : *t) theta.push_back(json_figure(x));
  }
  const int w = int(job.status().workers), p = int(job.status().shards);
  json predicted = nullptr;
  if (w >= 1 && p >= 1)
    if (auto x = model.predict(id, name, w, p)) predicted = json_figure(*x);
  json out{{"model", name},
           {"theta", std::move(theta)},
           {"workers", w},
           {"shards", p},
           {"predicted_epoch_s", std::move(predicted)}};
  // The job's record against the model: predictions, their error, each change's.
  const auto record = job.perf() ? job.perf()->to_json() : perf_tracker(id, name).to_json();
  for (const auto& [key, value] : record.items()) out[key] = value;
  out["policy"] = policy;
  out["perf_model"] = model.to_json();
  return out.dump();
}

}  // namespace coach::scheduler
