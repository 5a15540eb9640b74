// actors/cluster_scheduler.cpp: the cluster scheduler of a coach-node --scheduler. It turns
// heartbeats into a scheduler::cluster_view, asks the active policy (scheduler/policy.hpp) what
// to change, and carries the actions out: a start launches the job's master here and its parts
// on the nodes; a resize asks the job's master to grow or shrink at its next step boundary (the
// parts it adds are placed here); a suspend stops the job, keeping its last checkpoint. Every
// job, state, allocation, epoch and checkpoint goes to the job store, so that a restarted
// scheduler resumes every job it knew (docs/scheduler.md, "In the cluster scheduler").
//
// Resources: a worker takes gpus_per_worker GPUs and 1 CPU, a shard 1 CPU. A node's free GPUs
// are the fewer of what its heartbeat measured free (other processes count) and its total less
// what this scheduler gave out; its free CPUs are its advertised CPUs (coach-node --cpus caps
// them) less what this scheduler gave out: a load average counts our own workers and lags by a
// minute, so it cannot say what a new part would get.
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
#include "scheduler/executor.hpp"
#include "scheduler/job_report.hpp"
#include "scheduler/node_table.hpp"
#include "scheduler/policy.hpp"
#include "worker/dataset_cache.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(coach::actors::added_part)

namespace coach::actors {
namespace {

using clock_type = std::chrono::steady_clock;
namespace sched = coach::scheduler;

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
  sched::job_record rec;  ///< as stored: spec, ranges, model name
  std::string placement;  ///< the spec's placement; empty: the scheduler's
  /// The policy's state: queued (never ran), running (launched: starting or running),
  /// suspended (stopped with its checkpoint kept), or an end state.
  sched::job_state pstate = sched::job_state::queued;
  double state_since = 0;
  std::shared_ptr<const worker::dataset_pair> data;  ///< loaded at submit (or at launch)

  // While launched (a master runs here).
  bool launched = false;
  std::uint32_t generation = 0;     ///< +1 per launch: reports of an older run are stale
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

  // The allocation as the policy sees it: the host of each live worker (by rank) and shard (by
  // id), and hosts chosen by a policy resize for parts the master has not asked for yet.
  std::map<std::uint32_t, std::uint32_t> worker_at;
  std::map<std::uint32_t, std::uint32_t> shard_at;
  std::deque<std::uint32_t> planned_workers;
  std::deque<std::uint32_t> planned_shards;

  // Resume: the job restarts at first_epoch from `checkpoint` (the parameters after the epoch
  // before), once every node that ran a part of an earlier run has stopped it.
  std::uint32_t first_epoch = 0;
  std::shared_ptr<const std::vector<float>> checkpoint;
  std::uint32_t checkpoint_epoch = 0;   ///< the epoch `checkpoint` ends
  std::set<std::uint32_t> stopping;     ///< hosts whose stop_job is unanswered
  std::set<std::uint32_t> stop_unsent;  ///< hosts of an earlier process's run not seen yet

  // The performance model's record of this job (coach status --json).
  std::optional<double> last_predicted;
  double last_observed = 0;
  std::size_t predictions = 0;
  double abs_rel_error = 0;

  bool over() const {
    return status.state == job_state::succeeded || status.state == job_state::failed ||
           status.state == job_state::cancelled;
  }
  bool waiting() const {
    return !over() && !launched &&
           (pstate == sched::job_state::queued || pstate == sched::job_state::suspended);
  }
  int workers_now() const { return int(worker_at.size() + planned_workers.size()); }
  int shards_now() const { return int(shard_at.size() + planned_shards.size()); }
};

// Messages from a job's relay (the master's observer) to the scheduler, tagged with the job and
// the run (generation) they belong to.
using job_progress_atom = caf::atom_constant<caf::atom("jprogress")>;
using job_epoch_atom = caf::atom_constant<caf::atom("jepoch")>;
// (job_layout_atom, job, generation, members, live shards): a change of the job took effect.
using job_layout_atom = caf::atom_constant<caf::atom("jlayout")>;
using job_done_atom = caf::atom_constant<caf::atom("jdone")>;
using job_checkpoint_atom = caf::atom_constant<caf::atom("jcheckpt")>;
// (add_part_atom, job, generation, part, node): the job's master asks for a new shard or worker.
using add_part_atom = caf::atom_constant<caf::atom("addpart")>;
// (decide_atom): ask the policy now.
using decide_atom = caf::atom_constant<caf::atom("decide")>;

double unix_now() {
  return sched::to_seconds(sched::wall_clock{}.now());
}

struct scheduler_state {
  std::shared_ptr<zmq_transport> net;
  scheduler_options opt;
  endpoint self_ep;
  sched::steady_clock_source steady;
  sched::node_table nodes{steady, sched::seconds(5)};
  std::map<std::uint32_t, node_heartbeat> heartbeats;  ///< the latest of each node, as it came
  std::optional<sched::executor> exec;
  std::map<std::uint64_t, job_entry> jobs;
  std::shared_ptr<sched::job_store> store;
  std::optional<sched::policy_holder> holder;
  sched::wall_clock clock;
  clock_type::time_point born = clock_type::now();
  clock_type::time_point last_decision{};
  bool decide_queued = false;
  caf::event_based_actor* self = nullptr;
  static inline const char* name = "coach.cluster_scheduler";

  void send(const endpoint& dst, const control_message& m) {
    net->send(make_control(self_ep, dst, m));
  }

  std::string node_name(std::uint32_t host) const { return nodes.name(host); }

  /// Logs a failed store call: the scheduler goes on (the job runs; only its record is behind).
  template <class T>
  void logged(const result<T>& r, const char* what) {
    if (!r)
      std::fprintf(stderr, "coach-node: job store: %s: %s\n", what, r.error().message.c_str());
  }

  /// Asks the policy at the next turn of the mailbox (many events make one decision).
  void poke() {
    if (decide_queued) return;
    decide_queued = true;
    self->send(self, decide_atom::value);
  }

  // --- start-up -------------------------------------------------------------------------------

