// actors/cluster_scheduler.cpp: the cluster scheduler of a coach-node --scheduler, as messages.
// The logic is plain classes in scheduler/: node_table (heartbeats → the cluster view,
// liveness), job_registry (the jobs, admission, their life, the store), executor (a policy's
// actions through a placement) and rebalancer (dltap's live shard moves). This actor turns
// messages into their calls and carries out what they order: a launch runs the job's master
// and evaluator here and tells the nodes to start its parts (shards first, then workers); a
// resize or a migration is asked of the job's master, which changes the job at its next step
// boundary and asks for the parts it adds (placed by the registry, started by the nodes); a
// stop ends a run here and on its nodes (docs/scheduler.md, "In the cluster scheduler").
#include <caf/all.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <set>

#include "actors/cluster.hpp"
#include "actors/dashboard.hpp"
#include "actors/job_runner.hpp"
#include "actors/metrics.hpp"
#include "actors/roles.hpp"
#include "common/log.hpp"
#include "common/writable.hpp"
#include "scheduler/executor.hpp"
#include "scheduler/job_registry.hpp"
#include "scheduler/node_table.hpp"
#include "scheduler/policy.hpp"
#include "scheduler/rebalance.hpp"
#include "spec/checkpoint_file.hpp"

namespace coach::actors {
namespace {

namespace sched = coach::scheduler;
using job_entry = sched::registered_job;

// (decide_atom): ask the policy now.
using decide_atom = caf::atom_constant<caf::atom("decide")>;
// (expire_atom, as_of): the nodes silent past the timeout as of then, with every message that
// came before read, are dead.
using expire_atom = caf::atom_constant<caf::atom("expire")>;
// (cancel_due_atom, job, generation): the run cancelled then must have ended by now.
using cancel_due_atom = caf::atom_constant<caf::atom("canceldue")>;

/// How long a cancelled run may take to stop at a step boundary before its parts are stopped
/// where they are (a run whose step cannot finish, e.g. one waiting on a part that is gone).
constexpr auto cancel_grace = std::chrono::seconds(3);

void note(const std::string& line) {
  log::info("{}", line);
}

struct scheduler_state {
  /// A line about job `id`: logged, and kept in its history (coach logs) while it is known.
  void note_job(std::uint64_t id, std::string line) {
    if (auto* job = reg ? reg->find(id) : nullptr)
      reg->note(*job, std::move(line));
    else
      note(line);
  }

  std::shared_ptr<zmq_transport> net;
  scheduler_options opt;
  endpoint self_ep;
  sched::steady_clock_source steady;
  sched::wall_clock wall;
  sched::node_table nodes{steady, sched::seconds(5)};
  std::map<std::uint32_t, node_heartbeat> heartbeats;  ///< the latest of each node, as it came
  /// Ended jobs whose traffic is not all in: the hosts told to stop that have not answered, and
  /// those that answered but have not sent a heartbeat since (which carries their last bytes).
  std::map<std::uint64_t, std::pair<std::set<std::uint32_t>, std::set<std::uint32_t>>>
      final_traffic;
  std::optional<sched::executor> exec;
  std::optional<sched::rebalancer> rebal;
  std::optional<sched::policy_holder> holder;
  std::optional<sched::job_registry> reg;
  std::map<std::uint64_t, job_runner> runs;
  sched::time_point born{}, last_decision{};
  bool decide_queued = false;
  caf::event_based_actor* self = nullptr;
  static inline const char* name = "coach.cluster_scheduler";

  runner_env env() {
    return {self,
            net,
            self_ep,
            &nodes,
            &*reg,
            &*exec,
            opt.address.empty() ? net->bound_address() : opt.address};
  }

  void send(const endpoint& dst, const control_message& m) {
    net->send(make_control(self_ep, dst, m));
  }
  void stop_on(std::uint64_t id, const std::set<std::uint32_t>& hosts) {
    for (auto h : hosts) send({h, node_agent_id}, stop_job{id});
  }

  /// A stop unanswered for a node timeout by a live node is asked again.
  void resend_stops() {
    for (const auto& [id, hosts] : reg->stops_overdue(nodes.timeout().count()))
      for (const auto h : hosts) {
        note_job(id, coach::format(
                         "job {}: node '{}' has not answered its stop within {} s; asking again",
                         id, nodes.name(h), nodes.timeout().count()));
        send({h, node_agent_id}, stop_job{id});
      }
  }

