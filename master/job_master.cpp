#include "master/job_master.hpp"

#include <algorithm>
#include <set>
#include <span>

#include "common/format.hpp"
#include "common/log.hpp"
#include "master/change_planner.hpp"
#include "wire/elastic_messages.hpp"

namespace coach::master {
namespace {

using wire::wire_message;
namespace flag = wire::flag;
using wire::endpoint;
using wire::frame;
using wire::migrate_order;
using wire::msg_kind;

/// How the job's samples are cut into chunks: a fixed global batch takes the same chunks each
/// step whatever its members.
global_cut cut_of(const scheduler::job_spec& spec) {
  if (spec.fixed_global_batch())
    return cut_global_batch(std::size_t(spec.global_batch), std::uint32_t(spec.workers.max));
  return global_cut{std::size_t(spec.batch_size), 0};
}

step_planner make_planner(chunk_dispenser& d, const scheduler::job_spec& spec,
                          const job_master_options& o) {
  const auto& c = spec.consistency;
  return step_planner(
      d, o.first_epoch, std::uint32_t(spec.epochs),
      c.kind == scheduler::consistency_kind::averaging ? std::uint32_t(c.local_steps) : 1u,
      c.kind == scheduler::consistency_kind::ssp ? std::int64_t(c.staleness) : std::int64_t{-1},
      o.first_step, spec.fixed_global_batch() ? cut_of(spec).per_step : 0u);
}

}  // namespace

job_master::job_master(job_master_setup setup, job_master_options options, job_master_ports ports,
                       const scheduler::clock_source& clock)
    : setup_(std::move(setup)),
      options_(std::move(options)),
      ports_(std::move(ports)),
      clock_(clock),
      dispenser_(setup_.train_rows, cut_of(setup_.spec).chunk, setup_.spec.seed),
      planner_(make_planner(dispenser_, setup_.spec, options_)),
      state_per_param_(scheduler::shard_optimizer(setup_.spec).state_per_param()),
      snapshots_(setup_.num_params, state_per_param_),
      job_start_(clock.now()),
      last_progress_(clock.now()),
      changes_(setup_.initial),
      timer_(clock),
      ledger_(clock),
      next_rank_(std::uint32_t(setup_.initial.members.size())),
      next_shard_(setup_.shards) {
  configs_[0] = cfg();
  // A resumed job starts at its checkpoint's step: changes due before it are past.
  for (const auto& a : setup_.spec.schedule)
    if (a.at_step >= options_.first_step) changes_.queue({a, {}}, a.at_step);
  result_.name = setup_.spec.name;
}

void job_master::on_message(const wire_message& m) {
  switch (m.hdr.kind) {
    case msg_kind::chunk_request:
      return grant(m);
    case msg_kind::step_report:
      return on_report(m);
    case msg_kind::params:
      return on_snapshot(m);
    case msg_kind::state:
      return on_state(m);
    case msg_kind::transfer_ack:
      return on_ack(m);
    default:
      log::warn("job master: unexpected message {}", to_string(m.hdr.kind));
  }
}

void job_master::cancel() {
  if (done_ || cancelled_) return;
  cancelled_ = true;
  // Steps already open finish; the next one to open tells every worker to stop.
}

std::uint32_t job_master::live_shard_count() {
  // live_shards().size(), counted once per configuration version (each step's ledger entry
  // asks for it; a change is rare).
  if (counted_version_ != cfg().version) {
    counted_version_ = cfg().version;
    live_count_ = std::uint32_t(live_shards().size());
  }
  return live_count_;
}

wire_message job_master::to(const wire::endpoint& dst, msg_kind kind, std::int64_t step) const {
  wire_message m;
  m.hdr.src = setup_.master;
  m.hdr.dst = dst;
  m.hdr.kind = kind;
  m.hdr.job = setup_.job;
  m.hdr.map_version = cfg().version;
  m.hdr.step = step;
  return m;
}

/// Starts the change `a` at step s: new parts, slices to move. True when step s can open now
/// (nothing to start elsewhere: the new configuration is published with the migrate orders,
/// and the transfers go on under step s); otherwise step s waits for the new parts.
bool job_master::begin_change(std::int64_t s, const change_request& req) {
  timer_.begin(describe(req), s, req.requested, req.prepared);
  std::size_t elsewhere = 0;  // parts starting on other nodes
  change_starters start;
  start.worker = [&](std::uint32_t r, const ps::job_config& next) {
    if (!ports_.add_worker) {
      log::warn("job master: this job cannot add workers here");
      return false;
    }
    auto ok = ports_.add_worker(r, next, s, std::string{});
    if (!ok) {
      log::warn("job master: cannot add worker {}: {}", r, ok.error().message);
      return false;
    }
    if (*ok == part_start::elsewhere) ++elsewhere;
    return true;
  };
  start.shard = [&]() -> std::optional<std::uint32_t> {
    if (!ports_.add_shard) {
      log::warn("job master: this job cannot add shards here");
      return std::nullopt;
    }
    const std::uint32_t k = next_shard_++;
    auto ok = ports_.add_shard(k, cfg(), req.node, 0);
    if (!ok) {
      log::warn("job master: cannot add shard {}: {}", k, ok.error().message);
      return std::nullopt;
    }
    if (*ok == part_start::elsewhere) ++elsewhere;
    return k;
  };
  auto plan = plan_change(cfg(), to_job_change(req), s, next_rank_, start);
  if (!plan.ignored.empty()) {
    log::info("job master: {}", plan.ignored);
    return true;
  }
  if (!plan.added.empty()) timer_.adds_workers();
  const std::size_t floats_per_key = 1 + scheduler::shard_optimizer(setup_.spec).state_per_param();
  timer_.add_moved_bytes(plan.moved_keys * floats_per_key * sizeof(float));
  if (!changes_.begun(std::move(plan), elsewhere)) return false;
  return send_orders();
}

/// The change's parts are up: sends its migrate orders, then publishes the configuration at
/// once: the workers go on with the step while the slices travel (a shard holds the step's
/// pushes until it owns what the configuration gives it; ps::shard::owns_assigned), so the
/// pause is what is left of the transfer when the workers' pushes arrive. The next change
/// begins once every transfer is acknowledged. Returns true (step s can open).
bool job_master::send_orders() {
  auto orders = changes_.publish();
  if (!orders.empty()) timer_.orders_sent();
  // Before the configuration, from this same sender: a source has its order when the
  // configuration that takes its slices away arrives.
  for (auto& o : orders)
    ports_.send(
        make_migrate(setup_.master, setup_.shard_ep(o.from), setup_.job,
                     migrate_order{o.at_version, o.to, o.config_version, std::move(o.ranges)}));
  send_config(cfg());
  report_layout();
  return true;
}

/// A part started elsewhere is up (or could not start: `why` says why).
void job_master::part_ready(bool worker, std::uint32_t id, const std::string& why) {
  if (!worker && changes_.is_preparing(id)) {
    auto c = *changes_.prepared(id);
    if (!why.empty()) {
      log::warn("job {}: cannot add shard {}: {}; the migration is dropped", setup_.job, id, why);
      return;
    }
    c.prepared = timer_.now();
    request_change(std::move(c));
    return;
  }
  if (!why.empty())
    log::warn("job {}: cannot add {} {}: {}", setup_.job, worker ? "worker" : "shard", id, why);
  const auto step = changes_.next() ? changes_.next()->from_step : 0;
  using news = change_sequencer::part_news;
  switch (changes_.part_ready(worker, id, why.empty())) {
    case news::unexpected:
      log::warn("job master: unexpected news of {} {}", worker ? "worker" : "shard", id);
      return;
    case news::waiting:
      return;
    case news::dropped:
      log::info("job {}: the change at step {} is dropped; the job goes on as it was", setup_.job,
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
std::string job_master::request_change(change_request c) {
  if (done_ || cancelled_) return "the job is ending";
  if (!c.requested) c.requested = timer_.now();
  changes_.queue(std::move(c), planner_.open_step() + 1);
  log::info("job {}: change asked for at step {}", setup_.job, planner_.open_step() + 1);
  // Workers waiting at the boundary (a step that could not open) try again.
  regrant_parked();
  return {};
}

std::string job_master::rescale(std::uint32_t workers, std::uint32_t shards) {
  using kind = scheduler::schedule_action::kind_type;
  const auto& sp = setup_.spec;
  if (workers != 0 && (int(workers) < sp.workers.min || int(workers) > sp.workers.max))
    return coach::format("--workers {} is outside the job's workers range [{}, {}]", workers,
                         sp.workers.min, sp.workers.max);
  if (shards != 0 && (int(shards) < sp.shards.min || int(shards) > sp.shards.max))
    return coach::format("--shards {} is outside the job's shards range [{}, {}]", shards,
                         sp.shards.min, sp.shards.max);
  if (workers == 0 && shards == 0) return "nothing to change: give --workers or --shards";
  if (workers > changes_.planned_members().size() && !ports_.add_worker)
    return "this job cannot add workers here";
  if (shards > changes_.planned_live_shards().size() && !ports_.add_shard)
    return "this job cannot add shards here";
  if (workers != 0)
    if (auto why = request_change({{0, kind::workers, workers}, {}}); !why.empty()) return why;
  if (shards != 0) return request_change({{0, kind::shards, shards}, {}});
  return {};
}

std::string job_master::migrate(std::uint32_t shard, const std::string& node) {
  using kind = scheduler::schedule_action::kind_type;
  if (!ports_.add_shard) return "this job cannot add shards here";
  const auto live = changes_.planned_live_shards();
  if (std::find(live.begin(), live.end(), shard) == live.end()) {
    std::string names;
    for (auto k : live) names += (names.empty() ? "" : ", ") + std::to_string(k);
    return coach::format("shard {} owns no slices (live shards: {})", shard, names);
  }
  if (done_ || cancelled_) return "the job is ending";
  // The new shard starts now, while the job trains: its node warms the memory the slices will
  // arrive in (a first write to memory the host has dropped runs at ~0.1 GB/s here, seconds for
  // a large shard, docs/performance.md "rescale_bench"), and the change takes the first step
  // boundary after that, so the pause is the transfer alone.
  change_request c{{0, kind::migrate, shard}, node, timer_.now(), std::nullopt, {}};
  std::uint64_t keys = 0;
  for (const auto& r : changes_.planned_map().ranges_of(shard)) keys += r.size();
  const std::uint32_t k = next_shard_++;
  auto ok = ports_.add_shard(k, cfg(), node, keys);
  if (!ok) return coach::format("cannot add shard {}: {}", k, ok.error().message);
  c.shard = k;
  if (*ok == part_start::elsewhere) {  // queued once it is ready (part_ready)
    changes_.preparing(k, std::move(c));
    return {};
  }
  c.prepared = timer_.now();
  return request_change(std::move(c));
}

/// Tells ports.changed which workers and shards hold a part of the job now: those of the
/// current configuration and, while a change waits for its new parts, of the next one (its
/// new parts are placed already), the shards whose slices are still travelling away, and the
/// new shards of migrations started ahead.
void job_master::report_layout() {
  if (!ports_.changed) return;
  std::vector<std::uint32_t> members, live;
  changes_.layout(members, live);
  ports_.changed(members, live);
}

/// Sends configuration `c` to every shard and to its member workers, before any grant that
/// refers to it, and keeps it in `configs_`.
void job_master::send_config(const ps::job_config& c) {
  configs_[c.from_step] = c;
  for (std::uint32_t k = 0; k < next_shard_; ++k)
    ports_.send(make_configure(setup_.master, setup_.shard_ep(k), setup_.job, c));
  for (auto r : c.members)
    ports_.send(make_configure(setup_.master, setup_.worker_ep(r), setup_.job, c));
  log::info("job {}: from step {}: {} worker(s), {} shard(s)", setup_.job, c.from_step,
            c.members.size(), live_shards().size());
}

void job_master::on_ack(const wire_message& m) {
  using news = change_sequencer::ack_news;
  const auto a = read_transfer_ack(m);
  const auto n = a ? changes_.acknowledged() : news::unexpected;
  if (n == news::unexpected) {
    log::warn("job master: unexpected transfer_ack from {}", m.hdr.src.id);
    return;
  }
  if (n == news::waiting) return;
  timer_.transfers_done();
  if (n == news::freed) report_layout();  // what they held is free now
  regrant_parked();                       // a change that waited for these transfers may begin
}

bool job_master::asp() const {
  return setup_.spec.consistency.kind == scheduler::consistency_kind::asp;
}

/// Workers that died leave the job (docs/design.md "Elastic jobs"): every step from the
/// first one they did not report expects them no more (the shards complete those steps with
/// what they got), and the chunks they held go back to the dispenser. In asp a step is its
/// worker's alone: the steps they were granted and did not report are completed by empty
/// pushes made on their behalf (a shard that got the dead worker's own push first drops the
/// stand-in, and the reverse), and steps from the next one on expect them no more.
void job_master::workers_lost(const std::vector<std::uint32_t>& ranks, const std::string& why) {
  if (done_) return;
  std::int64_t from = planner_.open_step() + 1;
  std::vector<std::pair<std::int64_t, std::uint32_t>> orphans;  // asp: (step, rank)
  for (auto r : ranks) {
    if (asp()) {
      for (auto g : planner_.unreported(r)) orphans.push_back({g, r});
      continue;
    }
    auto it = last_report_.find(r);
    from = std::min(from, it == last_report_.end() ? options_.first_step : it->second + 1);
  }
  // Re-issue every configuration that governs a step from `from` on, without them.
  for (const auto& c : changes_.without(ranks, from, configs_)) send_config(c);
  report_layout();
  // Their chunks of steps they did not report go back; those steps wait for them no more.
  std::int64_t drop_from = from;
  for (const auto& [g, r] : orphans) drop_from = std::min(drop_from, g);
  const auto epochs_reopened = planner_.drop(ranks, drop_from);
  for (const auto& [g, r] : orphans) stand_in(g, r);
  // An epoch whose end was announced is not over: its snapshot is taken again at its new end.
  snapshots_.reopen(epochs_reopened);
  for (auto r : ranks)
    log::info("job {}: worker {} is gone; steps from {} go on without it", setup_.job, r, from);
  if (cfg().members.empty())
    fail_job({errc::resource_exhausted,
              why.empty() ? std::string("every worker of the job is gone")
                          : "every worker of the job is gone (the last: " + why + ")"});
  regrant_parked();
}

/// Shard replicas lost with a node (docs/design.md "Shard replicas"). For each pair (k, i)
/// of `heads`, backup i of shard k becomes its primary: this process sends to it from now
/// on; it is told first, then gets every configuration again (the lost primary may not have
/// passed on the newest) and the snapshot requests the lost one may have left unanswered;
/// then every worker is told, and sends it what the lost primary left unanswered. For each
/// pair of `cut`, replica i of shard k goes on without the replicas after it.
void job_master::replicas_lost(const std::vector<std::uint32_t>& heads,
                               const std::vector<std::uint32_t>& cut) {
  if (done_) return;
  std::set<std::uint32_t> ranks;
  for (const auto& [from, c] : configs_) ranks.insert(c.members.begin(), c.members.end());
  for (std::size_t j = 0; j + 1 < heads.size(); j += 2) {
    const std::uint32_t k = heads[j];
    const endpoint head = setup_.replica_ep(k, heads[j + 1]);
    if (ports_.take_over) ports_.take_over(k, head);
    auto told = to(head, msg_kind::take_over, 0);
    told.hdr.rank = k;
    told.hdr.epoch = head.host;
    told.hdr.chunk_id = head.id;
    ports_.send(wire_message(told));
    for (const auto& [from, c] : configs_)
      ports_.send(make_configure(setup_.master, head, setup_.job, c));
    const auto owned = cfg().map.ranges_of(k);
    for (const auto version : snapshots_.asked_versions()) {
      if (!snapshots_.lacks(version, owned)) continue;
      auto m = to(head, msg_kind::snapshot_request, version);
      if (snapshots_.wants_state(version)) m.hdr.flags = flag::with_state;
      ports_.send(std::move(m));
    }
    for (auto r : ranks) {
      told.hdr.dst = setup_.worker_ep(r);
      ports_.send(wire_message(told));
    }
    log::info("job {}: shard {}'s backup {} takes over", setup_.job, k, heads[j + 1]);
  }
  for (std::size_t j = 0; j + 1 < cut.size(); j += 2) {
    auto m = to(setup_.replica_ep(cut[j], cut[j + 1]), msg_kind::replica_lost, 0);
    m.hdr.rank = cut[j];
    ports_.send(std::move(m));
  }
}

/// asp: an empty push of step g for dead worker r to every shard that owns slices at step g,
/// under the configuration the worker's own would have carried, which completes the step it
/// was granted (its chunk is trained again by another).
void job_master::stand_in(std::int64_t g, std::uint32_t r) {
  auto it = configs_.upper_bound(g);
  if (it == configs_.begin()) return;
  const auto& c = std::prev(it)->second;
  const auto n = c.map.load();
  for (std::uint32_t k = 0; k < n.size(); ++k) {
    if (n[k] == 0) continue;
    wire_message m = to(setup_.shard_ep(k), msg_kind::push, g);
    m.hdr.map_version = c.version;
    m.hdr.src = setup_.worker_ep(r);  // its answer goes nowhere, as the dead worker's would
    m.hdr.rank = r;
    m.hdr.samples = 0;
    ports_.send(std::move(m));
  }
}

void job_master::fail_job(coach::error why) {
  if (done_) return;
  done_ = true;
  ports_.done(job_outcome{std::move(why), {}});
}

void job_master::regrant_parked() {
  auto waiting = std::move(parked_);
  parked_.clear();
  for (const auto& r : waiting) grant(r);
}

/// The flags that ask for a snapshot of version s on step s's grants (and so its pushes).
std::uint8_t job_master::snapshot_flags_of(std::int64_t s) const {
  if (!snapshots_.asked(s)) return 0;
  return flag::snapshot | (snapshots_.wants_state(s) ? flag::with_state : 0);
}

/// Whether the end of `epoch` is checkpointed (options.checkpoint_due, asked once).
bool job_master::checkpoint_due(std::uint32_t epoch) {
  if (!options_.checkpoint_due) return false;
  auto it = checkpointed_.find(epoch);
  if (it == checkpointed_.end())
    it = checkpointed_.emplace(epoch, options_.checkpoint_due(epoch)).first;
  return it->second;
}

/// Asks the shards of the current configuration (that of step s) for the snapshots of
/// versions up to s not asked for yet. Called as step s opens, before any of its grants: the
/// request for version s goes on them too (flag::snapshot), and from them on step s's pushes,
/// so a shard has it before those pushes take it past the version, whatever the links' speeds.
void job_master::ask_snapshots(std::int64_t s) {
  for (const auto version : snapshots_.to_ask(s)) {
    const bool state = snapshots_.wants_state(version);
    for (auto k : live_shards()) {
      auto m = to(setup_.shard_ep(k), msg_kind::snapshot_request, version);
      if (state) m.hdr.flags = flag::with_state;
      ports_.send(std::move(m));
    }
  }
}

/// Opens step s if it can: false when the epoch's last chunks are still being processed.
/// Begins the change due at step s, if any: false while step s must wait (for its new parts).
bool job_master::change_due(std::int64_t s) {
  // A change begins once the transfers of the one before are in; until then the steps go on
  // without it. One waiting for its new parts holds the step.
  auto d = changes_.at(s, cancelled_);
  using kind = change_sequencer::due::kind_type;
  if (d.kind == kind::wait) return false;
  if (d.kind == kind::begin) return begin_change(s, *d.change);
  return true;
}

/// Opens step s if it can, for every member of its configuration or (asp) for `only`.
bool job_master::open(std::int64_t s, std::optional<std::uint32_t> only) {
  if (options_.cancel_at_step >= 0 && s >= options_.cancel_at_step) cancelled_ = true;
  if (!change_due(s)) return false;
  if (cancelled_) {
    if (stop_step_ < 0) stop_step_ = s;
    snapshots_.request(s, dispenser_.epoch(), true);
  }
  const std::uint32_t alone[] = {only.value_or(0)};
  const auto o = planner_.open(
      only ? std::span<const std::uint32_t>(alone) : std::span<const std::uint32_t>(cfg().members),
      cancelled_);
  if (!o) return false;  // the epoch's last chunks are still being processed
  if (o->epoch_begun) ledger_.begin(*o->epoch_begun);
  if (!o->finished) {
    ledger_.step_opened(dispenser_.epoch(), planner_.open_step(),
                        std::uint32_t(cfg().members.size()), live_shard_count());
    // The step that hands out an epoch's last chunk ends it: snapshot the version after it.
    if (o->ends_epoch) {
      ledger_.ends_with(dispenser_.epoch(), std::uint32_t(cfg().members.size()),
                        std::uint32_t(live_shards().size()));
      snapshots_.request(s + 1, dispenser_.epoch(), false, checkpoint_due(dispenser_.epoch()));
    }
  }
  // Step s's configuration is final now (its change, if any, has begun), and no grant of it
  // has gone out: the snapshots of versions up to s are asked for under it.
  ask_snapshots(s);
  return true;
}

void job_master::grant(const wire_message& req) {
  std::int64_t s = req.hdr.step;
  const std::uint32_t rank = req.hdr.rank;
  if (rank >= next_rank_) return;
  bool left = false;  // asp: a worker that is no member of the next step
  if (asp()) {
    // Each request opens the next step, with the asking worker its only member.
    s = planner_.open_step() + 1;
    if (!change_due(s)) return parked_.push_back(req);
    left = !cancelled_ && !cfg().is_member(rank);
    if (!left && !open(s, rank)) return parked_.push_back(req);
  } else {
    while (planner_.open_step() < s)
      if (!open(planner_.open_step() + 1)) return parked_.push_back(req);
  }
  using kind = step_planner::grant::kind;
  const auto g = left ? step_planner::grant{kind::finished, {}, 0} : planner_.take(rank, s);
  if (g.what == kind::stale) return;
  auto m = to(setup_.worker_ep(rank), msg_kind::chunk_grant, s);
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
      auto idx = dispenser_.indices(c);
      copy->insert(copy->end(), idx.begin(), idx.end());
      sizes->push_back(std::uint32_t(idx.size()));
    }
    if (setup_.on_step) {
      auto& t = traces_[s];
      t.step = s;
      ++t.members;
      t.samples.insert(t.samples.end(), copy->begin(), copy->end());
    }
    m.hdr.flags = snapshot_flags_of(s);
    m.hdr.epoch = g.epoch;
    m.hdr.chunk_id = g.chunks.front().id;
    m.frames.push_back(frame::of(copy, copy->data(), copy->size()));
    if (setup_.spec.consistency.kind == scheduler::consistency_kind::averaging)
      m.frames.push_back(frame::of(sizes, sizes->data(), sizes->size()));
  }
  ports_.send(std::move(m));
}

/// The on_step hook: a member's loss, and the step once every member reported.
void job_master::trace_report(const wire_message& m, bool step_done) {
  auto it = traces_.find(m.hdr.step);
  if (it == traces_.end()) return;  // no samples granted in it (the finishing step)
  it->second.loss_sum += m.hdr.loss;
  if (!it->second.grad_totals) it->second.grad_totals = ps::grad_stats::from_list(m.hdr.grad_stats);
  if (!step_done) return;
  std::sort(it->second.samples.begin(), it->second.samples.end());
  setup_.on_step(it->second);
  traces_.erase(it);
}

void job_master::on_report(const wire_message& m) {
  const auto r = planner_.report(m.hdr.rank, m.hdr.step);
  if (!r.known) return;
  if (r.step_samples) timer_.step_completed(m.hdr.step, *r.step_samples);
  follow_gain(m, r.step_samples);
  if (setup_.on_step) trace_report(m, r.step_samples.has_value());
  if (!m.frames.empty()) read_invocations(m);
  auto& last = last_report_.try_emplace(m.hdr.rank, -1).first->second;
  last = std::max(last, m.hdr.step);
  if (!r.chunks_done.empty()) {
    const std::uint32_t epoch = r.chunks_done.front().epoch;  // a step's chunks share it
    std::uint64_t samples = 0;
    for (const auto& c : r.chunks_done) samples += c.size();
    ledger_.reported(epoch, m.hdr.step, samples, m.hdr.loss, m.hdr.compute_us);
    if (r.epoch_done) {
      ledger_.completed(epoch);
      maybe_finish_epoch(epoch);
    }
    progress(epoch);
  }
  // Requests parked at the epoch's end can go on now.
  regrant_parked();
}

/// Frame 0 of a function-mode worker's step report: its invocation counts so far (u64 each:
/// started, completed, timed out, out of memory, failed, tasks, peak memory bytes).
void job_master::read_invocations(const wire_message& m) {
  const auto v = m.frames.front().as<std::uint64_t>();
  if (v.size() != 7) return;
  auto& c = invocations_[m.hdr.rank];
  c.started = v[0];
  c.completed = v[1];
  c.timed_out = v[2];
  c.out_of_memory = v[3];
  c.failed = v[4];
  c.tasks = v[5];
  c.peak_memory_bytes = v[6];
}

worker::invocation_counts job_master::summed_invocations() const {
  worker::invocation_counts sum;
  for (const auto& [rank, c] : invocations_) sum += c;
  return sum;
}

void job_master::progress(std::uint32_t epoch) {
  const auto now = clock_.now();
  if (now - last_progress_ < scheduler::seconds(0.2)) return;
  last_progress_ = now;
  auto p = ledger_.progress(epoch);
  p.epochs = num_epochs();
  p.samples_total = setup_.train_rows;
  p.workers = std::uint32_t(cfg().members.size());
  p.shards = std::uint32_t(live_shards().size());
  p.changes_done = timer_.changes_done();
  if (setup_.spec.function) p.invocations = summed_invocations();
  ports_.progress(p);
}

void job_master::on_snapshot(const wire_message& m) {
  std::vector<std::span<const float>> pieces;
  bool whole_floats = true;
  for (const auto& f : m.frames) {
    whole_floats = whole_floats && f.bytes % sizeof(float) == 0;
    pieces.push_back(f.as<float>());
  }
  using answer = coach::result<std::optional<snapshot_assembler::assembled>>;
  answer got = whole_floats ? snapshots_.add(m.hdr.step, m.hdr.ranges, pieces)
                            : answer(fail(errc::protocol_error, "a frame is not whole floats"));
  if (!got) {
    log::warn("job master: malformed snapshot from shard {}: {}", m.hdr.src.id,
              got.error().message);
    return;
  }
  if (*got) on_assembled(std::move(**got));  // else keys missing yet, or not wanted
}

/// A shard's snapshot with its optimizer state (a checkpoint's epoch end).
void job_master::on_state(const wire_message& m) {
  auto t = read_state(m, state_per_param_);
  auto got =
      t ? snapshots_.add_state(*t)
        : coach::result<std::optional<snapshot_assembler::assembled>>(std::unexpected(t.error()));
  if (!got) {
    log::warn("job master: malformed state snapshot from shard {}: {}", m.hdr.src.id,
              got.error().message);
    return;
  }
  if (*got) on_assembled(std::move(**got));
}

/// A version is whole: the job's last (a cancelled job's result), or an epoch's end, which
/// is evaluated (and reported with its state when it is a checkpoint's).
void job_master::on_assembled(snapshot_assembler::assembled a) {
  last_params_ = a.values;
  last_version_ = a.version;
  if (a.final) return finish(false);
  param_snapshot p{a.epoch, a.version, a.values, std::move(a.state)};
  epoch_params_[a.epoch] = p;
  p.state.reset();
  ports_.evaluate(std::move(p));
}

void job_master::evaluated(const eval_result& r) {
  ledger_.evaluated(r.epoch, r.correct, r.total, r.loss_sum);
  maybe_finish_epoch(r.epoch);
}

/// adascale: the shards' gain, followed from the totals the reports carry (the same the
/// pushes carried; every shard folds the same ones in, so the same estimate): the gain of
/// each completed step, for the epoch's report.
void job_master::follow_gain(const wire_message& m,
                             const std::optional<std::uint64_t>& step_samples) {
  const auto& o = setup_.spec.optimizer;
  if (o.lr_scaling != ps::lr_scaling_kind::adascale) return;
  if (auto totals = ps::grad_stats::from_list(m.hdr.grad_stats)) gain_.observe(*totals);
  if (step_samples && *step_samples > 0)
    last_gain_ = gain_.gain(double(o.reference_batch), double(*step_samples));
}

void job_master::maybe_finish_epoch(std::uint32_t epoch) {
  auto rep = ledger_.take_report(epoch);
  if (!rep) return;
  rep->lr_gain = last_gain_;
  result_.epochs.push_back(*rep);
  result_.test_accuracy = rep->test_accuracy;
  // The checkpoint holds the epoch's parameters now; the master keeps only last_params.
  auto params = epoch_params_.extract(epoch);
  if (!params.empty() && params.mapped().values &&
      (options_.report_params || params.mapped().state))
    ports_.checkpoint(std::move(params.mapped()));
  ports_.epoch(*rep);
  // A loss that is no longer a number stays so: the job fails rather than train on (issue 37).
  if (auto why = scheduler::diverged(*rep, setup_.spec.optimizer.base_learning_rate()))
    return fail_job(std::move(*why));
  if (epoch + 1 == num_epochs()) finish(true);
}

void job_master::finish(bool complete) {
  if (done_) return;
  done_ = true;
  result_.cancelled = !complete;
  result_.seconds = scheduler::to_seconds(clock_.now()) - scheduler::to_seconds(job_start_);
  result_.workers = std::uint32_t(cfg().members.size());
  result_.shards = std::uint32_t(live_shards().size());
  result_.backend = setup_.backend;
  result_.num_params = setup_.num_params;
  result_.changes = timer_.reports();
  if (setup_.spec.function) result_.invocations = summed_invocations();
  if (last_params_) result_.params = *last_params_;
  // Where it stopped as the master decided it, not as the parameters say: a final snapshot
  // of another version (parameters of a step boundary other than the stop) shows.
  result_.steps = !complete && stop_step_ >= 0 ? stop_step_ : last_version_;
  ports_.done(job_outcome{std::nullopt, std::move(result_)});
}

}  // namespace coach::master
