// scheduler::cluster_core: the cluster scheduler without an actor system or sockets. Nodes
// heartbeat by call, time is two manual clocks, jobs live in an in-memory store and a data set
// made here; every port records what it was asked, and the tests check what a node, a job's
// master or a user would get: which stops go where, which runs start where, the job API's
// replies and their error text.

#include "scheduler/cluster_core.hpp"
#include "worker/script_bundle.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace coach::scheduler {
namespace {

std::string spec_yaml(const std::string& name, int workers, int shards) {
  return "name: " + name +
         "\ndataset: {format: csv, path: digits.csv, test_fraction: 0.2}\n"
         "model: {type: mlp, hidden: [64], activation: relu}\n"
         "optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9}\n"
         "batch_size: 32\nepochs: 2\nworkers: " +
         std::to_string(workers) + "\nshards: " + std::to_string(shards) + "\nbackend: cpu\n";
}

class cluster_core_test : public ::testing::Test {
 protected:
  manual_clock steady{at_seconds(100)};
  manual_clock wall{at_seconds(1.7e9)};
  std::vector<std::string> notes;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> stops;  ///< (host, job)
  std::vector<std::tuple<std::uint32_t, std::string, std::string>> peers;
  int decides = 0;
  std::vector<std::pair<std::uint32_t, std::string>> refusals;  ///< (host, reason)
  std::vector<time_point> expires;
  std::vector<std::tuple<std::uint64_t, std::uint32_t, std::chrono::seconds>> cancel_dues;
  std::vector<launch_order> launches;
  std::vector<job_data> launched_data;
  std::vector<job_script> launched_scripts;
  std::vector<std::uint64_t> stopped_runs, dropped_runs, cancels;
  std::vector<std::pair<std::uint64_t, std::vector<std::uint32_t>>> lost_workers;
  std::vector<std::tuple<std::uint64_t, std::uint32_t, std::uint32_t>> rescales;
  std::vector<change_answer> answers;  ///< of rescale and migrate, in order
  job_data data;
  std::optional<cluster_core> core;

  void SetUp() override {
    auto d = std::make_shared<worker::dataset_pair>();
    d->train.rows = 1000;
    d->test.rows = 200;
    d->train.features = d->test.features = 64;
    d->train.classes = d->test.classes = 10;
    data = d;
  }

  void make(cluster_core_setup setup = {}) {
    setup.self_host = 1;
    setup.steady = &steady;
    setup.wall = &wall;
    setup.rebalance_interval = seconds(0);
    cluster_core_ports p;
    p.note = [this](const std::string& l) { notes.push_back(l); };
    p.stop_job = [this](std::uint32_t h, std::uint64_t j) { stops.emplace_back(h, j); };
    p.add_peer = [this](std::uint32_t h, const std::string& a, const std::string& k) {
      peers.emplace_back(h, a, k);
    };
    p.decide_soon = [this] { ++decides; };
    p.refuse_node = [this](std::uint32_t h, const std::string& why) {
      refusals.emplace_back(h, why);
    };
    p.expire_soon = [this](time_point t) { expires.push_back(t); };
    p.cancel_due_in = [this](std::uint64_t j, std::uint32_t g, std::chrono::seconds s) {
      cancel_dues.emplace_back(j, g, s);
    };
    p.load_data = [this](const job_spec&) -> result<job_data> { return data; };
    // As the actor's job_runner does: the run is counted in the registry.
    p.launch = [this](registered_job& job, const launch_order& o, job_data d,
                      job_script sc) -> result<void> {
      launches.push_back(o);
      launched_data.push_back(d);
      launched_scripts.push_back(sc);
      core->registry().begin_run(job, o.workers, o.shards, false);
      return {};
    };
    p.stop_run = [this](std::uint64_t j) { stopped_runs.push_back(j); };
    p.drop_run = [this](std::uint64_t j) { dropped_runs.push_back(j); };
    p.busy = [](std::uint64_t) { return false; };
    // A start answered without a failure starts the whole run.
    p.start_answered = [this](registered_job& job, std::uint32_t,
                              const command_reply& r) -> result<bool> {
      if (r.failure) return std::unexpected(*r.failure);
      core->registry().started(job);
      return true;
    };
    p.rescale = [this](std::uint64_t j, std::uint32_t w, std::uint32_t s, change_answer a) {
      rescales.emplace_back(j, w, s);
      answers.push_back(std::move(a));
    };
    p.migrate = [this](std::uint64_t, std::uint32_t, std::string, change_answer a) {
      answers.push_back(std::move(a));
    };
    p.cancel = [this](std::uint64_t j) { cancels.push_back(j); };
    p.take_over = [](std::uint64_t, std::vector<std::uint32_t>, std::vector<std::uint32_t>) {};
    p.lose_workers = [this](std::uint64_t j, std::vector<std::uint32_t> ranks) {
      lost_workers.emplace_back(j, std::move(ranks));
    };
    core.emplace(std::move(setup), std::move(p));
  }