  /// Asks the policy at the next turn of the mailbox (many events make one decision).
  void poke() {
    if (decide_queued) return;
    decide_queued = true;
    self->send(self, decide_atom::value);
  }

  void open_store(std::uint32_t host) {
    auto made = sched::executor::make({opt.placement, 1});
    if (!made) {
      note(made.error().message + "; using dltap");
      made = sched::executor::make({"dltap", 1});
    }
    exec.emplace(std::move(*made));
    auto store = opt.store;
    if (!store) {
      auto mem = sched::job_store::open(":memory:");
      if (!mem) {
        note(mem.error().message);
        std::abort();  // SQLite cannot open a memory store: nothing sensible is left to do
      }
      store = std::make_shared<sched::job_store>(std::move(*mem));
    }
    std::string initial = opt.policy;
    if (auto saved = store->setting("policy"); saved && *saved) initial = **saved;
    sched::policy_options po;
    po.slice = opt.rr_slice;
    auto h = sched::policy_holder::make(initial, po);
    if (!h) {
      note(coach::format("job store policy '{}': {}; using fifo", initial, h.error().message));
      h = sched::policy_holder::make("fifo", po);
    }
    holder.emplace(std::move(*h));
    if (auto n = store->replay_epochs(*holder->model()); n && *n > 0)
      note(coach::format("the performance model relearned {} stored epoch(s)", *n));
    reg.emplace(store, nodes, wall, host, note);
    auto n = reg->load();
    if (!n) note("job store: cannot read the jobs: " + n.error().message);
    note(coach::format("policy {}, placement {}, job store '{}' ({} job(s))", holder->name(),
                       exec->placement_name(), store->path(), n ? *n : 0));
  }

  void on_heartbeat(const node_heartbeat& hb) {
    sched::node_report r;
    r.host = hb.host;
    r.name = hb.name;
    r.address = hb.address;
    r.public_key = hb.public_key;
    r.resources = hb.resources;
    r.parts_running = hb.actors_running;
    r.draining = hb.draining;
    const auto h = nodes.heartbeat(std::move(r));
    // A node back with another key (rotated) is reached over a new connection.
    auto old = heartbeats.find(hb.host);
    const bool rekeyed = old != heartbeats.end() && old->second.public_key != hb.public_key;
    heartbeats[hb.host] = hb;
    for (auto f = final_traffic.begin(); f != final_traffic.end();) {
      f->second.second.erase(hb.host);
      f = f->second.first.empty() && f->second.second.empty() ? final_traffic.erase(f)
                                                              : std::next(f);
    }
    if (h.back) note(coach::format("node '{}' is back", hb.name));
    if (h.joined)
      note(coach::format("node '{}' joined (host {}, {})", hb.name, hb.host, hb.address));
    if ((h.moved || rekeyed) && hb.host != self_ep.host)
      net->add_peer(hb.host, hb.address, hb.public_key);
    if (h.joined || h.back) {
      // Parts of a run this process no longer drives (it restarted) may still run there, and
      // so may the parts a node taken for dead held: frozen or cut off, not killed, it kept
      // them while their jobs went on, or restarted, without them. Told to stop before any new
      // part goes there (a node reads its commands in order).
      const auto left = reg->came_back(hb.host);
      for (const auto id : left)
        note_job(id, coach::format("job {}: node '{}' is back; any part of the job it still "
                                   "holds is told to stop (the job went on without it)",
                                   id, hb.name));
      auto to_stop = left;
      to_stop.merge(reg->seen(hb.host));
      for (const auto id : to_stop) send({hb.host, node_agent_id}, stop_job{id});
      poke();
    }
  }

  // --- decisions ------------------------------------------------------------------------------

