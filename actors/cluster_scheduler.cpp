// actors/cluster_scheduler.cpp: the cluster scheduler of a coach-node --scheduler, as messages.
// The logic is scheduler::cluster_core (scheduler/cluster_core.hpp): the node table, the jobs
// and their life, the policy's decisions, the job API. This actor turns messages into its calls
// and carries out its ports: a launch runs the job's master and evaluator here (job_runner) and
// tells the nodes to start its parts (shards first, then workers); a resize or a migration is
// asked of the job's master, which changes the job at its next step boundary and asks for the
// parts it adds (placed by the registry, started by the nodes); a stop ends a run here and on
// its nodes (docs/scheduler.md, "In the cluster scheduler").
#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <optional>

#include "actors/cluster.hpp"
#include "actors/dashboard.hpp"
#include "actors/job_runner.hpp"
#include "actors/metrics.hpp"
#include "actors/roles.hpp"
#include "common/log.hpp"
#include "scheduler/cluster_core.hpp"

namespace coach::actors {
namespace {

namespace sched = coach::scheduler;

// (decide_atom): ask the policy now.
using decide_atom = caf::atom_constant<caf::atom("decide")>;
// (expire_atom, as_of): the nodes silent past the timeout as of then, with every message that
// came before read, are dead.
using expire_atom = caf::atom_constant<caf::atom("expire")>;
// (cancel_due_atom, job, generation): the run cancelled then must have ended by now.
using cancel_due_atom = caf::atom_constant<caf::atom("canceldue")>;

/// How long the scheduler waits for a job master's answer to a change.
constexpr auto change_timeout = std::chrono::seconds(10);

struct scheduler_state {
  std::shared_ptr<zmq_transport> net;
  endpoint self_ep;
  std::string address;         ///< scheduler_options::address
  worker::script_host script;  ///< scheduler_options::script
  std::uint32_t cpus = 0;      ///< scheduler_options::cpus
  sched::steady_clock_source steady;
  sched::wall_clock wall;
  std::map<std::uint64_t, job_runner> runs;
  std::optional<sched::cluster_core> core;  ///< after what its ports and clocks use
  caf::event_based_actor* self = nullptr;
  static inline const char* name = "coach.cluster_scheduler";

  runner_env env() {
    return {self,
            net,
            self_ep,
            &core->nodes(),
            &core->registry(),
            &core->exec(),
            address.empty() ? net->bound_address() : address,
            script,
            cpus};
  }

  void send(const endpoint& dst, const control_message& m) {
    net->send(make_control(self_ep, dst, m));
  }

  /// Asks the job's master for a change; `answer` gets its answer, or that it gave none.
  template <class Atom, class... Ts>
  void ask(std::uint64_t job, Atom atom, sched::change_answer answer, Ts... args) {
    self->request(runs[job].master(), change_timeout, atom, std::move(args)...)
        .then([answer](std::string& why) { answer(std::move(why)); },
              [answer](caf::error& e) {
                answer(std::unexpected(coach::error{
                    errc::internal, "the job master did not answer: " + to_string(e)}));
              });
  }

  sched::cluster_core_ports ports() {
    sched::cluster_core_ports p;
    p.note = [](const std::string& line) { log::info("{}", line); };
    p.stop_job = [this](std::uint32_t host, std::uint64_t job) {
      send({host, node_agent_id}, stop_job{job});
    };
    p.add_peer = [this](std::uint32_t host, const std::string& address, const std::string& key) {
      net->add_peer(host, address, key);
    };
    p.refuse_node = [this](std::uint32_t host, const std::string& reason) {
      send({host, node_agent_id}, node_refused{reason});
    };
    p.decide_soon = [this] { self->send(self, decide_atom::value); };
    p.expire_soon = [this](sched::time_point as_of) {
      self->send(self, expire_atom::value, sched::to_seconds(as_of));
    };
    p.cancel_due_in = [this](std::uint64_t job, std::uint32_t gen, std::chrono::seconds after) {
      self->delayed_send(self, after, cancel_due_atom::value, job, gen);
    };
    p.load_data = [](const sched::job_spec& spec) { return load_job_data(spec); };
    p.launch = [this](sched::registered_job& job, const sched::launch_order& o,
                      sched::job_data data, sched::job_script script) {
      auto& run = runs[job.id()];
      run.data = std::move(data);
      run.script = std::move(script);
      return run.launch(env(), job, o);
    };
    p.stop_run = [this](std::uint64_t job) { runs[job].stop(env()); };
    p.drop_run = [this](std::uint64_t job) {
      runs[job].stop(env());
      runs.erase(job);
    };
    p.busy = [this](std::uint64_t job) {
      auto it = runs.find(job);
      return it == runs.end() || it->second.busy();
    };
    p.start_answered = [this](sched::registered_job& job, std::uint32_t from,
                              const command_reply& r) -> result<bool> {
      auto a = runs[job.id()].on_reply(env(), job, from, r);
      if (!a) return std::unexpected(a.error());
      return *a == job_runner::answer::started;
    };
    p.rescale = [this](std::uint64_t job, std::uint32_t w, std::uint32_t s,
                       sched::change_answer answer) {
      ask(job, rescale_atom::value, std::move(answer), w, s);
    };
    p.migrate = [this](std::uint64_t job, std::uint32_t shard, std::string node,
                       sched::change_answer answer) {
      ask(job, migrate_atom::value, std::move(answer), shard, std::move(node));
    };
    p.cancel = [this](std::uint64_t job) {
      caf::anon_send(runs[job].master(), cancel_atom::value);
    };
    p.take_over = [this](std::uint64_t job, std::vector<std::uint32_t> heads,
                         std::vector<std::uint32_t> cut) {
      caf::anon_send(runs[job].master(), take_over_atom::value, std::move(heads), std::move(cut));
    };
    p.lose_workers = [this](std::uint64_t job, std::vector<std::uint32_t> ranks) {
      caf::anon_send(runs[job].master(), lost_atom::value, std::move(ranks));
    };
    return p;
  }

