// scheduler/cluster_core.cpp: the cluster scheduler's logic (cluster_core.hpp): nodes, decisions,
// runs and their ends. The job API is in cluster_core_api.cpp, script jobs' models in
// cluster_core_script.cpp.
#include "scheduler/cluster_core.hpp"

#include <cstdlib>

#include "common/format.hpp"
#include "common/writable.hpp"
#include "spec/checkpoint_file.hpp"

namespace coach::scheduler {

cluster_core::cluster_core(cluster_core_setup setup, cluster_core_ports ports)
    : setup_(std::move(setup)),
      ports_(std::move(ports)),
      nodes_(*setup_.steady, setup_.node_timeout),
      rebal_(*setup_.steady, rebalance_options{setup_.rebalance_interval}) {
  born_ = setup_.steady->now();
  open_store();
}

/// A line about job `id`: logged, and kept in its history (coach logs) while it is known.
void cluster_core::note_job(std::uint64_t id, std::string line) {
  if (auto* job = reg_ ? reg_->find(id) : nullptr)
    reg_->note(*job, std::move(line));
  else
    ports_.note(line);
}

void cluster_core::open_store() {
  auto made = executor::make({setup_.placement, 1});
  if (!made) {
    ports_.note(made.error().message + "; using dltap");
    made = executor::make({"dltap", 1});
  }
  exec_.emplace(std::move(*made));
  auto store = setup_.store;
  if (!store) {
    auto mem = job_store::open(":memory:");
    if (!mem) {
      ports_.note(mem.error().message);
      std::abort();  // SQLite cannot open a memory store: nothing sensible is left to do
    }
    store = std::make_shared<job_store>(std::move(*mem));
  }
  std::string initial = setup_.policy;
  if (auto saved = store->setting("policy"); saved && *saved) initial = **saved;
  policy_options po;
  po.slice = setup_.rr_slice;
  auto h = policy_holder::make(initial, po);
  if (!h) {
    ports_.note(coach::format("job store policy '{}': {}; using fifo", initial, h.error().message));
    h = policy_holder::make("fifo", po);
  }
  holder_.emplace(std::move(*h));
  if (auto n = store->replay_epochs(*holder_->model()); n && *n > 0)
    ports_.note(coach::format("the performance model relearned {} stored epoch(s)", *n));
  reg_.emplace(store, nodes_, *setup_.wall, setup_.self_host, ports_.note);
  auto n = reg_->load();
  if (!n) ports_.note("job store: cannot read the jobs: " + n.error().message);
  ports_.note(coach::format("policy {}, placement {}, job store '{}' ({} job(s))", holder_->name(),
                            exec_->placement_name(), store->path(), n ? *n : 0));
}

void cluster_core::stop_on(std::uint64_t id, const std::set<std::uint32_t>& hosts) {
  for (auto h : hosts) ports_.stop_job(h, id);
}

/// A stop unanswered for a node timeout by a live node is asked again.
void cluster_core::resend_stops() {
  for (const auto& [id, hosts] : reg_->stops_overdue(nodes_.timeout().count()))
    for (const auto h : hosts) {
      note_job(
          id, coach::format("job {}: node '{}' has not answered its stop within {} s; asking again",
                            id, nodes_.name(h), nodes_.timeout().count()));
      ports_.stop_job(h, id);
    }
}

/// Asks the policy at the next turn of the mailbox (many events make one decision).
void cluster_core::poke() {
  if (decide_queued_) return;
  decide_queued_ = true;
  ports_.decide_soon();
}

/// Another live node has `hb`'s name: why this one is refused; empty when the name is free.
std::string cluster_core::name_taken(const node_heartbeat& hb) const {
  // The scheduler's own node is never refused (that would stop the scheduler): a node that took
  // its name first is refused at its next heartbeat instead.
  if (hb.host == setup_.self_host) return {};
  for (const auto& [host, n] : nodes_.nodes())
    if (host != hb.host && n.alive && n.last.name == hb.name)
      return coach::format(
          "the name '{}' is taken by the live node at {}; give this node "
          "another --name",
          hb.name, n.last.address);
  return {};
}

void cluster_core::heartbeat(const node_heartbeat& hb) {
  // Names are unique among live nodes (coach migrate --to NAME): a second node of a live one's
  // name is refused, told why, and not listed. A dead node's name may be taken.
  if (auto why = name_taken(hb); !why.empty()) {
    if (refused_.insert(hb.host).second) {
      ports_.note(coach::format("node at {} refused: {}", hb.address, why));
      ports_.add_peer(hb.host, hb.address, hb.public_key);
    }
    ports_.refuse_node(hb.host, why);
    return;
  }
  refused_.erase(hb.host);
  node_report r;
  r.host = hb.host;
  r.name = hb.name;
  r.address = hb.address;
  r.public_key = hb.public_key;
  r.resources = hb.resources;
  r.parts_running = hb.actors_running;
  r.draining = hb.draining;
  const auto h = nodes_.heartbeat(std::move(r));
  // A node back with another key (rotated) is reached over a new connection.
  auto old = heartbeats_.find(hb.host);
  const bool rekeyed = old != heartbeats_.end() && old->second.public_key != hb.public_key;
  heartbeats_[hb.host] = hb;
  for (auto f = final_traffic_.begin(); f != final_traffic_.end();) {
    f->second.second.erase(hb.host);
    f = f->second.first.empty() && f->second.second.empty() ? final_traffic_.erase(f)
                                                            : std::next(f);
  }
  if (h.back) ports_.note(coach::format("node '{}' is back", hb.name));
  if (h.joined)
    ports_.note(coach::format("node '{}' joined (host {}, {})", hb.name, hb.host, hb.address));
  if ((h.moved || rekeyed) && hb.host != setup_.self_host)
    ports_.add_peer(hb.host, hb.address, hb.public_key);
  if (h.joined || h.back) {
    // Parts of a run this process no longer drives (it restarted) may still run there, and
    // so may the parts a node taken for dead held: frozen or cut off, not killed, it kept
    // them while their jobs went on, or restarted, without them. Told to stop before any new
    // part goes there (a node reads its commands in order).
    const auto left = reg_->came_back(hb.host);
    for (const auto id : left)
      note_job(id, coach::format("job {}: node '{}' is back; any part of the job it still "
                                 "holds is told to stop (the job went on without it)",
                                 id, hb.name));
    auto to_stop = left;
    to_stop.merge(reg_->seen(hb.host));
    for (const auto id : to_stop) ports_.stop_job(hb.host, id);
    poke();
  }
}

// --- decisions --------------------------------------------------------------------------------

void cluster_core::decide() {
  decide_queued_ = false;
  last_decision_ = setup_.steady->now();
  rebalancer* r = setup_.rebalance_interval.count() > 0 ? &rebal_ : nullptr;
  auto o = reg_->decide(*holder_, *exec_, r, ports_.busy);
  for (const auto& l : o.launches) launch(l);
  for (auto& s : o.stops) {
    ports_.stop_run(s.job);
    stop_on(s.job, s.hosts);
  }
  for (const auto& z : o.resizes) resize(z);
  for (const auto& m : o.moves) migrate(m);
}

/// Starts a run; its data set is loaded first when the job has none here (resumed after a
/// restart). A run that cannot start fails its job.
void cluster_core::launch(const launch_order& l) {
  auto* job = reg_->find(l.job);
  if (!job) return;
  auto& data = data_[l.job];
  auto ok = [&]() -> result<void> {
    const auto& rec = job->rec();
    auto spec = parse_job_spec(rec.spec_yaml, rec.source_name, rec.base_dir);
    if (!spec) return std::unexpected(spec.error());
    job_script script;
    if (spec->model.script) {
      auto s = script_of(l.job);
      if (!s) return std::unexpected(s.error());
      script = std::move(*s);
      if (!data) {
        auto m = worker::payload_model(*script, nullptr);
        if (!m) return std::unexpected(m.error());
        data = std::make_shared<const worker::dataset_pair>(worker::script_dataset((*m)->layout));
      }
    } else if (!data) {
      auto loaded = ports_.load_data(*spec);
      if (!loaded) return std::unexpected(loaded.error());
      data = std::move(*loaded);
    }
    return ports_.launch(*job, l, data, std::move(script));
  }();
  if (!ok) end(*job, job_state::failed, ok.error());
}

/// A policy resize: the registry changed the allocation; the master changes the job at its
/// next step boundary and asks for the parts added, which go where the registry planned them.
void cluster_core::resize(const resize_order& z) {
  ports_.rescale(z.job, z.workers, z.shards, [this, z](result<std::string> why) {
    if (!why || why->empty()) return;
    note_job(z.job, coach::format("job {}: the resize is refused: {}", z.job, *why));
    reg_->restore(z.job, z.generation, z.before, z.cause);
  });
}

/// dltap's live move of one shard beside more of its workers (the rebalancer counted it).
void cluster_core::migrate(const migrate_order& m) {
  ports_.migrate(m.job, m.shard, m.to, [this, m](result<std::string> why) {
    if (why && why->empty()) return;
    // Refused (another change in flight, the job ending) or unanswered: not a move; the next
    // decision may propose it again.
    rebal_.forget(m.job);
    reg_->move_refused(m.job);
    if (!why) return;
    note_job(m.job, coach::format("dltap: job {}: shard {} stays: {}", m.job, m.shard, *why));
  });
}

/// Ends a job: records why, stops its run here and its parts on every node.
void cluster_core::end(registered_job& job, job_state state, std::optional<coach::error> why) {
  const auto id = job.id();
  if (job.over()) return;
  const auto hosts = reg_->end(job, state, std::move(why));
  stop_on(id, hosts);
  if (!hosts.empty()) final_traffic_[id] = {hosts, {}};
  ports_.drop_run(id);
  data_.erase(id);
  scripts_.erase(id);
  if (auto dropped = reg_->store()->drop_script(id); !dropped) ports_.note(dropped.error().message);
  rebal_.forget(id);
  holder_->model()->forget_job(id);
  poke();  // what it held is free
}

// --- jobs -------------------------------------------------------------------------------------

result<std::uint64_t> cluster_core::submit(const submit_request& req) {
  // The same submit again (its answer was lost, or this scheduler restarted before giving it):
  // the job it stored, not a second one.
  if (req.token != 0) {
    auto known = reg_->store()->job_by_token(req.token);
    if (!known) return std::unexpected(known.error());
    if (*known) {
      note_job(**known,
               coach::format("job {}: its submit came again; answered with its id", **known));
      return **known;
    }
  }
  auto spec = parse_job_spec(req.spec_yaml, req.source_name, req.base_dir);
  if (!spec) return std::unexpected(spec.error());
  // The model is written here when the job succeeds: a path that cannot take it is said now,
  // not after the training (issue 37).
  if (!spec->output.empty())
    if (auto why = coach::unwritable("output:", spec->output))
      return fail(errc::invalid_argument, "{} (on the scheduler's host, which writes it)", *why);
  auto rec =
      reg_->admit(*spec, {req.spec_yaml, req.source_name, req.base_dir, req.workers, req.shards});
  if (!rec) return std::unexpected(rec.error());
  // The master and evaluator run here and need the data set (its test half, its size); a
  // script's is the sizes its submitter registered.
  auto data = spec->model.script || req.script ? check_script(*spec, req) : ports_.load_data(*spec);
  if (!data) return std::unexpected(data.error());
  const std::uint32_t asked = req.workers ? req.workers : std::uint32_t(spec->workers.initial);
  if (auto why = too_many_workers(*spec, (*data)->train.rows, asked,
                                  req.workers ? "--workers" : "workers.initial"))
    return std::unexpected(*why);
  auto job = reg_->add(std::move(*rec), *spec, (*data)->train.rows, req.token);
  if (!job) return std::unexpected(job.error());
  if (req.script)
    if (auto kept = keep_script((*job)->id(), req.script); !kept) {
      end(**job, job_state::failed, kept.error());
      return std::unexpected(kept.error());
    }
  data_[(*job)->id()] = std::move(*data);
  poke();
  return (*job)->id();
}

void cluster_core::command_answered(std::uint32_t from, const command_reply& r) {
  auto* job = reg_->find(r.job);
  if (!job) return;
  // A node answers in the order it was told: the answer to a stop of an earlier run comes
  // before any answer about the next one.
  if (r.stopped) {
    // An ended job's node stopped its parts: its next heartbeat has their last bytes.
    if (auto f = final_traffic_.find(r.job);
        f != final_traffic_.end() && f->second.first.erase(from))
      f->second.second.insert(from);
    if (job->stops().stopping(from) && reg_->stop_answered(*job, from)) poke();
    return;
  }
  if (job->over() || !job->launched()) return;
  auto a = ports_.start_answered(*job, from, r);
  if (!a) return end(*job, job_state::failed, a.error());
  if (*a) poke();  // a running job may be resized
}

// --- what a run reports -----------------------------------------------------------------------

void cluster_core::progress(std::uint64_t id, std::uint32_t gen, const progress_event& p) {
  if (auto* job = reg_->current(id, gen)) reg_->progress(*job, p);
}

void cluster_core::epoch(std::uint64_t id, std::uint32_t gen, const epoch_report& e) {
  if (auto* job = reg_->current(id, gen)) reg_->epoch(*job, e, *holder_->model());
}

void cluster_core::checkpoint(std::uint64_t id, std::uint32_t gen, std::uint32_t epoch,
                              std::shared_ptr<const ps::training_state> state) {
  if (auto* job = reg_->current(id, gen)) reg_->checkpoint(*job, epoch, std::move(state));
}

/// A change took effect: what the parts that left held is free (sent by the master straight
/// to the scheduler, so it arrives before the parts of any later change are asked for).
void cluster_core::layout(std::uint64_t id, std::uint32_t gen,
                          const std::vector<std::uint32_t>& members,
                          const std::vector<std::uint32_t>& live) {
  if (auto* job = reg_->current(id, gen); job && reg_->layout(*job, members, live)) poke();
}

void cluster_core::done(std::uint64_t id, std::uint32_t gen, std::optional<coach::error> failure,
                        job_result& result) {
  auto* job = reg_->current(id, gen);
  if (!job) return;
  if (failure) return end(*job, job_state::failed, std::move(failure));
  reg_->finished(*job, result);
  if (result.cancelled)
    return end(*job, job_state::cancelled, coach::error{errc::cancelled, "cancelled by the user"});
  if (auto saved = write_output(*job, result); !saved)
    return end(*job, job_state::failed, saved.error());
  end(*job, job_state::succeeded, std::nullopt);
}

/// The spec's `output:`, when it has one: the final model written on this host. A job whose
/// model cannot be written failed (its parameters would be lost), with the reason.
result<void> cluster_core::write_output(registered_job& job, job_result& r) {
  auto spec = parse_job_spec(job.rec().spec_yaml, job.rec().source_name, job.rec().base_dir);
  if (!spec || spec->output.empty()) return {};
  if (auto ok = with_script_layout(job.id(), *spec); !ok)
    return fail(ok.error().code, "job {}: its model could not be written: {}", job.id(),
                ok.error().message);
  // find, not []: a job without its data here must not get an empty entry.
  const auto found = data_.find(job.id());
  const auto data = found == data_.end() ? nullptr : found->second;
  if (r.params.empty() || !data)
    return fail(errc::internal, "job {}: no final parameters to write to {}", job.id(),
                spec->output);
  r.class_names = data->train.class_names;
  r.transform = data->transform;
  r.sample_shape = data->train.shape;
  r.features = data->train.features;
  r.classes = data->train.classes;
  r.fields = data->train.fields;
  if (auto ok = write_model(spec->output, *spec, r); !ok)
    return fail(ok.error().code,
                "job {}: training finished (test accuracy {:.4f}) but its model "
                "could not be written: {}",
                job.id(), r.test_accuracy, ok.error().message);
  note_job(job.id(), coach::format("job {}: model saved to {}", job.id(), spec->output));
  return {};
}

// --- nodes ------------------------------------------------------------------------------------

void cluster_core::tick() {
  // Nodes of an earlier process's runs that have not come back within the node timeout are
  // taken for dead: their parts died with them.
  if (setup_.steady->now() - born_ > nodes_.timeout() && reg_->forget_unseen()) poke();
  resend_stops();
  // A node silent past the timeout is judged once every message that came before now is
  // read: under a burst of job API requests its heartbeats may wait in the mailbox behind
  // them (and the scheduler's own node's among them).
  if (const auto as_of = nodes_.check()) ports_.expire_soon(*as_of);
  if (setup_.steady->now() - last_decision_ >= setup_.decide_every) poke();
}

void cluster_core::expire(time_point as_of) {
  for (const auto host : nodes_.expire_as_of(as_of)) lost(host, "stopped heartbeating");
}

/// A node's process is gone (the transport saw its connection close and its address refuse a
/// new one): lost now, not after the node timeout.
void cluster_core::peer_gone(std::uint32_t host) {
  if (host != setup_.self_host && nodes_.lose(host)) lost(host, "closed its connections");
}

/// What a lost node costs its jobs: workers dropped, shards taken over by their backups, or a
/// restart from the checkpoint; `how` says how it was noticed.
void cluster_core::lost(std::uint32_t host, std::string_view how) {
  const std::string name = nodes_.name(host);
  ports_.note(coach::format("node '{}' {}", name, how));
  poke();
  for (auto& loss : reg_->lose_node(host)) {
    auto* job = reg_->find(loss.job);
    if (loss.fails) {
      end(*job, job_state::failed,
          coach::error{errc::resource_exhausted, coach::format("node '{}' {}", name, how)});
      continue;
    }
    if (loss.recovers) {
      // Stopped in the registry: its master here, its parts on the nodes left; it starts
      // again from its checkpoint once they answered.
      ports_.stop_run(loss.job);
      stop_on(loss.job, loss.stop_hosts);
      note_job(loss.job,
               coach::format("job {} lost its parts on '{}'; it restarts from its checkpoint at "
                             "epoch {} on the nodes left ({:.1f} s of work lost)",
                             loss.job, name, job->first_epoch() + 1,
                             job->status().recoveries_lost_s.back()));
      continue;
    }
    // Backups take over first: the configurations that drop the lost workers then go to
    // the new primaries.
    if (!loss.heads.empty() || !loss.cut.empty()) {
      std::string which;
      for (std::size_t j = 0; j + 1 < loss.heads.size(); j += 2)
        which += coach::format("{}shard {}", which.empty() ? "" : ", ", loss.heads[j]);
      if (!which.empty())
        note_job(loss.job,
                 coach::format("job {}: backups take over {} from '{}'", loss.job, which, name));
      ports_.take_over(loss.job, std::move(loss.heads), std::move(loss.cut));
    }
    if (loss.ranks.empty()) continue;
    note_job(loss.job, coach::format("job {} goes on without the {} worker(s) of '{}'", loss.job,
                                     loss.ranks.size(), name));
    ports_.lose_workers(loss.job, std::move(loss.ranks));
  }
}

void cluster_core::cancel_due(std::uint64_t id, std::uint32_t gen) {
  auto* job = reg_->current(id, gen);
  if (!job || job->over()) return;
  note_job(id, coach::format("job {} did not stop at a step within {} s of its cancel; "
                             "its parts are stopped where they are",
                             id, cancel_grace.count()));
  end(*job, job_state::cancelled, coach::error{errc::cancelled, "cancelled by the user"});
}

}  // namespace coach::scheduler
