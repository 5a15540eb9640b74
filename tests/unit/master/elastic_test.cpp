// The elastic invariant of issue 4 on the shard logic alone: for random sequences of worker joins,
// leaves and deaths, shard additions, drains and migrations at step boundaries, with messages
// between master, workers and shards delivered in a random order (FIFO per sender and receiver
// only, as over the transports), every gradient a shard accepts is applied exactly once and the
// final parameters are exactly the expected ones.
//
// The job is deterministic with gradients known in advance: worker r's gradient at step s for key
// i is a small integer g(r, s, i), so its sums are exact in float and the expected parameters are
// computed directly, with the backend's own SGD update. With momentum and Adam the reference is
// one unmigrated shard fed the same contributions: migration is invisible to the math.
//
// The harness plays the job master's protocol (docs/design.md, "Elastic jobs") with the master's
// own classes: the step planner (master::step_planner over a master::chunk_dispenser) decides
// who computes which chunk at each step and what a dead worker gives back, and the change
// planner (master::plan_change) each change's configuration and orders. A worker reports a step
// when it has pushed it; no chunk is lost: every epoch completed counted all its samples once. A
// configuration reaches every shard before the grants that refer to it; slices move at a step
// boundary (the source releases once it has applied the step before, the destination adopts and
// acknowledges); a worker pushes step s once every shard it pulls from has applied step s - 1 (its
// pull returned). Two ways: the step's grants wait for the acknowledgements (sequential), or, as
// the job master does, the configuration and the grants go out with the migrate orders and the
// workers push while the slices travel (overlapped: the shards hold those pushes until they own
// what the configuration gives them); the next change waits for the acknowledgements.
//
// Asynchronous (`consistency: asp`): each step is one worker's, pushed without waiting for any
// version, and applied by each shard as it arrives, also before earlier steps (a straggler's).
// A dead worker's steps are completed by the master's empty stand-in pushes; whichever of the
// stand-in and the worker's own push reaches a shard second is dropped and counted.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "master/change_planner.hpp"
#include "master/chunk_dispenser.hpp"
#include "master/step_planner.hpp"
#include "ps/job_config.hpp"
#include "ps/shard.hpp"

