// The dashboard in a browser: headless Chromium (Debian's chromium) loads the page the
// scheduler's coach-node serves while a 3-node cluster trains a job, and what the page shows
// after its script ran is checked (the nodes, the running job and its figures, its curves, the
// policy, read-only); a screenshot is kept as the test's artifact. Skipped where Chromium is
// not installed.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/process_harness.hpp"

namespace {

/// What the dashboard's page sends with its actions (actors::post_refusal).
const httplib::Headers dashboard_header{{"X-Coach-Dashboard", "1"}};

using namespace itest;

std::string browser() {
  for (const char* b : {"chromium", "chromium-browser", "google-chrome"})
    if (std::system((std::string("command -v ") + b + " >/dev/null 2>&1").c_str()) == 0) return b;
  return {};
}

TEST(dashboard, chromium_shows_the_nodes_the_running_job_and_its_curves) {
  const auto chromium = browser();
  if (chromium.empty()) GTEST_SKIP() << "no Chromium here (Debian package chromium)";
  const std::string at = free_address();
  const int port = free_port();
  std::vector<node_process> nodes;
  nodes.push_back(
      start_node({"--listen", at, "--scheduler", "--store", "", "--name", "node-a", "--heartbeat",
                  "0.25", "--metrics-listen", "127.0.0.1:" + std::to_string(port)},
                 "node-a", "dash-node-a"));
  for (const char* n : {"node-b", "node-c"})
    nodes.push_back(
        start_node({"--listen", free_address(), "--join", at, "--name", n, "--heartbeat", "0.25"},
                   n, std::string("dash-") + n));
  ASSERT_TRUE(await_nodes_alive(at, 3));
  const auto spec = work_dir() / "dash.yaml";
  std::ofstream(spec) << "name: dash-digits\n"
                         "dataset: {format: csv, path: " COACH_SOURCE_DIR
                         "/data/digits.csv.gz, test_fraction: 0.2}\n"
                         "model: {type: mlp, hidden: [64], activation: relu}\n"
                         "optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9}\n"
                         "batch_size: 32\nepochs: 100000\nworkers: 2\nshards: 2\n"
                         "placement: spread\nbackend: cpu\n";
  auto sub = coach("submit " + spec.string() + " --json --at " + at);
  ASSERT_EQ(sub.code, 0) << sub.err;
  const auto job = std::to_string(nlohmann::json::parse(sub.out).at("job").get<int>());
  // A few epochs in (curves to draw).
  bool going = false;
  for (int i = 0; i < 300 && !going; ++i) {
    auto st = coach("status " + job + " --json --at " + at);
    going = st.code == 0 &&
            nlohmann::json::parse(st.out).at("jobs").at(0).at("epochs_done").get<int>() >= 5;
    if (!going) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(going);

  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --no-first-run "
      "--user-data-dir=" +
      (work_dir() / "chromium").string() + " --window-size=1400,1000 --virtual-time-budget=5000 ";
  const auto dom_file = work_dir() / "dashboard-dom.html";
  ASSERT_EQ(std::system((chromium + flags + "--dump-dom " + url + " > " + dom_file.string() +
                         " 2>/dev/null")
                            .c_str()),
            0);
  const auto dom = slurp(dom_file);
  for (const char* n : {"node-a", "node-b", "node-c"})
    EXPECT_NE(dom.find(std::string("data-name=\"") + n + "\""), std::string::npos) << n << dom;
  EXPECT_NE(dom.find("data-job=\"" + job + "\""), std::string::npos) << dom;
  EXPECT_NE(dom.find("dash-digits"), std::string::npos);
  EXPECT_NE(dom.find("<span class=\"state-running\">running</span>"), std::string::npos) << dom;
  EXPECT_NE(dom.find("<b id=\"policy\">fifo</b>"), std::string::npos);
  EXPECT_NE(dom.find("read-only"), std::string::npos);
  // Both panels drawn, with the curves in them (loss: training and test; accuracy).
  EXPECT_NE(dom.find("class=\"curve loss\""), std::string::npos);
  EXPECT_NE(dom.find("class=\"curve accuracy\""), std::string::npos);
  EXPECT_EQ(count(dom, "<polyline"), 3u) << dom;
  // Its history: its start and where its parts went.
  EXPECT_NE(dom.find("job " + job + " 'dash-digits': 2 worker(s), 2 shard(s) over 3 host(s)"),
            std::string::npos)
      << dom;

  const auto shot = work_dir() / "dashboard.png";
  std::filesystem::remove(shot);
  ASSERT_EQ(std::system((chromium + flags + "--screenshot=" + shot.string() + " " + url +
                         " >/dev/null 2>&1")
                            .c_str()),
            0);
  EXPECT_GT(std::filesystem::file_size(shot), 10000u);
  std::printf("dashboard_test: screenshot kept at %s\n", shot.string().c_str());

  // Read-only: the page's actions are refused.
  httplib::Client c("127.0.0.1", port);
  auto r = c.Post("/api/cancel", dashboard_header, job, "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(r->body, "read-only: start the scheduler's coach-node with --dashboard-admin\n");
  auto cancel = coach("cancel " + job + " --at " + at);
  EXPECT_EQ(cancel.code, 0) << cancel.err;
  stop_nodes(nodes);
}

TEST(dashboard, with_dashboard_admin_the_page_may_set_the_policy_and_cancel_a_job) {
  const std::string at = free_address();
  const int port = free_port();
  std::vector<node_process> nodes;
  nodes.push_back(start_node(
      {"--listen", at, "--scheduler", "--store", "", "--name", "admin", "--heartbeat", "0.25",
       "--dashboard-admin", "--metrics-listen", "127.0.0.1:" + std::to_string(port)},
      "admin", "dash-admin"));
  ASSERT_TRUE(await_nodes_alive(at, 1));
  httplib::Client c("127.0.0.1", port);
  auto state = c.Get("/api/state");
  ASSERT_TRUE(state);
  ASSERT_EQ(state->status, 200);
  EXPECT_TRUE(nlohmann::json::parse(state->body).at("admin").get<bool>());
  // Issue 37: another site's page, or one whose name its DNS points here, is refused.
  auto forged = c.Post("/api/policy", {{"Origin", "http://evil.example"}, {"Host", "evil.example"}},
                       "elastic-fifo", "text/plain");
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 403);
  EXPECT_NE(forged->body.find("X-Coach-Dashboard header"), std::string::npos) << forged->body;
  auto rebound = c.Post("/api/policy",
                        {{"X-Coach-Dashboard", "1"},
                         {"Origin", "http://evil.example:" + std::to_string(port)},
                         {"Host", "evil.example:" + std::to_string(port)}},
                        "elastic-fifo", "text/plain");
  ASSERT_TRUE(rebound);
  EXPECT_EQ(rebound->status, 403);
  EXPECT_NE(rebound->body.find("does not name this node"), std::string::npos) << rebound->body;
  EXPECT_EQ(coach("policy get --at " + at).out, "fifo\n");  // unchanged
  // The node has the suite's key: an action needs the admin token made from it (issue 37).
  auto no_token = c.Post("/api/policy", dashboard_header, "elastic-fifo", "text/plain");
  ASSERT_TRUE(no_token);
  EXPECT_EQ(no_token->status, 403);
  EXPECT_NE(no_token->body.find("admin token"), std::string::npos) << no_token->body;
  auto wrong = dashboard_header;
  wrong.emplace("X-Coach-Token", std::string(64, '0'));
  EXPECT_EQ(c.Post("/api/policy", wrong, "elastic-fifo", "text/plain")->status, 403);
  EXPECT_EQ(coach("policy get --at " + at).out, "fifo\n");  // unchanged
  auto token = coach("dashboard-token");
  ASSERT_EQ(token.code, 0) << token.err;
  ASSERT_EQ(token.out.size(), 65u) << token.out;  // 64 hex digits and a newline
  auto dashboard_header = ::dashboard_header;
  dashboard_header.emplace("X-Coach-Token", token.out.substr(0, 64));
  auto set = c.Post("/api/policy", dashboard_header, "elastic-fifo", "text/plain");
  ASSERT_TRUE(set);
  EXPECT_EQ(set->status, 200) << set->body;
  EXPECT_EQ(coach("policy get --at " + at).out, "elastic-fifo\n");
  auto bad = c.Post("/api/policy", dashboard_header, "lottery", "text/plain");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("unknown policy 'lottery'"), std::string::npos) << bad->body;
  auto none = c.Post("/api/cancel", dashboard_header, "999", "text/plain");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 400);
  EXPECT_EQ(none->body, "no job 999\n");
  stop_nodes(nodes);
}

