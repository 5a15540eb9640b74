// scheduler::job_registry: the cluster scheduler's decisions and bookkeeping, without processes.
// Nodes heartbeat into a node table with a manual clock, jobs live in an in-memory store; each
// test plays what the scheduler actor does (submit, decide, carry out the orders, the run's
// reports) and checks what a user would see: which job starts, with how many parts and where,
// what stays queued, what the store holds after a restart, what a lost node costs.

#include "scheduler/job_registry.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

namespace coach::scheduler {
namespace {

/// Occurrences of `what` in `text`.
std::ptrdiff_t occurrences(const std::string& text, const std::string& what) {
  std::ptrdiff_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size()))
    ++n;
  return n;
}

std::string spec_yaml(const std::string& name, int epochs, const std::string& workers,
                      const std::string& shards, const std::string& extra = "") {
  return "name: " + name +
         "\ndataset: {format: csv, path: digits.csv, test_fraction: 0.2}\n"
         "model: {type: mlp, hidden: [64], activation: relu}\n"
         "optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9}\n"
         "batch_size: 32\nepochs: " +
         std::to_string(epochs) + "\nworkers: " + workers + "\nshards: " + shards +
         "\nbackend: cpu\n" + extra;
}

/// A training state of `n` values `v` (momentum: as much state), after `version` steps.
std::shared_ptr<const ps::training_state> state_of(std::size_t n, float v,
                                                   std::int64_t version = 0) {
  auto s = std::make_shared<ps::training_state>();
  s->version = version;
  s->updates = version;
  s->samples_applied = std::uint64_t(version) * 32;
  s->values.assign(n, v);
  s->state_a.assign(n, -v);
  return s;
}

/// Checkpoints go to the store at every epoch's end (the default is once a minute).
const std::string every_epoch = "checkpoint: {every_s: 0}\n";

class registry : public ::testing::Test {
 protected:
  /// `cpus` CPUs on each of `n` nodes a, b, c, ... (hosts 1, 2, 3, ...; the scheduler on 1),
  /// all heartbeating now but host `silent`.
  /// `first_cpus`: host 1's, when given.
  void nodes(int n, int cpus, std::uint32_t silent = 0, std::optional<int> first_cpus = {}) {
    for (int i = 0; i < n; ++i) {
      if (std::uint32_t(i + 1) == silent) continue;
      node_report r;
      r.host = std::uint32_t(i + 1);
      r.name = std::string(1, char('a' + i));
      r.address = "tcp://127.0.0.1:" + std::to_string(7001 + i);
      const int c = i == 0 && first_cpus ? *first_cpus : cpus;
      r.resources.cpus_total = std::uint32_t(c);
      r.resources.cpus_free = c;
      r.resources.memory_total = r.resources.memory_free = 8ull << 30;
      table.heartbeat(std::move(r));
    }
  }
  void use(const std::string& policy) {
    auto h = policy_holder::make(policy);
    ASSERT_TRUE(h) << h.error().message;
    holder.emplace(std::move(*h));
  }
  job_registry make() {
    return job_registry(store, table, wall, 1, [this](const std::string& s) { log += s + "\n"; });
  }
  /// Submits a job as coach submit does; the job's id.
  std::uint64_t submit(job_registry& reg, const std::string& yaml, std::uint32_t workers = 0) {
    auto spec = parse_job_spec(yaml, "job.yaml", "/tmp");
    EXPECT_TRUE(spec) << spec.error().message;
    auto rec = reg.admit(*spec, {yaml, "job.yaml", "/tmp", workers, 0});
    EXPECT_TRUE(rec) << rec.error().message;
    auto job = reg.add(std::move(*rec), *spec, 1000);
    EXPECT_TRUE(job) << job.error().message;
    return (*job)->id();
  }
  /// Decides and carries the launches out as the actor does, every part starting at once.
  orders decide(job_registry& reg) {
    auto o = reg.decide(*holder, *exec, nullptr);
    for (const auto& l : o.launches) {
      auto* job = reg.find(l.job);
      reg.shaped(*job, {.batch_size = 32}, job->status().samples_epoch);
      reg.begin_run(*job, l.workers, l.shards, false);
      reg.started(*job);
    }
    return o;
  }
  static std::vector<std::uint32_t> names_of(const registered_job& j, bool workers) {
    return workers ? j.alloc().worker_hosts() : j.alloc().shard_hosts();
  }