namespace coach::ps {
using namespace coach::master;
namespace {

constexpr std::size_t num_keys = 48;
constexpr std::size_t slice_size = 4;  // 12 slices
constexpr std::int64_t num_steps = 40;
constexpr std::size_t num_samples = 100;  // an epoch: 12 chunks of 8 and one of 4
constexpr std::size_t chunk_size = 8;
constexpr int master_id = -1;
constexpr int worker_base = 1000;  // node id of worker r: worker_base + r

float known_gradient(std::uint32_t rank, std::int64_t step, std::size_t key) {
  std::uint64_t h = (std::uint64_t(rank) * 1000003u + std::uint64_t(step)) * 1000033u + key;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return float(int(h % 17) - 8);  // -8 .. 8
}

struct message {
  enum class kind { config, push, migrate, transfer, ack } k = kind::config;
  job_config cfg;  // config
  // push
  std::int64_t step = 0;
  std::uint64_t config_version = 0;
  std::uint32_t rank = 0;
  std::uint64_t samples = 0;
  std::vector<key_range> ranges;
  // migrate: hand `ranges` to `to` once `step` steps are applied
  std::uint32_t to = 0;
  slice_transfer t;   // transfer
  bool copy = false;  // a duplicate the network made (elastic_sim::duplicate_pushes)
};

/// A push's contribution: its worker's known gradient on the ranges it carries (none when it
/// has no samples).
contribution known_contribution(const message& m) {
  contribution c;
  c.rank = m.rank;
  c.samples = m.samples;
  if (m.samples == 0) return c;
  auto g = std::make_shared<std::vector<float>>();
  for (auto r : m.ranges)
    for (auto i = r.begin; i < r.end; ++i) g->push_back(known_gradient(m.rank, m.step, i));
  std::size_t off = 0;
  for (auto r : m.ranges) {
    c.parts.emplace_back(g->data() + off, r.size());
    off += r.size();
  }
  c.keep_alive = g;
  return c;
}

struct grant {
  std::int64_t step = 0;
  std::uint64_t config_version = 0;
  std::uint64_t samples = 0;
  shard_map map;       ///< where the step's pushes go
  shard_map pull_map;  ///< who answered the pushes of the step before (version `step`)
};

struct worker_sim {
  std::deque<grant> grants;
  bool alive = true;
  std::optional<std::int64_t> dies_at;  ///< pushes this step to some shards only, then dies
};

/// What each shard counted for a step: (rank, samples).
using counted_log = std::map<std::pair<std::uint32_t, std::int64_t>,
                             std::vector<std::pair<std::uint32_t, std::uint64_t>>>;

struct run_result {
  std::vector<float> params;
  std::vector<float> initial;
  std::vector<shard_map> maps;                                                ///< by step
  counted_log counted;                                                        ///< by (shard, step)
  std::vector<std::vector<std::pair<std::uint32_t, std::uint64_t>>> members;  ///< by step
  int joins = 0, leaves = 0, deaths = 0, adds = 0, drains = 0, migrations = 0;
  int held_for_moves = 0;  ///< pushes that reached a shard before the move they needed
  std::map<std::uint32_t, std::uint64_t> epoch_samples;  ///< reported, by epoch
  std::set<std::uint32_t> epochs_done;
  /// asp: pushes of a step a shard had a push of already (a dead worker's and its stand-in's).
  std::uint64_t second_pushes = 0;
  std::uint64_t dropped = 0;  ///< asp: what the shards dropped (shard::stale_dropped())
  std::uint64_t copies = 0;   ///< duplicated pushes delivered (elastic_sim::duplicate_pushes)
  std::uint64_t copies_refused = 0;  ///< errors of shards that met a copy
  int ahead = 0;  ///< asp: pushes that arrived before an earlier step was applied
};

class elastic_sim {
 public:
  elastic_sim(optimizer_config opt, std::uint64_t seed, bool deaths, bool overlap = false,
              bool asp = false)
      : opt_(opt),
        rng_(seed),
        deaths_(deaths),
        overlap_(overlap || asp),
        asp_(asp),
        be_(std::move(*kernels::make_backend(kernels::backend_kind::cpu))),
        dispenser_(num_samples, chunk_size, seed),
        planner_(dispenser_, 0, 1000) {
    if (asp) {
      options_.one_push_per_step = true;
      options_.max_ahead = std::numeric_limits<std::int32_t>::max();
    }
  }

  /// The network duplicates each push with probability `p`; the copy arrives later, after a
  /// random number of deliveries (up to 60: often after the step was applied, or past a
  /// change of configuration). Shards must refuse copies: every gradient still applies once.
  void duplicate_pushes(double p) { duplicates_ = p; }

  run_result run() {
    run_result out;
    // Initial parameters: small integers. Two shards, two workers.
    out.initial.resize(num_keys);
    for (std::size_t i = 0; i < num_keys; ++i) out.initial[i] = float(int(i % 7) - 3);
    cfg_.version = 1;
    cfg_.from_step = 0;
    cfg_.members = {0, 1};
    cfg_.map = shard_map::even(num_keys, slice_size, 2);
    next_rank_ = 2;
    for (std::uint32_t k = 0; k < 2; ++k) {
      std::vector<float> owned;
      for (auto r : cfg_.map.ranges_of(k))
        owned.insert(owned.end(), out.initial.begin() + std::ptrdiff_t(r.begin),
                     out.initial.begin() + std::ptrdiff_t(r.end));
      shards_[k] = std::make_unique<shard>(k, opt_, *be_, cfg_.map.ranges_of(k), owned, options_);
      shards_[k]->configure(cfg_);
    }
    workers_[0];
    workers_[1];

    for (std::int64_t s = 0; s < num_steps; ++s) {
      boundary(s, out);
      out.maps.push_back(cfg_.map);
      open_step(s, out);
      // Deliver a random amount before the next boundary, so boundaries overlap steps in flight.
      const int spin = int(rng_() % 40);
      for (int i = 0; i < spin && tick(out); ++i) {
      }
      // A death is announced before the next boundary (the master orders configurations).
      while (pending_death_) EXPECT_TRUE(tick(out)) << "stuck waiting for a death";
    }
    while (tick(out)) {
    }
    // Every shard that owns slices applied every step.
    std::vector<float> params(num_keys, std::nanf(""));
    for (auto& [k, sh] : shards_) {
      if (sh->ranges().empty()) continue;
      EXPECT_EQ(sh->applied_steps(), num_steps) << "shard " << k;
      EXPECT_EQ(sh->ranges(), cfg_.map.ranges_of(k)) << "shard " << k;
      std::size_t off = 0;
      for (auto r : sh->ranges()) {
        std::copy_n(sh->values().data() + off, r.size(), params.begin() + std::ptrdiff_t(r.begin));
        off += r.size();
      }
    }
    for (auto& [k, sh] : shards_) out.dropped += sh->stale_dropped();
    out.params = std::move(params);
    return out;
  }

