#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <thread>

#include "actors/inline_delivery.hpp"
#include "actors/roles.hpp"
#include "common/buffer_pool.hpp"
#include "common/log.hpp"
#include "ps/adascale.hpp"
#include "ps/key_coverage.hpp"
#include "wire/elastic_messages.hpp"
#include "worker/function_runner.hpp"
#include "worker/gradient_clip.hpp"
#include "worker/local_averaging.hpp"
#include "worker/pinned_pool.hpp"

namespace coach::actors {
namespace {

using answers_late_atom = caf::atom_constant<caf::atom("ansLate")>;
/// asp: how long a step waits at most for the answers to its worker's last pushes.
constexpr auto asp_answer_wait = std::chrono::milliseconds(50);

struct worker_state {
  std::shared_ptr<const job_context> ctx;
  std::uint32_t rank = 0;
  endpoint self_ep;
  std::shared_ptr<kernels::backend> be;
  std::unique_ptr<worker::network_runner> runner;
  /// averaging:K: the local steps of each round (worker/local_averaging.hpp); null otherwise.
  std::unique_ptr<worker::local_averaging> averager;
  /// Function mode: each step computed by a bounded invocation (worker/function_runner.hpp).
  std::unique_ptr<worker::function_runner> functions;
  std::function<void(coach::error)> fail;  ///< a step that cannot be computed ends this worker
  float* params = nullptr;  ///< backend memory: the parameters assembled from the shards
  /// Zero copy: with a host backend, while every piece of the version received so far is a view
  /// of one buffer laid out as the whole vector (an in-process shard owning every key), the
  /// step computes straight from that buffer (held here until the step's gradient is
  /// computed). `whole` is the buffer (data = key 0), `held` the pieces taken from it. A piece
  /// that breaks the pattern copies the held ones to `params`, and `copying` says so.
  frame whole;
  std::vector<ps::key_range> held;
  bool copying = false;
  float* grad = nullptr;  ///< backend memory (only for a backend whose memory is not the host's)
  bool host_backend = true;
  std::unique_ptr<buffer_pool> grads;  ///< host gradients pushed to the shards
  /// A device worker whose gradient goes to the shards as computed (no clipping, averaging,
  /// function mode or device reduction): each layer's gradient is copied into a pinned buffer
  /// from this pool as soon as its backward pass is enqueued, while the layers before it
  /// compute (network_runner::on_gradient_ready); null otherwise.
  std::shared_ptr<worker::pinned_pool> pinned;
  float* copy_to = nullptr;                        ///< the pinned buffer of the step being computed
  std::vector<std::vector<ps::key_range>> ranges;  ///< per shard id, from cfg's map
  ps::job_config cfg;                              ///< the configuration of `step`
  /// Configurations received for later steps (a worker may still finish the step before).
  std::map<std::int64_t, ps::job_config> upcoming;
  /// A re-issue's configurations before its last (flag::more_configs): taken all at once.
  std::vector<ps::job_config> batch;
  std::int64_t step = 0;
  std::optional<ps::key_coverage> received;  ///< keys of the current version received
  /// ssp:S (S > 0): step s computes from the newest parameters received once they are at least
  /// version max(s - S, first): the keys of each version arrived so far, the newest version
  /// whose keys all arrived (each shard answers in version order, so the vector then holds
  /// that version or a newer one of every key) and the version first pulled.
  std::int64_t staleness = 0;
  bool asp = false;  ///< no bound at all: any version from the first pulled on
  /// asp: answers still due to this worker's last pushes (a shard answers each push with its
  /// values once the push is applied). The next step waits for them, so a worker always
  /// computes from values holding its own last update: only the other workers' updates since
  /// are missing. Computing on before them let a worker's gradients run two or three versions
  /// behind its own updates, and Adam diverged with two workers (docs/design.md "Consistency").
  std::uint32_t answers_due = 0;
  /// The step for which the wait for answers_due is bounded (see answers_late_atom), and what
  /// arms that bound.
  std::int64_t wait_bounded_at = -1;
  std::function<void(std::int64_t step)> bound_wait;
  std::map<std::int64_t, ps::key_coverage> versions;
  std::int64_t newest = -1;
  std::int64_t first = 0;
  /// Keys of the current version that a shard said it no longer owns (a `moved` answer), to be
  /// pulled from their owner once this worker's configuration is at least `moved_version`.
  std::vector<ps::key_range> moved_keys;
  std::uint64_t moved_version = 0;
  std::vector<endpoint> moved_from;  ///< shards that said so: never asked again for this step
  std::map<std::int64_t, wire_message> grants;  ///< chunk grants by step
  /// lr_scaling adascale: the shards' gradient sums that came with each version's parameters;
  /// their totals go with the pushes of a step computed from that version (ps/adascale.hpp).
  ps::stats_gatherer stats;
  std::vector<double> step_totals;  ///< the totals the current step's pushes carry
  /// The step's snapshot request (flag::snapshot, with_state), from its grant to its pushes.
  std::uint8_t push_flags = 0;
  std::vector<std::uint32_t> local_members;  ///< host reduction: scratch of push_reduced
  /// Shard replicas: this worker's pushes of its last step, by shard, until the next step's:
  /// sent again to a backup that takes over before they were answered (on_take_over).
  std::vector<std::pair<std::uint32_t, wire_message>> last_pushes;
  static inline const char* name = "coach.worker";