  manual_clock steady{at_seconds(100)};
  manual_clock wall{at_seconds(1'700'000'000)};
  node_table table{steady, seconds(5)};
  std::shared_ptr<job_store> store =
      std::make_shared<job_store>(std::move(*job_store::open(":memory:")));
  std::optional<policy_holder> holder;
  std::optional<executor> exec{std::move(*executor::make({"dltap", 1}))};
  std::string log;
};

TEST_F(registry, under_fifo_a_second_job_waits_for_the_cpus_of_the_first) {
  nodes(2, 2);  // 4 CPUs; a worker and a shard take one each
  use("fifo");
  auto reg = make();
  const auto a = submit(reg, spec_yaml("first", 600, "{min: 1, max: 3, initial: 1}", "1"));
  auto o = decide(reg);
  ASSERT_EQ(o.launches.size(), 1u);
  EXPECT_EQ(o.launches[0].job, a);
  EXPECT_EQ(o.launches[0].workers.size(), 1u);  // fifo never grows a job
  const auto b = submit(reg, spec_yaml("second", 60, "{min: 1, max: 3, initial: 3}", "1"));
  o = decide(reg);  // it needs 4 CPUs; 2 are free
  EXPECT_TRUE(o.empty());
  EXPECT_EQ(reg.find(b)->status().state, job_state::queued);
  EXPECT_EQ(reg.find(a)->status().state, job_state::running);
  // coach status says why it waits; a third job that would fit waits behind it.
  const std::string held =
      " of 4: Coach's jobs hold 2 (a CPU per worker or shard); it starts when they end, or "
      "coach-node --cpus N advertises more";
  EXPECT_EQ(reg.why_waiting(*reg.find(b)),
            "asks for 4 CPUs (3 worker(s) and 1 shard(s)), 2 free" + held);
  EXPECT_EQ(reg.snapshot(*reg.find(b), nullptr, "fifo").waiting,
            "asks for 4 CPUs (3 worker(s) and 1 shard(s)), 2 free" + held);
  EXPECT_EQ(reg.why_waiting(*reg.find(a)), "") << "running";
  const auto c = submit(reg, spec_yaml("third", 60, "1", "1"));
  EXPECT_EQ(reg.why_waiting(*reg.find(c)), coach::format("behind job {} in the queue", b));
  const auto big = submit(reg, spec_yaml("big", 60, "{min: 2, max: 3, initial: 3}", "1"));
  EXPECT_EQ(reg.why_waiting(*reg.find(big)),
            "needs 3 CPUs (2 worker(s) and 1 shard(s) at least), 2 free" + held);
  ASSERT_TRUE(reg.cancel(c));
  ASSERT_TRUE(reg.cancel(big));
  reg.end(*reg.find(c), job_state::cancelled, std::nullopt);
  reg.end(*reg.find(big), job_state::cancelled, std::nullopt);
  EXPECT_EQ(reg.reserved().size(), 1u) << "the first job's worker and shard share a node";

  // When the first ends, the second gets all it asked for.
  const auto stopped = reg.end(*reg.find(a), job_state::succeeded, std::nullopt);
  EXPECT_EQ(stopped, (std::set<std::uint32_t>{1}));
  o = decide(reg);
  ASSERT_EQ(o.launches.size(), 1u);
  EXPECT_EQ(o.launches[0].job, b);
  EXPECT_EQ(o.launches[0].workers.size(), 3u);
  EXPECT_EQ(reg.find(b)->status().state, job_state::running);
  // The store says so too.
  auto rec = store->job(b);
  ASSERT_TRUE(rec) << rec.error().message;
  EXPECT_EQ(rec->state, job_state::running);
  EXPECT_EQ(rec->workers, 3);
  EXPECT_EQ(store->job(a)->state, job_state::succeeded);
}

TEST_F(registry, under_elastic_fifo_the_first_job_grows_then_shrinks_to_admit_a_second) {
  nodes(2, 2);
  use("elastic-fifo");
  auto reg = make();
  const auto a = submit(reg, spec_yaml("first", 800, "{min: 1, max: 3, initial: 1}", "1"));
  // Alone, it takes the free CPUs: 3 workers and its shard.
  auto o = decide(reg);
  ASSERT_EQ(o.launches.size(), 1u) << log;
  EXPECT_EQ(o.launches[0].workers.size(), 3u);
  EXPECT_EQ(reg.cluster().nodes[0].free.cpus + reg.cluster().nodes[1].free.cpus, 0.0);

  // A second job: the first gives back what it took beyond its request; the second starts with
  // what fits.
  const auto b = submit(reg, spec_yaml("second", 60, "{min: 1, max: 3, initial: 3}", "1"));
  o = decide(reg);
  ASSERT_EQ(o.resizes.size(), 1u) << log;
  EXPECT_EQ(o.resizes[0].job, a);
  EXPECT_EQ(o.resizes[0].workers, 1u);
  EXPECT_EQ(o.resizes[0].shards, 0u) << "shards unchanged";
  EXPECT_EQ(reg.find(a)->alloc().workers(), 1);
  ASSERT_EQ(o.launches.size(), 1u) << log;
  EXPECT_EQ(o.launches[0].job, b);
  EXPECT_EQ(o.launches[0].workers.size() + o.launches[0].shards.size(), 2u);
  EXPECT_EQ(reg.find(b)->status().state, job_state::running);
  EXPECT_EQ(reg.find(a)->status().state, job_state::running);
}

TEST_F(registry, swapping_to_elastic_fifo_grows_a_running_job_where_the_resize_planned) {
  nodes(2, 2);
  use("fifo");
  auto reg = make();
  const auto a = submit(reg, spec_yaml("first", 800, "{min: 1, max: 3, initial: 1}", "1"));
  decide(reg);
  EXPECT_TRUE(decide(reg).empty()) << "fifo never grows a job";
  ASSERT_TRUE(holder->set("elastic-fifo"));
  auto o = decide(reg);
  ASSERT_EQ(o.resizes.size(), 1u) << log;
  EXPECT_EQ(o.resizes[0].workers, 3u);
  EXPECT_EQ(o.resizes[0].shards, 0u);
  auto& job = *reg.find(a);
  EXPECT_EQ(job.alloc().workers(), 3);
  const std::vector<std::uint32_t> planned(job.alloc().planned_workers.begin(),
                                           job.alloc().planned_workers.end());
  ASSERT_EQ(planned.size(), 2u) << "until the master asks for them";
  // The master asks for the two new workers: they go where the resize planned them.
  for (std::uint32_t rank : {1u, 2u}) {
    auto h = reg.place(job, true, "", *exec);
    ASSERT_TRUE(h) << h.error().message;
    EXPECT_EQ(*h, planned[rank - 1]);
    reg.part_placed(job, true, rank, *h);
  }
  EXPECT_TRUE(job.alloc().planned_workers.empty());
  EXPECT_EQ(job.alloc().worker_at.size(), 3u);
  EXPECT_EQ(job.status().worker_nodes.size(), 3u);
  EXPECT_EQ(store->job(a)->workers, 3);
  EXPECT_TRUE(decide(reg).empty()) << "nothing left to grow into";
}

TEST_F(registry, what_a_change_frees_is_free_for_the_next_job) {
  // 4 CPUs. The first job takes 3 (2 workers, 1 shard); its schedule moves its shard whole to
  // a new one (shard 1) and sends worker 1 away. The second job asks for 2: it fits only if
  // the emptied shard and the worker that left are no longer counted.
  nodes(2, 2);
  use("fifo");
  auto reg = make();
  const auto a = submit(reg, spec_yaml("first", 3000, "{min: 1, max: 2, initial: 2}",
                                       "{min: 1, max: 2, initial: 1}"));
  decide(reg);
  auto& first = *reg.find(a);
  auto h = reg.place(first, false, "", *exec);  // the master asks for shard 1
  ASSERT_TRUE(h);
  reg.part_placed(first, false, 1, *h);
  EXPECT_EQ(first.alloc().shards(), 2) << "both count until the move takes effect";
  const auto b = submit(reg, spec_yaml("second", 5, "1", "1"));
  EXPECT_TRUE(decide(reg).launches.empty());
  const std::vector<std::uint32_t> members{0}, live{1};
  EXPECT_TRUE(reg.layout(first, members, live));
  EXPECT_FALSE(reg.layout(first, members, live)) << "nothing more left";
  auto o = decide(reg);
  ASSERT_EQ(o.launches.size(), 1u) << log;
  EXPECT_EQ(o.launches[0].job, b);
}

TEST_F(registry, admission_refuses_what_never_fits_and_trims_what_fits_only_smaller) {
  nodes(2, 2);
  use("fifo");
  auto reg = make();
  auto spec = parse_job_spec(spec_yaml("big", 5, "{min: 4, max: 6, initial: 4}", "1"), "j", "/");
  ASSERT_TRUE(spec);
  auto rec = reg.admit(*spec, {"", "j", "/", 0, 0});
  ASSERT_FALSE(rec);
  EXPECT_EQ(rec.error().code, errc::resource_exhausted);
  EXPECT_EQ(rec.error().message,
            "job 'big' needs at least 4 worker(s) and 1 shard(s) (1 CPU each, 0 GPU(s) per "
            "worker); the live nodes have 4 CPU(s) and 0 GPU(s) in all");
  spec = parse_job_spec(spec_yaml("wide", 5, "{min: 1, max: 6, initial: 2}", "1"), "j", "/");
  auto out = reg.admit(*spec, {"", "j", "/", 7, 0});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().message, "--workers 7 is outside the job's workers range [1, 6]");
  out = reg.admit(*spec, {"", "j", "/", 6, 0});
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->requested_workers, 3) << "6 workers and a shard do not fit 4 CPUs; 3 do";
  EXPECT_NE(log.find("asks for 6 worker(s) and 1 shard(s), more than the cluster has; it asks "
                     "for 3 and 1"),
            std::string::npos)
      << log;
  node_table none_alive(steady, seconds(5));
  job_registry empty(store, none_alive, wall, 1, {});
  auto none = empty.admit(*spec, {"", "j", "/", 0, 0});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message, "no live node to run job 'wide'");
}