/// A non-loopback IPv4 address of this machine, or "" when it has none.
std::string own_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::string out;
  for (auto* a = list; a && out.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char ip[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, ip, sizeof ip);
    if (!std::string_view(ip).starts_with("127.")) out = ip;
  }
  ::freeifaddrs(list);
  return out;
}

TEST(dashboard, the_http_port_serves_other_addresses_only_with_http_public) {
  // Issue 37: on a keyed cluster the HTTP port served the state (node addresses, job names,
  // output paths) and /metrics to anyone.
  const std::string ip = own_address();
  if (ip.empty()) GTEST_SKIP() << "this machine has no non-loopback IPv4 address to come from";
  for (const bool open : {false, true}) {
    const std::string at = free_address();
    const int port = free_port();
    std::vector<std::string> args{"--listen",
                                  at,
                                  "--scheduler",
                                  "--store",
                                  "",
                                  "--name",
                                  "web",
                                  "--metrics-listen",
                                  "0.0.0.0:" + std::to_string(port)};
    if (open) args.push_back("--http-public");
    std::vector<node_process> nodes{start_node(args, "web", open ? "web-public" : "web-local")};
    ASSERT_TRUE(await_nodes_alive(at, 1));
    httplib::Client local("127.0.0.1", port), remote(ip, port);
    auto l = local.Get("/api/state");
    ASSERT_TRUE(l);
    EXPECT_EQ(l->status, 200);
    for (const char* path : {"/metrics", "/api/state", "/"}) {
      auto r = remote.Get(path);
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, open ? 200 : 403) << path;
      if (!open) EXPECT_NE(r->body.find("--http-public"), std::string::npos) << r->body;
    }
    stop_nodes(nodes);
  }
}

}  // namespace
