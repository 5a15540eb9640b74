// The cluster scheduler with its policies and job store, driven through real coach-node
// processes on 127.0.0.1 and the `coach` CLI: the scheduler node is killed (SIGKILL) and
// restarted while a job runs, and the job resumes from its checkpoint and succeeds; the policy
// is swapped four times under a running job, which grows and is never restarted; what a job's
// own schedule moves away or sends away is free for the next job at once (the master reports
// the change). Which job a policy starts, grows or shrinks is decided without processes:
// tests/unit/scheduler/job_registry_test.cpp.
#include <gtest/gtest.h>

#include "tests/helpers/tensor_bytes.hpp"
#include "tests/integration/process_harness.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

extern char** environ;

namespace {

using test_files::tensor_bytes;

using namespace itest;

namespace fs = std::filesystem;
using namespace std::chrono_literals;

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

void stop_node(node_process& n) {
  if (n.pid <= 0) return;
  ::kill(n.pid, SIGKILL);
  ::waitpid(n.pid, nullptr, 0);
  n.pid = -1;
}

/// A digits job (1438 training samples, tens of ms an epoch) with these ranges and length.
fs::path digits_spec(const std::string& name, int epochs, const std::string& workers,
                     const std::string& shards, const std::string& extra = "") {
  const auto path = work_dir() / (name + ".yaml");
  std::ofstream(path) << "name: " << name
                      << "\ndataset: {format: csv, path: " COACH_SOURCE_DIR
                         "/data/digits.csv.gz, test_fraction: 0.2}\n"
                         "model: {type: mlp, hidden: [64], activation: relu}\n"
                         "optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9}\n"
                         "batch_size: 32\nepochs: "
                      << epochs << "\nconsistency: bsp\nseed: 7\nworkers: " << workers
                      << "\nshards: " << shards << "\nslice_size: 1024\nbackend: cpu\n"
                      << extra;
  return path;
}

/// A cluster of coach-node processes: a scheduler node and `joiners` more.
class scheduler_cluster : public ::testing::Test {
 protected:
  void start(int joiners, const std::vector<std::string>& scheduler_extra,
             const std::vector<std::string>& node_extra) {
    at_ = free_address();
    scheduler_args_ = {"--listen", at_, "--scheduler", "--name", "node-a", "--heartbeat", "0.25"};
    scheduler_args_.insert(scheduler_args_.end(), scheduler_extra.begin(), scheduler_extra.end());
    scheduler_args_.insert(scheduler_args_.end(), node_extra.begin(), node_extra.end());
    nodes_.push_back(start_node(scheduler_args_, "node-a", test_name() + "-node-a"));
    for (int i = 0; i < joiners; ++i) {
      const std::string name = std::string("node-") + char('b' + i);
      std::vector<std::string> args{"--listen", free_address(), "--join",      at_,
                                    "--name",   name,           "--heartbeat", "0.25"};
      args.insert(args.end(), node_extra.begin(), node_extra.end());
      nodes_.push_back(start_node(args, name, test_name() + "-" + name));
    }
    ASSERT_TRUE(all_alive(joiners + 1)) << logs();
  }

  /// Whether `n` nodes are alive within a minute (a safeguard: a loaded machine starts slowly).
  bool all_alive(int n) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = coach("nodes --json --at " + at_);
      if (r.code == 0 && alive_nodes(r.out) == std::size_t(n)) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

