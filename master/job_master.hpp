#pragma once
// master::job_master: the job master of one training job, as a plain class. It hands out each
// step's chunks (step_planner over chunk_dispenser), opens steps and begins the elastic changes
// due at them (change_sequencer, change_planner), tracks epochs (epoch_ledger), asks the shards
// for the parameters at each epoch's end and at a cancelled job's stop and assembles them
// (snapshot_assembler), has them evaluated, times every change (change_timer) and drops workers
// and shard replicas that are gone (docs/design.md "Elastic jobs", "Shard replicas").
//
// It takes the job's messages and events as calls and does everything it does through its
// ports: the messages it sends (the data path's, wire/message.hpp), the parts it starts, what it
// reports. It reads time from an injected clock. actors/master_actor.cpp turns CAF messages into
// these calls and the ports into sends; tests/unit/master/job_master_test.cpp drives it with a
// manual clock and no actor system.
//
// Threads: one owner (the master actor, or a test).

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "master/change_sequencer.hpp"
#include "master/change_timer.hpp"
#include "master/chunk_dispenser.hpp"
#include "master/epoch_ledger.hpp"
#include "master/snapshot_assembler.hpp"
#include "master/step_planner.hpp"
#include "ps/adascale.hpp"
#include "ps/consistency.hpp"
#include "ps/job_config.hpp"
#include "ps/training_state.hpp"
#include "report/job_report.hpp"
#include "spec/job_spec.hpp"
#include "wire/message.hpp"
#include "worker/invocation_counts.hpp"

namespace coach::master {

/// One completed step as the job master saw it (the on_step test hook).
struct step_trace {
  std::int64_t step = 0;
  std::uint32_t members = 0;           ///< members that were granted samples
  std::vector<std::uint32_t> samples;  ///< every sample index granted, ascending
  double loss_sum = 0;                 ///< the members' reported losses, summed
  /// lr_scaling adascale: the gradient totals the step's pushes carried (ps/adascale.hpp): those
  /// of the step that produced the version it computed from.
  std::optional<ps::grad_stats> grad_totals;
};

/// Parameters assembled for evaluation or as the job's final result.
struct param_snapshot {
  std::uint32_t epoch = 0;
  std::int64_t version = 0;
  std::shared_ptr<const std::vector<float>> values;
  /// A checkpoint's: everything the shards held at `version` (values, optimizer state,
  /// counters); null when the master was not asked for it (job_master_options::checkpoint_due).
  std::shared_ptr<const ps::training_state> state;
  /// A model with sparse tables: every shard's rows at `version` (sparse::row_store transfers,
  /// one a shard), for the evaluator; null otherwise.
  std::shared_ptr<const std::vector<std::vector<std::byte>>> rows;
};

/// The evaluator's answer.
struct eval_result {
  std::uint32_t epoch = 0;
  std::int64_t correct = 0;
  std::int64_t total = 0;
  double loss_sum = 0;
  /// A two-class model with sparse tables (click-through rate): the test set's AUC and log loss
  /// (worker/binary_metrics.hpp); NaN otherwise.
  double auc = std::numeric_limits<double>::quiet_NaN();
  double log_loss = std::numeric_limits<double>::quiet_NaN();
};

/// What a job ends with: a result, or the error that stopped it.
struct job_outcome {
  std::optional<coach::error> failure;
  scheduler::job_result result;
};

/// Where a job master starts and what it reports besides progress, epochs and the outcome.
struct job_master_options {
  /// The first epoch to train: a job resumed from the checkpoint of epoch first_epoch - 1
  /// (its shards start from those parameters). Epoch numbers in reports stay absolute.
  std::uint32_t first_epoch = 0;
  /// The first step: a resumed job goes on with the step numbers of the run it continues (its
  /// checkpoint's version; the shards start there), so dropout masks and Adam's steps match.
  std::int64_t first_step = 0;
  /// Report the parameters (ports::checkpoint) at the end of every epoch.
  bool report_params = false;
  /// Asked once per epoch, when the step that hands out its last chunk opens: true makes the
  /// shards answer the epoch's snapshot with their optimizer state and counters too
  /// (ps::shard::snapshot), and the master reports (ports::checkpoint) the snapshot with
  /// `state` set for that epoch (also without report_params). Empty: never.
  std::function<bool(std::uint32_t epoch)> checkpoint_due;
  /// Test hook: >= 0 cancels the job as step `cancel_at_step` is about to open, as a cancel
  /// arriving between steps would (the step-exact reference of the Ctrl-C tests); -1: never.
  std::int64_t cancel_at_step = -1;
};

/// What the master knows of its job when it starts.
struct job_master_setup {
  std::uint64_t job = 1;
  scheduler::job_spec spec;
  std::size_t num_params = 0;  ///< floats in the parameter vector
  std::size_t train_rows = 0;  ///< samples in the training set
  std::string backend;         ///< the workers' backend, for the result ("cpu", "cuda")
  /// The configuration the job starts with (version 1), its workers being ranks
  /// 0..members-1 and its shards 0..shards-1.
  ps::job_config initial;
  std::uint32_t shards = 0;  ///< the shards it starts with
  wire::endpoint master;     ///< this master's endpoint (the sender of what it sends)
  /// The endpoints of shard k (its primary), worker r and replica i of shard k (0: the primary).
  std::function<wire::endpoint(std::uint32_t k)> shard_ep;
  std::function<wire::endpoint(std::uint32_t r)> worker_ep;
  std::function<wire::endpoint(std::uint32_t k, std::uint32_t i)> replica_ep;
  /// Test hook: called as each step completes (step_trace); empty: none.
  std::function<void(const step_trace&)> on_step;
  /// The model keeps sparse rows in the shards (ps/shard_rows.hpp): each epoch's end is asked
  /// with the state, which carries them, and the evaluator gets them (param_snapshot::rows).
  bool sparse_rows = false;
};

/// Where a part the master asked for starts: in this process (usable at once) or elsewhere
/// (usable once job_master::part_ready says so).
enum class part_start { here, elsewhere };

/// Everything a job master does outside itself. Every function is called on the owner's
/// thread, from within a call on the master. Empty add_worker / add_shard: the job cannot grow
/// (changes that need them are refused and logged); the other ports must be set.
struct job_master_ports {
  /// A data-path message to a shard or worker of the job.
  std::function<void(wire::wire_message)> send;
  /// Evaluate an epoch's parameters on the test set; the answer comes back as evaluated().
  std::function<void(param_snapshot)> evaluate;
  std::function<void(const scheduler::progress_event&)> progress;
  std::function<void(const scheduler::epoch_report&)> epoch;
  /// An epoch's parameters (report_params) or checkpoint (checkpoint_due), before its epoch().
  std::function<void(param_snapshot)> checkpoint;
  /// The job ended: once, the last thing the master reports.
  std::function<void(job_outcome)> done;
  /// Starts worker `rank`, whose first step is `first_step`, under `c`, on `node` when that is
  /// not empty.
  std::function<result<part_start>(std::uint32_t rank, const ps::job_config& c,
                                   std::int64_t first_step, const std::string& node)>
      add_worker;
  /// Starts shard `id`, owning nothing yet, under `c`; `expect_keys` > 0: it will adopt about
  /// that many keys soon (a migration prepared ahead), and a part started elsewhere is ready
  /// only once its node has warmed the memory for them.
  std::function<result<part_start>(std::uint32_t id, const ps::job_config& c,
                                   const std::string& node, std::uint64_t expect_keys)>
      add_shard;
  /// The workers (`members`) and shards (`live`) that hold a part of the job now (see
  /// job_master::layout); empty: not told.
  std::function<void(const std::vector<std::uint32_t>& members,
                     const std::vector<std::uint32_t>& live)>
      changed;
  /// Shard `k`'s primary is `ep` from now on (a backup took over); empty: not told.
  std::function<void(std::uint32_t k, const wire::endpoint& ep)> take_over;
};

class job_master {
 public:
  /// `clock` must outlive the master. Queues the changes of the spec's schedule from
  /// options.first_step on.
  job_master(job_master_setup setup, job_master_options options, job_master_ports ports,
             const scheduler::clock_source& clock);

