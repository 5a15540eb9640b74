#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "actors/cluster.hpp"
#include "actors/metrics.hpp"
#include "actors/roles.hpp"
#include "common/huge_pages.hpp"
#include "common/log.hpp"
#include "host/host_probe.hpp"
#include "worker/dataset_cache.hpp"
#include "worker/script_job.hpp"

namespace coach::actors {

namespace {

using clock_type = std::chrono::steady_clock;

/// (warmed_atom, n): the memory for the n-th deferred answer is warm; answer now.
using warmed_atom = caf::atom_constant<caf::atom("warmed")>;

/// The allocations a shard that will adopt `keys` keys makes when its first transfer and push
/// arrive, to warm before, one block each of the size it will be: the transfer's frames as
/// ZeroMQ receives them (values, which the shard keeps where they arrived, and
/// `state_per_param` floats of optimizer state per key), the copies of the state, and the first
/// push of a step.
std::vector<std::size_t> warm_blocks_for(std::uint64_t keys, std::size_t state_per_param) {
  if (keys == 0) return {};
  const std::size_t floats = std::size_t(keys) * sizeof(float);
  std::vector<std::size_t> blocks(2 + state_per_param, floats + zmq_frame_overhead);
  blocks.insert(blocks.end(), state_per_param, floats);
  return blocks;
}

struct job_part {
  std::shared_ptr<job_context> ctx;
  std::uint32_t run = 0;           ///< the job's run these parts belong to (start_job::run)
  std::vector<endpoint> bound;     ///< endpoints this node bound for the job
  std::vector<caf::actor> actors;  ///< shards and workers running here
};

struct agent_state {
  std::shared_ptr<zmq_transport> net;
  node_options opt;
  endpoint self_ep;
  std::unique_ptr<scheduler::host_probe> probe;
  std::map<std::uint64_t, job_part> parts;
  std::uint64_t sequence = 0;
  bool draining = false;
  std::shared_ptr<worker::device_assignment> devices;  ///< this node's, shared by its jobs
  std::string last_probe_error;
  node_heartbeat last_heartbeat;  ///< what /metrics shows of this node (actors/metrics.hpp)
  /// Set by start(): memory to warm before the answer goes (a shard added ahead of a migration).
  std::vector<std::size_t> warm_before_answer;
  /// Answers held until memory is warm, by number (warmed_atom).
  std::map<std::uint64_t, std::pair<endpoint, command_reply>> deferred;
  std::uint64_t next_deferred = 0;
  /// Jobs whose data set warnings are dealt with here (printed, or left to another holder).
  std::set<std::uint64_t> warned;
  static inline const char* name = "coach.node_agent";

  std::uint32_t running() const {
    std::uint32_t n = 0;
    for (const auto& [job, p] : parts) n += std::uint32_t(p.actors.size());
    return n;
  }

  void send(const endpoint& dst, const control_message& m) {
    net->send(make_control(self_ep, dst, m));
  }

  /// Sends the answers held for warming now, in order: the scheduler reads a node's answers in
  /// the order it sent the commands (a stop's answer after the answers to what came before it).
  /// A part answered early is ready with its memory only partly warm (slower, still correct).
  void flush_deferred() {
    for (auto& [n, d] : deferred) send(d.first, d.second);
    deferred.clear();
  }

  /// The CUDA devices this node's workers may take: those the process sees (coach-node orders
  /// them by PCI bus, as nvidia-smi numbers GPUs), within --gpus when it is given.
  std::vector<int> node_devices() const {
    std::vector<int> ids;
    for (int d = 0; d < kernels::device_count(); ++d)
      if (!opt.gpus || std::find(opt.gpus->begin(), opt.gpus->end(), d) != opt.gpus->end())
        ids.push_back(d);
    return ids;
  }

