// The `coach` program as a user runs it: exit codes, one-line errors, the JSON report.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include <vector>

#include "actors/embedded_cluster.hpp"
#include "kernels/backend.hpp"
#include "spec/job_spec.hpp"
#include "tests/helpers/run_coach.hpp"
#include "worker/dataset.hpp"
#include "worker/model_file.hpp"
#include "worker/network.hpp"

namespace {

using coach::testing::temp_file;

coach::testing::run_result run(const std::string& args) {
  return coach::testing::run_coach(args);
}

/// Whether a `coach train --report` report (parsed) lists an epoch numbered `epoch`.
bool has_epoch(const nlohmann::json& report, int epoch) {
  if (!report.is_object() || !report.contains("epochs") || !report["epochs"].is_array())
    return false;
  return std::ranges::any_of(report["epochs"], [&](const nlohmann::json& e) {
    return e.is_object() && e.contains("epoch") && e["epoch"] == epoch;
  });
}

TEST(cli, version_names_the_backends) {
  auto r = run("version");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("coach 0."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cpu"), std::string::npos) << r.output;
}

TEST(cli, dash_dash_version_prints_the_version_of_each_program) {
  auto r = run("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.output.rfind("coach 0.", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  const std::string node = std::string(COACH_BINARY_DIR) + "/apps/coach-node --version";
  std::FILE* p = ::popen(node.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[256] = {};
  ASSERT_NE(std::fgets(line, sizeof line, p), nullptr);
  EXPECT_EQ(::pclose(p), 0);
  EXPECT_EQ(std::string(line).rfind("coach-node 0.", 0), 0u) << line;
  const std::string sim = std::string(COACH_BINARY_DIR) + "/apps/coach-sim --version";
  p = ::popen(sim.c_str(), "r");
  ASSERT_NE(p, nullptr);
  ASSERT_NE(std::fgets(line, sizeof line, p), nullptr);
  EXPECT_EQ(::pclose(p), 0);
  EXPECT_EQ(std::string(line).rfind("coach-sim 0.", 0), 0u) << line;
}

/// A port on 127.0.0.1 where nothing listens (bound, then closed).
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(cli, a_command_to_an_address_where_nothing_listens_fails_within_two_seconds) {
  const std::string at = "127.0.0.1:" + std::to_string(closed_port());
  for (const std::string cmd :
       {"submit examples/digits-mlp.yaml", "status", "nodes", "cancel 1", "policy get"}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run(cmd + " --at " + at);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.code, 1) << cmd << ": " << r.output;
    EXPECT_LE(s, 2.0) << cmd;
    EXPECT_EQ(r.output, "coach: no answer from tcp://" + at +
                            ": connection refused (nothing listens there: is the scheduler's "
                            "coach-node running?)\n")
        << cmd;
  }
  // A name that does not resolve, and addresses that are not HOST:PORT: bad input, exit 2.
  auto name = run("status --at no-such-host.invalid:7470");
  EXPECT_EQ(name.code, 2) << name.output;
  EXPECT_NE(name.output.find("coach: no answer from tcp://no-such-host.invalid:7470: name "
                             "'no-such-host.invalid' not found"),
            std::string::npos)
      << name.output;
  auto bad = run("status --at 127.0.0.1");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.output, "coach: --at '127.0.0.1': expected HOST:PORT or tcp://HOST:PORT\n");
  auto port = run("nodes --at tcp://127.0.0.1:99999");
  EXPECT_EQ(port.code, 2);
  EXPECT_EQ(port.output,
            "coach: --at 'tcp://127.0.0.1:99999': the port must be a number in 1..65535\n");
}

TEST(cli, a_listener_that_never_answers_the_handshake_fails_after_20_s_saying_so) {
  // Something listens (the kernel completes the TCP handshake into the backlog) but never
  // speaks ZeroMQ: a hung or frozen scheduler host. The command gives up after its 20 s wait
  // for a connection (docs/load.md: the handshake on a host under load can take seconds).
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string at = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run("status --at " + at);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_GE(s, 19.5);
  EXPECT_LE(s, 25.0);
  EXPECT_EQ(r.output, "coach: no answer from tcp://" + at +
                          ": no connection within 20 s (it accepts connections but never answers "
                          "the handshake: a frozen or overloaded host, or not a coach-node "
                          "there?)\n");
}

TEST(cli, zero_workers_and_files_that_cannot_be_written_are_refused_before_training) {
  const auto t0 = std::chrono::steady_clock::now();
  auto zero = run("train examples/digits-mlp.yaml --workers 0");
  EXPECT_EQ(zero.code, 2) << zero.output;
  EXPECT_NE(zero.output.find("--workers: Value 0 not in range 1 to 1048576"), std::string::npos)
      << zero.output;
  auto shards = run("submit examples/digits-mlp.yaml --shards 0 --at 127.0.0.1:1");
  EXPECT_EQ(shards.code, 2) << shards.output;
  EXPECT_NE(shards.output.find("--shards: Value 0 not in range"), std::string::npos)
      << shards.output;
  auto report = run("train examples/digits-mlp.yaml --report /nonexistent-dir/r.json");
  EXPECT_EQ(report.code, 2);
  EXPECT_EQ(report.output,
            "coach: --report /nonexistent-dir/r.json: no directory /nonexistent-dir\n");
  const auto dir = temp_file("a-dir.json", "").parent_path() / "a-dir";
  std::filesystem::create_directories(dir);
  auto save = run("train examples/digits-mlp.yaml --save " + dir.string());
  EXPECT_EQ(save.code, 2);
  EXPECT_EQ(save.output, "coach: --save " + dir.string() + ": is a directory; give a file name\n");
  // Two outputs on one file (issue 37: the report overwrote the saved model): refused, also
  // when the paths differ only in how they are spelled; nothing is written.
  const auto same = temp_file("same.out", "").parent_path() / "same.out";
  std::filesystem::remove(same);
  auto both =
      run("train examples/digits-mlp.yaml --save " + same.string() + " --report " + same.string());
  EXPECT_EQ(both.code, 2) << both.output;
  EXPECT_EQ(both.output, "coach: --report and --save both name " + same.string() +
                             ": each output needs a file of its own\n");
  const auto spelled = (same.parent_path() / "." / "same.out").string();
  auto events =
      run("train examples/digits-mlp.yaml --events " + same.string() + " --checkpoint " + spelled);
  EXPECT_EQ(events.code, 2) << events.output;
  EXPECT_EQ(events.output, "coach: --events and --checkpoint both name " + same.string() +
                               ": each output needs a file of its own\n");
  EXPECT_FALSE(std::filesystem::exists(same));
  // Said at once: nothing trained (an epoch of digits would print a line).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(report.output.find("epoch"), std::string::npos);
  EXPECT_EQ(both.output.find("epoch"), std::string::npos);
}

// Issue 37: a job whose loss became NaN ran to its end and said "done", exit 0.
TEST(cli, a_diverged_job_fails_after_its_first_nan_epoch_and_saves_nothing) {
  const auto spec = temp_file("diverge.yaml",
                              "name: diverge\n"
                              "dataset: {format: csv, path: " COACH_SOURCE_DIR
                              "/data/digits.csv.gz, test_fraction: 0.2}\n"
                              "model: {type: mlp, hidden: [32], activation: relu}\n"
                              "optimizer: {type: sgd, learning_rate: 1e30}\n"
                              "batch_size: 32\nepochs: 6\nseed: 1\n");
  const auto model = spec.parent_path() / "diverged.safetensors";
  std::filesystem::remove(model);
  auto r = run("train " + spec.string() + " --save " + model.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("coach: training diverged: the training loss is nan after epoch 1 "
                          "(the parameters are no longer numbers); lower "
                          "optimizer.learning_rate (1e+30) or check the data\n"),
            std::string::npos)
      << r.output;
  // It stopped there: no second epoch, no "done", no model.
  EXPECT_EQ(r.output.find("epoch 2/6"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("done after"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(model));
}

// Issue 37, item 6: workers: 1000 grew memory faster than the workers (each sized for the
// global batch, which grows with them) until the kernel killed coach at 21.8 GB.
TEST(cli, a_thousand_workers_train_in_a_bounded_memory) {
  const auto spec = temp_file("thousand.yaml",
                              "name: thousand\n"
                              "dataset: {format: csv, path: " COACH_SOURCE_DIR
                              "/data/digits.csv.gz, test_fraction: 0.2}\n"
                              "model: {type: mlp, hidden: [64], activation: relu}\n"
                              "optimizer: {type: sgd, learning_rate: 0.05}\n"
                              "batch_size: 32\nepochs: 1\nseed: 1\n"
                              "workers: {min: 1, max: 1000, initial: 1000}\n");
  auto r = run("train " + spec.string());
  ASSERT_EQ(r.code, 0) << r.output.substr(0, 2000);
  EXPECT_NE(r.output.find("(1000 workers, 1 shards, cpu"), std::string::npos) << r.output;
  rusage usage{};
  ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &usage), 0);
  // ru_maxrss in KiB: 0.7 GB measured; 256 workers took 4.3 GB before.
  EXPECT_LT(usage.ru_maxrss, 2L << 20) << "max RSS " << usage.ru_maxrss << " KiB";
}

TEST(cli, train_writes_events_as_it_runs_and_plot_draws_the_report) {
  const auto report = temp_file("elastic-report.json", "");
  const auto events = temp_file("elastic-events.jsonl", "");
  const auto svg = report.parent_path() / "elastic-curves.svg";
  std::filesystem::remove(svg);
  auto r = run("train examples/elastic.yaml --report " + report.string() + " --events " +
               events.string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(events);
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_GE(lines.size(), 22u);
  EXPECT_EQ(lines.front()["event"], "start");
  EXPECT_EQ(lines.back()["event"], "end");
  EXPECT_EQ(lines.back()["state"], "succeeded");
  int epochs = 0, changes = 0;
  for (const auto& l : lines) {
    epochs += l["event"] == "epoch";
    changes += l["event"] == "change";
  }
  EXPECT_EQ(epochs, 20);
  EXPECT_GE(changes, 1) << "the example's schedule changes workers and shards";
  auto p = run("plot " + report.string() + " -o " + svg.string());
  ASSERT_EQ(p.code, 0) << p.output;
  const auto changed = nlohmann::json::parse(std::ifstream(report))["changes"].size();
  EXPECT_EQ(p.output, "coach: 20 epoch(s), " + std::to_string(changed) + " change(s) drawn to " +
                          svg.string() + "\n");
  std::stringstream drawn;
  drawn << std::ifstream(svg).rdbuf();
  const auto text = drawn.str();
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  std::size_t polylines = 0, marks = 0;
  for (auto at = text.find("<polyline"); at != std::string::npos;
       at = text.find("<polyline", at + 1))
    ++polylines;
  for (auto at = text.find("class='change'"); at != std::string::npos;
       at = text.find("class='change'", at + 1))
    ++marks;
  EXPECT_EQ(polylines, 3u);
  EXPECT_EQ(marks, 2 * changed);
  auto bad = run("plot " + events.string() + " -o " + svg.string());
  EXPECT_EQ(bad.code, 2) << "an events file is not a report";
  EXPECT_NE(bad.output.find("not a JSON object"), std::string::npos) << bad.output;
}

TEST(cli, spec_error_is_one_line_naming_the_field_with_exit_code_2) {
  auto path = temp_file(
      "bad.yaml", "name: x\ndataset: {format: csv, path: " COACH_SOURCE_DIR
                  "/data/digits.csv.gz}\n"
                  "model: {type: mlp, hiden: [8]}\noptimizer: {type: sgd, learning_rate: 0.1}\n"
                  "batch_size: 8\nepochs: 1\n");
  auto r = run("train " + path.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("model.hiden"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(":3:"), std::string::npos) << r.output;  // the line
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST(cli, missing_spec_file_and_bad_flags_exit_2) {
  auto r = run("train /nonexistent/job.yaml");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("/nonexistent/job.yaml"), std::string::npos) << r.output;
  r = run("train examples/digits-mlp.yaml --backend gpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("gpu"), std::string::npos) << r.output;
  r = run("train examples/digits-mlp.yaml --workers 99");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--workers 99"), std::string::npos) << r.output;
  r = run("frobnicate");
  EXPECT_EQ(r.code, 2);
}

TEST(cli, train_writes_a_report_with_the_accuracy) {
  if (!std::filesystem::exists("data/digits.csv.gz")) GTEST_SKIP() << "run scripts/setup.sh";
  auto report = temp_file("report.json", "");
  auto r = run("train examples/digits-mlp.yaml --workers 2 --shards 2 --report " + report.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 20/20"), std::string::npos) << r.output;
  std::stringstream text;
  text << std::ifstream(report).rdbuf();
  const std::string json = text.str();
  const auto j = nlohmann::json::parse(json, nullptr, false);
  ASSERT_TRUE(j.is_object()) << json;
  ASSERT_TRUE(j.contains("test_accuracy") && j["test_accuracy"].is_number()) << json;
  EXPECT_GE(j["test_accuracy"].get<double>(), 0.9) << json;
  ASSERT_TRUE(j.contains("epochs") && j["epochs"].is_array()) << json;
  EXPECT_TRUE(std::ranges::any_of(j["epochs"], [](const nlohmann::json& e) {
    return e.contains("samples_per_s");
  })) << json;
  EXPECT_TRUE(has_epoch(j, 20)) << json;
  EXPECT_EQ(j.value("cancelled", nlohmann::json()), false) << json;
}

TEST(cli, ctrl_c_stops_at_a_step_boundary_and_writes_the_report) {
  if (!std::filesystem::exists("data/digits.csv.gz")) GTEST_SKIP() << "run scripts/setup.sh";
  const auto data = std::filesystem::absolute("data/digits.csv.gz").string();
  // Two workers on two shards: a stop between one shard's update and the other's, or after a
  // step some samples of which were never applied, would leave parameters no step count has.
  const std::string yaml = "name: long\ndataset: {format: csv, path: " + data +
                           "}\nmodel: {type: mlp, hidden: [32]}\n"
                           "optimizer: {type: sgd, learning_rate: 0.1}\n"
                           "batch_size: 16\nepochs: 1000000\nconsistency: bsp\nseed: 3\n"
                           "workers: {min: 1, max: 2, initial: 2}\n"
                           "shards: {min: 1, max: 2, initial: 2}\nslice_size: 256\n";
  auto spec = temp_file("long.yaml", yaml);
  auto report = temp_file("stopped.json", "");
  auto model = temp_file("stopped.safetensors", "");
  const std::string cmd =
      std::string(COACH_BINARY_DIR) + "/apps/coach train " + spec.string() + " --save " +
      model.string() + " --report " + report.string() + " > " + report.string() +
      ".log 2>&1 & pid=$!; "
      // Interrupted once it trains (its second epoch printed), not before.
      "for i in $(seq 1200); do grep -q '^epoch 2/' " +
      report.string() + ".log && break; sleep 0.05; done; kill -INT $pid; wait $pid; echo $?";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[64] = {};
  const std::size_t n = fread(buf, 1, sizeof buf - 1, p);
  pclose(p);
  EXPECT_EQ(std::string(buf, n), "130\n");
  std::stringstream text;
  text << std::ifstream(report).rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  ASSERT_TRUE(j.is_object()) << text.str();
  EXPECT_EQ(j.value("cancelled", nlohmann::json()), true) << text.str();
  EXPECT_TRUE(has_epoch(j, 1)) << text.str();
  ASSERT_TRUE(j.contains("steps") && j["steps"].is_number_integer()) << text.str();
  const std::int64_t steps = j["steps"].get<std::int64_t>();
  // Past the epochs it reported (each lists its steps): it stopped while training.
  std::int64_t reported = 0;
  for (const auto& e : j["epochs"]) reported += e.value("steps", std::int64_t{0});
  EXPECT_GE(steps, reported) << text.str();

  // The reference: the same job cancelled as step `steps` opens, nothing in flight. Under BSP
  // the run is deterministic, so the saved parameters are these bit for bit exactly when the
  // Ctrl-C, arriving mid-step, stopped at that step boundary on both shards.
  auto parsed = coach::scheduler::parse_job_spec(yaml, "long.yaml");
  ASSERT_TRUE(parsed) << parsed.error().message;
  coach::actors::train_options opt;
  opt.cancel_at_step = steps;
  auto ref = coach::actors::train_embedded(*parsed, opt);
  ASSERT_TRUE(ref) << ref.error().message;
  EXPECT_TRUE(ref->cancelled);
  EXPECT_EQ(ref->steps, steps);
  auto file = coach::worker::read_safetensors(model.string());
  ASSERT_TRUE(file) << file.error().message;
  auto net = coach::worker::network::build(parsed->model, {1, 1, int(ref->features)}, ref->classes);
  ASSERT_TRUE(net) << net.error().message;
  auto saved = coach::worker::unpack_params(*net, *file);
  ASSERT_TRUE(saved) << saved.error().message;
  ASSERT_EQ(saved->size(), ref->params.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < saved->size(); ++i) differ += (*saved)[i] != ref->params[i];
  EXPECT_EQ(differ, 0u) << "of " << saved->size() << " parameters after step " << steps;

  // And they are the parameters after `steps` steps, not another version, by a measure that
  // does not go through the stop: a run one step longer records the loss its workers computed
  // at step `steps` (with the parameters of version `steps`) on that step's samples; the saved
  // parameters give that loss on those samples.
  std::optional<coach::actors::step_trace> at_stop;
  opt.cancel_at_step = steps + 1;
  opt.on_step = [&](const coach::actors::step_trace& t) {
    if (t.step == steps) at_stop = t;
  };
  ASSERT_TRUE(coach::actors::train_embedded(*parsed, opt));
  ASSERT_TRUE(at_stop.has_value()) << "no trace of step " << steps;
  auto loaded = coach::worker::load_dataset(parsed->dataset, parsed->seed);
  ASSERT_TRUE(loaded) << loaded.error().message;
  auto be = coach::kernels::make_backend(coach::kernels::backend_kind::cpu);
  ASSERT_TRUE(be) << be.error().message;
  coach::worker::network_runner runner(*net, **be, int(at_stop->samples.size()));
  float* params = (*be)->alloc(saved->size());
  float* grad = (*be)->alloc(saved->size());
  (*be)->upload(params, saved->data(), saved->size());
  const double loss = runner.forward_backward(params, loaded->train, at_stop->samples, grad);
  (*be)->free(params);
  (*be)->free(grad);
  EXPECT_NEAR(loss, at_stop->loss_sum, 1e-6 * at_stop->loss_sum) << "step " << steps;
}

}  // namespace
