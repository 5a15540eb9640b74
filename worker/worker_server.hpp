#pragma once
// worker::worker_server: one worker of a job as it meets the data path: the messages it gets
// (chunk grants, parameters, configurations, `moved` answers, a backup's take-over) turned into
// pulls, steps computed on its backend, pushes and step reports.
//
// What it holds: the configuration of the current step and those sent for later steps (a
// re-issue taken whole); which keys of which version have arrived (bsp: the step's own; ssp:S
// and asp: the newest whole version, versions counted per key); keys a shard said it no longer
// owns, pulled again from their owner once the configuration that moved them is here; the
// grants by step; a step's pushes kept until the next one for a backup that takes over. Where
// the parameters come as views of one whole vector (an in-process shard owning every key) the
// step computes from that buffer without copying it. The step itself: the network's forward
// and backward (or the local steps of averaging:K, or a bounded invocation in function mode),
// clipping, host or device reduction, pushes to each shard and the report to the master.
//
// actors/worker_actor.cpp turns CAF messages into these calls; tests/unit/worker/ drive it with
// no actor system. Threads: one owner.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/buffer_pool.hpp"
#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "ps/adascale.hpp"
#include "ps/consistency.hpp"
#include "ps/job_config.hpp"
#include "ps/key_coverage.hpp"
#include "wire/message.hpp"
#include "worker/dataset.hpp"
#include "worker/device_assignment.hpp"
#include "worker/device_reducer.hpp"
#include "worker/external_pool.hpp"
#include "worker/function_runner.hpp"
#include "worker/host_reducer.hpp"
#include "worker/local_averaging.hpp"
#include "worker/network.hpp"
#include "worker/pinned_pool.hpp"
#include "worker/row_puller.hpp"
#include "worker/script_invocations.hpp"
#include "worker/sparse_batch.hpp"

namespace coach::worker {

/// Who the worker is, what it trains and whom it talks to.
struct worker_server_setup {
  std::uint64_t job = 1;
  std::uint32_t rank = 0;
  wire::endpoint self;    ///< this worker's endpoint (the sender of what it sends)
  wire::endpoint master;  ///< the job master's
  /// The endpoint of shard k (also one added while the job runs) and of worker r.
  std::function<wire::endpoint(std::uint32_t k)> shard_ep;
  std::function<wire::endpoint(std::uint32_t r)> worker_ep;
  std::shared_ptr<const network> model;
  std::shared_ptr<const dataset_pair> data;
  std::size_t slice_size = 0;  ///< floats a slice (to read configurations)
  int batch_size = 1;          ///< the most samples a step gives this worker
  float clip_norm = 0;         ///< the optimizer's clip_norm (0: none)
  std::uint32_t replicas = 1;  ///< shard replicas (> 1: pushes kept for a take-over)
  std::shared_ptr<const ps::consistency> consistency;
  /// averaging:K: the local optimizer of each round's steps.
  kernels::sgd_options local;
  /// Host reduction (host memory or on the devices; at most one), and the process's devices
  /// (released for a later worker when this one ends); null: none.
  std::shared_ptr<worker::host_reducer> reducer;
  std::shared_ptr<worker::device_reducer> device_reducer;
  std::shared_ptr<worker::device_assignment> devices;
  /// Function mode: each step computed by a bounded invocation; null otherwise.
  std::unique_ptr<worker::function_runner> functions;
  /// A script's model: each step computed by a process of the script taken from this pool (at
  /// the first step; stopped when the worker ends); null otherwise.
  std::shared_ptr<worker::external_pool> external;
  /// A script's model in function mode: the limits of its processes (script_invocations.hpp).
  std::optional<worker::script_limits> script_limits;
  /// A device worker copies each layer's gradient to pinned host memory while the layers before
  /// it compute, where nothing else needs the whole gradient on the device first
  /// (COACH_COPY_OVERLAP=0 turns it off).
  bool copy_overlap = true;
  /// Test hook: how many times as long a step takes (>= 1); empty: full speed.
  std::function<double(std::uint32_t rank, std::int64_t step)> slowdown;
};

/// What the worker does outside itself.
struct worker_server_ports {
  /// A message to a shard or the master.
  std::function<void(wire::wire_message)> send;
  /// asp: call answers_late(step) after worker_server::asp_answer_wait.
  std::function<void(std::int64_t step)> bound_wait;
  /// A step cannot be computed (an invocation failed): the worker ends.
  std::function<void(coach::error)> fail;
  /// Held while a step's pushes and report are sent, dropped after (actors::inline_scope: a
  /// shard of this process may run on this thread then); empty: none.
  std::function<std::shared_ptr<void>()> push_scope;
  /// Shard k's backup at `head` took over from its primary: where shard_ep(k) points from now.
  std::function<void(std::uint32_t k, wire::endpoint head)> took_over;
};

class worker_server {
 public:
  /// asp: how long a step waits at most for the answers to its worker's last pushes.
  static constexpr auto asp_answer_wait = std::chrono::milliseconds(50);