/// Epochs first..last of `job` ended (1000 samples each).
void end_epochs(job_registry& reg, registered_job& job, perf_model& model, std::uint32_t first,
                std::uint32_t last) {
  for (std::uint32_t k = first; k <= last; ++k) {
    epoch_report e;
    e.epoch = k;
    e.seconds = 1;
    e.samples = 1000;
    e.workers = 1;
    e.shards = 1;
    reg.epoch(job, e, model);
  }
}

// Issue 37: a job sent back to an older checkpoint, or to the start, after a restart said only
// where it resumed, not why (nor how much would be trained again).
// Issue 37: a store that cannot take records (a full disk) logged its error for every epoch,
// hundreds of lines a second. Now a line a second at most; the job goes on.
TEST_F(registry, a_store_that_fails_every_record_is_logged_a_line_a_second_at_most) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("coach-registry-" + std::to_string(::getpid()) + ".db");
  std::filesystem::remove(path);
  {
    auto opened = job_store::open(path.string());
    ASSERT_TRUE(opened) << opened.error().message;
    store = std::make_shared<job_store>(std::move(*opened));
  }
  nodes(3, 2);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("flood", 1000, "1", "1"));
  decide(reg);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE epochs", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  log.clear();
  auto& job = *reg.find(id);
  end_epochs(reg, job, *holder->model(), 0, 199);  // 200 records refused, well within a second
  const auto lines = std::count(log.begin(), log.end(), '\n');
  const auto refusals = occurrences(log, "job store: cannot record an epoch");
  EXPECT_GE(refusals, 1) << log;
  EXPECT_LE(refusals, 2) << log;              // 2 when the epochs straddle a second
  EXPECT_EQ(job.status().epochs_done, 200u);  // the job went on
  EXPECT_LT(lines, 220) << "one line an epoch at most besides the store's";
  store.reset();
  std::filesystem::remove(path);
  std::filesystem::remove(path.string() + "-wal");
  std::filesystem::remove(path.string() + "-shm");
}

TEST_F(registry, a_restart_says_which_epochs_are_trained_again_and_why) {
  nodes(3, 2);
  use("fifo");
  std::uint64_t behind = 0, none = 0;
  {
    auto reg = make();
    behind = submit(reg, spec_yaml("behind", 120, "1", "1", every_epoch));
    none = submit(reg, spec_yaml("none", 120, "1", "1", "checkpoint: {every_s: 100000}\n"));
    decide(reg);
    auto& a = *reg.find(behind);
    auto& b = *reg.find(none);
    end_epochs(reg, a, *holder->model(), 0, 7);
    end_epochs(reg, b, *holder->model(), 0, 2);
    reg.checkpoint(a, 4, state_of(10, 0.5f, 75));  // after epoch 5; epochs 6-8 came after
  }                                                // the scheduler's process dies
  log.clear();
  auto reg = make();
  ASSERT_TRUE(reg.load());
  EXPECT_EQ(reg.find(behind)->first_epoch(), 5u);
  EXPECT_EQ(reg.find(none)->first_epoch(), 0u);
  EXPECT_NE(log.find("job 1 'behind' resumes at epoch 6 of 120: its last stored checkpoint is "
                     "after epoch 5, so epochs 6-8 are trained again"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("job 2 'none' resumes at epoch 1 of 120: no checkpoint of it was stored, "
                     "so its 3 epoch(s) are trained again"),
            std::string::npos)
      << log;
}

TEST_F(registry, a_restarted_registry_resumes_a_running_job_from_its_checkpoint) {
  nodes(3, 2);
  use("fifo");
  std::uint64_t id = 0;
  {
    auto reg = make();
    id = submit(reg, spec_yaml("restart", 120, "{min: 1, max: 4, initial: 3}", "2", every_epoch));
    decide(reg);
    auto& job = *reg.find(id);
    ASSERT_EQ(job.hosts().size(), 3u);
    end_epochs(reg, job, *holder->model(), 0, 4);
    reg.checkpoint(job, 4, state_of(10, 0.5f, 75));
  }  // the scheduler's process dies
  auto reg = make();
  auto n = reg.load();
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 1u);
  auto& job = *reg.find(id);
  EXPECT_EQ(job.state(), job_state::suspended);
  EXPECT_EQ(job.status().state, job_state::queued);
  EXPECT_EQ(job.first_epoch(), 5u);
  EXPECT_EQ(job.status().epochs_done, 5u);
  ASSERT_TRUE(job.checkpoint());
  EXPECT_EQ(job.checkpoint()->values, std::vector<float>(10, 0.5f));
  EXPECT_EQ(job.checkpoint()->state_a, std::vector<float>(10, -0.5f)) << "the optimizer state too";
  EXPECT_EQ(job.checkpoint()->version, 75);
  EXPECT_EQ(job.checkpoint()->samples_applied, 75u * 32u);
  // Its parts on the other nodes must be stopped first (its parts here died with the process).
  EXPECT_EQ(job.stops().unsent(), (std::set<std::uint32_t>{2, 3}));
  EXPECT_TRUE(decide(reg).launches.empty());
  EXPECT_NE(log.find("job 1 'restart' resumes at epoch 6 of 120"), std::string::npos) << log;
  // The actor sends the stops when the nodes heartbeat.
  EXPECT_EQ(reg.seen(2), std::set<std::uint64_t>{id});
  EXPECT_EQ(reg.seen(3), std::set<std::uint64_t>{id});
  EXPECT_TRUE(reg.seen(3).empty()) << "sent once";
  EXPECT_FALSE(reg.stop_answered(job, 2));
  EXPECT_TRUE(reg.stop_answered(job, 3));
  auto o = reg.decide(*holder, *exec, nullptr);
  ASSERT_EQ(o.launches.size(), 1u);
  reg.begin_run(job, o.launches[0].workers, o.launches[0].shards, true);
  EXPECT_EQ(job.status().resumes, 1u);
  EXPECT_EQ(store->job(id)->state, job_state::running);
}

