// actors::dashboard_state, dashboard_page and worker_page: what the scheduler's node serves the
// dashboard, and what any other node serves at / (issue 41, item 5: a page blank until its
// first poll, a queued job's loss 0.0000, the newest job at the bottom, a lost node listed
// forever, an empty 404 at / on a worker node).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "actors/dashboard.hpp"

namespace coach::actors {
namespace {

node_status node(std::string name, bool alive, double seconds_since) {
  node_status n;
  n.last.name = std::move(name);
  n.last.address = "tcp://127.0.0.1:7470";
  n.alive = alive;
  n.seconds_since = seconds_since;
  return n;
}

dashboard_job job(std::uint64_t id, scheduler::job_state state) {
  dashboard_job d;
  d.status.job = id;
  d.status.name = "job-" + std::to_string(id);
  d.status.state = state;
  d.status.epochs_total = 10;
  return d;
}

nlohmann::json state(const std::vector<dashboard_job>& jobs,
                     const std::vector<node_status>& nodes = {}) {
  return nlohmann::json::parse(dashboard_state(jobs, nodes, "fifo", false));
}

TEST(dashboard_state, jobs_come_newest_first) {
  const auto s =
      state({job(1, scheduler::job_state::succeeded), job(3, scheduler::job_state::queued),
             job(2, scheduler::job_state::running)});
  ASSERT_EQ(s["jobs"].size(), 3u);
  EXPECT_EQ(s["jobs"][0]["job"], 3);
  EXPECT_EQ(s["jobs"][1]["job"], 2);
  EXPECT_EQ(s["jobs"][2]["job"], 1);
}

TEST(dashboard_state, a_job_without_a_progress_report_has_no_loss_and_no_accuracy_not_zero) {
  auto queued = job(1, scheduler::job_state::queued);
  auto started = job(2, scheduler::job_state::running);
  started.status.loss = 0.25;
  started.status.samples_done = 320;
  started.status.samples_epoch = 1280;
  const auto s = state({queued, started});
  EXPECT_TRUE(s["jobs"][1]["loss"].is_null()) << s["jobs"][1];
  EXPECT_TRUE(s["jobs"][1]["test_accuracy"].is_null());
  EXPECT_TRUE(s["jobs"][0]["test_accuracy"].is_null()) << "no epoch finished yet";
  EXPECT_TRUE(s["jobs"][1]["live"].is_null());
  EXPECT_EQ(s["jobs"][0]["loss"], 0.25);
}

TEST(dashboard_state, a_running_job_says_where_its_current_epoch_stands) {
  auto d = job(7, scheduler::job_state::running);
  d.status.epochs_done = 2;
  d.status.samples_done = 320;
  d.status.samples_epoch = 1280;
  d.status.loss = 0.5;
  for (std::uint32_t e = 0; e < 2; ++e) d.curve.push_back({.epoch = e, .train_loss = 1.0 - e});
  const auto s = state({d});
  const auto& j = s["jobs"][0];
  EXPECT_DOUBLE_EQ(j["live"]["epoch"].get<double>(), 2.25);
  EXPECT_DOUBLE_EQ(j["live"]["train_loss"].get<double>(), 0.5);
  // Finished epochs end at x = 1, 2: the live point lies between 2 and 3.
  EXPECT_EQ(j["curve"][0]["epoch"], 1);
  EXPECT_EQ(j["curve"][1]["epoch"], 2);
}

TEST(dashboard_state, a_lost_node_is_marked_then_dropped_after_ten_minutes) {
  auto draining = node("d", true, 0.2);
  draining.last.draining = true;
  const auto s = state({}, {node("a", true, 0.1), node("b", false, 30), draining,
                            node("gone", false, lost_node_listed_s + 1)});
  ASSERT_EQ(s["nodes"].size(), 3u) << s["nodes"];
  EXPECT_EQ(s["nodes"][0]["state"], "alive");
  EXPECT_EQ(s["nodes"][1]["name"], "b");
  EXPECT_EQ(s["nodes"][1]["state"], "lost");
  EXPECT_EQ(s["nodes"][2]["state"], "draining");
  EXPECT_EQ(lost_node_listed_s, 600);
}

TEST(dashboard_page, embeds_the_state_so_the_page_draws_as_it_loads) {
  auto d = job(1, scheduler::job_state::running);
  d.status.name = "</script><script>alert(1)</script>";
  const auto json = dashboard_state({d}, {node("a", true, 0.1)}, "fifo", false);
  const auto page = dashboard_page(json);
  const std::string open = "<script id=\"initial-state\" type=\"application/json\">";
  const auto at = page.find(open);
  ASSERT_NE(at, std::string::npos) << page;
  const auto end = page.find("</script>", at);
  const auto embedded = page.substr(at + open.size(), end - at - open.size());
  // A job's name cannot end the element: '<' travels escaped, and the JSON is the same.
  EXPECT_EQ(embedded.find('<'), std::string::npos) << embedded;
  EXPECT_EQ(nlohmann::json::parse(embedded), nlohmann::json::parse(json));
  EXPECT_NE(page.find("<script src=\"app.js\"></script>"), std::string::npos);
  // Without a state (the scheduler did not answer): null, and the page asks /api/state.
  EXPECT_NE(dashboard_page("").find(open + "null</script>"), std::string::npos);
}

TEST(worker_page, says_the_node_is_not_the_scheduler_and_where_it_joined) {
  const auto page = worker_page("node-<b>", "tcp://10.0.0.1:7470");
  EXPECT_NE(page.find("This coach-node is not the scheduler"), std::string::npos) << page;
  EXPECT_NE(page.find("<code>tcp://10.0.0.1:7470</code>"), std::string::npos) << page;
  EXPECT_NE(page.find("--metrics-listen"), std::string::npos);
  EXPECT_NE(page.find("node-&lt;b&gt;"), std::string::npos) << page;
  EXPECT_EQ(page.find("node-<b>"), std::string::npos);
}

}  // namespace
}  // namespace coach::actors
