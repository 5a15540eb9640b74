#pragma once
// scheduler::cluster_core: the cluster scheduler of a coach-node --scheduler as plain logic. It
// keeps the node table from heartbeats, asks the policy (through the job registry and the
// executor), turns the registry's orders into calls on its ports, answers the job API, ends jobs
// (writing a job's `output:` model), and handles nodes that stop heartbeating or whose process
// is gone (docs/scheduler.md, "In the cluster scheduler").
//
// What it does outside itself goes through cluster_core_ports: telling a node to stop a job's
// parts, adding a peer, asking for a decision or a node check at the next turn of the owner's
// mailbox, starting and stopping a job's run (its master and evaluator, in the owner's
// process), and asking a run's master for a change. actors/cluster_scheduler.cpp turns CAF
// messages into these calls and the ports into sends; tests/unit/scheduler/cluster_core_test.cpp
// drives it with manual clocks and an in-memory store.
//
// Threads: one owner. The core holds itself in the callbacks it gives the ports (change
// answers): it neither moves nor is copied.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "scheduler/cluster_messages.hpp"
#include "scheduler/executor.hpp"
#include "scheduler/job_registry.hpp"
#include "scheduler/job_store.hpp"
#include "scheduler/node_table.hpp"
#include "scheduler/policy.hpp"
#include "scheduler/rebalance.hpp"
#include "worker/dataset.hpp"

namespace coach::scheduler {

/// What the core is and how it decides (actors::scheduler_options, in policy time).
struct cluster_core_setup {
  std::uint32_t self_host = 0;  ///< the scheduler's host (every job's master runs there)
  /// A node whose last heartbeat is older than this is dead.
  seconds node_timeout{5.0};
  /// The job store; null: one in memory.
  std::shared_ptr<job_store> store;
  std::string policy = "fifo";  ///< when the store names none
  std::chrono::seconds rr_slice{600};
  /// How often the policy is asked again with nothing else happening.
  seconds decide_every{2.0};
  std::string placement = "dltap";
  /// The least time between two live shard moves of one dltap job; 0: never moves.
  seconds rebalance_interval{60.0};
  /// REQUIRES: both outlive the core. `steady` times node liveness and decisions; `wall` dates
  /// what the store keeps.
  const clock_source* steady = nullptr;
  const clock_source* wall = nullptr;
};

/// A job master's answer to a change: empty (queued for the next step boundary) or why it is
/// refused; an error (internal) when it did not answer.
using change_answer = std::function<void(result<std::string>)>;
using job_data = std::shared_ptr<const worker::dataset_pair>;
/// A script job's model as its submitter registered it (worker/script_job.hpp); null for other
/// jobs.
using job_script = std::shared_ptr<const worker::script_payload>;

/// What the core does outside itself.
struct cluster_core_ports {
  /// A line for the log.
  std::function<void(const std::string&)> note;
  /// Tell node `host` to stop every part of job `job` (it answers with a stopped
  /// command_reply).
  std::function<void(std::uint32_t host, std::uint64_t job)> stop_job;
  /// Reach node `host` at `address` with CURVE key `public_key` (new or moved).
  std::function<void(std::uint32_t host, const std::string& address, const std::string& public_key)>
      add_peer;
  /// Tell node `host` (reached already: add_peer) that its join is refused, and why.
  std::function<void(std::uint32_t host, const std::string& reason)> refuse_node;
  /// Call decide() at the next turn of the mailbox.
  std::function<void()> decide_soon;
  /// Call expire(as_of) once every message that came before now is read.
  std::function<void(time_point as_of)> expire_soon;
  /// Call cancel_due(job, generation) after `after`.
  std::function<void(std::uint64_t job, std::uint32_t generation, std::chrono::seconds after)>
      cancel_due_in;
  /// The job's data set, checked non-empty.
  std::function<result<job_data>(const job_spec&)> load_data;

  // A job's run in the owner's process (actors::job_runner).
  /// Starts a run where `o` placed it (calls the registry's shaped and begin_run), with the
  /// job's script when its model is one. Errors: nothing started (the core ends the job with
  /// the error).
  std::function<result<void>(registered_job&, const launch_order& o, job_data, job_script)> launch;
  /// Stops the run's master and evaluator (the core tells the nodes).
  std::function<void(std::uint64_t job)> stop_run;
  /// Stops the run and forgets it (the job ended).
  std::function<void(std::uint64_t job)> drop_run;
  /// A part addition is in flight, or no run: no other change should start now.
  std::function<bool(std::uint64_t job)> busy;
  /// A node answered a start. True once every part of the launch runs. Errors: the node failed
  /// a part of the launch (the core ends the job).
  std::function<result<bool>(registered_job&, std::uint32_t from, const command_reply&)>
      start_answered;

  // The run's master.
  /// Grow or shrink to `workers` and `shards` (0: unchanged) at the next step boundary.
  std::function<void(std::uint64_t job, std::uint32_t workers, std::uint32_t shards, change_answer)>
      rescale;
  /// Move shard `shard` to a new shard on node `node` at the next step boundary.
  std::function<void(std::uint64_t job, std::uint32_t shard, std::string node, change_answer)>
      migrate;
  /// Stop at the next step boundary (the user cancelled).
  std::function<void(std::uint64_t job)> cancel;
  /// Backups take over (`heads`) and replicas go on without their successors (`cut`):
  /// node_loss's lists.
  std::function<void(std::uint64_t job, std::vector<std::uint32_t> heads,
                     std::vector<std::uint32_t> cut)>
      take_over;
  /// The workers `ranks` are gone: go on without them.
  std::function<void(std::uint64_t job, std::vector<std::uint32_t> ranks)> lose_workers;
};

class cluster_core {
 public:
  /// How long a cancelled run may take to stop at a step boundary before its parts are stopped
  /// where they are (a run whose step cannot finish, e.g. one waiting on a part that is gone).
  static constexpr std::chrono::seconds cancel_grace{3};