  static node_heartbeat hb(std::uint32_t host, std::string name) {
    node_heartbeat h;
    h.host = host;
    h.name = std::move(name);
    h.address = "tcp://10.0.0." + std::to_string(host) + ":7000";
    h.public_key = "key" + std::to_string(host);
    h.resources.cpus_total = 4;
    h.resources.cpus_free = 4;
    h.resources.memory_total = h.resources.memory_free = 8ull << 30;
    return h;
  }

  /// The reply to a request answered now.
  api_reply ask(const api_request& req) {
    std::optional<api_reply> got;
    core->request(req, [&](api_reply r) { got = std::move(r); });
    EXPECT_TRUE(got.has_value());
    return got ? *got : api_reply{};
  }

  /// Submits a job; its id.
  std::uint64_t submit(int workers, int shards) {
    auto r = ask(submit_request{spec_yaml("j", workers, shards), "job.yaml", "/tmp", 0, 0, 0});
    EXPECT_FALSE(r.failure) << r.failure->message;
    return std::get<submit_reply>(r.body).job;
  }

  /// Nodes b (host 2) and c (host 3) heartbeat; a job of 2 workers and 1 shard is submitted,
  /// placed, and (when `start`) every node of it answers its start.
  std::uint64_t running_job(bool start = true) {
    core->heartbeat(hb(2, "b"));
    core->heartbeat(hb(3, "c"));
    const auto id = submit(2, 1);
    core->decide();
    EXPECT_EQ(launches.size(), 1u);
    if (start)
      for (auto h : core->registry().find(id)->hosts()) core->command_answered(h, {id, {}, false});
    return id;
  }

  bool noted(const std::string& line) const {
    return std::find(notes.begin(), notes.end(), line) != notes.end();
  }
};

TEST_F(cluster_core_test, a_node_that_heartbeats_is_listed_and_reached) {
  make();
  EXPECT_EQ(notes.back(), "policy fifo, placement dltap, job store ':memory:' (0 job(s))");
  core->heartbeat(hb(2, "b"));
  EXPECT_TRUE(noted("node 'b' joined (host 2, tcp://10.0.0.2:7000)"));
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0], std::make_tuple(2u, std::string("tcp://10.0.0.2:7000"), std::string("key2")));
  EXPECT_EQ(decides, 1);  // what is free changed
  // Its own host is not a peer of the scheduler.
  core->heartbeat(hb(1, "a"));
  EXPECT_EQ(peers.size(), 1u);
  steady.advance(seconds(1.5));
  auto r = ask(nodes_request{});
  ASSERT_FALSE(r.failure);
  const auto& listed = std::get<nodes_reply>(r.body).nodes;
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[1].last.name, "b");
  EXPECT_EQ(listed[1].last.address, "tcp://10.0.0.2:7000");
  EXPECT_DOUBLE_EQ(listed[1].seconds_since, 1.5);
  EXPECT_TRUE(listed[1].alive);
  // The same node with a new key (rotated) is reached anew; with the same, not.
  core->heartbeat(hb(2, "b"));
  EXPECT_EQ(peers.size(), 1u);
  auto rekeyed = hb(2, "b");
  rekeyed.public_key = "key2b";
  core->heartbeat(rekeyed);
  ASSERT_EQ(peers.size(), 2u);
  EXPECT_EQ(std::get<2>(peers[1]), "key2b");
}

