#pragma once
// The simulated elastic job of the elastic property tests (tests/unit/elastic_test.cpp,
// tests/unit/elastic_rows_test.cpp), on the job's real logic: the job master
// (master::job_master) and its shards (shard::shard_server over ps::shard) run a job while the
// test asks, at random moments, for workers to join and leave, for shards to be added and drained
// and for shards to migrate, and kills workers in the middle of their pushes. Every message goes
// through a network that delivers in a random order (FIFO per sender and receiver only, as the
// transports do) and may deliver a push twice, the copy late. The job stops at a fixed step
// (cancel_at_step); run() returns what the master assembled there and what every shard took.
//
// Only the workers are played by the test: a worker asks for each step, waits for the version it
// computes from (every shard that holds its keys has applied the step before), pushes a gradient
// known in advance to the shards of its grant's configuration (worker r's gradient at step s for
// key i is a small integer, so its sums are exact in float), reports the step and asks for the
// next. A worker that dies pushes to some of its shards only, and the master is told later.
// With an embedding table (sparse rows, bsp only) each push also carries known gradients for the
// rows its step touches that the shard holds under the push's configuration. Under asp each step
// is one worker's, pushed without waiting for any version; a dead worker's steps are completed by
// the master's stand-in pushes.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "master/job_master.hpp"
#include "ps/shard.hpp"
#include "ps/shard_rows.hpp"
#include "shard/shard_server.hpp"
#include "sparse/row_store.hpp"
#include "wire/elastic_messages.hpp"
#include "wire/row_frames.hpp"

