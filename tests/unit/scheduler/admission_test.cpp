// scheduler admission: a job taken in against the cluster, or refused saying what it needs, and
// why a waiting job waits — rules only, on a cluster view made by hand.

#include "scheduler/admission.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace coach::scheduler {
namespace {

std::string spec_yaml(const std::string& workers, const std::string& shards,
                      const std::string& extra = "") {
  return "name: adm\n"
         "dataset: {format: csv, path: digits.csv, test_fraction: 0.2}\n"
         "model: {type: mlp, hidden: [64], activation: relu}\n"
         "optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9}\n"
         "batch_size: 32\nepochs: 7\nworkers: " +
         workers + "\nshards: " + shards + "\nbackend: cpu\n" + extra;
}

/// `n` nodes of `cpus` CPUs and `gpus` GPUs, `free_cpus` of them free on each.
cluster_view cluster(int n, double cpus, double free_cpus, int gpus = 0) {
  cluster_view v;
  for (int i = 1; i <= n; ++i)
    v.nodes.push_back({std::uint32_t(i), {gpus, cpus, 0}, {gpus, free_cpus, 0}});
  return v;
}

struct admitted {
  result<job_record> rec;
  std::string log;
};

admitted admit_on(const cluster_view& view, const std::string& yaml, std::uint32_t workers = 0,
                  std::uint32_t shards = 0) {
  auto spec = parse_job_spec(yaml, "job.yaml", "/tmp");
  EXPECT_TRUE(spec) << spec.error().message;
  std::string log;
  auto rec = admit(*spec, {yaml, "job.yaml", "/tmp", workers, shards}, view, 42,
                   [&](const std::string& line) { log += line + "\n"; });
  return {std::move(rec), log};
}

TEST(admission, a_job_that_fits_is_recorded_as_asked) {
  const auto a = admit_on(cluster(2, 4, 4), spec_yaml("{min: 1, max: 4, initial: 2}", "1"));
  ASSERT_TRUE(a.rec) << a.rec.error().message;
  EXPECT_EQ(a.rec->name, "adm");
  EXPECT_EQ(a.rec->model, "adm");
  EXPECT_EQ(a.rec->submitted, 42.0);
  EXPECT_EQ(a.rec->state_since, 42.0);
  EXPECT_TRUE(a.rec->elastic);
  EXPECT_EQ(a.rec->min_workers, 1);
  EXPECT_EQ(a.rec->max_workers, 4);
  EXPECT_EQ(a.rec->requested_workers, 2);
  EXPECT_EQ(a.rec->requested_shards, 1);
  EXPECT_EQ(a.rec->epochs_total, 7);
  EXPECT_EQ(a.log, "");
  const auto three = admit_on(cluster(2, 4, 4), spec_yaml("{min: 1, max: 4, initial: 2}", "1"), 3);
  ASSERT_TRUE(three.rec);
  EXPECT_EQ(three.rec->requested_workers, 3) << "--workers 3";
}

TEST(admission, counts_outside_the_specs_ranges_are_refused) {
  const auto a = admit_on(cluster(2, 4, 4), spec_yaml("{min: 1, max: 3, initial: 1}", "1"), 5);
  ASSERT_FALSE(a.rec);
  EXPECT_EQ(a.rec.error().code, errc::invalid_argument);
  EXPECT_EQ(a.rec.error().message, "--workers 5 is outside the job's workers range [1, 3]");
  const auto s = admit_on(cluster(2, 4, 4), spec_yaml("1", "{min: 1, max: 2, initial: 1}"), 0, 3);
  ASSERT_FALSE(s.rec);
  EXPECT_EQ(s.rec.error().message, "--shards 3 is outside the job's shards range [1, 2]");
}

TEST(admission, a_job_whose_least_does_not_fit_the_whole_cluster_is_refused_saying_why) {
  const auto none = admit_on(cluster_view{}, spec_yaml("1", "1"));
  ASSERT_FALSE(none.rec);
  EXPECT_EQ(none.rec.error().code, errc::resource_exhausted);
  EXPECT_EQ(none.rec.error().message, "no live node to run job 'adm'");
  // Busy nodes do not count: the cluster is taken empty.
  const auto big = admit_on(cluster(1, 2, 0), spec_yaml("{min: 2, max: 4, initial: 2}", "1"));
  ASSERT_FALSE(big.rec);
  EXPECT_EQ(big.rec.error().message,
            "job 'adm' needs at least 2 worker(s) and 1 shard(s) (1 CPU each, 0 GPU(s) per "
            "worker); the live nodes have 2 CPU(s) and 0 GPU(s) in all");
  const auto gpus = admit_on(cluster(2, 8, 8, 1), spec_yaml("1", "1", "gpus_per_worker: 2\n"));
  ASSERT_FALSE(gpus.rec);
  EXPECT_EQ(gpus.rec.error().message,
            "job 'adm' needs 2 free GPU(s) per worker and no live node has them");
  const auto busy = admit_on(cluster(1, 2, 0), spec_yaml("1", "1"));
  EXPECT_TRUE(busy.rec) << "its least fits once the node's parts leave";
}

TEST(admission, a_request_beyond_the_cluster_asks_for_the_most_that_fits) {
  const auto a = admit_on(cluster(1, 4, 4), spec_yaml("{min: 1, max: 8, initial: 6}", "2"));
  ASSERT_TRUE(a.rec) << a.rec.error().message;
  EXPECT_EQ(a.rec->requested_workers, 2);
  EXPECT_EQ(a.rec->requested_shards, 2);
  EXPECT_EQ(a.log,
            "job 'adm' asks for 6 worker(s) and 2 shard(s), more than the cluster has; it asks "
            "for 2 and 2\n");
}

TEST(admission, a_waiting_job_says_what_it_needs_against_what_is_free) {
  const std::map<std::uint64_t, registered_job> none;
  const registered_job job;  // 1 worker and 1 shard, no GPU
  EXPECT_EQ(why_waiting(job, cluster_view{}, none), "no live node to run on");
  EXPECT_EQ(why_waiting(job, cluster(1, 4, 1.04), none),
            "needs 2 CPUs (1 worker(s) and 1 shard(s) at least), 1 free of 4: Coach's jobs hold 3 "
            "(a CPU per worker or shard); it starts when they end, or coach-node --cpus N "
            "advertises more");
  EXPECT_EQ(why_waiting(job, cluster(2, 4, 4), none), "starts at the scheduler's next decision");
  EXPECT_EQ(free_cpus_shown(1.04), 1.0);
  EXPECT_EQ(free_cpus_shown(-0.5), 0.0) << "over-committed";
}

TEST(admission, a_job_held_back_by_other_programs_cpus_names_the_accounting_and_its_flag) {
  const std::map<std::uint64_t, registered_job> none;
  const registered_job job;  // 1 worker and 1 shard: 2 CPUs
  // 2 nodes of 4 CPUs: other programs keep 3.5 busy (--cpu-accounting measured), Coach's jobs
  // hold 3; 1.5 are free.
  auto view = cluster(2, 4, 0);
  view.nodes[0].free.cpus = 1.5;
  view.nodes[1].free.cpus = -0.5;  // over-committed: counts as 0
  EXPECT_EQ(why_waiting(job, view, none, 3.5),
            "needs 2 CPUs (1 worker(s) and 1 shard(s) at least), 1.5 free of 8: Coach's jobs hold "
            "3 (a CPU per worker or shard), other programs keep 3.5 busy (--cpu-accounting "
            "measured, the default; coach-node --cpu-accounting reserved counts only Coach's "
            "jobs)");
}

TEST(admission, parts_cost_a_cpu_and_a_worker_its_gpus) {
  job_record r;
  r.gpus_per_worker = 2;
  EXPECT_EQ(worker_cost(r), (resources{2, 1.0, 0}));
  EXPECT_EQ(shard_cost(r), (resources{0, 1.0, 0}));
}

}  // namespace
}  // namespace coach::scheduler