// Issue 41, item 4: two nodes with one --name were both listed, and `coach migrate --to NAME`
// was ambiguous. The second is refused (told why) and not listed; a dead node's name is free.
TEST_F(cluster_core_test, a_second_node_with_a_live_nodes_name_is_refused) {
  make();
  core->heartbeat(hb(2, "b"));
  core->heartbeat(hb(3, "b"));
  const std::string why =
      "the name 'b' is taken by the live node at tcp://10.0.0.2:7000; give this node another "
      "--name";
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_EQ(refusals[0], std::make_pair(3u, why));
  EXPECT_TRUE(noted("node at tcp://10.0.0.3:7000 refused: " + why));
  EXPECT_EQ(std::get<2>(peers.back()), "key3") << "reached, to be told";
  core->heartbeat(hb(3, "b"));  // told again, noted once
  EXPECT_EQ(refusals.size(), 2u);
  EXPECT_EQ(std::count_if(notes.begin(), notes.end(),
                          [](const std::string& l) { return l.find("refused") != l.npos; }),
            1);
  const auto listed = std::get<nodes_reply>(ask(nodes_request{}).body).nodes;
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].last.host, 2u);
  EXPECT_EQ(*core->nodes().by_name("b"), 2u);
  // b stops heartbeating: its name is free for another node, which `--to b` means then.
  for (int i = 0; i < 11; ++i) {
    steady.advance(seconds(0.5));
    core->tick();
  }
  core->expire(expires.back());
  core->heartbeat(hb(3, "b"));
  EXPECT_EQ(refusals.size(), 2u);
  EXPECT_EQ(*core->nodes().by_name("b"), 3u);
  // The scheduler's own node (host 1) keeps its name whoever came first: the other is refused.
  core->heartbeat(hb(4, "a"));
  core->heartbeat(hb(1, "a"));
  EXPECT_EQ(refusals.size(), 2u) << "the scheduler's node is never refused";
  core->heartbeat(hb(4, "a"));
  ASSERT_EQ(refusals.size(), 3u);
  EXPECT_EQ(refusals.back().first, 4u);
}

TEST_F(cluster_core_test, a_silent_node_is_lost_at_the_node_timeout) {
  make();  // node timeout 5 s, checked every 0.5 s
  core->heartbeat(hb(2, "b"));
  for (int i = 0; i < 10; ++i) {  // up to 5 s of silence: alive
    steady.advance(seconds(0.5));
    core->tick();
  }
  EXPECT_TRUE(expires.empty());
  steady.advance(seconds(0.5));
  core->tick();
  ASSERT_EQ(expires.size(), 1u);
  EXPECT_DOUBLE_EQ(to_seconds(expires[0]), 105.5);
  // A heartbeat read before the owner judges keeps the node alive.
  core->heartbeat(hb(2, "b"));
  core->expire(expires[0]);
  EXPECT_TRUE(core->nodes().find(2)->alive);
  // Silent again: lost.
  for (int i = 0; i < 11; ++i) {
    steady.advance(seconds(0.5));
    core->tick();
  }
  ASSERT_EQ(expires.size(), 2u);
  core->expire(expires[1]);
  EXPECT_TRUE(noted("node 'b' stopped heartbeating"));
  EXPECT_FALSE(core->nodes().find(2)->alive);
  EXPECT_FALSE(core->node_statuses()[0].alive);
}