 private:
  void send(int from, int to, message m) {
    if (m.k == message::kind::push && duplicates_ > 0 &&
        std::uniform_real_distribution<double>(0, 1)(rng_) < duplicates_) {
      message copy = m;
      copy.copy = true;
      late_.push_back({int(rng_() % 60), {from, to}, std::move(copy)});
    }
    channels_[{from, to}].push_back(std::move(m));
  }

  /// Copies whose time has come join their channels (all of them when nothing else moves).
  void release_late(bool all) {
    for (auto it = late_.begin(); it != late_.end();)
      if (all || --it->ticks <= 0) {
        channels_[it->channel].push_back(std::move(it->m));
        it = late_.erase(it);
      } else {
        ++it;
      }
  }

  /// A shard's error is fine only when it refused a copy (the network's, not a worker's).
  void expect_ok_or_copy(const coach::error* e, run_result& out, const std::string& what) {
    if (!e) return;
    const bool about_copy =
        duplicates_ > 0 && (e->message.find("twice") != std::string::npos ||
                            e->message.find("open step is") != std::string::npos);
    if (about_copy) {
      ++out.copies_refused;
      return;
    }
    ADD_FAILURE() << what << ": " << e->message;
  }

  std::vector<std::uint32_t> live_shards() const {
    std::vector<std::uint32_t> out;
    const auto n = cfg_.map.load();
    for (std::uint32_t k = 0; k < n.size(); ++k)
      if (n[k] > 0) out.push_back(k);
    return out;
  }

  /// Maybe one change of the configuration, taking effect at step s.
  void boundary(std::int64_t s, run_result& out) {
    if (s == 0 || rng_() % 10 >= 4) return;
    // The next change begins once the transfers of the one before are acknowledged.
    while (acks_awaited_ > 0) ASSERT_TRUE(tick(out)) << "stuck waiting for transfers";
    // The change itself is the job master's: master::plan_change.
    const auto live = live_shards();
    const auto n_members = std::uint32_t(cfg_.members.size());
    using kind = job_change::kind_type;
    job_change c;
    switch (rng_() % 5) {
      case 0:  // a worker joins
        if (n_members >= 6) return;
        c = {kind::workers, n_members + 1, {}};
        ++out.joins;
        break;
      case 1:  // a worker leaves (the newest)
        if (n_members <= 1) return;
        c = {kind::workers, n_members - 1, {}};
        ++out.leaves;
        break;
      case 2:  // a shard is added
        c = {kind::shards, std::uint32_t(live.size() + 1), {}};
        ++out.adds;
        break;
      case 3:  // a shard is drained (the newest)
        if (live.size() <= 1) return;
        c = {kind::shards, std::uint32_t(live.size() - 1), {}};
        ++out.drains;
        break;
      case 4:  // a shard migrates whole to a new place
        c = {kind::migrate, live[rng_() % live.size()], {}};
        ++out.migrations;
        break;
    }
    change_starters start;
    start.worker = [&](std::uint32_t r, const job_config&) {
      workers_[r];
      return true;
    };
    start.shard = [&]() -> std::optional<std::uint32_t> { return next_shard(); };
    auto plan = plan_change(cfg_, c, s, next_rank_, start);
    EXPECT_TRUE(plan.ignored.empty()) << plan.ignored;
    for (auto& o : plan.orders) {
      message m;
      m.k = message::kind::migrate;
      m.step = o.at_version;
      m.ranges = o.ranges;
      m.to = o.to;
      send(master_id, int(o.from), std::move(m));
      ++acks_awaited_;
    }
    job_config next = std::move(plan.next);
    if (!overlap_) {
      while (acks_awaited_ > 0) ASSERT_TRUE(tick(out)) << "stuck waiting for transfers";
    }
    cfg_ = std::move(next);
    for (auto& [k, sh] : shards_) {
      message m;
      m.k = message::kind::config;
      m.cfg = cfg_;
      send(master_id, int(k), std::move(m));
    }
  }

