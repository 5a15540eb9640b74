// What an operator sees: coach-node --join logs its way to the scheduler (a node started before
// its scheduler says at once that it cannot reach it and keeps retrying; once the scheduler is
// up it says it got through, and it is listed alive); coach status says why a queued job waits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <sstream>

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
  nodes.push_back(start_node(
      {"--listen", free_address(), "--join", at, "--name", "early", "--heartbeat", "0.25"}, "early",
      "join-early"));
  EXPECT_TRUE(await_log(
      nodes[0], "[warning] early: cannot reach the scheduler at " + at + ": connection refused"))
      << slurp(nodes[0].log);
  nodes.push_back(start_node(
      {"--listen", at, "--scheduler", "--store", "", "--name", "sched", "--heartbeat", "0.25"},
      "sched", "join-sched"));
  EXPECT_TRUE(await_log(nodes[0], "[info] early: reached the scheduler at " + at + " after "))
      << slurp(nodes[0].log);
  EXPECT_TRUE(await_nodes_alive(at, 2)) << slurp(nodes[1].log);
  stop_nodes(nodes);
}

/// A digits spec of `epochs` epochs and `workers` (a count or a range) written to the work folder.
std::string queue_spec(const std::string& name, int epochs, const std::string& workers) {
  const auto path = work_dir() / (name + ".yaml");
  std::ofstream(path) << "name: " << name
                      << "\ndataset: {format: csv, path: " COACH_SOURCE_DIR
                         "/data/digits.csv.gz, test_fraction: 0.2}\n"
                         "model: {type: mlp, hidden: [16], activation: relu}\n"
                         "optimizer: {type: sgd, learning_rate: 0.1}\nbatch_size: 32\nepochs: "
                      << epochs << "\nworkers: " << workers << "\nshards: 1\nbackend: cpu\n";
  return path.string();
}