TEST_F(cluster_core_test, a_submit_is_admitted_and_started_where_it_is_placed) {
  make();
  core->heartbeat(hb(2, "b"));
  core->heartbeat(hb(3, "c"));
  const int before = decides;
  const auto id = submit(2, 1);
  EXPECT_EQ(id, 1u);
  EXPECT_EQ(decides, before);  // a decision is queued already
  core->decide();
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].job, 1u);
  EXPECT_EQ(launches[0].workers.size(), 2u);
  EXPECT_EQ(launches[0].shards.size(), 1u);
  for (auto h : launches[0].workers) EXPECT_TRUE(h == 2 || h == 3);
  EXPECT_EQ(launched_data[0], data);  // the data set loaded at submit
  auto r = ask(status_request{id});
  ASSERT_FALSE(r.failure);
  const auto& s = std::get<status_reply>(r.body).jobs.at(0);
  EXPECT_EQ(s.workers, 2u);
  EXPECT_EQ(s.shards, 1u);
  EXPECT_EQ(s.state, job_state::queued);  // until every part answered its start
  for (auto h : core->registry().find(id)->hosts()) core->command_answered(h, {id, {}, false});
  r = ask(status_request{id});
  EXPECT_EQ(std::get<status_reply>(r.body).jobs.at(0).state, job_state::running);
}

TEST_F(cluster_core_test, a_submit_with_more_workers_than_rows_is_refused) {
  make();
  core->heartbeat(hb(2, "b"));
  data = [] {
    auto d = std::make_shared<worker::dataset_pair>();
    d->train.rows = 1;
    d->test.rows = 1;
    return job_data(d);
  }();
  auto r = ask(submit_request{spec_yaml("j", 2, 1), "job.yaml", "/tmp", 0, 0, 0});
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->code, errc::invalid_argument);
  EXPECT_NE(r.failure->message.find("workers.initial"), std::string::npos) << r.failure->message;
  EXPECT_TRUE(core->registry().jobs().empty());
}

TEST_F(cluster_core_test, a_failed_start_fails_the_job_and_stops_its_parts) {
  make();
  const auto id = running_job(false);
  const auto hosts = core->registry().find(id)->hosts();
  core->command_answered(*hosts.begin(),
                         {id, coach::error{errc::invalid_argument, "no such data set"}, false});
  auto r = ask(status_request{id});
  const auto& s = std::get<status_reply>(r.body).jobs.at(0);
  EXPECT_EQ(s.state, job_state::failed);
  EXPECT_EQ(s.error, "no such data set");
  EXPECT_EQ(dropped_runs, std::vector<std::uint64_t>{id});
  for (auto h : hosts)
    EXPECT_NE(std::find(stops.begin(), stops.end(), std::make_pair(h, id)), stops.end()) << h;
  // Its nodes' answers to the stop are taken; the job stays failed.
  for (auto h : hosts) core->command_answered(h, {id, {}, true});
  EXPECT_EQ(core->registry().find(id)->state(), job_state::failed);
}

TEST_F(cluster_core_test, an_ended_job_is_forgotten_and_its_id_not_given_again) {
  make();
  const auto id = running_job(false);
  auto r = ask(forget_request{id});
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->code, errc::invalid_argument);
  EXPECT_NE(r.failure->message.find("only an ended job can be forgotten"), std::string::npos)
      << r.failure->message;
  const auto hosts = core->registry().find(id)->hosts();
  core->command_answered(*hosts.begin(),
                         {id, coach::error{errc::invalid_argument, "no such data set"}, false});
  r = ask(forget_request{id});
  ASSERT_FALSE(r.failure) << r.failure->message;
  EXPECT_TRUE(std::holds_alternative<ack_reply>(r.body));
  EXPECT_TRUE(noted("job 1 forgotten"));
  r = ask(status_request{0});
  EXPECT_TRUE(std::get<status_reply>(r.body).jobs.empty());
  r = ask(status_request{id});
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->message, "no job 1");
  r = ask(forget_request{id});
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->code, errc::not_found);
  // Its nodes' late answers to the stop are ignored; its id is not given again.
  for (auto h : hosts) core->command_answered(h, {id, {}, true});
  EXPECT_EQ(submit(1, 1), 2u) << "the forgotten job's id is not given again";
}