  void decide() {
    decide_queued = false;
    last_decision = steady.now();
    sched::rebalancer* r = opt.rebalance_interval.count() > 0 ? &*rebal : nullptr;
    auto busy = [this](std::uint64_t id) {
      auto it = runs.find(id);
      return it == runs.end() || it->second.busy();
    };
    auto o = reg->decide(*holder, *exec, r, busy);
    for (const auto& l : o.launches)
      if (auto* job = reg->find(l.job))
        if (auto ok = runs[l.job].launch(env(), *job, l); !ok)
          end(*job, job_state::failed, ok.error());
    for (auto& s : o.stops) {
      runs[s.job].stop(env());
      stop_on(s.job, s.hosts);
    }
    for (auto& z : o.resizes) resize(std::move(z));
    for (const auto& m : o.moves) migrate(m);
  }

  /// A policy resize: the registry changed the allocation; the master changes the job at its
  /// next step boundary and asks for the parts added, which go where the registry planned them.
  void resize(sched::resize_order z) {
    auto& run = runs[z.job];
    self->request(run.master(), std::chrono::seconds(10), rescale_atom::value, z.workers, z.shards)
        .then(
            [this, z](std::string& why) {
              if (why.empty()) return;
              note_job(z.job, coach::format("job {}: the resize is refused: {}", z.job, why));
              reg->restore(z.job, z.generation, z.before);
            },
            [](caf::error&) {});
  }

  /// dltap's live move of one shard beside more of its workers (the rebalancer counted it).
  void migrate(const sched::migrate_order& m) {
    self->request(runs[m.job].master(), std::chrono::seconds(10), migrate_atom::value, m.shard,
                  m.to)
        .then(
            [this, m](std::string& why) {
              if (why.empty()) return;
              // Refused (another change in flight, the job ending): not a move; the next
              // decision may propose it again.
              rebal->forget(m.job);
              note_job(m.job,
                       coach::format("dltap: job {}: shard {} stays: {}", m.job, m.shard, why));
            },
            [this, id = m.job](caf::error&) { rebal->forget(id); });
  }

  /// Ends a job: records why, stops its run here and its parts on every node.
  void end(job_entry& job, job_state state, std::optional<coach::error> why) {
    const auto id = job.id();
    if (job.over()) return;
    const auto hosts = reg->end(job, state, std::move(why));
    stop_on(id, hosts);
    if (!hosts.empty()) final_traffic[id] = {hosts, {}};
    runs[id].stop(env());
    runs.erase(id);
    rebal->forget(id);
    holder->model()->forget_job(id);
    poke();  // what it held is free
  }

  // --- jobs -----------------------------------------------------------------------------------

  result<std::uint64_t> submit(const submit_request& req) {
    // The same submit again (its answer was lost, or this scheduler restarted before giving it):
    // the job it stored, not a second one.
    if (req.token != 0) {
      auto known = reg->store()->job_by_token(req.token);
      if (!known) return std::unexpected(known.error());
      if (*known) {
        note_job(**known,
                 coach::format("job {}: its submit came again; answered with its id", **known));
        return **known;
      }
    }
    auto spec = sched::parse_job_spec(req.spec_yaml, req.source_name, req.base_dir);
    if (!spec) return std::unexpected(spec.error());
    // The model is written here when the job succeeds: a path that cannot take it is said now,
    // not after the training (issue 37).
    if (!spec->output.empty())
      if (auto why = coach::unwritable("output:", spec->output))
        return fail(errc::invalid_argument, "{} (on the scheduler's host, which writes it)", *why);
    auto rec =
        reg->admit(*spec, {req.spec_yaml, req.source_name, req.base_dir, req.workers, req.shards});
    if (!rec) return std::unexpected(rec.error());
    // The master and evaluator run here and need the data set (its test half, its size).
    auto data = load_job_data(*spec);
    if (!data) return std::unexpected(data.error());
    const std::uint32_t asked = req.workers ? req.workers : std::uint32_t(spec->workers.initial);
    if (auto why = sched::too_many_workers(*spec, (*data)->train.rows, asked,
                                           req.workers ? "--workers" : "workers.initial"))
      return std::unexpected(*why);
    auto job = reg->add(std::move(*rec), *spec, (*data)->train.rows, req.token);
    if (!job) return std::unexpected(job.error());
    runs[(*job)->id()].data = std::move(*data);
    poke();
    return (*job)->id();
  }

  void on_add_part(std::uint64_t id, std::uint32_t gen, added_part& part, std::string& node) {
    if (auto* job = reg->current(id, gen))
      runs[id].add(env(), *job, std::move(part), std::move(node));
  }