  /// A message of the data path addressed to the master: chunk_request, step_report, params,
  /// state, transfer_ack. Another kind is logged and ignored; so is anything malformed.
  void on_message(const wire::wire_message& m);
  /// The evaluator's answer to ports::evaluate.
  void evaluated(const eval_result& r);
  /// Workers that died leave the job: every step from the first one they did not report
  /// expects them no more, their chunks go back (asp: their granted steps are completed by
  /// empty pushes on their behalf). The job fails when no worker is left; `why` (may be empty)
  /// names the last failure in that error.
  void workers_lost(const std::vector<std::uint32_t>& ranks, const std::string& why = {});
  /// Shard replicas lost with a node: for each pair (k, i) of `heads`, backup i of shard k
  /// becomes its primary; for each pair of `cut`, replica i of shard k goes on without the
  /// replicas after it (docs/design.md "Shard replicas").
  void replicas_lost(const std::vector<std::uint32_t>& heads,
                     const std::vector<std::uint32_t>& cut);
  /// A part started elsewhere (part_start::elsewhere) is up, or could not start (`why`).
  void part_ready(bool worker, std::uint32_t id, const std::string& why);
  /// Changes the job's counts at its next step boundary (0: unchanged). Empty: queued;
  /// otherwise why it is refused.
  std::string rescale(std::uint32_t workers, std::uint32_t shards);
  /// Moves every slice of `shard` to a new shard (on `node`, when not empty) at the next step
  /// boundary after the new shard is ready. Empty: under way; otherwise why not.
  std::string migrate(std::uint32_t shard, const std::string& node);
  /// Stops the job at the next step boundary: the steps open finish, the next one tells every
  /// worker to stop, and the parameters of that boundary are the result.
  void cancel();

