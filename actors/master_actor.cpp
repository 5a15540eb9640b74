#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>

#include <deque>
#include <set>
#include <span>

#include "actors/elastic_messages.hpp"
#include "actors/roles.hpp"
#include "common/format.hpp"
#include "common/log.hpp"
#include "ps/adascale.hpp"
#include "ps/change_planner.hpp"
#include "ps/key_coverage.hpp"
#include "ps/snapshot_assembler.hpp"
#include "scheduler/change_sequencer.hpp"
#include "scheduler/change_timer.hpp"
#include "scheduler/epoch_ledger.hpp"
#include "worker/chunk_dispenser.hpp"
#include "worker/step_planner.hpp"

namespace coach::actors {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

using scheduler::change_request;

struct master_state {
  std::shared_ptr<const job_context> ctx;
  caf::actor me;  ///< this actor, for answers from the evaluator (dropped with the state)
  caf::actor observer;
  caf::actor evaluator;
  std::unique_ptr<worker::chunk_dispenser> dispenser;
  master_options options;
  bool cancelled = false;
  bool done = false;
  /// Who computes what at each step (worker/step_planner.hpp).
  std::optional<worker::step_planner> planner;
  std::vector<wire_message> parked;  ///< chunk requests waiting for the epoch to complete
  /// Each epoch's parameters (and, for a checkpoint, state) at its end, sent with its report.
  std::map<std::uint32_t, param_snapshot> epoch_params;
  /// Whether each epoch's end is checkpointed with the optimizer state: options.checkpoint_due,
  /// asked once per epoch (an epoch whose end moves keeps its answer).
  std::map<std::uint32_t, bool> checkpointed;
  /// The versions wanted whole: epochs' ends and a cancelled job's last (ps/snapshot_assembler).
  std::optional<ps::snapshot_assembler> snapshots;
  std::size_t snapshots_state_per_param = 0;  ///< optimizer floats per key (the shards')
  std::shared_ptr<const std::vector<float>> last_params;
  std::int64_t last_version = 0;  ///< last_params' version: the steps applied since the seed
  std::int64_t stop_step = -1;    ///< cancelled: the step it stopped at (whose version is final)
  scheduler::job_result result;
  clock_type::time_point job_start = clock_type::now();
  clock_type::time_point last_progress = clock_type::now();
  // Elastic (docs/design.md "Elastic jobs").
  elastic_hooks hooks;  ///< starts new workers and shards
  /// Links this master to a part it added, so the job's parts stop together.
  std::function<void(const caf::actor&)> link;
  /// The configuration of the open step and the changes queued, prepared and under way.
  std::optional<scheduler::change_sequencer> changes;
  const ps::job_config& cfg() const { return changes->current(); }
  // Timing of changes (scheduler::change_report).
  scheduler::steady_clock_source clock;
  scheduler::change_timer timer{clock};
  scheduler::epoch_ledger ledger{clock};
  std::uint32_t next_rank = 0;
  std::uint32_t next_shard = 0;
  /// Every configuration published, by first step: the members each step expects, and (asp)
  /// where its pushes go.
  std::map<std::int64_t, ps::job_config> configs;
  std::map<std::uint32_t, std::int64_t> last_report;  ///< by rank: the last step reported
  std::map<std::int64_t, step_trace> traces;  ///< on_step: the steps granted, until complete
  ps::adascale_gain gain;  ///< lr_scaling adascale: the shards' estimate, followed (follow_gain)
  double last_gain = 0;    ///< the gain of the last completed step (adascale; else 0)
  /// Function mode: each rank's invocation counts so far (a step report carries its totals).
  std::map<std::uint32_t, worker::invocation_counts> invocations;
  std::string last_worker_error;                     ///< why the last worker that failed did
  std::map<caf::actor_addr, std::uint32_t> watched;  ///< worker actors, to their ranks
  /// Worker actors, stopped when the master stops (shared with the master's exit functor).
  std::shared_ptr<std::vector<caf::actor>> worker_actors =
      std::make_shared<std::vector<caf::actor>>();
  /// Monitors a worker: its death drops it from the job (workers_lost).
  std::function<void(std::uint32_t, const caf::actor&)> watch;
  static inline const char* name = "coach.job_master";

  /// Shards that own slices now.
  std::vector<std::uint32_t> live_shards() const { return changes->live_shards(); }
  /// live_shards().size(), counted once per configuration version (each step's ledger entry
  /// asks for it; a change is rare).
  std::uint32_t live_shard_count() {
    if (counted_version != cfg().version) {
      counted_version = cfg().version;
      live_count = std::uint32_t(live_shards().size());
    }
    return live_count;
  }
  std::uint64_t counted_version = 0;
  std::uint32_t live_count = 0;

  std::uint32_t num_epochs() const { return std::uint32_t(ctx->spec.epochs); }

  wire_message to(const endpoint& dst, msg_kind kind, std::int64_t step) const {
    wire_message m;
    m.hdr.src = ctx->master;
    m.hdr.dst = dst;
    m.hdr.kind = kind;
    m.hdr.job = ctx->job;
    m.hdr.map_version = cfg().version;
    m.hdr.step = step;
    return m;
  }