  ~worker_state() {
    if (be) {
      be->free(params);
      be->free(grad);
    }
    if (ctx && ctx->devices) ctx->devices->release(ctx->job, rank);  // for a later worker
  }

  wire_message to(const endpoint& dst, msg_kind kind) const {
    wire_message m;
    m.hdr.src = self_ep;
    m.hdr.dst = dst;
    m.hdr.kind = kind;
    m.hdr.job = ctx->job;
    m.hdr.map_version = cfg.version;
    m.hdr.rank = rank;
    m.hdr.step = step;
    return m;
  }

  void use(ps::job_config c) {
    // A new configuration may have moved or removed a shard pushed to (one that owns nothing
    // sends no answer): what is due is not waited for across it.
    answers_due = 0;
    cfg = std::move(c);
    ranges.clear();
    for (std::uint32_t k = 0; k < cfg.map.num_shards(); ++k) ranges.push_back(cfg.map.ranges_of(k));
  }

  /// Takes the configurations that govern the current step.
  void catch_up() {
    while (!upcoming.empty() && upcoming.begin()->first <= step) {
      if (upcoming.begin()->second.version > cfg.version) use(std::move(upcoming.begin()->second));
      upcoming.erase(upcoming.begin());
    }
    pull_moved();
  }

  /// A shard answered a pull of the current version with keys it no longer owns: they moved in
  /// a configuration this worker may not have yet (docs/design.md "Elastic jobs").
  void on_moved(const wire_message& m) {
    // A version this worker is done with (asp: the shard answers the first pull with its
    // current version, whatever was asked).
    if (m.hdr.step != step && !(asp && newest < first)) return;
    moved_keys.insert(moved_keys.end(), m.hdr.ranges.begin(), m.hdr.ranges.end());
    moved_version = std::max(moved_version, m.hdr.map_version);
    moved_from.push_back(m.hdr.src);
    pull_moved();
  }

  /// Pulls the moved keys from their owners, once the configuration that moved them is here.
  void pull_moved() {
    if (moved_keys.empty() || cfg.version < moved_version) return;
    for (std::uint32_t k = 0; k < ranges.size(); ++k) {
      auto m = to(ctx->shard_ep(k), msg_kind::pull);
      const bool disowned =
          std::find(moved_from.begin(), moved_from.end(), m.hdr.dst) != moved_from.end();
      for (const auto& own : ranges[k])
        for (const auto& r : moved_keys)
          if (std::max(own.begin, r.begin) < std::min(own.end, r.end))
            m.hdr.ranges.push_back({std::max(own.begin, r.begin), std::min(own.end, r.end)});
      if (m.hdr.ranges.empty()) continue;
      if (disowned) {  // the configurations disagree: asking again would go round in circles
        log::info("worker {}: shard {} disowns keys configuration {} gives it", rank, k,
                  cfg.version);
        continue;
      }
      ctx->net->send(std::move(m));
    }
    moved_keys.clear();
  }