  static std::string test_name() {
    return ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  std::string status(const std::string& job) {
    return coach("status " + job + " --json --at " + at_).out;
  }

  /// Polls until `pred(status of job)` holds (or about `limit` passes); the last status.
  template <class Pred>
  std::string poll(const std::string& job, Pred pred, std::chrono::milliseconds limit = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::string st;
    while (std::chrono::steady_clock::now() < deadline) {
      st = status(job);
      if (pred(st)) return st;
      std::this_thread::sleep_for(50ms);
    }
    return st;
  }

  /// Polls until the job ended (or `limit` passed: a safeguard against a hang, not a timing
  /// claim; a loaded machine runs a long job slower).
  std::string wait_for_end(const std::string& job, std::chrono::milliseconds limit = 60s) {
    return poll(
        job,
        [](const std::string& s) {
          const auto state = state_of(s);
          return state == "succeeded" || state == "failed" || state == "cancelled";
        },
        limit);
  }

  std::string submit(const fs::path& spec, const std::string& extra = "") {
    auto r = coach("submit " + spec.string() + " --json " + extra + " --at " + at_);
    EXPECT_EQ(r.code, 0) << r.err;
    return std::to_string(long(json_number(r.out, "job")));
  }

  std::string logs() {
    std::string out;
    for (auto& n : nodes_) out += "---- " + n.log.string() + " ----\n" + slurp(n.log) + "\n";
    return out;
  }

  /// A node, not the scheduler's, that holds a shard of the job status `st` names and none of
  /// its workers (killing it changes no step's members); null when there is none.
  node_process* primary_alone(const std::string& st) {
    const auto shards = job_strings(st, "shard_nodes"), workers = job_strings(st, "worker_nodes");
    node_process* found = nullptr;
    for (auto& n : nodes_)
      if (n.name != "node-a" && holds(shards, n.name) && !holds(workers, n.name)) found = &n;
    return found;
  }

  void TearDown() override {
    if (HasFailure()) std::fprintf(stderr, "%s", logs().c_str());
    for (auto& n : nodes_) stop_node(n);
  }

  std::string at_;
  std::vector<std::string> scheduler_args_;
  std::vector<node_process> nodes_;
};

/// Every epoch of a finished digits job trained its 1438 samples exactly once: its
/// epoch_samples.
std::vector<double> full_epochs(int epochs) {
  return std::vector<double>(std::size_t(epochs), 1438);
}

TEST_F(scheduler_cluster, a_job_survives_a_killed_and_restarted_scheduler_and_succeeds) {
  const auto store = work_dir() / "restart.db";
  // --node-timeout: how long the restarted scheduler waits for node-b and node-c to answer the
  // stop of the job's old parts before it starts the job again without them (10 s: a loaded
  // machine may take seconds to reconnect them).
  start(2, {"--store", store.string(), "--node-timeout", "10"}, {});
  if (HasFatalFailure()) return;
  constexpr int epochs = 120;
  // Checkpoints stored at every epoch's end (the default is once a minute); the final model
  // written, to compare with a run that was not interrupted.
  const auto model = work_dir() / "restart-model.safetensors";
  const auto clean_model = work_dir() / "restart-clean-model.safetensors";
  fs::remove(model);
  fs::remove(clean_model);
  const std::string extra = "checkpoint: {every_s: 0}\noutput: ";
  const auto spec = digits_spec("restart", epochs, "{min: 1, max: 4, initial: 3}",
                                "{min: 1, max: 2, initial: 2}", extra + model.string() + "\n");
  const std::string job = submit(spec);
  auto set = coach("policy set round-robin --at " + at_);
  ASSERT_EQ(set.code, 0) << set.err;
  // A few epochs in (so there is a checkpoint), the scheduler's process dies at once: the
  // master, the evaluator and the parts on node-a with it; node-b and node-c keep theirs.
  auto before = poll(job, [](const std::string& s) { return job_number(s, "epochs_done") >= 5; });
  ASSERT_GE(job_number(before, "epochs_done"), 5) << before;
  ASSERT_EQ(state_of(before), "running") << before;
  stop_node(nodes_[0]);
  nodes_[0] = start_node(scheduler_args_, "node-a", test_name() + "-node-a-again");
  ASSERT_TRUE(all_alive(3)) << logs();

  // The restarted scheduler knows the job, tells node-b and node-c to stop its old parts and
  // starts it again from its last checkpoint, under the same id.
  const auto known = status(job);
  EXPECT_EQ(job_string(known, "name"), "restart") << known;
  // 120 epochs of digits: seconds on 2 idle cores, more beside the suite's other tests.
  const auto final_status = wait_for_end(job, 300s);
  EXPECT_EQ(state_of(final_status), "succeeded") << final_status;
  EXPECT_EQ(job_number(final_status, "epochs_done"), epochs) << final_status;
  EXPECT_EQ(job_number(final_status, "resumes"), 1) << final_status;
  EXPECT_EQ(job_numbers(final_status, "epoch_samples"), full_epochs(epochs)) << final_status;
  EXPECT_GE(job_number(final_status, "test_accuracy"), 0.95) << final_status;
  // It resumed after the epochs its checkpoint held, not from the start.
  const auto log = slurp(nodes_[0].log);
  const auto at = log.find("resumes at epoch ");
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_GT(std::atoi(log.c_str() + at + 17), 5) << log;
  // The policy outlived the restart, in the store.
  auto get = coach("policy get --json --at " + at_);
  EXPECT_EQ(get.code, 0) << get.err;
  EXPECT_EQ(parse_json(get.out), nlohmann::json::object({{"policy", "round-robin"}})) << get.out;

  // It resumed with its optimizer state (momentum) and counters: its final parameters are
  // bitwise those of the same job run without the restart.
  const auto clean =
      submit(digits_spec("restart-clean", epochs, "{min: 1, max: 4, initial: 3}",
                         "{min: 1, max: 2, initial: 2}", extra + clean_model.string() + "\n"));
  const auto clean_status = wait_for_end(clean, 300s);
  ASSERT_EQ(state_of(clean_status), "succeeded") << clean_status;
  EXPECT_EQ(job_number(clean_status, "workers"), job_number(final_status, "workers"));
  const auto a = tensor_bytes(model), b = tensor_bytes(clean_model);
  ASSERT_EQ(a.size(), 4810u * 4u) << logs();  // the digits MLP's parameters, f32
  EXPECT_TRUE(a == b) << "the parameters differ from the uninterrupted run's";
}

TEST_F(scheduler_cluster, a_job_recovers_from_its_checkpoint_when_a_node_with_a_shard_dies) {
  start(3, {"--store", ""}, {});
  if (HasFatalFailure()) return;
  constexpr int epochs = 150;
  const auto spec = digits_spec("recover", epochs, "{min: 1, max: 4, initial: 3}",
                                "{min: 1, max: 2, initial: 2}", "checkpoint: {every_s: 0}\n");
  const std::string job = submit(spec);
  // A few epochs in, a node that holds a shard (not the scheduler's) dies without a word.
  auto st = poll(job, [](const std::string& s) { return job_number(s, "epochs_done") >= 5; });
  ASSERT_GE(job_number(st, "epochs_done"), 5) << st;
  node_process* victim = nullptr;
  ASSERT_TRUE(job_json(st).contains("shard_nodes")) << st;
  const auto list = job_strings(st, "shard_nodes");
  for (auto& n : nodes_)
    if (n.name != "node-a" && holds(list, n.name)) victim = &n;
  ASSERT_NE(victim, nullptr) << "no shard away from the scheduler's node: " << st;
  stop_node(*victim);  // SIGKILL

  // The job is not failed: it restarts from its last checkpoint on the nodes left and ends
  // with every epoch trained once and the accuracy of a run that lost nothing.
  const auto final_status = wait_for_end(job, 300s);
  EXPECT_EQ(state_of(final_status), "succeeded") << final_status;
  EXPECT_EQ(job_number(final_status, "epochs_done"), epochs) << final_status;
  EXPECT_EQ(job_numbers(final_status, "epoch_samples"), full_epochs(epochs)) << final_status;
  EXPECT_GE(job_number(final_status, "test_accuracy"), 0.95) << final_status;
  EXPECT_EQ(job_number(final_status, "recoveries"), 1) << final_status;
  EXPECT_FALSE(runs_on(final_status, victim->name)) << "restarted away from it: " << final_status;
  // coach status says what the recovery cost.
  auto text = coach("status " + job + " --at " + at_);
  EXPECT_TRUE(has(text.out, "recoveries: 1 after lost nodes (work lost: ")) << text.out;
  EXPECT_TRUE(has(slurp(nodes_[0].log), "it restarts from its checkpoint at epoch")) << logs();
  EXPECT_TRUE(has(slurp(nodes_[0].log), "node '" + victim->name + "' closed its connections"))
      << logs();
}

TEST_F(scheduler_cluster, a_backup_takes_over_a_killed_primary_and_not_a_bit_changes) {
  start(3, {"--store", ""}, {});
  if (HasFatalFailure()) return;
  constexpr int epochs = 100;
  const auto model = work_dir() / "replica-model.safetensors";
  const auto clean_model = work_dir() / "replica-clean-model.safetensors";
  fs::remove(model);
  fs::remove(clean_model);
  // Spread: 2 workers and 2 shards on 4 nodes, so that a shard's node holds no worker (killing
  // a worker changes the membership, and so the sums: not a bit-for-bit comparison any more).
  const std::string extra = "placement: spread\nreplicas: 2\noutput: ";
  const auto spec = digits_spec("replica", epochs, "2", "2", extra + model.string() + "\n");
  const std::string job = submit(spec);
  auto st = poll(job, [](const std::string& s) { return job_number(s, "epochs_done") >= 5; });
  ASSERT_GE(job_number(st, "epochs_done"), 5) << st;
  node_process* victim = primary_alone(st);
  ASSERT_NE(victim, nullptr) << "no primary alone on a node but the scheduler's: " << st;
  stop_node(*victim);  // SIGKILL, mid-epoch

  // Its backup takes over: no restart, no sample twice, not a bit different.
  const auto final_status = wait_for_end(job, 300s);
  EXPECT_EQ(state_of(final_status), "succeeded") << final_status << logs();
  EXPECT_EQ(job_numbers(final_status, "epoch_samples"), full_epochs(epochs)) << final_status;
  EXPECT_EQ(job_number(final_status, "recoveries"), 0) << final_status;
  EXPECT_EQ(job_number(final_status, "resumes"), 0) << final_status;
  EXPECT_EQ(job_number(final_status, "failovers"), 1) << final_status;
  EXPECT_FALSE(runs_on(final_status, victim->name))
      << "its shard moved to the backup: " << final_status;
  auto text = coach("status " + job + " --at " + at_);
  EXPECT_TRUE(has(text.out, "failovers: 1 shard(s) taken over by their backups")) << text.out;
  EXPECT_TRUE(has(slurp(nodes_[0].log), "backups take over shard ")) << logs();
  // Noticed from its closed connections, not after the node timeout (its host is up).
  EXPECT_TRUE(has(slurp(nodes_[0].log), "node '" + victim->name + "' closed its connections"))
      << logs();

  const auto clean = submit(
      digits_spec("replica-clean", epochs, "2", "2", "output: " + clean_model.string() + "\n"));
  const auto clean_status = wait_for_end(clean, 300s);
  ASSERT_EQ(state_of(clean_status), "succeeded") << clean_status;
  const auto a = tensor_bytes(model), b = tensor_bytes(clean_model);
  ASSERT_EQ(a.size(), 4810u * 4u) << logs();  // the digits MLP's parameters, f32
  EXPECT_TRUE(a == b) << "the parameters differ from the uninterrupted run's";
}

/// The tables file beside a saved model X.safetensors: X.tables.safetensors (docs/sparse.md).
fs::path tables_of(const fs::path& model) {
  return fs::path(model).replace_extension(".tables.safetensors");
}

/// A click-through-rate job with embedding tables (docs/sparse.md) on a set `coach data ctr`
/// makes once: 40,000 rows, 6 fields; a few tenths of a second an epoch.
fs::path ctr_spec(const std::string& name, int epochs, const std::string& extra) {
  const auto data = work_dir() / "ctr-40k.tsv";
  if (!fs::exists(data)) {
    auto r = coach("data ctr --rows 40000 --out " + data.string() +
                   " --fields 6 --dense 4 --max-vocab 5000 --signal-ids 10 --seed 3");
    EXPECT_EQ(r.code, 0) << r.err;
  }
  const auto path = work_dir() / (name + ".yaml");
  std::ofstream(path) << "name: " << name << "\ndataset: {format: ctr, path: " << data.string()
                      << ", n_dense: 4, n_fields: 6, test_fraction: 0.1, min_count: 20}\n"
                         "model:\n  type: mlp\n  hidden: [32]\n  embeddings:\n"
                         "    - {fields: all, rows: 100000, dim: 8}\n"
                         "sparse_optimizer: {type: lazy_adam, learning_rate: 0.01, epsilon: 1e-8}\n"
                         "optimizer: {type: adam, learning_rate: 0.002}\n"
                         "batch_size: 128\nepochs: "
                      << epochs << "\nconsistency: bsp\nseed: 3\nworkers: 2\nshards: 2\n"
                      << extra;
  return path;
}

// Sparse rows follow a shard's replica chain: the backup holds every row and its lazy Adam
// moments, takes over when its primary's node dies mid-epoch, and the job ends with tables
// bit for bit those of a run that lost nothing.
TEST_F(scheduler_cluster, a_backup_takes_over_a_sparse_shard_and_not_a_row_changes) {
  start(3, {"--store", ""}, {});
  if (HasFatalFailure()) return;
  constexpr int epochs = 40;
  const auto model = work_dir() / "sparse-replica.safetensors";
  const auto clean_model = work_dir() / "sparse-clean.safetensors";
  for (const auto& m : {model, clean_model}) {
    fs::remove(m);
    fs::remove(tables_of(m));
  }
  const auto spec = ctr_spec("sparse-replica", epochs,
                             "placement: spread\nreplicas: 2\noutput: " + model.string() + "\n");
  const std::string job = submit(spec);
  auto st = poll(job, [](const std::string& s) { return job_number(s, "epochs_done") >= 3; });
  ASSERT_GE(job_number(st, "epochs_done"), 3) << st;
  node_process* victim = primary_alone(st);
  ASSERT_NE(victim, nullptr) << "no primary alone on a node but the scheduler's: " << st;
  stop_node(*victim);  // SIGKILL, mid-epoch

  const auto final_status = wait_for_end(job, 300s);
  EXPECT_EQ(state_of(final_status), "succeeded") << final_status << logs();
  EXPECT_EQ(job_number(final_status, "failovers"), 1) << final_status;
  EXPECT_EQ(job_number(final_status, "recoveries"), 0) << final_status;

  const auto clean =
      submit(ctr_spec("sparse-clean", epochs, "output: " + clean_model.string() + "\n"));
  const auto clean_status = wait_for_end(clean, 300s);
  ASSERT_EQ(state_of(clean_status), "succeeded") << clean_status;
  EXPECT_TRUE(tensor_bytes(model) == tensor_bytes(clean_model))
      << "the dense parameters differ from the uninterrupted run's";
  const auto rows = tensor_bytes(tables_of(model));
  EXPECT_GT(rows.size(), 500u * (8 + 8 * 4)) << "hundreds of rows (an id and 8 floats each)";
  EXPECT_TRUE(rows == tensor_bytes(tables_of(clean_model)))
      << "the tables differ from the uninterrupted run's";
}

TEST_F(scheduler_cluster, a_migrated_shard_keeps_a_backup_that_takes_over_when_its_node_dies) {
  start(3, {"--store", ""}, {});
  if (HasFatalFailure()) return;
  constexpr int epochs = 100;
  const auto model = work_dir() / "moved-replica-model.safetensors";
  const auto clean_model = work_dir() / "moved-replica-clean-model.safetensors";
  fs::remove(model);
  fs::remove(clean_model);
  const std::string extra = "placement: spread\nreplicas: 2\noutput: ";
  const auto spec = digits_spec("moved-replica", epochs, "2", "{min: 1, max: 2, initial: 1}",
                                extra + model.string() + "\n");
  const std::string job = submit(spec);
  auto st = poll(job, [](const std::string& s) { return job_number(s, "epochs_done") >= 3; });
  ASSERT_GE(job_number(st, "epochs_done"), 3) << st;
  // Shard 0 moves whole to a node that runs no part of the job but maybe a backup (not the
  // scheduler's): a shard added while the job runs, which gets a backup of its own.
  node_process* target = nullptr;
  for (auto& n : nodes_)
    if (n.name != "node-a" && !runs_on(st, n.name)) target = &n;
  ASSERT_NE(target, nullptr) << "no node free of the job's workers and shard: " << st;
  auto move = coach("migrate " + job + " --shard 0 --to " + target->name + " --at " + at_);
  ASSERT_EQ(move.code, 0) << move.err;
  st = poll(job, [](const std::string& s) { return job_number(s, "changes_done") >= 1; });
  ASSERT_GE(job_number(st, "changes_done"), 1) << st << logs();
  EXPECT_TRUE(has(slurp(nodes_[0].log), "shard 1 goes to '" + target->name + "', its backup on"))
      << logs();
  stop_node(*target);  // SIGKILL, mid-epoch, with shard 1's primary

  // Shard 1's backup takes over: no restart, no sample twice, not a bit different.
  const auto final_status = wait_for_end(job, 300s);
  EXPECT_EQ(state_of(final_status), "succeeded") << final_status << logs();
  EXPECT_EQ(job_numbers(final_status, "epoch_samples"), full_epochs(epochs)) << final_status;
  EXPECT_EQ(job_number(final_status, "recoveries"), 0) << final_status;
  EXPECT_EQ(job_number(final_status, "failovers"), 1) << final_status;
  EXPECT_TRUE(has(slurp(nodes_[0].log), "backups take over shard 1")) << logs();

  const auto clean = submit(digits_spec("moved-replica-clean", epochs, "2", "1",
                                        "output: " + clean_model.string() + "\n"));
  const auto clean_status = wait_for_end(clean, 300s);
  ASSERT_EQ(state_of(clean_status), "succeeded") << clean_status;
  const auto a = tensor_bytes(model), b = tensor_bytes(clean_model);
  ASSERT_EQ(a.size(), 4810u * 4u) << logs();
  EXPECT_TRUE(a == b) << "the parameters differ from the unmoved, uninterrupted run's";
}

TEST_F(scheduler_cluster, swapping_the_policy_under_a_running_job_loses_and_restarts_nothing) {
  start(2, {"--store", ""}, {});
  if (HasFatalFailure()) return;
  constexpr int epochs = 800;
  const auto spec =
      digits_spec("swap", epochs, "{min: 1, max: 4, initial: 2}", "{min: 1, max: 2, initial: 1}");
  const std::string job = submit(spec);
  auto get = coach("policy get --at " + at_);
  EXPECT_EQ(get.out, "fifo\n") << get.err;
  auto running = poll(job, [](const std::string& s) { return job_number(s, "epochs_done") >= 3; });
  ASSERT_GE(job_number(running, "epochs_done"), 3) << running;
  EXPECT_EQ(job_number(running, "workers"), 2) << running;

  // Bad names change nothing.
  auto bad = coach("policy set lottery --at " + at_);
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err,
            "coach: unknown policy 'lottery' (known: fifo, elastic-fifo, round-robin, coach)\n");