TEST_F(registry, a_checkpoint_ahead_of_its_epoch_record_waits_for_it) {
  // The checkpoint after epoch 3 arrives before epoch 3's record, and the scheduler dies in
  // between: the restart resumes from the checkpoint before (epoch 2), whose epochs are all
  // recorded, so the status lists every epoch's samples.
  nodes(1, 4);
  use("fifo");
  std::uint64_t id = 0;
  {
    auto reg = make();
    id = submit(reg, spec_yaml("race", 10, "1", "1", every_epoch));
    decide(reg);
    auto& job = *reg.find(id);
    end_epochs(reg, job, *holder->model(), 0, 2);
    reg.checkpoint(job, 2, state_of(4, 2.f));
    EXPECT_EQ(job.checkpoints().epoch(), 2u);
    reg.checkpoint(job, 3, state_of(4, 3.f));
    EXPECT_EQ(job.checkpoints().epoch(), 2u) << "held until epoch 3's record";
    EXPECT_EQ((*store->checkpoint(id))->epoch, 2u);
  }
  auto reg = make();
  ASSERT_TRUE(reg.load());
  auto& job = *reg.find(id);
  EXPECT_EQ(job.first_epoch(), 3u);
  EXPECT_EQ(job.checkpoint()->values, std::vector<float>(4, 2.f));
  EXPECT_EQ(job.status().epoch_samples, (std::vector<std::uint64_t>{1000, 1000, 1000}));

  // Held, then stored once the record comes.
  end_epochs(reg, job, *holder->model(), 3, 3);
  reg.checkpoint(job, 4, state_of(4, 4.f));
  EXPECT_EQ(job.checkpoints().epoch(), 2u);
  end_epochs(reg, job, *holder->model(), 4, 4);
  EXPECT_EQ(job.checkpoints().epoch(), 4u);
  EXPECT_EQ((*store->checkpoint(id))->epoch, 4u);
  EXPECT_EQ(job.checkpoint()->values, std::vector<float>(4, 4.f));
}

TEST_F(registry, a_job_in_the_store_ended_after_its_last_checkpoint_is_not_trained_again) {
  nodes(1, 4);
  use("fifo");
  std::uint64_t id = 0;
  {
    auto reg = make();
    id = submit(reg, spec_yaml("done", 3, "1", "1"));  // the last epoch's is always stored
    decide(reg);
    end_epochs(reg, *reg.find(id), *holder->model(), 0, 2);
    reg.checkpoint(*reg.find(id), 2, state_of(3, 1.f));
  }
  auto reg = make();
  ASSERT_TRUE(reg.load());
  EXPECT_EQ(reg.find(id)->state(), job_state::succeeded);
  EXPECT_EQ(reg.find(id)->status().state, job_state::succeeded);
  EXPECT_TRUE(decide(reg).empty());
}

TEST_F(registry, a_lost_node_with_only_workers_costs_them_a_node_with_a_shard_a_recovery) {
  // One part per node: the shard on one, the two workers on others, one spare; the scheduler's
  // node runs none (its loss is the scheduler's).
  nodes(5, 1, 0, 0);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("lossy", 50, "{min: 1, max: 2, initial: 2}", "1"));
  decide(reg);
  auto& job = *reg.find(id);
  const auto shard_host = job.alloc().shard_at.at(0);
  std::uint32_t worker_host = 0, rank = 0;
  for (const auto& [r, h] : job.alloc().worker_at)
    if (h != 1) worker_host = h, rank = r;
  ASSERT_NE(worker_host, 0u) << "a worker away from the scheduler's node";
  ASSERT_NE(shard_host, 1u) << "the shard away from the scheduler's node";
  auto loss = reg.lose_node(worker_host);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_FALSE(loss[0].fails);
  EXPECT_FALSE(loss[0].recovers);
  EXPECT_EQ(loss[0].ranks, std::vector<std::uint32_t>{rank});
  EXPECT_EQ(job.alloc().workers(), 1);
  EXPECT_EQ(job.status().workers, 1u);
  EXPECT_TRUE(job.status().worker_nodes[rank].ends_with(" (lost)"));
  EXPECT_EQ(store->job(id)->workers, 1);
  // Taken for dead, the worker's node may only have been frozen: when it comes back it is told
  // to stop the job's parts it kept (once; an unrelated node has none to stop).
  EXPECT_EQ(reg.came_back(worker_host), std::set<std::uint64_t>{id});
  EXPECT_TRUE(reg.came_back(worker_host).empty()) << "taken out";
  EXPECT_TRUE(reg.came_back(shard_host).empty()) << "not lost";

  // Three epochs, a checkpoint after the third (kept here: a minute has not passed), 12 s more
  // of training, then the shard's node is lost: the job restarts from the checkpoint.
  end_epochs(reg, job, *holder->model(), 0, 2);
  reg.checkpoint(job, 2, state_of(10, 0.25f, 90));
  EXPECT_FALSE(*store->checkpoint(id)) << "stored only once a minute";
  wall.advance(seconds(12));
  const auto before = job.hosts();
  loss = reg.lose_node(shard_host);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_FALSE(loss[0].fails);
  ASSERT_TRUE(loss[0].recovers);
  auto left = before;
  left.erase(shard_host);
  EXPECT_EQ(loss[0].stop_hosts, left) << "its master and parts on the nodes left are stopped";
  EXPECT_EQ(job.state(), job_state::suspended);
  EXPECT_FALSE(job.launched());
  EXPECT_EQ(job.first_epoch(), 3u);
  EXPECT_EQ(job.status().epochs_done, 3u);
  ASSERT_EQ(job.status().recoveries_lost_s.size(), 1u);
  EXPECT_DOUBLE_EQ(job.status().recoveries_lost_s[0], 12.0);
  // The checkpoint is in the store now: a scheduler restart meanwhile resumes from it too.
  auto stored = store->checkpoint(id);
  ASSERT_TRUE(stored && *stored);
  EXPECT_EQ((*stored)->epoch, 2u);
  EXPECT_EQ((*stored)->state.version, 90);
  EXPECT_EQ((*stored)->state.state_a, std::vector<float>(10, -0.25f));
  EXPECT_EQ(store->states(id)->back().message,
            "node '" + table.name(shard_host) + "' lost; recovering; resumes at epoch 4");

  // Once the nodes left answered their stops, it starts again, away from the lost node.
  EXPECT_TRUE(reg.decide(*holder, *exec, nullptr).launches.empty());
  steady.advance(seconds(10));
  nodes(5, 1, shard_host, 0);  // every node but the lost one heartbeats
  EXPECT_EQ(table.expire(), std::vector<std::uint32_t>{shard_host});
  // Stops unanswered for longer than the node timeout are asked again (an answer may have been
  // lost with a connection), of live nodes only, and not again at once.
  EXPECT_TRUE(reg.stops_overdue(5).empty()) << "just asked";
  wall.advance(seconds(6));
  auto overdue = reg.stops_overdue(5);
  ASSERT_EQ(overdue.size(), 1u);
  EXPECT_EQ(overdue[0].first, id);
  EXPECT_EQ(overdue[0].second, std::vector<std::uint32_t>(left.begin(), left.end()));
  EXPECT_TRUE(reg.stops_overdue(5).empty()) << "counted as asked";
  EXPECT_FALSE(reg.stop_answered(job, *left.begin()));
  wall.advance(seconds(6));
  overdue = reg.stops_overdue(5);
  ASSERT_EQ(overdue.size(), 1u);
  EXPECT_EQ(overdue[0].second, std::vector<std::uint32_t>(std::next(left.begin()), left.end()));
  for (auto h : left) reg.stop_answered(job, h);
  EXPECT_TRUE(reg.stops_overdue(0).empty()) << "every stop answered";
  auto o = reg.decide(*holder, *exec, nullptr);
  ASSERT_EQ(o.launches.size(), 1u);
  for (auto h : o.launches[0].shards) EXPECT_NE(h, shard_host);
  for (auto h : o.launches[0].workers) EXPECT_NE(h, shard_host);
}

