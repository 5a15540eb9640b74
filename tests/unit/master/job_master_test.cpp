// master::job_master driven without an actor system: a job's workers and shards are played by
// the test (a worker asks for each step, reports it and asks for the next; a shard answers
// snapshot requests with values known in advance, and acknowledges the moves it is ordered),
// every message goes through one queue in order, and time is a manual clock. Joins, leaves,
// deaths, shard additions and migrations happen at step boundaries; every epoch's samples are
// reported exactly once; the result is the parameters of the version the job stopped at; each
// change's timing is what the clock says.
#include "master/job_master.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "wire/elastic_messages.hpp"

namespace coach::master {
namespace {

using wire::msg_kind;
using wire::wire_message;
namespace flag = wire::flag;

constexpr std::size_t num_params = 64;
constexpr std::size_t slice_size = 8;  // 8 slices
constexpr std::size_t rows = 96;       // chunks of 8: 12 a epoch
constexpr std::uint64_t job_id = 7;

wire::endpoint master_ep() {
  return {0, 1};
}
wire::endpoint shard_at(std::uint32_t k) {
  return {0, 100 + k};
}
wire::endpoint worker_at(std::uint32_t r) {
  return {0, 1000 + r};
}
wire::endpoint replica_at(std::uint32_t k, std::uint32_t i) {
  return i == 0 ? shard_at(k) : wire::endpoint{i, 500 + 10 * k + i};
}

/// The value of key `i` at version `v` (what every shard answers a snapshot with).
float value_at(std::size_t i, std::int64_t v) {
  return float(i) + 1000.0f * float(v);
}

scheduler::job_spec spec_of(int workers, int shards, int epochs) {
  scheduler::job_spec s;
  s.name = "job-master-test";
  s.epochs = epochs;
  s.batch_size = 8;
  s.batch = scheduler::batch_kind::per_worker;
  s.seed = 5;
  s.workers = {1, 4, workers};
  s.shards = {1, 4, shards};
  s.slice_size = slice_size;
  return s;
}

/// A job master with its workers and shards played in one process, one message at a time.
struct job_run {
  scheduler::manual_clock clock;
  std::optional<job_master> master;
  /// Everything that goes to the master or comes from it, in order.
  std::deque<std::function<void()>> queue;

  // What the master reported.
  std::vector<scheduler::epoch_report> epochs;
  std::optional<job_outcome> outcome;
  std::vector<std::pair<std::vector<std::uint32_t>, std::vector<std::uint32_t>>> layouts;
  struct started_part {
    bool worker;
    std::uint32_t id;
    std::string node;
    std::uint64_t expect_keys;
    std::int64_t first_step;
  };
  std::vector<started_part> started;
  part_start start_as = part_start::here;
  double accuracy = 0.75;  ///< what the evaluator answers (correct / total)

  // The workers: alive ones answer grants.
  std::set<std::uint32_t> alive;
  std::set<std::uint32_t> finished;  ///< told to stop
  /// Each worker's grant by step (the sample indices), until it reports.
  std::map<std::uint32_t, std::map<std::int64_t, std::vector<std::uint32_t>>> held;
  /// By epoch: every sample index of a step a worker reported.
  std::map<std::uint32_t, std::multiset<std::uint32_t>> reported;
  std::map<std::int64_t, std::set<std::uint32_t>> granted_to;  ///< by step: who got samples
  /// Workers that hold a step before reporting it, until released (a slow or dying worker).
  std::map<std::uint32_t, std::int64_t> hold_at;
  std::int64_t last_granted = -1;