  /// The job has ended (ports::done was called).
  bool ended() const { return done_; }
  /// The configuration of the step open now.
  const ps::job_config& config() const { return changes_.current(); }
  /// The last step opened.
  std::int64_t open_step() const { return planner_.open_step(); }

 private:
  const ps::job_config& cfg() const { return changes_.current(); }
  std::vector<std::uint32_t> live_shards() const { return changes_.live_shards(); }
  std::uint32_t live_shard_count();
  std::uint32_t num_epochs() const { return std::uint32_t(setup_.spec.epochs); }
  bool asp() const;
  wire::wire_message to(const wire::endpoint& dst, wire::msg_kind kind, std::int64_t step) const;

  bool begin_change(std::int64_t s, const change_request& req);
  bool send_orders();
  std::string request_change(change_request c);
  void report_layout();
  void send_config(const ps::job_config& c);
  void send_configs(const std::vector<ps::job_config>& batch);
  void on_ack(const wire::wire_message& m);
  void stand_in(std::int64_t g, std::uint32_t r);
  void fail_job(coach::error why);
  void regrant_parked();
  std::uint8_t snapshot_flags_of(std::int64_t s) const;
  bool checkpoint_due(std::uint32_t epoch);
  void ask_snapshots(std::int64_t s);
  bool change_due(std::int64_t s);
  bool open(std::int64_t s, std::optional<std::uint32_t> only = {});
  void grant(const wire::wire_message& req);
  void trace_report(const wire::wire_message& m, bool step_done);
  void on_report(const wire::wire_message& m);
  void read_invocations(const wire::wire_message& m);
  worker::invocation_counts summed_invocations() const;
  void progress(std::uint32_t epoch);
  void on_snapshot(const wire::wire_message& m);
  void on_state(const wire::wire_message& m);
  void on_assembled(snapshot_assembler::assembled a);
  void follow_gain(const wire::wire_message& m, const std::optional<std::uint64_t>& step_samples);
  void maybe_finish_epoch(std::uint32_t epoch);
  void finish(bool complete);

  job_master_setup setup_;
  job_master_options options_;
  job_master_ports ports_;
  const scheduler::clock_source& clock_;
  bool cancelled_ = false;
  bool done_ = false;
  chunk_dispenser dispenser_;
  std::unique_ptr<ps::consistency> mode_;  ///< the consistency mode's rules
  /// Who computes what at each step.
  step_planner planner_;
  std::vector<wire::wire_message> parked_;  ///< chunk requests waiting for the epoch to complete
  /// Each epoch's parameters (and, for a checkpoint, state) at its end, sent with its report.
  std::map<std::uint32_t, param_snapshot> epoch_params_;
  /// Whether each epoch's end is checkpointed with the optimizer state: checkpoint_due, asked
  /// once per epoch (an epoch whose end moves keeps its answer).
  std::map<std::uint32_t, bool> checkpointed_;
  std::size_t state_per_param_ = 0;  ///< optimizer floats per key (the shards')
  /// The versions wanted whole: epochs' ends and a cancelled job's last.
  snapshot_assembler snapshots_;
  std::shared_ptr<const std::vector<float>> last_params_;
  /// A model with sparse tables: every shard's rows at last_version_ (the job's result).
  std::shared_ptr<const std::vector<std::vector<std::byte>>> last_rows_;
  std::int64_t last_version_ = 0;  ///< last_params_' version: the steps applied since the seed
  std::int64_t stop_step_ = -1;    ///< cancelled: the step it stopped at (whose version is final)
  scheduler::job_result result_;
  scheduler::time_point job_start_;
  scheduler::time_point last_progress_;
  /// The configuration of the open step and the changes queued, prepared and under way.
  change_sequencer changes_;
  change_timer timer_;
  epoch_ledger ledger_;
  std::uint32_t next_rank_ = 0;
  std::uint32_t next_shard_ = 0;
  /// Every configuration published, by first step: the members each step expects, and (asp)
  /// where its pushes go.
  std::map<std::int64_t, ps::job_config> configs_;
  std::map<std::uint32_t, std::int64_t> last_report_;  ///< by rank: the last step reported
  std::map<std::uint32_t, std::int64_t> joined_at_;    ///< by added rank: its first step
  std::map<std::int64_t, step_trace> traces_;  ///< on_step: the steps granted, until complete
  ps::adascale_gain gain_;  ///< lr_scaling adascale: the shards' estimate, followed (follow_gain)
  double last_gain_ = 0;    ///< the gain of the last completed step (adascale; else 0)
  /// Function mode: each rank's invocation counts so far (a step report carries its totals).
  std::map<std::uint32_t, worker::invocation_counts> invocations_;
  std::uint64_t counted_version_ = 0;  ///< live_count_'s configuration version
  std::uint32_t live_count_ = 0;
};

}  // namespace coach::master
