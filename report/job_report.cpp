#include "report/job_report.hpp"

#include <cmath>

#include "report/perf_model.hpp"
#include "report/perf_tracker.hpp"

namespace coach::scheduler {

json to_json_value(const change_report& c) {
  return json{{"what", c.what},
              {"step", c.step},
              {"join_ms", json_figure(c.join_ms)},
              {"transfer_ms", json_figure(c.transfer_ms)},
              {"moved_bytes", c.moved_bytes},
              {"gap_ms", json_figure(c.gap_ms)},
              {"step_ms", json_figure(c.step_ms)},
              {"pause_ms", json_figure(c.pause_ms)},
              {"step_spread_ms", json_figure(c.step_spread_ms)},
              {"samples_per_s_before", json_figure(c.samples_per_s_before)},
              {"samples_per_s_after", json_figure(c.samples_per_s_after)},
              {"prepare_ms", json_figure(c.prepare_ms)}};
}

json to_json_value(const worker::invocation_counts& i) {
  return json{{"started", i.started},
              {"completed", i.completed},
              {"timed_out", i.timed_out},
              {"out_of_memory", i.out_of_memory},
              {"failed", i.failed},
              {"tasks", i.tasks},
              {"peak_memory_bytes", i.peak_memory_bytes}};
}

std::string to_json(const job_result& r) {
  json out{{"name", r.name},
           {"cancelled", r.cancelled},
           {"workers", r.workers},
           {"shards", r.shards},
           {"backend", r.backend},
           {"num_params", r.num_params},
           {"bytes_moved", r.bytes_moved},
           {"steps", r.steps},
           {"seconds", json_figure(r.seconds)},
           {"test_accuracy", json_figure(r.test_accuracy)}};
  json epochs = json::array();
  for (const auto& e : r.epochs)
    epochs.push_back(json{{"epoch", e.epoch + 1},
                          {"train_loss", json_figure(e.train_loss)},
                          {"test_loss", json_figure(e.test_loss)},
                          {"test_accuracy", json_figure(e.test_accuracy)},
                          {"seconds", json_figure(e.seconds)},
                          {"samples_per_s", json_figure(e.samples_per_s)},
                          {"samples", e.samples},
                          {"steps", e.steps},
                          {"compute_seconds", json_figure(e.compute_seconds)},
                          {"workers", e.workers},
                          {"shards", e.shards}});
  // A click-through-rate model's (embedding tables): the test set's AUC and log loss.
  for (std::size_t i = 0; i < r.epochs.size(); ++i)
    if (!std::isnan(r.epochs[i].test_auc)) {
      epochs[i]["test_auc"] = json_figure(r.epochs[i].test_auc);
      epochs[i]["test_log_loss"] = json_figure(r.epochs[i].test_log_loss);
    }
  for (std::size_t i = 0; i < r.epochs.size(); ++i) {
    const auto& segs = r.epochs[i].segments;
    if (segs.size() < 2) continue;  // one allocation throughout: the epoch's own figures
    json list = json::array();
    for (const auto& s : segs)
      list.push_back(json{{"workers", s.workers},
                          {"shards", s.shards},
                          {"first_step", s.first_step},
                          {"steps", s.steps},
                          {"samples", s.samples},
                          {"seconds", json_figure(s.seconds)}});
    epochs[i]["segments"] = std::move(list);
  }
  for (std::size_t i = 0; i < r.epochs.size(); ++i)
    if (r.epochs[i].lr_gain > 0) epochs[i]["lr_gain"] = json_figure(r.epochs[i].lr_gain);
  out["epochs"] = std::move(epochs);
  json changes = json::array();
  for (const auto& c : r.changes) changes.push_back(to_json_value(c));
  out["changes"] = std::move(changes);
  if (r.invocations) out["invocations"] = to_json_value(*r.invocations);
  // The performance model as the scheduler would have fitted it to these epochs, in order: its
  // error on each epoch and on each change of allocation (report/perf_tracker.hpp).
  perf_model model;
  perf_tracker tracker(1, r.name);
  for (const auto& e : r.epochs) tracker.epoch(e, model);
  out["model"] = tracker.to_json();
  return out.dump(2) + "\n";
}

std::optional<coach::error> diverged(const epoch_report& e, double learning_rate) {
  if (std::isfinite(e.train_loss)) return std::nullopt;
  return coach::error{
      errc::invalid_argument,
      coach::format("training diverged: the training loss is {} after epoch {} (the parameters "
                    "are no longer numbers); lower optimizer.learning_rate ({:g}) or check the "
                    "data",
                    std::isnan(e.train_loss) ? "nan" : "infinite", e.epoch + 1, learning_rate)};
}

}  // namespace coach::scheduler