  std::uint32_t next_shard() {
    const std::uint32_t k = next_shard_id_++;
    shards_[k] = std::make_unique<shard>(k, opt_, *be_, std::vector<key_range>{},
                                         std::span<const float>{}, options_);
    // A shard started now learns the configuration first, as a node starts it with the job's.
    shards_[k]->configure(cfg_);
    return k;
  }

  /// Opens step s (the step planner: for every member, or under asp for one, the worker that
  /// asked) and grants it; maybe one of its members is to die while pushing it.
  void open_step(std::int64_t s, run_result& out) {
    next_step_ = s + 1;
    step_cfg_[s] = cfg_;
    std::vector<std::uint32_t> members = cfg_.members;
    if (asp_) members = {cfg_.members[rng_() % cfg_.members.size()]};
    // The epoch's last chunks are out: the next epoch waits for them, as the master parks the
    // requests until their reports come.
    while (!planner_.open(members, false)) ASSERT_TRUE(tick(out)) << "stuck at an epoch's end";
    ASSERT_EQ(planner_.open_step(), s);
    if (deaths_ && cfg_.members.size() >= 2 && rng_() % 10 == 0) {
      const auto victim = members[rng_() % members.size()];
      workers_[victim].dies_at = s;
      pending_death_ = true;
      ++out.deaths;
    }
    std::vector<std::pair<std::uint32_t, std::uint64_t>> counted;
    // Version s comes from the shards the pushes of step s - 1 went to (out.maps holds step s's
    // map already), or, sequentially, from the owners of step s, which have it by then.
    const auto& pull = overlap_ && out.maps.size() >= 2 ? out.maps[out.maps.size() - 2] : cfg_.map;
    for (auto r : members) {
      const auto g = planner_.take(r, s);
      using kind = master::step_planner::grant::kind;
      ASSERT_TRUE(g.what == kind::chunk || g.what == kind::no_chunk) << "rank " << r;
      std::uint64_t samples = 0;
      for (const auto& c : g.chunks) samples += c.size();
      counted.push_back({r, samples});
      workers_[r].grants.push_back({s, cfg_.version, samples, cfg_.map, pull});
    }
    out.members.push_back(std::move(counted));
  }

  /// asp: the job master's answer to a death. Steps from the next one to open expect the worker
  /// no more, and every step it was granted and did not report is completed by an empty push
  /// made on its behalf to each shard of that step (master_actor.cpp, stand_in()); its chunks
  /// go back to the dispenser.
  void lose_alone(std::uint32_t r) {
    const auto orphans = planner_.unreported(r);
    const std::uint32_t ranks[] = {r};
    planner_.drop(ranks, orphans.empty() ? next_step_ : orphans.front());
    cfg_.version += 1;
    cfg_.from_step = next_step_;
    std::erase(cfg_.members, r);
    for (auto& [k, sh] : shards_) {
      message m;
      m.k = message::kind::config;
      m.cfg = cfg_;
      send(master_id, int(k), std::move(m));
    }
    for (const auto step : orphans) {
      const auto& c = step_cfg_.at(step);
      const auto n = c.map.load();
      for (std::uint32_t k = 0; k < n.size(); ++k) {
        if (n[k] == 0) continue;
        message m;
        m.k = message::kind::push;
        m.step = step;
        m.config_version = c.version;
        m.rank = r;
        m.samples = 0;
        m.ranges = c.map.ranges_of(k);
        send(master_id, int(k), std::move(m));
      }
    }
    pending_death_ = false;
  }

  /// One event: a ready worker pushes, or one message is delivered. False when nothing is left.
  bool tick(run_result& out) {
    release_late(false);
    std::vector<std::uint32_t> ready, slow;
    for (auto& [r, w] : workers_)
      if (w.alive && !w.grants.empty() && can_push(w.grants.front())) {
        // asp: every third rank is a straggler, which lets later steps be applied before its.
        const bool lags = asp_ && r % 3 == 0 && rng_() % 32 != 0;
        (lags ? slow : ready).push_back(r);
      }
    std::vector<std::pair<int, int>> busy;
    for (auto& [key, q] : channels_)
      if (!q.empty()) busy.push_back(key);
    if (ready.empty() && busy.empty()) ready = std::move(slow);
    if (ready.empty() && busy.empty() && !late_.empty()) {
      release_late(true);
      return true;
    }
    if (ready.empty() && busy.empty()) return false;
    const std::size_t pick = rng_() % (ready.size() + busy.size());
    if (pick < ready.size())
      push_from(ready[pick], out);
    else
      deliver(busy[pick - ready.size()], out);
    return true;
  }