  /// Starts the change `a` at step s: new parts, slices to move. True when step s can open now
  /// (nothing to start elsewhere: the new configuration is published with the migrate orders,
  /// and the transfers go on under step s); otherwise step s waits for the new parts.
  bool begin_change(std::int64_t s, const change_request& req) {
    timer.begin(scheduler::describe(req), s, req.requested, req.prepared);
    std::size_t elsewhere = 0;  // parts starting on other nodes
    ps::change_starters start;
    start.worker = [&](std::uint32_t r, const ps::job_config& next) {
      if (!hooks.add_worker) {
        log::warn("job master: this job cannot add workers here");
        return false;
      }
      auto ok = hooks.add_worker(r, next, s, std::string{});
      if (!ok) {
        log::warn("job master: cannot add worker {}: {}", r, ok.error().message);
        return false;
      }
      if (*ok)
        watch(r, *ok);
      else
        ++elsewhere;
      return true;
    };
    start.shard = [&]() -> std::optional<std::uint32_t> {
      if (!hooks.add_shard) {
        log::warn("job master: this job cannot add shards here");
        return std::nullopt;
      }
      const std::uint32_t k = next_shard++;
      auto ok = hooks.add_shard(k, cfg(), req.node, 0);
      if (!ok) {
        log::warn("job master: cannot add shard {}: {}", k, ok.error().message);
        return std::nullopt;
      }
      if (*ok)
        link(*ok);
      else
        ++elsewhere;
      return k;
    };
    auto plan = ps::plan_change(cfg(), scheduler::to_job_change(req), s, next_rank, start);
    if (!plan.ignored.empty()) {
      log::info("job master: {}", plan.ignored);
      return true;
    }
    if (!plan.added.empty()) timer.adds_workers();
    const std::size_t floats_per_key = 1 + scheduler::shard_optimizer(ctx->spec).state_per_param();
    timer.add_moved_bytes(plan.moved_keys * floats_per_key * sizeof(float));
    if (!changes->begun(std::move(plan), elsewhere)) return false;
    return send_orders();
  }

  /// The change's parts are up: sends its migrate orders, then publishes the configuration at
  /// once: the workers go on with the step while the slices travel (a shard holds the step's
  /// pushes until it owns what the configuration gives it; ps::shard::owns_assigned), so the
  /// pause is what is left of the transfer when the workers' pushes arrive. The next change
  /// begins once every transfer is acknowledged. Returns true (step s can open).
  bool send_orders() {
    auto orders = changes->publish();
    if (!orders.empty()) timer.orders_sent();
    // Before the configuration, from this same sender: a source has its order when the
    // configuration that takes its slices away arrives.
    for (auto& o : orders)
      ctx->net->send(
          make_migrate(ctx->master, ctx->shard_ep(o.from), ctx->job,
                       migrate_order{o.at_version, o.to, o.config_version, std::move(o.ranges)}));
    send_config(cfg());
    report_layout();
    return true;
  }

  /// A part started elsewhere is up (or could not start: `why` says why).
  void on_ready(bool worker, std::uint32_t id, const std::string& why) {
    if (!worker && changes->is_preparing(id)) {
      auto c = *changes->prepared(id);
      if (!why.empty()) {
        log::warn("job {}: cannot add shard {}: {}; the migration is dropped", ctx->job, id, why);
        return;
      }
      c.prepared = timer.now();
      request_change(std::move(c));
      return;
    }
    if (!why.empty())
      log::warn("job {}: cannot add {} {}: {}", ctx->job, worker ? "worker" : "shard", id, why);
    const auto step = changes->next() ? changes->next()->from_step : 0;
    using news = scheduler::change_sequencer::part_news;
    switch (changes->part_ready(worker, id, why.empty())) {
      case news::unexpected:
        log::warn("job master: unexpected news of {} {}", worker ? "worker" : "shard", id);
        return;
      case news::waiting:
        return;
      case news::dropped:
        log::info("job {}: the change at step {} is dropped; the job goes on as it was", ctx->job,
                  step);
        break;
      case news::ready:
        send_orders();  // the step opens now; the transfers go on under it
        break;
    }
    regrant_parked();
  }

  /// Queues a change asked for while the job runs, for its next step boundary. Empty: queued;
  /// otherwise why it is refused.
  std::string request_change(change_request c) {
    if (done || cancelled) return "the job is ending";
    if (!c.requested) c.requested = timer.now();
    changes->queue(std::move(c), planner->open_step() + 1);
    log::info("job {}: change asked for at step {}", ctx->job, planner->open_step() + 1);
    // Workers waiting at the boundary (a step that could not open) try again.
    regrant_parked();
    return {};
  }

