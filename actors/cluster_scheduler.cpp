#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "actors/cluster.hpp"
#include "actors/roles.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(coach::actors::added_part)

namespace coach::actors {
namespace {

using clock_type = std::chrono::steady_clock;

struct node_entry {
  node_heartbeat last;
  clock_type::time_point seen;
  bool alive = true;
};

/// A part a job master asked for while its job runs: placed on `host`, announced to every node
/// of the job; the master hears of it once all of them acknowledged.
struct part_add {
  added_part part;
  std::string node;  ///< asked for by name (coach migrate --to); empty: the scheduler picks
  std::uint32_t host = 0;
  std::set<std::uint32_t> pending;  ///< nodes that have not acknowledged
  std::optional<coach::error> failure;
  bool sent = false;
};

struct job_entry {
  job_status status;
  start_job start;                  ///< what every node of the job was told
  std::set<std::uint32_t> hosts;    ///< every host of the job (master's included)
  std::set<std::uint32_t> pending;  ///< hosts that have not acknowledged the current phase
  caf::actor master;
  caf::actor evaluator;
  caf::actor relay;
  std::shared_ptr<job_context> ctx;
  std::deque<part_add> adds;  ///< one at a time, in the order asked
  clock_type::time_point started = clock_type::now();
  bool cancel_requested = false;

  bool over() const {
    return status.state == job_state::succeeded || status.state == job_state::failed ||
           status.state == job_state::cancelled;
  }
};

// Messages from a job's relay (the master's observer) to the scheduler, tagged with the job.
using job_progress_atom = caf::atom_constant<caf::atom("jprogress")>;
using job_epoch_atom = caf::atom_constant<caf::atom("jepoch")>;
using job_done_atom = caf::atom_constant<caf::atom("jdone")>;
// (add_part_atom, job, part, node): the job's master asks for a new shard or worker.
using add_part_atom = caf::atom_constant<caf::atom("addpart")>;

struct scheduler_state {
  std::shared_ptr<zmq_transport> net;
  scheduler_options opt;
  endpoint self_ep;
  std::map<std::uint32_t, node_entry> nodes;  ///< by host id
  std::map<std::uint64_t, job_entry> jobs;
  std::uint64_t next_job = 1;
  caf::event_based_actor* self = nullptr;
  static inline const char* name = "coach.cluster_scheduler";

  void send(const endpoint& dst, const control_message& m) {
    net->send(make_control(self_ep, dst, m));
  }

  std::string node_name(std::uint32_t host) const {
    auto it = nodes.find(host);
    return it == nodes.end() ? coach::format("host {}", host) : it->second.last.name;
  }

  void on_heartbeat(const node_heartbeat& hb) {
    auto [it, fresh] = nodes.try_emplace(hb.host);
    auto& n = it->second;
    const bool moved = fresh || n.last.address != hb.address;
    if (!fresh && !n.alive)
      std::fprintf(stderr, "coach-node: node '%s' is back\n", hb.name.c_str());
    if (fresh)
      std::fprintf(stderr, "coach-node: node '%s' joined (host %u, %s)\n", hb.name.c_str(), hb.host,
                   hb.address.c_str());
    n.last = hb;
    n.seen = clock_type::now();
    n.alive = true;
    if (moved && hb.host != self_ep.host) net->add_peer(hb.host, hb.address);
  }

  /// Worker r on the r-th node, shards continuing the rotation: a plain spread.
  result<void> place(const scheduler::job_spec& spec, std::uint32_t workers, std::uint32_t shards,
                     start_job& sj) {
    std::vector<const node_entry*> usable;
    for (const auto& [host, n] : nodes)
      if (n.alive && !n.last.draining) usable.push_back(&n);
    if (usable.empty())
      return fail(errc::resource_exhausted, "no live node to run job '{}'", spec.name);
    std::sort(usable.begin(), usable.end(),
              [](const node_entry* a, const node_entry* b) { return a->last.name < b->last.name; });
    if (spec.gpus_per_worker > 0) {
      std::erase_if(usable, [&](const node_entry* n) {
        return std::int64_t(n->last.resources.gpus_free.size()) < spec.gpus_per_worker;
      });
      if (usable.empty())
        return fail(errc::resource_exhausted,
                    "job '{}' needs {} free GPU(s) per worker and no live node has them", spec.name,
                    spec.gpus_per_worker);
    }
    const std::size_t n = usable.size();
    for (std::uint32_t r = 0; r < workers; ++r) sj.worker_hosts.push_back(usable[r % n]->last.host);
    for (std::uint32_t k = 0; k < shards; ++k)
      sj.shard_hosts.push_back(usable[(workers + k) % n]->last.host);
    return {};
  }