TEST_F(registry, a_loss_that_leaves_a_job_no_worker_recovers_instead_of_failing) {
  // bench/chaos.sh: both worker nodes of a job lost one after the other; the master failed the
  // job ("every worker of the job is gone") though its checkpoint and shards were there.
  nodes(5, 1, 0, 0);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("workerless", 50, "{min: 1, max: 2, initial: 2}", "1"));
  decide(reg);
  auto& job = *reg.find(id);
  std::vector<std::uint32_t> worker_hosts;
  for (const auto& [r, h] : job.alloc().worker_at) worker_hosts.push_back(h);
  ASSERT_EQ(worker_hosts.size(), 2u);
  ASSERT_NE(worker_hosts[0], worker_hosts[1]) << "one worker a node";
  for (auto h : worker_hosts) ASSERT_NE(h, 1u) << "away from the scheduler's node";
  auto loss = reg.lose_node(worker_hosts[0]);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_FALSE(loss[0].recovers) << "one worker left: the job goes on without the other";
  EXPECT_EQ(loss[0].ranks.size(), 1u);
  loss = reg.lose_node(worker_hosts[1]);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_FALSE(loss[0].fails);
  EXPECT_TRUE(loss[0].recovers) << "no worker left: from the checkpoint, on the nodes left";
  EXPECT_EQ(job.state(), job_state::suspended);
  EXPECT_EQ(job.status().recoveries_lost_s.size(), 1u);
}

TEST_F(registry, with_replicas_a_lost_primary_is_taken_over_and_a_lost_last_copy_recovers) {
  // Five nodes of one CPU besides the scheduler's (host 1, silent here: no part of the job
  // goes there, so losing any part's node is not losing the scheduler).
  nodes(6, 1, 1);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("twice", 50, "2", "2", "replicas: 2\n"));
  decide(reg);
  auto& job = *reg.find(id);
  ASSERT_EQ(job.backups().size(), 2u);
  for (std::uint32_t k = 0; k < 2; ++k) {
    ASSERT_EQ(job.backups()[k].size(), 1u) << "one backup each";
    EXPECT_NE(job.backups()[k][0], job.alloc().shard_at.at(k)) << "never beside its primary";
    EXPECT_TRUE(job.hosts().contains(job.backups()[k][0])) << "its node runs a part of the job";
  }
  // Shard 0's primary's node is lost: its backup takes over; a backup of shard 1 there, if
  // any, leaves shard 1's chain.
  const auto primary = job.alloc().shard_at.at(0), backup = job.backups()[0][0];
  auto loss = reg.lose_node(primary);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_FALSE(loss[0].fails);
  EXPECT_FALSE(loss[0].recovers);
  EXPECT_EQ(loss[0].heads, (std::vector<std::uint32_t>{0, 1}));
  const bool cut = job.backups()[1][0] == primary;
  const auto cut_expected = cut ? std::vector<std::uint32_t>{1, 0} : std::vector<std::uint32_t>{};
  EXPECT_EQ(loss[0].cut, cut_expected);
  EXPECT_EQ(job.alloc().shard_at.at(0), backup);
  EXPECT_EQ(job.status().shard_nodes[0], table.name(backup));
  EXPECT_EQ(job.status().failovers, 1u);
  EXPECT_EQ(job.state(), job_state::running);
  // Then the node of its last copy: nothing is left to take over, the job recovers.
  loss = reg.lose_node(backup);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_TRUE(loss[0].recovers);
  EXPECT_EQ(job.state(), job_state::suspended);
  // Its history is in the store: a restarted scheduler shows the failover and the recovery.
  auto again = make();
  ASSERT_TRUE(again.load());
  EXPECT_EQ(again.find(id)->status().failovers, 1u);
  EXPECT_EQ(again.find(id)->status().recoveries_lost_s, job.status().recoveries_lost_s);
  EXPECT_GT(job.status().samples_epoch, 0u);
  EXPECT_EQ(again.find(id)->status().samples_epoch, job.status().samples_epoch);
}

TEST_F(registry, a_shard_added_to_a_replicated_job_gets_a_backup_that_takes_over) {
  nodes(6, 1, 1);  // as above: five usable nodes, the scheduler's silent
  use("fifo");
  auto reg = make();
  const auto id =
      submit(reg, spec_yaml("grown", 50, "2", "{min: 1, max: 2, initial: 1}", "replicas: 2\n"));
  decide(reg);
  auto& job = *reg.find(id);
  ASSERT_EQ(job.backups().size(), 1u);
  // The master asks for shard 1 (a rescale, or a migration of shard 0): it comes with a backup
  // on another node, away from the copies the job holds already while a node is free of them.
  auto h = reg.place(job, false, "", *exec);
  ASSERT_TRUE(h) << h.error().message;
  const auto backups = reg.part_placed(job, false, 1, *h);
  ASSERT_EQ(backups.size(), 1u) << log;
  EXPECT_NE(backups[0], *h) << "never beside its primary";
  EXPECT_NE(backups[0], job.alloc().shard_at.at(0)) << "a node free of copies was left";
  EXPECT_NE(backups[0], job.backups()[0][0]) << "a node free of copies was left";
  EXPECT_TRUE(job.hosts().contains(backups[0])) << "its node runs a part of the job";
  ASSERT_EQ(job.backups().size(), 2u);
  EXPECT_EQ(job.backups()[1], backups);

  // Shard 0 is migrated away whole: the change takes effect with shard 1 alone. Shard 0's
  // chain is over, so losing its old nodes costs nothing.
  const std::vector<std::uint32_t> members{0, 1}, live{1};
  ASSERT_TRUE(reg.layout(job, members, live));
  const auto old_backup = job.backups()[0][0];
  if (old_backup != *h && old_backup != backups[0]) {
    auto loss = reg.lose_node(old_backup);
    if (!loss.empty()) {
      EXPECT_FALSE(loss[0].recovers);
      EXPECT_TRUE(loss[0].heads.empty());
    }
  }
  // The added shard's primary is lost: its backup takes over, no recovery.
  auto loss = reg.lose_node(*h);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_FALSE(loss[0].recovers);
  EXPECT_EQ(loss[0].heads, (std::vector<std::uint32_t>{1, 1}));
  EXPECT_EQ(job.alloc().shard_at.at(1), backups[0]);
  EXPECT_EQ(job.status().failovers, 1u);
  // And then its last copy: the job recovers from its checkpoint.
  loss = reg.lose_node(backups[0]);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_TRUE(loss[0].recovers);
}