  std::string rescale(std::uint32_t workers, std::uint32_t shards) {
    using kind = scheduler::schedule_action::kind_type;
    const auto& sp = ctx->spec;
    if (workers != 0 && (int(workers) < sp.workers.min || int(workers) > sp.workers.max))
      return coach::format("--workers {} is outside the job's workers range [{}, {}]", workers,
                           sp.workers.min, sp.workers.max);
    if (shards != 0 && (int(shards) < sp.shards.min || int(shards) > sp.shards.max))
      return coach::format("--shards {} is outside the job's shards range [{}, {}]", shards,
                           sp.shards.min, sp.shards.max);
    if (workers == 0 && shards == 0) return "nothing to change: give --workers or --shards";
    if (workers > changes->planned_members().size() && !hooks.add_worker)
      return "this job cannot add workers here";
    if (shards > changes->planned_live_shards().size() && !hooks.add_shard)
      return "this job cannot add shards here";
    if (workers != 0)
      if (auto why = request_change({{0, kind::workers, workers}, {}}); !why.empty()) return why;
    if (shards != 0) return request_change({{0, kind::shards, shards}, {}});
    return {};
  }

  std::string migrate(std::uint32_t shard, const std::string& node) {
    using kind = scheduler::schedule_action::kind_type;
    if (!hooks.add_shard) return "this job cannot add shards here";
    const auto live = changes->planned_live_shards();
    if (std::find(live.begin(), live.end(), shard) == live.end()) {
      std::string names;
      for (auto k : live) names += (names.empty() ? "" : ", ") + std::to_string(k);
      return coach::format("shard {} owns no slices (live shards: {})", shard, names);
    }
    if (done || cancelled) return "the job is ending";
    // The new shard starts now, while the job trains: its node warms the memory the slices will
    // arrive in (a first write to memory the host has dropped runs at ~0.1 GB/s here, seconds for
    // a large shard, docs/performance.md "rescale_bench"), and the change takes the first step
    // boundary after that, so the pause is the transfer alone.
    change_request c{{0, kind::migrate, shard}, node, timer.now(), std::nullopt, {}};
    std::uint64_t keys = 0;
    for (const auto& r : changes->planned_map().ranges_of(shard)) keys += r.size();
    const std::uint32_t k = next_shard++;
    auto ok = hooks.add_shard(k, cfg(), node, keys);
    if (!ok) return coach::format("cannot add shard {}: {}", k, ok.error().message);
    c.shard = k;
    if (!*ok) {  // starting on another node: queued once it is ready (on_ready)
      changes->preparing(k, std::move(c));
      return {};
    }
    link(*ok);
    c.prepared = timer.now();
    return request_change(std::move(c));
  }

  /// Tells hooks.changed which workers and shards hold a part of the job now: those of the
  /// current configuration and, while a change waits for its new parts, of the next one (its
  /// new parts are placed already), the shards whose slices are still travelling away, and the
  /// new shards of migrations started ahead.
  void report_layout() {
    if (!hooks.changed) return;
    std::vector<std::uint32_t> members, live;
    changes->layout(members, live);
    hooks.changed(members, live);
  }

  /// Sends configuration `c` to every shard and to its member workers, before any grant that
  /// refers to it, and keeps it in `configs`.
  void send_config(const ps::job_config& c) {
    configs[c.from_step] = c;
    for (std::uint32_t k = 0; k < next_shard; ++k)
      ctx->net->send(make_configure(ctx->master, ctx->shard_ep(k), ctx->job, c));
    for (auto r : c.members)
      ctx->net->send(make_configure(ctx->master, ctx->worker_ep(r), ctx->job, c));
    log::info("job {}: from step {}: {} worker(s), {} shard(s)", ctx->job, c.from_step,
              c.members.size(), live_shards().size());
  }

  void on_ack(const wire_message& m) {
    using news = scheduler::change_sequencer::ack_news;
    const auto a = read_transfer_ack(m);
    const auto n = a ? changes->acknowledged() : news::unexpected;
    if (n == news::unexpected) {
      log::warn("job master: unexpected transfer_ack from {}", m.hdr.src.id);
      return;
    }
    if (n == news::waiting) return;
    timer.transfers_done();
    if (n == news::freed) report_layout();  // what they held is free now
    regrant_parked();                       // a change that waited for these transfers may begin
  }

  bool asp() const { return ctx->spec.consistency.kind == scheduler::consistency_kind::asp; }

