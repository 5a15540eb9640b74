// master::job_master, continued: the changes of a running job (the spec's schedule, `coach
// rescale`, `coach migrate`, a policy's resize) begun at step boundaries, the parts they start,
// and the losses it goes on without: dead workers and shard replicas (docs/design.md "Elastic
// jobs", "Shard replicas").
#include <algorithm>
#include <set>

#include "common/format.hpp"
#include "common/log.hpp"
#include "master/change_planner.hpp"
#include "master/job_master.hpp"
#include "wire/elastic_messages.hpp"

namespace coach::master {
namespace {

using wire::wire_message;
namespace flag = wire::flag;
using wire::endpoint;
using wire::migrate_order;
using wire::msg_kind;

}  // namespace

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
    joined_at_[r] = s;
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
  send_configs({c});
}

/// Sends configurations (oldest first: one, or a re-issue after a death) to every shard and to
/// their member workers, each receiver's all but the last flagged more_configs (a receiver
/// takes a re-issue as one), and keeps them in `configs_`.
void job_master::send_configs(const std::vector<ps::job_config>& batch) {
  std::map<std::uint32_t, std::size_t> last;  // by rank: the last configuration it is sent
  for (std::size_t i = 0; i < batch.size(); ++i)
    for (auto r : batch[i].members) last[r] = i;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& c = batch[i];
    configs_[c.from_step] = c;
    for (std::uint32_t k = 0; k < next_shard_; ++k) {
      auto m = make_configure(setup_.master, setup_.shard_ep(k), setup_.job, c);
      if (i + 1 < batch.size()) m.hdr.flags = flag::more_configs;
      ports_.send(std::move(m));
    }
    for (auto r : c.members) {
      auto m = make_configure(setup_.master, setup_.worker_ep(r), setup_.job, c);
      if (i < last[r]) m.hdr.flags = flag::more_configs;
      ports_.send(std::move(m));
    }
    log::info("job {}: from step {}: {} worker(s), {} shard(s)", setup_.job, c.from_step,
              c.members.size(), c.map.live_shards().size());
  }
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
    // From the first step it did not report: one that never reported from the step it joined
    // at (re-issuing earlier configurations would rewrite steps it had no part in).
    auto it = last_report_.find(r);
    auto joined = joined_at_.find(r);
    const std::int64_t first = joined == joined_at_.end() ? options_.first_step : joined->second;
    from = std::min(from, it == last_report_.end() ? first : it->second + 1);
  }
  // Re-issue every configuration that governs a step from `from` on, without them.
  send_configs(changes_.without(ranks, from, configs_));
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

}  // namespace coach::master