  /// The scheduler's families of /metrics: what `coach status --json` and `coach nodes` show.
  std::string metrics() {
    std::vector<job_status> jobs;
    for (const auto& [id, job] : core->registry().jobs()) jobs.push_back(core->snapshot(job, true));
    return scheduler_metrics(jobs, core->node_statuses(), core->policy_name());
  }

  /// The dashboard's state: every job with its curve and history, the nodes, the policy.
  std::string dashboard(bool admin) {
    std::vector<dashboard_job> jobs;
    auto& reg = core->registry();
    for (const auto& [id, job] : reg.jobs())
      jobs.push_back({core->snapshot(job, false), job.curve(), reg.events(job, 0)});
    return dashboard_state(jobs, core->node_statuses(), core->policy_name(), admin);
  }
};

caf::behavior cluster_scheduler(caf::stateful_actor<scheduler_state>* self,
                                std::shared_ptr<zmq_transport> net, std::uint32_t host,
                                scheduler_options opt) {
  auto& st = self->state;
  st.net = std::move(net);
  st.self_ep = {host, scheduler_id};
  st.self = self;
  st.address = opt.address;
  st.script = opt.script;
  st.cpus = opt.cpus;
  sched::cluster_core_setup setup;
  setup.self_host = host;
  setup.node_timeout = std::chrono::duration_cast<sched::seconds>(opt.node_timeout);
  setup.store = opt.store;
  setup.policy = opt.policy;
  setup.rr_slice = opt.rr_slice;
  setup.decide_every = std::chrono::duration_cast<sched::seconds>(opt.decide_every);
  setup.placement = opt.placement;
  setup.rebalance_interval = std::chrono::duration_cast<sched::seconds>(opt.rebalance_interval);
  setup.steady = &st.steady;
  setup.wall = &st.wall;
  st.core.emplace(std::move(setup), st.ports());
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
    return std::chrono::duration_cast<std::chrono::milliseconds>(self->state.core->check_every());
  };
  self->delayed_send(self, tick_every(), tick_atom::value);
  return {
      [self, tick_every](tick_atom) {
        self->state.core->tick();
        self->delayed_send(self, tick_every(), tick_atom::value);
      },
      [self](decide_atom) { self->state.core->decide(); },
      [self](metrics_atom) { return self->state.metrics(); },
      [self](dashboard_atom, bool admin) { return self->state.dashboard(admin); },
      [self](dashboard_atom, std::string& action, std::string& arg) -> std::string {
        return self->state.core->dashboard_action(action, arg);
      },
      [self](peer_gone_atom, std::uint32_t host) { self->state.core->peer_gone(host); },
      [self](expire_atom, double as_of) { self->state.core->expire(sched::at_seconds(as_of)); },
      [self](cancel_due_atom, std::uint64_t id, std::uint32_t gen) {
        self->state.core->cancel_due(id, gen);
      },
      [self](wire_message& m) {
        auto& s = self->state;
        auto msg = read_control(m);
        if (!msg) return;
        if (auto* hb = std::get_if<node_heartbeat>(&*msg)) {
          if (hb->host != m.hdr.src.host) return;  // a heartbeat speaks for its own host only
          s.core->heartbeat(*hb);
          s.net->name_peer(hb->host, hb->name);  // its traffic from here, by name (/metrics)
        } else if (auto* r = std::get_if<command_reply>(&*msg)) {
          s.core->command_answered(m.hdr.src.host, *r);
        } else if (auto* req = std::get_if<api_request>(&*msg)) {
          s.core->request(*req, [&s, client = m.hdr.src](api_reply r) { s.send(client, r); });
        }
      },
      [self](job_progress_atom, std::uint64_t id, std::uint32_t gen, sched::progress_event& p) {
        self->state.core->progress(id, gen, p);
      },
      [self](add_part_atom, std::uint64_t id, std::uint32_t gen, added_part& part,
             std::string& node) {
        auto& s = self->state;
        if (auto* job = s.core->registry().current(id, gen))
          s.runs[id].add(s.env(), *job, std::move(part), std::move(node));
      },
      [self](job_layout_atom, std::uint64_t id, std::uint32_t gen,
             std::vector<std::uint32_t>& members, std::vector<std::uint32_t>& live) {
        self->state.core->layout(id, gen, members, live);
      },
      [self](job_epoch_atom, std::uint64_t id, std::uint32_t gen, sched::epoch_report& e) {
        self->state.core->epoch(id, gen, e);
      },
      [self](job_checkpoint_atom, std::uint64_t id, std::uint32_t gen, param_snapshot& p) {
        self->state.core->checkpoint(id, gen, p.epoch, p.state);
      },
      [self](job_done_atom, std::uint64_t id, std::uint32_t gen, job_outcome& o) {
        self->state.core->done(id, gen, o.failure, o.result);
      },
  };
}

}  // namespace

caf::actor spawn_cluster_scheduler(caf::actor_system& sys, std::shared_ptr<zmq_transport> net,
                                   std::uint32_t host, scheduler_options opt) {
  return sys.spawn<caf::detached>(cluster_scheduler, std::move(net), host, std::move(opt));
}

}  // namespace coach::actors