  void on_command_reply(std::uint32_t from, const command_reply& r) {
    auto* job = reg->find(r.job);
    if (!job) return;
    // A node answers in the order it was told: the answer to a stop of an earlier run comes
    // before any answer about the next one.
    if (r.stopped) {
      // An ended job's node stopped its parts: its next heartbeat has their last bytes.
      if (auto f = final_traffic.find(r.job);
          f != final_traffic.end() && f->second.first.erase(from))
        f->second.second.insert(from);
      if (job->stops().stopping(from) && reg->stop_answered(*job, from)) poke();
      return;
    }
    if (job->over() || !job->launched()) return;
    auto a = runs[r.job].on_reply(env(), *job, from, r);
    if (!a) return end(*job, job_state::failed, a.error());
    if (*a == job_runner::answer::started) poke();  // a running job may be resized
  }

  // --- what a run reports ---------------------------------------------------------------------

  void on_done(std::uint64_t id, std::uint32_t gen, job_outcome& o) {
    auto* job = reg->current(id, gen);
    if (!job) return;
    if (o.failure) return end(*job, job_state::failed, o.failure);
    reg->finished(*job, o.result);
    if (o.result.cancelled)
      return end(*job, job_state::cancelled,
                 coach::error{errc::cancelled, "cancelled by the user"});
    if (auto saved = write_output(*job, o.result); !saved)
      return end(*job, job_state::failed, saved.error());
    end(*job, job_state::succeeded, std::nullopt);
  }

  /// The spec's `output:`, when it has one: the final model written on this host. A job whose
  /// model cannot be written failed (its parameters would be lost), with the reason.
  result<void> write_output(job_entry& job, sched::job_result& r) {
    auto spec =
        sched::parse_job_spec(job.rec().spec_yaml, job.rec().source_name, job.rec().base_dir);
    if (!spec || spec->output.empty()) return {};
    // find, not []: a job without a runner here must not get an empty one.
    const auto run = runs.find(job.id());
    const auto data = run == runs.end() ? nullptr : run->second.data;
    if (r.params.empty() || !data)
      return fail(errc::internal, "job {}: no final parameters to write to {}", job.id(),
                  spec->output);
    r.class_names = data->train.class_names;
    r.transform = data->transform;
    r.sample_shape = data->train.shape;
    r.features = data->train.features;
    r.classes = data->train.classes;
    if (auto ok = sched::write_model(spec->output, *spec, r); !ok)
      return fail(ok.error().code,
                  "job {}: training finished (test accuracy {:.4f}) but its model "
                  "could not be written: {}",
                  job.id(), r.test_accuracy, ok.error().message);
    note_job(job.id(), coach::format("job {}: model saved to {}", job.id(), spec->output));
    return {};
  }

  /// A change took effect: what the parts that left held is free (sent by the master straight
  /// here, so it arrives before the parts of any later change are asked for).
  void on_layout(std::uint64_t id, std::uint32_t gen, const std::vector<std::uint32_t>& members,
                 const std::vector<std::uint32_t>& live) {
    if (auto* job = reg->current(id, gen); job && reg->layout(*job, members, live)) poke();
  }

  void check_nodes() {
    // Nodes of an earlier process's runs that have not come back within the node timeout are
    // taken for dead: their parts died with them.
    if (steady.now() - born > nodes.timeout() && reg->forget_unseen()) poke();
    resend_stops();
    // A node silent past the timeout is judged once every message that came before now is
    // read: under a burst of job API requests its heartbeats may wait in the mailbox behind
    // them (and the scheduler's own node's among them).
    if (const auto as_of = nodes.check())
      self->send(self, expire_atom::value, sched::to_seconds(*as_of));
  }

  void expire_nodes(double as_of) {
    for (const auto host : nodes.expire_as_of(sched::at_seconds(as_of)))
      lost(host, "stopped heartbeating");
  }

  /// A node's process is gone (the transport saw its connection close and its address refuse a
  /// new one): lost now, not after the node timeout.
  void on_peer_gone(std::uint32_t host) {
    if (host != self_ep.host && nodes.lose(host)) lost(host, "closed its connections");
  }