  // The shards.
  ps::job_config initial;        ///< the configuration the job started with
  double migrate_sent_at = -1;   ///< the clock when the master sent its last migrate order
  double ack_delivered_at = -1;  ///< the clock when the master got the last transfer_ack
  std::map<std::uint64_t, std::vector<ps::job_config>> configs_seen;  ///< by endpoint id
  std::vector<wire_message> orders;                                   ///< migrate orders, in order
  std::vector<wire_message> configures;  ///< every configure message sent, in order
  bool hold_acks = false;                ///< keep transfer acknowledgements back
  std::vector<wire_message> held_acks;
  std::vector<wire_message> take_overs;  ///< take_over messages, to backups and workers
  /// The first step each worker got a grant of under each configuration version, and whether
  /// that configuration had reached it before.
  std::vector<std::string> order_errors;
  double seconds_per_report = 0.25;

  job_run(int workers, int shards, int epochs, job_master_options options = {}) {
    job_master_setup s;
    s.job = job_id;
    s.spec = spec_of(workers, shards, epochs);
    s.num_params = num_params;
    s.train_rows = rows;
    s.backend = "cpu";
    s.initial.version = 1;
    for (int r = 0; r < workers; ++r) s.initial.members.push_back(std::uint32_t(r));
    s.initial.map = ps::shard_map::even(num_params, slice_size, std::uint32_t(shards));
    s.shards = std::uint32_t(shards);
    initial = s.initial;
    s.master = master_ep();
    s.shard_ep = shard_at;
    s.worker_ep = worker_at;
    s.replica_ep = replica_at;
    job_master_ports p;
    p.send = [this](wire_message m) {
      if (m.hdr.kind == msg_kind::migrate) migrate_sent_at = now();
      if (m.hdr.kind == msg_kind::configure) configures.push_back(m);
      queue.push_back([this, m] { deliver(m); });
    };
    p.evaluate = [this](param_snapshot snap) {
      queue.push_back([this, snap] {
        master->evaluated({snap.epoch, std::int64_t(accuracy * 100), 100, 50.0});
      });
    };
    p.progress = [](const scheduler::progress_event&) {};
    p.epoch = [this](const scheduler::epoch_report& r) { this->epochs.push_back(r); };
    p.checkpoint = [](param_snapshot) {};
    p.done = [this](job_outcome o) {
      EXPECT_FALSE(outcome) << "done reported twice";
      outcome = std::move(o);
    };
    p.add_worker = [this](std::uint32_t r, const ps::job_config&, std::int64_t first,
                          const std::string& node) -> result<part_start> {
      started.push_back({true, r, node, 0, first});
      if (start_as == part_start::here) join(r, first);
      return start_as;
    };
    p.add_shard = [this](std::uint32_t k, const ps::job_config&, const std::string& node,
                         std::uint64_t keys) -> result<part_start> {
      started.push_back({false, k, node, keys, 0});
      return start_as;
    };
    p.changed = [this](const std::vector<std::uint32_t>& m, const std::vector<std::uint32_t>& l) {
      layouts.push_back({m, l});
    };
    p.take_over = [](std::uint32_t, const wire::endpoint&) {};
    master.emplace(std::move(s), std::move(options), std::move(p), clock);
    for (int r = 0; r < workers; ++r) join(std::uint32_t(r), options.first_step);
  }

  /// Worker r starts: it asks for step `first`.
  void join(std::uint32_t r, std::int64_t first) {
    alive.insert(r);
    ask(r, first);
  }
  void ask(std::uint32_t r, std::int64_t step) {
    wire_message m;
    m.hdr.src = worker_at(r);
    m.hdr.dst = master_ep();
    m.hdr.kind = msg_kind::chunk_request;
    m.hdr.job = job_id;
    m.hdr.rank = r;
    m.hdr.step = step;
    queue.push_back([this, m] { master->on_message(m); });
  }