  /// A worker that starts at step `first_step` under configuration `cfg`, computing on `be`.
  worker_server(worker_server_setup setup, worker_server_ports ports,
                std::shared_ptr<kernels::backend> be, ps::job_config cfg, std::int64_t first_step);
  ~worker_server();
  worker_server(const worker_server&) = delete;
  worker_server& operator=(const worker_server&) = delete;

  /// Pulls the keys of the current version from the shards that own them, then asks for work.
  void start();
  /// A message of the data path addressed to this worker. False when the job told it to finish
  /// (a grant flagged `finished`): it sends nothing more. Anything unexpected is logged.
  bool on_message(wire::wire_message& m);
  /// asp: the wait bounded for step `step` ran out: the step computes from what is here.
  void answers_late(std::int64_t step);

  std::int64_t step() const { return step_; }
  /// The configuration the current step runs under.
  const ps::job_config& config() const { return cfg_; }

 private:
  wire::wire_message to(const wire::endpoint& dst, wire::msg_kind kind) const;
  void use(ps::job_config c);
  void catch_up();
  void on_moved(const wire::wire_message& m);
  void pull_moved();
  void on_configure(const wire::wire_message& m);
  void on_stale_params(const wire::wire_message& m);
  bool params_ready() const;
  void on_params(const wire::wire_message& m);
  void take_stats(const wire::wire_message& m);
  bool hold(const ps::key_range& r, const wire::frame& f);
  void push_to(std::uint32_t k, std::uint32_t as_rank, std::uint64_t samples,
               const std::shared_ptr<const float_buffer>& grad);
  void on_take_over(const wire::wire_message& m);
  bool push_reduced(std::uint64_t samples, std::shared_ptr<const float_buffer> grad);
  result<invocation_result> invoke(const float* w, std::span<const std::uint32_t> indices,
                                   std::span<const std::uint32_t> sizes, std::uint64_t noise);
  /// A script's step: its process computes the gradient of `indices` from `w` into `out`.
  result<double> compute_external(const float* w, std::span<const std::uint32_t> indices,
                                  float* out);
  bool valid_local_steps(std::span<const std::uint32_t> indices,
                         std::span<const std::uint32_t> sizes) const;
  /// The grant's step computed from `w` into `out`; false when it failed (reported).
  bool compute(const wire::wire_message& grant, const float* w, float* out, double& loss,
               std::size_t& samples);
  void try_step();
  // Sparse tables (worker_server_rows.cpp).
  /// The step's rows: asks for them when its grant is new (and for moved ones once the
  /// configuration that moved them is here); true once all are here.
  bool rows_ready(const wire::wire_message& grant);
  /// A script's tables: the rows its process says the samples `indices` look up.
  result<std::vector<std::vector<std::uint64_t>>> script_lookup(
      std::span<const std::uint32_t> indices);
  void on_rows(const wire::wire_message& m);
  /// The shard that holds key `key` under the current configuration.
  std::uint32_t owner_of(std::uint64_t key) const;
  /// Appends the step's row gradients for shard k to its push.
  void add_push_rows(wire::wire_message& m, std::uint32_t k) const;
  void finish_step(const wire::wire_message& grant, std::shared_ptr<float_buffer> buf,
                   std::size_t samples, double loss, std::int64_t us);

