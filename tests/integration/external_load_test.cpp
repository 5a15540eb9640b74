// Free CPUs are measured: a CPU-heavy program that is not Coach's, started beside a coach-node
// (--cpu-accounting measured, the default), shows in `coach nodes` (its free CPUs drop, the CPUs
// other programs use rise) and keeps the scheduler from giving those CPUs; when it exits, a
// running elastic job grows into them within seconds. Runs alone (RUN_SERIAL): the suite's other
// tests would count as other programs too.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/process_harness.hpp"

namespace {

using namespace itest;
using clock_type = std::chrono::steady_clock;

/// `n` processes that spin until stopped (children of this test: not Coach's). They end with
/// the object, and with the test's process however it ends (PR_SET_PDEATHSIG): a failed
/// assertion must not leave them spinning on the host.
class hog {
 public:
  explicit hog(unsigned n) {
    const pid_t parent = ::getpid();
    for (unsigned i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(0);  // the test ended before the line above
        for (volatile std::uint64_t x = 0;; x = x + 1) {
        }
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~hog() { stop(); }
  hog(const hog&) = delete;
  hog& operator=(const hog&) = delete;
  void stop() {
    for (pid_t p : pids_) ::kill(p, SIGKILL);
    for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
    pids_.clear();
  }

 private:
  std::vector<pid_t> pids_;
};

/// The scheduler's node as `coach nodes --json` shows it.
nlohmann::json node_of(const std::string& at) {
  const auto nodes = nodes_of(coach("nodes --json --at " + at).out);
  return nodes.size() == 1 ? nodes[0] : nlohmann::json();
}

TEST(external_load, a_busy_program_lowers_free_cpus_and_a_running_elastic_job_grows_when_it_exits) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  // cores + 2 CPUs advertised: a worker and a shard (1 CPU each) fit beside the program, a
  // second worker does not; once it exits, two more workers do.
  const std::string cpus = std::to_string(cores + 2);
  const std::string at = free_address();
  std::vector<node_process> nodes;
  nodes.push_back(start_node(
      {"--listen", at, "--scheduler", "--store", "", "--name", "solo", "--cpus", cpus,
       "--heartbeat", "0.25", "--policy", "elastic-fifo", "--cpu-accounting", "measured"},
      "solo", "external-solo"));
  ASSERT_TRUE(await_nodes_alive(at, 1)) << slurp(nodes[0].log);
  // Three spinning processes a core: the program keeps most of the host busy.
  hog program(3 * cores);
  nlohmann::json busy;
  for (int i = 0; i < 100; ++i) {
    busy = node_of(at);
    if (number_field(busy, "cpus_external") >= cores - 0.5) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_GE(number_field(busy, "cpus_external"), cores - 0.5) << busy.dump();
  // Free: what the scheduler may give, the advertised CPUs less the program's (no job runs yet).
  EXPECT_NEAR(number_field(busy, "cpus_free"), cores + 2 - number_field(busy, "cpus_external"),
              0.11)
      << busy.dump();
  auto table = coach("nodes --at " + at);
  EXPECT_NE(table.out.find("OTHERS"), std::string::npos) << table.out;

  const auto spec = work_dir() / "grows.yaml";
  std::ofstream(spec) << "name: grows\n"
                         "dataset: {format: csv, path: " COACH_SOURCE_DIR
                         "/data/digits.csv.gz, test_fraction: 0.2}\n"
                         "model: {type: mlp, hidden: [64], activation: relu}\n"
                         "optimizer: {type: sgd, learning_rate: 0.05}\nbatch_size: 32\n"
                         "epochs: 100000\nworkers: {min: 1, max: 3, initial: 1}\nshards: 1\n"
                         "backend: cpu\n";
  auto sub = coach("submit " + spec.string() + " --json --at " + at);
  ASSERT_EQ(sub.code, 0) << sub.err;
  const std::string job = std::to_string(long(json_number(sub.out, "job")));
  const auto status = [&] { return coach("status " + job + " --json --at " + at).out; };
  std::string st;
  for (int i = 0; i < 300 && job_number(st, "epochs_done") < 2; ++i) {
    st = status();
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_GE(job_number(st, "epochs_done"), 2) << st;
  // Held back while the program runs: a few decisions (2 s apart) give it nothing more. A gap,
  // the point: nothing may happen during it (the growth after the program ends is awaited).
  std::this_thread::sleep_for(5s);
  st = status();
  const double before = job_number(st, "workers");
  EXPECT_EQ(before, 1) << st;

  program.stop();
  const auto ended = clock_type::now();
  double workers = before;
  while (clock_type::now() - ended < 15s && workers <= before) {
    st = status();
    workers = job_number(st, "workers");
    if (workers <= before) std::this_thread::sleep_for(100ms);
  }
  const double took = std::chrono::duration<double>(clock_type::now() - ended).count();
  std::printf("the job went from %.0f to %.0f worker(s) %.1f s after the program exited\n", before,
              workers, took);
  EXPECT_GT(workers, before) << st;
  EXPECT_LE(took, 5.0) << st;
  const auto idle = node_of(at);
  EXPECT_LT(number_field(idle, "cpus_external"), cores - 0.5) << idle.dump();
  coach("cancel " + job + " --at " + at);
  stop_nodes(nodes);
}

}  // namespace
