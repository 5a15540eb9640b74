// scheduler::placement and scheduler::executor: one contract suite that every placement passes
// (never over-commits a node, places every part or refuses with the reason and takes nothing,
// deterministic), each placement's own rule, dltap's co-location, and the executor's fallback
// to best fit.

#include "scheduler/placement.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>

#include "scheduler/executor.hpp"

namespace coach::scheduler {
namespace {

::testing::AssertionResult has(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

resource_pool nodes(int n, int gpus, double cpus, std::uint32_t first_id = 100) {
  resource_pool pool;
  for (int i = 0; i < n; ++i)
    pool.add_node(first_id + std::uint32_t(i), {gpus, cpus, 0}, {gpus, cpus, 0});
  return pool;
}

placement_request job(std::uint64_t id, int workers, int shards, int gpus_per_worker = 0) {
  placement_request r;
  r.job = id;
  r.per_worker = {gpus_per_worker, 1.0, 0};
  r.per_shard = {0, 1.0, 0};
  r.add_workers = workers;
  r.add_shards = shards;
  return r;
}

std::unique_ptr<placement> make(std::string_view name) {
  auto p = make_placement(name, 7);
  EXPECT_TRUE(p.has_value());
  return std::move(*p);
}

class every_placement : public ::testing::TestWithParam<std::string_view> {};

TEST_P(every_placement, places_every_part_within_what_each_node_has) {
  auto p = make(GetParam());
  std::mt19937_64 rng(3);
  for (int round = 0; round < 200; ++round) {
    const int n = 1 + int(rng() % 6);
    resource_pool pool;
    std::map<std::uint32_t, resources> total;
    for (int i = 0; i < n; ++i) {
      const resources t{int(rng() % 5), double(1 + rng() % 6), 0};
      const resources f{int(rng() % (t.gpus + 1)), double(rng() % (int(t.cpus) + 1)), 0};
      pool.add_node(std::uint32_t(40 + 3 * i), t, f);
      total[std::uint32_t(40 + 3 * i)] = f;
    }
    const auto before = pool.view();
    auto r = job(round, int(rng() % 5), int(rng() % 4), int(rng() % 3));
    auto placed = p->place(pool, r);
    if (!placed) {
      // Refused: the reason names the part, and nothing was taken.
      EXPECT_EQ(placed.error().code, errc::resource_exhausted);
      EXPECT_TRUE(has(placed.error().message, "fits on no node"));
      const auto after = pool.view();
      for (std::size_t i = 0; i < after.nodes.size(); ++i)
        EXPECT_EQ(after.nodes[i].free, before.nodes[i].free);
      // And best fit, which packs as tightly as any, agrees it does not fit.
      resource_pool probe(before);
      std::vector<std::uint32_t> w, s;
      if (GetParam() == "best-fit" || r.per_worker.gpus == 0)
        EXPECT_FALSE(probe.take_all(r.per_worker, r.add_workers, r.per_shard, r.add_shards, w, s))
            << GetParam() << " refused what best fit places, round " << round;
      continue;
    }
    ASSERT_EQ(int(placed->workers.size()), r.add_workers);
    ASSERT_EQ(int(placed->shards.size()), r.add_shards);
    std::map<std::uint32_t, resources> used;
    for (auto id : placed->workers) {
      used[id].gpus += r.per_worker.gpus;
      used[id].cpus += r.per_worker.cpus;
    }
    for (auto id : placed->shards) used[id].cpus += r.per_shard.cpus;
    for (const auto& [id, u] : used) {
      ASSERT_TRUE(total.contains(id)) << "placed on a node that is not in the pool";
      EXPECT_LE(u.gpus, total[id].gpus) << GetParam() << " over-commits node " << id;
      EXPECT_LE(u.cpus, total[id].cpus + 1e-9) << GetParam() << " over-commits node " << id;
      EXPECT_EQ(pool.free(id).gpus, total[id].gpus - u.gpus) << "took what it placed";
    }
  }
}

TEST_P(every_placement, is_deterministic) {
  auto p = make(GetParam());
  for (std::uint64_t id = 1; id <= 20; ++id) {
    auto a = nodes(5, 2, 4), b = nodes(5, 2, 4);
    auto x = p->place(a, job(id, 3, 2, 1));
    auto y = p->place(b, job(id, 3, 2, 1));
    ASSERT_TRUE(x && y);
    EXPECT_EQ(x->workers, y->workers);
    EXPECT_EQ(x->shards, y->shards);
  }
}

TEST_P(every_placement, a_rescale_places_only_the_new_parts) {
  auto p = make(GetParam());
  auto pool = nodes(4, 0, 4);
  auto first = p->place(pool, job(1, 2, 1));
  ASSERT_TRUE(first);
  auto more = job(1, 2, 1);
  more.worker_nodes = first->workers;
  more.shard_nodes = first->shards;
  auto second = p->place(pool, more);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->workers.size(), 2u);
  EXPECT_EQ(second->shards.size(), 1u);
  double free = 0;
  for (std::size_t i = 0; i < pool.size(); ++i) free += pool.free_at(i).cpus;
  EXPECT_DOUBLE_EQ(free, 16.0 - 6.0);
}

INSTANTIATE_TEST_SUITE_P(placements, every_placement,
                         ::testing::Values("spread", "best-fit", "random", "dltap"),
                         [](const auto& info) {
                           std::string s(info.param);
                           for (auto& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

TEST(placement, unknown_names_are_refused_with_the_known_ones) {
  auto p = make_placement("nearest");
  ASSERT_FALSE(p);
  EXPECT_TRUE(has(p.error().message, "unknown placement 'nearest'"));
  EXPECT_TRUE(has(p.error().message, "spread, best-fit, random, dltap"));
}

TEST(placement, spread_puts_worker_r_on_the_rth_node_and_shards_after) {
  auto pool = nodes(4, 0, 8);
  auto placed = make("spread")->place(pool, job(1, 3, 2));
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed->workers, (std::vector<std::uint32_t>{100, 101, 102}));
  EXPECT_EQ(placed->shards, (std::vector<std::uint32_t>{103, 100}));
}

TEST(placement, best_fit_packs_the_first_node_that_fits) {
  auto pool = nodes(3, 0, 4);
  auto placed = make("best-fit")->place(pool, job(1, 3, 2));
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed->workers, (std::vector<std::uint32_t>{100, 100, 100}));
  EXPECT_EQ(placed->shards, (std::vector<std::uint32_t>{100, 101}));
}

TEST(placement, random_depends_on_the_job_and_uses_several_nodes) {
  auto p = make("random");
  std::set<std::uint32_t> seen;
  for (std::uint64_t id = 1; id <= 10; ++id) {
    auto pool = nodes(4, 0, 8);
    auto placed = p->place(pool, job(id, 2, 2));
    ASSERT_TRUE(placed);
    seen.insert(placed->workers.begin(), placed->workers.end());
  }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(placement, dltap_puts_a_job_that_fits_one_node_on_one_node) {
  auto pool = nodes(4, 0, 6);
  pool.take_on(100, {0, 1, 0});  // a has 5 free, the others 6: a holds 4 parts most tightly
  auto placed = make("dltap")->place(pool, job(1, 2, 2));
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed->workers, (std::vector<std::uint32_t>{100, 100}));
  EXPECT_EQ(placed->shards, (std::vector<std::uint32_t>{100, 100}));
  EXPECT_DOUBLE_EQ(aggregation_degree(placed->workers, placed->shards), 1.0);
}

TEST(placement, dltap_cuts_the_cross_host_share_of_spread_for_three_jobs) {
  // The live experiment's shape: 4 nodes of 6 CPUs, jobs of 2, 3 and 4 workers, 2 shards each.
  double spread_share = 0, dltap_share = 0;
  for (auto name : {"spread", "dltap"}) {
    auto pool = nodes(4, 0, 6);
    auto p = make(name);
    double share = 0;
    for (int w : {2, 3, 4}) {
      auto placed = p->place(pool, job(std::uint64_t(w), w, 2));
      ASSERT_TRUE(placed) << name;
      share += cross_host_share(placed->workers, placed->shards);
    }
    (std::string(name) == "spread" ? spread_share : dltap_share) = share;
  }
  EXPECT_GT(spread_share, 0.0);
  EXPECT_LE(dltap_share, 0.6 * spread_share);
  EXPECT_DOUBLE_EQ(dltap_share, 0.0);  // every job fits one node here
}

TEST(placement, dltap_adds_a_worker_beside_the_shard_with_the_most_bytes) {
  auto pool = nodes(3, 0, 4);
  auto r = job(1, 1, 0);
  const std::vector<std::uint32_t> workers{100}, shards{101, 102};
  const std::vector<double> bytes{1.0, 3.0};
  r.worker_nodes = workers;
  r.shard_nodes = shards;
  r.shard_bytes = bytes;
  auto placed = make("dltap")->place(pool, r);
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed->workers, (std::vector<std::uint32_t>{102}));
  // And a new shard goes where most workers are.
  auto s = job(1, 0, 1);
  const std::vector<std::uint32_t> w3{100, 101, 101};
  s.worker_nodes = w3;
  placed = make("dltap")->place(pool, s);
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed->shards, (std::vector<std::uint32_t>{101}));
}

TEST(placement, dltap_spills_to_the_node_with_the_most_room_when_one_is_full) {
  auto pool = nodes(3, 0, 3);
  pool.take_on(102, {0, 1, 0});
  auto placed = make("dltap")->place(pool, job(1, 3, 2));
  ASSERT_TRUE(placed);
  // Interleaved: a shard and two workers fill the first node of the most room, the other
  // shard and its worker go to the next one; half the bytes stay on one host (all shards on
  // the first node would keep 2 of 6 pairs together).
  EXPECT_EQ(placed->shards, (std::vector<std::uint32_t>{100, 101}));
  EXPECT_EQ(placed->workers, (std::vector<std::uint32_t>{100, 100, 101}));
  EXPECT_DOUBLE_EQ(aggregation_degree(placed->workers, placed->shards), 0.5);
}

TEST(placement, dltap_pairs_shards_with_workers_on_nodes_of_two_cpus) {
  // The integration test's cluster on a 2-core machine: 4 nodes that advertise 2 CPUs each.
  double share[2];
  for (int k = 0; k < 2; ++k) {
    auto pool = nodes(4, 0, 2);
    auto placed = make(k == 0 ? "spread" : "dltap")->place(pool, job(1, 2, 2));
    ASSERT_TRUE(placed);
    share[k] = cross_host_share(placed->workers, placed->shards);
  }
  EXPECT_DOUBLE_EQ(share[0], 4.0);
  EXPECT_DOUBLE_EQ(share[1], 2.0);
}

TEST(placement, the_same_job_lands_on_the_same_nodes_whatever_fraction_of_a_cpu_is_free) {
  // Issue 42: what other programs use is measured by tenths and moves between heartbeats; nodes
  // that hold as many parts as before get the job where it went before, with every placement.
  for (const auto* name : {"spread", "dltap", "best-fit", "random"}) {
    resource_pool even, noisy;
    const double free[] = {2.0, 2.9, 2.4, 2.7};  // 2 parts each, as 2.0 are
    for (int i = 0; i < 4; ++i) {
      even.add_node(100 + std::uint32_t(i), {0, 3, 0}, {0, 2.0, 0});
      noisy.add_node(100 + std::uint32_t(i), {0, 3, 0}, {0, free[i], 0});
    }
    auto a = make(name)->place(even, job(5, 4, 2));
    auto b = make(name)->place(noisy, job(5, 4, 2));
    ASSERT_TRUE(a && b) << name;
    EXPECT_EQ(a->workers, b->workers) << name;
    EXPECT_EQ(a->shards, b->shards) << name;
  }
}

TEST(placement, aggregation_degree_and_cross_host_share) {
  const std::vector<std::uint32_t> w{1, 2}, s{1, 3};
  EXPECT_DOUBLE_EQ(cross_host_share(w, s), 3.0);  // (w1,s3), (w2,s1), (w2,s3)
  EXPECT_DOUBLE_EQ(aggregation_degree(w, s), 0.25);
  const std::vector<double> bytes{3.0, 1.0};
  EXPECT_DOUBLE_EQ(cross_host_share(w, s, bytes), 5.0);
  EXPECT_DOUBLE_EQ(aggregation_degree(w, s, bytes), 1.0 - 5.0 / 8.0);
  EXPECT_DOUBLE_EQ(aggregation_degree({}, {}), 0.0);
}

// --- executor --------------------------------------------------------------------------------

job_view running(std::uint64_t id, std::span<const std::uint32_t> wn,
                 std::span<const std::uint32_t> sn, int gpus = 0) {
  job_view v;
  v.id = id;
  v.state = wn.empty() ? job_state::queued : job_state::running;
  v.min_workers = 1;
  v.max_workers = 8;
  v.requested_workers = 2;
  v.min_shards = 1;
  v.max_shards = 8;
  v.requested_shards = 1;
  v.per_worker = {gpus, 1, 0};
  v.per_shard = {0, 1, 0};
  v.workers = int(wn.size());
  v.shards = int(sn.size());
  v.worker_nodes = wn;
  v.shard_nodes = sn;
  return v;
}

TEST(executor, starts_a_job_with_its_own_placement_or_the_default) {
  auto ex = executor::make({"spread", 1});
  ASSERT_TRUE(ex);
  EXPECT_EQ(ex->placement_name(), "spread");
  for (std::string_view name : {"", "dltap"}) {
    auto pool = nodes(4, 0, 8);
    std::vector<std::uint32_t> wn, sn;
    auto v = running(1, wn, sn);
    auto used = ex->apply(pool, v, {action::kind_type::start, 1, 2, 2}, name, wn, sn);
    ASSERT_TRUE(used);
    if (name.empty()) {
      EXPECT_EQ(*used, "spread");
      EXPECT_EQ(wn, (std::vector<std::uint32_t>{100, 101}));
    } else {
      EXPECT_EQ(*used, "dltap");
      EXPECT_EQ(wn, (std::vector<std::uint32_t>{100, 100}));
      EXPECT_EQ(sn, (std::vector<std::uint32_t>{100, 100}));
    }
  }
  auto bad = executor::make({"closest", 1});
  ASSERT_FALSE(bad);
  EXPECT_TRUE(has(bad.error().message, "unknown placement 'closest'"));
}

TEST(executor, falls_back_to_best_fit_where_the_placement_cannot_place_the_change) {
  // Node a: 2 GPUs, 1 CPU; node b: no GPU, 1 CPU. dltap places the shard first, on the node
  // with the most room (a), and then the 2-GPU worker fits nowhere; best fit (the policy's
  // rule: workers first) places the worker on a and the shard on b.
  auto ex = executor::make({"dltap", 1});
  ASSERT_TRUE(ex);
  resource_pool pool;
  pool.add_node(1, {2, 1, 0}, {2, 1, 0});
  pool.add_node(2, {0, 1, 0}, {0, 1, 0});
  {
    resource_pool probe = pool;
    auto alone = make("dltap")->place(probe, job(1, 1, 1, 2));
    ASSERT_FALSE(alone);
    EXPECT_TRUE(has(alone.error().message, "worker 1 of 1 fits on no node"));
  }
  std::vector<std::uint32_t> wn, sn;
  auto v = running(1, wn, sn, 2);
  auto used = ex->apply(pool, v, {action::kind_type::start, 1, 1, 1}, "", wn, sn);
  ASSERT_TRUE(used) << used.error().message;
  EXPECT_EQ(*used, "best-fit");
  EXPECT_EQ(wn, (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(sn, (std::vector<std::uint32_t>{2}));
  // What fits nowhere is refused, with nothing taken.
  std::vector<std::uint32_t> wn2, sn2;
  auto v2 = running(2, wn2, sn2, 2);
  auto refused = ex->apply(pool, v2, {action::kind_type::start, 2, 1, 1}, "", wn2, sn2);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(has(refused.error().message, "does not fit the free resources"));
  EXPECT_TRUE(wn2.empty());
  EXPECT_EQ(pool.free(1).gpus, 0);
}

TEST(executor, frees_the_highest_ranks_first_and_undoes_them_when_the_growth_fails) {
  auto ex = executor::make({"dltap", 1});
  ASSERT_TRUE(ex);
  auto pool = nodes(2, 0, 3);
  std::vector<std::uint32_t> wn{100, 101, 101}, sn{100};
  for (auto n : wn) pool.take_on(n, {0, 1, 0});
  pool.take_on(100, {0, 1, 0});
  auto v = running(1, wn, sn);
  auto shrink = ex->apply(pool, v, {action::kind_type::resize, 1, 2, 1}, "", wn, sn);
  ASSERT_TRUE(shrink);
  EXPECT_EQ(wn, (std::vector<std::uint32_t>{100, 101}));
  EXPECT_DOUBLE_EQ(pool.free(101).cpus, 2.0);
  auto v2 = running(1, wn, sn);
  // One worker leaves (4 CPUs free then); 5 more shards do not fit: the worker stays.
  auto grow = ex->apply(pool, v2, {action::kind_type::resize, 1, 1, 6}, "", wn, sn);
  ASSERT_FALSE(grow);
  EXPECT_TRUE(has(grow.error().message, "does not fit the free resources"));
  EXPECT_EQ(wn, (std::vector<std::uint32_t>{100, 101}));
  EXPECT_EQ(sn, (std::vector<std::uint32_t>{100}));
  EXPECT_DOUBLE_EQ(pool.free(100).cpus, 1.0);
  EXPECT_DOUBLE_EQ(pool.free(101).cpus, 2.0);
}

TEST(executor, places_one_more_part_beside_the_job) {
  auto ex = executor::make({"dltap", 1});
  ASSERT_TRUE(ex);
  auto pool = nodes(3, 0, 4);
  const std::vector<std::uint32_t> wn{101}, sn{101};
  auto r = job(1, 0, 0);
  r.worker_nodes = wn;
  r.shard_nodes = sn;
  auto w = ex->place_one(pool, r, true, "");
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, 101u);
  EXPECT_DOUBLE_EQ(pool.free(101).cpus, 3.0);
  auto spread = ex->place_one(pool, r, true, "spread");
  ASSERT_TRUE(spread);
  EXPECT_NE(*spread, 101u);
}

}  // namespace
}  // namespace coach::scheduler