TEST_F(cluster_core_test, a_lost_shard_node_restarts_the_job_from_its_checkpoint) {
  make();
  const auto id = running_job();
  const std::uint32_t lost = launches[0].shards[0];
  const std::string name = lost == 2 ? "b" : "c";
  core->peer_gone(lost);
  EXPECT_TRUE(noted("node '" + name + "' closed its connections"));
  EXPECT_EQ(stopped_runs, std::vector<std::uint64_t>{id});
  for (const auto& [h, j] : stops) EXPECT_NE(h, lost);
  EXPECT_TRUE(noted("job 1 lost its parts on '" + name +
                    "'; it restarts from its checkpoint at epoch 1 on the nodes left (0.0 s of "
                    "work lost)"))
      << ::testing::PrintToString(notes);
  // The scheduler's own host is never lost this way.
  core->peer_gone(1);
  EXPECT_EQ(stopped_runs.size(), 1u);
}

TEST_F(cluster_core_test, a_cancelled_run_that_does_not_stop_is_ended_after_the_grace) {
  make();
  const auto id = running_job();
  const auto gen = core->registry().find(id)->generation();
  auto r = ask(cancel_request{id});
  ASSERT_FALSE(r.failure);
  EXPECT_TRUE(std::holds_alternative<ack_reply>(r.body));
  EXPECT_EQ(cancels, std::vector<std::uint64_t>{id});
  ASSERT_EQ(cancel_dues.size(), 1u);
  EXPECT_EQ(cancel_dues[0], std::make_tuple(id, gen, std::chrono::seconds(3)));
  core->cancel_due(id, gen);
  EXPECT_TRUE(
      noted("job 1 did not stop at a step within 3 s of its cancel; its parts are "
            "stopped where they are"));
  EXPECT_EQ(core->registry().find(id)->state(), job_state::cancelled);
  EXPECT_EQ(dropped_runs, std::vector<std::uint64_t>{id});
  // Cancelled again: already over.
  r = ask(cancel_request{id});
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->message, "job 1 already cancelled");
}

TEST_F(cluster_core_test, a_rescale_goes_to_the_master_and_its_answer_to_the_user) {
  make();
  // Not running yet: refused here.
  core->heartbeat(hb(2, "b"));
  core->heartbeat(hb(3, "c"));
  const auto queued = submit(2, 1);
  auto r = ask(rescale_request{queued, 3, 0});
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->message, "job 1 is waiting for resources; it has no workers");
  core->decide();
  for (auto h : core->registry().find(queued)->hosts())
    core->command_answered(h, {queued, {}, false});
  // Forwarded: the reply waits for the master.
  std::vector<api_reply> got;
  core->request(rescale_request{queued, 3, 0}, [&](api_reply a) { got.push_back(std::move(a)); });
  EXPECT_TRUE(got.empty());
  ASSERT_EQ(rescales.size(), 1u);
  EXPECT_EQ(rescales[0], std::make_tuple(queued, 3u, 0u));
  answers[0](std::string("a change is in flight"));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].failure->code, errc::invalid_argument);
  EXPECT_EQ(got[0].failure->message, "a change is in flight");
  core->request(rescale_request{queued, 3, 0}, [&](api_reply a) { got.push_back(std::move(a)); });
  answers[1](std::unexpected(coach::error{errc::internal, "the job master did not answer: x"}));
  EXPECT_EQ(got[1].failure->message, "the job master did not answer: x");
  core->request(rescale_request{queued, 3, 0}, [&](api_reply a) { got.push_back(std::move(a)); });
  answers[2](std::string());
  EXPECT_FALSE(got[2].failure);
  // Migrate: checked here first.
  r = ask(migrate_request{queued, 0, ""});
  EXPECT_EQ(r.failure->message, "--to NODE is empty");
}