  node_heartbeat heartbeat() {
    node_heartbeat hb;
    hb.name = opt.name;
    hb.address = opt.address;
    hb.public_key = opt.public_key;
    hb.host = opt.host;
    auto measured = probe->sample();
    if (measured) {
      hb.resources = scheduler::apply_limits(std::move(*measured), opt.cpus, opt.gpus);
      if (!opt.external_cpus) hb.resources.cpus_external = 0;
      last_probe_error.clear();
    } else if (measured.error().message != last_probe_error) {
      last_probe_error = measured.error().message;
      log::warn("cannot measure this host: {}", last_probe_error);
    }
    // Which GPU each of this node's cuda workers holds, among the GPUs the heartbeat lists (a
    // device nvidia-smi does not list, e.g. with no nvidia-smi at all, is not reported).
    const auto& gpus = hb.resources.gpus_total;
    if (devices)
      for (const auto& h : devices->holds())
        for (int d : h.devices)
          if (std::find(gpus.begin(), gpus.end(), d) != gpus.end())
            hb.resources.gpus_held.push_back({h.job, h.rank, d, h.own});
    hb.actors_running = running();
    hb.sequence = ++sequence;
    hb.unix_time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
    hb.draining = draining;
    hb.traffic = net->traffic().links;
    last_heartbeat = hb;
    return hb;
  }

  /// Runs `work` on a thread of its own and heartbeats while it waits: loading a data set or
  /// building a large model's parameters takes seconds on a busy host (longer on memory the
  /// host has dropped), and a node silent for the scheduler's node timeout counts as dead.
  template <class Work>
  auto while_heartbeating(Work work) {
    auto pending = std::async(std::launch::async, std::move(work));
    while (pending.wait_for(opt.heartbeat) != std::future_status::ready)
      send({0, scheduler_id}, heartbeat());
    return pending.get();
  }

  /// Prints the warnings of job `job`'s data set (a label column that looks like a feature ...)
  /// once per job, as the scheduler's job runner prints them. Only where this call read the
  /// files: a copy found in the cache was loaded by another holder in this process, which had
  /// them to print (on the scheduler's node, the job's runner).
  void print_warnings(std::uint64_t job, const std::string& job_name,
                      const worker::shared_dataset& data) {
    if (!warned.insert(job).second || !data.loaded_here) return;
    for (const auto& w : data.data->warnings) log::warn("job '{}': {}", job_name, w);
  }

  /// The data set a job's parts here see: its spec's, loaded (one copy per process); for a
  /// script's model, the script's sizes, with the model made for this node (`spec.model.
  /// external`): its files written into a folder of their own, a pool that runs the processes
  /// of the job's workers here, each with OMP_NUM_THREADS = this node's CPUs / those workers.
  result<std::shared_ptr<const worker::dataset_pair>> job_data(const start_job& sj,
                                                               scheduler::job_spec& spec) {
    if (!spec.model.script) {
      auto data = while_heartbeating([cfg = spec.dataset, seed = spec.seed] {
        return worker::load_dataset_shared_tracked(cfg, seed);  // one copy per process
      });
      if (!data) return fail(data.error().code, "node '{}': {}", opt.name, data.error().message);
      print_warnings(sj.job, spec.name, *data);
      return std::move(data->data);
    }
    if (!sj.script)
      return fail(errc::invalid_argument, "node '{}': job {}'s script did not come with its start",
                  opt.name, sj.job);
    const auto here = std::count(sj.worker_hosts.begin(), sj.worker_hosts.end(), opt.host);
    const std::uint32_t cpus = opt.cpus.value_or(std::max(1u, std::thread::hardware_concurrency()));
    const int threads =
        int(std::max<std::uint32_t>(1, cpus / std::uint32_t(std::max<long>(1, here))));
    // No initial values kept here: the shards start from the start's `initial` (the values the
    // submitter registered, or a checkpoint's), and a process needs only the layout.
    auto model = while_heartbeating([&] {
      return worker::open_submitted(*sj.script, nullptr, *spec.model.script, spec.seed, sj.job,
                                    opt.script, threads, coach::format("job-{}", sj.job),
                                    spec.function ? spec.function->memory_mb << 20 : 0);
    });
    if (!model) {
      // A bundle whose paths leave its folder is hostile input: said in one line, nothing run.
      log::warn("node '{}': job {}: {}", opt.name, sj.job, model.error().message);
      return fail(model.error().code, "node '{}': job {}: {}", opt.name, sj.job,
                  model.error().message);
    }
    spec.model.external = std::move(*model);
    return std::make_shared<const worker::dataset_pair>(
        worker::script_dataset(spec.model.external->layout));
  }

