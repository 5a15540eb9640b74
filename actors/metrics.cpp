#include "actors/metrics.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <map>
#include <utility>

namespace coach::actors {
namespace {

using labels = std::vector<std::pair<std::string_view, std::string>>;

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round trip
  return ec == std::errc{} ? std::string(buf, end) : "NaN";
}

/// One metric family: its HELP and TYPE lines, then its samples.
class family {
 public:
  family(std::string& out, std::string_view name, std::string_view type, std::string_view help)
      : out_(out), name_(name) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void sample(const labels& ls, double value) {
    out_ += name_;
    if (!ls.empty()) {
      out_ += '{';
      for (std::size_t i = 0; i < ls.size(); ++i) {
        if (i) out_ += ',';
        out_ += ls[i].first;
        out_ += "=\"";
        out_ += prometheus_label(ls[i].second);
        out_ += '"';
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += number(value);
    out_ += '\n';
  }

 private:
  std::string& out_;
  std::string_view name_;
};

/// A gauge family with one sample per element of `items`.
template <class Items, class Labels, class Value>
void gauges(std::string& out, std::string_view name, std::string_view help, const Items& items,
            Labels&& labels_of, Value&& value_of) {
  family f(out, name, "gauge", help);
  for (const auto& i : items) f.sample(labels_of(i), value_of(i));
}

/// A number from the performance model's JSON view of a job; NaN when it has none.
double model_number(const nlohmann::json& model, const char* key) {
  const auto it = model.find(key);
  return it != model.end() && it->is_number() ? it->get<double>() : std::nan("");
}

}  // namespace

std::string prometheus_label(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string node_metrics(const node_heartbeat& hb) {
  std::string out;
  const auto& r = hb.resources;
  const labels node{{"node", hb.name}};
  const auto one = [&](std::string_view name, std::string_view help, double v) {
    family(out, name, "gauge", help).sample(node, v);
  };
  family(out, "coach_node_info", "gauge", "A coach-node: its host id and address.")
      .sample({{"node", hb.name}, {"host", std::to_string(hb.host)}, {"address", hb.address}}, 1);
  one("coach_node_cpus", "CPUs this node advertises (--cpus, else the host's).", r.cpus_total);
  one("coach_node_cpus_idle",
      "CPUs not busy over the last heartbeat interval, measured (Coach's parts count as busy).",
      r.cpus_free);
  one("coach_node_cpus_external",
      "CPUs programs other than Coach kept busy (0 under --cpu-accounting reserved).",
      r.cpus_external);
  one("coach_node_memory_bytes", "Memory of the host (MemTotal).", double(r.memory_total));
  one("coach_node_memory_free_bytes", "Memory available (MemAvailable).", double(r.memory_free));
  one("coach_node_gpus", "GPUs this node may use.", double(r.gpus_total.size()));
  one("coach_node_gpus_free", "GPUs with no compute process.", double(r.gpus_free.size()));
  one("coach_node_load1", "One-minute load average of the host.", r.load1);
  one("coach_node_parts_running", "Shards and workers this node runs.", hb.actors_running);
  one("coach_node_draining", "1 while the node drains (takes no new work).", hb.draining ? 1 : 0);
  return out;
}

std::string transport_metrics(std::string_view node, const traffic_stats& sent,
                              const receive_stats& received, const peer_labeller& peer_label) {
  std::string out;
  const std::string n(node);
  // Per peer: the sum over jobs of what this node sent there. Hosts of one label are one peer
  // (host 0, the scheduler reached through --join, and the scheduler's own host id; every
  // `coach` CLI process, "clients").
  std::map<std::uint32_t, std::string> labels_of;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> peers;
  for (const auto& l : sent.links) {
    auto it = labels_of.find(l.dst_host);
    if (it == labels_of.end()) it = labels_of.emplace(l.dst_host, peer_label(l.dst_host)).first;
    auto& p = peers[it->second];
    p.first += l.messages;
    p.second += l.bytes;
  }
  {
    family f(out, "coach_transport_sent_messages_total", "counter",
             "Messages this node sent, by destination node (itself included).");
    for (const auto& [peer, p] : peers) f.sample({{"node", n}, {"peer", peer}}, double(p.first));
  }
  {
    family f(out, "coach_transport_sent_bytes_total", "counter",
             "Bytes this node sent (header and payload), by destination node.");
    for (const auto& [peer, p] : peers) f.sample({{"node", n}, {"peer", peer}}, double(p.second));
  }
  {
    family f(out, "coach_transport_sent_kind_messages_total", "counter",
             "Messages this node sent, by message kind.");
    for (std::size_t k = 0; k < msg_kind_count; ++k)
      if (sent.kind_messages[k] > 0)
        f.sample({{"node", n}, {"kind", std::string(to_string(msg_kind(k)))}},
                 double(sent.kind_messages[k]));
  }
  {
    family f(out, "coach_transport_sent_kind_bytes_total", "counter",
             "Bytes this node sent, by message kind.");
    for (std::size_t k = 0; k < msg_kind_count; ++k)
      if (sent.kind_messages[k] > 0)
        f.sample({{"node", n}, {"kind", std::string(to_string(msg_kind(k)))}},
                 double(sent.kind_bytes[k]));
  }
  family(out, "coach_transport_received_messages_total", "counter",
         "Messages delivered to an actor on this node.")
      .sample({{"node", n}}, double(received.messages));
  family(out, "coach_transport_received_bytes_total", "counter",
         "Bytes of the messages delivered on this node.")
      .sample({{"node", n}}, double(received.bytes));
  {
    family f(out, "coach_transport_dropped_total", "counter",
             "Messages dropped, by reason: malformed (of which malformed_frames), foreign (another "
             "wire version), unknown_dst (no such actor here), send_failed (not sent).");
    f.sample({{"node", n}, {"reason", "malformed"}}, double(received.malformed));
    f.sample({{"node", n}, {"reason", "malformed_frames"}}, double(received.malformed_frames));
    f.sample({{"node", n}, {"reason", "foreign"}}, double(received.foreign));
    f.sample({{"node", n}, {"reason", "unknown_dst"}}, double(received.unknown_dst));
    f.sample({{"node", n}, {"reason", "send_failed"}}, double(sent.dropped));
  }
  {
    family f(out, "coach_transport_refused_connections_total", "counter",
             "Connections refused, by reason (docs/security.md).");
    f.sample({{"node", n}, {"reason", "key"}}, double(received.refused_key));
    f.sample({{"node", n}, {"reason", "address"}}, double(received.refused_address));
    f.sample({{"node", n}, {"reason", "mechanism"}}, double(received.refused_mechanism));
    f.sample({{"node", n}, {"reason", "handshake"}}, double(received.failed_handshakes));
  }
  return out;
}

std::string scheduler_metrics(const std::vector<scheduler::job_status>& jobs,
                              const std::vector<node_status>& nodes, std::string_view policy) {
  using scheduler::job_state;
  using scheduler::job_status;
  std::string out;
  family(out, "coach_policy_info", "gauge", "The scheduling policy in force.")
      .sample({{"policy", std::string(policy)}}, 1);
  {
    std::size_t alive = 0;
    for (const auto& n : nodes) alive += n.alive;
    family f(out, "coach_nodes", "gauge", "Nodes the scheduler knows, by liveness.");
    f.sample({{"state", "alive"}}, double(alive));
    f.sample({{"state", "dead"}}, double(nodes.size() - alive));
  }
  gauges(
      out, "coach_node_cpus_free",
      "CPUs the scheduler may still give on the node: advertised, less its jobs' parts (one "
      "each), less what other programs keep busy under --cpu-accounting measured (coach nodes).",
      nodes,
      [](const node_status& n) {
        return labels{{"node", n.last.name}};
      },
      [](const node_status& n) { return n.last.resources.cpus_free; });
  {
    family f(out, "coach_jobs", "gauge", "Jobs the scheduler holds, by state.");
    for (auto s : {job_state::queued, job_state::running, job_state::suspended,
                   job_state::succeeded, job_state::failed, job_state::cancelled}) {
      std::size_t n = 0;
      for (const auto& j : jobs) n += j.state == s;
      f.sample({{"state", std::string(to_string(s))}}, double(n));
    }
  }
  const auto id = [](const job_status& j) { return labels{{"job_id", std::to_string(j.job)}}; };
  {
    family f(out, "coach_job_info", "gauge", "A job: its name, state and placement (value 1).");
    for (const auto& j : jobs)
      f.sample({{"job_id", std::to_string(j.job)},
                {"name", j.name},
                {"state", std::string(to_string(j.state))},
                {"placement", j.placement}},
               1);
  }
  gauges(out, "coach_job_epochs_done", "Epochs the job finished.", jobs, id,
         [](const job_status& j) { return double(j.epochs_done); });
  gauges(out, "coach_job_epochs", "Epochs the job trains in all.", jobs, id,
         [](const job_status& j) { return double(j.epochs_total); });
  gauges(out, "coach_job_samples_per_second", "Training samples a second, latest report.", jobs, id,
         [](const job_status& j) { return j.samples_per_second; });
  gauges(out, "coach_job_loss", "Mean training loss, latest report.", jobs, id,
         [](const job_status& j) { return j.loss; });
  gauges(out, "coach_job_test_accuracy", "Test accuracy after the last finished epoch.", jobs, id,
         [](const job_status& j) { return j.test_accuracy; });
  gauges(out, "coach_job_workers", "Workers the job runs.", jobs, id,
         [](const job_status& j) { return double(j.workers); });
  gauges(out, "coach_job_shards", "Shards the job runs.", jobs, id,
         [](const job_status& j) { return double(j.shards); });
  gauges(out, "coach_job_aggregation_degree",
         "Share of the job's worker-shard bytes that stay on one host.", jobs, id,
         [](const job_status& j) { return j.aggregation_degree; });
  gauges(out, "coach_job_changes_done", "Rescales and migrations in effect so far.", jobs, id,
         [](const job_status& j) { return double(j.changes_done); });
  gauges(out, "coach_job_recoveries", "Restarts from the checkpoint after a lost node.", jobs, id,
         [](const job_status& j) { return double(j.recoveries_lost_s.size()); });
  gauges(out, "coach_job_failovers", "Shards taken over by their backups.", jobs, id,
         [](const job_status& j) { return double(j.failovers); });
  {
    family f(out, "coach_job_parts", "gauge",
             "The job's workers and shards on each node (its placement).");
    for (const auto& j : jobs) {
      std::map<std::pair<std::string, std::string>, int> on;
      for (const auto& n : j.worker_nodes) ++on[{n, "worker"}];
      for (const auto& n : j.shard_nodes) ++on[{n, "shard"}];
      for (const auto& [k, count] : on)
        f.sample({{"job_id", std::to_string(j.job)}, {"node", k.first}, {"kind", k.second}},
                 double(count));
    }
  }
  std::vector<std::pair<const job_status*, nlohmann::json>> modelled;
  for (const auto& j : jobs) {
    auto m = nlohmann::json::parse(j.model_json, nullptr, false);
    if (!m.is_discarded() && m.is_object()) modelled.emplace_back(&j, std::move(m));
  }
  const auto mid = [](const auto& p) { return labels{{"job_id", std::to_string(p.first->job)}}; };
  gauges(out, "coach_job_predicted_epoch_seconds",
         "The performance model's epoch time for the job's allocation now.", modelled, mid,
         [](const auto& p) { return model_number(p.second, "predicted_epoch_s"); });
  gauges(out, "coach_job_last_predicted_epoch_seconds",
         "The model's prediction for the job's last finished epoch.", modelled, mid,
         [](const auto& p) { return model_number(p.second, "last_predicted_s"); });
  gauges(out, "coach_job_last_observed_epoch_seconds", "The job's last finished epoch's time.",
         modelled, mid, [](const auto& p) { return model_number(p.second, "last_observed_s"); });
  gauges(out, "coach_job_model_error_ratio",
         "Mean absolute relative error of the model's epoch-time predictions for the job.",
         modelled, mid, [](const auto& p) { return model_number(p.second, "mean_abs_rel_error"); });
  return out;
}

}  // namespace coach::actors
