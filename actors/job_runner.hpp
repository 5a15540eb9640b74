#pragma once
// actors/job_runner: one job's run as the cluster scheduler (actors/cluster_scheduler.cpp)
// drives it. It runs the job's master, evaluator and relay in the scheduler's process and
// starts the job's parts on their nodes in two phases, every shard, then (once their nodes
// acknowledged) every worker; while the job runs it places the parts its master adds (through
// the job registry), one at a time, and tells every node of the job, acknowledged by each before
// the master hears that the part is ready. The registry keeps the job's record; the runner
// keeps what lives in this process. docs/scheduler.md, "In the cluster scheduler".
//
// Threads: one owner (the scheduler actor), whose actor pointer it is given.

#include <caf/all.hpp>

#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "actors/cluster.hpp"
#include "actors/control.hpp"
#include "actors/job_context.hpp"
#include "scheduler/executor.hpp"
#include "scheduler/job_registry.hpp"
#include "scheduler/node_table.hpp"
#include "worker/dataset.hpp"
#include "worker/script_job.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(coach::actors::added_part)

namespace coach::actors {

// Messages from a run's relay (the master's observer) to the scheduler, tagged with the job and
// the run (generation) they belong to.
using job_progress_atom = caf::atom_constant<caf::atom("jprogress")>;
using job_epoch_atom = caf::atom_constant<caf::atom("jepoch")>;
/// (job_layout_atom, job, generation, members, live shards): a change of the job took effect.
using job_layout_atom = caf::atom_constant<caf::atom("jlayout")>;
using job_done_atom = caf::atom_constant<caf::atom("jdone")>;
using job_checkpoint_atom = caf::atom_constant<caf::atom("jcheckpt")>;
/// (add_part_atom, job, generation, part, node): the job's master asks for a new shard or worker.
using add_part_atom = caf::atom_constant<caf::atom("addpart")>;

/// What a runner uses of the scheduler that owns it.
struct runner_env {
  caf::event_based_actor* self = nullptr;
  std::shared_ptr<zmq_transport> net;
  endpoint self_ep;
  const scheduler::node_table* nodes = nullptr;
  scheduler::job_registry* reg = nullptr;
  const scheduler::executor* exec = nullptr;
  std::string own_address;  ///< where other nodes reach this one
  /// Where the evaluators of script jobs run their processes here (this node's interpreter and
  /// folder), and this node's CPUs, shared among its processes of a job (0: the host's).
  worker::script_host script;
  std::uint32_t cpus = 0;
  void send(std::uint32_t host, const control_message& m) const;
};

/// The job's data set, checked non-empty (its test half and size are needed here).
result<std::shared_ptr<const worker::dataset_pair>> load_job_data(const scheduler::job_spec& spec);

class job_runner {
 public:
  std::shared_ptr<const worker::dataset_pair> data;  ///< loaded at submit (or at launch)
  /// A script job's model as its submitter registered it (null for other jobs).
  std::shared_ptr<const worker::script_payload> script;

  /// Starts a run where `o` placed it: counts it in the registry (begin_run), spawns the master
  /// and evaluator here, tells the shards' nodes to start them. Errors (nothing started): the
  /// spec or data set cannot be read, a checkpoint of another size.
  result<void> launch(const runner_env& env, scheduler::registered_job& job,
                      const scheduler::launch_order& o);
  /// Stops the master, evaluator and relay of the run (the caller tells the nodes).
  void stop(const runner_env& env);
  /// The run's master (null when none runs).
  const caf::actor& master() const noexcept { return master_; }
  /// A part addition is in flight, or no run: no other change should start now.
  bool busy() const noexcept { return !ctx_ || !adds_.empty(); }

  /// The master asks for a new part (on the node `node`, or where the registry places it).
  void add(const runner_env& env, scheduler::registered_job& job, added_part part,
           std::string node);
  /// What a node's answer to a start means for the run.
  enum class answer { nothing, started };
  /// A node answered a start (of a phase or of an added part). `started` once every part of the
  /// launch runs. Errors: the node failed a part of the launch (the caller ends the job).
  result<answer> on_reply(const runner_env& env, scheduler::registered_job& job, std::uint32_t from,
                          const command_reply& r);

 private:
  struct part_add {
    added_part part;
    std::string node;  ///< asked for by name (coach migrate --to); empty: the registry picks
    std::uint32_t host = 0;
    std::set<std::uint32_t> pending;  ///< nodes that have not acknowledged
    std::optional<coach::error> failure;
    bool sent = false;
  };
  void spawn(const runner_env& env, std::uint64_t id, std::uint32_t gen, std::uint32_t first,
             std::int64_t first_step);
  /// A script job: its model here, for the evaluator; the start's script and, for a new run,
  /// its initial values.
  result<void> prepare_script(const runner_env& env, scheduler::registered_job& job,
                              scheduler::job_spec& spec, const scheduler::launch_order& o);
  void send_phase(const runner_env& env, const scheduler::registered_job& job, bool workers);
  /// Sends `msg` to `host`, with the script's files only while the node has not acknowledged a
  /// start of this run (it has them then).
  void send_start(const runner_env& env, std::uint32_t host, start_job msg);
  void next_add(const runner_env& env, scheduler::registered_job& job);
  bool has_part(const scheduler::registered_job& job, std::uint32_t host) const;

  start_job start_;                      ///< what every node of the job was told
  std::set<std::uint32_t> pending_;      ///< hosts that have not acknowledged the current phase
  std::set<std::uint32_t> have_script_;  ///< hosts that acknowledged a start with the script
  caf::actor master_, evaluator_, relay_;
  std::shared_ptr<job_context> ctx_;
  std::deque<part_add> adds_;  ///< one at a time, in the order asked
};

}  // namespace coach::actors
