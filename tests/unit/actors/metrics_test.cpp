// actors::metrics: the Prometheus text a coach-node serves on /metrics, rendered from the
// records `coach nodes` and `coach status --json` show: each family once with HELP and TYPE,
// label values escaped, the job's figures (the performance model's included) as they are.
#include "actors/metrics.hpp"
#include "actors/dashboard.hpp"
#include "transport/peer_table.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace coach::actors {
namespace {

/// Samples by "name{labels}" and the families named in TYPE lines (each must come once).
struct parsed {
  std::map<std::string, std::string> samples;
  std::map<std::string, std::string> types;
};

parsed parse(const std::string& text) {
  parsed p;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      const auto rest = line.substr(7);
      const auto sp = rest.find(' ');
      EXPECT_TRUE(p.types.emplace(rest.substr(0, sp), rest.substr(sp + 1)).second)
          << "family twice: " << line;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    EXPECT_TRUE(p.samples.emplace(line.substr(0, sp), line.substr(sp + 1)).second)
        << "sample twice: " << line;
  }
  return p;
}

TEST(metrics, node_families_come_from_the_heartbeat) {
  node_heartbeat hb;
  hb.name = "node-a";
  hb.host = 42;
  hb.address = "tcp://127.0.0.1:7470";
  hb.resources.cpus_total = 8;
  hb.resources.cpus_free = 5.5;
  hb.resources.memory_total = 16ull << 30;
  hb.resources.memory_free = 3ull << 30;
  hb.resources.gpus_total = {0, 1};
  hb.resources.gpus_free = {1};
  hb.actors_running = 3;
  const auto p = parse(node_metrics(hb));
  EXPECT_EQ(p.samples.at("coach_node_cpus{node=\"node-a\"}"), "8");
  EXPECT_EQ(p.samples.at("coach_node_cpus_idle{node=\"node-a\"}"), "5.5");
  EXPECT_EQ(p.types.count("coach_node_cpus_free"), 0u)
      << "free CPUs are the scheduler's figure (coach nodes), not the measured idle ones";
  EXPECT_EQ(p.samples.at("coach_node_memory_bytes{node=\"node-a\"}"), "17179869184");
  EXPECT_EQ(p.samples.at("coach_node_memory_free_bytes{node=\"node-a\"}"), "3221225472");
  EXPECT_EQ(p.samples.at("coach_node_gpus{node=\"node-a\"}"), "2");
  EXPECT_EQ(p.samples.at("coach_node_gpus_free{node=\"node-a\"}"), "1");
  EXPECT_EQ(p.samples.at("coach_node_parts_running{node=\"node-a\"}"), "3");
  EXPECT_EQ(
      p.samples.at("coach_node_info{node=\"node-a\",host=\"42\",address=\"tcp://127.0.0.1:7470\"}"),
      "1");
  EXPECT_EQ(p.types.at("coach_node_cpus"), "gauge");
}

TEST(metrics, transport_counts_are_summed_per_peer_and_per_kind) {
  traffic_stats sent;
  sent.links = {{1, 10, 20, 5, 500}, {2, 10, 20, 1, 100}, {1, 10, 10, 7, 70}};
  sent.kind_messages[std::size_t(msg_kind::push)] = 12;
  sent.kind_bytes[std::size_t(msg_kind::push)] = 600;
  sent.dropped = 2;
  receive_stats got;
  got.messages = 9;
  got.bytes = 900;
  got.malformed = 4;
  got.unknown_dst = 3;
  got.refused_key = 1;
  const auto p =
      parse(transport_metrics("b", sent, got, [](std::uint32_t h) { return std::to_string(h); }));
  EXPECT_EQ(p.samples.at("coach_transport_sent_messages_total{node=\"b\",peer=\"20\"}"), "6");
  EXPECT_EQ(p.samples.at("coach_transport_sent_bytes_total{node=\"b\",peer=\"20\"}"), "600");
  EXPECT_EQ(p.samples.at("coach_transport_sent_bytes_total{node=\"b\",peer=\"10\"}"), "70");
  EXPECT_EQ(p.samples.at("coach_transport_sent_kind_bytes_total{node=\"b\",kind=\"push\"}"), "600");
  EXPECT_EQ(p.samples.count("coach_transport_sent_kind_bytes_total{node=\"b\",kind=\"pull\"}"), 0u)
      << "kinds never sent are left out";
  EXPECT_EQ(p.samples.at("coach_transport_dropped_total{node=\"b\",reason=\"malformed\"}"), "4");
  EXPECT_EQ(p.samples.at("coach_transport_dropped_total{node=\"b\",reason=\"unknown_dst\"}"), "3");
  EXPECT_EQ(p.samples.at("coach_transport_dropped_total{node=\"b\",reason=\"send_failed\"}"), "2");
  EXPECT_EQ(p.samples.at("coach_transport_refused_connections_total{node=\"b\",reason=\"key\"}"),
            "1");
  EXPECT_EQ(p.types.at("coach_transport_sent_bytes_total"), "counter");
}