  result<std::uint64_t> submit(const submit_request& req) {
    auto spec = scheduler::parse_job_spec(req.spec_yaml, req.source_name, req.base_dir);
    if (!spec) return std::unexpected(spec.error());
    auto pick = [&](std::uint32_t asked, const scheduler::count_range& range,
                    const char* what) -> result<std::uint32_t> {
      if (asked == 0) return std::uint32_t(range.initial);
      if (int(asked) < range.min || int(asked) > range.max)
        return fail(errc::invalid_argument, "--{} {} is outside the job's {} range [{}, {}]", what,
                    asked, what, range.min, range.max);
      return asked;
    };
    auto workers = pick(req.workers, spec->workers, "workers");
    if (!workers) return std::unexpected(workers.error());
    auto shards = pick(req.shards, spec->shards, "shards");
    if (!shards) return std::unexpected(shards.error());

    start_job sj;
    sj.job = next_job;
    sj.spec_yaml = req.spec_yaml;
    sj.source_name = req.source_name;
    sj.base_dir = req.base_dir;
    sj.master_host = self_ep.host;
    if (auto ok = place(*spec, *workers, *shards, sj); !ok) return std::unexpected(ok.error());
    // The master and evaluator run here and need the data set (its test half, its size).
    auto data = worker::load_dataset(spec->dataset, spec->seed);
    if (!data) return std::unexpected(data.error());
    if (data->train.rows == 0 || data->test.rows == 0)
      return fail(errc::invalid_argument, "job '{}': the data set is empty", spec->name);
    ++next_job;

    job_entry& job = jobs[sj.job];
    job.hosts.insert(self_ep.host);
    for (auto h : sj.shard_hosts) job.hosts.insert(h);
    for (auto h : sj.worker_hosts) job.hosts.insert(h);
    for (auto h : job.hosts) {
      auto it = nodes.find(h);
      sj.peers.push_back({h, it != nodes.end() ? it->second.last.address : net->bound_address()});
    }
    job.ctx = make_job_context(sj.job, *spec,
                               std::make_shared<const worker::dataset_pair>(std::move(*data)), net,
                               sj.master_host, sj.shard_hosts, sj.worker_hosts);
    auto& st = job.status;
    st.job = sj.job;
    st.name = spec->name;
    st.state = job_state::queued;
    st.epochs_total = std::uint32_t(spec->epochs);
    st.test_accuracy = std::nan("");
    st.workers = *workers;
    st.shards = *shards;
    st.samples_epoch = job.ctx->data->train.rows;
    for (auto h : sj.worker_hosts) st.worker_nodes.push_back(node_name(h));
    for (auto h : sj.shard_hosts) st.shard_nodes.push_back(node_name(h));

    // The master's observer: tags what the master reports with the job.
    auto me = caf::actor_cast<caf::actor>(self);
    const std::uint64_t id = sj.job;
    job.relay = self->home_system().spawn([me, id](caf::event_based_actor*) -> caf::behavior {
      return {
          [=](progress_atom, scheduler::progress_event& p) {
            caf::anon_send(me, job_progress_atom::value, id, std::move(p));
          },
          [=](epoch_atom, scheduler::epoch_report& e) {
            caf::anon_send(me, job_epoch_atom::value, id, std::move(e));
          },
          [=](done_atom, job_outcome& o) {
            caf::anon_send(me, job_done_atom::value, id, std::move(o));
          },
      };
    });
    auto& sys = self->home_system();
    job.evaluator = spawn_evaluator(sys, job.ctx);
    // Parts added while the job runs are placed by this scheduler and started by node agents.
    elastic_hooks hooks;
    hooks.add_worker = [me, id](std::uint32_t rank, const ps::job_config& c, std::int64_t first,
                                const std::string& node) -> result<caf::actor> {
      caf::anon_send(me, add_part_atom::value, id, to_added_part(true, rank, c, first), node);
      return caf::actor{};
    };
    hooks.add_shard = [me, id](std::uint32_t k, const ps::job_config& c,
                               const std::string& node) -> result<caf::actor> {
      caf::anon_send(me, add_part_atom::value, id, to_added_part(false, k, c, 0), node);
      return caf::actor{};
    };
    job.master = spawn_master(sys, job.ctx, job.relay, job.evaluator, std::move(hooks));
    net->bind(job.ctx->master, job.master);

    // Phase 1: every shard; phase 2 (on their acknowledgements): every worker.
    job.start = std::move(sj);
    job.start.workers_phase = false;
    for (auto h : job.hosts) {
      if (std::find(job.start.shard_hosts.begin(), job.start.shard_hosts.end(), h) ==
          job.start.shard_hosts.end())
        continue;
      job.pending.insert(h);
      send({h, node_agent_id}, job.start);
    }
    std::fprintf(stderr, "coach-node: job %llu '%s': %u worker(s), %u shard(s) over %zu host(s)\n",
                 static_cast<unsigned long long>(id), spec->name.c_str(), *workers, *shards,
                 job.hosts.size());
    return id;
  }