  // elastic-fifo grows the job into the free CPUs (6 in all: 4 workers and 2 shards), mid-run.
  auto set = coach("policy set elastic-fifo --at " + at_);
  ASSERT_EQ(set.code, 0) << set.err;
  EXPECT_EQ(set.out, "elastic-fifo\n");
  auto grown = poll(
      job, [](const std::string& s) { return job_number(s, "workers") == 4; }, 20s);
  EXPECT_EQ(job_number(grown, "workers"), 4) << grown;
  EXPECT_EQ(state_of(grown), "running") << grown;
  for (const char* p : {"round-robin", "coach", "fifo"}) {
    auto r = coach(std::string("policy set ") + p + " --json --at " + at_);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(parse_json(r.out), nlohmann::json::object({{"policy", p}})) << r.out;
  }
  const auto after = status(job);  // every swap happened while it ran
  EXPECT_EQ(state_of(after), "running") << after;
  EXPECT_LT(job_number(after, "epochs_done"), epochs) << after;
  // 800 epochs of digits: about a minute on 2 idle cores, more beside the suite's other tests.
  const auto final_status = wait_for_end(job, 300s);
  EXPECT_EQ(state_of(final_status), "succeeded") << final_status;
  EXPECT_EQ(job_number(final_status, "resumes"), 0) << final_status;
  EXPECT_EQ(job_numbers(final_status, "epoch_samples"), full_epochs(epochs)) << final_status;
  EXPECT_GE(job_number(final_status, "test_accuracy"), 0.95) << final_status;
  auto all = coach("status --json --at " + at_);
  EXPECT_EQ(json_field(parse_json(all.out), "jobs").size(), 1u) << all.out;
  // The performance model saw every epoch and predicted those after the first.
  const auto model = json_field(job_json(final_status), "model");
  EXPECT_EQ(string_field(model, "model"), "swap") << final_status;
  EXPECT_TRUE(json_field(model, "theta").is_array()) << final_status;
  EXPECT_GE(number_field(model, "predictions"), epochs - 1) << final_status;
  EXPECT_GE(number_field(model, "mean_abs_rel_error"), 0) << final_status;
}

TEST_F(scheduler_cluster, what_a_schedule_migrates_away_or_shrinks_is_free_for_the_next_job) {
  // 4 CPUs. The first job takes 3 (2 workers, 1 shard); its own schedule then moves its shard
  // whole to a new one and sends a worker away: 2 CPUs in use after both. The second job asks
  // for 2: it starts while the first runs only if the moved shard's source and the worker that
  // left are no longer counted (each alone would leave 3 counted).
  start(1, {"--store", ""}, {"--cpus", "2"});
  if (HasFatalFailure()) return;
  const auto first =
      digits_spec("first", 3000, "{min: 1, max: 2, initial: 2}", "{min: 1, max: 2, initial: 1}");
  std::ofstream(first, std::ios::app) << "schedule:\n  - {at_step: 10, migrate: 0}\n"
                                         "  - {at_step: 30, workers: 1}\n";
  const auto second =
      digits_spec("second", 5, "{min: 1, max: 1, initial: 1}", "{min: 1, max: 1, initial: 1}");
  const std::string a = submit(first);
  const auto shrunk = poll(a, [](const std::string& s) {
    return state_of(s) == "running" && job_number(s, "workers") == 1 &&
           job_number(s, "epochs_done") >= 2;
  });
  ASSERT_EQ(job_number(shrunk, "workers"), 1) << shrunk;
  const std::string b = submit(second);
  const auto sb = wait_for_end(b);
  EXPECT_EQ(state_of(sb), "succeeded") << sb;
  EXPECT_EQ(job_numbers(sb, "epoch_samples"), full_epochs(5)) << sb;
  const auto sa = status(a);
  EXPECT_EQ(state_of(sa), "running")
      << "the second job waited for the first: " << sa.substr(0, 300);
  EXPECT_EQ(coach("cancel " + a + " --at " + at_).code, 0);
  const auto ea = wait_for_end(a);
  EXPECT_EQ(state_of(ea), "cancelled") << ea;
}

TEST_F(scheduler_cluster, a_specs_output_is_the_final_model_and_an_unwritable_one_fails_the_job) {
  start(1, {"--store", ""}, {});
  if (HasFatalFailure()) return;
  const auto model = work_dir() / "out-model.safetensors";
  fs::remove(model);
  const auto spec =
      digits_spec("with-output", 3, "{min: 1, max: 2, initial: 2}", "{min: 1, max: 2, initial: 2}");
  std::ofstream(spec, std::ios::app) << "output: " << model.string() << "\n";
  const std::string job = submit(spec);
  const auto st = wait_for_end(job);
  ASSERT_EQ(state_of(st), "succeeded") << st;
  ASSERT_TRUE(fs::exists(model)) << logs();
  // The file is the run's model: coach eval on the job's own test split gives its accuracy.
  auto eval = coach("eval " + model.string() + " --data " + spec.string());
  ASSERT_EQ(eval.code, 0) << eval.err;
  const auto at = eval.out.find("test accuracy ");
  ASSERT_NE(at, std::string::npos) << eval.out;
  EXPECT_NEAR(std::strtod(eval.out.c_str() + at + 14, nullptr), job_number(st, "test_accuracy"),
              1e-4)
      << eval.out << "\n"
      << st.substr(0, 400);

  // A path the scheduler's host cannot write: refused at submit (issue 37), no job made.
  const auto bad = digits_spec("bad-output", 1, "1", "1");
  const auto nowhere = (work_dir() / "no-such-dir" / "m.st").string();
  std::ofstream(bad, std::ios::app) << "output: " << nowhere << "\n";
  auto refused = coach("submit " + bad.string() + " --at " + at_);
  EXPECT_EQ(refused.code, 2) << refused.err;
  EXPECT_EQ(refused.err, "coach: output: " + nowhere + ": no directory " +
                             (work_dir() / "no-such-dir").string() +
                             " (on the scheduler's host, which writes it)\n");
  // A model that cannot be written when the job ends (its directory removed meanwhile): the
  // job fails, saying why (its parameters would be lost).
  const auto gone = work_dir() / "removed-dir";
  fs::create_directories(gone);
  const auto late = digits_spec("late-output", 200, "1", "1");
  std::ofstream(late, std::ios::app) << "output: " << (gone / "m.st").string() << "\n";
  const std::string b = submit(late);
  fs::remove_all(gone);
  const auto sb = wait_for_end(b);
  EXPECT_EQ(state_of(sb), "failed") << sb;
  EXPECT_TRUE(has(job_string(sb, "error"), "could not be written")) << sb;
}

}  // namespace