  /// Workers that died leave the job (docs/design.md "Elastic jobs"): every step from the
  /// first one they did not report expects them no more (the shards complete those steps with
  /// what they got), and the chunks they held go back to the dispenser. In asp a step is its
  /// worker's alone: the steps they were granted and did not report are completed by empty
  /// pushes made on their behalf (a shard that got the dead worker's own push first drops the
  /// stand-in, and the reverse), and steps from the next one on expect them no more.
  void workers_lost(const std::vector<std::uint32_t>& ranks) {
    if (done) return;
    std::int64_t from = planner->open_step() + 1;
    std::vector<std::pair<std::int64_t, std::uint32_t>> orphans;  // asp: (step, rank)
    for (auto r : ranks) {
      if (asp()) {
        for (auto g : planner->unreported(r)) orphans.push_back({g, r});
        continue;
      }
      auto it = last_report.find(r);
      from = std::min(from, it == last_report.end() ? options.first_step : it->second + 1);
    }
    // Re-issue every configuration that governs a step from `from` on, without them.
    for (const auto& c : changes->without(ranks, from, configs)) send_config(c);
    report_layout();
    // Their chunks of steps they did not report go back; those steps wait for them no more.
    std::int64_t drop_from = from;
    for (const auto& [g, r] : orphans) drop_from = std::min(drop_from, g);
    const auto epochs_reopened = planner->drop(ranks, drop_from);
    for (const auto& [g, r] : orphans) stand_in(g, r);
    // An epoch whose end was announced is not over: its snapshot is taken again at its new end.
    snapshots->reopen(epochs_reopened);
    for (auto r : ranks)
      log::info("job {}: worker {} is gone; steps from {} go on without it", ctx->job, r, from);
    if (cfg().members.empty())
      fail_job({errc::resource_exhausted,
                last_worker_error.empty()
                    ? std::string("every worker of the job is gone")
                    : "every worker of the job is gone (the last: " + last_worker_error + ")"});
    regrant_parked();
  }

  /// Shard replicas lost with a node (docs/design.md "Shard replicas"). For each pair (k, i)
  /// of `heads`, backup i of shard k becomes its primary: this process sends to it from now
  /// on; it is told first, then gets every configuration again (the lost primary may not have
  /// passed on the newest) and the snapshot requests the lost one may have left unanswered;
  /// then every worker is told, and sends it what the lost primary left unanswered. For each
  /// pair of `cut`, replica i of shard k goes on without the replicas after it.
  void replicas_lost(const std::vector<std::uint32_t>& heads,
                     const std::vector<std::uint32_t>& cut) {
    if (done) return;
    std::set<std::uint32_t> ranks;
    for (const auto& [from, c] : configs) ranks.insert(c.members.begin(), c.members.end());
    for (std::size_t j = 0; j + 1 < heads.size(); j += 2) {
      const std::uint32_t k = heads[j];
      const endpoint head = ctx->replica_ep(k, heads[j + 1]);
      ctx->added->take_over(k, head);
      auto told = to(head, msg_kind::take_over, 0);
      told.hdr.rank = k;
      told.hdr.epoch = head.host;
      told.hdr.chunk_id = head.id;
      ctx->net->send(wire_message(told));
      for (const auto& [from, c] : configs)
        ctx->net->send(make_configure(ctx->master, head, ctx->job, c));
      const auto owned = cfg().map.ranges_of(k);
      for (const auto version : snapshots->asked_versions()) {
        if (!snapshots->lacks(version, owned)) continue;
        auto m = to(head, msg_kind::snapshot_request, version);
        if (snapshots->wants_state(version)) m.hdr.flags = flag::with_state;
        ctx->net->send(std::move(m));
      }
      for (auto r : ranks) {
        told.hdr.dst = ctx->worker_ep(r);
        ctx->net->send(wire_message(told));
      }
      log::info("job {}: shard {}'s backup {} takes over", ctx->job, k, heads[j + 1]);
    }
    for (std::size_t j = 0; j + 1 < cut.size(); j += 2) {
      auto m = to(ctx->replica_ep(cut[j], cut[j + 1]), msg_kind::replica_lost, 0);
      m.hdr.rank = cut[j];
      ctx->net->send(std::move(m));
    }
  }

  /// asp: an empty push of step g for dead worker r to every shard that owns slices at step g,
  /// under the configuration the worker's own would have carried, which completes the step it
  /// was granted (its chunk is trained again by another).
  void stand_in(std::int64_t g, std::uint32_t r) {
    auto it = configs.upper_bound(g);
    if (it == configs.begin()) return;
    const auto& c = std::prev(it)->second;
    const auto n = c.map.load();
    for (std::uint32_t k = 0; k < n.size(); ++k) {
      if (n[k] == 0) continue;
      wire_message m = to(ctx->shard_ep(k), msg_kind::push, g);
      m.hdr.map_version = c.version;
      m.hdr.src = ctx->worker_ep(r);  // its answer goes nowhere, as the dead worker's would
      m.hdr.rank = r;
      m.hdr.samples = 0;
      ctx->net->send(std::move(m));
    }
  }

  void fail_job(coach::error why) {
    if (done) return;
    done = true;
    caf::anon_send(observer, done_atom::value, job_outcome{std::move(why), {}});
  }

  void regrant_parked() {
    auto waiting = std::move(parked);
    parked.clear();
    for (const auto& r : waiting) grant(r);
  }

  /// Assembles version `version` of the parameters. The shards are asked by ask_snapshots once
  /// step `version` opens, under the configuration that governs it: a shard answers a version
  /// with the ranges that configuration gives it (it waits for the move a change at that step
  /// asks of it, ps::shard::owns_assigned), so asked under the configuration of the step
  /// before, a source would leave out what it hands over and a new shard would not be asked.
  void request_snapshot(std::int64_t version, std::uint32_t epoch, bool final,
                        bool with_state = false) {
    snapshots->request(version, epoch, final, with_state);
  }