  void start_workers(job_entry& job) {
    job.start.workers_phase = true;
    for (auto h : job.hosts) {
      if (std::find(job.start.worker_hosts.begin(), job.start.worker_hosts.end(), h) ==
          job.start.worker_hosts.end())
        continue;
      job.pending.insert(h);
      send({h, node_agent_id}, job.start);
    }
  }

  static added_part to_added_part(bool worker, std::uint32_t id, const ps::job_config& c,
                                  std::int64_t first_step) {
    return {worker, id, first_step, c.version, c.from_step, c.members, c.map.owners()};
  }

  /// Hosts of the job that run (or ran) a part of it and have not been lost.
  std::set<std::uint32_t> part_hosts(const job_entry& job) const {
    std::set<std::uint32_t> out;
    auto add = [&](std::uint32_t h) {
      if (job.hosts.contains(h)) out.insert(h);
    };
    for (auto h : job.start.shard_hosts) add(h);
    for (auto h : job.start.worker_hosts) add(h);
    for (const auto& p : job.start.added_shards) add(p.host);
    for (const auto& p : job.start.added_workers) add(p.host);
    return out;
  }

  /// The node a new part of `job` goes to: the named one, or the live node running the fewest
  /// parts of that kind of the job (then the fewest actors, then by name).
  result<std::uint32_t> place_part(const job_entry& job, bool worker, const std::string& name) {
    if (!name.empty()) {
      for (const auto& [host, n] : nodes) {
        if (n.last.name != name) continue;
        if (!n.alive) return fail(errc::resource_exhausted, "node '{}' is not heartbeating", name);
        if (n.last.draining) return fail(errc::resource_exhausted, "node '{}' is draining", name);
        return host;
      }
      return fail(errc::not_found, "no node named '{}'", name);
    }
    std::map<std::uint32_t, std::size_t> count;
    auto tally = [&](std::uint32_t h) { ++count[h]; };
    if (worker) {
      for (auto h : job.start.worker_hosts) tally(h);
      for (const auto& p : job.start.added_workers) tally(p.host);
    } else {
      for (auto h : job.start.shard_hosts) tally(h);
      for (const auto& p : job.start.added_shards) tally(p.host);
    }
    const node_entry* best = nullptr;
    for (const auto& [host, n] : nodes) {
      if (!n.alive || n.last.draining) continue;
      if (!best) {
        best = &n;
        continue;
      }
      auto key = [&](const node_entry* e) {
        return std::tuple(count[e->last.host], e->last.actors_running, e->last.name);
      };
      if (key(&n) < key(best)) best = &n;
    }
    if (!best) return fail(errc::resource_exhausted, "no live node to run a new part");
    return best->last.host;
  }

  void on_add_part(std::uint64_t id, added_part& part, std::string& node) {
    auto it = jobs.find(id);
    if (it == jobs.end() || it->second.over()) return;
    it->second.adds.push_back({std::move(part), std::move(node), 0, {}, std::nullopt, false});
    next_add(it->second);
  }