// Issue 41, item 1: what the user ordered holds until the user releases it, and the status
// says what holds. Through the job API: rescale and migrate, their --release.
TEST_F(cluster_core_test, a_users_orders_hold_and_are_released_through_the_job_api) {
  make();
  const auto id = running_job();
  std::vector<api_reply> got;
  auto to_got = [&](api_reply a) { got.push_back(std::move(a)); };
  // Nothing held yet: a release says so.
  auto r = ask(rescale_request{id, 0, 0, true});
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->code, errc::invalid_argument);
  EXPECT_EQ(r.failure->message, "job 1 holds no rescale of the user's");
  r = ask(rescale_request{id, 3, 0, true});
  EXPECT_EQ(r.failure->message, "rescale: --release takes no --workers or --shards");
  r = ask(migrate_request{id, 0, "", true});
  EXPECT_EQ(r.failure->message, "job 1: shard 0 is not pinned (none is)");
  r = ask(migrate_request{id, 0, "b", true});
  EXPECT_EQ(r.failure->message, "migrate: --release takes no --to NODE");

  // A rescale the master accepts is held; the status lists it.
  core->request(rescale_request{id, 3, 0}, to_got);
  answers.back()(std::string());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].failure);
  auto st = std::get<status_reply>(ask(status_request{id}).body).jobs.at(0);
  EXPECT_EQ(st.orders, std::vector<std::string>{"workers 3 held (coach rescale)"});
  // A migration the master refuses pins nothing; one it accepts pins the new shard.
  core->request(migrate_request{id, 0, "b"}, to_got);
  answers.back()(std::string("a change is in flight"));
  EXPECT_EQ(got.back().failure->message, "a change is in flight");
  st = std::get<status_reply>(ask(status_request{id}).body).jobs.at(0);
  EXPECT_EQ(st.orders.size(), 1u);
  core->request(migrate_request{id, 0, "b"}, to_got);
  auto& job = *core->registry().find(id);
  core->registry().part_placed(job, false, 1, 2);  // the master's new shard, asked for first
  answers.back()(std::string());
  EXPECT_FALSE(got.back().failure);
  st = std::get<status_reply>(ask(status_request{id}).body).jobs.at(0);
  EXPECT_EQ(st.orders, (std::vector<std::string>{"shard 1 pinned to 'b' (coach migrate)",
                                                 "workers 3 held (coach rescale)"}));
  // Released, both.
  EXPECT_FALSE(ask(migrate_request{id, 1, "", true}).failure);
  EXPECT_FALSE(ask(rescale_request{id, 0, 0, true}).failure);
  st = std::get<status_reply>(ask(status_request{id}).body).jobs.at(0);
  EXPECT_TRUE(st.orders.empty());
}

TEST_F(cluster_core_test, unknown_jobs_and_actions_are_answered_with_their_error) {
  make();
  auto r = ask(status_request{7});
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->code, errc::not_found);
  EXPECT_EQ(r.failure->message, "no job 7");
  r = ask(logs_request{7, 0});
  EXPECT_EQ(r.failure->message, "no job 7");
  EXPECT_EQ(core->dashboard_action("cancel", "x1"), "'x1' is no job id");
  EXPECT_EQ(core->dashboard_action("reboot", ""), "unknown action 'reboot'");
  EXPECT_EQ(core->dashboard_action("cancel", "7"), "no job 7");
  EXPECT_EQ(core->dashboard_action("policy", "round-robin"), "");
  EXPECT_EQ(core->policy_name(), "round-robin");
  EXPECT_TRUE(noted("policy is now round-robin"));
  r = ask(policy_request{});
  EXPECT_EQ(std::get<policy_reply>(r.body).active, "round-robin");
}