  void on_configure(const wire_message& m) {
    auto c = read_configure(m, ctx->model.num_params(), ctx->spec.slice_size);
    if (!c) {
      log::warn("worker {}: {}", rank, c.error().message);
      return;
    }
    // A re-issue (workers died) is taken whole: one of its configurations alone could give
    // this worker's next step the shard map of an earlier one.
    batch.push_back(std::move(*c));
    if (m.hdr.flags & flag::more_configs) return;
    for (auto& b : batch)
      if (b.version > cfg.version) upcoming[b.from_step] = std::move(b);
    batch.clear();
    catch_up();
  }

  /// Pulls the keys of the current version from the shards that own them, then asks for work.
  void start() {
    for (std::uint32_t k = 0; k < ranges.size(); ++k) {
      if (ranges[k].empty()) continue;
      auto m = to(ctx->shard_ep(k), msg_kind::pull);
      m.hdr.ranges = ranges[k];
      ctx->net->send(std::move(m));
    }
    ctx->net->send(to(ctx->master, msg_kind::chunk_request));
  }

  /// ssp:S: takes the values of one params message of any version (see `versions`).
  void on_stale_params(const wire_message& m) {
    // asp: after the first whole version, every answer is the newest there is (a shard's
    // version number counts its steps applied without a gap, so it may repeat): taken as it is,
    // its keys checked on their own. Before it, each shard answers the first pull with the
    // version it is at, which differs from shard to shard: the keys count toward `first`.
    const bool whole_had = asp && newest >= first;
    if (whole_had && answers_due > 0) --answers_due;
    const std::int64_t version = asp ? first : m.hdr.step;
    std::optional<ps::key_coverage> alone;
    if (whole_had) alone.emplace(ctx->model.num_params());
    auto& keys =
        whole_had ? *alone : versions.try_emplace(version, ctx->model.num_params()).first->second;
    if (auto ok = accept_params(m, keys); !ok) {
      log::warn("worker {}: malformed parameters from shard {}: {}", rank, m.hdr.src.id,
                ok.error().message);
      return;
    }
    for (std::size_t i = 0; i < m.frames.size(); ++i)
      if (const auto& r = m.hdr.ranges[i]; r.size() > 0)
        be->upload(params + r.begin, m.frames[i].as<float>().data(), r.size());
    take_stats(m);
    if (whole_had || !keys.complete()) return;
    newest = std::max(newest, version);
    versions.erase(versions.begin(), versions.upper_bound(version));
  }

  /// Whether the parameters at hand may compute the current step.
  bool params_ready() const {
    if (asp) return newest >= first && answers_due == 0;
    if (staleness == 0) return received->complete();
    return newest >= std::max(first, step - staleness);
  }

  /// Takes the values of one params message (a whole shard's ranges or one piece of them).
  void on_params(const wire_message& m) {
    if (staleness > 0 || asp) return on_stale_params(m);
    if (m.hdr.step != step) {
      log::info("worker {}: parameters of version {} while at step {}", rank, m.hdr.step, step);
      return;
    }
    auto ok = accept_params(m, *received);
    if (!ok) {
      log::warn("worker {}: malformed parameters from shard {}: {}", rank, m.hdr.src.id,
                ok.error().message);
      return;
    }
    for (std::size_t i = 0; i < m.frames.size(); ++i) {
      const auto& r = m.hdr.ranges[i];
      const auto& f = m.frames[i];
      if (r.size() == 0) continue;
      if (hold(r, f)) continue;
      be->upload(params + r.begin, f.as<float>().data(), r.size());
    }
    take_stats(m);
  }

  /// adascale: a params message's sums, by the shard that sent them (a backup that took over
  /// counts as its shard: its sums replace the lost primary's, not add to them).
  void take_stats(const wire_message& m) {
    if (m.hdr.grad_stats.empty()) return;
    for (std::uint32_t k = 0; k < ranges.size(); ++k)
      if (ctx->shard_ep(k) == m.hdr.src) return stats.take(k, m.hdr.grad_stats);
  }

  /// True when the piece `f` of keys `r` is a view of the buffer the step can compute from
  /// directly (see `whole`): it is then held, not copied.
  bool hold(const ps::key_range& r, const frame& f) {
    if (!host_backend || copying) return false;
    // Where key 0 would be if the piece is a view of a whole vector (compared, not read, until
    // the held pieces cover every key).
    const auto* base = reinterpret_cast<const std::byte*>(reinterpret_cast<std::uintptr_t>(f.data) -
                                                          r.begin * sizeof(float));
    if (held.empty()) {
      whole = frame{f.owner, base, ctx->model.num_params() * sizeof(float)};
    } else if (f.owner != whole.owner || base != whole.data) {
      for (const auto& h : held)
        be->upload(params + h.begin, whole.as<float>().data() + h.begin, h.size());
      held.clear();
      whole = frame{};
      copying = true;
      return false;
    }
    held.push_back(r);
    return true;
  }