  /// The flags that ask for a snapshot of version s on step s's grants (and so its pushes).
  std::uint8_t snapshot_flags_of(std::int64_t s) const {
    if (!snapshots->asked(s)) return 0;
    return flag::snapshot | (snapshots->wants_state(s) ? flag::with_state : 0);
  }

  /// Whether the end of `epoch` is checkpointed (options.checkpoint_due, asked once).
  bool checkpoint_due(std::uint32_t epoch) {
    if (!options.checkpoint_due) return false;
    auto it = checkpointed.find(epoch);
    if (it == checkpointed.end())
      it = checkpointed.emplace(epoch, options.checkpoint_due(epoch)).first;
    return it->second;
  }

  /// Asks the shards of the current configuration (that of step s) for the snapshots of
  /// versions up to s not asked for yet. Called as step s opens, before any of its grants: the
  /// request for version s goes on them too (flag::snapshot), and from them on step s's pushes,
  /// so a shard has it before those pushes take it past the version, whatever the links' speeds.
  void ask_snapshots(std::int64_t s) {
    for (const auto version : snapshots->to_ask(s)) {
      const bool state = snapshots->wants_state(version);
      for (auto k : live_shards()) {
        auto m = to(ctx->shard_ep(k), msg_kind::snapshot_request, version);
        if (state) m.hdr.flags = flag::with_state;
        ctx->net->send(std::move(m));
      }
    }
  }

  /// Opens step s if it can: false when the epoch's last chunks are still being processed.
  /// Begins the change due at step s, if any: false while step s must wait (for its new parts).
  bool change_due(std::int64_t s) {
    // A change begins once the transfers of the one before are in; until then the steps go on
    // without it. One waiting for its new parts holds the step.
    auto d = changes->at(s, cancelled);
    using kind = scheduler::change_sequencer::due::kind_type;
    if (d.kind == kind::wait) return false;
    if (d.kind == kind::begin) return begin_change(s, *d.change);
    return true;
  }

  /// Opens step s if it can, for every member of its configuration or (asp) for `only`.
  bool open(std::int64_t s, std::optional<std::uint32_t> only = {}) {
    if (options.cancel_at_step >= 0 && s >= options.cancel_at_step) cancelled = true;
    if (!change_due(s)) return false;
    if (cancelled) {
      if (stop_step < 0) stop_step = s;
      request_snapshot(s, dispenser->epoch(), true);
    }
    const std::uint32_t alone[] = {only.value_or(0)};
    const auto o = planner->open(only ? std::span<const std::uint32_t>(alone)
                                      : std::span<const std::uint32_t>(cfg().members),
                                 cancelled);
    if (!o) return false;  // the epoch's last chunks are still being processed
    if (o->epoch_begun) ledger.begin(*o->epoch_begun);
    if (!o->finished) {
      ledger.step_opened(dispenser->epoch(), planner->open_step(),
                         std::uint32_t(cfg().members.size()), live_shard_count());
      // The step that hands out an epoch's last chunk ends it: snapshot the version after it.
      if (o->ends_epoch) {
        ledger.ends_with(dispenser->epoch(), std::uint32_t(cfg().members.size()),
                         std::uint32_t(live_shards().size()));
        request_snapshot(s + 1, dispenser->epoch(), false, checkpoint_due(dispenser->epoch()));
      }
    }
    // Step s's configuration is final now (its change, if any, has begun), and no grant of it
    // has gone out: the snapshots of versions up to s are asked for under it.
    ask_snapshots(s);
    return true;
  }

  void grant(const wire_message& req) {
    std::int64_t s = req.hdr.step;
    const std::uint32_t rank = req.hdr.rank;
    if (rank >= next_rank) return;
    bool left = false;  // asp: a worker that is no member of the next step
    if (asp()) {
      // Each request opens the next step, with the asking worker its only member.
      s = planner->open_step() + 1;
      if (!change_due(s)) return parked.push_back(req);
      left = !cancelled && !cfg().is_member(rank);
      if (!left && !open(s, rank)) return parked.push_back(req);
    } else {
      while (planner->open_step() < s)
        if (!open(planner->open_step() + 1)) return parked.push_back(req);
    }
    using kind = worker::step_planner::grant::kind;
    const auto g =
        left ? worker::step_planner::grant{kind::finished, {}, 0} : planner->take(rank, s);
    if (g.what == kind::stale) return;
    auto m = to(ctx->worker_ep(rank), msg_kind::chunk_grant, s);
    if (g.what == kind::finished) {
      m.hdr.flags = flag::finished;
    } else if (g.what == kind::no_chunk) {
      m.hdr.flags = flag::no_chunk | snapshot_flags_of(s);
      m.hdr.epoch = g.epoch;
    } else {
      // Frame 0: the chunks' indices one after the other; frame 1 (averaging): their sizes.
      auto copy = std::make_shared<std::vector<std::uint32_t>>();
      auto sizes = std::make_shared<std::vector<std::uint32_t>>();
      for (const auto& c : g.chunks) {
        auto idx = dispenser->indices(c);
        copy->insert(copy->end(), idx.begin(), idx.end());
        sizes->push_back(std::uint32_t(idx.size()));
      }
      if (ctx->on_step) {
        auto& t = traces[s];
        t.step = s;
        ++t.members;
        t.samples.insert(t.samples.end(), copy->begin(), copy->end());
      }
      m.hdr.flags = snapshot_flags_of(s);
      m.hdr.epoch = g.epoch;
      m.hdr.chunk_id = g.chunks.front().id;
      m.frames.push_back(frame::of(copy, copy->data(), copy->size()));
      if (ctx->spec.consistency.kind == scheduler::consistency_kind::averaging)
        m.frames.push_back(frame::of(sizes, sizes->data(), sizes->size()));
    }
    ctx->net->send(std::move(m));
  }