  /// A worker's pull of version g.step returned: every shard it pulls from has applied g.step.
  bool can_push(const grant& g) const {
    if (asp_) return true;  // any version will do: the first pull's
    const auto n = g.pull_map.load();
    for (std::uint32_t k = 0; k < n.size(); ++k)
      if (n[k] > 0 && shards_.at(k)->applied_steps() < g.step) return false;
    return true;
  }

  void push_from(std::uint32_t r, run_result& out) {
    auto& w = workers_[r];
    grant g = std::move(w.grants.front());
    w.grants.pop_front();
    const bool dying = w.dies_at && *w.dies_at == g.step;
    const auto n = g.map.load();
    for (std::uint32_t k = 0; k < n.size(); ++k) {
      if (n[k] == 0) continue;
      if (dying && rng_() % 2 == 0) continue;  // died before this push left
      message m;
      m.k = message::kind::push;
      m.step = g.step;
      m.config_version = g.config_version;
      m.rank = r;
      m.samples = g.samples;
      m.ranges = g.map.ranges_of(k);
      send(worker_base + int(r), int(k), std::move(m));
    }
    if (!dying) {
      // The worker reports the step (the master's on_report).
      const auto rep = planner_.report(r, g.step);
      ASSERT_TRUE(rep.known) << "rank " << r << " step " << g.step;
      for (const auto& c : rep.chunks_done) out.epoch_samples[c.epoch] += c.size();
      if (rep.epoch_done) out.epochs_done.insert(rep.chunks_done.front().epoch);
      return;
    }
    w.alive = false;
    w.grants.clear();
    if (asp_) return lose_alone(r);
    {
      // The master notices and removes it from the step it did not report on; its chunks of
      // that step go back.
      const std::uint32_t ranks[] = {r};
      planner_.drop(ranks, g.step);
      cfg_.version += 1;
      cfg_.from_step = g.step;
      std::erase(cfg_.members, r);
      death_version_[g.step] = cfg_.version;
      for (auto& [k, sh] : shards_) {
        message m;
        m.k = message::kind::config;
        m.cfg = cfg_;
        send(master_id, int(k), std::move(m));
      }
      pending_death_ = false;
    }
  }

  void deliver(std::pair<int, int> key, run_result& out) {
    message m = std::move(channels_[key].front());
    channels_[key].pop_front();
    const int from = key.first;
    const int to = key.second;
    if (to == master_id) {
      ASSERT_EQ(m.k, message::kind::ack);
      --acks_awaited_;
      return;
    }
    auto& sh = *shards_.at(std::uint32_t(to));
    switch (m.k) {
      case message::kind::config: {
        auto done = sh.configure(m.cfg);
        expect_ok_or_copy(done ? nullptr : &done.error(), out, "configure");
        if (::testing::Test::HasFailure()) return;
        if (death_version_.contains(m.cfg.from_step) &&
            death_version_[m.cfg.from_step] == m.cfg.version)
          death_seen_.insert({std::uint32_t(to), m.cfg.from_step});
        run_deferred(std::uint32_t(to));
        break;
      }
      case message::kind::push: {
        if (asp_) return deliver_alone(std::uint32_t(to), std::move(m), out);
        if (m.copy) {  // never counted; refused now or when it is taken from the held pushes
          ++out.copies;
          auto done = sh.push(m.step, m.config_version, known_contribution(m));
          expect_ok_or_copy(done ? nullptr : &done.error(), out, "a copy");
          run_deferred(std::uint32_t(to), &out);
          break;
        }
        const bool from_victim = workers_[m.rank].dies_at && *workers_[m.rank].dies_at == m.step;
        const bool counted = !from_victim || !death_seen_.contains({std::uint32_t(to), m.step});
        contribution c = known_contribution(m);
        if (m.step >= sh.applied_steps() && !sh.owns_assigned(m.step)) ++out.held_for_moves;
        auto done = sh.push(m.step, m.config_version, std::move(c));
        if (counted) {
          ASSERT_TRUE(done) << "shard " << to << " refused a push of rank " << m.rank << " step "
                            << m.step << ": " << done.error().message;
          out.counted[{std::uint32_t(to), m.step}].push_back({m.rank, m.samples});
        } else {
          ASSERT_FALSE(done) << "shard " << to << " took a push of dead rank " << m.rank
                             << " after its removal";
        }
        run_deferred(std::uint32_t(to), &out);
        break;
      }
      case message::kind::migrate:
        deferred_[std::uint32_t(to)].push_back(std::move(m));
        run_deferred(std::uint32_t(to), &out);
        break;
      case message::kind::transfer:
        deferred_[std::uint32_t(to)].push_back(std::move(m));
        run_deferred(std::uint32_t(to), &out);
        break;
      case message::kind::ack:
        FAIL() << "an ack for a shard from " << from;
    }
  }