  /// Pushes to shard k, as worker `as_rank`, `samples` samples' gradient `grad` (none when
  /// samples == 0). A push as another rank is a host's sum pushed for its leader (see
  /// worker::host_reducer): the shard answers the leader.
  void push_to(std::uint32_t k, std::uint32_t as_rank, std::uint64_t samples,
               const std::shared_ptr<const float_buffer>& grad) {
    if (ranges[k].empty()) return;
    auto m = to(ctx->shard_ep(k), msg_kind::push);
    m.hdr.src = ctx->worker_ep(as_rank);
    m.hdr.rank = as_rank;
    m.hdr.samples = samples;
    m.hdr.flags = push_flags;
    m.hdr.grad_stats = step_totals;
    if (samples > 0) {
      std::shared_ptr<const void> owner = grad;
      m.hdr.ranges = ranges[k];
      for (const auto& r : ranges[k])
        m.frames.push_back(frame::of(owner, grad->data() + r.begin, r.size()));
    }
    if (ctx->spec.replicas > 1) last_pushes.emplace_back(k, m);
    ctx->net->send(std::move(m));
  }

  /// Shard k's backup took over (docs/design.md "Shard replicas"): this process sends to it
  /// from now on. What the lost primary left unanswered goes to it again: this worker's pushes
  /// of its last step (the backup takes those it lacks, flag::resent) and a pull of the keys
  /// of shard k it still lacks at its version (some of the answer may have come before).
  void on_take_over(const wire_message& m) {
    const std::uint32_t k = m.hdr.rank;
    const endpoint head{m.hdr.epoch, m.hdr.chunk_id};
    ctx->added->take_over(k, head);
    if (k >= ranges.size() || ranges[k].empty() || received->complete()) return;
    for (const auto& [shard, p] : last_pushes)
      if (shard == k) ctx->net->send(actors::copy_to(p, head, flag::resent));
    auto pull = to(head, msg_kind::pull);
    pull.hdr.flags = flag::resent;
    for (const auto& r : ranges[k]) received->missing(r, pull.hdr.ranges);
    if (!pull.hdr.ranges.empty()) ctx->net->send(std::move(pull));
  }

  /// Host reduction (in host memory, or on the devices: worker/device_reducer.hpp): deposits
  /// this worker's gradient; pushes an empty contribution unless this worker leads the step's
  /// local members, and the host's sum for the leader when this deposit completed them. False
  /// on a protocol error (reported; the step cannot go on).
  bool push_reduced(std::uint64_t samples, std::shared_ptr<const float_buffer> grad) {
    // The step's members placed on this host (where the job put each rank, also ranks added
    // while it runs), whether or not their actors have started yet.
    local_members.clear();
    for (auto m : cfg.members)
      if (ctx->worker_ep(m).host == self_ep.host) local_members.push_back(m);
    // On a device backend the gradient is still in `this->grad` (device memory): summed there.
    auto out =
        ctx->device_reducer
            ? ctx->device_reducer->deposit(step, local_members, rank, samples, *be, this->grad)
            : ctx->reducer->deposit(step, local_members, rank, samples, std::move(grad));
    if (!out) {
      log::warn("worker {}: {}", rank, out.error().message);
      return false;
    }
    for (std::uint32_t k = 0; k < ranges.size(); ++k) {
      if (out->leader != rank) push_to(k, rank, 0, nullptr);
      if (out->complete) push_to(k, out->leader, out->sum ? out->samples : 0, out->sum);
    }
    return true;
  }

