// A coach-node's node agent answering start_job as a scheduler sends it, from a test that plays
// the scheduler: what it refuses, and that a refusal leaves the node taking jobs.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <signal.h>
#include <chrono>
#include <optional>

#include "actors/control.hpp"
#include "actors/zmq_transport.hpp"
#include "tests/integration/process_harness.hpp"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace coach::actors;

TEST(node_agent, refuses_checkpoint_parameters_of_another_size) {
  const auto addr = itest::free_address();
  auto node = itest::start_node(
      {"--listen", addr, "--scheduler", "--store", "", "--name", "node-x", "--heartbeat", "0.25"},
      "node-x", "node-agent-x");
  ASSERT_GT(node.pid, 0);
  struct stop_node {
    pid_t pid;
    ~stop_node() {
      ::kill(pid, SIGTERM);
      if (itest::wait_exit(pid, 20s) == -1) ::kill(pid, SIGKILL), ::waitpid(pid, nullptr, 0);
    }
  } stopper{node.pid};
  // Alive in its own scheduler's table (its first heartbeat in): the submit below needs it.
  ASSERT_TRUE(itest::await_nodes_alive(addr, 1)) << itest::slurp(node.log);

  // What a restarted scheduler sends to resume a job from its checkpoint, with a parameter
  // frame that does not fit the model (another model's checkpoint, or a forged message).
  caf::actor_system_config cfg;
  cfg.set("logger.console", caf::atom("none"));
  caf::actor_system sys{cfg};
  const auto me_host = client_host_id();
  auto security = load_security(itest::suite_key().string(), "", "");  // as the node's
  ASSERT_TRUE(security) << security.error().to_string();
  auto net = zmq_transport::start(
      {.host = me_host, .listen = "tcp://127.0.0.1:0", .security = std::move(*security)});
  ASSERT_TRUE(net) << net.error().to_string();
  const auto node_host = node_host_id(addr);
  (*net)->add_peer(node_host, addr);
  caf::scoped_actor self{sys};
  const endpoint me{me_host, 77};
  (*net)->bind(me, caf::actor_cast<caf::actor>(self));
  start_job sj;
  sj.job = 424242;
  sj.spec_yaml = itest::slurp("examples/digits-mlp.yaml");
  sj.source_name = "examples/digits-mlp.yaml";
  sj.base_dir = (fs::current_path() / "examples").string();  // the spec's folder
  sj.master_host = node_host;
  sj.shard_hosts = {node_host};
  sj.worker_hosts = {node_host};
  sj.peers = {{node_host, addr}};
  auto initial = std::make_shared<coach::ps::training_state>();
  initial->values.assign(10, 0.5f);
  sj.initial = initial;
  ASSERT_TRUE((*net)->send(make_control(me, {node_host, node_agent_id}, sj)));
  std::optional<command_reply> reply;
  self->receive(
      [&](wire_message& m) {
        if (auto c = read_control(m))
          if (auto* r = std::get_if<command_reply>(&*c)) reply = *r;
      },
      caf::after(20s) >> [] {});
  ASSERT_TRUE(reply) << "no answer from the node:\n" << itest::slurp(node.log);
  EXPECT_EQ(reply->job, 424242u);
  ASSERT_TRUE(reply->failure) << "the node accepted 10 parameters for a model of 4810";
  EXPECT_EQ(reply->failure->message,
            "node 'node-x': job 424242: initial parameters have 40 bytes, the model has 4810 "
            "parameters (19240 bytes)");
  // Nothing was left half started: the node goes on taking jobs.
  auto r = itest::coach("submit examples/digits-mlp.yaml --wait --json --at " + addr);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
}

}  // namespace