  void report(std::uint32_t r, std::int64_t step, std::uint32_t epoch) {
    auto idx = held[r][step];
    held[r].erase(step);
    for (auto i : idx) reported[epoch].insert(i);
    wire_message m;
    m.hdr.src = worker_at(r);
    m.hdr.dst = master_ep();
    m.hdr.kind = msg_kind::step_report;
    m.hdr.job = job_id;
    m.hdr.rank = r;
    m.hdr.step = step;
    m.hdr.epoch = epoch;
    m.hdr.samples = idx.size();
    m.hdr.loss = 0.5 * double(idx.size());
    queue.push_back([this, m] {
      clock.advance(scheduler::seconds(seconds_per_report));
      master->on_message(m);
    });
  }

  double now() const { return scheduler::to_seconds(clock.now()); }

  void acknowledge(const wire_message& ack) {
    queue.push_back([this, ack] {
      ack_delivered_at = now();
      master->on_message(ack);
    });
  }

  std::optional<std::uint32_t> worker_of(const wire::endpoint& e) const {
    if (e.id >= 1000) return std::uint32_t(e.id - 1000);
    return std::nullopt;
  }

  void deliver(const wire_message& m) {
    if (auto r = worker_of(m.hdr.dst)) return to_worker(*r, m);
    to_shard(m);
  }

  void to_worker(std::uint32_t r, const wire_message& m) {
    if (!alive.contains(r)) return;
    if (m.hdr.kind == msg_kind::configure) {
      configs_seen[m.hdr.dst.id].push_back(*wire::read_configure(m, num_params, slice_size));
      return;
    }
    if (m.hdr.kind == msg_kind::take_over) return take_overs.push_back(m);
    ASSERT_EQ(m.hdr.kind, msg_kind::chunk_grant);
    const auto s = m.hdr.step;
    // A worker that is no member of the step is told to stop (under a configuration without
    // it); any other grant refers to a configuration its worker has, sent before it.
    if (m.hdr.flags & flag::finished) {
      finished.insert(r);
      return;
    }

    const auto& seen = configs_seen[m.hdr.dst.id];
    const bool known =
        m.hdr.map_version == 1 || std::ranges::any_of(seen, [&](const ps::job_config& c) {
          return c.version == m.hdr.map_version;
        });
    if (!known)
      order_errors.push_back("worker " + std::to_string(r) + " got step " + std::to_string(s) +
                             " of configuration " + std::to_string(m.hdr.map_version) +
                             " before the configuration");
    std::vector<std::uint32_t> idx;
    if (!(m.hdr.flags & flag::no_chunk) && !m.frames.empty()) {
      auto v = m.frames.front().as<std::uint32_t>();
      idx.assign(v.begin(), v.end());
      granted_to[s].insert(r);
    }
    last_granted = std::max(last_granted, s);
    held[r][s] = idx;
    if (auto h = hold_at.find(r); h != hold_at.end() && h->second == s) return;
    report(r, s, m.hdr.epoch);
    ask(r, s + 1);
  }

  void to_shard(const wire_message& m) {
    switch (m.hdr.kind) {
      case msg_kind::configure:
        configs_seen[m.hdr.dst.id].push_back(*wire::read_configure(m, num_params, slice_size));
        return;
      case msg_kind::migrate: {
        orders.push_back(m);
        const auto o = *wire::read_migrate(m);
        auto ack = wire::make_transfer_ack(shard_at(o.to), master_ep(), job_id,
                                           {o.at_version, std::uint32_t(m.hdr.dst.id - 100), o.to});
        if (hold_acks) return held_acks.push_back(ack);
        return acknowledge(ack);
      }
      case msg_kind::snapshot_request:
        return answer_snapshot(m);
      case msg_kind::take_over:
        return take_overs.push_back(m);
      default:
        ADD_FAILURE() << "a shard got " << to_string(m.hdr.kind);
    }
  }