namespace coach::elastic_testing {

using ps::optimizer_config;
using ps::optimizer_kind;
using wire::endpoint;
using wire::msg_kind;
using wire::wire_message;
namespace flag = wire::flag;

inline constexpr std::size_t num_keys = 48;
inline constexpr std::size_t slice_size = 4;  // 12 slices
inline constexpr std::int64_t num_steps = 40;
inline constexpr std::size_t num_samples = 100;  // an epoch: 12 chunks of 8 and one of 4
inline constexpr std::uint64_t job_id = 9;

inline endpoint master_ep() {
  return {0, 1};
}
inline endpoint shard_at(std::uint32_t k) {
  return {0, 100 + k};
}
inline endpoint worker_at(std::uint32_t r) {
  return {0, 1000 + r};
}
inline bool is_shard(const endpoint& e) {
  return e.id >= 100 && e.id < 1000;
}
inline bool is_worker(const endpoint& e) {
  return e.id >= 1000;
}

/// The embedding table of the sparse runs: its rows, their initial scale, the job's seed.
inline constexpr std::uint64_t table_rows = 1000;
inline constexpr std::uint32_t table_dim = 2;
inline constexpr std::uint64_t table_seed = 5;

/// The rows worker r's step s touches: five, distinct, ascending.
inline std::vector<std::uint64_t> touched_rows(std::uint32_t rank, std::int64_t step) {
  std::vector<std::uint64_t> rows;
  for (std::uint64_t j = 0; j < 5; ++j)
    rows.push_back((std::uint64_t(rank) * 131 + std::uint64_t(step) * 37 + j * 199) % table_rows);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

inline float known_gradient(std::uint32_t rank, std::int64_t step, std::size_t key) {
  std::uint64_t h = (std::uint64_t(rank) * 1000003u + std::uint64_t(step)) * 1000033u + key;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return float(int(h % 17) - 8);  // -8 .. 8
}

/// What each shard took for a step: (rank, samples), in rank order (ps::shard_options::
/// on_applied).
using counted_log = std::map<std::pair<std::uint32_t, std::int64_t>,
                             std::vector<std::pair<std::uint32_t, std::uint64_t>>>;

struct run_result {
  std::vector<float> params;  ///< the master's result: version num_steps
  /// Sparse runs: the master's result's rows (every shard's, at version num_steps).
  std::vector<std::vector<std::byte>> rows;
  std::vector<float> initial;
  std::map<std::uint64_t, ps::job_config> configs;  ///< every configuration published
  counted_log counted;                              ///< by (shard, step)
  /// By step: the members granted it and their samples (the unmigrated reference's pushes).
  std::map<std::int64_t, std::map<std::uint32_t, std::uint64_t>> granted;
  std::vector<scheduler::epoch_report> epochs;
  int joins = 0, leaves = 0, adds = 0, drains = 0, migrations = 0, deaths = 0;
  std::uint64_t copies = 0;         ///< duplicated pushes delivered
  std::uint64_t second_pushes = 0;  ///< asp: a step's second push at a shard
  std::uint64_t dropped = 0;        ///< asp: what the shards dropped (shard::stale_dropped)
  int held = 0;                     ///< pushes that reached a shard that did not own their keys yet

  /// The configuration that governs step s in the end.
  const ps::job_config& at(std::int64_t s) const {
    const ps::job_config* best = nullptr;
    for (const auto& [v, c] : configs)
      if (c.from_step <= s && (!best || c.version > best->version)) best = &c;
    return *best;
  }
};

struct sim_options {
  bool deaths = false;
  double duplicates = 0;  ///< the share of pushes delivered twice
  bool asp = false;
  /// The job has an embedding table (bsp only); its rows' optimizer.
  std::optional<sparse::row_optimizer_config> rows;
};

/// The sparse runs' shard configuration of the rows.
inline ps::sparse_rows_config rows_config(const sparse::row_optimizer_config& opt) {
  ps::sparse_rows_config c;
  c.seed = table_seed;
  c.tables = {{table_rows, table_dim, 0.25f}};
  c.optimizer = opt;
  c.num_params = num_keys;
  return c;
}

class job_sim {
 public:
  job_sim(optimizer_config opt, std::uint64_t seed, sim_options o) : opt_(opt), rng_(seed), o_(o) {}

  run_result run() {
    run_result out;
    out_ = &out;
    out.initial.resize(num_keys);
    for (std::size_t i = 0; i < num_keys; ++i) out.initial[i] = float(int(i % 7) - 3);
    master::job_master_setup s;
    s.job = job_id;
    s.spec.name = "elastic";
    s.spec.epochs = 1000;
    s.spec.batch_size = 8;
    s.spec.batch = scheduler::batch_kind::per_worker;
    s.spec.seed = 5;
    s.spec.optimizer = opt_;  // the state snapshots (sparse runs' final) carry its state
    s.spec.workers = {1, 6, 2};
    s.spec.shards = {1, 8, 2};
    s.spec.slice_size = slice_size;
    if (o_.asp) s.spec.consistency.kind = scheduler::consistency_kind::asp;
    s.num_params = num_keys;
    s.train_rows = num_samples;
    s.backend = "cpu";
    s.initial.version = 1;
    s.initial.members = {0, 1};
    s.initial.map = ps::shard_map::even(num_keys, slice_size, 2);
    s.shards = 2;
    s.master = master_ep();
    s.shard_ep = shard_at;
    s.worker_ep = worker_at;
    s.replica_ep = [](std::uint32_t k, std::uint32_t) { return shard_at(k); };
    s.sparse_rows = o_.rows.has_value();
    const auto initial = s.initial;
    out.configs[1] = initial;
    for (std::uint32_t k = 0; k < 2; ++k) add_shard(k, initial, true);
    master::job_master_options mo;
    mo.cancel_at_step = num_steps;
    master_.emplace(std::move(s), std::move(mo), ports(), clock_);
    for (std::uint32_t r = 0; r < 2; ++r) join(r, initial, 0);
    for (std::uint64_t ticks = 0; !outcome_; ++ticks) {
      if (ticks > 2'000'000 || !tick()) {
        std::string why;
        for (const auto& [r, w] : workers_)
          why += " worker " + std::to_string(r) + (w.alive ? " alive" : " gone") + " next " +
                 std::to_string(w.next) + " grants " + std::to_string(w.grants.size()) +
                 (w.grants.empty() ? "" : " of step " + std::to_string(w.grants.front().hdr.step)) +
                 ";";
        for (const auto& [k, sh] : shards_)
          why += " shard " + std::to_string(k) + " at " +
                 std::to_string(sh.server->core().applied_steps()) + " config " +
                 std::to_string(sh.server->core().config_version()) + " owns " +
                 std::to_string(sh.server->core().ranges().size()) + " errors " +
                 std::to_string(sh.server->protocol_errors()) + ";";
        why += " master config " + std::to_string(master_->config().version) + " from " +
               std::to_string(master_->config().from_step);
        ADD_FAILURE() << "the job is stuck at step " << master_->open_step() << ":" << why
                      << " members " << master_->config().members.size();
        return out;
      }
      if (::testing::Test::HasFatalFailure()) return out;
    }
    EXPECT_FALSE(outcome_->failure) << outcome_->failure->message;
    EXPECT_EQ(outcome_->result.steps, num_steps);
    out.params = outcome_->result.params;
    out.rows = outcome_->result.rows;
    for (const auto& c : outcome_->result.changes) {
      if (c.what.starts_with("migrate")) ++out.migrations;
    }
    for (auto& [k, sh] : shards_) out.dropped += sh.server->core().stale_dropped();
    return out;
  }

 private:
  struct worker_sim {
    bool alive = true;
    std::map<std::uint64_t, ps::job_config> configs;  ///< by version
    std::vector<ps::job_config> batch;                ///< a re-issue's, until its last
    std::deque<wire_message> grants;
    std::optional<std::int64_t> dies_at;  ///< pushes this step to some shards only, then dies
    std::int64_t next = 0;                ///< the step it asks for next
  };
  struct shard_sim {
    std::optional<shard::shard_server> server;
  };

  master::job_master_ports ports() {
    master::job_master_ports p;
    p.send = [this](wire_message m) { send(master_ep(), std::move(m)); };
    p.evaluate = [this](master::param_snapshot snap) {
      events_.push_back([this, e = snap.epoch] { master_->evaluated({e, 50, 100, 30.0}); });
    };
    p.progress = [](const scheduler::progress_event&) {};
    p.epoch = [this](const scheduler::epoch_report& r) { out_->epochs.push_back(r); };
    p.checkpoint = [](master::param_snapshot) {};
    p.done = [this](master::job_outcome o) { outcome_ = std::move(o); };
    p.add_worker = [this](std::uint32_t r, const ps::job_config& c, std::int64_t first,
                          const std::string&) -> result<master::part_start> {
      ++out_->joins;
      join(r, c, first);
      return master::part_start::here;
    };
    p.add_shard = [this](std::uint32_t k, const ps::job_config& c, const std::string&,
                         std::uint64_t) -> result<master::part_start> {
      add_shard(k, c, false);
      return master::part_start::here;
    };
    return p;
  }

  void add_shard(std::uint32_t k, const ps::job_config& c, bool owns) {
    auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
    ps::consistency_config mode;
    if (o_.asp) mode.kind = ps::consistency_kind::asp;
    auto so = ps::make_consistency(mode)->shard_rules();
    if (o_.rows) so.rows = rows_config(*o_.rows);
    // What each step took at this shard: the contributions the parameters must hold once.
    so.on_applied = [this, k](std::int64_t step,
                              const std::vector<std::pair<std::uint32_t, std::uint64_t>>& taken) {
      auto& log = out_->counted[{k, step}];
      EXPECT_TRUE(log.empty()) << "shard " << k << " applied step " << step << " twice";
      log = taken;
    };
    std::vector<ps::key_range> ranges;
    std::vector<float> owned;
    if (owns)
      for (auto r : c.map.ranges_of(k)) {
        ranges.push_back(r);
        owned.insert(owned.end(), out_->initial.begin() + std::ptrdiff_t(r.begin),
                     out_->initial.begin() + std::ptrdiff_t(r.end));
      }
    auto core = std::make_unique<ps::shard>(k, opt_, *be, ranges, owned, so);
    EXPECT_TRUE(core->configure(c));
    shard::shard_server_setup s;
    s.job = job_id;
    s.self = shard_at(k);
    s.master = master_ep();
    s.shard_ep = shard_at;
    s.num_params = num_keys;
    s.slice_size = slice_size;
    s.state_per_param = opt_.state_per_param();
    shard::shard_server_ports p;
    p.send = [this, k](wire_message m) { send(shard_at(k), std::move(m)); };
    auto& sh = shards_[k];
    sh.server.emplace(std::move(s), std::move(p), std::move(be), std::move(core));
  }

  void join(std::uint32_t r, const ps::job_config& c, std::int64_t first) {
    auto& w = workers_[r];
    w.configs[c.version] = c;
    w.next = first;
    ask(r);
  }

  void ask(std::uint32_t r) {
    wire_message m;
    m.hdr.src = worker_at(r);
    m.hdr.dst = master_ep();
    m.hdr.kind = msg_kind::chunk_request;
    m.hdr.job = job_id;
    m.hdr.rank = r;
    m.hdr.step = workers_[r].next;
    send(worker_at(r), std::move(m));
  }

  void send(const endpoint& from, wire_message m) {
    if (m.hdr.kind == msg_kind::configure) {
      auto c = wire::read_configure(m, num_keys, slice_size);
      if (c) out_->configs[c->version] = *c;
    }
    const std::pair<std::uint64_t, std::uint64_t> ch{from.id, m.hdr.dst.id};
    if (m.hdr.kind == msg_kind::push && o_.duplicates > 0 &&
        std::uniform_real_distribution<double>(0, 1)(rng_) < o_.duplicates)
      late_.push_back({int(rng_() % 60), ch, wire::copy_to(m, m.hdr.dst, 0)});
    channels_[ch].push_back(std::move(m));
  }

  /// The newest configuration `w` has for step `s`; null when it has none that old.
  static const ps::job_config* config_for(const worker_sim& w, std::int64_t s) {
    const ps::job_config* c = nullptr;
    for (const auto& [v, cfg] : w.configs)
      if (cfg.from_step <= s && (!c || v > c->version)) c = &cfg;
    return c;
  }

  /// The version step `s` of worker `w` computes from is there: every shard that holds keys
  /// under the configuration of the step before (of step s, for a worker that joined at s) has
  /// applied step s - 1.
  bool can_push(const worker_sim& w, const wire_message& g) const {
    if (o_.asp) return true;
    const std::int64_t s = g.hdr.step;
    const ps::job_config* c = config_for(w, s - 1);
    if (!c) c = config_for(w, s);
    for (auto k : c->map.live_shards())
      if (shards_.at(k).server->core().applied_steps() < s) return false;
    return true;
  }

  void push_from(std::uint32_t r) {
    auto& w = workers_[r];
    wire_message g = std::move(w.grants.front());
    w.grants.pop_front();
    const std::int64_t s = g.hdr.step;
    std::uint64_t samples = 0;
    if (!(g.hdr.flags & flag::no_chunk) && !g.frames.empty())
      samples = g.frames.front().as<std::uint32_t>().size();
    out_->granted[s][r] = samples;
    const bool dying = w.dies_at && *w.dies_at == s;
    // Under the newest configuration it has for the step (as a worker switches at from_step).
    const auto& c = *config_for(w, s);
    for (auto k : c.map.live_shards()) {
      if (dying && rng_() % 2 == 0) continue;  // died before this push left
      wire_message m;
      m.hdr.src = worker_at(r);
      m.hdr.dst = shard_at(k);
      m.hdr.kind = msg_kind::push;
      m.hdr.job = job_id;
      m.hdr.map_version = c.version;
      m.hdr.step = s;
      m.hdr.rank = r;
      m.hdr.samples = samples;
      m.hdr.flags = g.hdr.flags & (flag::snapshot | flag::with_state);
      if (samples > 0) {
        m.hdr.ranges = c.map.ranges_of(k);
        for (auto range : m.hdr.ranges) {
          auto v = std::make_shared<std::vector<float>>();
          for (auto i = range.begin; i < range.end; ++i) v->push_back(known_gradient(r, s, i));
          m.frames.push_back(wire::frame::of(v, v->data(), v->size()));
        }
        if (o_.rows) add_rows(m, r, s, c, k);
      }
      send(worker_at(r), std::move(m));
    }
    if (dying) {
      w.alive = false;
      w.grants.clear();
      ++out_->deaths;
      // Its node notices later (heartbeats), and the scheduler tells the master.
      deaths_.push_back({int(rng_() % 30), r});
      return;
    }
    wire_message rep;
    rep.hdr.src = worker_at(r);
    rep.hdr.dst = master_ep();
    rep.hdr.kind = msg_kind::step_report;
    rep.hdr.job = job_id;
    rep.hdr.rank = r;
    rep.hdr.step = s;
    rep.hdr.epoch = g.hdr.epoch;
    rep.hdr.samples = samples;
    send(worker_at(r), std::move(rep));
    w.next = s + 1;
    ask(r);
  }

  /// The row gradients of worker r's step s for the rows shard k holds under configuration c.
  static void add_rows(wire_message& m, std::uint32_t r, std::int64_t s, const ps::job_config& c,
                       std::uint32_t k) {
    struct memory {
      std::vector<std::uint64_t> ids;
      std::vector<float> grads;
    };
    auto mem = std::make_shared<memory>();
    for (auto row : touched_rows(r, s)) {
      if (c.map.owner(ps::row_key_of(0, row, num_keys) / slice_size) != k) continue;
      mem->ids.push_back(row);
      for (std::uint32_t e = 0; e < table_dim; ++e)
        mem->grads.push_back(known_gradient(r, s, num_keys + row * table_dim + e));
    }
    if (mem->ids.empty()) return;
    const wire::row_frames_part part{0, mem->ids, mem->grads};
    wire::append_row_parts(m, std::span(&part, 1), mem, true);
  }

  void to_worker(std::uint32_t r, wire_message m) {
    auto& w = workers_[r];
    if (!w.alive) return;
    if (m.hdr.kind == msg_kind::configure) {
      auto c = wire::read_configure(m, num_keys, slice_size);
      ASSERT_TRUE(c);
      // A re-issue is taken whole, as the worker actor takes it (flag::more_configs).
      w.batch.push_back(*c);
      if (m.hdr.flags & flag::more_configs) return;
      for (auto& b : w.batch) w.configs[b.version] = b;
      w.batch.clear();
      return;
    }
    if (m.hdr.kind != msg_kind::chunk_grant) return;  // answers: the version is read in place
    if (m.hdr.flags & flag::finished) {
      w.alive = false;
      return;
    }
    // Maybe this worker dies while pushing this step. Two members stay, whatever leaves at
    // the same time (a job without a worker fails, which job_master_test shows).
    std::size_t alive_members = 0;
    for (auto rank : master_->config().members)
      alive_members += workers_[rank].alive && !workers_[rank].dies_at;
    if (o_.deaths && alive_members >= 3 && !w.dies_at && rng_() % 12 == 0) w.dies_at = m.hdr.step;
    w.grants.push_back(std::move(m));
  }

  /// A push reaches shard k (what the test counts of the network: copies, pushes that came
  /// before the slices they need, asp's second push of a step).
  void note_push(std::uint32_t k, const wire_message& m) {
    const auto s = m.hdr.step;
    const auto& core = shards_.at(k).server->core();
    if (m.hdr.chunk_id == copy_mark) {
      ++out_->copies;
      return;
    }
    if (s >= core.applied_steps() && !core.owns_assigned(s)) ++out_->held;
    if (o_.asp && ++arrivals_[{k, s}] == 2) ++out_->second_pushes;
  }

  void deliver(std::pair<std::uint64_t, std::uint64_t> ch) {
    auto& q = channels_[ch];
    wire_message m = std::move(q.front());
    q.pop_front();
    const endpoint dst = m.hdr.dst;
    if (dst == master_ep()) return master_->on_message(m);
    if (is_worker(dst)) return to_worker(std::uint32_t(dst.id - 1000), std::move(m));
    ASSERT_TRUE(is_shard(dst));
    const auto k = std::uint32_t(dst.id - 100);
    auto& sh = shards_.at(k);
    if (m.hdr.kind == msg_kind::push) note_push(k, m);
    sh.server->on_message(m);
  }

  /// Asks the master for a random change now and then.
  void maybe_change() {
    if (master_->open_step() >= num_steps - 4 || rng_() % 40 != 0) return;
    const auto& c = master_->config();
    const auto n = std::uint32_t(c.members.size());
    const auto live = c.map.live_shards();
    std::string why;
    switch (rng_() % 5) {
      case 0:
        why = master_->rescale(n + 1, 0);
        break;
      case 1:  // with deaths, two members stay: a death and a leave at once leave one
        if (n > (o_.deaths ? 2u : 1u) && (why = master_->rescale(n - 1, 0)).empty()) ++out_->leaves;
        break;
      case 2:
        if ((why = master_->rescale(0, std::uint32_t(live.size() + 1))).empty()) ++out_->adds;
        break;
      case 3:
        if (live.size() > 1 && (why = master_->rescale(0, std::uint32_t(live.size() - 1))).empty())
          ++out_->drains;
        break;
      case 4:
        why = master_->migrate(live[rng_() % live.size()], "");
        break;
    }
    // Refusals are fine (a range's end reached); the reason is never empty then.
  }

  /// One event: a ready worker pushes, a message is delivered, a death is noticed, an
  /// evaluation answers. False when nothing is left to do.
  bool tick() {
    maybe_change();
    for (auto it = late_.begin(); it != late_.end();)
      if (--it->ticks <= 0) {
        it->m.hdr.chunk_id = copy_mark;
        channels_[it->channel].push_back(std::move(it->m));
        it = late_.erase(it);
      } else {
        ++it;
      }
    for (auto it = deaths_.begin(); it != deaths_.end();)
      if (--it->first <= 0) {
        master_->workers_lost({it->second}, "killed by the test");
        it = deaths_.erase(it);
        return true;
      } else {
        ++it;
      }
    std::vector<std::uint32_t> ready, slow;
    for (auto& [r, w] : workers_)
      if (w.alive && !w.grants.empty() && can_push(w, w.grants.front())) {
        // asp: every third rank is a straggler, which lets later steps be applied before its.
        const bool lags = o_.asp && r % 3 == 0 && rng_() % 32 != 0;
        (lags ? slow : ready).push_back(r);
      }
    std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;
    for (auto& [key, q] : channels_)
      if (!q.empty()) busy.push_back(key);
    if (ready.empty() && busy.empty()) ready = std::move(slow);
    // An evaluation answers soon, as the evaluator's thread would.
    if (!events_.empty() && (rng_() % 2 == 0 || (ready.empty() && busy.empty()))) {
      auto f = std::move(events_.front());
      events_.pop_front();
      f();
      return true;
    }
    if (ready.empty() && busy.empty()) {
      if (!late_.empty() || !deaths_.empty()) {
        for (auto& l : late_) l.ticks = 1;
        for (auto& d : deaths_) d.first = 1;
        return true;
      }
      return false;
    }
    const std::size_t pick = rng_() % (ready.size() + busy.size());
    if (pick < ready.size())
      push_from(ready[pick]);
    else
      deliver(busy[pick - ready.size()]);
    return true;
  }

  /// A copy's mark (pushes carry no chunk id otherwise).
  static constexpr std::uint64_t copy_mark = 0xC0C0;

  optimizer_config opt_;
  std::mt19937_64 rng_;
  sim_options o_;
  run_result* out_ = nullptr;
  scheduler::manual_clock clock_;
  std::optional<master::job_master> master_;
  std::optional<master::job_outcome> outcome_;
  std::map<std::uint32_t, shard_sim> shards_;
  std::map<std::uint32_t, worker_sim> workers_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::deque<wire_message>> channels_;
  struct late_copy {
    int ticks;
    std::pair<std::uint64_t, std::uint64_t> channel;
    wire_message m;
  };
  std::vector<late_copy> late_;
  std::vector<std::pair<int, std::uint32_t>> deaths_;               ///< (ticks to wait, rank)
  std::map<std::pair<std::uint32_t, std::int64_t>, int> arrivals_;  ///< asp: pushes by (k, s)
  std::deque<std::function<void()>> events_;                        ///< evaluations
};

}  // namespace coach::elastic_testing