  /// What a lost node costs its jobs: workers dropped, shards taken over by their backups, or a
  /// restart from the checkpoint; `how` says how it was noticed.
  void lost(std::uint32_t host, std::string_view how) {
    const std::string name = nodes.name(host);
    note(coach::format("node '{}' {}", name, how));
    poke();
    for (auto& loss : reg->lose_node(host)) {
      auto* job = reg->find(loss.job);
      if (loss.fails) {
        end(*job, job_state::failed,
            coach::error{errc::resource_exhausted, coach::format("node '{}' {}", name, how)});
        continue;
      }
      if (loss.recovers) {
        // Stopped in the registry: its master here, its parts on the nodes left; it starts
        // again from its checkpoint once they answered.
        runs[loss.job].stop(env());
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
        caf::anon_send(runs[loss.job].master(), take_over_atom::value, std::move(loss.heads),
                       std::move(loss.cut));
      }
      if (loss.ranks.empty()) continue;
      note_job(loss.job, coach::format("job {} goes on without the {} worker(s) of '{}'", loss.job,
                                       loss.ranks.size(), name));
      caf::anon_send(runs[loss.job].master(), lost_atom::value, std::move(loss.ranks));
    }
  }

  // --- the job API ----------------------------------------------------------------------------

  /// The scheduler's families of /metrics: what `coach status --json` and `coach nodes` show.
  std::string metrics() {
    std::vector<job_status> jobs;
    for (const auto& [id, job] : reg->jobs()) jobs.push_back(snapshot(job, true));
    std::vector<node_status> known;
    for (const auto& [host, n] : nodes.nodes())
      known.push_back({heartbeats.at(host), nodes.silent_for(host), n.alive});
    return scheduler_metrics(jobs, known, holder->name());
  }

  /// The dashboard's state: every job with its curve and history, the nodes, the policy.
  std::string dashboard(bool admin) {
    std::vector<dashboard_job> jobs;
    for (const auto& [id, job] : reg->jobs())
      jobs.push_back({snapshot(job, false), job.curve(), reg->events(job, 0)});
    std::vector<node_status> known;
    for (const auto& [host, n] : nodes.nodes())
      known.push_back({heartbeats.at(host), nodes.silent_for(host), n.alive});
    return dashboard_state(jobs, known, holder->name(), admin);
  }

  /// An action from the dashboard (its server checked --dashboard-admin): as the CLI's.
  std::string dashboard_action(const std::string& action, const std::string& arg) {
    api_reply r;
    if (action == "policy") {
      r = answer(policy_request{arg});
    } else if (action == "cancel") {
      std::uint64_t id = 0;
      const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), id);
      if (ec != std::errc{} || end != arg.data() + arg.size())
        return coach::format("'{}' is no job id", arg);
      r = answer(cancel_request{id});
    } else {
      return coach::format("unknown action '{}'", action);
    }
    return r.failure ? r.failure->message : std::string{};
  }

  job_status snapshot(const job_entry& job, bool with_model) {
    auto s = reg->snapshot(job, with_model ? holder->model().get() : nullptr, holder->name());
    // Traffic: what every node's transport sent for this job, from their latest heartbeats.
    for (const auto& [host, hb] : heartbeats)
      for (const auto& l : hb.traffic)
        if (l.job == s.job) s.traffic.push_back(l);
    s.traffic_final = job.over() && !final_traffic.contains(s.job);
    return s;
  }