  /// The shard answers version v with the ranges the configuration of step v gives it.
  void answer_snapshot(const wire_message& m) {
    const std::uint32_t k =
        std::uint32_t(m.hdr.dst.id >= 500 && m.hdr.dst.id < 1000 ? (m.hdr.dst.id - 500) / 10
                                                                 : m.hdr.dst.id - 100);
    const auto v = m.hdr.step;
    const auto configs = all_configs();
    const ps::job_config* governing = nullptr;
    for (const auto& c : configs)
      if (c.from_step <= v && (!governing || c.version > governing->version)) governing = &c;
    wire_message a;
    a.hdr.src = m.hdr.dst;
    a.hdr.dst = master_ep();
    a.hdr.kind = msg_kind::params;
    a.hdr.job = job_id;
    a.hdr.step = v;
    for (const auto& r : governing->map.ranges_of(k)) {
      auto vals = std::make_shared<std::vector<float>>();
      for (auto i = r.begin; i < r.end; ++i) vals->push_back(value_at(i, v));
      a.hdr.ranges.push_back(r);
      a.frames.push_back(wire::frame::of(vals, vals->data(), vals->size()));
    }
    queue.push_back([this, a] { master->on_message(a); });
  }

  /// Every configuration the job published (the initial one and those sent since).
  std::vector<ps::job_config> all_configs() const {
    std::vector<ps::job_config> out{initial};
    for (const auto& [id, cs] : configs_seen) out.insert(out.end(), cs.begin(), cs.end());
    return out;
  }

  /// Runs until `done` holds or nothing is left to do. False when it stopped for the latter.
  bool run(const std::function<bool()>& done = {}) {
    while (!queue.empty()) {
      if (done && done()) return true;
      auto f = std::move(queue.front());
      queue.pop_front();
      f();
    }
    return done ? done() : true;
  }