  /// Opens the store (setup.store, or one in memory), the policy it names (else
  /// setup.policy; fifo when unknown), the placement (dltap when unknown) and reads its jobs.
  cluster_core(cluster_core_setup setup, cluster_core_ports ports);
  cluster_core(const cluster_core&) = delete;
  cluster_core& operator=(const cluster_core&) = delete;

  /// A node's heartbeat (the caller checked it speaks for its own host). A node whose name
  /// another live node has is refused (refuse_node) and not listed.
  void heartbeat(const node_heartbeat& hb);
  /// The owner's timer, every check_every(): nodes of an earlier process, overdue stops, silent
  /// nodes (expire_soon), a decision when none was made for decide_every.
  void tick();
  /// The nodes still silent past the timeout as of `as_of` are lost.
  void expire(time_point as_of);
  /// A node's process is gone (its connections closed): lost now.
  void peer_gone(std::uint32_t host);
  /// Asks the policy and carries out its orders.
  void decide();
  /// A node answered a start or a stop.
  void command_answered(std::uint32_t from, const command_reply& r);
  /// A job API request; `reply` is called once, now or when the job's master answers.
  void request(const api_request& req, std::function<void(api_reply)> reply);
  /// An action from the dashboard, "policy NAME" or "cancel JOB": empty when done, else why not.
  std::string dashboard_action(const std::string& action, const std::string& arg);
  /// The run cancelled then must have ended by now.
  void cancel_due(std::uint64_t id, std::uint32_t generation);

  // What the job's run reports (stale generations are ignored).
  void progress(std::uint64_t id, std::uint32_t gen, const progress_event& p);
  void epoch(std::uint64_t id, std::uint32_t gen, const epoch_report& e);
  void checkpoint(std::uint64_t id, std::uint32_t gen, std::uint32_t epoch,
                  std::shared_ptr<const ps::training_state> state);
  /// A change took effect (members, live shards).
  void layout(std::uint64_t id, std::uint32_t gen, const std::vector<std::uint32_t>& members,
              const std::vector<std::uint32_t>& live);
  /// The run's master finished: failed with `failure`, or with `result`.
  void done(std::uint64_t id, std::uint32_t gen, std::optional<coach::error> failure,
            job_result& result);

  /// What coach status shows of the job, with the nodes' traffic for it.
  job_status snapshot(const registered_job& job, bool with_model);
  /// Every node known, as coach nodes shows them.
  std::vector<node_status> node_statuses() const;
  std::string policy_name() const { return holder_->name(); }
  /// How often tick() is due.
  seconds check_every() const { return nodes_.check_every(); }

  const node_table& nodes() const noexcept { return nodes_; }
  job_registry& registry() noexcept { return *reg_; }
  const executor& exec() const noexcept { return *exec_; }

 private:
  void note_job(std::uint64_t id, std::string line);
  std::string name_taken(const node_heartbeat& hb) const;
  void open_store();
  void poke();
  void resend_stops();
  void stop_on(std::uint64_t id, const std::set<std::uint32_t>& hosts);
  void launch(const launch_order& l);
  void resize(const resize_order& z);
  void migrate(const migrate_order& m);
  void end(registered_job& job, job_state state, std::optional<coach::error> why);
  void lost(std::uint32_t host, std::string_view how);
  result<std::uint64_t> submit(const submit_request& req);
  // A script job's model (cluster_core_script.cpp).
  /// A submitted script checked (its layout, initial values and files: hostile input), and the
  /// data set its job runs on as Coach sees it (the script's sizes).
  result<job_data> check_script(const job_spec& spec, const submit_request& req);
  /// Keeps a new job's script here and in the store.
  result<void> keep_script(std::uint64_t id, job_script script);
  /// The job's script: kept here, else read from the store (a restarted scheduler).
  result<job_script> script_of(std::uint64_t id);
  /// A script job's spec with its model's layout (for write_model); unchanged for others.
  result<void> with_script_layout(std::uint64_t id, job_spec& spec);
  result<void> write_output(registered_job& job, job_result& r);
  /// Rescale and migrate go to the job's master; false for other requests.
  bool forward(const api_request& req, const std::function<void(api_reply)>& reply);
  api_reply answer(const api_request& req);

  cluster_core_setup setup_;
  cluster_core_ports ports_;
  node_table nodes_;
  std::map<std::uint32_t, node_heartbeat> heartbeats_;  ///< the latest of each node, as it came
  /// Ended jobs whose traffic is not all in: the hosts told to stop that have not answered, and
  /// those that answered but have not sent a heartbeat since (which carries their last bytes).
  std::map<std::uint64_t, std::pair<std::set<std::uint32_t>, std::set<std::uint32_t>>>
      final_traffic_;
  std::optional<executor> exec_;
  rebalancer rebal_;
  std::optional<policy_holder> holder_;
  std::optional<job_registry> reg_;
  std::map<std::uint64_t, job_data> data_;  ///< each job's data set, loaded at submit or launch
  std::map<std::uint64_t, job_script> scripts_;  ///< script jobs' models, kept at submit or launch
  std::set<std::uint32_t> refused_;              ///< hosts refused (their name taken), noted once
  time_point born_{}, last_decision_{};
  bool decide_queued_ = false;
};

}  // namespace coach::scheduler