  /// Rescale and migrate: checked here, then asked of the job's master, which answers when it
  /// has queued the change for the job's next step boundary. False for other requests.
  bool forward(const endpoint& client, const api_request& req) {
    auto reply = [this, client](std::optional<coach::error> e) {
      api_reply r;
      r.failure = std::move(e);
      send(client, r);
      return true;
    };
    // On success, `done` adjusts the registry's record of the job's allocation (what a change
    // frees is freed for good by on_layout when it takes effect).
    auto relay = [this, reply](auto&& handle, std::function<void()> done) {
      handle.then(
          [reply, done](std::string& why) {
            if (!why.empty()) {
              reply(coach::error{errc::invalid_argument, why});
              return;
            }
            done();
            reply(std::nullopt);
          },
          [reply](caf::error& e) {
            reply(coach::error{errc::internal, "the job master did not answer: " + to_string(e)});
          });
      return true;
    };
    constexpr auto timeout = std::chrono::seconds(10);
    if (const auto* r = std::get_if<rescale_request>(&req)) {
      auto job = reg->running_job(r->job);
      if (!job) return reply(job.error());
      const std::uint64_t id = r->job;
      const std::uint32_t w = r->workers, s = r->shards;
      const auto gen = (*job)->generation();
      return relay(self->request(runs[id].master(), timeout, rescale_atom::value, w, s),
                   [this, id, gen, w, s] {
                     if (auto* j = reg->current(id, gen)) reg->rescaled(*j, w, s);
                   });
    }
    if (const auto* m = std::get_if<migrate_request>(&req)) {
      auto job = reg->running_job(m->job);
      if (!job) return reply(job.error());
      if (m->to_node.empty())
        return reply(coach::error{errc::invalid_argument, "--to NODE is empty"});
      if (auto host = nodes.by_name(m->to_node); !host) return reply(host.error());
      return relay(
          self->request(runs[m->job].master(), timeout, migrate_atom::value, m->shard, m->to_node),
          [] {});
    }
    return false;
  }

  api_reply answer(const api_request& req) {
    api_reply reply;
    auto failed = [&](const coach::error& e) {
      reply.failure = e;
      return reply;
    };
    if (auto* sub = std::get_if<submit_request>(&req)) {
      auto id = submit(*sub);
      if (!id) return failed(id.error());
      reply.body = submit_reply{*id};
    } else if (auto* st = std::get_if<status_request>(&req)) {
      status_reply out;
      if (st->job != 0) {
        auto* job = reg->find(st->job);
        if (!job) return failed({errc::not_found, coach::format("no job {}", st->job)});
        out.jobs.push_back(snapshot(*job, true));
      } else {
        for (const auto& [id, job] : reg->jobs()) out.jobs.push_back(snapshot(job, false));
      }
      reply.body = std::move(out);
    } else if (std::get_if<nodes_request>(&req)) {
      nodes_reply out;
      for (const auto& [host, n] : nodes.nodes())
        out.nodes.push_back({heartbeats.at(host), nodes.silent_for(host), n.alive});
      reply.body = std::move(out);
    } else if (auto* c = std::get_if<cancel_request>(&req)) {
      auto job = reg->cancel(c->job);
      if (!job) return failed(job.error());
      if ((*job)->running()) {
        caf::anon_send(runs[c->job].master(), cancel_atom::value);
        self->delayed_send(self, cancel_grace, cancel_due_atom::value, c->job,
                           (*job)->generation());
      } else  // waiting or still starting: nothing more will train
        end(**job, job_state::cancelled, coach::error{errc::cancelled, "cancelled by the user"});
      reply.body = ack_reply{};
    } else if (auto* p = std::get_if<policy_request>(&req)) {
      if (p->set) {
        // Between two decisions: running jobs keep what they have; the next is the new policy's.
        if (auto ok = holder->set(*p->set); !ok) return failed(ok.error());
        if (auto ok = reg->store()->set_setting("policy", holder->name()); !ok)
          note("job store: cannot record the policy: " + ok.error().message);
        note("policy is now " + holder->name());
        poke();
      }
      reply.body = policy_reply{holder->name()};
    } else if (auto* l = std::get_if<logs_request>(&req)) {
      auto* job = reg->find(l->job);
      if (!job) return failed({errc::not_found, coach::format("no job {}", l->job)});
      reply.body = logs_reply{reg->events(*job, l->after), job->over()};
    }
    return reply;
  }
};