  /// Places and announces the job's next asked-for part, unless one is in flight.
  void next_add(job_entry& job) {
    while (!job.adds.empty() && !job.adds.front().sent && job.pending.empty()) {
      auto& a = job.adds.front();
      const char* what = a.part.worker ? "worker" : "shard";
      auto host = place_part(job, a.part.worker, a.node);
      if (!host) {
        // Listed anyway: the node lists stay indexed by rank and shard id.
        (a.part.worker ? job.status.worker_nodes : job.status.shard_nodes)
            .push_back("(not started)");
        caf::anon_send(job.master, ready_atom::value, a.part.worker, a.part.id,
                       host.error().message);
        job.adds.pop_front();
        continue;
      }
      a.host = *host;
      a.sent = true;
      auto& sj = job.start;
      (a.part.worker ? sj.added_workers : sj.added_shards).push_back({a.part.id, a.host});
      if (std::none_of(sj.peers.begin(), sj.peers.end(),
                       [&](const auto& p) { return p.host == a.host; }))
        sj.peers.push_back({a.host, nodes.at(a.host).last.address});
      job.hosts.insert(a.host);
      job.ctx->added->place(a.part.worker, a.part.id, a.host);  // the master's view
      (a.part.worker ? job.status.worker_nodes : job.status.shard_nodes)
          .push_back(node_name(a.host));
      start_job msg = sj;
      msg.start = a.part;
      a.pending = part_hosts(job);
      for (auto h : a.pending) send({h, node_agent_id}, msg);
      std::fprintf(stderr, "coach-node: job %llu: %s %u goes to '%s'\n",
                   static_cast<unsigned long long>(job.status.job), what, a.part.id,
                   node_name(a.host).c_str());
    }
  }

  void on_command_reply(std::uint32_t from, const command_reply& r) {
    auto it = jobs.find(r.job);
    if (it == jobs.end() || it->second.over()) return;
    auto& job = it->second;
    if (job.pending.empty() && !job.adds.empty() && job.adds.front().sent) {
      auto& a = job.adds.front();
      if (r.failure && !a.failure) a.failure = r.failure;
      if (!a.pending.erase(from) || !a.pending.empty()) return;
      caf::anon_send(job.master, ready_atom::value, a.part.worker, a.part.id,
                     a.failure ? a.failure->message : std::string{});
      job.adds.pop_front();
      return next_add(job);
    }
    if (r.failure) return end(job, job_state::failed, *r.failure);
    if (!job.pending.erase(from) || !job.pending.empty()) return;
    if (!job.start.workers_phase) {
      start_workers(job);
    } else {
      job.status.state = job_state::running;
      job.started = clock_type::now();
      next_add(job);  // parts asked for while the last workers were starting
    }
  }

  /// Ends a job: records why, stops the master here and the parts on every node.
  void end(job_entry& job, job_state state, std::optional<coach::error> why) {
    if (job.over()) return;
    job.status.state = state;
    if (why) {
      job.status.error = why->message;
      job.status.error_code = std::uint16_t(why->code);
    }
    job.status.seconds = std::chrono::duration<double>(clock_type::now() - job.started).count();
    for (auto h : job.hosts) send({h, node_agent_id}, stop_job{job.status.job});
    net->unbind(job.ctx->master);
    for (auto* a : {&job.master, &job.evaluator, &job.relay})
      if (*a) caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
    job.pending.clear();
    std::fprintf(stderr, "coach-node: job %llu '%s' %s%s%s\n",
                 static_cast<unsigned long long>(job.status.job), job.status.name.c_str(),
                 std::string(to_string(state)).c_str(), why ? ": " : "",
                 why ? why->message.c_str() : "");
  }

  void on_done(std::uint64_t id, job_outcome& o) {
    auto it = jobs.find(id);
    if (it == jobs.end()) return;
    auto& job = it->second;
    if (o.failure) return end(job, job_state::failed, o.failure);
    job.status.test_accuracy = o.result.test_accuracy;
    job.status.changes = o.result.changes;
    job.status.epochs_done = std::uint32_t(o.result.epochs.size());
    if (o.result.cancelled)
      end(job, job_state::cancelled, coach::error{errc::cancelled, "cancelled by the user"});
    else
      end(job, job_state::succeeded, std::nullopt);
  }