  /// asp: the first push of a step to reach a shard is applied (or held for a move and applied
  /// after it), a second one (a dead worker's and its stand-in) is dropped.
  void deliver_alone(std::uint32_t to, message m, run_result& out) {
    auto& sh = *shards_.at(to);
    contribution c = known_contribution(m);
    if (m.step >= sh.applied_steps() && !sh.owns_assigned(m.step)) ++out.held_for_moves;
    if (m.step > sh.applied_steps() && sh.owns_assigned(m.step)) ++out.ahead;
    auto done = sh.push(m.step, m.config_version, std::move(c));
    ASSERT_TRUE(done) << "shard " << to << " refused a push of rank " << m.rank << " step "
                      << m.step << ": " << done.error().message;
    if (auto& log = out.counted[{to, m.step}]; log.empty())
      log.push_back({m.rank, m.samples});
    else
      ++out.second_pushes;
    run_deferred(to);
  }

  /// A source releases once it has applied every step before the boundary; a destination that
  /// owns slices adopts once it is at the transfer's version too (one that owns none at once).
  void run_deferred(std::uint32_t k, run_result* out = nullptr) {
    auto& d = deferred_[k];
    auto& sh = *shards_.at(k);
    for (bool again = true; again;) {
      again = false;
      for (auto it = d.begin(); it != d.end();) {
        const bool adopt = it->k == message::kind::transfer;
        const std::int64_t at = adopt ? it->t.version : it->step;
        if (!(adopt && sh.ranges().empty()) && sh.applied_steps() != at) {
          ASSERT_LT(sh.applied_steps(), at) << "shard " << k << " passed a boundary";
          ++it;
          continue;
        }
        if (adopt) {
          auto ok = sh.adopt(std::move(it->t));  // an empty shard takes the storage
          ASSERT_TRUE(ok) << ok.error().message;
          message a;
          a.k = message::kind::ack;
          send(int(k), master_id, std::move(a));
        } else {
          auto t = sh.release(it->ranges, it->to);
          ASSERT_TRUE(t) << t.error().message;
          message m;
          m.k = message::kind::transfer;
          m.t = std::move(*t);
          send(int(k), int(it->to), std::move(m));
        }
        auto resumed = sh.resume();  // the pushes that waited for the move
        if (!resumed && out)
          expect_ok_or_copy(&resumed.error(), *out, "resume");
        else
          ASSERT_TRUE(resumed) << resumed.error().message;
        it = d.erase(it);
        again = true;
      }
    }
  }