  worker_server_setup setup_;
  worker_server_ports ports_;
  std::size_t n_ = 0;  ///< floats in the parameter vector
  std::shared_ptr<kernels::backend> be_;
  std::unique_ptr<network_runner> runner_;
  /// averaging:K: the local steps of each round; null otherwise.
  std::unique_ptr<local_averaging> averager_;
  float* params_ = nullptr;  ///< backend memory: the parameters assembled from the shards
  /// Zero copy: with a host backend, while every piece of the version received so far is a view
  /// of one buffer laid out as the whole vector (an in-process shard owning every key), the
  /// step computes straight from that buffer (held here until the step's gradient is
  /// computed). `whole_` is the buffer (data = key 0), `held_` the pieces taken from it. A piece
  /// that breaks the pattern copies the held ones to `params_`, and `copying_` says so.
  wire::frame whole_;
  std::vector<ps::key_range> held_;
  bool copying_ = false;
  float* grad_ = nullptr;  ///< backend memory (only for a backend whose memory is not the host's)
  bool host_backend_ = true;
  std::unique_ptr<buffer_pool> grads_;  ///< host gradients pushed to the shards
  /// A device worker whose gradient goes to the shards as computed (no clipping, averaging,
  /// function mode or device reduction): each layer's gradient is copied into a pinned buffer
  /// from this pool as soon as its backward pass is enqueued, while the layers before it
  /// compute (network_runner::on_gradient_ready); null otherwise.
  std::shared_ptr<pinned_pool> pinned_;
  float* copy_to_ = nullptr;                        ///< the pinned buffer of the step computed
  std::vector<std::vector<ps::key_range>> ranges_;  ///< per shard id, from cfg_'s map
  ps::job_config cfg_;                              ///< the configuration of `step_`
  /// Configurations received for later steps (a worker may still finish the step before).
  std::map<std::int64_t, ps::job_config> upcoming_;
  /// A re-issue's configurations before its last (flag::more_configs): taken all at once.
  std::vector<ps::job_config> batch_;
  std::int64_t step_ = 0;
  std::optional<ps::key_coverage> received_;  ///< keys of the current version received
  /// ssp:S (S > 0): step s computes from the newest parameters received once they are at least
  /// version max(s - S, first): the keys of each version arrived so far, the newest version
  /// whose keys all arrived (each shard answers in version order, so the vector then holds
  /// that version or a newer one of every key) and the version first pulled.
  std::int64_t staleness_ = 0;
  bool asp_ = false;  ///< no bound at all: any version from the first pulled on
  /// asp: answers still due to this worker's last pushes (a shard answers each push with its
  /// values once the push is applied). The next step waits for them, so a worker always
  /// computes from values holding its own last update: only the other workers' updates since
  /// are missing. Computing on before them let a worker's gradients run two or three versions
  /// behind its own updates, and Adam diverged with two workers (docs/design.md "Consistency").
  std::uint32_t answers_due_ = 0;
  /// The step for which the wait for answers_due_ is bounded (ports_.bound_wait).
  std::int64_t wait_bounded_at_ = -1;
  std::map<std::int64_t, ps::key_coverage> versions_;
  std::int64_t newest_ = -1;
  std::int64_t first_ = 0;
  /// Keys of the current version that a shard said it no longer owns (a `moved` answer), to be
  /// pulled from their owner once this worker's configuration is at least `moved_version_`.
  std::vector<ps::key_range> moved_keys_;
  std::uint64_t moved_version_ = 0;
  std::vector<wire::endpoint> moved_from_;  ///< shards that said so: never asked again this step
  std::map<std::int64_t, wire::wire_message> grants_;  ///< chunk grants by step
  /// lr_scaling adascale: the shards' gradient sums that came with each version's parameters;
  /// their totals go with the pushes of a step computed from that version (ps/adascale.hpp).
  ps::stats_gatherer stats_;
  std::vector<double> step_totals_;  ///< the totals the current step's pushes carry
  /// The step's snapshot request (flag::snapshot, with_state), from its grant to its pushes.
  std::uint8_t push_flags_ = 0;
  std::vector<std::uint32_t> local_members_;  ///< host reduction: scratch of push_reduced
  /// A script's model: the processes computing this worker's steps (the first taken at the
  /// first step).
  std::unique_ptr<script_invocations> scripts_;
  /// Shard replicas: this worker's pushes of its last step, by shard, until the next step's:
  /// sent again to a backup that takes over before they were answered (on_take_over).
  std::vector<std::pair<std::uint32_t, wire::wire_message>> last_pushes_;
  /// Sparse tables: the step's rows pulled from their shards, the batch's lookups into them,
  /// their gradients and, once computed, those gradients split by shard for the pushes; null
  /// for a model without tables.
  std::unique_ptr<row_puller> rows_;
  std::vector<table_batch> lookups_;
  std::int64_t lookup_failed_ = -1;  ///< the step whose script lookup failed (reported once)
  std::vector<std::vector<float>> row_grads_;
  std::map<std::uint32_t, row_parts_for> row_pushes_;
};

}  // namespace coach::worker
