// Names and addresses of coach-node processes (issue 41, item 4), on 127.0.0.1:
// - a second node with the --name of a live one is refused: it says why in one line and exits 2,
//   and `coach nodes` lists the name once, so `coach migrate --to NAME` is never ambiguous;
// - a node told to --join its own address refuses at once (it would join itself and wait for a
//   scheduler that is not there), exit 2;
// - --listen tcp://localhost:PORT binds (ZeroMQ took "localhost" for an interface: "No such
//   device"): the name resolves to 127.0.0.1, which the node advertises.
#include <gtest/gtest.h>

#include "tests/integration/process_harness.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace {

using namespace itest;
using namespace std::chrono_literals;

class names_and_addresses : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure())
      for (auto& n : nodes_)
        std::fprintf(stderr, "---- %s ----\n%s\n", n.name.c_str(), slurp(n.log).c_str());
    stop_nodes(nodes_);
  }
  node_process& add(const std::vector<std::string>& args, const std::string& name,
                    const std::string& log) {
    nodes_.push_back(start_node(args, name, log));
    return nodes_.back();
  }
  std::vector<node_process> nodes_;
};

std::string port_of(const std::string& address) {
  return address.substr(address.rfind(':') + 1);
}

TEST_F(names_and_addresses, a_second_node_with_a_live_nodes_name_is_refused_and_exits_2) {
  const auto at = free_address();
  add({"--listen", at, "--scheduler", "--store", "", "--name", "n-a", "--heartbeat", "0.25"}, "n-a",
      "names-n-a");
  const auto b_address = free_address();
  add({"--listen", b_address, "--join", at, "--name", "n-b", "--heartbeat", "0.25"}, "n-b",
      "names-n-b");
  ASSERT_TRUE(await_nodes_alive(at, 2));
  auto& twin =
      add({"--listen", free_address(), "--join", at, "--name", "n-b", "--heartbeat", "0.25"},
          "n-b (second)", "names-n-b-second");
  const int code = wait_exit(twin.pid, 30s);
  EXPECT_EQ(code, 2) << slurp(twin.log);
  if (code != -1) twin.pid = -1;
  const std::string why = "the name 'n-b' is taken by the live node at " + b_address +
                          "; give this node another --name";
  const auto log = slurp(twin.log);
  EXPECT_EQ(count(log, "the scheduler refused this node: " + why), 1u) << log;
  EXPECT_EQ(count(slurp(nodes_[0].log), "refused: " + why), 1u) << slurp(nodes_[0].log);
  // Listed once: the name means one node.
  auto listed = coach("nodes --json --at " + at);
  ASSERT_EQ(listed.code, 0) << listed.err;
  auto names = node_names(listed.out);
  std::sort(names.begin(), names.end());  // listed by host id
  EXPECT_EQ(names, (std::vector<std::string>{"n-a", "n-b"})) << listed.out;
  EXPECT_EQ(alive_nodes(listed.out), 2u) << listed.out;
}

TEST_F(names_and_addresses, a_node_told_to_join_its_own_address_refuses_in_one_line) {
  const auto own = free_address();
  for (const std::string& join : {own, "localhost:" + port_of(own)}) {
    SCOPED_TRACE(join);
    auto& n = add({"--listen", own, "--join", join, "--name", "self"}, "self", "names-self");
    const int code = wait_exit(n.pid, 10s);
    EXPECT_EQ(code, 2);
    if (code != -1) n.pid = -1;
    const std::string shown = join.starts_with("tcp://") ? join : "tcp://" + join;
    EXPECT_EQ(slurp(n.log), "coach-node: --join " + shown +
                                " is this node's own address (--listen " + own +
                                "): it would join itself; give the scheduler's address, or "
                                "--scheduler to run one here\n");
  }
}

TEST_F(names_and_addresses, listen_on_localhost_binds_and_advertises_its_address) {
  const auto port = port_of(free_address());
  add({"--listen", "tcp://localhost:" + port, "--scheduler", "--store", "", "--name", "l-a",
       "--heartbeat", "0.25"},
      "l-a", "names-l-a");
  add({"--listen", "localhost:" + port_of(free_address()), "--join", "localhost:" + port, "--name",
       "l-b", "--heartbeat", "0.25"},
      "l-b", "names-l-b");
  ASSERT_TRUE(await_nodes_alive("localhost:" + port, 2));
  auto listed = coach("nodes --json --at 127.0.0.1:" + port);
  ASSERT_EQ(listed.code, 0) << listed.err;
  for (const auto& n : nodes_of(listed.out))
    EXPECT_TRUE(string_field(n, "address").starts_with("tcp://127.0.0.1:")) << listed.out;
  EXPECT_EQ(count(slurp(nodes_[0].log), "No such device"), 0u) << slurp(nodes_[0].log);
  // A name that does not resolve: one line, exit 2.
  auto& bad = add({"--listen", "tcp://no-such-host.invalid:7000", "--scheduler", "--store", ""},
                  "bad", "names-bad");
  const int code = wait_exit(bad.pid, 20s);
  EXPECT_EQ(code, 2);
  if (code != -1) bad.pid = -1;
  const auto log = slurp(bad.log);
  EXPECT_TRUE(
      log.starts_with("coach-node: --listen 'tcp://no-such-host.invalid:7000': the name "
                      "'no-such-host.invalid' does not resolve"))
      << log;
  EXPECT_EQ(count(log, "\n"), 1u) << log;
}

}  // namespace