  optimizer_config opt_;
  std::mt19937_64 rng_;
  bool deaths_;
  bool overlap_;
  bool asp_;
  shard_options options_;
  std::unique_ptr<kernels::backend> be_;
  job_config cfg_;
  std::map<std::uint32_t, std::unique_ptr<shard>> shards_;
  std::map<std::uint32_t, worker_sim> workers_;
  std::map<std::pair<int, int>, std::deque<message>> channels_;
  struct late_copy {
    int ticks;
    std::pair<int, int> channel;
    message m;
  };
  std::vector<late_copy> late_;  ///< duplicated pushes on their way
  double duplicates_ = 0;
  std::map<std::uint32_t, std::vector<message>> deferred_;
  std::map<std::int64_t, std::uint64_t>
      death_version_;  ///< step -> the config that removed its victim
  std::set<std::pair<std::uint32_t, std::int64_t>> death_seen_;
  std::uint32_t next_rank_ = 0;
  std::uint32_t next_shard_id_ = 2;
  int acks_awaited_ = 0;
  bool pending_death_ = false;
  std::int64_t next_step_ = 0;                   ///< the next step to open
  std::map<std::int64_t, job_config> step_cfg_;  ///< the configuration of each step opened
  master::chunk_dispenser dispenser_;
  master::step_planner planner_;
};

/// The parameters plain SGD (lr 0.5) must end with, from what each shard counted: each step's
/// gradients summed (exact: small integers) and applied with the backend's update.
std::vector<float> expected_sgd(const run_result& r) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  const kernels::sgd_options plain{0.5f, 0.0f, 0.0f};
  std::vector<float> w = r.initial;
  for (std::int64_t s = 0; s < num_steps; ++s) {
    const auto& map = r.maps[std::size_t(s)];
    for (std::uint32_t k = 0; k < map.num_shards(); ++k) {
      auto it = r.counted.find({k, s});
      if (map.ranges_of(k).empty()) continue;
      EXPECT_NE(it, r.counted.end()) << "shard " << k << " counted nothing at step " << s;
      if (it == r.counted.end()) continue;
      std::uint64_t total = 0;
      for (auto [rank, n] : it->second) total += n;
      if (total == 0) continue;
      for (auto range : map.ranges_of(k)) {
        std::vector<float> sum(range.size(), 0.0f);
        for (auto i = range.begin; i < range.end; ++i)
          for (auto [rank, n] : it->second)
            if (n > 0) sum[i - range.begin] += known_gradient(rank, s, i);
        be->sgd_update(w.data() + range.begin, nullptr, sum.data(), sum.size(),
                       float(1.0 / double(total)), plain);
      }
    }
  }
  return w;
}

/// Every epoch the step planner saw completed had each of its samples reported once.
void expect_no_chunk_lost(const run_result& r, std::uint64_t seed) {
  EXPECT_FALSE(r.epochs_done.empty()) << "seed " << seed;
  for (auto e : r.epochs_done)
    EXPECT_EQ(r.epoch_samples.at(e), num_samples) << "seed " << seed << " epoch " << e;
}

/// Every gradient applied exactly once (the parameters of the sum in step order) and every
/// chunk of every finished epoch trained once.
void expect_every_gradient_once(const run_result& r, std::uint64_t seed) {
  const auto want = expected_sgd(r);
  for (std::size_t i = 0; i < num_keys; ++i)
    ASSERT_EQ(r.params[i], want[i]) << "seed " << seed << " key " << i;
  expect_no_chunk_lost(r, seed);
}

/// The same contributions through one shard that never migrates.
std::vector<float> unmigrated(const run_result& r, const optimizer_config& opt) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  shard one(0, opt, *be, {{0, num_keys}}, r.initial);
  for (std::int64_t s = 0; s < num_steps; ++s) {
    std::vector<std::uint32_t> ranks;
    for (auto [rank, n] : r.members[std::size_t(s)]) ranks.push_back(rank);
    one.set_members(ranks);
    for (auto [rank, n] : r.members[std::size_t(s)]) {
      auto g = std::make_shared<std::vector<float>>(num_keys);
      for (std::size_t i = 0; i < num_keys; ++i) (*g)[i] = known_gradient(rank, s, i);
      contribution c;
      c.rank = rank;
      c.samples = n;
      if (n > 0) c.parts.emplace_back(g->data(), num_keys);
      c.keep_alive = g;
      EXPECT_TRUE(one.push(s, std::move(c)));
    }
  }
  return {one.values().begin(), one.values().end()};
}

TEST(elastic_property, random_rescales_migrations_and_deaths_apply_every_gradient_once) {
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  opt.sgd = {0.5f, 0.0f, 0.0f};
  int joins = 0, leaves = 0, deaths = 0, adds = 0, drains = 0, migrations = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    elastic_sim sim(opt, seed, true);
    auto r = sim.run();
    if (HasFatalFailure()) return;
    expect_every_gradient_once(r, seed);
    if (HasFatalFailure()) return;
    joins += r.joins, leaves += r.leaves, deaths += r.deaths;
    adds += r.adds, drains += r.drains, migrations += r.migrations;
  }
  // The seeds exercise every kind of change many times.
  EXPECT_GT(joins, 20);
  EXPECT_GT(leaves, 20);
  EXPECT_GT(deaths, 20);
  EXPECT_GT(adds, 20);
  EXPECT_GT(drains, 20);
  EXPECT_GT(migrations, 20);
}