  void open_store() {
    auto made = sched::executor::make({opt.placement, 1});
    if (!made) {
      std::fprintf(stderr, "coach-node: %s; using dltap\n", made.error().message.c_str());
      made = sched::executor::make({"dltap", 1});
    }
    exec.emplace(std::move(*made));
    if (!store) {
      auto mem = sched::job_store::open(":memory:");
      if (!mem) {
        std::fprintf(stderr, "coach-node: %s\n", mem.error().message.c_str());
        std::abort();  // SQLite cannot open a memory store: nothing sensible is left to do
      }
      store = std::make_shared<sched::job_store>(std::move(*mem));
    }
    std::string initial = opt.policy;
    if (auto saved = store->setting("policy"); saved && *saved) initial = **saved;
    auto h = sched::policy_holder::make(initial);
    if (!h) {
      std::fprintf(stderr, "coach-node: job store policy '%s': %s; using fifo\n", initial.c_str(),
                   h.error().message.c_str());
      h = sched::policy_holder::make("fifo");
    }
    holder.emplace(std::move(*h));
    if (auto n = store->replay_epochs(*holder->model()); n && *n > 0)
      std::fprintf(stderr, "coach-node: the performance model relearned %zu stored epoch(s)\n", *n);
    auto all = store->jobs();
    logged(all, "cannot read the jobs");
    if (!all) return;
    for (auto& rec : *all) resume(std::move(rec));
    std::fprintf(stderr, "coach-node: policy %s, placement %s, job store '%s' (%zu job(s))\n",
                 holder->name().c_str(), std::string(exec->placement_name()).c_str(),
                 store->path().c_str(), jobs.size());
  }

  /// A job found in the store at start-up.
  void resume(sched::job_record rec) {
    const std::uint64_t id = rec.id;
    job_entry& job = jobs[id];
    auto& st = job.status;
    st.job = id;
    st.name = rec.name;
    st.epochs_total = std::uint32_t(rec.epochs_total);
    st.test_accuracy = std::nan("");
    st.workers = std::uint32_t(rec.workers);
    st.shards = std::uint32_t(rec.shards);
    job.pstate = rec.state;
    job.state_since = rec.state_since;
    if (auto epochs = store->epochs(id); epochs) {
      for (const auto& e : *epochs) {
        st.epoch_samples.push_back(e.samples);
        st.test_accuracy = e.test_accuracy;
      }
    }
    st.epochs_done = std::uint32_t(rec.epochs_done);
    switch (rec.state) {
      case sched::job_state::succeeded:
        st.state = job_state::succeeded;
        break;
      case sched::job_state::failed:
      case sched::job_state::cancelled:
        st.state = rec.state == sched::job_state::failed ? job_state::failed : job_state::cancelled;
        st.error = rec.message;
        break;
      case sched::job_state::queued:
        st.state = job_state::queued;
        break;
      case sched::job_state::running:
      case sched::job_state::suspended: {
        // It ran under the previous process (or was suspended): it restarts from its checkpoint.
        // Nodes that ran its parts are told to stop them first (when they heartbeat).
        st.state = job_state::queued;
        auto ckpt = store->checkpoint(id);
        logged(ckpt, "cannot read a checkpoint");
        if (ckpt && *ckpt) {
          job.first_epoch = (*ckpt)->epoch + 1;
          job.checkpoint_epoch = (*ckpt)->epoch;
          job.checkpoint = std::make_shared<const std::vector<float>>(std::move((*ckpt)->params));
        }
        st.epochs_done = job.first_epoch;
        st.epoch_samples.resize(std::min<std::size_t>(st.epoch_samples.size(), job.first_epoch));
        for (auto h : rec.worker_nodes) job.stop_unsent.insert(h);
        for (auto h : rec.shard_nodes) job.stop_unsent.insert(h);
        job.stop_unsent.erase(self_ep.host);  // its parts here died with the old process
        job.stopping = job.stop_unsent;
        if (job.first_epoch >= std::uint32_t(rec.epochs_total)) {
          // Killed between its last checkpoint and its end: nothing is left to train.
          st.state = job_state::succeeded;
          job.pstate = sched::job_state::succeeded;
          logged(store->set_state(id, job.pstate, unix_now()), "cannot record a state");
          break;
        }
        if (rec.state == sched::job_state::running) {
          job.pstate = sched::job_state::suspended;
          job.state_since = unix_now();
          logged(store->set_state(id, job.pstate, job.state_since,
                                  coach::format("the scheduler restarted; resumes at epoch {}",
                                                job.first_epoch + 1)),
                 "cannot record a state");
        }
        std::fprintf(stderr, "coach-node: job %llu '%s' resumes at epoch %u of %u\n",
                     static_cast<unsigned long long>(id), st.name.c_str(), job.first_epoch + 1,
                     st.epochs_total);
        break;
      }
    }
    if (auto spec = sched::parse_job_spec(rec.spec_yaml, rec.source_name, rec.base_dir))
      job.placement = spec->placement;
    job.rec = std::move(rec);
  }

  // --- nodes ----------------------------------------------------------------------------------

  void on_heartbeat(const node_heartbeat& hb) {
    sched::node_report r;
    r.host = hb.host;
    r.name = hb.name;
    r.address = hb.address;
    r.resources = hb.resources;
    r.parts_running = hb.actors_running;
    r.draining = hb.draining;
    const auto h = nodes.heartbeat(std::move(r));
    heartbeats[hb.host] = hb;
    if (h.back) std::fprintf(stderr, "coach-node: node '%s' is back\n", hb.name.c_str());
    if (h.joined)
      std::fprintf(stderr, "coach-node: node '%s' joined (host %u, %s)\n", hb.name.c_str(), hb.host,
                   hb.address.c_str());
    if (h.moved && hb.host != self_ep.host) net->add_peer(hb.host, hb.address);
    if (h.joined || h.back) {
      // Parts of a run this process no longer drives (it restarted) may still run there.
      for (auto& [id, job] : jobs)
        if (job.stop_unsent.erase(hb.host)) send({hb.host, node_agent_id}, stop_job{id});
      poke();
    }
  }

  /// Resources of one part: a worker takes its GPUs and a CPU, a shard a CPU.
  static sched::resources worker_cost(const sched::job_record& r) {
    return {r.gpus_per_worker, 1.0, 0};
  }
  static sched::resources shard_cost(const sched::job_record&) { return {0, 1.0, 0}; }

  /// What this scheduler gave out on each host: the parts of every launched job.
  std::map<std::uint32_t, sched::resources> reserved() const {
    std::map<std::uint32_t, sched::resources> out;
    auto add = [&](std::uint32_t h, const sched::resources& r) {
      auto& x = out[h];
      x.gpus += r.gpus;
      x.cpus += r.cpus;
    };
    for (const auto& [id, job] : jobs) {
      if (!job.launched || job.over()) continue;
      for (const auto& [r, h] : job.worker_at) add(h, worker_cost(job.rec));
      for (auto h : job.planned_workers) add(h, worker_cost(job.rec));
      for (const auto& [k, h] : job.shard_at) add(h, shard_cost(job.rec));
      for (auto h : job.planned_shards) add(h, shard_cost(job.rec));
    }
    return out;
  }

