#pragma once
// actors::metrics: what a coach-node serves on /metrics, in Prometheus' text exposition format
// (version 0.0.4), rendered from the same records `coach nodes` and `coach status --json` show.
// Plain functions over plain records: no sockets, no actors (the HTTP server and the actors
// that call them are in actors/http_server.hpp, node_agent.cpp, cluster_scheduler.cpp).
//
// Families (docs/operations.md lists each with its labels):
// - node (every node): coach_node_* from its latest heartbeat (CPUs, memory, GPUs, load, parts);
// - transport (every node): coach_transport_* sent per peer node and per message kind, received,
//   dropped and refused by reason;
// - scheduler (its node only): coach_jobs by state, coach_job_* per job (epoch, samples/s, loss,
//   accuracy, workers, shards, placement, aggregation degree, predicted and observed epoch
//   time, recoveries, failovers), coach_nodes by liveness, coach_node_cpus_free per node (what
//   `coach nodes` shows), the active policy.
// A job is labelled job_id, never `job`: Prometheus keeps `job` for its scrape job and renames
// a target's own `job` label to exported_job, so a query by `job` would find nothing.
// A family is written whole (HELP, TYPE, its samples) by one call, so the parts concatenate.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/control.hpp"
#include "actors/transport.hpp"
#include "actors/zmq_transport.hpp"

namespace coach::actors {

/// The node families, from its latest heartbeat.
std::string node_metrics(const node_heartbeat& hb);

/// What traffic to a host is shown under: the `peer` label (zmq_transport::peer_label).
using peer_labeller = std::function<std::string(std::uint32_t host)>;

/// The transport families of node `node`: what it sent (per peer, by `peer_label` of its host:
/// hosts of one label are summed), received, dropped and refused.
std::string transport_metrics(std::string_view node, const traffic_stats& sent,
                              const receive_stats& received, const peer_labeller& peer_label);

/// The scheduler families: its jobs (as `coach status --json` shows them, the performance
/// model's view included), its nodes and the policy in force.
std::string scheduler_metrics(const std::vector<scheduler::job_status>& jobs,
                              const std::vector<node_status>& nodes, std::string_view policy);

/// `value` as a Prometheus label value: backslash, double quote and newline escaped.
std::string prometheus_label(std::string_view value);

}  // namespace coach::actors