TEST(elastic_property, duplicated_and_late_pushes_are_refused_and_every_gradient_applies_once) {
  // The network (a faulty_transport, say) delivers a tenth of the pushes twice, the copy late:
  // within the step, after it was applied, or after a rescale, a migration or a death.
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  opt.sgd = {0.5f, 0.0f, 0.0f};
  std::uint64_t copies = 0, refused = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed)
    for (bool overlap : {false, true}) {
      elastic_sim sim(opt, seed, !overlap, overlap);
      sim.duplicate_pushes(0.1);
      auto r = sim.run();
      if (HasFailure()) return;
      expect_every_gradient_once(r, seed);
      if (HasFatalFailure()) return;
      copies += r.copies;
      refused += r.copies_refused;
    }
  EXPECT_GT(copies, 500u);
  EXPECT_GT(refused, 0u);
}

TEST(elastic_property, workers_push_while_slices_travel_and_every_gradient_applies_once) {
  // The job master's way: the boundary's grants go out with the migrate orders, so pushes reach
  // destinations before their slices (and sources before they release); the shards hold them.
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  opt.sgd = {0.5f, 0.0f, 0.0f};
  int moves = 0, held = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    elastic_sim sim(opt, seed, false, true);
    auto r = sim.run();
    if (HasFatalFailure()) return;
    expect_every_gradient_once(r, seed);
    if (HasFatalFailure()) return;
    moves += r.adds + r.drains + r.migrations;
    held += r.held_for_moves;
  }
  EXPECT_GT(moves, 60);
  EXPECT_GT(held, 20) << "pushes overtook the slices they needed";
}

TEST(elastic_property, asp_applies_every_pushed_gradient_exactly_once) {
  // Asynchronous: each step is one worker's and the shards apply it as it arrives, also ahead of
  // earlier steps still out, under random joins, leaves, deaths, additions, drains and
  // migrations. Every gradient lands once at the shards that own its keys at its step: the final
  // parameters are exactly those of the steps' gradients, each applied once; a dead worker's
  // step is completed by one of its own push or the stand-in, and the other is dropped.
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  opt.sgd = {0.5f, 0.0f, 0.0f};
  int changes = 0, deaths = 0, held = 0, ahead = 0;
  std::uint64_t second = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    elastic_sim sim(opt, seed, true, true, true);
    auto r = sim.run();
    if (HasFatalFailure()) return;
    expect_every_gradient_once(r, seed);
    if (HasFatalFailure()) return;
    ASSERT_EQ(r.dropped, r.second_pushes) << "seed " << seed;
    changes += r.joins + r.leaves + r.adds + r.drains + r.migrations;
    deaths += r.deaths;
    held += r.held_for_moves;
    second += r.second_pushes;
    ahead += r.ahead;
  }
  EXPECT_GT(changes, 300);
  EXPECT_GT(deaths, 20);
  EXPECT_GT(held, 20) << "pushes overtook the slices they needed";
  EXPECT_GT(second, 20u) << "stand-ins raced the dead workers' own pushes";
  EXPECT_GT(ahead, 50) << "later steps were applied before a straggler's";
}

class elastic_invisible : public ::testing::TestWithParam<optimizer_kind> {};

TEST_P(elastic_invisible, migrated_run_is_bitwise_equal_to_one_unmigrated_shard) {
  optimizer_config opt;
  opt.kind = GetParam();
  opt.sgd = {0.05f, GetParam() == optimizer_kind::momentum ? 0.9f : 0.0f, 1e-3f};
  opt.adam.learning_rate = 0.01f;
  for (std::uint64_t seed = 100; seed < 120; ++seed)
    for (bool overlap : {false, true}) {
      elastic_sim sim(opt, seed, false, overlap);
      auto r = sim.run();
      if (HasFatalFailure()) return;
      const auto want = unmigrated(r, opt);
      ASSERT_EQ(0, std::memcmp(r.params.data(), want.data(), num_keys * sizeof(float)))
          << "seed " << seed << (overlap ? " (overlapped)" : "");
    }
}

INSTANTIATE_TEST_SUITE_P(optimizers, elastic_invisible,
                         ::testing::Values(optimizer_kind::sgd, optimizer_kind::momentum,
                                           optimizer_kind::adam));

}  // namespace
}  // namespace coach::ps