  /// Live nodes that take work, by name, as the policy sees them (scheduler/node_table.hpp
  /// says how free resources are counted).
  sched::cluster_view cluster() const { return nodes.view(reserved()); }

  /// The job's allocation as a policy sees it: workers by rank, then those planned.
  static std::pair<std::vector<std::uint32_t>, std::vector<std::uint32_t>> parts_of(
      const job_entry& job) {
    std::vector<std::uint32_t> w, s;
    for (const auto& [r, h] : job.worker_at) w.push_back(h);
    w.insert(w.end(), job.planned_workers.begin(), job.planned_workers.end());
    for (const auto& [k, h] : job.shard_at) s.push_back(h);
    s.insert(s.end(), job.planned_shards.begin(), job.planned_shards.end());
    return {std::move(w), std::move(s)};
  }

  // --- the policy -----------------------------------------------------------------------------

  void decide() {
    decide_queued = false;
    last_decision = clock_type::now();
    const auto view = cluster();
    // The views point into these vectors, which outlive the decide() call.
    std::vector<sched::job_view> views;
    std::vector<std::vector<std::uint32_t>> lists;
    lists.reserve(2 * jobs.size());
    for (auto& [id, job] : jobs) {
      const bool eligible =
          job.waiting() && job.stopping.empty() && job.stop_unsent.empty() && !job.cancel_requested;
      if (!eligible && !(job.launched && !job.over())) continue;
      sched::job_view v;
      const auto& r = job.rec;
      v.id = id;
      v.state = job.launched ? sched::job_state::running : job.pstate;
      v.submitted = sched::at_seconds(r.submitted);
      v.state_since = sched::at_seconds(job.state_since);
      v.model = r.model;
      v.elastic = r.elastic;
      v.min_workers = r.min_workers;
      v.max_workers = r.max_workers;
      v.requested_workers = r.requested_workers;
      v.min_shards = r.min_shards;
      v.max_shards = r.max_shards;
      v.requested_shards = r.requested_shards;
      v.per_worker = worker_cost(r);
      v.per_shard = shard_cost(r);
      if (job.launched) {
        auto& w = lists.emplace_back();
        for (const auto& [rank, h] : job.worker_at) w.push_back(h);
        w.insert(w.end(), job.planned_workers.begin(), job.planned_workers.end());
        auto& s = lists.emplace_back();
        for (const auto& [k, h] : job.shard_at) s.push_back(h);
        s.insert(s.end(), job.planned_shards.begin(), job.planned_shards.end());
        v.workers = int(w.size());
        v.shards = int(s.size());
        v.worker_nodes = w;
        v.shard_nodes = s;
      }
      v.epochs_total = double(r.epochs_total);
      const auto& st = job.status;
      double part = st.samples_epoch ? double(st.samples_done) / double(st.samples_epoch) : 0.0;
      v.epochs_done = std::min(v.epochs_total, double(st.epochs_done) + std::min(part, 0.99));
      views.push_back(v);
    }
    if (views.empty()) return;
    const auto d = holder->decide(view, views, clock.now());
    if (d.actions.empty()) return;
    sched::resource_pool pool(view);
    for (const auto& a : d.actions) {
      auto it = jobs.find(a.job);
      if (it == jobs.end()) continue;
      auto& job = it->second;
      auto v =
          std::find_if(views.begin(), views.end(), [&](const auto& x) { return x.id == a.job; });
      if (v == views.end()) continue;
      std::fprintf(stderr, "coach-node: policy %s: %s\n", holder->name().c_str(),
                   sched::to_string(a).c_str());
      switch (a.kind) {
        case sched::action::kind_type::start:
          start(job, *v, a, pool);
          break;
        case sched::action::kind_type::resize:
          resize(job, *v, a, pool);
          break;
        case sched::action::kind_type::suspend:
          suspend(job, pool);
          break;
      }
    }
  }

  /// Places a waiting job's parts with its placement (the executor) and launches it.
  void start(job_entry& job, const sched::job_view& v, const sched::action& a,
             sched::resource_pool& pool) {
    if (!job.waiting()) return;
    std::vector<std::uint32_t> w, s;
    auto used = exec->apply(pool, v, a, job.placement, w, s);
    if (!used) {
      std::fprintf(stderr, "coach-node: job %llu does not fit any more; it waits (%s)\n",
                   static_cast<unsigned long long>(job.status.job), used.error().message.c_str());
      return;
    }
    job.status.placement = std::string(*used);
    if (auto ok = launch(job, w, s); !ok) {
      for (auto h : w) pool.give(h, worker_cost(job.rec));
      for (auto h : s) pool.give(h, shard_cost(job.rec));
      end(job, job_state::failed, ok.error());
    }
  }

  /// A policy resize: the allocation changes here at once (so the next decision sees it); the
  /// master changes the job at its next step boundary and asks for the parts added, which go
  /// where the executor placed them (beside the job's parts, by its placement).
  void resize(job_entry& job, const sched::job_view& v, const sched::action& a,
              sched::resource_pool& pool) {
    if (!job.launched || job.over() || job.status.state != job_state::running ||
        job.cancel_requested)
      return;  // still starting or ending: the next decision sees it again
    const int w0 = job.workers_now(), s0 = job.shards_now();
    if (a.workers == w0 && a.shards == s0) return;
    const auto saved =
        std::tuple(job.worker_at, job.shard_at, job.planned_workers, job.planned_shards);
    auto [w, s] = parts_of(job);
    if (auto used = exec->apply(pool, v, a, job.placement, w, s); !used) {
      std::fprintf(stderr, "coach-node: job %llu: %s\n",
                   static_cast<unsigned long long>(job.status.job), used.error().message.c_str());
      return;
    }
    // The executor kept a prefix of the parts (the highest ranks and ids left) and appended the
    // new ones: the planned parts leave first, then the highest ranks; the new ones are planned.
    auto follow = [](std::map<std::uint32_t, std::uint32_t>& at, std::deque<std::uint32_t>& planned,
                     const std::vector<std::uint32_t>& to) {
      while (at.size() + planned.size() > to.size()) {
        if (!planned.empty())
          planned.pop_back();
        else
          at.erase(std::prev(at.end()));
      }
      for (std::size_t i = at.size() + planned.size(); i < to.size(); ++i) planned.push_back(to[i]);
    };
    follow(job.worker_at, job.planned_workers, w);
    follow(job.shard_at, job.planned_shards, s);
    const int w1 = job.workers_now(), s1 = job.shards_now();
    const std::uint64_t id = job.status.job;
    const std::uint32_t gen = job.generation;
    record_allocation(job);
    self->request(job.master, std::chrono::seconds(10), rescale_atom::value,
                  std::uint32_t(w1 != w0 ? w1 : 0), std::uint32_t(s1 != s0 ? s1 : 0))
        .then(
            [this, id, gen, saved](std::string& why) {
              if (why.empty()) return;
              auto it = jobs.find(id);
              if (it == jobs.end() || it->second.generation != gen || it->second.over()) return;
              // Refused (the job is ending, say): the allocation stays what it was.
              std::fprintf(stderr, "coach-node: job %llu: the resize is refused: %s\n",
                           static_cast<unsigned long long>(id), why.c_str());
              auto& j = it->second;
              std::tie(j.worker_at, j.shard_at, j.planned_workers, j.planned_shards) = saved;
            },
            [](caf::error&) {});
  }