/// A script job's spec and the model its submitter registered: 4 floats, 40 training samples,
/// the files `files`.
std::pair<std::string, std::shared_ptr<worker::script_payload>> script_job(
    const std::vector<worker::bundle_file>& files) {
  const std::string yaml =
      "name: s\nmodel: {script: train.py}\noptimizer: {type: sgd, learning_rate: 0.1}\n"
      "batch: {global: 8}\nepochs: 2\nworkers: 2\nshards: 1\n";
  auto p = std::make_shared<worker::script_payload>();
  p->entry = "train.py";
  p->layout_json = R"({"samples":40,"test_samples":10,"tensors":[)"
                   R"({"name":"w","shape":[4],"dtype":"float32","kind":"param"}]})";
  p->initial = std::make_shared<const std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  p->bundle = std::make_shared<const std::vector<std::byte>>(worker::pack_bundle(files));
  return {yaml, p};
}

TEST_F(cluster_core_test, a_script_job_is_kept_with_its_files_and_launched_after_a_restart) {
  auto store = std::make_shared<job_store>(std::move(*job_store::open(":memory:")));
  cluster_core_setup setup;
  setup.store = store;
  make(setup);
  core->heartbeat(hb(2, "b"));
  const auto [yaml, script] = script_job({{"train.py", false, "print(1)"}});
  submit_request req{yaml, "s.yaml", "/tmp", 0, 0, 0};
  req.script = script;
  auto r = ask(req);
  ASSERT_FALSE(r.failure) << r.failure->message;
  const auto id = std::get<submit_reply>(r.body).job;
  auto kept = store->script(id);
  ASSERT_TRUE(kept && kept->has_value());
  EXPECT_EQ((*kept)->layout_json, script->layout_json);
  EXPECT_TRUE(*(*kept)->bundle == *script->bundle);

  // A scheduler restarted on the store launches it with the script it kept, and the data set
  // Coach sees is the script's sizes.
  core.reset();
  make(setup);
  core->heartbeat(hb(2, "b"));
  core->heartbeat(hb(3, "c"));
  core->decide();
  ASSERT_EQ(launches.size(), 1u);
  ASSERT_TRUE(launched_scripts[0]);
  EXPECT_EQ(launched_scripts[0]->entry, "train.py");
  EXPECT_EQ(*launched_scripts[0]->initial, *script->initial);
  EXPECT_TRUE(*launched_scripts[0]->bundle == *script->bundle);
  EXPECT_EQ(launched_data[0]->train.rows, 40u);
  EXPECT_EQ(launched_data[0]->test.rows, 10u);

  // Once it ends (here: a node failed its start), its files leave the store.
  const auto host = *core->registry().find(id)->hosts().begin();
  core->command_answered(host, {id, coach::error{errc::io_error, "no room"}, false});
  EXPECT_EQ(core->registry().find(id)->state(), job_state::failed);
  EXPECT_FALSE(store->script(id)->has_value());
}