  /// Function mode: the step's parameters `w` and its rows, computed by an invocation.
  result<worker::invocation_result> invoke(const float* w, std::span<const std::uint32_t> indices,
                                           std::span<const std::uint32_t> sizes,
                                           std::uint64_t noise) {
    const auto& train = ctx->data->train;
    const std::size_t n = ctx->model.num_params();
    worker::invocation_task t;
    t.params.resize(n);
    if (host_backend)
      std::copy(w, w + n, t.params.begin());
    else
      be->download(t.params.data(), w, n);
    t.x.reserve(indices.size() * train.features);
    for (auto i : indices) {
      const float* row = train.x.data() + std::size_t(i) * train.features;
      t.x.insert(t.x.end(), row, row + train.features);
      t.y.push_back(train.y[i]);
    }
    if (sizes.empty())
      t.sizes = {std::uint32_t(indices.size())};
    else
      t.sizes.assign(sizes.begin(), sizes.end());
    t.noise = noise;
    return functions->run(t);
  }

  /// Whether a grant's local steps cut its indices exactly, each at most a batch.
  bool valid_local_steps(std::span<const std::uint32_t> indices,
                         std::span<const std::uint32_t> sizes) const {
    std::uint64_t sum = 0;
    for (auto n : sizes) {
      if (n > std::uint32_t(ctx->spec.batch_size)) return false;
      sum += n;
    }
    return sum == indices.size();
  }