caf::behavior cluster_scheduler(caf::stateful_actor<scheduler_state>* self,
                                std::shared_ptr<zmq_transport> net, std::uint32_t host,
                                scheduler_options opt) {
  auto& st = self->state;
  st.net = std::move(net);
  st.opt = opt;
  st.self_ep = {host, scheduler_id};
  st.self = self;
  st.born = st.steady.now();
  st.nodes.set_timeout(std::chrono::duration_cast<sched::seconds>(opt.node_timeout));
  st.rebal.emplace(
      st.steady,
      sched::rebalance_options{std::chrono::duration_cast<sched::seconds>(opt.rebalance_interval)});
  st.open_store(host);
  st.net->bind(st.self_ep, caf::actor_cast<caf::actor>(self));
  // A node's process that dies (its host up) closes its connections: lost at once, not after the
  // node timeout. The handler holds the scheduler weakly: the transport outlives it.
  st.net->on_peer_gone([addr = self->address()](std::uint32_t h) {
    if (auto me = caf::actor_cast<caf::actor>(addr)) caf::anon_send(me, peer_gone_atom::value, h);
  });
  self->attach_functor([net = st.net, ep = st.self_ep] {
    net->on_peer_gone(nullptr);
    net->unbind(ep);
  });
  const auto tick_every = [self] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(self->state.nodes.check_every());
  };
  self->delayed_send(self, tick_every(), tick_atom::value);
  return {
      [self, tick_every](tick_atom) {
        auto& s = self->state;
        s.check_nodes();
        if (s.steady.now() - s.last_decision >= s.opt.decide_every) s.poke();
        self->delayed_send(self, tick_every(), tick_atom::value);
      },
      [self](decide_atom) { self->state.decide(); },
      [self](metrics_atom) { return self->state.metrics(); },
      [self](dashboard_atom, bool admin) { return self->state.dashboard(admin); },
      [self](dashboard_atom, std::string& action, std::string& arg) -> std::string {
        return self->state.dashboard_action(action, arg);
      },
      [self](peer_gone_atom, std::uint32_t host) { self->state.on_peer_gone(host); },
      [self](expire_atom, double as_of) { self->state.expire_nodes(as_of); },
      [self](cancel_due_atom, std::uint64_t id, std::uint32_t gen) {
        auto& s = self->state;
        auto* job = s.reg->current(id, gen);
        if (!job || job->over()) return;
        s.note_job(id, coach::format("job {} did not stop at a step within {} s of its cancel; "
                                     "its parts are stopped where they are",
                                     id, cancel_grace.count()));
        s.end(*job, job_state::cancelled, coach::error{errc::cancelled, "cancelled by the user"});
      },
      [self](wire_message& m) {
        auto& s = self->state;
        auto msg = read_control(m);
        if (!msg) return;
        if (auto* hb = std::get_if<node_heartbeat>(&*msg)) {
          if (hb->host != m.hdr.src.host) return;  // a heartbeat speaks for its own host only
          s.on_heartbeat(*hb);
        } else if (auto* r = std::get_if<command_reply>(&*msg)) {
          s.on_command_reply(m.hdr.src.host, *r);
        } else if (auto* req = std::get_if<api_request>(&*msg)) {
          if (!s.forward(m.hdr.src, *req)) s.send(m.hdr.src, s.answer(*req));
        }
      },
      [self](job_progress_atom, std::uint64_t id, std::uint32_t gen, sched::progress_event& p) {
        if (auto* job = self->state.reg->current(id, gen)) self->state.reg->progress(*job, p);
      },
      [self](add_part_atom, std::uint64_t id, std::uint32_t gen, added_part& part,
             std::string& node) { self->state.on_add_part(id, gen, part, node); },
      [self](job_layout_atom, std::uint64_t id, std::uint32_t gen,
             std::vector<std::uint32_t>& members,
             std::vector<std::uint32_t>& live) { self->state.on_layout(id, gen, members, live); },
      [self](job_epoch_atom, std::uint64_t id, std::uint32_t gen, sched::epoch_report& e) {
        auto& s = self->state;
        if (auto* job = s.reg->current(id, gen)) s.reg->epoch(*job, e, *s.holder->model());
      },
      [self](job_checkpoint_atom, std::uint64_t id, std::uint32_t gen, param_snapshot& p) {
        if (auto* job = self->state.reg->current(id, gen))
          self->state.reg->checkpoint(*job, p.epoch, p.state);
      },
      [self](job_done_atom, std::uint64_t id, std::uint32_t gen, job_outcome& o) {
        self->state.on_done(id, gen, o);
      },
  };
}

}  // namespace

caf::actor spawn_cluster_scheduler(caf::actor_system& sys, std::shared_ptr<zmq_transport> net,
                                   std::uint32_t host, scheduler_options opt) {
  return sys.spawn<caf::detached>(cluster_scheduler, std::move(net), host, std::move(opt));
}

}  // namespace coach::actors
