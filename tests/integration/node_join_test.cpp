// coach-node --join logs its way to the scheduler: a node started before its scheduler says
// at once that it cannot reach it and keeps retrying; once the scheduler is up it says it got
// through, and it is listed alive.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/process_harness.hpp"

namespace {

using namespace itest;

/// Waits (up to 30 s) until `what` appears in the node's log.
bool await_log(const node_process& n, const std::string& what) {
  for (int i = 0; i < 300; ++i) {
    if (slurp(n.log).find(what) != std::string::npos) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

TEST(node_join, a_node_started_before_its_scheduler_logs_its_retries_then_joins) {
  const std::string at = free_address();
  std::vector<node_process> nodes;
  nodes.push_back(start_node({"--listen", free_address(), "--join", at, "--name", "early",
                              "--heartbeat", "0.25"},
                             "early", "join-early"));
  EXPECT_TRUE(await_log(nodes[0], "[warning] early: cannot reach the scheduler at " + at +
                                      ": connection refused"))
      << slurp(nodes[0].log);
  nodes.push_back(start_node({"--listen", at, "--scheduler", "--store", "", "--name", "sched",
                              "--heartbeat", "0.25"},
                             "sched", "join-sched"));
  EXPECT_TRUE(await_log(nodes[0], "[info] early: reached the scheduler at " + at + " after "))
      << slurp(nodes[0].log);
  EXPECT_TRUE(await_nodes_alive(at, 2)) << slurp(nodes[1].log);
  stop_nodes(nodes);
}

}  // namespace