TEST_F(cluster_core_test, a_script_submit_that_is_hostile_or_incomplete_is_refused_in_one_line) {
  make();
  core->heartbeat(hb(2, "b"));
  auto [yaml, script] = script_job({{"../../etc/cron.d/x", false, "* * * * * root sh"}});
  submit_request req{yaml, "s.yaml", "/tmp", 0, 0, 0};
  req.script = script;
  auto r = ask(req);
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->code, errc::protocol_error);
  EXPECT_EQ(r.failure->message,
            "the script's bundle is refused: path '../../etc/cron.d/x' leaves the bundle's folder "
            "('..')");
  EXPECT_TRUE(noted("refused a submit of s.yaml: " + r.failure->message));
  // Initial values of another size than the layout's.
  auto sized =
      std::make_shared<worker::script_payload>(*script_job({{"train.py", false, ""}}).second);
  sized->initial = std::make_shared<const std::vector<float>>(3);
  req.script = sized;
  r = ask(req);
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->message, "the script's initial values are 3 floats where its layout has 4");
  // A script's spec without its script (a client that did not register it), and the reverse.
  req.script = nullptr;
  r = ask(req);
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->code, errc::invalid_argument);
  EXPECT_NE(r.failure->message.find("its files and layout come with `coach submit`"),
            std::string::npos)
      << r.failure->message;
  submit_request plain{spec_yaml("j", 1, 1), "job.yaml", "/tmp", 0, 0, 0};
  plain.script = script;
  r = ask(plain);
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->code, errc::protocol_error);
  EXPECT_TRUE(core->registry().jobs().empty());
}

// Issue 41: `coach nodes` showed idle nodes "0.0/2 free" (the heartbeat's measured idle CPUs on
// a busy host) while the waiting job's reason said "2 free". Both are the scheduler's figure
// now, and the reason names what holds the CPUs and how that changes.
TEST_F(cluster_core_test, coach_nodes_and_why_a_job_waits_show_the_same_free_cpus) {
  make();
  auto busy_host = [](std::uint32_t host, std::string name, double external) {
    auto h = hb(host, std::move(name));
    h.resources.cpus_total = 2;
    h.resources.cpus_free = 0;  // measured: other programs (and Coach's parts) keep it busy
    h.resources.cpus_external = external;  // 0 under --cpu-accounting reserved
    return h;
  };
  core->heartbeat(busy_host(2, "b", 0));
  core->heartbeat(busy_host(3, "c", 0));
  const auto first = submit(1, 1);
  core->decide();
  ASSERT_EQ(launches.size(), 1u);
  for (auto h : core->registry().find(first)->hosts())
    core->command_answered(h, {first, {}, false});
  const auto second = submit(2, 1);  // 3 CPUs; 2 are free
  core->decide();
  ASSERT_EQ(launches.size(), 1u);
  auto listed_free = [&] {
    std::map<std::string, double> free;
    const auto r = ask(nodes_request{});
    for (const auto& n : std::get<nodes_reply>(r.body).nodes)
      free[n.last.name] = n.last.resources.cpus_free;
    return free;
  };
  auto waiting = [&] {
    return std::get<status_reply>(ask(status_request{second}).body).jobs.at(0).waiting;
  };
  auto free = listed_free();
  EXPECT_DOUBLE_EQ(free["b"] + free["c"], 2.0);
  EXPECT_EQ(std::max(free["b"], free["c"]), 2.0) << "the idle node";
  EXPECT_EQ(waiting(),
            "needs 3 CPUs (2 worker(s) and 1 shard(s) at least), 2 free of 4: Coach's jobs hold 2 "
            "(a CPU per worker or shard); it starts when they end, or coach-node --cpus N "
            "advertises more");
  // Under --cpu-accounting measured, other programs' CPUs are off the same figure everywhere,
  // and the reason names that accounting and the flag that changes it.
  const std::string idle = free["b"] == 2.0 ? "b" : "c";
  core->heartbeat(busy_host(idle == "b" ? 2 : 3, idle, 1.5));
  free = listed_free();
  EXPECT_DOUBLE_EQ(free[idle], 0.5);
  EXPECT_EQ(waiting(),
            "needs 3 CPUs (2 worker(s) and 1 shard(s) at least), 0.5 free of 4: Coach's jobs hold "
            "2 (a CPU per worker or shard), other programs keep 1.5 busy (--cpu-accounting "
            "measured, the default; coach-node --cpu-accounting reserved counts only Coach's "
            "jobs)");
}

}  // namespace
}  // namespace coach::scheduler