  /// Runs the step when its chunk and every shard's parameters are here.
  void try_step() {
    // asp: the master numbers the steps across the job's workers; this worker's next step is
    // whichever it was granted.
    if (asp && !grants.empty() && grants.begin()->first > step) {
      step = grants.begin()->first;
      catch_up();
    }
    auto it = grants.find(step);
    if (asp && it != grants.end() && newest >= first && answers_due > 0 &&
        wait_bounded_at != step) {
      wait_bounded_at = step;
      bound_wait(step);
    }
    if (it == grants.end() || !params_ready()) return;
    const wire_message& g = it->second;
    std::span<const std::uint32_t> indices, sizes;
    if (!(g.hdr.flags & flag::no_chunk) && !g.frames.empty()) {
      indices = g.frames.front().as<std::uint32_t>();
      if (g.frames.size() > 1) sizes = g.frames[1].as<std::uint32_t>();
    }
    const std::uint32_t whole_grant[] = {std::uint32_t(indices.size())};
    if (averager && sizes.empty() && !indices.empty()) sizes = whole_grant;
    if (!sizes.empty() && !valid_local_steps(indices, sizes)) {
      log::warn("worker {}: malformed grant of step {} (chunk sizes)", rank, step);
      return;
    }

    // Host memory for the gradient, except where it is summed on the devices and never
    // downloaded by this worker (device reduction runs only on device backends).
    std::shared_ptr<float_buffer> buf;
    if (!ctx->device_reducer) buf = pinned ? pinned->acquire() : grads->acquire();
    copy_to = buf ? buf->data() : nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    float* out = host_backend ? buf->data() : grad;
    // Every key arrived exactly once (key_coverage): the held pieces alone cover the vector.
    const float* w = held.empty() ? params : whole.as<float>().data();
    double loss = 0;
    const std::uint64_t noise = worker::noise_key(rank, step);
    if (functions && !indices.empty()) {
      auto r = invoke(w, indices, sizes, noise);
      if (!r) return fail(std::move(r.error()));
      loss = r->loss_sum;
      if (host_backend)
        std::copy(r->out.begin(), r->out.end(), out);
      else
        be->upload(out, r->out.data(), r->out.size());
    } else if (averager && !indices.empty()) {
      loss = averager->run(*runner, w, ctx->data->train, indices, sizes, out, 1, noise).loss_sum;
    } else {
      loss = runner->forward_backward(w, ctx->data->train, indices, out, noise);
    }
    // The optimizer's clip_norm (not under averaging, whose pushes are model deltas): this
    // worker's mean gradient, so the samples-weighted mean the shards apply is within it too.
    if (const float clip = ctx->spec.optimizer.clip_norm; clip > 0 && !averager && !indices.empty())
      worker::clip_gradient(*be, out, ctx->model.num_params(), indices.size(), clip,
                            ctx->model.statistic_ranges());
    whole = frame{};  // let the shard update in place
    held.clear();
    copying = false;
    if (pinned)
      be->finish_downloads();  // started layer by layer during the backward pass
    else if (!host_backend && !ctx->device_reducer)
      be->download(buf->data(), grad, buf->size());
    auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    if (ctx->slowdown)  // a straggler (test hook): the step takes `factor` times as long
      if (const double factor = ctx->slowdown(rank, step); factor > 1) {
        std::this_thread::sleep_for(
            std::chrono::microseconds(std::int64_t(double(us) * (factor - 1))));
        us = std::int64_t(double(us) * factor);
      }

    // A shard of this process that the pushes wake runs on this thread once the step's
    // messages are out (this thread only waits for its answer then): no scheduler thread is
    // woken for it, and its reply finds this one awake.
    inline_scope scope;
    push_flags = g.hdr.flags & (flag::snapshot | flag::with_state);
    last_pushes.clear();
    // adascale: the totals of the version this step computed from (the step's own, or under ssp
    // the newest whole one), once for its pushes and its report.
    step_totals.clear();
    const std::int64_t from = staleness > 0 ? newest : step;
    if (auto totals = stats.total(from)) step_totals = totals->to_list();
    stats.forget_before(from);
    if (ctx->reducer || ctx->device_reducer) {
      if (!push_reduced(indices.size(), std::move(buf))) return;
    } else {
      for (std::uint32_t k = 0; k < ranges.size(); ++k) {
        push_to(k, rank, indices.size(), buf);
        if (asp && !ranges[k].empty()) ++answers_due;
      }
    }
    auto report = to(ctx->master, msg_kind::step_report);
    report.hdr.samples = indices.size();
    report.hdr.loss = loss;
    report.hdr.epoch = g.hdr.epoch;
    report.hdr.chunk_id = g.hdr.chunk_id;
    report.hdr.flags = g.hdr.flags;
    report.hdr.compute_us = std::uint64_t(us);
    report.hdr.grad_stats = step_totals;  // adascale: for the master's record of the step
    if (functions) {                      // its invocations so far (the master sums the ranks')
      const auto& c = functions->counts();
      auto v = std::make_shared<std::vector<std::uint64_t>>(
          std::vector<std::uint64_t>{c.started, c.completed, c.timed_out, c.out_of_memory, c.failed,
                                     c.tasks, c.peak_memory_bytes});
      report.frames.push_back(frame::of(v, v->data(), v->size()));
    }
    ctx->net->send(std::move(report));

    grants.erase(it);
    ++step;
    moved_keys.clear();
    moved_from.clear();
    received->clear();
    catch_up();
    ctx->net->send(to(ctx->master, msg_kind::chunk_request));
  }
};

caf::behavior worker_actor(caf::stateful_actor<worker_state>* self,
                           std::shared_ptr<const job_context> ctx, std::uint32_t rank,
                           std::shared_ptr<kernels::backend> be, ps::job_config cfg,
                           std::int64_t first_step) {
  auto& st = self->state;
  st.ctx = ctx;
  st.rank = rank;
  st.self_ep = ctx->worker_ep(rank);
  st.step = first_step;
  st.first = first_step;
  const auto mode = ps::make_consistency(ctx->spec.consistency);
  st.asp = mode->any_version();
  st.staleness = st.asp ? std::numeric_limits<std::int32_t>::max()  // params of any version
                        : mode->staleness();
  st.be = std::move(be);
  st.host_backend = st.be->name() == "cpu";
  const std::size_t n = ctx->model.num_params();
  st.params = st.be->alloc(n);
  if (!st.host_backend) st.grad = st.be->alloc(n);
  // A fixed global batch: this worker's share of a step may grow to all of it as workers
  // leave; the runner grows its buffers then (sized for the whole batch up front, W workers
  // held W x the global batch, which grows with W: issue 37's workers: 1000).
  const int max_batch = ctx->spec.batch_size;
  st.runner = std::make_unique<worker::network_runner>(ctx->model, *st.be, max_batch);
  kernels::sgd_options local = ctx->spec.optimizer.sgd;
  if (ctx->spec.optimizer.kind == ps::optimizer_kind::sgd) local.momentum = 0;
  const bool averaging = mode->pushes_deltas();
  if (averaging) st.averager = std::make_unique<worker::local_averaging>(*st.be, n, local);
  st.fail = [self](coach::error e) {
    log::warn("worker {}: {}", self->state.rank, e.message);
    self->state.ctx->net->unbind(self->state.self_ep);
    self->quit(caf::make_error(caf::sec::runtime_error, e.message));
  };
  if (const auto& fn = ctx->spec.function) {
    auto program = worker::find_invocation_program();
    if (!program) {
      st.fail(program.error());
      return {};
    }
    worker::invocation_setup setup;
    setup.model = ctx->spec.model;
    setup.shape = ctx->model.input_shape();
    setup.inputs = ctx->model.inputs();
    setup.classes = ctx->model.classes();
    // The largest share a step may give this worker (the invocation refuses larger ones).
    setup.max_batch = ctx->spec.fixed_global_batch()
                          ? std::max(ctx->spec.batch_size, ctx->spec.global_batch)
                          : ctx->spec.batch_size;
    setup.averaging = averaging;
    setup.local = local;
    const worker::process_limits limits{
        std::chrono::milliseconds(std::int64_t(fn->deadline_s * 1000.0)), fn->memory_mb << 20};
    st.functions = std::make_unique<worker::function_runner>(*program, std::move(setup), limits,
                                                             fn->chunks_per_invocation);
  }
  st.grads = std::make_unique<buffer_pool>(n);
  // COACH_COPY_OVERLAP=0 turns the overlap off (to measure what it gains: docs/cuda.md).
  const char* overlap = std::getenv("COACH_COPY_OVERLAP");
  if (!st.host_backend && !st.functions && !averaging && !ctx->device_reducer &&
      ctx->spec.optimizer.clip_norm <= 0 && !(overlap && std::string_view(overlap) == "0")) {
    st.pinned = std::make_shared<worker::pinned_pool>(st.be, n);
    st.runner->on_gradient_ready([self](std::size_t offset, std::size_t count) {
      auto& s = self->state;
      s.be->download_async(s.copy_to + offset, s.grad + offset, count);
    });
  }
  st.received.emplace(n);
  st.use(std::move(cfg));
  // asp: a shard whose ranges move while a push to it is out may answer it late or not at all
  // (one left owning nothing sends no values): the wait for a push's answers ends after
  // asp_answer_wait, and the step computes from what is here, as asp allows.
  st.bound_wait = [self](std::int64_t step) {
    self->delayed_send(self, asp_answer_wait, answers_late_atom::value, step);
  };
  return {
      [self](start_atom) { self->state.start(); },
      [self](answers_late_atom, std::int64_t step) {
        auto& s = self->state;
        if (s.step != step || s.answers_due == 0) return;
        s.answers_due = 0;
        s.try_step();
      },
      [self](wire_message& m) {
        auto& s = self->state;
        switch (m.hdr.kind) {
          case msg_kind::chunk_grant:
            if (m.hdr.flags & flag::finished) {
              s.ctx->net->unbind(s.self_ep);
              self->quit();
              return;
            }
            s.grants.emplace(m.hdr.step, std::move(m));
            break;
          case msg_kind::params:
            s.on_params(m);
            break;
          case msg_kind::configure:
            s.on_configure(m);
            break;
          case msg_kind::moved:
            s.on_moved(m);
            break;
          case msg_kind::take_over:
            s.on_take_over(m);
            break;
          default:
            log::warn("worker {}: unexpected message {}", s.rank, to_string(m.hdr.kind));
            return;
        }
        s.try_step();
      },
  };
}

}  // namespace

caf::actor spawn_worker(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                        std::uint32_t rank, std::shared_ptr<kernels::backend> be,
                        std::int64_t first_step) {
  auto ep = ctx->worker_ep(rank);
  auto net = ctx->net;
  auto cfg = ctx->initial_config();
  auto a = sys.spawn<caf::detached>(worker_actor, std::move(ctx), rank, std::move(be),
                                    std::move(cfg), first_step);
  bind_while_alive(net, ep, a);
  caf::anon_send(a, start_atom::value);
  return a;
}

caf::actor spawn_added_worker(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                              std::uint32_t rank, std::shared_ptr<kernels::backend> be,
                              const ps::job_config& c, std::int64_t first_step) {
  auto ep = ctx->worker_ep(rank);
  auto net = ctx->net;
  auto a =
      sys.spawn<caf::detached>(worker_actor, std::move(ctx), rank, std::move(be), c, first_step);
  bind_while_alive(net, ep, a);
  caf::anon_send(a, start_atom::value);
  return a;
}

}  // namespace coach::actors
