// scheduler::policy: each policy's rule on small clusters with an injected clock, the decision
// contract on random clusters for every policy (check_decision, determinism), the factory's
// error, and the holder: a swap between decisions, even from another thread, leaves running
// jobs as they are.

#include "scheduler/policy.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "scheduler/resource_pool.hpp"

namespace coach::scheduler {
namespace {

using kind = action::kind_type;

::testing::AssertionResult has(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

std::string describe(const decision& d) {
  std::string out;
  for (const auto& a : d.actions) out += to_string(a) + "; ";
  return out.empty() ? "(no action)" : out;
}

/// A cluster and its jobs, kept consistent: running jobs hold nodes in the pool, and decisions
/// are carried out as an executor would (apply_action).
class world {
 public:
  /// `nodes` nodes of `gpus` GPUs and `cpus` CPUs each, ids 10, 11, ... (not positions).
  world(int nodes, int gpus, double cpus = 64) {
    for (int n = 0; n < nodes; ++n)
      pool_.add_node(std::uint32_t(10 + n), {gpus, cpus, 0}, {gpus, cpus, 0});
  }
  explicit world(const cluster_view& cluster) : pool_(cluster) {}

  /// Adds a queued job asking for `workers` (min..max) one-GPU workers and `shards` shards.
  job_view& add(std::uint64_t id, double submitted, int workers, int min_w, int max_w,
                int shards = 1, bool elastic = true, std::string model = "m") {
    job_view v;
    v.id = id;
    v.state = job_state::queued;
    v.submitted = v.state_since = at_seconds(submitted);
    models_.push_back(std::move(model));
    v.model = models_.back();
    v.elastic = elastic;
    v.requested_workers = workers;
    v.min_workers = min_w;
    v.max_workers = max_w;
    v.requested_shards = shards;
    v.min_shards = 1;
    v.max_shards = std::max(shards, max_w);
    v.per_worker = {1, 1, 0};
    v.per_shard = {0, 1, 0};
    v.epochs_total = 100;
    jobs_.push_back(v);
    nodes_.push_back(std::make_unique<parts>());
    return jobs_.back();
  }

  /// Starts job `id` with (w, s) at time `t` (as if a policy had decided it).
  void run(std::uint64_t id, int w, int s, double t) { apply({{kind::start, id, w, s}}, t); }

  /// Carries out `actions` at time `t`; every one must apply.
  void apply(const std::vector<action>& actions, double t) {
    for (const auto& a : actions) {
      const std::size_t i = index(a.job);
      auto& v = jobs_[i];
      auto& p = *nodes_[i];
      auto ok = apply_action(pool_, v, a, p.workers, p.shards);
      ASSERT_TRUE(ok) << ok.error().message;
      if (a.kind == kind::start || a.kind == kind::suspend) {
        v.state = a.kind == kind::start ? job_state::running : job_state::suspended;
        v.state_since = at_seconds(t);
      }
      v.workers = int(p.workers.size());
      v.shards = int(p.shards.size());
      v.worker_nodes = p.workers;
      v.shard_nodes = p.shards;
    }
  }

  decision decide(policy& p, double t) {
    const auto cluster = pool_.view();
    auto d = p.decide(cluster, jobs_, at_seconds(t));
    auto ok = check_decision(cluster, jobs_, d);
    EXPECT_TRUE(ok) << (ok ? "" : ok.error().message) << " in " << describe(d);
    return d;
  }

  /// Job `id` ends: its resources are freed and it leaves the list.
  void finish(std::uint64_t id) {
    const std::size_t i = index(id);
    if (jobs_[i].state == job_state::running) apply({{kind::suspend, id, 0, 0}}, 0);
    jobs_.erase(jobs_.begin() + std::ptrdiff_t(i));
    nodes_.erase(nodes_.begin() + std::ptrdiff_t(i));
  }

  /// Decides and carries the decision out.
  decision step(policy& p, double t) {
    auto d = decide(p, t);
    apply(d.actions, t);
    return d;
  }

  job_view& job(std::uint64_t id) { return jobs_[index(id)]; }
  std::vector<job_view>& jobs() { return jobs_; }
  cluster_view cluster() const { return pool_.view(); }
  int free_gpus() const { return pool_.free_gpus(); }

 private:
  struct parts {
    std::vector<std::uint32_t> workers, shards;
  };
  std::size_t index(std::uint64_t id) const {
    for (std::size_t i = 0; i < jobs_.size(); ++i)
      if (jobs_[i].id == id) return i;
    ADD_FAILURE() << "no job " << id;
    return 0;
  }
  resource_pool pool_;
  std::vector<job_view> jobs_;
  std::vector<std::unique_ptr<parts>> nodes_;  ///< stable: views point into them
  std::deque<std::string> models_;
};

std::unique_ptr<policy> make(std::string_view name, policy_options o = {}) {
  auto p = make_policy(name, o);
  EXPECT_TRUE(p) << name;
  return std::move(*p);
}

const action* find(const decision& d, std::uint64_t job) {
  for (const auto& a : d.actions)
    if (a.job == job) return &a;
  return nullptr;
}

// --- factory -----------------------------------------------------------------------------------

TEST(policy_factory, makes_every_named_policy) {
  ASSERT_EQ(policy_names().size(), 4u);
  EXPECT_EQ(policy_names()[0], "fifo");
  EXPECT_EQ(policy_names()[1], "elastic-fifo");
  EXPECT_EQ(policy_names()[2], "round-robin");
  EXPECT_EQ(policy_names()[3], "coach");
  for (auto name : policy_names()) EXPECT_EQ(make(name)->name(), name);
}

TEST(policy_factory, an_unknown_name_is_an_error_that_lists_the_known_ones) {
  auto p = make_policy("lifo");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, errc::invalid_argument);
  EXPECT_EQ(p.error().message,
            "unknown policy 'lifo' (known: fifo, elastic-fifo, round-robin, coach)");
}

// --- fifo --------------------------------------------------------------------------------------

TEST(fifo, starts_in_submission_order_and_the_first_that_does_not_fit_blocks) {
  world w(1, 8);
  w.add(3, 30, 2, 1, 4);  // submitted last, listed first: order comes from submission times
  w.add(1, 10, 4, 1, 8);
  w.add(2, 20, 8, 1, 8);
  auto p = make("fifo");
  const auto d = w.step(*p, 40);
  ASSERT_EQ(d.actions.size(), 1u) << describe(d);
  EXPECT_EQ(d.actions[0], (action{kind::start, 1, 4, 1}));  // at its request
  EXPECT_FALSE(d.revisit_at);
  // Job 2 (8 GPUs) waits for 4 more; job 3 (2 GPUs) would fit but may not pass it.
  EXPECT_TRUE(w.decide(*p, 50).actions.empty());
  w.finish(1);
  const auto d2 = w.step(*p, 60);
  EXPECT_NE(find(d2, 2), nullptr) << describe(d2);
}

TEST(fifo, never_touches_a_running_job_whatever_it_holds) {
  world w(1, 8);
  w.add(1, 0, 2, 1, 8);
  w.run(1, 6, 3, 0);  // grown by an elastic policy before a swap
  w.add(2, 5, 4, 1, 4);
  auto p = make("fifo");
  EXPECT_TRUE(w.decide(*p, 10).actions.empty());  // job 2 waits for the 4 GPUs job 1 has
}

// --- elastic-fifo ------------------------------------------------------------------------------

TEST(elastic_fifo, starts_the_head_with_fewer_workers_down_to_its_minimum) {
  world w(1, 8);
  w.add(1, 0, 5, 1, 5);
  w.run(1, 5, 1, 0);
  w.add(2, 1, 8, 2, 8, 4);  // asks for 8 workers and 4 shards, can run with 2
  auto p = make("elastic-fifo");
  const auto d = w.step(*p, 2);
  ASSERT_EQ(d.actions.size(), 1u) << describe(d);
  // 3 GPUs are free: 3 workers, shards in the requested proportion (4/8 · 3 = 1.5 → 2).
  EXPECT_EQ(d.actions[0], (action{kind::start, 2, 3, 2}));
}

TEST(elastic_fifo, a_job_whose_minimum_does_not_fit_blocks_the_rest) {
  world w(1, 8);
  w.add(1, 0, 6, 6, 6);
  w.run(1, 6, 1, 0);
  w.add(2, 1, 4, 3, 4);  // needs 3, 2 are free
  w.add(3, 2, 1, 1, 1);
  auto p = make("elastic-fifo");
  EXPECT_TRUE(w.decide(*p, 3).actions.empty());
}

TEST(elastic_fifo, grows_running_jobs_into_free_gpus_only_when_nobody_waits) {
  world w(2, 4);
  w.add(1, 0, 2, 1, 6);
  w.add(2, 1, 2, 1, 3);
  w.run(1, 2, 1, 0);
  w.run(2, 2, 1, 1);
  auto p = make("elastic-fifo");
  const auto d = w.step(*p, 5);
  // Oldest first: job 1 to its maximum (6), job 2 gets what is left (0 more: 8 GPUs in all).
  ASSERT_EQ(d.actions.size(), 1u) << describe(d);
  EXPECT_EQ(d.actions[0].kind, kind::resize);
  EXPECT_EQ(d.actions[0].job, 1u);
  EXPECT_EQ(d.actions[0].workers, 6);
  EXPECT_EQ(w.free_gpus(), 0);
}

TEST(elastic_fifo, growth_beyond_a_request_is_handed_back_to_a_waiting_job) {
  world w(1, 8);
  w.add(1, 0, 2, 1, 8);
  w.add(2, 1, 2, 2, 2);
  w.run(1, 6, 3, 0);  // grew beyond its request of 2
  w.run(2, 2, 1, 1);
  w.add(3, 10, 4, 2, 4);
  auto p = make("elastic-fifo");
  const auto d = w.step(*p, 11);
  // Job 1 shrinks to its request (frees 4), job 3 starts with 4: shrink listed first.
  ASSERT_EQ(d.actions.size(), 2u) << describe(d);
  EXPECT_EQ(d.actions[0].kind, kind::resize);
  EXPECT_EQ(d.actions[0].job, 1u);
  EXPECT_EQ(d.actions[0].workers, 2);
  EXPECT_EQ(d.actions[1], (action{kind::start, 3, 4, 1}));
}

TEST(elastic_fifo, a_job_that_is_not_elastic_runs_only_as_asked) {
  world w(1, 8);
  w.add(1, 0, 4, 4, 4, 1, /*elastic=*/false);
  auto p = make("elastic-fifo");
  const auto d = w.step(*p, 1);
  ASSERT_EQ(d.actions.size(), 1u);
  EXPECT_EQ(d.actions[0], (action{kind::start, 1, 4, 1}));
  EXPECT_TRUE(w.decide(*p, 2).actions.empty());  // 4 GPUs free, still not grown
}

/// The world's cluster with `cpus` CPUs taken on its first node by a program that is not Coach's
/// (node_table::view takes them off what is free, below 0 when jobs hold them).
cluster_view with_external_cpus(const world& w, double cpus) {
  auto c = w.cluster();
  c.nodes[0].free.cpus -= cpus;
  return c;
}

TEST(elastic_fifo, another_programs_cpus_shrink_the_youngest_elastic_job_first) {
  world w(1, 8, 6);
  w.add(1, 0, 2, 1, 4);
  w.add(2, 1, 2, 1, 4);
  w.run(1, 2, 1, 0);
  w.run(2, 2, 1, 1);  // 4 workers, 2 shards: the 6 CPUs held
  auto p = make("elastic-fifo");
  // 1 CPU short: job 2, the youngest, gives one worker back; job 1 keeps its two.
  auto cluster = with_external_cpus(w, 1);
  auto d = p->decide(cluster, w.jobs(), at_seconds(5));
  ASSERT_TRUE(check_decision(cluster, w.jobs(), d)) << describe(d);
  ASSERT_EQ(d.actions.size(), 1u) << describe(d);
  EXPECT_EQ(d.actions[0], (action{kind::resize, 2, 1, 1})) << describe(d);
  // 3 CPUs short: both stop at their minimum (1 CPU is still short: no job goes below it).
  cluster = with_external_cpus(w, 3);
  d = p->decide(cluster, w.jobs(), at_seconds(5));
  ASSERT_TRUE(check_decision(cluster, w.jobs(), d)) << describe(d);
  ASSERT_EQ(d.actions.size(), 2u) << describe(d);
  ASSERT_NE(find(d, 1), nullptr) << describe(d);
  ASSERT_NE(find(d, 2), nullptr) << describe(d);
  EXPECT_EQ(*find(d, 1), (action{kind::resize, 1, 1, 1})) << describe(d);
  EXPECT_EQ(*find(d, 2), (action{kind::resize, 2, 1, 1})) << describe(d);
  // The program ends: the next decision grows them back into the CPUs it freed.
  w.apply(d.actions, 5);
  const auto back = w.step(*p, 10);
  EXPECT_EQ(w.job(1).workers + w.job(2).workers, 4) << describe(back);
}

TEST(elastic_fifo, a_job_that_is_not_elastic_keeps_its_cpus_from_another_program) {
  world w(1, 8, 4);
  w.add(1, 0, 3, 3, 3, 1, /*elastic=*/false);
  w.run(1, 3, 1, 0);
  auto p = make("elastic-fifo");
  const auto cluster = with_external_cpus(w, 2);
  const auto d = p->decide(cluster, w.jobs(), at_seconds(5));
  EXPECT_TRUE(d.actions.empty()) << describe(d);
}

TEST(fifo, never_shrinks_a_job_for_another_programs_cpus) {
  world w(1, 8, 4);
  w.add(1, 0, 3, 1, 3);
  w.run(1, 3, 1, 0);
  auto p = make("fifo");
  const auto d = p->decide(with_external_cpus(w, 2), w.jobs(), at_seconds(5));
  EXPECT_TRUE(d.actions.empty()) << describe(d);
}

TEST(coach, another_programs_cpus_shrink_an_elastic_job_down_to_its_minimum) {
  world w(1, 8, 5);
  w.add(1, 0, 4, 2, 4);
  w.run(1, 4, 1, 0);
  auto p = make("coach");
  const auto cluster = with_external_cpus(w, 4);
  const auto d = p->decide(cluster, w.jobs(), at_seconds(5));
  ASSERT_TRUE(check_decision(cluster, w.jobs(), d)) << describe(d);
  ASSERT_EQ(d.actions.size(), 1u) << describe(d);
  EXPECT_EQ(d.actions[0].kind, kind::resize) << describe(d);
  EXPECT_EQ(d.actions[0].workers, 2) << describe(d);
}

// --- round-robin (injected clock) --------------------------------------------------------------

TEST(round_robin, suspends_a_job_whose_turn_is_over_only_for_a_waiting_one) {
  policy_options o;
  o.slice = seconds(600);
  auto p = make("round-robin", o);
  manual_clock clock;
  world w(1, 8);
  w.add(1, 0, 8, 8, 8);
  w.run(1, 8, 2, to_seconds(clock.now()));

  clock.set(at_seconds(300));  // nobody waits: nothing to do, nothing to revisit
  auto d = w.decide(*p, to_seconds(clock.now()));
  EXPECT_TRUE(d.actions.empty());
  EXPECT_FALSE(d.revisit_at);

  w.add(2, 350, 4, 4, 4);  // arrives; job 1's turn ends at 600
  clock.set(at_seconds(350));
  d = w.step(*p, to_seconds(clock.now()));
  EXPECT_TRUE(d.actions.empty()) << describe(d);
  ASSERT_TRUE(d.revisit_at);
  EXPECT_EQ(to_seconds(*d.revisit_at), 600);

  clock.set(*d.revisit_at);
  d = w.step(*p, to_seconds(clock.now()));
  ASSERT_EQ(d.actions.size(), 2u) << describe(d);
  EXPECT_EQ(d.actions[0], (action{kind::suspend, 1, 0, 0}));
  EXPECT_EQ(d.actions[1], (action{kind::start, 2, 4, 1}));
  EXPECT_EQ(w.job(1).state, job_state::suspended);
  // Job 1 waits now and does not fit beside job 2 (4 free of its 8): job 2's turn ends at 1200.
  ASSERT_TRUE(d.revisit_at);
  EXPECT_EQ(to_seconds(*d.revisit_at), 1200);

  clock.advance(seconds(300));  // 900: job 2's turn is not over
  EXPECT_TRUE(w.decide(*p, to_seconds(clock.now())).actions.empty());
  clock.set(at_seconds(1200));
  d = w.step(*p, to_seconds(clock.now()));
  ASSERT_EQ(d.actions.size(), 2u) << describe(d);
  EXPECT_EQ(d.actions[0], (action{kind::suspend, 2, 0, 0}));
  EXPECT_EQ(d.actions[1], (action{kind::start, 1, 8, 1}));  // resumed at its request
}

TEST(round_robin, waiting_jobs_start_in_the_order_they_began_to_wait) {
  world w(1, 4);
  w.add(1, 0, 4, 4, 4);
  w.add(2, 10, 4, 4, 4);
  w.add(3, 20, 4, 4, 4);
  auto p = make("round-robin");
  w.step(*p, 20);   // job 1 runs
  w.step(*p, 620);  // job 1 suspended at 620, job 2 runs
  EXPECT_EQ(w.job(2).state, job_state::running);
  const auto d = w.step(*p, 1220);  // job 3 waited since 20, job 1 since 620: job 3 first
  ASSERT_EQ(d.actions.size(), 2u) << describe(d);
  EXPECT_EQ(d.actions[1].job, 3u);
}

TEST(round_robin, suspends_nobody_when_that_would_not_make_room) {
  world w(1, 8);
  w.add(1, 0, 2, 2, 2);
  w.run(1, 2, 1, 0);
  w.add(2, 1, 2, 2, 2);
  w.run(2, 2, 1, 500);
  w.add(3, 5, 8, 8, 8);  // needs all 8: only job 1's turn is over at 700
  auto p = make("round-robin");
  const auto d = w.decide(*p, 700);
  EXPECT_TRUE(d.actions.empty()) << describe(d);
  ASSERT_TRUE(d.revisit_at);
  EXPECT_EQ(to_seconds(*d.revisit_at), 1100);  // when job 2's turn ends
}

// --- coach -------------------------------------------------------------------------------------

/// A model that knows two curves exactly: "fast" keeps gaining up to 16 workers, "flat"
/// saturates at about 3.
std::shared_ptr<perf_model> trained_model() {
  auto m = std::make_shared<perf_model>();
  const perf_theta fast{5, 1000, 2, 0.5, 1}, flat{50, 200, 2, 20, 1};
  std::uint64_t id = 1000;
  for (int w : {1, 2, 4, 8, 16})
    for (int p : {1, 2, 4}) {
      m->observe(id++, "fast", w, p, epoch_seconds(fast, w, p));
      m->observe(id++, "flat", w, p, epoch_seconds(flat, w, p));
    }
  return m;
}

TEST(coach, gives_gpus_where_the_model_predicts_the_largest_saving) {
  policy_options o;
  o.model = trained_model();
  auto p = make("coach", o);
  world w(2, 8);
  w.add(1, 0, 4, 1, 16, 1, true, "flat");
  w.add(2, 1, 4, 1, 16, 1, true, "fast");
  const auto d = w.step(*p, 2);
  ASSERT_EQ(d.actions.size(), 2u) << describe(d);
  const action* flat = find(d, 1);
  const action* fast = find(d, 2);
  ASSERT_TRUE(flat && fast);
  // The flat job stops near its best worker count; the fast one takes the rest.
  const perf_theta flat_curve{50, 200, 2, 20, 1};
  int flat_best = 1;
  for (int k = 1; k <= 16; ++k)
    if (epoch_seconds(flat_curve, k, best_shards(flat_curve, k, 1, 16)) <
        epoch_seconds(flat_curve, flat_best, best_shards(flat_curve, flat_best, 1, 16)))
      flat_best = k;
  EXPECT_LE(flat->workers, flat_best);
  EXPECT_GE(fast->workers, 16 - flat_best);
  EXPECT_GT(fast->workers, flat->workers);
  EXPECT_LE(fast->workers + flat->workers, 16);
  // Shards: the model's best for each job's workers.
  const auto theta = o.model->job_theta(2, "fast");
  ASSERT_TRUE(theta);
  EXPECT_EQ(fast->shards, best_shards(*theta, fast->workers, 1, 16));
  ASSERT_TRUE(d.revisit_at);  // it looks again later: the model keeps learning
}

TEST(coach, a_job_without_a_prediction_runs_at_its_request) {
  policy_options o;
  o.model = trained_model();
  auto p = make("coach", o);
  world w(1, 8);
  w.add(1, 0, 3, 1, 8, 2, true, "unknown-model");
  const auto d = w.step(*p, 1);
  ASSERT_EQ(d.actions.size(), 1u);
  EXPECT_EQ(d.actions[0], (action{kind::start, 1, 3, 2}));
  EXPECT_TRUE(w.decide(*p, 2).actions.empty());  // 5 GPUs free, but no model to justify more
}

TEST(coach, admits_a_waiting_job_by_taking_the_cheapest_workers) {
  policy_options o;
  o.model = trained_model();
  auto p = make("coach", o);
  world w(1, 8);
  w.add(1, 0, 4, 1, 8, 1, true, "fast");
  w.add(2, 1, 4, 1, 8, 1, true, "flat");
  w.run(1, 5, 2, 0);
  w.run(2, 3, 1, 0);
  w.add(3, 10, 2, 1, 8, 1, true, "fast");
  const auto d = w.step(*p, 11);
  const action* started = find(d, 3);
  ASSERT_NE(started, nullptr) << describe(d);
  EXPECT_EQ(started->kind, kind::start);
  // Somebody gave a worker up, and the waiting job got in: no job waits on a full cluster.
  EXPECT_EQ(w.job(3).state, job_state::running);
  EXPECT_EQ(w.free_gpus(), 0);
}

TEST(coach, leaves_running_jobs_alone_when_a_change_would_not_pay_for_its_pause) {
  policy_options o;
  o.model = trained_model();
  o.rescale_cost_s = 1e12;  // every pause costs more than any saving
  auto p = make("coach", o);
  world w(2, 8);
  w.add(1, 0, 2, 1, 16, 1, true, "fast");
  w.run(1, 2, 1, 0);
  EXPECT_TRUE(w.decide(*p, 1).actions.empty());
  o.rescale_cost_s = 0;
  auto eager = make("coach", o);
  const auto d = w.decide(*eager, 1);
  ASSERT_EQ(d.actions.size(), 1u);
  EXPECT_EQ(d.actions[0].kind, kind::resize);
  EXPECT_GT(d.actions[0].workers, 2);
}

TEST(coach, moves_workers_from_a_flat_job_to_a_fast_one) {
  policy_options o;
  o.model = trained_model();
  auto p = make("coach", o);
  world w(1, 8);
  w.add(1, 0, 6, 1, 8, 1, true, "flat");
  w.add(2, 1, 2, 1, 8, 1, true, "fast");
  w.run(1, 6, 2, 0);
  w.run(2, 2, 1, 0);
  const auto d = w.step(*p, 1);
  const action* flat = find(d, 1);
  const action* fast = find(d, 2);
  ASSERT_TRUE(flat && fast) << describe(d);
  EXPECT_LT(flat->workers, 6);
  EXPECT_GT(fast->workers, 2);
  EXPECT_EQ(d.actions[0].job, 1u);  // the shrink comes first
}

// --- every policy: the contract on random clusters ---------------------------------------------

class every_policy : public ::testing::TestWithParam<std::string_view> {};

/// A random cluster (some nodes without GPUs) with random jobs in every state, consistent.
world random_world(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> n_nodes(1, 5), n_jobs(0, 12), gpus(0, 3), coin(0, 1);
  cluster_view c;
  const int nodes = n_nodes(rng);
  for (int n = 0; n < nodes; ++n) {
    const int g = std::array<int, 4>{0, 2, 4, 8}[std::size_t(gpus(rng))];
    const double cpus = 4 + 4 * gpus(rng);
    c.nodes.push_back({std::uint32_t(100 + 7 * n), {g, cpus, 1 << 20}, {g, cpus, 1 << 20}});
  }
  world w(c);
  const int jobs = n_jobs(rng);
  for (int j = 1; j <= jobs; ++j) {
    std::uniform_int_distribution<int> req(1, 6);
    const int r = req(rng);
    const int lo = std::uniform_int_distribution<int>(1, r)(rng);
    const int hi = r + std::uniform_int_distribution<int>(0, 6)(rng);
    const bool elastic = coin(rng) || coin(rng);
    auto& v =
        w.add(std::uint64_t(j), std::uniform_real_distribution<double>(0, 100)(rng), r,
              elastic ? lo : r, elastic ? hi : r, std::uniform_int_distribution<int>(1, 3)(rng),
              elastic, coin(rng) ? "fast" : "flat");
    v.per_worker = {std::uniform_int_distribution<int>(0, 2)(rng), 1, 0};
    v.epochs_done = std::uniform_real_distribution<double>(0, 90)(rng);
    const int state = std::uniform_int_distribution<int>(0, 2)(rng);
    if (state == 0) continue;  // queued
    // Running (or suspended after running), if it fits now.
    const int workers = std::uniform_int_distribution<int>(v.min_workers, v.max_workers)(rng);
    const int shards = std::uniform_int_distribution<int>(v.min_shards, v.max_shards)(rng);
    if (!elastic && (workers != r || shards != v.requested_shards)) continue;
    resource_pool probe(w.cluster());
    std::vector<std::uint32_t> a, b;
    if (!probe.take_all(v.per_worker, workers, v.per_shard, shards, a, b)) continue;
    w.run(v.id, workers, shards, std::uniform_real_distribution<double>(100, 2000)(rng));
    if (state == 2) w.apply({{kind::suspend, v.id, 0, 0}}, 2000);
  }
  return w;
}

/// check_decision's verdict on `actions` in `w`: the error text, or "" when it passes.
std::string verdict(world& w, const std::vector<action>& actions) {
  decision d;
  d.actions = actions;
  auto ok = check_decision(w.cluster(), w.jobs(), d);
  return ok ? "" : ok.error().message;
}

// The contract test below uses check_decision as its oracle; this one shows the oracle refuses
// a decision that breaks each rule, naming the action at fault.
TEST(check_decision, refuses_a_decision_that_breaks_each_rule) {
  world w(2, 4);                               // 8 GPUs
  w.add(1, 0, 2, 1, 4);                        // elastic, runs with 2 workers, 1 shard
  w.add(2, 1, 2, 1, 4);                        // elastic, queued
  w.add(3, 2, 2, 2, 2, 1, /*elastic=*/false);  // not elastic, runs as asked
  w.add(4, 3, 2, 2, 2, 1, /*elastic=*/false);  // not elastic, queued
  w.run(1, 2, 1, 5);
  w.run(3, 2, 1, 5);
  ASSERT_EQ(w.free_gpus(), 4);
  // What passes: frees first, then takes that fit.
  EXPECT_EQ(verdict(w, {{kind::resize, 1, 1, 1}, {kind::start, 2, 4, 2}}), "");
  EXPECT_EQ(verdict(w, {{kind::suspend, 3, 0, 0}, {kind::start, 4, 2, 1}, {kind::start, 2, 4, 1}}),
            "");
  EXPECT_EQ(verdict(w, {}), "");

  const struct {
    std::vector<action> actions;
    std::string_view says;
  } broken[] = {
      {{{kind::start, 9, 1, 1}}, "action 0: start job 9 (1 workers, 1 shards): no such job"},
      {{{kind::resize, 1, 3, 1}, {kind::resize, 1, 4, 1}},
       "action 1: resize job 1 (4 workers, 1 shards): the job has an earlier action"},
      {{{kind::start, 1, 2, 1}}, "the job is running, not queued or suspended"},
      {{{kind::resize, 2, 2, 1}}, "the job is queued, not running"},
      {{{kind::suspend, 2, 0, 0}}, "the job is queued, not running"},
      {{{kind::resize, 3, 1, 1}}, "the job is not elastic"},
      {{{kind::resize, 1, 2, 1}}, "the job has that already"},
      {{{kind::resize, 1, 5, 1}}, "workers outside the job's range [1, 4]"},
      {{{kind::start, 2, 0, 1}}, "workers outside the job's range [1, 4]"},
      {{{kind::start, 2, 2, 5}}, "shards outside the job's range [1, 4]"},
      {{{kind::start, 4, 2, 2}}, "the job is not elastic and asked for 2 workers and 1 shards"},
      {{{kind::start, 2, 2, 1}, {kind::resize, 1, 1, 1}},
       "action 1: resize job 1 (1 workers, 1 shards): frees resources after a take"},
      {{{kind::start, 2, 2, 1}, {kind::suspend, 3, 0, 0}}, "action 1: suspend job 3: frees"},
      {{{kind::resize, 1, 4, 1}, {kind::start, 2, 3, 1}},
       "action 1: start job 2 (3 workers, 1 shards): does not fit the free resources"},
      {{{kind::start, 2, 4, 1}, {kind::start, 4, 2, 1}},
       "action 1: start job 4 (2 workers, 1 shards): does not fit"},
  };
  for (const auto& b : broken) {
    std::string what;
    for (const auto& a : b.actions) what += to_string(a) + "; ";
    EXPECT_TRUE(has(verdict(w, b.actions), b.says)) << what;
  }
  // A job whose view lists fewer nodes than parts is refused, not read out of bounds.
  w.job(1).worker_nodes = w.job(1).worker_nodes.first(1);
  EXPECT_TRUE(has(verdict(w, {{kind::resize, 1, 3, 1}}),
                  "job 1: 2 workers and 1 shards but 1 worker and 1 shard nodes"));
}

TEST_P(every_policy, meets_the_decision_contract_on_random_clusters) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE(trial);
    world w = random_world(rng);
    policy_options o;
    o.model = trained_model();
    auto p = make(GetParam(), o);
    double t = 2500;
    for (int round = 0; round < 4; ++round, t += 700) {
      // world::decide checks the contract; the same inputs give the same decision.
      const auto d = w.decide(*p, t);
      auto again = make(GetParam(), o);
      const auto d2 = w.decide(*again, t);
      EXPECT_EQ(d.actions, d2.actions);
      if (d.revisit_at) {
        EXPECT_GT(*d.revisit_at, at_seconds(t));
      }
      w.apply(d.actions, t);
      if (HasFailure()) return;
    }
  }
}