  void check_nodes() {
    const auto now = clock_type::now();
    for (auto& [host, n] : nodes) {
      if (!n.alive || now - n.seen <= opt.node_timeout) continue;
      n.alive = false;
      std::fprintf(stderr, "coach-node: node '%s' stopped heartbeating\n", n.last.name.c_str());
      for (auto& [id, job] : jobs) {
        if (job.over() || !job.hosts.contains(host)) continue;
        // A node that ran only workers of a running job: the job goes on without them (its
        // master drops them and re-dispenses their chunks). Shards or a job still starting: fail.
        const auto& sj = job.start;
        std::vector<std::uint32_t> ranks;
        for (std::uint32_t r = 0; r < sj.worker_hosts.size(); ++r)
          if (sj.worker_hosts[r] == host) ranks.push_back(r);
        for (const auto& p : sj.added_workers)
          if (p.host == host) ranks.push_back(p.id);
        const bool has_shard =
            std::find(sj.shard_hosts.begin(), sj.shard_hosts.end(), host) != sj.shard_hosts.end() ||
            std::any_of(sj.added_shards.begin(), sj.added_shards.end(),
                        [&](const part_host& p) { return p.host == host; });
        // (The master fails the job itself when no worker is left.)
        const bool only_workers =
            !has_shard && host != sj.master_host && job.status.state == job_state::running;
        if (!only_workers) {
          end(job, job_state::failed,
              coach::error{errc::resource_exhausted,
                           coach::format("node '{}' stopped heartbeating", n.last.name)});
          continue;
        }
        job.hosts.erase(host);
        job.status.workers -= std::min(job.status.workers, std::uint32_t(ranks.size()));
        for (auto r : ranks)
          if (r < job.status.worker_nodes.size()) job.status.worker_nodes[r] += " (lost)";
        std::fprintf(stderr, "coach-node: job %llu goes on without the %zu worker(s) of '%s'\n",
                     static_cast<unsigned long long>(id), ranks.size(), n.last.name.c_str());
        caf::anon_send(job.master, lost_atom::value, std::move(ranks));
      }
    }
  }

  job_status snapshot(const job_entry& job) const {
    job_status s = job.status;
    if (!job.over() && s.state == job_state::running)
      s.seconds = std::chrono::duration<double>(clock_type::now() - job.started).count();
    // Traffic: what every node's transport sent for this job, from their latest heartbeats.
    for (const auto& [host, n] : nodes)
      for (const auto& l : n.last.traffic)
        if (l.job == s.job) s.traffic.push_back(l);
    return s;
  }

  /// Rescale and migrate: checked here, then asked of the job's master, which answers when it
  /// has queued the change for the job's next step boundary. False for other requests.
  bool forward(const endpoint& client, const api_request& req) {
    auto refuse = [&](coach::error e) {
      api_reply reply;
      reply.failure = std::move(e);
      send(client, reply);
      return true;
    };
    auto running_job = [&](std::uint64_t id) -> result<job_entry*> {
      auto it = jobs.find(id);
      if (it == jobs.end()) return fail(errc::not_found, "no job {}", id);
      if (it->second.over())
        return fail(errc::invalid_argument, "job {} already {}", id,
                    to_string(it->second.status.state));
      if (it->second.status.state != job_state::running)
        return fail(errc::invalid_argument, "job {} is still starting; try again in a moment", id);
      return &it->second;
    };
    auto relay =
        [this, client](caf::response_handle<caf::event_based_actor, caf::message, false>&& handle) {
          handle.then(
              [this, client](std::string& why) {
                api_reply reply;
                if (!why.empty()) reply.failure = coach::error{errc::invalid_argument, why};
                send(client, reply);
              },
              [this, client](caf::error& e) {
                api_reply reply;
                reply.failure =
                    coach::error{errc::internal, "the job master did not answer: " + to_string(e)};
                send(client, reply);
              });
        };
    constexpr auto timeout = std::chrono::seconds(10);
    if (const auto* r = std::get_if<rescale_request>(&req)) {
      auto job = running_job(r->job);
      if (!job) return refuse(job.error());
      relay(self->request((*job)->master, timeout, rescale_atom::value, r->workers, r->shards));
      return true;
    }
    if (const auto* m = std::get_if<migrate_request>(&req)) {
      auto job = running_job(m->job);
      if (!job) return refuse(job.error());
      if (m->to_node.empty()) return refuse({errc::invalid_argument, "--to NODE is empty"});
      if (auto host = place_part(**job, false, m->to_node); !host) return refuse(host.error());
      relay(self->request((*job)->master, timeout, migrate_atom::value, m->shard, m->to_node));
      return true;
    }
    return false;
  }

