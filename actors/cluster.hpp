#pragma once
// actors/cluster.hpp: the actors of a multi-process cluster (coach-node). Every node runs a node
// agent; one node also runs the cluster scheduler and the job masters. They talk through a
// zmq_transport with control messages (actors/control.hpp); the data path of a job is the same
// wire_messages as in the embedded cluster, between hosts now.
//
// Addressing: a node's host id is node_host_id(its address). Host 0 in a destination means "the
// process at the other end of this link": a node sends its heartbeats and the CLI its requests to
// {0, scheduler_id} over a peer added as host 0 (the --join / --at address), so nobody needs to
// know the scheduler's host id up front.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/control.hpp"
#include "actors/job_context.hpp"
#include "actors/zmq_transport.hpp"
#include "scheduler/job_store.hpp"

namespace coach::actors {

struct node_options {
  std::string name;                      ///< shown by `coach nodes`
  std::string address;                   ///< advertised data-path address
  std::string public_key;                ///< its CURVE public key (Z85); empty: it has none
  std::uint32_t host = 0;                ///< node_host_id(address)
  std::optional<std::uint32_t> cpus;     ///< --cpus: the CPUs to advertise (may exceed the host's)
  std::optional<std::vector<int>> gpus;  ///< --gpus: the GPUs this node may use
  std::chrono::milliseconds heartbeat{1000};
  std::string proc_root = "/proc";  ///< for tests
  /// --cpu-accounting: true (measured) reports the CPUs other programs keep busy, which the
  /// scheduler takes off what it may give; false (reserved) reports none, so only what Coach
  /// reserved counts (a host given to Coach alone, or tests that share a machine).
  bool external_cpus = true;
  /// Where the processes of script jobs' workers run here (coach-node --python; the folder
  /// their files are written into, $TMPDIR/coach-node-NAME). Each gets OMP_NUM_THREADS = this
  /// node's CPUs / the job's workers here.
  worker::script_host script;
  /// The scheduler refused this node's join (node_refused: its name is taken), with why; the
  /// agent quits after calling it. Called on the agent's thread; null: only logged.
  std::function<void(const std::string& reason)> refused;
};

/// Spawns the node agent (a detached actor: it loads data sets and samples the host). It binds
/// {host, node_agent_id}, heartbeats to {0, scheduler_id} through peer 0 (add it first), runs the
/// job parts the scheduler sends and answers each with a command_reply. (drain_atom): take no new
/// work, say so in heartbeats, and quit once the last part has stopped.
caf::actor spawn_node_agent(caf::actor_system& sys, std::shared_ptr<zmq_transport> net,
                            node_options opt);

struct scheduler_options {
  /// A node whose last heartbeat is older than this is dead; its jobs fail.
  std::chrono::milliseconds node_timeout{5000};
  /// The job store (jobs, states, allocations, epochs, checkpoints, the active policy). The
  /// scheduler resumes every job it holds; null: a store in memory (nothing survives).
  std::shared_ptr<scheduler::job_store> store;
  /// The policy when the store names none.
  std::string policy = "fifo";
  /// round-robin: a job's turn (coach-node --rr-slice).
  std::chrono::seconds rr_slice{600};
  /// How often the policy is asked again with nothing else happening (heartbeats change what
  /// is free; a policy's turn may end).
  std::chrono::milliseconds decide_every{2000};
  /// Where jobs' parts go unless a job's spec names its own placement (scheduler/placement.hpp):
  /// spread, best-fit, random, dltap.
  std::string placement = "dltap";
  /// dltap jobs: the least time between two live shard moves of one job that the scheduler
  /// starts to raise its aggregation degree (scheduler/rebalance.hpp); 0: never moves.
  std::chrono::milliseconds rebalance_interval{60000};
  /// The address other nodes reach this one at (coach-node --advertise); empty: the transport's
  /// bound address. Peer lists name it for parts here before this node's first heartbeat.
  std::string address;
  /// Where script jobs' evaluators run their processes (as node_options::script), and this
  /// node's CPUs (--cpus; 0: the host's), shared by a job's evaluator and its workers here.
  worker::script_host script;
  std::uint32_t cpus = 0;
};

/// Spawns the cluster scheduler (detached) bound at {host, scheduler_id}: keeps the cluster view
/// from heartbeats, answers the job API, asks the active policy (docs/scheduler.md) which jobs
/// start, grow, shrink or are suspended, places their parts over live nodes
/// (scheduler/placement.hpp), runs each job's master and evaluator in this process, tells the nodes
/// to start and stop their parts, records everything in the job store and resumes the jobs it finds
/// there.
caf::actor spawn_cluster_scheduler(caf::actor_system& sys, std::shared_ptr<zmq_transport> net,
                                   std::uint32_t host, scheduler_options opt = {});

using drain_atom = caf::atom_constant<caf::atom("drain")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
/// (peer_gone_atom, host): the transport saw that node's process go (zmq_transport::on_peer_gone).
using peer_gone_atom = caf::atom_constant<caf::atom("peergone")>;
/// (metrics_atom) -> std::string: the node agent's or the scheduler's families of /metrics
/// (actors/metrics.hpp), in Prometheus' text format.
using metrics_atom = caf::atom_constant<caf::atom("metrics")>;
/// (dashboard_atom, bool admin) -> std::string: the scheduler's /api/state (actors/dashboard.hpp);
/// (dashboard_atom, action, argument) -> std::string: "policy NAME" or "cancel JOB" from the
/// dashboard (its server allows them with --dashboard-admin only); empty when done, else why not.
using dashboard_atom = caf::atom_constant<caf::atom("dashboard")>;

}  // namespace coach::actors