  /// The on_step hook: a member's loss, and the step once every member reported.
  void trace_report(const wire_message& m, bool step_done) {
    auto it = traces.find(m.hdr.step);
    if (it == traces.end()) return;  // no samples granted in it (the finishing step)
    it->second.loss_sum += m.hdr.loss;
    if (!it->second.grad_totals)
      it->second.grad_totals = ps::grad_stats::from_list(m.hdr.grad_stats);
    if (!step_done) return;
    std::sort(it->second.samples.begin(), it->second.samples.end());
    ctx->on_step(it->second);
    traces.erase(it);
  }

  void on_report(const wire_message& m) {
    const auto r = planner->report(m.hdr.rank, m.hdr.step);
    if (!r.known) return;
    if (r.step_samples) timer.step_completed(m.hdr.step, *r.step_samples);
    follow_gain(m, r.step_samples);
    if (ctx->on_step) trace_report(m, r.step_samples.has_value());
    if (!m.frames.empty()) read_invocations(m);
    auto& last = last_report.try_emplace(m.hdr.rank, -1).first->second;
    last = std::max(last, m.hdr.step);
    if (!r.chunks_done.empty()) {
      const std::uint32_t epoch = r.chunks_done.front().epoch;  // a step's chunks share it
      std::uint64_t samples = 0;
      for (const auto& c : r.chunks_done) samples += c.size();
      ledger.reported(epoch, m.hdr.step, samples, m.hdr.loss, m.hdr.compute_us);
      if (r.epoch_done) {
        ledger.completed(epoch);
        maybe_finish_epoch(epoch);
      }
      progress(epoch);
    }
    // Requests parked at the epoch's end can go on now.
    regrant_parked();
  }

  /// Frame 0 of a function-mode worker's step report: its invocation counts so far (u64 each:
  /// started, completed, timed out, out of memory, failed, tasks, peak memory bytes).
  void read_invocations(const wire_message& m) {
    const auto v = m.frames.front().as<std::uint64_t>();
    if (v.size() != 7) return;
    auto& c = invocations[m.hdr.rank];
    c.started = v[0];
    c.completed = v[1];
    c.timed_out = v[2];
    c.out_of_memory = v[3];
    c.failed = v[4];
    c.tasks = v[5];
    c.peak_memory_bytes = v[6];
  }

  worker::invocation_counts summed_invocations() const {
    worker::invocation_counts sum;
    for (const auto& [rank, c] : invocations) sum += c;
    return sum;
  }

  void progress(std::uint32_t epoch) {
    const auto now = clock_type::now();
    if (now - last_progress < std::chrono::milliseconds(200)) return;
    last_progress = now;
    auto p = ledger.progress(epoch);
    p.epochs = num_epochs();
    p.samples_total = ctx->data->train.rows;
    p.workers = std::uint32_t(cfg().members.size());
    p.shards = std::uint32_t(live_shards().size());
    p.changes_done = timer.changes_done();
    if (ctx->spec.function) p.invocations = summed_invocations();
    caf::anon_send(observer, progress_atom::value, p);
  }

  void on_snapshot(const wire_message& m) {
    std::vector<std::span<const float>> pieces;
    bool whole_floats = true;
    for (const auto& f : m.frames) {
      whole_floats = whole_floats && f.bytes % sizeof(float) == 0;
      pieces.push_back(f.as<float>());
    }
    using answer = coach::result<std::optional<ps::snapshot_assembler::assembled>>;
    answer got = whole_floats ? snapshots->add(m.hdr.step, m.hdr.ranges, pieces)
                              : answer(fail(errc::protocol_error, "a frame is not whole floats"));
    if (!got) {
      log::warn("job master: malformed snapshot from shard {}: {}", m.hdr.src.id,
                got.error().message);
      return;
    }
    if (*got) on_assembled(std::move(**got));  // else keys missing yet, or not wanted
  }

  /// A shard's snapshot with its optimizer state (a checkpoint's epoch end).
  void on_state(const wire_message& m) {
    auto t = read_state(m, snapshots_state_per_param);
    auto got = t ? snapshots->add_state(*t)
                 : coach::result<std::optional<ps::snapshot_assembler::assembled>>(
                       std::unexpected(t.error()));
    if (!got) {
      log::warn("job master: malformed state snapshot from shard {}: {}", m.hdr.src.id,
                got.error().message);
      return;
    }
    if (*got) on_assembled(std::move(**got));
  }