TEST_F(registry, the_store_takes_a_checkpoint_every_every_s_and_always_the_last) {
  nodes(1, 4);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("paced", 5, "1", "1", "checkpoint: {every_s: 30}\n"));
  decide(reg);
  auto& job = *reg.find(id);
  end_epochs(reg, job, *holder->model(), 0, 0);
  wall.advance(seconds(20));
  reg.checkpoint(job, 0, state_of(4, 1.f));
  EXPECT_FALSE(*store->checkpoint(id)) << "20 s after the submission";
  EXPECT_EQ(job.checkpoints().epoch(), 0u) << "kept here for a recovery";
  end_epochs(reg, job, *holder->model(), 1, 1);
  wall.advance(seconds(15));
  reg.checkpoint(job, 1, state_of(4, 2.f));
  ASSERT_TRUE(*store->checkpoint(id));
  EXPECT_EQ((*store->checkpoint(id))->epoch, 1u) << "35 s after the submission";
  end_epochs(reg, job, *holder->model(), 2, 3);
  wall.advance(seconds(10));
  reg.checkpoint(job, 3, state_of(4, 4.f));
  EXPECT_EQ((*store->checkpoint(id))->epoch, 1u) << "10 s after the last";
  end_epochs(reg, job, *holder->model(), 4, 4);
  reg.checkpoint(job, 4, state_of(4, 5.f));
  EXPECT_EQ((*store->checkpoint(id))->epoch, 4u) << "the job's last epoch";
}

TEST_F(registry, a_refused_resize_gives_the_allocation_back) {
  nodes(2, 2);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("grow", 100, "{min: 1, max: 3, initial: 1}", "1"));
  decide(reg);
  ASSERT_TRUE(holder->set("elastic-fifo"));
  const auto before = reg.find(id)->alloc();
  auto o = decide(reg);
  ASSERT_EQ(o.resizes.size(), 1u);
  EXPECT_NE(reg.find(id)->alloc(), before);
  EXPECT_EQ(o.resizes[0].before, before);
  reg.restore(id, o.resizes[0].generation + 1, before,
              o.resizes[0].cause);  // another run's answer: ignored
  EXPECT_NE(reg.find(id)->alloc(), before);
  reg.restore(id, o.resizes[0].generation, before, o.resizes[0].cause);
  EXPECT_EQ(reg.find(id)->alloc(), before);
  EXPECT_EQ(store->job(id)->workers, 1);
}

TEST_F(registry, a_dltap_job_gets_one_shard_moved_beside_its_workers_at_most_once_a_minute) {
  nodes(2, 4);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("near", 100, "2", "1", "placement: dltap\n"));
  decide(reg);
  auto& job = *reg.find(id);
  ASSERT_EQ(job.status().placement, "dltap");
  // The user moved its shard away from both workers (coach migrate): it runs apart.
  const auto workers_on = job.alloc().worker_at.at(0);
  ASSERT_EQ(job.alloc().worker_at.at(1), workers_on) << "dltap put both workers together";
  const std::uint32_t away = workers_on == 1 ? 2 : 1;
  reg.part_placed(job, false, 0, away);
  reg.shaped(job, {.model_bytes = 4e6, .batch_size = 32}, 1000);
  progress_event p;
  p.samples_total = 1000;
  p.samples_per_s = 6400;  // 100 steps/s of 2 × 32
  p.workers = 2;
  p.shards = 1;
  reg.progress(job, p);
  rebalancer rebal(steady, {seconds(60), 2});
  auto o = reg.decide(*holder, *exec, &rebal);
  ASSERT_EQ(o.moves.size(), 1u) << log;
  EXPECT_EQ(o.moves[0].shard, 0u);
  EXPECT_EQ(o.moves[0].to, table.name(workers_on));
  EXPECT_NE(log.find("dltap: job 1: shard 0 moves from"), std::string::npos) << log;
  EXPECT_TRUE(reg.decide(*holder, *exec, &rebal).moves.empty()) << "once a minute";
  steady.advance(seconds(61));
  EXPECT_TRUE(reg.decide(*holder, *exec, &rebal, [](std::uint64_t) { return true; }).moves.empty())
      << "not while a part addition is in flight";
  EXPECT_EQ(reg.decide(*holder, *exec, &rebal).moves.size(), 1u);
}

/// The job's history as `coach logs` prints it, one line after another.
std::string history(const registered_job& job) {
  std::string out;
  for (const auto& e : job.log().since(0)) out += e.text + "\n";
  return out;
}

// Issue 41, item 1: `coach migrate JOB --shard 1 --to b` was undone 40 ms later by the
// rebalancer, and the status listed 3 nodes for 2 shards. A user's migration pins the shard
// until the user releases it; the status lists one node per shard.
TEST_F(registry, a_users_migration_holds_against_the_rebalancer_until_released) {
  nodes(2, 4);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("pin", 100, "2", "1", "placement: dltap\n"));
  decide(reg);
  auto& job = *reg.find(id);
  const auto workers_on = job.alloc().worker_at.at(0);
  ASSERT_EQ(job.alloc().worker_at.at(1), workers_on) << "dltap put both workers together";
  const std::uint32_t away = workers_on == 1 ? 2 : 1;
  // coach migrate 1 --shard 0 --to away: the master starts shard 1 there (asked for before it
  // answers), accepts, and the change takes effect: shard 0 is gone.
  reg.user_migrate(job, 0, away);
  reg.part_placed(job, false, 1, away);
  // In effect in two steps: shard 1 takes the slices beside shard 0, then shard 0 leaves.
  const std::uint32_t members[] = {0, 1}, both[] = {0, 1}, live[] = {1};
  reg.layout(job, members, both);
  EXPECT_NE(history(job).find("job 1: a change is in effect: 2 worker(s), 2 shard(s) (cause: "
                              "user)"),
            std::string::npos)
      << history(job);
  EXPECT_TRUE(reg.snapshot(job, nullptr, "fifo").orders.size() == 1) << "pinned meanwhile";
  reg.layout(job, members, live);
  EXPECT_EQ(job.status().shard_nodes, std::vector<std::string>{table.name(away)})
      << "one node per shard";
  EXPECT_EQ(job.status().shard_ids, std::vector<std::uint32_t>{1});
  EXPECT_EQ(
      reg.snapshot(job, nullptr, "fifo").orders,
      std::vector<std::string>{"shard 1 pinned to '" + table.name(away) + "' (coach migrate)"});
  const auto h = history(job);
  EXPECT_NE(h.find("job 1: shard 1 placed on '" + table.name(away) +
                   "' (cause: user); pinned there (coach migrate)"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("job 1: a change is in effect: 2 worker(s), 1 shard(s) (cause: user)"),
            std::string::npos)
      << h;

  // The step rate that made the rebalancer move it back at once: now it stays.
  reg.shaped(job, {.model_bytes = 4e6, .batch_size = 32}, 1000);
  progress_event p;
  p.samples_total = 1000;
  p.samples_per_s = 6400;
  p.workers = 2;
  p.shards = 1;
  reg.progress(job, p);
  rebalancer rebal(steady, {seconds(60), 2});
  EXPECT_TRUE(reg.decide(*holder, *exec, &rebal).moves.empty()) << log;
  steady.advance(seconds(120));
  EXPECT_TRUE(reg.decide(*holder, *exec, &rebal).moves.empty()) << "pinned: " << log;
  // A move the master refuses pins nothing and says why.
  reg.user_migrate(job, 1, workers_on);
  reg.user_migrate_refused(id, job.generation(), 1, workers_on, "a change is in flight");
  EXPECT_NE(history(job).find("job 1: the user's move of shard 1 to '" + table.name(workers_on) +
                              "' is refused (a change is in flight); nothing is pinned"),
            std::string::npos)
      << history(job);
  EXPECT_EQ(reg.snapshot(job, nullptr, "fifo").orders.size(), 1u);

  // Releasing another shard says what is pinned; releasing it lets the rebalancer move it.
  auto wrong = reg.release_pin(id, 0);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, errc::invalid_argument);
  EXPECT_EQ(wrong.error().message, "job 1: shard 0 is not pinned (pinned: shard 1)");
  ASSERT_TRUE(reg.release_pin(id, 1));
  EXPECT_TRUE(reg.snapshot(job, nullptr, "fifo").orders.empty());
  EXPECT_EQ(reg.release_pin(id, 1).error().message, "job 1: shard 1 is not pinned (none is)");
  auto o = reg.decide(*holder, *exec, &rebal);
  ASSERT_EQ(o.moves.size(), 1u) << log;
  EXPECT_EQ(o.moves[0].shard, 1u);
  reg.part_placed(job, false, 2, workers_on);
  const std::uint32_t live2[] = {2};
  reg.layout(job, members, live2);
  EXPECT_EQ(job.status().shard_nodes, std::vector<std::string>{table.name(workers_on)});
  EXPECT_EQ(job.status().shard_ids, std::vector<std::uint32_t>{2});
  const auto h2 = history(job);
  EXPECT_NE(
      h2.find("shard 1 moves from '" + table.name(away) + "' to '" + table.name(workers_on) + "'"),
      std::string::npos)
      << h2;
  EXPECT_NE(h2.find("(cause: rebalancer)\n"), std::string::npos) << h2;
  EXPECT_NE(h2.find("job 1: a change is in effect: 2 worker(s), 1 shard(s) (cause: rebalancer)"),
            std::string::npos)
      << h2;
}

