// scheduler::executor decides the same live and in the simulator. The cluster scheduler
// rebuilds its pool at every decision from its node table (heartbeats) less what it reserved
// for the jobs' parts; coach-sim keeps one pool and takes and gives as the executor places. For
// the same nodes and the same policy actions, both must put every part on the same node, with
// every placement — else the simulator would not predict the cluster.

#include "scheduler/executor.hpp"

#include <gtest/gtest.h>

#include <map>

#include "scheduler/node_table.hpp"

namespace coach::scheduler {
namespace {

constexpr int node_count = 6;
const resources node_total{4, 8, 64ull << 30};
const resources per_worker{1, 1, 0};
const resources per_shard{0, 1, 0};

struct job {
  std::uint64_t id;
  int max_workers, max_shards;
  job_state state = job_state::queued;
  std::vector<std::uint32_t> wn, sn;

  job_view view() const {
    job_view v;
    v.id = id;
    v.state = state;
    v.min_workers = 1;
    v.max_workers = max_workers;
    v.requested_workers = max_workers;
    v.min_shards = 1;
    v.max_shards = max_shards;
    v.requested_shards = max_shards;
    v.per_worker = per_worker;
    v.per_shard = per_shard;
    v.workers = int(wn.size());
    v.shards = int(sn.size());
    v.worker_nodes = wn;
    v.shard_nodes = sn;
    return v;
  }
};

/// The live side: heartbeats into a node table, a pool rebuilt per decision from its view less
/// the jobs' reservations (as actors/cluster_scheduler does).
struct live_side {
  manual_clock clock;
  node_table nodes{clock, seconds(5)};
  std::vector<job> jobs;

  live_side() {
    for (int n = 0; n < node_count; ++n) {
      node_report r;
      r.host = std::uint32_t(n);
      r.name = "n" + std::to_string(n);  // by name = by id, as the simulator orders them
      r.address = "tcp://127.0.0.1:" + std::to_string(7000 + n);
      r.resources.cpus_total = std::uint32_t(node_total.cpus);
      r.resources.cpus_free = r.resources.cpus_total;
      r.resources.memory_total = node_total.memory;
      r.resources.memory_free = node_total.memory;
      for (int g = 0; g < node_total.gpus; ++g) {
        r.resources.gpus_total.push_back(g);
        r.resources.gpus_free.push_back(g);
      }
      nodes.heartbeat(std::move(r));
    }
  }
  resource_pool pool() const {
    std::map<std::uint32_t, resources> reserved;
    auto add = [&](std::uint32_t h, const resources& r) {
      auto& x = reserved[h];
      x.gpus += r.gpus;
      x.cpus += r.cpus;
      x.memory += r.memory;
    };
    for (const auto& j : jobs) {
      for (auto h : j.wn) add(h, per_worker);
      for (auto h : j.sn) add(h, per_shard);
    }
    return resource_pool(nodes.view(reserved));
  }
};

/// The simulator's side: one pool for the whole run.
struct sim_side {
  resource_pool pool_;
  std::vector<job> jobs;
  sim_side() {
    for (int n = 0; n < node_count; ++n) pool_.add_node(std::uint32_t(n), node_total, node_total);
  }
};

void suspend(resource_pool* pool, job& j) {
  if (pool) {
    for (auto h : j.wn) pool->give(h, per_worker);
    for (auto h : j.sn) pool->give(h, per_shard);
  }
  j.wn.clear();
  j.sn.clear();
  j.state = job_state::suspended;
}

TEST(executor, places_every_action_the_same_live_and_in_the_simulator_with_each_placement) {
  const std::vector<job> initial{{1, 8, 4}, {2, 6, 3}, {3, 6, 2}};
  // A script of a policy's actions: starts, growth beside the parts, shrinking, a suspension
  // and a resumption into the holes it left.
  const std::vector<action> script{
      {action::kind_type::start, 1, 3, 2},   {action::kind_type::start, 2, 2, 1},
      {action::kind_type::resize, 1, 7, 3},  {action::kind_type::start, 3, 4, 2},
      {action::kind_type::suspend, 2, 0, 0}, {action::kind_type::resize, 3, 6, 2},
      {action::kind_type::resize, 1, 2, 1},  {action::kind_type::start, 2, 5, 3},
  };
  for (auto name : placement_names()) {
    SCOPED_TRACE(std::string(name));
    auto exec = executor::make({std::string(name), 9});
    ASSERT_TRUE(exec) << exec.error().to_string();
    live_side live;
    sim_side sim;
    live.jobs = sim.jobs = initial;
    for (std::size_t step = 0; step < script.size(); ++step) {
      const auto& a = script[step];
      SCOPED_TRACE(to_string(a));
      auto& lj = live.jobs[a.job - 1];
      auto& sj = sim.jobs[a.job - 1];
      if (a.kind == action::kind_type::suspend) {
        suspend(nullptr, lj);
        suspend(&sim.pool_, sj);
      } else {
        auto pool = live.pool();
        auto l = exec->apply(pool, lj.view(), a, {}, lj.wn, lj.sn);
        auto s = exec->apply(sim.pool_, sj.view(), a, {}, sj.wn, sj.sn);
        ASSERT_TRUE(l) << l.error().to_string();
        ASSERT_TRUE(s) << s.error().to_string();
        EXPECT_EQ(*l, *s) << "the same placement placed it";
        lj.state = sj.state = job_state::running;
      }
      for (std::size_t j = 0; j < initial.size(); ++j) {
        EXPECT_EQ(live.jobs[j].wn, sim.jobs[j].wn) << "workers of job " << j + 1;
        EXPECT_EQ(live.jobs[j].sn, sim.jobs[j].sn) << "shards of job " << j + 1;
      }
      // And what is left free is the same node by node.
      const auto rebuilt = live.pool();
      for (int n = 0; n < node_count; ++n) {
        EXPECT_EQ(rebuilt.free(std::uint32_t(n)).gpus, sim.pool_.free(std::uint32_t(n)).gpus);
        EXPECT_DOUBLE_EQ(rebuilt.free(std::uint32_t(n)).cpus,
                         sim.pool_.free(std::uint32_t(n)).cpus);
      }
    }
    // The script did place something everywhere it said.
    EXPECT_EQ(live.jobs[0].wn.size(), 2u);
    EXPECT_EQ(live.jobs[1].wn.size(), 5u);
    EXPECT_EQ(live.jobs[2].wn.size(), 6u);
  }
}

}  // namespace
}  // namespace coach::scheduler
