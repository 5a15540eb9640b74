// A `coach submit` sent again (its answer lost, its scheduler restarted meanwhile) gets the job
// its first copy stored, never a second one: the request's token is kept with the job in the
// scheduler's store. Driven with the job API client against coach-node processes.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <iterator>
#include <thread>

#include "actors/api_client.hpp"
#include "tests/integration/process_harness.hpp"

namespace coach {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST(submit_token, a_submit_sent_again_gets_the_job_it_stored_also_after_a_restart) {
  const auto store = itest::work_dir() / "token.db";
  fs::remove(store);
  const std::string at = itest::free_address();
  const std::vector<std::string> scheduler_args{
      "--listen", at,       "--scheduler", "--store", store.string(),
      "--name",   "node-a", "--heartbeat", "0.25"};
  std::vector<itest::node_process> nodes{
      itest::start_node(scheduler_args, "node-a", "token-node-a")};
  ASSERT_TRUE(itest::await_nodes_alive(at, 1)) << itest::slurp(nodes[0].log);

  actors::submit_request req;
  req.spec_yaml =
      "name: tokened\ndataset: {format: csv, path: data/digits.csv.gz, test_fraction: 0.2}\n"
      "model: {type: mlp, hidden: [64], activation: relu}\n"
      "optimizer: {type: sgd, learning_rate: 0.05}\nbatch_size: 32\nepochs: 1000\n"
      "workers: 1\nshards: 1\nbackend: cpu\n";
  req.source_name = "tokened.yaml";
  req.base_dir = COACH_SOURCE_DIR;
  req.token = 0x8000000000000123ull;
  auto submit_once = [&](std::chrono::milliseconds resend) -> std::uint64_t {
    auto security = actors::load_security(itest::suite_key().string(), "", "");
    EXPECT_TRUE(security) << security.error().to_string();
    if (!security) return 0;
    auto client = actors::api_client::open(at, std::move(*security));
    EXPECT_TRUE(client) << client.error().to_string();
    if (!client) return 0;
    auto reply = (*client)->call(req, 60s, resend);
    EXPECT_TRUE(reply) << reply.error().to_string();
    if (!reply) return 0;
    EXPECT_FALSE(reply->failure) << reply->failure->message;
    const auto* sub = std::get_if<actors::submit_reply>(&reply->body);
    return sub ? sub->job : 0;
  };
  const auto first = submit_once(0ms);
  ASSERT_NE(first, 0u);
  EXPECT_EQ(submit_once(0ms), first) << "the same submit again is the same job";

  // The scheduler dies and comes back on its store; the client sends its request while it is
  // down, and again every 200 ms: answered with the same job once the scheduler is up.
  ::kill(nodes[0].pid, SIGKILL);
  ::waitpid(nodes[0].pid, nullptr, 0);
  nodes[0].pid = -1;
  std::thread restart([&] {
    std::this_thread::sleep_for(500ms);  // a gap, the point: the request goes out meanwhile
    nodes[0] = itest::start_node(scheduler_args, "node-a", "token-node-a-again");
  });
  const auto after = submit_once(200ms);
  restart.join();
  EXPECT_EQ(after, first);
  const auto all = itest::coach("status --json --at " + at);
  std::size_t tokened = 0;
  for (const auto& job : itest::json_field(itest::parse_json(all.out), "jobs"))
    if (itest::string_field(job, "name") == "tokened") ++tokened;
  EXPECT_EQ(tokened, 1u) << all.out;
  const auto log = itest::slurp(nodes[0].log);
  EXPECT_NE(log.find("its submit came again; answered with its id"), std::string::npos) << log;
  itest::coach("cancel " + std::to_string(first) + " --at " + at);
  itest::stop_nodes(nodes);
}

}  // namespace
}  // namespace coach