// Issue 41, item 1: `coach policy set coach` cut a job the user had rescaled to 3 workers back
// to 1. A user's rescale holds against every policy until released.
TEST_F(registry, a_users_rescale_holds_against_a_policy_swap_until_released) {
  nodes(2, 2);
  use("fifo");
  auto reg = make();
  const auto a = submit(reg, spec_yaml("first", 800, "{min: 1, max: 3, initial: 1}", "1"));
  decide(reg);
  auto& job = *reg.find(a);
  // coach rescale 1 --workers 3: accepted; the master asks for ranks 1 and 2.
  reg.user_rescale(job, 3, 0);
  reg.rescaled(job, 3, 0);
  for (std::uint32_t rank : {1u, 2u}) {
    auto h = reg.place(job, true, "", *exec);
    ASSERT_TRUE(h) << h.error().message;
    reg.part_placed(job, true, rank, *h);
  }
  const std::uint32_t three[] = {0, 1, 2}, live[] = {0};
  reg.layout(job, three, live);
  EXPECT_EQ(reg.snapshot(job, nullptr, "fifo").orders,
            std::vector<std::string>{"workers 3 held (coach rescale)"});
  auto h = history(job);
  EXPECT_NE(h.find("job 1: the user rescales it to 3 worker(s) (cause: user); held against the "
                   "policies until `coach rescale 1 --release`"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("job 1: worker 1 placed on '"), std::string::npos) << h;
  EXPECT_NE(h.find("(cause: user)\njob 1: worker 2 placed"), std::string::npos) << h;
  EXPECT_NE(h.find("job 1: a change is in effect: 3 worker(s), 1 shard(s) (cause: user)"),
            std::string::npos)
      << h;

  // A second job comes; elastic-fifo would give the first back its request (1 worker) to admit
  // it, and coach would size it by its model: the user's 3 hold under both.
  const auto b = submit(reg, spec_yaml("second", 60, "{min: 1, max: 3, initial: 1}", "1"));
  for (const char* policy : {"elastic-fifo", "coach", "fifo"}) {
    ASSERT_TRUE(holder->set(policy));
    const auto o = decide(reg);
    for (const auto& z : o.resizes) EXPECT_NE(z.job, a) << policy << ": " << log;
    EXPECT_EQ(job.alloc().workers(), 3) << policy;
  }
  EXPECT_FALSE(reg.find(b)->launched()) << "no room left for it";

  // Released: the policy resizes it, and its history says so and why.
  ASSERT_TRUE(holder->set("elastic-fifo"));
  ASSERT_TRUE(reg.release_hold(a));
  EXPECT_TRUE(reg.snapshot(job, nullptr, "fifo").orders.empty());
  EXPECT_EQ(reg.release_hold(a).error().message, "job 1 holds no rescale of the user's");
  const auto o = decide(reg);
  ASSERT_EQ(o.resizes.size(), 1u) << log;
  EXPECT_EQ(o.resizes[0].job, a);
  EXPECT_EQ(o.resizes[0].workers, 1u);
  const std::uint32_t one[] = {0};
  reg.layout(job, one, live);
  h = history(job);
  EXPECT_NE(h.find("job 1: the user releases its rescale (cause: user)"), std::string::npos) << h;
  EXPECT_NE(h.find("job 1: policy elastic-fifo resizes it to 1 worker(s), 1 shard(s) (cause: "
                   "policy elastic-fifo)"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("job 1: a change is in effect: 1 worker(s), 1 shard(s) (cause: policy "
                   "elastic-fifo)"),
            std::string::npos)
      << h;
}

// Issue 41, item 1: "a change is in effect" said nothing of who made it. Failures name theirs.
TEST_F(registry, a_change_after_a_failure_names_it) {
  nodes(5, 1, 0, 0);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("lossy", 50, "{min: 1, max: 3, initial: 3}", "1"));
  decide(reg);
  auto& job = *reg.find(id);
  ASSERT_EQ(job.alloc().worker_at.size(), 3u);
  std::uint32_t lost_host = 0, lost_rank = 0;
  for (const auto& [r, h] : job.alloc().worker_at)
    if (h != 1 && h != job.alloc().shard_at.at(0)) lost_host = h, lost_rank = r;
  ASSERT_NE(lost_host, 0u);
  auto loss = reg.lose_node(lost_host);
  ASSERT_EQ(loss.size(), 1u);
  ASSERT_FALSE(loss[0].recovers);
  std::vector<std::uint32_t> members;
  for (const auto& [r, h] : job.alloc().worker_at) members.push_back(r);
  const std::uint32_t live[] = {0};
  reg.layout(job, members, live);
  auto h = history(job);
  EXPECT_NE(h.find("job 1: a change is in effect: 2 worker(s), 1 shard(s) (cause: failure: node '" +
                   table.name(lost_host) + "' lost)"),
            std::string::npos)
      << h;
  // A worker its master found dead (its process gone): nobody asked for that change.
  const std::uint32_t one[] = {members[0]};
  reg.layout(job, one, live);
  h = history(job);
  EXPECT_NE(h.find("job 1: a change is in effect: 1 worker(s), 1 shard(s) (cause: failure: "
                   "worker " +
                   std::to_string(members[1]) + " died)"),
            std::string::npos)
      << h;
  (void)lost_rank;
}

TEST_F(registry, a_change_of_the_specs_schedule_names_it) {
  nodes(2, 4);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("sched", 50, "{min: 1, max: 2, initial: 2}", "1",
                                        "schedule:\n  - {at_step: 10, migrate: 0}\n"
                                        "  - {at_step: 30, workers: 1}\n"));
  decide(reg);
  auto& job = *reg.find(id);
  reg.part_placed(job, false, 1, job.alloc().shard_at.at(0));
  const std::uint32_t two[] = {0, 1}, one[] = {0}, s01[] = {0, 1}, s1[] = {1};
  reg.layout(job, two, s01);
  reg.layout(job, two, s1);
  reg.layout(job, one, s1);
  const auto h = history(job);
  EXPECT_NE(h.find("job 1: shard 1 placed on '"), std::string::npos) << h;
  EXPECT_NE(h.find("' (cause: the spec's schedule)\n"), std::string::npos) << h;
  EXPECT_EQ(occurrences(h, "(cause: the spec's schedule)"), 4) << h;
  EXPECT_EQ(occurrences(h, "failure"), 0) << "a worker the schedule sent away did not die: " << h;
}