  /// A version is whole: the job's last (a cancelled job's result), or an epoch's end, which
  /// is evaluated (and reported with its state when it is a checkpoint's).
  void on_assembled(ps::snapshot_assembler::assembled a) {
    last_params = a.values;
    last_version = a.version;
    if (a.final) return finish(false);
    param_snapshot p{a.epoch, a.version, a.values, std::move(a.state)};
    epoch_params[a.epoch] = p;
    p.state.reset();
    caf::anon_send(evaluator, eval_atom::value, std::move(p), me);
  }

  void on_eval(const eval_result& r) {
    ledger.evaluated(r.epoch, r.correct, r.total, r.loss_sum);
    maybe_finish_epoch(r.epoch);
  }

  /// adascale: the shards' gain, followed from the totals the reports carry (the same the
  /// pushes carried; every shard folds the same ones in, so the same estimate): the gain of
  /// each completed step, for the epoch's report.
  void follow_gain(const wire_message& m, const std::optional<std::uint64_t>& step_samples) {
    const auto& o = ctx->spec.optimizer;
    if (o.lr_scaling != ps::lr_scaling_kind::adascale) return;
    if (auto totals = ps::grad_stats::from_list(m.hdr.grad_stats)) gain.observe(*totals);
    if (step_samples && *step_samples > 0)
      last_gain = gain.gain(double(o.reference_batch), double(*step_samples));
  }

  void maybe_finish_epoch(std::uint32_t epoch) {
    auto rep = ledger.take_report(epoch);
    if (!rep) return;
    rep->lr_gain = last_gain;
    result.epochs.push_back(*rep);
    result.test_accuracy = rep->test_accuracy;
    // The checkpoint holds the epoch's parameters now; the master keeps only last_params.
    auto params = epoch_params.extract(epoch);
    if (!params.empty() && params.mapped().values &&
        (options.report_params || params.mapped().state))
      caf::anon_send(observer, checkpoint_atom::value, std::move(params.mapped()));
    caf::anon_send(observer, epoch_atom::value, *rep);
    // A loss that is no longer a number stays so: the job fails rather than train on (issue 37).
    if (auto why = scheduler::diverged(*rep, ctx->spec.optimizer.base_learning_rate()))
      return fail_job(std::move(*why));
    if (epoch + 1 == num_epochs()) finish(true);
  }

  void finish(bool complete) {
    if (done) return;
    done = true;
    result.cancelled = !complete;
    result.seconds = seconds_since(job_start);
    result.workers = std::uint32_t(cfg().members.size());
    result.shards = std::uint32_t(live_shards().size());
    result.backend = std::string(kernels::to_string(ctx->backend));
    result.num_params = ctx->model.num_params();
    result.bytes_moved = ctx->net->traffic().total_bytes();
    result.changes = timer.reports();
    if (ctx->spec.function) result.invocations = summed_invocations();
    if (last_params) result.params = *last_params;
    // Where it stopped as the master decided it, not as the parameters say: a final snapshot
    // of another version (parameters of a step boundary other than the stop) shows.
    result.steps = !complete && stop_step >= 0 ? stop_step : last_version;
    caf::anon_send(observer, done_atom::value, job_outcome{std::nullopt, std::move(result)});
  }
};

caf::behavior master_actor(caf::stateful_actor<master_state>* self,
                           std::shared_ptr<const job_context> ctx, caf::actor observer,
                           caf::actor evaluator, elastic_hooks hooks, master_options options) {
  auto& st = self->state;
  st.ctx = ctx;
  st.options = options;
  st.changes.emplace(ctx->initial_config());
  st.hooks = std::move(hooks);
  st.link = [self](const caf::actor& a) { self->link_to(a); };
  st.configs[0] = st.cfg();
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
    auto it = s.watched.find(dm.source);
    if (it == s.watched.end()) return;
    const auto rank = it->second;
    s.watched.erase(it);
    if (dm.reason != caf::exit_reason::normal) {
      s.last_worker_error = caf::to_string(dm.reason);
      s.workers_lost({rank});
    }
  });
  self->attach_functor([workers = st.worker_actors] {
    for (auto& w : *workers) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  });
  st.watch = [self](std::uint32_t rank, const caf::actor& w) {
    self->state.watched[w.address()] = rank;
    self->state.worker_actors->push_back(w);
    self->monitor(w);
  };
  // A resumed job starts at its checkpoint's step: changes due before it are past.
  for (const auto& a : ctx->spec.schedule)
    if (a.at_step >= options.first_step) st.changes->queue({a, {}}, a.at_step);
  st.next_rank = std::uint32_t(ctx->workers.size());
  st.next_shard = std::uint32_t(ctx->shards.size());
  st.me = caf::actor_cast<caf::actor>(self);
  st.observer = std::move(observer);
  st.evaluator = std::move(evaluator);
  // A fixed global batch: each step takes the same chunks whatever its members.
  const bool global = ctx->spec.fixed_global_batch();
  const auto cut = global ? worker::cut_global_batch(std::size_t(ctx->spec.global_batch),
                                                     std::uint32_t(ctx->spec.workers.max))
                          : worker::global_cut{std::size_t(ctx->spec.batch_size), 0};
  st.dispenser =
      std::make_unique<worker::chunk_dispenser>(ctx->data->train.rows, cut.chunk, ctx->spec.seed);
  const auto& consistency = ctx->spec.consistency;
  st.snapshots_state_per_param = scheduler::shard_optimizer(ctx->spec).state_per_param();
  st.snapshots.emplace(ctx->model.num_params(), st.snapshots_state_per_param);
  st.planner.emplace(*st.dispenser, options.first_epoch, st.num_epochs(),
                     consistency.kind == scheduler::consistency_kind::averaging
                         ? std::uint32_t(consistency.local_steps)
                         : 1u,
                     consistency.kind == scheduler::consistency_kind::ssp
                         ? std::int64_t(consistency.staleness)
                         : std::int64_t{-1},
                     options.first_step, global ? cut.per_step : 0u);
  st.result.name = ctx->spec.name;
  return {
      [self](wire_message& m) {
        auto& s = self->state;
        switch (m.hdr.kind) {
          case msg_kind::chunk_request:
            s.grant(m);
            break;
          case msg_kind::step_report:
            s.on_report(m);
            break;
          case msg_kind::params:
            s.on_snapshot(m);
            break;
          case msg_kind::state:
            s.on_state(m);
            break;
          case msg_kind::transfer_ack:
            s.on_ack(m);
            break;
          default:
            log::warn("job master: unexpected message {}", to_string(m.hdr.kind));
        }
      },
      [self](eval_atom, eval_result& r) { self->state.on_eval(r); },
      [self](watch_atom, std::uint32_t rank, caf::actor& w) { self->state.watch(rank, w); },
      [self](lost_atom, std::vector<std::uint32_t>& ranks) { self->state.workers_lost(ranks); },
      [self](take_over_atom, std::vector<std::uint32_t>& heads, std::vector<std::uint32_t>& cut) {
        self->state.replicas_lost(heads, cut);
      },
      [self](ready_atom, bool worker, std::uint32_t id, std::string& why) {
        self->state.on_ready(worker, id, why);
      },
      [self](rescale_atom, std::uint32_t workers, std::uint32_t shards) {
        return self->state.rescale(workers, shards);
      },
      [self](migrate_atom, std::uint32_t shard, std::string& node) {
        return self->state.migrate(shard, node);
      },
      [self](cancel_atom) {
        auto& s = self->state;
        if (s.done || s.cancelled) return;
        s.cancelled = true;
        // Steps already open finish; the next one to open tells every worker to stop.
      },
  };
}