TEST_P(every_policy, starts_what_fits_on_an_empty_cluster) {
  world w(2, 4);
  w.add(1, 0, 2, 1, 4);
  w.add(2, 1, 3, 1, 4);
  auto p = make(GetParam());
  w.step(*p, 1);
  EXPECT_EQ(w.job(1).state, job_state::running);
  EXPECT_EQ(w.job(2).state, job_state::running);
}

INSTANTIATE_TEST_SUITE_P(policies, every_policy, ::testing::ValuesIn(policy_names()),
                         [](const auto& info) {
                           std::string n(info.param);
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// --- the holder: swaps ---------------------------------------------------------------------------

TEST(policy_holder, an_unknown_name_leaves_the_active_policy) {
  auto h = policy_holder::make("coach");
  ASSERT_TRUE(h);
  ASSERT_TRUE(h->model());
  auto bad = h->set("fastest");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(has(bad.error().message, "unknown policy 'fastest'"));
  EXPECT_EQ(h->name(), "coach");
  ASSERT_TRUE(h->set("round-robin"));
  EXPECT_EQ(h->name(), "round-robin");
  EXPECT_FALSE(policy_holder::make("nope"));
}

TEST(policy_holder, a_swap_leaves_running_jobs_as_they_are) {
  // elastic-fifo grows two jobs beyond their request; each other policy, swapped in, then
  // decides with nobody waiting: none suspends or restarts a job, and fifo and round-robin
  // (whose turns are not over) change nothing at all.
  policy_options o;
  o.model = trained_model();
  for (auto next : {"fifo", "round-robin", "coach", "elastic-fifo"}) {
    SCOPED_TRACE(next);
    auto h = policy_holder::make("elastic-fifo", o);
    ASSERT_TRUE(h);
    world w(2, 8);
    w.add(1, 0, 2, 1, 10, 1, true, "fast");
    w.add(2, 1, 2, 1, 10, 1, true, "flat");
    w.apply(h->decide(w.cluster(), w.jobs(), at_seconds(2)).actions, 2);
    ASSERT_EQ(w.job(1).workers, 10);  // grew to its maximum, oldest first
    ASSERT_EQ(w.job(2).workers, 6);
    ASSERT_TRUE(h->set(next));
    const auto d = w.decide(*make(next, o), 100);
    const auto held = h->decide(w.cluster(), w.jobs(), at_seconds(100));
    EXPECT_EQ(held.actions, d.actions);  // the holder now decides as `next` does
    for (const auto& a : d.actions) {
      EXPECT_NE(a.kind, kind::suspend) << describe(d);
      EXPECT_NE(a.kind, kind::start) << describe(d);
    }
    if (std::string_view(next) != "coach") {
      EXPECT_TRUE(d.actions.empty()) << describe(d);
    }
  }
}

TEST(policy_holder, a_swap_from_another_thread_happens_between_two_decisions) {
  // A state where the two policies differ: a job's turn is over and another waits.
  world w(1, 8);
  w.add(1, 0, 8, 8, 8);
  w.run(1, 8, 1, 0);
  w.add(2, 5, 8, 8, 8);
  const auto fifo_decision = w.decide(*make("fifo"), 1000);
  const auto rr_decision = w.decide(*make("round-robin"), 1000);
  ASSERT_NE(fifo_decision.actions, rr_decision.actions);

  auto h = policy_holder::make("fifo");
  ASSERT_TRUE(h);
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    for (int k = 0; !stop; ++k) (void)h->set(k % 2 ? "fifo" : "round-robin");
  });
  const auto cluster = w.cluster();
  int as_fifo = 0, as_rr = 0, other = 0;
  // At least 2000 decisions, and on until both policies made some (or 10 s: a stuck swap).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int k = 0;
       k < 2000 || ((as_fifo == 0 || as_rr == 0) && std::chrono::steady_clock::now() < give_up);
       ++k) {
    const auto d = h->decide(cluster, w.jobs(), at_seconds(1000));
    if (d.actions == fifo_decision.actions)
      ++as_fifo;
    else if (d.actions == rr_decision.actions)
      ++as_rr;
    else
      ++other;
  }
  stop = true;
  swapper.join();
  EXPECT_EQ(other, 0) << "decisions made by neither policy wholly";
  EXPECT_GT(as_fifo, 0);
  EXPECT_GT(as_rr, 0);
}

}  // namespace
}  // namespace coach::scheduler