TEST_F(registry, status_shows_placement_aggregation_and_the_models_view) {
  nodes(1, 4);
  use("coach");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("all-here", 10, "2", "1"));
  decide(reg);
  auto& job = *reg.find(id);
  epoch_report e;
  e.epoch = 0;
  e.seconds = 2;
  e.samples = 1000;
  e.test_accuracy = 0.5;
  e.workers = 2;
  e.shards = 1;
  reg.epoch(job, e, *holder->model());
  wall.advance(seconds(3));
  auto s = reg.snapshot(job, holder->model().get(), holder->name());
  EXPECT_EQ(s.placement, "dltap");
  EXPECT_DOUBLE_EQ(s.aggregation_degree, 1.0) << "one node: every byte stays there";
  EXPECT_DOUBLE_EQ(s.seconds, 3.0);
  EXPECT_EQ(s.epochs_done, 1u);
  EXPECT_EQ(s.epoch_samples, std::vector<std::uint64_t>{1000});
  const auto model = nlohmann::json::parse(s.model_json, nullptr, false);
  ASSERT_TRUE(model.is_object()) << s.model_json;
  EXPECT_EQ(model["model"], "all-here") << s.model_json;
  EXPECT_TRUE(model.contains("theta")) << s.model_json;
  EXPECT_EQ(model["policy"], "coach") << s.model_json;
  EXPECT_EQ(model["workers"], s.workers) << s.model_json;
  auto epochs = store->epochs(id);
  ASSERT_TRUE(epochs);
  ASSERT_EQ(epochs->size(), 1u);
  EXPECT_DOUBLE_EQ((*epochs)[0].seconds, 2.0);
}

TEST_F(registry, cancel_and_running_job_say_why_not) {
  nodes(1, 1);  // one CPU: no room for a worker and a shard
  use("fifo");
  auto reg = make();
  EXPECT_EQ(reg.cancel(9).error().message, "no job 9");
  EXPECT_EQ(reg.running_job(9).error().code, errc::not_found);
  auto spec = parse_job_spec(spec_yaml("two", 5, "1", "1"), "j", "/");
  auto rec = reg.admit(*spec, {"", "j", "/", 0, 0});
  ASSERT_FALSE(rec) << "a worker and a shard need 2 CPUs";
  nodes(1, 2);
  const auto id = submit(reg, spec_yaml("two", 5, "1", "1"));
  EXPECT_EQ(reg.running_job(id).error().message,
            "job 1 is waiting for resources; it has no workers");
  auto o = reg.decide(*holder, *exec, nullptr);
  ASSERT_EQ(o.launches.size(), 1u);
  reg.begin_run(*reg.find(id), o.launches[0].workers, o.launches[0].shards, false);
  EXPECT_EQ(reg.running_job(id).error().message, "job 1 is still starting; try again in a moment");
  reg.started(*reg.find(id));
  EXPECT_TRUE(reg.running_job(id));
  ASSERT_TRUE(reg.cancel(id));
  reg.end(*reg.find(id), job_state::cancelled, coach::error{errc::cancelled, "cancelled"});
  EXPECT_EQ(reg.cancel(id).error().message, "job 1 already cancelled");
}

}  // namespace
}  // namespace coach::scheduler

namespace coach::scheduler {
namespace {

TEST_F(registry, a_long_jobs_epochs_do_not_push_its_start_out_of_its_history) {
  nodes(1, 4);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("long", 5000, "1", "1"));
  decide(reg);
  auto& job = *reg.find(id);
  end_epochs(reg, job, *holder->model(), 0, 2999);
  const auto all = reg.events(job, 0);
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front().text,
            coach::format("job {} 'long' submitted (1 worker(s), 1 shard(s) asked)", id));
  std::size_t epochs = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    epochs += all[i].text.find(": epoch ") != std::string::npos;
    if (i > 0) {
      EXPECT_LT(all[i - 1].seq, all[i].seq) << "in order";
    }
  }
  EXPECT_EQ(epochs, job_log::max_epoch_events) << "the latest epochs only";
  EXPECT_NE(all.back().text.find(": epoch 3000/5000: "), std::string::npos) << all.back().text;
  // A follower asking after the last one it has gets nothing new.
  EXPECT_TRUE(reg.events(job, all.back().seq).empty());
  EXPECT_EQ(reg.events(job, all[all.size() - 2].seq).size(), 1u);
}

}  // namespace
}  // namespace coach::scheduler

namespace coach::scheduler {
namespace {

TEST_F(registry, a_finished_run_shows_its_final_figures_and_unplaced_parts_keep_their_index) {
  nodes(1, 4);
  use("fifo");
  auto reg = make();
  const auto id = submit(reg, spec_yaml("fin", 5, "1", "1"));
  decide(reg);
  auto& job = *reg.find(id);
  ASSERT_EQ(job.status().worker_nodes.size(), 1u);
  const auto first = job.status().worker_nodes[0];
  EXPECT_EQ(first, table.name(job.alloc().worker_at.at(0)));
  reg.part_unplaced(job, true);
  EXPECT_EQ(job.status().worker_nodes, (std::vector<std::string>{first, "(not started)"}));
  EXPECT_EQ(job.status().shard_nodes.size(), 1u) << "the workers' list only";
  job_result r;
  r.test_accuracy = std::nan("");
  r.epochs.resize(2);
  r.changes.resize(1);
  reg.finished(job, r);
  EXPECT_TRUE(std::isnan(job.status().test_accuracy)) << "no accuracy measured";
  EXPECT_EQ(job.status().changes.size(), 1u);
  EXPECT_EQ(job.status().epochs_done, 2u);
  r.test_accuracy = 0.75;
  r.epochs.resize(5);
  reg.finished(job, r);
  EXPECT_EQ(job.status().test_accuracy, 0.75);
  EXPECT_EQ(job.status().epochs_done, 5u);
  r.epochs.resize(1);
  reg.finished(job, r);
  EXPECT_EQ(job.status().epochs_done, 5u) << "never fewer than it had";
}

}  // namespace
}  // namespace coach::scheduler