  /// Stops a running job and keeps its checkpoint: it resumes from there when the policy
  /// starts it again (the epoch it was in is trained again).
  void suspend(job_entry& job, sched::resource_pool& pool) {
    if (!job.launched || job.over()) return;
    for (const auto& [r, h] : job.worker_at)
      if (pool.contains(h)) pool.give(h, worker_cost(job.rec));
    for (const auto& [k, h] : job.shard_at)
      if (pool.contains(h)) pool.give(h, shard_cost(job.rec));
    stop_run(job);
    job.stopping = job.hosts;  // it may start again once every one of them has answered
    for (auto h : job.hosts) send({h, node_agent_id}, stop_job{job.status.job});
    job.first_epoch = job.checkpoint ? job.checkpoint_epoch + 1 : 0;
    job.status.epochs_done = job.first_epoch;
    job.status.epoch_samples.resize(
        std::min<std::size_t>(job.status.epoch_samples.size(), job.first_epoch));
    job.status.state = job_state::queued;
    job.status.samples_done = 0;
    job.pstate = sched::job_state::suspended;
    job.state_since = unix_now();
    logged(store->set_state(job.status.job, job.pstate, job.state_since,
                            coach::format("suspended by {}; resumes at epoch {}", holder->name(),
                                          job.first_epoch + 1)),
           "cannot record a state");
    record_allocation(job);
  }

  /// Stops the master, evaluator and relay of the job's current run and forgets its parts.
  void stop_run(job_entry& job) {
    if (job.ctx) net->unbind(job.ctx->master);
    for (auto* a : {&job.master, &job.evaluator, &job.relay})
      if (*a) caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
    job.launched = false;
    ++job.generation;
    job.pending.clear();
    job.adds.clear();
    job.worker_at.clear();
    job.shard_at.clear();
    job.planned_workers.clear();
    job.planned_shards.clear();
  }

  void record_allocation(const job_entry& job) {
    std::vector<std::uint32_t> w, s;
    for (const auto& [r, h] : job.worker_at) w.push_back(h);
    w.insert(w.end(), job.planned_workers.begin(), job.planned_workers.end());
    for (const auto& [k, h] : job.shard_at) s.push_back(h);
    s.insert(s.end(), job.planned_shards.begin(), job.planned_shards.end());
    logged(store->set_allocation(job.status.job, unix_now(), int(w.size()), int(s.size()), w, s),
           "cannot record an allocation");
  }

  // --- jobs -----------------------------------------------------------------------------------