  /// Starts this node's shards (phase 1) or workers (phase 2) of a job.
  result<void> start(const start_job& sj) {
    // Parts of another run of the job are still here: the scheduler took this node for dead
    // (it was frozen, or cut off, past the node timeout) and the job went on, or restarted,
    // without them. They would push to shards that are gone or serve a layout nobody follows.
    if (auto it = parts.find(sj.job); it != parts.end() && it->second.run != sj.run) {
      log::warn(
          "job {}: {} part(s) of its run {} were still here (this node was taken for "
          "dead); stopped before its run {} starts",
          sj.job, it->second.actors.size(), it->second.run, sj.run);
      stop(sj.job);
    }
    if (draining && !sj.workers_phase && !parts.contains(sj.job))
      return fail(errc::resource_exhausted, "node '{}' is draining and takes no new work",
                  opt.name);
    auto& part = parts[sj.job];
    if (!part.ctx) {
      part.run = sj.run;
      auto spec = scheduler::parse_job_spec(sj.spec_yaml, sj.source_name, sj.base_dir);
      if (!spec) return std::unexpected(spec.error());
      auto data = job_data(sj, *spec);
      if (!data) return std::unexpected(data.error());
      name_peers(sj);
      for (const auto& p : sj.peers)
        if (p.host != opt.host) net->add_peer(p.host, p.address, p.public_key);
      auto made = make_job_context(sj.job, *spec, std::move(*data), net, sj.master_host,
                                   sj.shard_hosts, sj.worker_hosts);
      if (!made) return std::unexpected(made.error());
      part.ctx = std::move(*made);
      part.ctx->backup_hosts = sj.backup_hosts;
      // A device for each of the job's workers here (among this node's, shared by its jobs),
      // and the sum of their gradients before one push per shard.
      if (!devices && part.ctx->backend == kernels::backend_kind::cuda)
        devices = std::make_shared<worker::device_assignment>(node_devices());
      setup_job_devices(*part.ctx, part.ctx->backend, devices);
    }
    auto& ctx = part.ctx;
    auto& sys = self_system();
    if (sj.start) return start_added(sj, part);
    if (!sj.workers_phase) {
      // The job's shards placed here, and their backups, each started by `start(k, replica)`.
      auto start_shards = [&](auto start) {
        for (std::uint32_t k = 0; k < ctx->shards.size(); ++k)
          for (std::uint32_t i = 0; i < ctx->replicas_of(k); ++i) {
            const auto ep = ctx->replica_ep(k, i);
            if (ep.host != opt.host) continue;
            part.actors.push_back(start(k, i));
            watch(part.actors.back());
            part.bound.push_back(ep);
          }
      };
      if (!sj.initial) {
        if (const auto& ext = ctx->model.external(); ext && !ext->initial)
          return fail(errc::invalid_argument,
                      "node '{}': job {}: a script's shards came without initial values", opt.name,
                      sj.job);
        const auto initial = while_heartbeating([&model = ctx->model, seed = ctx->spec.seed] {
          std::vector<float> p(model.num_params());
          model.init_params(p, seed);
          return p;
        });
        start_shards(
            [&](std::uint32_t k, std::uint32_t i) { return spawn_shard(sys, ctx, k, initial, i); });
        return {};
      }
      // A job resumed from its checkpoint: its values and optimizer state come with the
      // message. A vector of another size is another model (or a forged message), state of
      // another length another optimizer: refused, nothing started.
      const std::size_t want = ctx->model.num_params();
      if (sj.initial->values.size() != want)
        return fail(errc::invalid_argument,
                    "node '{}': job {}: initial parameters have {} bytes, the model has {} "
                    "parameters ({} bytes)",
                    opt.name, sj.job, sj.initial->values.size() * sizeof(float), want,
                    want * sizeof(float));
      const auto per = scheduler::shard_optimizer(ctx->spec).state_per_param();
      if (auto ok = ps::check(*sj.initial, want, per); !ok)
        return fail(errc::invalid_argument, "node '{}': job {}: initial state: {}", opt.name,
                    sj.job, ok.error().message);
      start_shards([&](std::uint32_t k, std::uint32_t i) {
        return spawn_shard(sys, ctx, k, *sj.initial, i);
      });
      return {};
    }
    std::vector<std::shared_ptr<kernels::backend>> backends;
    std::vector<std::uint32_t> ranks;
    for (std::uint32_t r = 0; r < ctx->workers.size(); ++r) {
      if (ctx->workers[r].host != opt.host) continue;
      auto be = make_worker_backend(*ctx, r, coach::format("coach-node '{}'", opt.name));
      if (!be) return fail(be.error().code, "node '{}': {}", opt.name, be.error().message);
      backends.emplace_back(std::move(*be));
      ranks.push_back(r);
    }
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      part.actors.push_back(spawn_worker(sys, ctx, ranks[i], backends[i], sj.first_step));
      watch(part.actors.back());
      part.bound.push_back(ctx->workers[ranks[i]]);
    }
    return {};
  }