  api_reply answer(const api_request& req) {
    api_reply reply;
    if (auto* sub = std::get_if<submit_request>(&req)) {
      auto id = submit(*sub);
      if (!id)
        reply.failure = id.error();
      else
        reply.body = submit_reply{*id};
    } else if (auto* st = std::get_if<status_request>(&req)) {
      status_reply out;
      if (st->job != 0) {
        auto it = jobs.find(st->job);
        if (it == jobs.end())
          reply.failure = coach::error{errc::not_found, coach::format("no job {}", st->job)};
        else
          out.jobs.push_back(snapshot(it->second));
      } else {
        for (const auto& [id, job] : jobs) out.jobs.push_back(snapshot(job));
      }
      reply.body = std::move(out);
    } else if (std::get_if<nodes_request>(&req)) {
      nodes_reply out;
      const auto now = clock_type::now();
      for (const auto& [host, n] : nodes)
        out.nodes.push_back({n.last, std::chrono::duration<double>(now - n.seen).count(), n.alive});
      reply.body = std::move(out);
    } else if (auto* c = std::get_if<cancel_request>(&req)) {
      auto it = jobs.find(c->job);
      if (it == jobs.end()) {
        reply.failure = coach::error{errc::not_found, coach::format("no job {}", c->job)};
      } else if (it->second.over()) {
        reply.failure = coach::error{
            errc::invalid_argument,
            coach::format("job {} already {}", c->job, to_string(it->second.status.state))};
      } else {
        auto& job = it->second;
        job.cancel_requested = true;
        if (job.status.state == job_state::running)
          caf::anon_send(job.master, cancel_atom::value);
        else  // still starting: nothing has trained yet
          end(job, job_state::cancelled, coach::error{errc::cancelled, "cancelled by the user"});
        reply.body = ack_reply{};
      }
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
  st.net->bind(st.self_ep, caf::actor_cast<caf::actor>(self));
  self->attach_functor([net = st.net, ep = st.self_ep] { net->unbind(ep); });
  self->delayed_send(self, std::chrono::milliseconds(500), tick_atom::value);
  return {
      [self](tick_atom) {
        self->state.check_nodes();
        self->delayed_send(self, std::chrono::milliseconds(500), tick_atom::value);
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
      [self](job_progress_atom, std::uint64_t id, scheduler::progress_event& p) {
        auto it = self->state.jobs.find(id);
        if (it == self->state.jobs.end()) return;
        auto& st = it->second.status;
        st.epochs_done = p.epoch;
        st.samples_done = p.samples_done;
        st.samples_epoch = p.samples_total;
        st.loss = p.train_loss;
        st.samples_per_second = p.samples_per_s;
        st.workers = p.workers;
        st.shards = p.shards;
      },
      [self](add_part_atom, std::uint64_t id, added_part& part, std::string& node) {
        self->state.on_add_part(id, part, node);
      },
      [self](job_epoch_atom, std::uint64_t id, scheduler::epoch_report& e) {
        auto it = self->state.jobs.find(id);
        if (it == self->state.jobs.end()) return;
        auto& st = it->second.status;
        st.epochs_done = e.epoch + 1;
        st.epoch_samples.push_back(e.samples);
        st.test_accuracy = e.test_accuracy;
        st.samples_per_second = e.samples_per_s;
        st.loss = e.train_loss;
      },
      [self](job_done_atom, std::uint64_t id, job_outcome& o) { self->state.on_done(id, o); },
  };
}

}  // namespace

caf::actor spawn_cluster_scheduler(caf::actor_system& sys, std::shared_ptr<zmq_transport> net,
                                   std::uint32_t host, scheduler_options opt) {
  return sys.spawn<caf::detached>(cluster_scheduler, std::move(net), host, opt);
}

}  // namespace coach::actors