TEST(queue, coach_status_says_why_a_queued_job_waits) {
  const std::string at = free_address();
  std::vector<node_process> nodes;
  nodes.push_back(start_node({"--listen", at, "--scheduler", "--store", "", "--name", "solo",
                              "--cpus", "3", "--heartbeat", "0.25"},
                             "solo", "queue-solo"));
  ASSERT_TRUE(await_nodes_alive(at, 1)) << slurp(nodes[0].log);
  // The first takes two of the three CPUs (a worker and a shard) for a long while; the second
  // needs three.
  auto a = coach("submit " + queue_spec("holder", 100000, "1") + " --json --at " + at);
  ASSERT_EQ(a.code, 0) << a.err;
  auto b = coach("submit " + queue_spec("waiter", 2, "2") + " --json --at " + at);
  ASSERT_EQ(b.code, 0) << b.err;
  const auto waiter = nlohmann::json::parse(b.out).at("job").get<int>();
  // Once the first holds its CPUs (until then the second waits behind it).
  run_result st;
  nlohmann::json job;
  for (int i = 0; i < 300; ++i) {
    st = coach("status " + std::to_string(waiter) + " --json --at " + at);
    ASSERT_EQ(st.code, 0) << st.err;
    job = nlohmann::json::parse(st.out).at("jobs").at(0);
    if (job.at("waiting").get<std::string>().rfind("needs", 0) == 0) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(job.at("state"), "queued") << st.out;
  EXPECT_EQ(job.at("waiting").get<std::string>().rfind(
                "needs 3 CPUs (2 worker(s) and 1 shard(s) at least), ", 0),
            0u)
      << st.out;
  auto text = coach("status --at " + at);
  EXPECT_NE(text.out.find("      waiting: needs 3 CPUs (2 worker(s) and 1 shard(s) at least), "),
            std::string::npos)
      << text.out;
  stop_nodes(nodes);
}

/// Starts `coach ARGS` from the source tree without waiting, its stdout and stderr in OUT and
/// ERR (the harness's coach() waits for the end).
pid_t start_coach(const std::string& args, const fs::path& out, const fs::path& err) {
  const std::string cmd = "cd " + std::string(COACH_SOURCE_DIR) + " && exec " +
                          std::string(COACH_BINARY_DIR) + "/apps/coach " + args + " >" +
                          out.string() + " 2>" + err.string();
  std::vector<std::string> argv_s{"/bin/sh", "-c", cmd};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

// Issue 41, item 2: `coach nodes` showed an idle node's CPUs as "0.0/2 free" (measured idle, on
// a busy host) while the waiting job's reason said "2 free", and `coach submit --wait` printed
// nothing while the job was queued. One figure of free CPUs now, and --wait says why it waits.
TEST(queue, submit_wait_says_why_the_job_waits_with_the_free_cpus_coach_nodes_shows) {
  const std::string at = free_address();
  std::vector<node_process> nodes;
  // --cpu-accounting reserved (the harness's): only what Coach reserved counts.
  nodes.push_back(start_node({"--listen", at, "--scheduler", "--store", "", "--name", "solo",
                              "--cpus", "3", "--heartbeat", "0.25"},
                             "solo", "wait-solo"));
  ASSERT_TRUE(await_nodes_alive(at, 1)) << slurp(nodes[0].log);
  // The holder takes two of the three CPUs (a worker and a shard) until it is cancelled.
  auto a = coach("submit " + queue_spec("holder", 100000, "1") + " --json --at " + at);
  ASSERT_EQ(a.code, 0) << a.err;
  const auto holder = std::to_string(nlohmann::json::parse(a.out).at("job").get<int>());
  std::string state;
  for (int i = 0; i < 300 && state != "running"; ++i) {
    state = state_of(coach("status " + holder + " --json --at " + at).out);
    if (state != "running") std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(state, "running");
  // The waiter needs three: `submit --wait` says why it waits while it does.
  const auto out = work_dir() / "wait.out", err = work_dir() / "wait.err";
  const pid_t waiter =
      start_coach("submit " + queue_spec("waiter", 2, "2") + " --wait --at " + at, out, err);
  ASSERT_GT(waiter, 0);
  const std::string why =
      ": needs 3 CPUs (2 worker(s) and 1 shard(s) at least), 1 free of 3: Coach's jobs hold 2 (a "
      "CPU per worker or shard); it starts when they end, or coach-node --cpus N advertises "
      "more\n";
  bool said = false;
  for (int i = 0; i < 300 && !said; ++i) {
    said = slurp(err).find(why) != std::string::npos;
    if (!said) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(said) << slurp(err);
  EXPECT_NE(slurp(err).find("coach: job 2 queued for "), std::string::npos) << slurp(err);
  // `coach nodes` (and its JSON, which the dashboard's /api/state shares) shows the same 1 free.
  auto listed = coach("nodes --json --at " + at);
  ASSERT_EQ(listed.code, 0) << listed.err;
  ASSERT_EQ(nodes_of(listed.out).size(), 1u) << listed.out;
  EXPECT_EQ(number_field(nodes_of(listed.out)[0], "cpus_free"), 1.0) << listed.out;
  auto table = coach("nodes --at " + at);
  EXPECT_NE(table.out.find(" 1.0/3 "), std::string::npos) << table.out;
  // Once the holder is cancelled the waiter runs, and --wait ends with it.
  ASSERT_EQ(coach("cancel " + holder + " --at " + at).code, 0);
  EXPECT_EQ(wait_exit(waiter, 120s), 0) << slurp(err);
  EXPECT_NE(slurp(err).find("coach: job 2 'waiter' succeeded"), std::string::npos) << slurp(err);
  stop_nodes(nodes);
}

TEST(queue, coach_logs_shows_a_jobs_history_and_follows_it_to_its_end) {
  const std::string at = free_address();
  std::vector<node_process> nodes;
  nodes.push_back(start_node(
      {"--listen", at, "--scheduler", "--store", "", "--name", "solo", "--heartbeat", "0.25"},
      "solo", "logs-solo"));
  ASSERT_TRUE(await_nodes_alive(at, 1)) << slurp(nodes[0].log);
  const auto spec = work_dir() / "logged.yaml";
  std::ofstream(spec) << "name: logged\n"
                         "dataset: {format: csv, path: " COACH_SOURCE_DIR
                         "/data/digits.csv.gz, test_fraction: 0.2}\n"
                         "model: {type: mlp, hidden: [16], activation: relu}\n"
                         "optimizer: {type: sgd, learning_rate: 0.1}\nbatch_size: 32\n"
                         "epochs: 40\nworkers: 1\nshards: 1\nbackend: cpu\n";
  auto sub = coach("submit " + spec.string() + " --json --at " + at);
  ASSERT_EQ(sub.code, 0) << sub.err;
  const auto job = std::to_string(nlohmann::json::parse(sub.out).at("job").get<int>());
  // Followed from the start: every line until the end, then exit 0.
  auto followed = coach("logs " + job + " -f --at " + at);
  EXPECT_EQ(followed.code, 0) << followed.err;
  const auto& out = followed.out;
  EXPECT_NE(out.find("job " + job + " 'logged' submitted (1 worker(s), 1 shard(s) asked)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("job " + job + ": epoch 1/40: train loss "), std::string::npos) << out;
  EXPECT_NE(out.find("job " + job + ": epoch 40/40: train loss "), std::string::npos) << out;
  EXPECT_NE(out.find("job " + job + " 'logged' succeeded"), std::string::npos) << out;
  EXPECT_LT(out.find("submitted"), out.find("epoch 1/40")) << "oldest first";
  // --json: one object a line, numbered from 1.
  auto js = coach("logs " + job + " --json --at " + at);
  ASSERT_EQ(js.code, 0) << js.err;
  std::istringstream lines(js.out);
  std::uint64_t expect = 1;
  for (std::string l; std::getline(lines, l); ++expect) {
    const auto e = nlohmann::json::parse(l);
    EXPECT_EQ(e.at("seq").get<std::uint64_t>(), expect);
    EXPECT_GT(e.at("time").get<double>(), 1.7e9);
  }
  EXPECT_GT(expect, 42u) << "submitted, started, placed, 40 epochs, the end";
  auto none = coach("logs 999 --at " + at);
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(none.err, "coach: no job 999\n");
  stop_nodes(nodes);
}

// Issue 37, item 3: a command that fails on its own arguments once the scheduler was reached
// crashed at exit (`free(): corrupted unsorted chunks`, 134): the connection opened to reach the
// scheduler outlived main. The arguments are now checked first, and the connection closes
// before main returns whatever the command did.
TEST(api_arguments, bad_arguments_and_refused_requests_end_with_one_line_not_a_crash) {
  const std::string at = free_address();
  std::vector<node_process> nodes;
  nodes.push_back(start_node(
      {"--listen", at, "--scheduler", "--store", "", "--name", "args", "--heartbeat", "0.25"},
      "args", "api-args"));
  ASSERT_TRUE(await_nodes_alive(at, 1)) << slurp(nodes[0].log);
  auto clean = [](const run_result& r) {
    return r.err.find("free()") == std::string::npos &&
           r.err.find("corrupted") == std::string::npos && r.code != 134;
  };
  const auto missing = (work_dir() / "no-such-spec.yaml").string();
  auto submit = coach("submit " + missing + " --at " + at);
  EXPECT_EQ(submit.code, 2) << submit.err;
  EXPECT_EQ(submit.err, "coach: " + missing + ": job spec file not found\n");
  auto rescale = coach("rescale 1 --at " + at);
  EXPECT_EQ(rescale.code, 2) << rescale.err;
  EXPECT_EQ(rescale.err, "coach: rescale: give --workers N and/or --shards M\n");
  // A spec over the 16 MiB a request can carry: said before sending (the scheduler dropped it
  // unread and the command waited 121 s, issue 37 item 8).
  const auto big = work_dir() / "big-spec.yaml";
  {
    std::ofstream out(big);
    out << "name: big\n";
    const std::string comment = "# " + std::string(1000, 'x') + "\n";
    for (int i = 0; i < 17 * 1024; ++i) out << comment;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto large = coach("submit " + big.string() + " --at " + at);
  EXPECT_EQ(large.code, 2) << large.err;
  EXPECT_EQ(large.err, "coach: " + big.string() +
                           ": the spec is 16.7 MiB; a scheduler takes specs of at most 15.9 MiB "
                           "(a data set goes in a file the spec names, not in the spec)\n");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  fs::remove(big);
  // An output the scheduler's host cannot write: refused at submit, not after the training.
  const auto spec = work_dir() / "unwritable-output.yaml";
  std::ofstream(spec) << "name: unwritable\n"
                         "dataset: {format: csv, path: " COACH_SOURCE_DIR
                         "/data/digits.csv.gz, test_fraction: 0.2}\n"
                         "model: {type: mlp, hidden: [16]}\n"
                         "optimizer: {type: sgd, learning_rate: 0.1}\n"
                         "batch_size: 32\nepochs: 1\nworkers: 1\nshards: 1\n"
                         "output: /nonexistent-dir/model.safetensors\n";
  auto output = coach("submit " + spec.string() + " --at " + at);
  EXPECT_EQ(output.code, 2) << output.err;
  EXPECT_EQ(output.err,
            "coach: output: /nonexistent-dir/model.safetensors: no directory /nonexistent-dir (on "
            "the scheduler's host, which writes it)\n");
  auto listed = coach("status --json --at " + at);
  ASSERT_EQ(listed.code, 0) << listed.err;
  EXPECT_TRUE(nlohmann::json::parse(listed.out).at("jobs").empty()) << listed.out;
  // Refused by the scheduler after the connection was used: one line, a clean exit.
  auto cancel = coach("cancel 999 --at " + at);
  EXPECT_NE(cancel.code, 0);
  EXPECT_TRUE(clean(cancel)) << cancel.code << " " << cancel.err;
  EXPECT_NE(cancel.err.find("999"), std::string::npos) << cancel.err;
  // And a command that succeeds exits 0 with nothing on stderr.
  auto status = coach("status --at " + at);
  EXPECT_EQ(status.code, 0) << status.err;
  EXPECT_TRUE(clean(status)) << status.err;
  stop_nodes(nodes);
}

}  // namespace