TEST(metrics, peers_are_labelled_by_node_name_the_scheduler_and_clients_as_one_each) {
  // What node-b (host 20) sent: to itself, to node-c (30), to the scheduler through --join
  // (host 0) and at its own host id (10, node-a), and replies to `coach` CLI processes.
  traffic_stats sent;
  sent.links = {{0, 20, 20, 1, 100},
                {1, 20, 30, 2, 200},
                {0, 20, 0, 4, 400},
                {1, 20, 10, 8, 800},
                {0, 20, 0x80000000u, 16, 1600}};
  transport_logic::peer_table peers(20);
  const auto label = [&](std::uint32_t h) { return peers.label(h); };
  auto p = parse(transport_metrics("node-b", sent, receive_stats{}, label));
  EXPECT_EQ(p.samples.at("coach_transport_sent_bytes_total{node=\"node-b\",peer=\"scheduler\"}"),
            "400")
      << "before its first job a node knows the scheduler by no name";
  EXPECT_EQ(p.samples.at("coach_transport_sent_bytes_total{node=\"node-b\",peer=\"clients\"}"),
            "1600");
  peers.name(20, "node-b");
  peers.name(30, "node-c");
  peers.name(10, "node-a");
  peers.name(0, "node-a");  // the job's master runs on the scheduler's node
  peers.name(40, "");       // no name: ignored
  p = parse(transport_metrics("node-b", sent, receive_stats{}, label));
  std::map<std::string, std::string> bytes;
  for (const auto& [k, v] : p.samples)
    if (k.rfind("coach_transport_sent_bytes_total", 0) == 0) bytes[k] = v;
  EXPECT_EQ(bytes,
            (std::map<std::string, std::string>{
                {"coach_transport_sent_bytes_total{node=\"node-b\",peer=\"clients\"}", "1600"},
                {"coach_transport_sent_bytes_total{node=\"node-b\",peer=\"node-a\"}", "1200"},
                {"coach_transport_sent_bytes_total{node=\"node-b\",peer=\"node-b\"}", "100"},
                {"coach_transport_sent_bytes_total{node=\"node-b\",peer=\"node-c\"}", "200"}}));
  EXPECT_EQ(peers.label(40), "40") << "a host never named keeps its id";
}