  /// The job's peers by name, for the transport's figures; the master's node is the scheduler's,
  /// which this node reaches as host 0 (heartbeats, replies) too.
  void name_peers(const start_job& sj) {
    for (const auto& p : sj.peers) {
      net->name_peer(p.host, p.name);
      if (p.host == sj.master_host) net->name_peer(0, p.name);
    }
  }

  /// A running job grows (start_job with `start`): learn where every added part runs and the
  /// peers of the job, and start the new part if it is placed here.
  result<void> start_added(const start_job& sj, job_part& part) {
    auto& ctx = part.ctx;
    name_peers(sj);
    for (const auto& p : sj.peers)
      if (p.host != opt.host) net->add_peer(p.host, p.address, p.public_key);  // idempotent
    for (const auto& h : sj.added_shards) ctx->added->place(false, h.id, h.host, h.backups);
    for (const auto& h : sj.added_workers) ctx->added->place(true, h.id, h.host);
    const auto& a = *sj.start;
    // The replica of the part that runs here: 0 the part itself, i > 0 an added shard's backup i.
    std::optional<std::uint32_t> replica;
    if (ctx->added->host_of(a.worker, a.id) == opt.host) replica = 0;
    if (!a.worker && !replica) {
      const auto b = ctx->added->backups_of(a.id);
      if (auto it = std::find(b.begin(), b.end(), opt.host); it != b.end())
        replica = std::uint32_t(it - b.begin()) + 1;
    }
    if (!replica) return {};
    if (draining)
      return fail(errc::resource_exhausted, "node '{}' is draining and takes no new work",
                  opt.name);
    const char* what = a.worker ? "worker" : "shard";
    if ((a.worker && a.id < ctx->workers.size()) || (!a.worker && a.id < ctx->shards.size()))
      return fail(errc::invalid_argument, "node '{}': {} {} of job {} already exists", opt.name,
                  what, a.id, sj.job);
    auto map = ps::shard_map::from_owners(ctx->model.num_params(), ctx->spec.slice_size,
                                          a.slice_owners, a.version);
    if (!map)
      return fail(errc::invalid_argument, "node '{}': added {} {}: {}", opt.name, what, a.id,
                  map.error().message);
    ps::job_config c{a.version, a.from_step, a.members, std::move(*map)};
    auto& sys = self_system();
    if (a.worker) {
      auto be = make_worker_backend(*ctx, a.id, coach::format("coach-node '{}'", opt.name));
      if (!be) return fail(be.error().code, "node '{}': {}", opt.name, be.error().message);
      part.actors.push_back(spawn_added_worker(sys, ctx, a.id, std::move(*be), c, a.first_step));
      part.bound.push_back(ctx->worker_ep(a.id));
    } else {
      if (a.expect_keys > ctx->model.num_params())
        return fail(errc::invalid_argument,
                    "node '{}': added shard {} expects {} keys, the model has {} parameters",
                    opt.name, a.id, a.expect_keys, ctx->model.num_params());
      part.actors.push_back(spawn_added_shard(sys, ctx, a.id, c, *replica));
      part.bound.push_back(ctx->replica_ep(a.id, *replica));
      warm_before_answer =
          warm_blocks_for(a.expect_keys, scheduler::shard_optimizer(ctx->spec).state_per_param());
    }
    watch(part.actors.back());
    log::info("job {}: started {} {}{}", sj.job, what, a.id,
              *replica ? coach::format(" (backup {})", *replica) : std::string());
    return {};
  }