struct evaluator_state {
  std::unique_ptr<kernels::backend> be;
  std::unique_ptr<worker::network_runner> runner;
  float* params = nullptr;
  static inline const char* name = "coach.evaluator";
  ~evaluator_state() {
    if (be) be->free(params);
  }
};

caf::behavior evaluator_actor(caf::stateful_actor<evaluator_state>* self,
                              std::shared_ptr<const job_context> ctx) {
  auto& st = self->state;
  // A cuda job's test set is evaluated on a GPU, shared with the workers (at real sizes the cpu
  // would take longer than an epoch), in fp32: the first device this process's workers may use,
  // or, where none run here (a cluster's master), device 0 when the process sees one.
  std::optional<int> device;
  if (ctx->devices)
    device = ctx->devices->first();
  else if (kernels::device_count() > 0)
    device = 0;
  if (ctx->backend == kernels::backend_kind::cuda && device) {
    if (auto be = kernels::make_backend(kernels::backend_kind::cuda, *device))
      st.be = std::move(*be);
    else
      log::warn("job {}: evaluating on the cpu: {}", ctx->job, be.error().message);
  }
  if (!st.be) st.be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  st.runner = std::make_unique<worker::network_runner>(ctx->model, *st.be, 1000);
  st.params = st.be->alloc(ctx->model.num_params());
  return {
      [self, ctx](eval_atom, param_snapshot& snap, caf::actor& reply_to) {
        auto& s = self->state;
        s.be->upload(s.params, snap.values->data(), snap.values->size());
        const auto ev = s.runner->evaluate(s.params, ctx->data->test);
        eval_result r{snap.epoch, ev.correct, ev.total, ev.loss_sum};
        self->send(reply_to, eval_atom::value, r);
      },
  };
}

}  // namespace

caf::actor spawn_master(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                        caf::actor observer, caf::actor evaluator, elastic_hooks hooks,
                        master_options options) {
  auto ep = ctx->master;
  auto net = ctx->net;
  auto a = sys.spawn(master_actor, std::move(ctx), std::move(observer), std::move(evaluator),
                     std::move(hooks), options);
  bind_while_alive(net, ep, a);
  return a;
}

caf::actor spawn_evaluator(caf::actor_system& sys, std::shared_ptr<const job_context> ctx) {
  return sys.spawn<caf::detached>(evaluator_actor, std::move(ctx));
}

}  // namespace coach::actors