TEST(metrics, jobs_show_what_status_shows_with_the_models_prediction) {
  scheduler::job_status a;
  a.job = 3;
  a.name = "fash\"ion\n";  // escaped in the label
  a.state = scheduler::job_state::running;
  a.epochs_done = 2;
  a.epochs_total = 5;
  a.test_accuracy = 0.8765;
  a.samples_per_second = 12345.5;
  a.loss = 0.25;
  a.workers = 2;
  a.shards = 1;
  a.worker_nodes = {"node-a", "node-b"};
  a.shard_nodes = {"node-a"};
  a.placement = "dltap";
  a.aggregation_degree = 0.5;
  a.model_json = R"({"predicted_epoch_s": 1.5, "last_predicted_s": 1.25,
                     "last_observed_s": 1.375, "mean_abs_rel_error": 0.0625})";
  scheduler::job_status b;
  b.job = 4;
  b.name = "queued";
  b.test_accuracy = std::nan("");
  std::vector<node_status> nodes(3);
  nodes[2].alive = false;
  for (int i = 0; i < 3; ++i) nodes[std::size_t(i)].last.name = "node-" + std::to_string(i);
  nodes[1].last.resources.cpus_free = 1.5;  // the scheduler's figure (coach nodes)
  const auto text = scheduler_metrics({a, b}, nodes, "elastic-fifo");
  const auto p = parse(text);
  // Prometheus keeps `job` for its scrape job and renames a target's own to exported_job.
  EXPECT_EQ(text.find("job=\""), std::string::npos) << text;
  EXPECT_EQ(p.samples.at("coach_node_cpus_free{node=\"node-1\"}"), "1.5");
  EXPECT_EQ(p.samples.at("coach_policy_info{policy=\"elastic-fifo\"}"), "1");
  EXPECT_EQ(p.samples.at("coach_nodes{state=\"alive\"}"), "2");
  EXPECT_EQ(p.samples.at("coach_nodes{state=\"dead\"}"), "1");
  EXPECT_EQ(p.samples.at("coach_jobs{state=\"running\"}"), "1");
  EXPECT_EQ(p.samples.at("coach_jobs{state=\"queued\"}"), "1");
  EXPECT_EQ(p.samples.at("coach_jobs{state=\"failed\"}"), "0");
  EXPECT_EQ(p.samples.at("coach_job_info{job_id=\"3\",name=\"fash\\\"ion\\n\",state=\"running\","
                         "placement=\"dltap\"}"),
            "1");
  EXPECT_EQ(p.samples.at("coach_job_test_accuracy{job_id=\"3\"}"), "0.8765");
  EXPECT_EQ(p.samples.at("coach_job_test_accuracy{job_id=\"4\"}"), "NaN");
  EXPECT_EQ(p.samples.at("coach_job_samples_per_second{job_id=\"3\"}"), "12345.5");
  EXPECT_EQ(p.samples.at("coach_job_epochs_done{job_id=\"3\"}"), "2");
  EXPECT_EQ(p.samples.at("coach_job_parts{job_id=\"3\",node=\"node-a\",kind=\"shard\"}"), "1");
  EXPECT_EQ(p.samples.at("coach_job_parts{job_id=\"3\",node=\"node-a\",kind=\"worker\"}"), "1");
  EXPECT_EQ(p.samples.at("coach_job_predicted_epoch_seconds{job_id=\"3\"}"), "1.5");
  EXPECT_EQ(p.samples.at("coach_job_last_observed_epoch_seconds{job_id=\"3\"}"), "1.375");
  EXPECT_EQ(p.samples.at("coach_job_model_error_ratio{job_id=\"3\"}"), "0.0625");
  EXPECT_EQ(p.samples.count("coach_job_predicted_epoch_seconds{job_id=\"4\"}"), 0u)
      << "no model view, no prediction";
}

TEST(dashboard_state, a_long_curve_is_thinned_keeping_its_last_epoch_and_every_change) {
  dashboard_job d;
  d.status.job = 7;
  d.status.name = "long";
  for (std::uint32_t e = 0; e < 2000; ++e) {
    scheduler::epoch_report r;
    r.epoch = e;
    r.train_loss = 1.0 / (e + 1);
    r.workers = e < 1001 ? 2 : 3;  // one change, in an epoch the thinning skips
    r.shards = 1;
    d.curve.push_back(r);
  }
  const auto s = nlohmann::json::parse(dashboard_state({d}, {}, "fifo", false));
  const auto& job = s.at("jobs").at(0);
  EXPECT_LE(job.at("curve").size(), max_curve_points + 1);
  EXPECT_GE(job.at("curve").size(), max_curve_points / 2);
  EXPECT_EQ(job.at("curve").back().at("epoch"), 2000) << "the last epoch always";
  ASSERT_EQ(job.at("changes_at").size(), 1u);
  EXPECT_DOUBLE_EQ(job.at("changes_at").at(0).get<double>(), 1001.5);
  EXPECT_FALSE(s.at("admin").get<bool>());
}

}  // namespace
}  // namespace coach::actors