  /// Each epoch's reported samples: every index exactly once.
  void expect_every_sample_once(std::uint32_t epochs_expected) const {
    ASSERT_EQ(reported.size(), epochs_expected);
    for (const auto& [e, seen] : reported) {
      EXPECT_EQ(seen.size(), rows) << "epoch " << e;
      EXPECT_EQ(std::set<std::uint32_t>(seen.begin(), seen.end()).size(), rows) << "epoch " << e;
    }
  }
  /// The job's parameters are those of version v, key by key.
  static void expect_params_of(const std::vector<float>& p, std::int64_t v) {
    ASSERT_EQ(p.size(), num_params);
    for (std::size_t i = 0; i < num_params; ++i) ASSERT_EQ(p[i], value_at(i, v)) << "key " << i;
  }
};

std::unique_ptr<job_run> start(int workers, int shards, int epochs,
                               job_master_options options = {}) {
  return std::make_unique<job_run>(workers, shards, epochs, std::move(options));
}

TEST(job_master, a_job_trains_every_epoch_evaluates_it_and_ends_with_the_last_version) {
  auto j = start(2, 1, 2);
  ASSERT_TRUE(j->run());
  ASSERT_TRUE(j->outcome) << "granted up to " << j->last_granted << ", epochs " << j->epochs.size()
                          << ", open " << j->master->open_step();
  ASSERT_FALSE(j->outcome->failure);
  const auto& r = j->outcome->result;
  EXPECT_FALSE(r.cancelled);
  // 12 chunks an epoch, 2 a step: 6 steps an epoch, 12 in all; the result is version 12.
  EXPECT_EQ(r.steps, 12);
  job_run::expect_params_of(r.params, 12);
  ASSERT_EQ(j->epochs.size(), 2u);
  for (const auto& e : j->epochs) {
    EXPECT_EQ(e.samples, rows);
    EXPECT_EQ(e.steps, 6);
    EXPECT_DOUBLE_EQ(e.test_accuracy, 0.75);
    EXPECT_DOUBLE_EQ(e.train_loss, 0.5);  // each report's loss is 0.5 a sample
  }
  EXPECT_DOUBLE_EQ(r.test_accuracy, 0.75);
  j->expect_every_sample_once(2);
  // The clock moved 0.25 s a report: 24 reports.
  EXPECT_DOUBLE_EQ(r.seconds, 24 * 0.25);
  EXPECT_EQ(j->finished, (std::set<std::uint32_t>{0, 1}));
  EXPECT_TRUE(j->order_errors.empty()) << j->order_errors.front();
  EXPECT_EQ(r.workers, 2u);
  EXPECT_EQ(r.shards, 1u);
}

TEST(job_master, a_worker_that_joins_and_workers_that_leave_do_so_at_a_step_boundary) {
  auto j = start(2, 1, 3);
  ASSERT_TRUE(j->run([&] { return j->last_granted >= 2; }));
  EXPECT_EQ(j->master->rescale(3, 0), "");
  ASSERT_TRUE(j->run([&] { return !j->started.empty(); }));
  // The new rank starts with the step the change takes effect at, under configuration 2.
  ASSERT_EQ(j->started.size(), 1u);
  EXPECT_TRUE(j->started[0].worker);
  EXPECT_EQ(j->started[0].id, 2u);
  const auto boundary = j->started[0].first_step;
  EXPECT_EQ(j->master->config().version, 2u);
  EXPECT_EQ(j->master->config().from_step, boundary);
  ASSERT_TRUE(j->run([&] { return j->last_granted >= boundary + 2; }));
  for (auto s = boundary; s <= boundary + 1; ++s)
    EXPECT_EQ(j->granted_to[s], (std::set<std::uint32_t>{0, 1, 2})) << "step " << s;
  for (auto s = boundary - 2; s < boundary; ++s)
    EXPECT_EQ(j->granted_to[s], (std::set<std::uint32_t>{0, 1})) << "step " << s;
  // Down to one: ranks 1 and 2 are told to stop at the next boundary, rank 0 goes on alone.
  EXPECT_EQ(j->master->rescale(1, 0), "");
  ASSERT_TRUE(j->run([&] { return j->finished.size() == 2; }));
  EXPECT_EQ(j->finished, (std::set<std::uint32_t>{1, 2}));
  const auto down = j->master->config().from_step;
  ASSERT_TRUE(j->run());
  ASSERT_TRUE(j->outcome && !j->outcome->failure);
  for (auto s = down; s <= j->outcome->result.steps - 1; ++s)
    if (!j->granted_to[s].empty()) {
      EXPECT_EQ(j->granted_to[s], (std::set<std::uint32_t>{0})) << "step " << s;
    }
  j->expect_every_sample_once(3);
  job_run::expect_params_of(j->outcome->result.params, j->outcome->result.steps);
  EXPECT_EQ(j->outcome->result.workers, 1u);
  EXPECT_TRUE(j->order_errors.empty()) << j->order_errors.front();
  ASSERT_EQ(j->outcome->result.changes.size(), 2u);
  EXPECT_EQ(j->outcome->result.changes[0].what, "workers 3");
  EXPECT_EQ(j->outcome->result.changes[0].step, boundary);
  EXPECT_GE(j->outcome->result.changes[0].join_ms, 0);
}

TEST(job_master, a_dead_workers_chunks_go_to_the_others_and_count_once) {
  auto j = start(3, 1, 2);
  j->hold_at[1] = 3;  // worker 1 takes step 3's chunk and never reports it
  ASSERT_TRUE(j->run([&] { return j->held[1].contains(3) && j->last_granted >= 3; }));
  const auto lost = j->held[1][3];
  ASSERT_FALSE(lost.empty());
  j->alive.erase(1);
  j->master->workers_lost({1}, "killed by the test");
  ASSERT_TRUE(j->run());
  ASSERT_TRUE(j->outcome && !j->outcome->failure);
  // Its chunk went to another worker; every sample of both epochs counted once.
  j->expect_every_sample_once(2);
  for (auto i : lost) EXPECT_EQ(j->reported[0].count(i), 1u);
  EXPECT_EQ(j->outcome->result.workers, 2u);
  job_run::expect_params_of(j->outcome->result.params, j->outcome->result.steps);
  // The configuration without it governs step 3 on (the step it did not report).
  EXPECT_EQ(j->master->config().members, (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(j->master->config().from_step, 3);
  EXPECT_TRUE(j->order_errors.empty()) << j->order_errors.front();
}

TEST(job_master, a_worker_that_dies_before_its_first_report_is_dropped_from_the_step_it_joined) {
  auto j = start(2, 1, 3);
  ASSERT_TRUE(j->run([&] { return j->last_granted >= 2; }));
  EXPECT_EQ(j->master->rescale(3, 0), "");
  ASSERT_TRUE(j->run([&] { return !j->started.empty(); }));
  const auto joined = j->started[0].first_step;
  j->hold_at[2] = joined;  // the new worker takes its first step and never reports it
  ASSERT_TRUE(j->run([&] { return j->held[2].contains(joined); }));
  // A later change while it holds that step: the re-issue then spans two configurations.
  EXPECT_EQ(j->master->rescale(0, 2), "");
  ASSERT_TRUE(j->run([&] { return j->master->config().version == 3; }));
  j->alive.erase(2);
  j->configures.clear();
  j->master->workers_lost({2}, "killed by the test");
  // The configurations from the step it joined at are re-issued without it (not those before:
  // it had no part in them), and each worker takes the re-issue whole: every configure of it
  // but the last to that worker says more follow.
  std::map<std::uint64_t, std::vector<const wire_message*>> to_worker;
  for (const auto& m : j->configures) {
    const auto c = wire::read_configure(m, num_params, slice_size);
    ASSERT_TRUE(c);
    EXPECT_GE(c->from_step, joined);
    EXPECT_FALSE(c->is_member(2));
    if (m.hdr.dst.id >= 1000) to_worker[m.hdr.dst.id].push_back(&m);
  }
  ASSERT_EQ(to_worker.size(), 2u);
  for (const auto& [id, ms] : to_worker) {
    EXPECT_EQ(ms.size(), 2u);
    for (std::size_t i = 0; i < ms.size(); ++i)
      EXPECT_EQ((ms[i]->hdr.flags & flag::more_configs) != 0, i + 1 < ms.size()) << id;
  }
  ASSERT_TRUE(j->run());
  ASSERT_TRUE(j->outcome && !j->outcome->failure);
  j->expect_every_sample_once(3);
}

TEST(job_master, a_job_whose_every_worker_died_fails_naming_the_last_cause) {
  auto j = start(1, 1, 2);
  j->hold_at[0] = 1;
  ASSERT_TRUE(j->run([&] { return j->held[0].contains(1); }));
  j->alive.clear();
  j->master->workers_lost({0}, "out of memory");
  ASSERT_TRUE(j->outcome);
  ASSERT_TRUE(j->outcome->failure);
  EXPECT_EQ(j->outcome->failure->message,
            "every worker of the job is gone (the last: out of memory)");
  EXPECT_TRUE(j->master->ended());
}

TEST(job_master, an_added_shard_gets_its_slices_by_orders_and_the_next_change_waits_for_the_acks) {
  auto j = start(2, 1, 3);
  j->hold_acks = true;
  ASSERT_TRUE(j->run([&] { return j->last_granted >= 1; }));
  EXPECT_EQ(j->master->rescale(0, 2), "");
  EXPECT_EQ(j->master->rescale(3, 0), "");  // queued behind the shard's transfers
  ASSERT_TRUE(j->run([&] { return !j->orders.empty(); }));
  ASSERT_EQ(j->started.size(), 1u);
  EXPECT_FALSE(j->started[0].worker);
  EXPECT_EQ(j->started[0].id, 1u);
  // Shard 0 hands half its slices to shard 1 at the change's step; configuration 2 says so.
  const auto o = *wire::read_migrate(j->orders[0]);
  EXPECT_EQ(j->orders[0].hdr.dst, shard_at(0));
  EXPECT_EQ(o.to, 1u);
  const auto at = j->master->config().from_step;
  EXPECT_EQ(o.at_version, at);
  std::size_t keys = 0;
  for (const auto& r : o.ranges) keys += r.size();
  EXPECT_EQ(keys, num_params / 2);
  EXPECT_EQ(j->master->config().map.load(), (std::vector<std::size_t>{4, 4}));
  // The steps go on under it; the workers change waits while the transfer is unacknowledged.
  ASSERT_TRUE(j->run([&] { return j->last_granted >= at + 3; }));
  EXPECT_EQ(j->master->config().version, 2u);
  EXPECT_EQ(j->started.size(), 1u);
  j->hold_acks = false;
  for (const auto& a : j->held_acks) j->acknowledge(a);
  j->held_acks.clear();
  ASSERT_TRUE(j->run([&] { return j->started.size() == 2; }));
  EXPECT_TRUE(j->started[1].worker);
  EXPECT_EQ(j->master->config().version, 3u);
  ASSERT_TRUE(j->run());
  ASSERT_TRUE(j->outcome && !j->outcome->failure);
  // The final snapshot is assembled from both shards' ranges.
  job_run::expect_params_of(j->outcome->result.params, j->outcome->result.steps);
  EXPECT_EQ(j->outcome->result.shards, 2u);
  j->expect_every_sample_once(3);
  ASSERT_EQ(j->outcome->result.changes.size(), 2u);
  EXPECT_EQ(j->outcome->result.changes[0].what, "shards 2");
  // Values and SGD's state: one float a key (sgd keeps none).
  EXPECT_EQ(j->outcome->result.changes[0].moved_bytes, num_params / 2 * sizeof(float));
}

TEST(job_master, a_migration_to_another_node_waits_for_its_shard_and_times_each_part) {
  auto j = start(2, 1, 3);
  j->start_as = part_start::elsewhere;
  ASSERT_TRUE(j->run([&] { return j->last_granted >= 1; }));
  EXPECT_EQ(j->master->migrate(0, "node-b"), "");
  const double asked = j->now();
  ASSERT_EQ(j->started.size(), 1u);
  EXPECT_EQ(j->started[0].node, "node-b");
  EXPECT_EQ(j->started[0].expect_keys, num_params);  // it warms memory for shard 0's keys
  // Nothing moves while the new shard starts: the job trains on under configuration 1.
  ASSERT_TRUE(j->run([&] { return j->last_granted >= 4; }));
  EXPECT_EQ(j->master->config().version, 1u);
  EXPECT_TRUE(j->orders.empty());
  j->clock.advance(scheduler::seconds(1.5));  // the new shard took this long besides
  const double ready = j->now();
  j->master->part_ready(false, 1, "");
  ASSERT_TRUE(j->run([&] { return !j->orders.empty(); }));
  EXPECT_EQ(j->master->config().map.load(), (std::vector<std::size_t>{0, 8}));
  ASSERT_TRUE(j->run());
  ASSERT_TRUE(j->outcome && !j->outcome->failure);
  job_run::expect_params_of(j->outcome->result.params, j->outcome->result.steps);
  const auto& c = j->outcome->result.changes.at(0);
  EXPECT_EQ(c.what, "migrate 0 to node-b");
  // Request to ready, and orders sent to the last acknowledgement, as the clock says.
  EXPECT_GT(ready - asked, 1.5);
  EXPECT_DOUBLE_EQ(c.prepare_ms, (ready - asked) * 1000);
  EXPECT_DOUBLE_EQ(c.transfer_ms, (j->ack_delivered_at - j->migrate_sent_at) * 1000);
  // After the transfer, shard 0 holds nothing: the layout lists shard 1 alone.
  EXPECT_EQ(j->layouts.back().second, (std::vector<std::uint32_t>{1}));
}

TEST(job_master, a_migration_the_new_shard_cannot_start_for_is_dropped_and_the_job_goes_on) {
  auto j = start(2, 1, 2);
  j->start_as = part_start::elsewhere;
  ASSERT_TRUE(j->run([&] { return j->last_granted >= 1; }));
  EXPECT_EQ(j->master->migrate(0, "node-b"), "");
  j->master->part_ready(false, 1, "node-b is draining");
  ASSERT_TRUE(j->run());
  ASSERT_TRUE(j->outcome && !j->outcome->failure);
  EXPECT_TRUE(j->orders.empty());
  EXPECT_TRUE(j->outcome->result.changes.empty());
  job_run::expect_params_of(j->outcome->result.params, 12);
}

TEST(job_master, orders_it_cannot_carry_out_are_refused_with_the_reason) {
  auto j = start(2, 2, 1);
  EXPECT_EQ(j->master->rescale(9, 0), "--workers 9 is outside the job's workers range [1, 4]");
  EXPECT_EQ(j->master->rescale(0, 0), "nothing to change: give --workers or --shards");
  EXPECT_EQ(j->master->migrate(5, "b"), "shard 5 owns no slices (live shards: 0, 1)");
  ASSERT_TRUE(j->run());
  EXPECT_EQ(j->master->rescale(3, 0), "the job is ending");
}

TEST(job_master, a_cancelled_job_stops_at_a_step_boundary_with_that_version) {
  auto j = start(2, 2, 3);
  ASSERT_TRUE(j->run([&] { return j->last_granted >= 7; }));
  j->master->cancel();
  ASSERT_TRUE(j->run());
  ASSERT_TRUE(j->outcome && !j->outcome->failure);
  const auto& r = j->outcome->result;
  EXPECT_TRUE(r.cancelled);
  // The steps open when it was cancelled finish; the next one stops every worker.
  EXPECT_GE(r.steps, 8);
  EXPECT_LE(r.steps, 9);
  job_run::expect_params_of(r.params, r.steps);
  EXPECT_EQ(j->finished, (std::set<std::uint32_t>{0, 1}));
  EXPECT_EQ(j->epochs.size(), 1u);  // epoch 0's 6 steps ended; epoch 1 did not
}

TEST(job_master, cancel_at_step_stops_exactly_there) {
  job_master_options o;
  o.cancel_at_step = 5;
  auto j = start(2, 1, 3, o);
  ASSERT_TRUE(j->run());
  ASSERT_TRUE(j->outcome && !j->outcome->failure);
  EXPECT_EQ(j->outcome->result.steps, 5);
  job_run::expect_params_of(j->outcome->result.params, 5);
}

TEST(job_master, a_backup_that_takes_over_is_told_and_gets_every_configuration_again) {
  auto j = start(2, 2, 2);
  ASSERT_TRUE(j->run([&] { return j->last_granted >= 2; }));
  j->master->replicas_lost({1, 1}, {});
  // The backup first, then each worker of the job, hears that backup 1 of shard 1 serves now.
  ASSERT_EQ(j->take_overs.size(), 0u);  // sent through the queue
  ASSERT_TRUE(j->run([&] { return j->take_overs.size() == 3; }));
  EXPECT_EQ(j->take_overs[0].hdr.dst, replica_at(1, 1));
  for (const auto& t : j->take_overs) {
    EXPECT_EQ(t.hdr.rank, 1u);
    EXPECT_EQ(t.hdr.epoch, replica_at(1, 1).host);
    EXPECT_EQ(t.hdr.chunk_id, replica_at(1, 1).id);
  }
  EXPECT_EQ(j->configs_seen[replica_at(1, 1).id].size(), 1u);  // the initial one
  ASSERT_TRUE(j->run());
  ASSERT_TRUE(j->outcome && !j->outcome->failure);
}

}  // namespace
}  // namespace coach::master