  void stop(std::uint64_t job) {
    auto it = parts.find(job);
    if (it == parts.end()) return;
    for (const auto& ep : it->second.bound) net->unbind(ep);
    for (auto& a : it->second.actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    parts.erase(it);
  }

  /// A finished worker leaves the count of running actors.
  void on_down(const caf::down_msg& dm) {
    for (auto& [job, p] : parts)
      std::erase_if(p.actors, [&](const caf::actor& a) { return a.address() == dm.source; });
  }

  caf::actor_system* sys_ = nullptr;
  std::function<void(const caf::actor&)> watch;
  caf::actor_system& self_system() { return *sys_; }
};

caf::behavior node_agent(caf::stateful_actor<agent_state, caf::event_based_actor>* self,
                         std::shared_ptr<zmq_transport> net, node_options opt) {
  auto& st = self->state;
  st.net = std::move(net);
  st.opt = std::move(opt);
  st.self_ep = {st.opt.host, node_agent_id};
  st.probe = std::make_unique<scheduler::host_probe>(st.opt.proc_root);
  st.sys_ = &self->home_system();
  st.watch = [self](const caf::actor& a) { self->monitor(a); };
  self->set_down_handler([self](caf::down_msg& dm) { self->state.on_down(dm); });
  st.net->bind(st.self_ep, caf::actor_cast<caf::actor>(self));
  self->send(self, tick_atom::value);
  self->attach_functor([net = st.net, ep = st.self_ep] { net->unbind(ep); });
  return {
      [self](tick_atom) {
        auto& s = self->state;
        s.send({0, scheduler_id}, s.heartbeat());
        // What peers made this node allocate does not stay resident (common/huge_pages.hpp).
        if (const auto freed = trim_freed_memory(); freed >= (std::size_t(64) << 20))
          log::info("returned {} MiB of freed memory to the system", freed >> 20);
        if (s.draining && s.parts.empty()) {
          self->quit();
          return;
        }
        self->delayed_send(self, s.opt.heartbeat, tick_atom::value);
      },
      [self](metrics_atom) { return node_metrics(self->state.last_heartbeat); },
      [self](drain_atom) {
        auto& s = self->state;
        if (s.draining) return;
        s.draining = true;
        log::info("draining: {} job part(s) still running", s.parts.size());
        s.send({0, scheduler_id}, s.heartbeat());  // tell the scheduler at once
      },
      [self](warmed_atom, std::uint64_t n) {
        auto& s = self->state;
        auto it = s.deferred.find(n);
        if (it == s.deferred.end()) return;
        s.send(it->second.first, it->second.second);
        s.deferred.erase(it);
      },
      [self](wire_message& m) {
        auto& s = self->state;
        auto msg = read_control(m);
        if (!msg) return;
        s.flush_deferred();
        if (auto* sj = std::get_if<start_job>(&*msg)) {
          command_reply reply{sj->job, std::nullopt};
          s.warm_before_answer.clear();
          if (auto ok = s.start(*sj); !ok) {
            reply.failure = ok.error();
            // A part that could not be added leaves the job's other parts here running.
            if (auto it = s.parts.find(sj->job);
                !sj->start || it == s.parts.end() || it->second.actors.empty())
              s.stop(sj->job);
          }
          if (!reply.failure && !s.warm_before_answer.empty()) {
            // The scheduler tells the master the shard is ready once this answer comes: warm
            // its memory first, on a thread of its own (seconds for a large shard whose memory
            // the host has dropped), while heartbeats go on.
            const auto n = s.next_deferred++;
            s.deferred.emplace(n, std::make_pair(m.hdr.src, reply));
            self->home_system().spawn<caf::detached>(
                [agent = caf::actor_cast<caf::actor>(self), blocks = s.warm_before_answer, n] {
                  warm_memory(blocks);
                  caf::anon_send(agent, warmed_atom::value, n);
                });
            return;
          }
          s.send(m.hdr.src, reply);
        } else if (auto* no = std::get_if<node_refused>(&*msg)) {
          // Only the scheduler refuses a node (its messages come from its scheduler id).
          if (m.hdr.src.id != scheduler_id) return;
          log::error("the scheduler refused this node: {}", no->reason);
          if (s.opt.refused) s.opt.refused(no->reason);
          self->quit();
        } else if (auto* stop = std::get_if<stop_job>(&*msg)) {
          s.stop(stop->job);
          s.send(m.hdr.src, command_reply{stop->job, std::nullopt, true});
          // The job's last bytes, at once: the scheduler calls its traffic final on this.
          s.send(m.hdr.src, s.heartbeat());
        }
      },
  };
}

}  // namespace

caf::actor spawn_node_agent(caf::actor_system& sys, std::shared_ptr<zmq_transport> net,
                            node_options opt) {
  return sys.spawn<caf::detached>(node_agent, std::move(net), std::move(opt));
}

}  // namespace coach::actors