  result<std::uint64_t> submit(const submit_request& req) {
    auto spec = sched::parse_job_spec(req.spec_yaml, req.source_name, req.base_dir);
    if (!spec) return std::unexpected(spec.error());
    auto pick = [&](std::uint32_t asked, const sched::count_range& range,
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

    sched::job_record rec;
    rec.name = spec->name;
    // Jobs of one name share a performance curve (the same model and data, as a rule).
    rec.model = spec->name;
    rec.spec_yaml = req.spec_yaml;
    rec.source_name = req.source_name;
    rec.base_dir = req.base_dir;
    rec.submitted = unix_now();
    rec.elastic = spec->workers.min < spec->workers.max || spec->shards.min < spec->shards.max;
    rec.min_workers = spec->workers.min;
    rec.max_workers = spec->workers.max;
    rec.requested_workers = int(*workers);
    rec.min_shards = spec->shards.min;
    rec.max_shards = spec->shards.max;
    rec.requested_shards = int(*shards);
    rec.gpus_per_worker = spec->gpus_per_worker;
    rec.epochs_total = spec->epochs;
    rec.state_since = rec.submitted;

    // A job whose minimum would not fit the whole cluster, empty, would wait for ever: refused.
    // One whose request would not fit asks for the most that does (a policy that runs jobs at
    // their request would otherwise never start it).
    const auto view = cluster();
    if (view.nodes.empty())
      return fail(errc::resource_exhausted, "no live node to run job '{}'", spec->name);
    {
      sched::cluster_view empty = view;
      for (auto& n : empty.nodes) n.free = n.total;
      auto fits = [&](int workers, int shards) {
        sched::resource_pool pool(empty);
        std::vector<std::uint32_t> w, s;
        return pool.take_all(worker_cost(rec), workers, shard_cost(rec), shards, w, s);
      };
      if (fits(rec.min_workers, rec.min_shards) &&
          !fits(rec.requested_workers, rec.requested_shards)) {
        const int asked_w = rec.requested_workers, asked_s = rec.requested_shards;
        bool found = false;
        for (int w = asked_w; w >= rec.min_workers && !found; --w)
          for (int s = asked_s; s >= rec.min_shards && !found; --s)
            if (fits(w, s)) {
              rec.requested_workers = w;
              rec.requested_shards = s;
              found = true;
            }
        std::fprintf(stderr,
                     "coach-node: job '%s' asks for %d worker(s) and %d shard(s), more than the "
                     "cluster has; it asks for %d and %d\n",
                     spec->name.c_str(), asked_w, asked_s, rec.requested_workers,
                     rec.requested_shards);
      }
      if (!fits(rec.min_workers, rec.min_shards)) {
        int gpus = 0;
        double cpus = 0;
        for (const auto& n : view.nodes) {
          gpus += n.total.gpus;
          cpus += n.total.cpus;
        }
        if (spec->gpus_per_worker > 0 &&
            std::none_of(view.nodes.begin(), view.nodes.end(),
                         [&](const auto& n) { return n.total.gpus >= spec->gpus_per_worker; }))
          return fail(errc::resource_exhausted,
                      "job '{}' needs {} free GPU(s) per worker and no live node has them",
                      spec->name, spec->gpus_per_worker);
        return fail(errc::resource_exhausted,
                    "job '{}' needs at least {} worker(s) and {} shard(s) (1 CPU each, {} GPU(s) "
                    "per worker); the live nodes have {} CPU(s) and {} GPU(s) in all",
                    spec->name, rec.min_workers, rec.min_shards, spec->gpus_per_worker, cpus, gpus);
      }
    }
    // The master and evaluator run here and need the data set (its test half, its size).
    auto data = worker::load_dataset_shared(spec->dataset, spec->seed);
    if (!data) return std::unexpected(data.error());
    if ((*data)->train.rows == 0 || (*data)->test.rows == 0)
      return fail(errc::invalid_argument, "job '{}': the data set is empty", spec->name);

    auto id = store->add_job(rec);
    if (!id) return std::unexpected(id.error());
    rec.id = *id;
    job_entry& job = jobs[*id];
    job.rec = std::move(rec);
    job.placement = spec->placement;
    job.data = std::move(*data);
    job.state_since = job.rec.submitted;
    auto& st = job.status;
    st.job = *id;
    st.name = spec->name;
    st.state = job_state::queued;
    st.epochs_total = std::uint32_t(spec->epochs);
    st.test_accuracy = std::nan("");
    st.samples_epoch = job.data->train.rows;
    std::fprintf(stderr, "coach-node: job %llu '%s' submitted (%u worker(s), %u shard(s) asked)\n",
                 static_cast<unsigned long long>(*id), spec->name.c_str(), *workers, *shards);
    poke();
    return *id;
  }

  /// Starts a run of the job on these hosts: its master and evaluator here, then every shard
  /// (from the checkpoint when it resumes), then every worker.
  result<void> launch(job_entry& job, const std::vector<std::uint32_t>& worker_hosts,
                      const std::vector<std::uint32_t>& shard_hosts) {
    const std::uint64_t id = job.status.job;
    const auto& rec = job.rec;
    auto spec = sched::parse_job_spec(rec.spec_yaml, rec.source_name, rec.base_dir);
    if (!spec) return std::unexpected(spec.error());
    if (!job.data) {  // resumed after a restart: load it now
      auto data = worker::load_dataset_shared(spec->dataset, spec->seed);
      if (!data) return std::unexpected(data.error());
      if ((*data)->train.rows == 0 || (*data)->test.rows == 0)
        return fail(errc::invalid_argument, "job '{}': the data set is empty", spec->name);
      job.data = std::move(*data);
    }
    start_job sj;
    sj.job = id;
    sj.spec_yaml = rec.spec_yaml;
    sj.source_name = rec.source_name;
    sj.base_dir = rec.base_dir;
    sj.master_host = self_ep.host;
    sj.worker_hosts = worker_hosts;
    sj.shard_hosts = shard_hosts;
    job.hosts.clear();
    job.hosts.insert(self_ep.host);
    for (auto h : shard_hosts) job.hosts.insert(h);
    for (auto h : worker_hosts) job.hosts.insert(h);
    for (auto h : job.hosts) {
      const auto* n = nodes.find(h);
      sj.peers.push_back({h, n ? n->last.address : net->bound_address()});
    }
    job.ctx =
        make_job_context(id, *spec, job.data, net, sj.master_host, sj.shard_hosts, sj.worker_hosts);
    const bool resumed = job.first_epoch > 0 || job.pstate == sched::job_state::suspended;
    if (job.first_epoch > 0 && job.checkpoint) {
      if (job.checkpoint->size() != job.ctx->model.num_params())
        return fail(errc::invalid_argument,
                    "job {}: its checkpoint has {} parameters, the model {}", id,
                    job.checkpoint->size(), job.ctx->model.num_params());
      sj.initial_params = job.checkpoint;
    } else {
      job.first_epoch = 0;  // no checkpoint: from the seed, from the first epoch
    }
    ++job.generation;
    const std::uint32_t gen = job.generation;
    auto& st = job.status;
    st.state = job_state::queued;
    st.workers = std::uint32_t(worker_hosts.size());
    st.shards = std::uint32_t(shard_hosts.size());
    st.samples_done = 0;
    st.samples_epoch = job.data->train.rows;
    st.error.clear();
    st.error_code = 0;
    st.worker_nodes.clear();
    st.shard_nodes.clear();
    for (auto h : worker_hosts) st.worker_nodes.push_back(node_name(h));
    for (auto h : shard_hosts) st.shard_nodes.push_back(node_name(h));
    if (resumed) ++st.resumes;
    job.worker_at.clear();
    job.shard_at.clear();
    for (std::uint32_t r = 0; r < worker_hosts.size(); ++r) job.worker_at[r] = worker_hosts[r];
    for (std::uint32_t k = 0; k < shard_hosts.size(); ++k) job.shard_at[k] = shard_hosts[k];

    // The master's observer: tags what the master reports with the job and this run.
    auto me = caf::actor_cast<caf::actor>(self);
    job.relay = self->home_system().spawn([me, id, gen](caf::event_based_actor*) -> caf::behavior {
      return {
          [=](progress_atom, sched::progress_event& p) {
            caf::anon_send(me, job_progress_atom::value, id, gen, std::move(p));
          },
          [=](epoch_atom, sched::epoch_report& e) {
            caf::anon_send(me, job_epoch_atom::value, id, gen, std::move(e));
          },
          [=](checkpoint_atom, param_snapshot& p) {
            caf::anon_send(me, job_checkpoint_atom::value, id, gen, std::move(p));
          },
          [=](done_atom, job_outcome& o) {
            caf::anon_send(me, job_done_atom::value, id, gen, std::move(o));
          },
      };
    });
    auto& sys = self->home_system();
    job.evaluator = spawn_evaluator(sys, job.ctx);
    // Parts added while the job runs are placed by this scheduler and started by node agents.
    elastic_hooks hooks;
    hooks.add_worker = [me, id, gen](std::uint32_t rank, const ps::job_config& c,
                                     std::int64_t first,
                                     const std::string& node) -> result<caf::actor> {
      caf::anon_send(me, add_part_atom::value, id, gen, to_added_part(true, rank, c, first), node);
      return caf::actor{};
    };
    hooks.add_shard = [me, id, gen](std::uint32_t k, const ps::job_config& c,
                                    const std::string& node,
                                    std::uint64_t expect_keys) -> result<caf::actor> {
      auto part = to_added_part(false, k, c, 0);
      part.expect_keys = expect_keys;
      caf::anon_send(me, add_part_atom::value, id, gen, std::move(part), node);
      return caf::actor{};
    };
    hooks.changed = [me, id, gen](const std::vector<std::uint32_t>& members,
                                  const std::vector<std::uint32_t>& live) {
      caf::anon_send(me, job_layout_atom::value, id, gen, members, live);
    };
    master_options mo;
    mo.first_epoch = job.first_epoch;
    mo.report_params = true;
    job.master = spawn_master(sys, job.ctx, job.relay, job.evaluator, std::move(hooks), mo);
    net->bind(job.ctx->master, job.master);
    job.launched = true;
    job.pstate = sched::job_state::running;
    job.state_since = unix_now();
    job.started = clock_type::now();
    logged(store->set_state(
               id, job.pstate, job.state_since,
               resumed ? coach::format("resumed at epoch {}", job.first_epoch + 1) : std::string{}),
           "cannot record a state");
    record_allocation(job);

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
    job.start.initial_params.reset();  // only the shards need it; the added parts start empty
    std::fprintf(stderr,
                 "coach-node: job %llu '%s': %zu worker(s), %zu shard(s) over %zu host(s)%s\n",
                 static_cast<unsigned long long>(id), spec->name.c_str(), worker_hosts.size(),
                 shard_hosts.size(), job.hosts.size(),
                 resumed ? coach::format(", from epoch {}", job.first_epoch + 1).c_str() : "");
    return {};
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
    return {worker, id, first_step, c.version, c.from_step, c.members, c.map.owners(), 0};
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

  /// The node a new part of `job` goes to: the named one; else the one a policy resize chose
  /// for it; else a live node where it fits, running the fewest parts of that kind of the job
  /// (then the fewest actors, then by name); else (a user's coach rescale beyond what is free)
  /// any live node by the same order.
  result<std::uint32_t> place_part(job_entry& job, bool worker, const std::string& name) {
    if (!name.empty()) return nodes.by_name(name);
    auto& planned = worker ? job.planned_workers : job.planned_shards;
    while (!planned.empty()) {
      const auto h = planned.front();
      planned.pop_front();
      if (nodes.usable(h)) return h;
    }
    // Beside the job's parts, by its placement, where it fits.
    auto [w, s] = parts_of(job);
    sched::placement_request req;
    req.job = job.status.job;
    req.per_worker = worker_cost(job.rec);
    req.per_shard = shard_cost(job.rec);
    req.worker_nodes = w;
    req.shard_nodes = s;
    sched::resource_pool pool(cluster());
    if (auto h = exec->place_one(pool, req, worker, job.placement)) return *h;
    // A user's coach rescale beyond what is free: the usable node running the fewest parts of
    // that kind of the job, then the fewest parts, then by name.
    std::map<std::uint32_t, std::size_t> count;
    for (auto h : worker ? w : s) ++count[h];
    const sched::node_entry* best = nullptr;
    for (const auto& [host, n] : nodes.nodes()) {
      if (!nodes.usable(host)) continue;
      auto key = [&](const sched::node_entry* e) {
        return std::tuple(count[e->last.host], e->last.parts_running, e->last.name);
      };
      if (!best || key(&n) < key(best)) best = &n;
    }
    if (!best) return fail(errc::resource_exhausted, "no live node to run a new part");
    return best->last.host;
  }

  void on_add_part(std::uint64_t id, std::uint32_t gen, added_part& part, std::string& node) {
    auto it = jobs.find(id);
    if (it == jobs.end() || it->second.over() || it->second.generation != gen) return;
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
      if (a.part.worker) {
        job.worker_at[a.part.id] = a.host;
      } else {
        job.shard_at[a.part.id] = a.host;  // the shard it empties is dropped by on_layout
      }
      record_allocation(job);
      auto& sj = job.start;
      (a.part.worker ? sj.added_workers : sj.added_shards).push_back({a.part.id, a.host});
      if (std::none_of(sj.peers.begin(), sj.peers.end(),
                       [&](const auto& p) { return p.host == a.host; }))
        sj.peers.push_back({a.host, nodes.find(a.host)->last.address});
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
    if (it == jobs.end()) return;
    auto& job = it->second;
    // A node answers in the order it was told: the answer to a stop of an earlier run comes
    // before any answer about the next one.
    if (job.stopping.erase(from)) {
      if (job.stopping.empty()) poke();
      return;
    }
    if (job.over() || !job.launched) return;
    if (job.pending.empty() && !job.adds.empty() && job.adds.front().sent) {
      auto& a = job.adds.front();
      if (r.failure && !a.failure) a.failure = r.failure;
      if (!a.pending.erase(from) || !a.pending.empty()) return;
      caf::anon_send(job.master, ready_atom::value, a.part.worker, a.part.id,
                     a.failure ? a.failure->message : std::string{});
      if (a.failure) {
        (a.part.worker ? job.worker_at : job.shard_at).erase(a.part.id);
        record_allocation(job);
      }
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
      poke();         // a running job may be resized
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
    if (job.launched)
      job.status.seconds = std::chrono::duration<double>(clock_type::now() - job.started).count();
    for (auto h : job.hosts) send({h, node_agent_id}, stop_job{job.status.job});
    stop_run(job);
    job.data.reset();
    job.checkpoint.reset();
    holder->model()->forget_job(job.status.job);
    job.pstate = state == job_state::succeeded ? sched::job_state::succeeded
                 : state == job_state::failed  ? sched::job_state::failed
                                               : sched::job_state::cancelled;
    logged(store->set_state(job.status.job, job.pstate, unix_now(), why ? why->message : ""),
           "cannot record a state");
    record_allocation(job);
    std::fprintf(stderr, "coach-node: job %llu '%s' %s%s%s\n",
                 static_cast<unsigned long long>(job.status.job), job.status.name.c_str(),
                 std::string(to_string(state)).c_str(), why ? ": " : "",
                 why ? why->message.c_str() : "");
    poke();  // what it held is free
  }

  job_entry* current(std::uint64_t id, std::uint32_t gen) {
    auto it = jobs.find(id);
    if (it == jobs.end() || it->second.generation != gen || !it->second.launched) return nullptr;
    return &it->second;
  }

  void on_done(std::uint64_t id, std::uint32_t gen, job_outcome& o) {
    auto* job = current(id, gen);
    if (!job) return;
    if (o.failure) return end(*job, job_state::failed, o.failure);
    if (!std::isnan(o.result.test_accuracy) && !o.result.epochs.empty())
      job->status.test_accuracy = o.result.test_accuracy;
    job->status.changes = o.result.changes;
    job->status.epochs_done =
        std::max(job->status.epochs_done, job->first_epoch + std::uint32_t(o.result.epochs.size()));
    if (o.result.cancelled)
      end(*job, job_state::cancelled, coach::error{errc::cancelled, "cancelled by the user"});
    else
      end(*job, job_state::succeeded, std::nullopt);
  }

  /// A change of the job took effect (a spec's `schedule:`, coach rescale or migrate, a policy's
  /// resize): workers that left it and shards that own no slices any more free what they held,
  /// on the node that held it. Sent by the master straight to this actor, so it arrives before
  /// the parts of any later change are asked for.
  void on_layout(std::uint64_t id, std::uint32_t gen, const std::vector<std::uint32_t>& members,
                 const std::vector<std::uint32_t>& live) {
    auto* job = current(id, gen);
    if (!job) return;
    auto in = [](const std::vector<std::uint32_t>& v, std::uint32_t x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    const auto freed =
        std::erase_if(job->worker_at, [&](const auto& p) { return !in(members, p.first); }) +
        std::erase_if(job->shard_at, [&](const auto& p) { return !in(live, p.first); });
    if (freed == 0) return;
    record_allocation(*job);
    poke();  // what they held may admit or grow a job
  }

  void on_progress(std::uint64_t id, std::uint32_t gen, const sched::progress_event& p) {
    auto* job = current(id, gen);
    if (!job) return;
    auto& st = job->status;
    st.epochs_done = p.epoch;
    st.samples_done = p.samples_done;
    st.samples_epoch = p.samples_total;
    st.loss = p.train_loss;
    st.samples_per_second = p.samples_per_s;
    st.workers = p.workers;
    st.shards = p.shards;
    st.changes_done = p.changes_done;
  }

  /// An epoch ended: into the status, the store and the performance model (predicted first,
  /// so the prediction is made without the epoch it predicts).
  void on_epoch(std::uint64_t id, std::uint32_t gen, const sched::epoch_report& e) {
    auto* job = current(id, gen);
    if (!job) return;
    auto& st = job->status;
    st.epochs_done = e.epoch + 1;
    st.epoch_samples.resize(std::min<std::size_t>(st.epoch_samples.size(), e.epoch));
    st.epoch_samples.push_back(e.samples);
    st.test_accuracy = e.test_accuracy;
    st.samples_per_second = e.samples_per_s;
    st.loss = e.train_loss;
    // Progress comes at most every 200 ms: a job whose last change came after its last progress
    // event would otherwise end showing the allocation before it.
    st.workers = e.workers;
    st.shards = e.shards;
    auto& model = *holder->model();
    const int w = int(e.workers), p = int(e.shards);
    std::optional<double> predicted;
    if (w >= 1 && p >= 1) {
      predicted = model.predict(id, job->rec.model, w, p);
      model.observe(id, job->rec.model, w, p, e.seconds);
    }
    job->last_predicted = predicted;
    job->last_observed = e.seconds;
    if (predicted && e.seconds > 0) {
      ++job->predictions;
      job->abs_rel_error += std::abs(*predicted - e.seconds) / e.seconds;
    }
    sched::epoch_record rec;
    rec.epoch = e.epoch;
    rec.at = unix_now();
    rec.workers = w;
    rec.shards = p;
    rec.seconds = e.seconds;
    rec.samples = e.samples;
    rec.train_loss = e.train_loss;
    rec.test_loss = e.test_loss;
    rec.test_accuracy = e.test_accuracy;
    rec.predicted_seconds = predicted;
    logged(store->add_epoch(id, rec), "cannot record an epoch");
  }

  void on_checkpoint(std::uint64_t id, std::uint32_t gen, const param_snapshot& snap) {
    auto* job = current(id, gen);
    if (!job || !snap.values) return;
    auto saved = store->save_checkpoint(id, snap.epoch, unix_now(), *snap.values);
    logged(saved, "cannot store a checkpoint");
    if (saved) {
      job->checkpoint = snap.values;
      job->checkpoint_epoch = snap.epoch;
    }
  }

  void check_nodes() {
    const auto now = clock_type::now();
    // Nodes of an earlier process's runs that have not come back within the node timeout are
    // taken for dead: their parts died with them.
    if (now - born > opt.node_timeout) {
      for (auto& [id, job] : jobs) {
        std::erase_if(job.stop_unsent, [&](std::uint32_t h) {
          if (const auto* n = nodes.find(h); n && n->alive) return false;
          job.stopping.erase(h);
          return true;
        });
      }
    }
    for (const auto host : nodes.expire()) {
      const std::string name = nodes.name(host);
      std::fprintf(stderr, "coach-node: node '%s' stopped heartbeating\n", name.c_str());
      poke();
      for (auto& [id, job] : jobs) {
        if (job.stopping.erase(host) && job.stopping.empty()) poke();
        if (job.over() || !job.launched || !job.hosts.contains(host)) continue;
        // A node that ran only workers of a running job: the job goes on without them (its
        // master drops them and re-dispenses their chunks). Shards or a job still starting: fail.
        const auto& sj = job.start;
        std::vector<std::uint32_t> ranks;
        for (const auto& [r, h] : job.worker_at)
          if (h == host) ranks.push_back(r);
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
                           coach::format("node '{}' stopped heartbeating", name)});
          continue;
        }
        job.hosts.erase(host);
        for (auto r : ranks) job.worker_at.erase(r);
        std::erase(job.planned_workers, host);
        record_allocation(job);
        job.status.workers -= std::min(job.status.workers, std::uint32_t(ranks.size()));
        for (auto r : ranks)
          if (r < job.status.worker_nodes.size()) job.status.worker_nodes[r] += " (lost)";
        std::fprintf(stderr, "coach-node: job %llu goes on without the %zu worker(s) of '%s'\n",
                     static_cast<unsigned long long>(id), ranks.size(), name.c_str());
        caf::anon_send(job.master, lost_atom::value, std::move(ranks));
      }
    }
  }

  /// The performance model's view of a job (coach status --json "model").
  std::string model_json(const job_entry& job) {
    using sched::json_number;
    using sched::json_string;
    auto& model = *holder->model();
    const std::uint64_t id = job.status.job;
    std::string out = "{";
    out += coach::format("\"model\": {}, ", json_string(job.rec.model));
    auto theta = model.job_theta(id, job.rec.model);
    std::string t = "null";
    if (theta) {
      t = "[";
      for (std::size_t i = 0; i < theta->size(); ++i)
        t += (i ? ", " : "") + json_number((*theta)[i]);
      t += "]";
    }
    out += coach::format("\"theta\": {}, ", t);
    const int w = int(job.status.workers), p = int(job.status.shards);
    std::string predicted = "null";
    if (w >= 1 && p >= 1)
      if (auto x = model.predict(id, job.rec.model, w, p)) predicted = json_number(*x);
    out += coach::format("\"workers\": {}, \"shards\": {}, \"predicted_epoch_s\": {}, ", w, p,
                         predicted);
    out += coach::format("\"last_predicted_s\": {}, \"last_observed_s\": {}, ",
                         job.last_predicted ? json_number(*job.last_predicted) : "null",
                         json_number(job.last_observed));
    out += coach::format(
        "\"predictions\": {}, \"mean_abs_rel_error\": {}, ", job.predictions,
        job.predictions ? json_number(job.abs_rel_error / double(job.predictions)) : "null");
    out += coach::format("\"policy\": {}, \"perf_model\": {}}", json_string(holder->name()),
                         model.to_json());
    return out;
  }

  job_status snapshot(job_entry& job, bool with_model) {
    job_status s = job.status;
    if (!job.over() && s.state == job_state::running)
      s.seconds = std::chrono::duration<double>(clock_type::now() - job.started).count();
    // Traffic: what every node's transport sent for this job, from their latest heartbeats.
    for (const auto& [host, hb] : heartbeats)
      for (const auto& l : hb.traffic)
        if (l.job == s.job) s.traffic.push_back(l);
    if (with_model) s.model_json = model_json(job);
    if (job.launched && !job.over()) {
      auto [w, sh] = parts_of(job);
      if (!w.empty() && !sh.empty()) s.aggregation_degree = sched::aggregation_degree(w, sh);
    }
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
      if (!it->second.launched)
        return fail(errc::invalid_argument, "job {} is waiting for resources; it has no workers",
                    id);
      if (it->second.status.state != job_state::running)
        return fail(errc::invalid_argument, "job {} is still starting; try again in a moment", id);
      return &it->second;
    };
    // On success, `done` adjusts the scheduler's record of the job's allocation (what a change
    // frees is freed again, and for good, by on_layout when it takes effect).
    auto relay = [this, client](
                     caf::response_handle<caf::event_based_actor, caf::message, false>&& handle,
                     std::function<void()> done) {
      handle.then(
          [this, client, done](std::string& why) {
            api_reply reply;
            if (!why.empty())
              reply.failure = coach::error{errc::invalid_argument, why};
            else
              done();
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
      const std::uint64_t id = r->job;
      const std::uint32_t gen = (*job)->generation;
      const std::uint32_t workers = r->workers, shards = r->shards;
      relay(self->request((*job)->master, timeout, rescale_atom::value, workers, shards),
            [this, id, gen, workers, shards] {
              // Fewer: the highest ranks (shard ids) leave now as far as resources go; more:
              // the parts are recorded when the master asks for them.
              auto* j = current(id, gen);
              if (!j) return;
              auto trim = [](std::map<std::uint32_t, std::uint32_t>& at,
                             std::deque<std::uint32_t>& planned, std::uint32_t to) {
                if (to == 0) return;
                while (at.size() + planned.size() > to) {
                  if (!planned.empty())
                    planned.pop_back();
                  else
                    at.erase(std::prev(at.end()));
                }
              };
              trim(j->worker_at, j->planned_workers, workers);
              trim(j->shard_at, j->planned_shards, shards);
              record_allocation(*j);
            });
      return true;
    }
    if (const auto* m = std::get_if<migrate_request>(&req)) {
      auto job = running_job(m->job);
      if (!job) return refuse(job.error());
      if (m->to_node.empty()) return refuse({errc::invalid_argument, "--to NODE is empty"});
      if (auto host = place_part(**job, false, m->to_node); !host) return refuse(host.error());
      // The shard it empties stops counting when the move takes effect (on_layout).
      relay(self->request((*job)->master, timeout, migrate_atom::value, m->shard, m->to_node),
            [] {});
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
          out.jobs.push_back(snapshot(it->second, true));
      } else {
        for (auto& [id, job] : jobs) out.jobs.push_back(snapshot(job, false));
      }
      reply.body = std::move(out);
    } else if (std::get_if<nodes_request>(&req)) {
      nodes_reply out;
      for (const auto& [host, n] : nodes.nodes())
        out.nodes.push_back({heartbeats.at(host), nodes.silent_for(host), n.alive});
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
        if (job.launched && job.status.state == job_state::running)
          caf::anon_send(job.master, cancel_atom::value);
        else  // waiting or still starting: nothing more will train
          end(job, job_state::cancelled, coach::error{errc::cancelled, "cancelled by the user"});
        reply.body = ack_reply{};
      }
    } else if (auto* p = std::get_if<policy_request>(&req)) {
      if (p->set) {
        // Between two decisions: running jobs keep what they have; the next decision is the
        // new policy's.
        if (auto ok = holder->set(*p->set); !ok) {
          reply.failure = ok.error();
        } else {
          logged(store->set_setting("policy", holder->name()), "cannot record the policy");
          std::fprintf(stderr, "coach-node: policy is now %s\n", holder->name().c_str());
          poke();
        }
      }
      reply.body = policy_reply{holder->name()};
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
  st.store = opt.store;
  st.self_ep = {host, scheduler_id};
  st.self = self;
  st.nodes.set_timeout(std::chrono::duration_cast<sched::seconds>(opt.node_timeout));
  st.open_store();
  st.net->bind(st.self_ep, caf::actor_cast<caf::actor>(self));
  self->attach_functor([net = st.net, ep = st.self_ep] { net->unbind(ep); });
  self->delayed_send(self, std::chrono::milliseconds(500), tick_atom::value);
  return {
      [self](tick_atom) {
        auto& s = self->state;
        s.check_nodes();
        if (clock_type::now() - s.last_decision >= s.opt.decide_every) s.poke();
        self->delayed_send(self, std::chrono::milliseconds(500), tick_atom::value);
      },
      [self](decide_atom) { self->state.decide(); },
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
        self->state.on_progress(id, gen, p);
      },
      [self](add_part_atom, std::uint64_t id, std::uint32_t gen, added_part& part,
             std::string& node) { self->state.on_add_part(id, gen, part, node); },
      [self](job_layout_atom, std::uint64_t id, std::uint32_t gen,
             std::vector<std::uint32_t>& members,
             std::vector<std::uint32_t>& live) { self->state.on_layout(id, gen, members, live); },
      [self](job_epoch_atom, std::uint64_t id, std::uint32_t gen, sched::epoch_report& e) {
        self->state.on_epoch(id, gen, e);
      },
      [self](job_checkpoint_atom, std::uint64_t id, std::uint32_t gen, param_snapshot& p) {
        self->state.on_checkpoint(id, gen, p);
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
