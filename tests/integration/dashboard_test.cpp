// The dashboard in a browser: headless Chromium (Debian's chromium) loads the page the
// scheduler's coach-node serves while a 3-node cluster trains a job, and what the page shows
// as it loads (no virtual-time budget: before any poll could answer) is checked (the nodes,
// the jobs newest first, the running job and its figures, its curves with every epoch
// labelled, the policy, read-only); a screenshot is kept in the build directory's artifacts/.
// The page is also drawn from a state made here (a queued job's loss '—', a lost node, a job in
// its first epoch), a worker node's / names the scheduler, and a node that died is marked lost.
// The browser tests skip where Chromium is not installed.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "actors/dashboard.hpp"
#include "tests/integration/process_harness.hpp"

namespace {

/// What the dashboard's page sends with its actions (actors::post_refusal).
const httplib::Headers dashboard_header{{"X-Coach-Dashboard", "1"}};

using namespace itest;
using itest::coach;  // the program, not the namespace

std::string browser() {
  for (const char* b : {"chromium", "chromium-browser", "google-chrome"})
    if (std::system((std::string("command -v ") + b + " >/dev/null 2>&1").c_str()) == 0) return b;
  return {};
}

/// Chromium's flags for a page taken as it loads: no virtual-time budget (which would let the
/// page's polls run first), so what it shows is what a user sees at once.
std::string at_load_flags(const std::string& profile) {
  return " --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=" +
         (work_dir() / profile).string() + " --window-size=1400,1000 ";
}

/// Where the suite keeps what a person looks at (the build directory's artifacts/).
fs::path artifact(const std::string& name) {
  const auto dir = fs::path(COACH_BINARY_DIR) / "artifacts";
  fs::create_directories(dir);
  return dir / name;
}

TEST(dashboard, at_load_chromium_shows_the_nodes_and_the_running_job_newest_first) {
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
  // An older job that ended, then the one that runs: the running one must be on top.
  const auto spec = [](const std::string& name, int epochs) {
    const auto file = work_dir() / (name + ".yaml");
    std::ofstream(file) << "name: " << name
                        << "\n"
                           "dataset: {format: csv, path: " COACH_SOURCE_DIR
                           "/data/digits.csv.gz, test_fraction: 0.2}\n"
                           "model: {type: mlp, hidden: [64], activation: relu}\n"
                           "optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9}\n"
                           "batch_size: 32\nepochs: "
                        << epochs << "\nworkers: 2\nshards: 2\nplacement: spread\nbackend: cpu\n";
    return file.string();
  };
  auto first = coach("submit " + spec("dash-first", 1) + " --wait --json --at " + at);
  ASSERT_EQ(first.code, 0) << first.err;
  const auto older = std::to_string(nlohmann::json::parse(first.out).at("job").get<int>());
  auto sub = coach("submit " + spec("dash-digits", 100000) + " --json --at " + at);
  ASSERT_EQ(sub.code, 0) << sub.err;
  const auto job = std::to_string(nlohmann::json::parse(sub.out).at("job").get<int>());
  // A few epochs in (curves to draw).
  bool going = false;
  for (int i = 0; i < 300 && !going; ++i) {
    auto st = coach("status " + job + " --json --at " + at);
    going = st.code == 0 &&
            nlohmann::json::parse(st.out).at("jobs").at(0).at("epochs_done").get<int>() >= 3;
    if (!going) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(going);

  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  const auto flags = at_load_flags("chromium");
  const auto dom_file = work_dir() / "dashboard-dom.html";
  ASSERT_EQ(std::system((chromium + flags + "--dump-dom " + url + " > " + dom_file.string() +
                         " 2>/dev/null")
                            .c_str()),
            0);
  const auto dom = slurp(dom_file);
  for (const char* n : {"node-a", "node-b", "node-c"})
    EXPECT_NE(dom.find(std::string("data-name=\"") + n + "\" data-state=\"alive\""),
              std::string::npos)
        << n << dom;
  const auto newest = dom.find("<tr class=\"job\" data-job=\"" + job + "\"");
  const auto oldest = dom.find("<tr class=\"job\" data-job=\"" + older + "\"");
  ASSERT_NE(newest, std::string::npos) << dom;
  ASSERT_NE(oldest, std::string::npos) << dom;
  EXPECT_LT(newest, oldest) << "the newest job first";
  EXPECT_LT(dom.find("id=\"job-" + job + "\""), dom.find("id=\"job-" + older + "\""));
  EXPECT_NE(dom.find("dash-digits"), std::string::npos);
  EXPECT_NE(dom.find("<span class=\"state-running\">running</span>"), std::string::npos) << dom;
  EXPECT_NE(dom.find("<span class=\"state-succeeded\">succeeded</span>"), std::string::npos);
  EXPECT_NE(dom.find("<b id=\"policy\">fifo</b>"), std::string::npos);
  EXPECT_NE(dom.find("read-only"), std::string::npos);
  // Both panels drawn for each job, with their curves (loss: training and test, and the running
  // job's current epoch with a dot where it is; accuracy), the epoch axis labelled.
  EXPECT_EQ(count(dom, "class=\"curve loss\""), 2u);
  EXPECT_EQ(count(dom, "class=\"curve accuracy\""), 2u);
  EXPECT_EQ(count(dom, "class=\"epochs\""), 6u) << dom;
  EXPECT_EQ(count(dom, "class=\"live\""), 1u) << dom;
  EXPECT_EQ(count(dom, "class=\"now\""), 1u) << dom;
  // (Epochs labelled from 0, every one while at most 15 fit, else every 2nd, 5th, 10th, ...: the
  // made-up state's test checks each.)
  EXPECT_GE(count(dom, "class=\"epoch-label\">0</text>"), 4u) << dom;
  // Its history: its start and where its parts went.
  EXPECT_NE(dom.find("job " + job + " 'dash-digits': 2 worker(s), 2 shard(s) over 3 host(s)"),
            std::string::npos)
      << dom;

  // The screenshot a person looks at, taken at load too.
  const auto shot = artifact("dashboard.png");
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

/// The text of each cell of the table row that starts at `at` in `dom`.
std::vector<std::string> cells_at(const std::string& dom, std::size_t at) {
  std::vector<std::string> out;
  const auto end = dom.find("</tr>", at);
  for (auto td = dom.find("<td>", at); td < end; td = dom.find("<td>", td + 1)) {
    const auto close = dom.find("</td>", td);
    out.push_back(dom.substr(td + 4, close - td - 4));
  }
  return out;
}

TEST(dashboard, the_page_draws_the_state_it_came_with_before_any_poll) {
  // The page as the scheduler's node serves it, with a state made here (a lost node; a queued,
  // a starting and a finished job), opened from a file: no /api/state can answer, so all it
  // shows comes from the state embedded in it.
  const auto chromium = browser();
  if (chromium.empty()) GTEST_SKIP() << "no Chromium here (Debian package chromium)";
  using ::coach::scheduler::job_state;
  std::vector<::coach::actors::node_status> nodes(2);
  nodes[0].last.name = "up";
  nodes[1].last.name = "gone";
  nodes[1].alive = false;
  nodes[1].seconds_since = 30;
  std::vector<::coach::actors::dashboard_job> jobs(3);
  for (std::uint64_t i = 0; i < 3; ++i) {
    jobs[i].status.job = i + 1;
    jobs[i].status.name = "job-" + std::to_string(i + 1);
    jobs[i].status.epochs_total = 12;
  }
  jobs[0].status.state = job_state::succeeded;
  jobs[0].status.epochs_done = 12;
  jobs[0].status.loss = 0.1;
  for (std::uint32_t e = 0; e < 12; ++e)
    jobs[0].curve.push_back({.epoch = e,
                             .train_loss = 1.0 / (e + 1),
                             .test_loss = 1.1 / (e + 1),
                             .test_accuracy = 0.9});
  jobs[1].status.state = job_state::running;  // in its first epoch: no epoch finished yet
  jobs[1].status.loss = 1.9;
  jobs[1].status.samples_done = 400;
  jobs[1].status.samples_epoch = 1440;
  jobs[2].status.state = job_state::queued;
  jobs[2].status.waiting = "needs 4 CPUs";
  const auto dir = work_dir() / "page";
  fs::create_directories(dir);
  std::ofstream(dir / "index.html") << ::coach::actors::dashboard_page(
      ::coach::actors::dashboard_state(jobs, nodes, "fifo", false));
  for (const char* f : {"app.js", "style.css"})
    std::ofstream(dir / f) << ::coach::actors::dashboard_asset(f).second;
  const auto dom_file = work_dir() / "page-dom.html";
  ASSERT_EQ(std::system((chromium + at_load_flags("chromium-page") + "--dump-dom file://" +
                         (dir / "index.html").string() + " > " + dom_file.string() + " 2>/dev/null")
                            .c_str()),
            0);
  const auto dom = slurp(dom_file);
  // Newest first.
  const auto j3 = dom.find("<tr class=\"job\" data-job=\"3\"");
  const auto j2 = dom.find("<tr class=\"job\" data-job=\"2\"");
  const auto j1 = dom.find("<tr class=\"job\" data-job=\"1\"");
  ASSERT_TRUE(j3 != std::string::npos && j2 != std::string::npos && j1 != std::string::npos) << dom;
  EXPECT_LT(j3, j2);
  EXPECT_LT(j2, j1);
  // The queued job: no loss, no accuracy yet ('—'), and why it waits.
  const auto queued = cells_at(dom, j3);
  ASSERT_EQ(queued.size(), 11u) << dom.substr(j3, 600);
  EXPECT_EQ(queued[4], "\u2014");  // accuracy
  EXPECT_EQ(queued[5], "\u2014");  // loss, not 0.0000
  EXPECT_EQ(queued[10], "needs 4 CPUs");
  EXPECT_EQ(cells_at(dom, j2)[5], "1.9000");
  // The lost node, marked.
  EXPECT_NE(dom.find("data-name=\"gone\" data-state=\"lost\""), std::string::npos) << dom;
  EXPECT_NE(dom.find("lost (last seen 30 s ago)"), std::string::npos);
  EXPECT_NE(dom.find("data-name=\"up\" data-state=\"alive\""), std::string::npos);
  // The job in its first epoch: its loss panel shows where it is; accuracy comes with epoch 1.
  const auto card2 =
      dom.substr(dom.find("id=\"job-2\""), dom.find("id=\"job-1\"") - dom.find("id=\"job-2\""));
  EXPECT_NE(card2.find("class=\"live\""), std::string::npos) << card2;
  EXPECT_NE(card2.find("class=\"now\""), std::string::npos) << card2;
  EXPECT_NE(card2.find("measured as epoch 1 ends"), std::string::npos) << card2;
  // The finished job: every one of its 12 epochs labelled on both panels.
  const auto card1 = dom.substr(dom.find("id=\"job-1\""));
  for (int e = 0; e <= 12; ++e)
    EXPECT_EQ(count(card1, "class=\"epoch-label\">" + std::to_string(e) + "</text>"), 2u) << e;
}

TEST(dashboard, a_worker_nodes_root_names_the_scheduler_and_a_lost_node_is_marked_lost) {
  const std::string at = free_address();
  const int port = free_port(), worker_port = free_port();
  std::vector<node_process> nodes;
  nodes.push_back(start_node(
      {"--listen", at, "--scheduler", "--store", "", "--name", "sched", "--heartbeat", "0.25",
       "--node-timeout", "1", "--metrics-listen", "127.0.0.1:" + std::to_string(port)},
      "sched", "root-sched"));
  nodes.push_back(
      start_node({"--listen", free_address(), "--join", at, "--name", "w", "--heartbeat", "0.25",
                  "--metrics-listen", "127.0.0.1:" + std::to_string(worker_port)},
                 "w", "root-w"));
  ASSERT_TRUE(await_nodes_alive(at, 2));
  httplib::Client worker("127.0.0.1", worker_port);
  auto page = worker.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200) << page->body;
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->body.find("This coach-node is not the scheduler"), std::string::npos)
      << page->body;
  EXPECT_NE(page->body.find("<code>" + at + "</code>"), std::string::npos) << page->body;
  // The worker's node dies: the dashboard marks it lost (and drops it 10 minutes on).
  ::kill(nodes[1].pid, SIGKILL);
  ::waitpid(nodes[1].pid, nullptr, 0);
  nodes.pop_back();
  httplib::Client sched("127.0.0.1", port);
  std::string seen, body;
  for (int i = 0; i < 100 && seen != "lost"; ++i) {
    auto r = sched.Get("/api/state");
    ASSERT_TRUE(r);
    body = r->body;
    const auto state = parse_json(r->body);
    for (const auto& n : json_field(state, "nodes"))
      if (string_field(n, "name") == "w") seen = string_field(n, "state");
    if (seen != "lost") std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(seen, "lost") << body;
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
