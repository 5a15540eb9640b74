#include "worker/worker_server.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <thread>

#include "common/log.hpp"
#include "wire/elastic_messages.hpp"
#include "worker/gradient_clip.hpp"

namespace coach::worker {

using wire::endpoint;
namespace flag = wire::flag;
using wire::frame;
using wire::msg_kind;
using wire::wire_message;

worker_server::worker_server(worker_server_setup setup, worker_server_ports ports,
                             std::shared_ptr<kernels::backend> be, ps::job_config cfg,
                             std::int64_t first_step)
    : setup_(std::move(setup)),
      ports_(std::move(ports)),
      n_(setup_.model->num_params()),
      be_(std::move(be)),
      step_(first_step),
      first_(first_step) {
  const auto& mode = *setup_.consistency;
  asp_ = mode.any_version();
  staleness_ = asp_ ? std::numeric_limits<std::int32_t>::max()  // params of any version
                    : mode.staleness();
  host_backend_ = be_->name() == "cpu";
  params_ = be_->alloc(n_);
  if (!host_backend_) grad_ = be_->alloc(n_);
  // A fixed global batch: this worker's share of a step may grow to all of it as workers
  // leave; the runner grows its buffers then (sized for the whole batch up front, W workers
  // held W x the global batch, which grows with W: issue 37's workers: 1000).
  // A script's model runs in the script's process: no layers here.
  if (!setup_.external)
    runner_ = std::make_unique<network_runner>(*setup_.model, *be_, setup_.batch_size);
  if (mode.pushes_deltas()) averager_ = std::make_unique<local_averaging>(*be_, n_, setup_.local);
  grads_ = std::make_unique<buffer_pool>(n_);
  if (!host_backend_ && !setup_.functions && !averager_ && !setup_.device_reducer &&
      setup_.clip_norm <= 0 && setup_.copy_overlap) {
    pinned_ = std::make_shared<pinned_pool>(be_, n_);
    runner_->on_gradient_ready([this](std::size_t offset, std::size_t count) {
      be_->download_async(copy_to_ + offset, grad_ + offset, count);
    });
  }
  received_.emplace(n_);
  if (!setup_.model->tables().empty()) {
    std::vector<std::uint32_t> dims;
    for (const auto& t : setup_.model->tables()) dims.push_back(t.config.dim);
    rows_ = std::make_unique<row_puller>(std::move(dims), n_);
  }
  use(std::move(cfg));
}

worker_server::~worker_server() {
  if (be_) {
    be_->free(params_);
    be_->free(grad_);
  }
  scripts_.reset();  // its process's steps() end: the script runs on to its end
  if (setup_.devices) setup_.devices->release(setup_.job, setup_.rank);  // for a later worker
}

wire_message worker_server::to(const endpoint& dst, msg_kind kind) const {
  wire_message m;
  m.hdr.src = setup_.self;
  m.hdr.dst = dst;
  m.hdr.kind = kind;
  m.hdr.job = setup_.job;
  m.hdr.map_version = cfg_.version;
  m.hdr.rank = setup_.rank;
  m.hdr.step = step_;
  return m;
}

void worker_server::use(ps::job_config c) {
  // A new configuration may have moved or removed a shard pushed to (one that owns nothing
  // sends no answer): what is due is not waited for across it.
  answers_due_ = 0;
  cfg_ = std::move(c);
  ranges_.clear();
  for (std::uint32_t k = 0; k < cfg_.map.num_shards(); ++k)
    ranges_.push_back(cfg_.map.ranges_of(k));
}

/// Takes the configurations that govern the current step.
void worker_server::catch_up() {
  while (!upcoming_.empty() && upcoming_.begin()->first <= step_) {
    if (upcoming_.begin()->second.version > cfg_.version) use(std::move(upcoming_.begin()->second));
    upcoming_.erase(upcoming_.begin());
  }
  pull_moved();
}

void worker_server::start() {
  for (std::uint32_t k = 0; k < ranges_.size(); ++k) {
    if (ranges_[k].empty()) continue;
    auto m = to(setup_.shard_ep(k), msg_kind::pull);
    m.hdr.ranges = ranges_[k];
    ports_.send(std::move(m));
  }
  ports_.send(to(setup_.master, msg_kind::chunk_request));
}

bool worker_server::on_message(wire_message& m) {
  switch (m.hdr.kind) {
    case msg_kind::chunk_grant:
      if (m.hdr.flags & flag::finished) return false;
      grants_.emplace(m.hdr.step, std::move(m));
      break;
    case msg_kind::params:
      on_params(m);
      break;
    case msg_kind::configure:
      on_configure(m);
      break;
    case msg_kind::moved:
      on_moved(m);
      break;
    case msg_kind::take_over:
      on_take_over(m);
      break;
    case msg_kind::rows:
      on_rows(m);
      break;
    default:
      log::warn("worker {}: unexpected message {}", setup_.rank, to_string(m.hdr.kind));
      return true;
  }
  try_step();
  return true;
}

void worker_server::answers_late(std::int64_t step) {
  if (step_ != step || answers_due_ == 0) return;
  answers_due_ = 0;
  try_step();
}

/// A shard answered a pull of the current version with keys it no longer owns: they moved in
/// a configuration this worker may not have yet (docs/design.md "Elastic jobs").
void worker_server::on_moved(const wire_message& m) {
  // A version this worker is done with (asp: the shard answers the first pull with its
  // current version, whatever was asked).
  if (m.hdr.step != step_ && !(asp_ && newest_ < first_)) return;
  moved_keys_.insert(moved_keys_.end(), m.hdr.ranges.begin(), m.hdr.ranges.end());
  moved_version_ = std::max(moved_version_, m.hdr.map_version);
  moved_from_.push_back(m.hdr.src);
  pull_moved();
}

/// Pulls the moved keys from their owners, once the configuration that moved them is here.
void worker_server::pull_moved() {
  if (moved_keys_.empty() || cfg_.version < moved_version_) return;
  for (std::uint32_t k = 0; k < ranges_.size(); ++k) {
    auto m = to(setup_.shard_ep(k), msg_kind::pull);
    const bool disowned =
        std::find(moved_from_.begin(), moved_from_.end(), m.hdr.dst) != moved_from_.end();
    for (const auto& own : ranges_[k])
      for (const auto& r : moved_keys_)
        if (std::max(own.begin, r.begin) < std::min(own.end, r.end))
          m.hdr.ranges.push_back({std::max(own.begin, r.begin), std::min(own.end, r.end)});
    if (m.hdr.ranges.empty()) continue;
    if (disowned) {  // the configurations disagree: asking again would go round in circles
      log::info("worker {}: shard {} disowns keys configuration {} gives it", setup_.rank, k,
                cfg_.version);
      continue;
    }
    ports_.send(std::move(m));
  }
  moved_keys_.clear();
}

void worker_server::on_configure(const wire_message& m) {
  auto c = wire::read_configure(m, n_, setup_.slice_size);
  if (!c) {
    log::warn("worker {}: {}", setup_.rank, c.error().message);
    return;
  }
  // A re-issue (workers died) is taken whole: one of its configurations alone could give
  // this worker's next step the shard map of an earlier one.
  batch_.push_back(std::move(*c));
  if (m.hdr.flags & flag::more_configs) return;
  for (auto& b : batch_)
    if (b.version > cfg_.version) upcoming_[b.from_step] = std::move(b);
  batch_.clear();
  catch_up();
}

/// ssp:S and asp: takes the values of one params message of any version (see `versions_`).
void worker_server::on_stale_params(const wire_message& m) {
  // asp: after the first whole version, every answer is the newest there is (a shard's
  // version number counts its steps applied without a gap, so it may repeat): taken as it is,
  // its keys checked on their own. Before it, each shard answers the first pull with the
  // version it is at, which differs from shard to shard: the keys count toward `first_`.
  const bool whole_had = asp_ && newest_ >= first_;
  if (whole_had && answers_due_ > 0) --answers_due_;
  const std::int64_t version = asp_ ? first_ : m.hdr.step;
  std::optional<ps::key_coverage> alone;
  if (whole_had) alone.emplace(n_);
  auto& keys = whole_had ? *alone : versions_.try_emplace(version, n_).first->second;
  if (auto ok = wire::accept_params(m, keys); !ok) {
    log::warn("worker {}: malformed parameters from shard {}: {}", setup_.rank, m.hdr.src.id,
              ok.error().message);
    return;
  }
  for (std::size_t i = 0; i < m.frames.size(); ++i)
    if (const auto& r = m.hdr.ranges[i]; r.size() > 0)
      be_->upload(params_ + r.begin, m.frames[i].as<float>().data(), r.size());
  take_stats(m);
  if (whole_had || !keys.complete()) return;
  newest_ = std::max(newest_, version);
  versions_.erase(versions_.begin(), versions_.upper_bound(version));
}

/// Whether the parameters at hand may compute the current step.
bool worker_server::params_ready() const {
  if (asp_) return newest_ >= first_ && answers_due_ == 0;
  if (staleness_ == 0) return received_->complete();
  return newest_ >= std::max(first_, step_ - staleness_);
}

/// Takes the values of one params message (a whole shard's ranges or one piece of them).
void worker_server::on_params(const wire_message& m) {
  if (staleness_ > 0 || asp_) return on_stale_params(m);
  if (m.hdr.step != step_) {
    log::info("worker {}: parameters of version {} while at step {}", setup_.rank, m.hdr.step,
              step_);
    return;
  }
  auto ok = wire::accept_params(m, *received_);
  if (!ok) {
    log::warn("worker {}: malformed parameters from shard {}: {}", setup_.rank, m.hdr.src.id,
              ok.error().message);
    return;
  }
  for (std::size_t i = 0; i < m.frames.size(); ++i) {
    const auto& r = m.hdr.ranges[i];
    const auto& f = m.frames[i];
    if (r.size() == 0) continue;
    if (hold(r, f)) continue;
    be_->upload(params_ + r.begin, f.as<float>().data(), r.size());
  }
  take_stats(m);
}

/// adascale: a params message's sums, by the shard that sent them (a backup that took over
/// counts as its shard: its sums replace the lost primary's, not add to them).
void worker_server::take_stats(const wire_message& m) {
  if (m.hdr.grad_stats.empty()) return;
  for (std::uint32_t k = 0; k < ranges_.size(); ++k)
    if (setup_.shard_ep(k) == m.hdr.src) return stats_.take(k, m.hdr.grad_stats);
}

/// True when the piece `f` of keys `r` is a view of the buffer the step can compute from
/// directly (see `whole_`): it is then held, not copied.
bool worker_server::hold(const ps::key_range& r, const frame& f) {
  if (!host_backend_ || copying_) return false;
  // Where key 0 would be if the piece is a view of a whole vector (compared, not read, until
  // the held pieces cover every key).
  const auto* base = reinterpret_cast<const std::byte*>(reinterpret_cast<std::uintptr_t>(f.data) -
                                                        r.begin * sizeof(float));
  if (held_.empty()) {
    whole_ = frame{f.owner, base, n_ * sizeof(float)};
  } else if (f.owner != whole_.owner || base != whole_.data) {
    for (const auto& h : held_)
      be_->upload(params_ + h.begin, whole_.as<float>().data() + h.begin, h.size());
    held_.clear();
    whole_ = frame{};
    copying_ = true;
    return false;
  }
  held_.push_back(r);
  return true;
}

/// Pushes to shard k, as worker `as_rank`, `samples` samples' gradient `grad` (none when
/// samples == 0). A push as another rank is a host's sum pushed for its leader (see
/// host_reducer): the shard answers the leader.
void worker_server::push_to(std::uint32_t k, std::uint32_t as_rank, std::uint64_t samples,
                            const std::shared_ptr<const float_buffer>& grad) {
  if (ranges_[k].empty()) return;
  auto m = to(setup_.shard_ep(k), msg_kind::push);
  m.hdr.src = setup_.worker_ep(as_rank);
  m.hdr.rank = as_rank;
  m.hdr.samples = samples;
  m.hdr.flags = push_flags_;
  m.hdr.grad_stats = step_totals_;
  if (samples > 0) {
    std::shared_ptr<const void> owner = grad;
    m.hdr.ranges = ranges_[k];
    for (const auto& r : ranges_[k])
      m.frames.push_back(frame::of(owner, grad->data() + r.begin, r.size()));
    if (rows_) add_push_rows(m, k);
  }
  if (setup_.replicas > 1) last_pushes_.emplace_back(k, m);
  ports_.send(std::move(m));
}

/// Shard k's backup took over (docs/design.md "Shard replicas"): this worker sends to it from
/// now on. What the lost primary left unanswered goes to it again: this worker's pushes of its
/// last step (the backup takes those it lacks, flag::resent) and a pull of the keys of shard k
/// it still lacks at its version (some of the answer may have come before).
void worker_server::on_take_over(const wire_message& m) {
  const std::uint32_t k = m.hdr.rank;
  const endpoint head{m.hdr.epoch, m.hdr.chunk_id};
  if (ports_.took_over) ports_.took_over(k, head);
  // The step's rows asked of the lost primary and not answered: asked again of its backup
  // (rows_ready sends them, to shard_ep(k), now the backup).
  if (rows_) rows_->ask_again(k);
  if (k >= ranges_.size() || ranges_[k].empty() || received_->complete()) return;
  for (const auto& [shard, p] : last_pushes_)
    if (shard == k) ports_.send(wire::copy_to(p, head, flag::resent));
  auto pull = to(head, msg_kind::pull);
  pull.hdr.flags = flag::resent;
  for (const auto& r : ranges_[k]) received_->missing(r, pull.hdr.ranges);
  if (!pull.hdr.ranges.empty()) ports_.send(std::move(pull));
}

/// Host reduction (in host memory, or on the devices: worker/device_reducer.hpp): deposits
/// this worker's gradient; pushes an empty contribution unless this worker leads the step's
/// local members, and the host's sum for the leader when this deposit completed them. False
/// on a protocol error (reported; the step cannot go on).
bool worker_server::push_reduced(std::uint64_t samples, std::shared_ptr<const float_buffer> grad) {
  // The step's members placed on this host (where the job put each rank, also ranks added
  // while it runs), whether or not their actors have started yet.
  local_members_.clear();
  for (auto m : cfg_.members)
    if (setup_.worker_ep(m).host == setup_.self.host) local_members_.push_back(m);
  // On a device backend the gradient is still in `grad_` (device memory): summed there.
  const auto rank = setup_.rank;
  auto out = setup_.device_reducer
                 ? setup_.device_reducer->deposit(step_, local_members_, rank, samples, *be_, grad_)
                 : setup_.reducer->deposit(step_, local_members_, rank, samples, std::move(grad));
  if (!out) {
    log::warn("worker {}: {}", rank, out.error().message);
    return false;
  }
  for (std::uint32_t k = 0; k < ranges_.size(); ++k) {
    if (out->leader != rank) push_to(k, rank, 0, nullptr);
    if (out->complete) push_to(k, out->leader, out->sum ? out->samples : 0, out->sum);
  }
  return true;
}

/// Function mode: the step's parameters `w` and its rows, computed by an invocation.
result<invocation_result> worker_server::invoke(const float* w,
                                                std::span<const std::uint32_t> indices,
                                                std::span<const std::uint32_t> sizes,
                                                std::uint64_t noise) {
  const auto& train = setup_.data->train;
  invocation_task t;
  t.params.resize(n_);
  if (host_backend_)
    std::copy(w, w + n_, t.params.begin());
  else
    be_->download(t.params.data(), w, n_);
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
  if (rows_) {
    // The step's lookups and its pulled rows: all the child holds of the tables.
    t.tables.resize(lookups_.size());
    for (std::uint32_t k = 0; k < lookups_.size(); ++k) {
      t.tables[k].offsets = lookups_[k].offsets;
      t.tables[k].local = lookups_[k].rows.local;
      const auto values = rows_->values(k);
      t.tables[k].values.assign(values.begin(), values.end());
    }
  }
  return setup_.functions->run(t);
}

result<double> worker_server::compute_external(const float* w,
                                               std::span<const std::uint32_t> indices, float* out) {
  if (indices.empty()) {  // nothing granted: a zero gradient (and no statistics)
    std::fill_n(out, n_, 0.0f);
    return 0.0;
  }
  if (!scripts_)
    scripts_ = std::make_unique<script_invocations>(
        setup_.external, coach::format("worker {}", setup_.rank), setup_.script_limits);
  std::optional<external_step_rows> rows;
  if (rows_) {  // the script's tables: the step's rows in, their gradients out
    rows.emplace();
    for (std::uint32_t t = 0; t < setup_.model->tables().size(); ++t)
      rows->values.push_back(rows_->values(t));
    rows->grads = &row_grads_;
  }
  auto r = scripts_->step(step_, setup_.rank, w, indices, out, rows ? &*rows : nullptr);
  if (!r) return std::unexpected(r.error());
  return r->loss_sum;
}

/// Whether a grant's local steps cut its indices exactly, each at most a batch.
bool worker_server::valid_local_steps(std::span<const std::uint32_t> indices,
                                      std::span<const std::uint32_t> sizes) const {
  std::uint64_t sum = 0;
  for (auto n : sizes) {
    if (n > std::uint32_t(setup_.batch_size)) return false;
    sum += n;
  }
  return sum == indices.size();
}

/// The grant's samples (`samples` of them) computed from `w` into `out` (the gradient, or
/// averaging's delta), their loss summed into `loss`. False when the grant is malformed or the step
/// failed (reported).
bool worker_server::compute(const wire_message& g, const float* w, float* out, double& loss,
                            std::size_t& samples) {
  std::span<const std::uint32_t> indices, sizes;
  if (!(g.hdr.flags & flag::no_chunk) && !g.frames.empty()) {
    indices = g.frames.front().as<std::uint32_t>();
    if (g.frames.size() > 1) sizes = g.frames[1].as<std::uint32_t>();
  }
  const std::uint32_t whole_grant[] = {std::uint32_t(indices.size())};
  if (averager_ && sizes.empty() && !indices.empty()) sizes = whole_grant;
  if (!sizes.empty() && !valid_local_steps(indices, sizes)) {
    log::warn("worker {}: malformed grant of step {} (chunk sizes)", setup_.rank, step_);
    return false;
  }
  samples = indices.size();
  const std::uint64_t noise = noise_key(setup_.rank, step_);
  const auto& train = setup_.data->train;
  if (setup_.external) {
    auto r = compute_external(w, indices, out);
    if (!r) {
      ports_.fail(std::move(r.error()));
      return false;
    }
    loss = *r;
  } else if (setup_.functions && !indices.empty()) {
    auto r = invoke(w, indices, sizes, noise);
    if (!r) {
      ports_.fail(std::move(r.error()));
      return false;
    }
    loss = r->loss_sum;
    if (rows_) {
      bool whole = r->row_grads.size() == lookups_.size();
      for (std::size_t k = 0; whole && k < lookups_.size(); ++k)
        whole = r->row_grads[k].size() == rows_->values(std::uint32_t(k)).size();
      if (!whole) {
        ports_.fail(error{errc::protocol_error,
                          coach::format("worker {}: an invocation answered step {} without the "
                                        "row gradients of its {} tables",
                                        setup_.rank, step_, lookups_.size())});
        return false;
      }
      row_grads_ = std::move(r->row_grads);
    }
    if (host_backend_)
      std::copy(r->out.begin(), r->out.end(), out);
    else
      be_->upload(out, r->out.data(), r->out.size());
  } else if (averager_ && !indices.empty()) {
    loss = averager_->run(*runner_, w, train, indices, sizes, out, 1, noise).loss_sum;
  } else if (rows_) {
    // Sparse tables: the batch's pooled rows in front of the layers (worker/sparse_batch.hpp).
    if (indices.empty()) {
      std::fill_n(out, n_, 0.0f);
    } else {
      std::vector<std::span<const float>> pulled;
      for (std::uint32_t t = 0; t < lookups_.size(); ++t) pulled.push_back(rows_->values(t));
      loss = runner_->forward_backward(w, train, indices, lookups_, pulled, out, row_grads_, noise);
    }
  } else {
    loss = runner_->forward_backward(w, train, indices, out, noise);
  }
  // The optimizer's clip_norm (not under averaging, whose pushes are model deltas): this
  // worker's mean gradient, so the samples-weighted mean the shards apply is within it too.
  if (const float clip = setup_.clip_norm; clip > 0 && !averager_ && !indices.empty())
    clip_gradient(*be_, out, n_, indices.size(), clip, setup_.model->statistic_ranges());
  return true;
}

/// Runs the step when its chunk and every shard's parameters are here.
void worker_server::try_step() {
  // asp: the master numbers the steps across the job's workers; this worker's next step is
  // whichever it was granted.
  if (asp_ && !grants_.empty() && grants_.begin()->first > step_) {
    step_ = grants_.begin()->first;
    catch_up();
  }
  auto it = grants_.find(step_);
  if (asp_ && it != grants_.end() && newest_ >= first_ && answers_due_ > 0 &&
      wait_bounded_at_ != step_) {
    wait_bounded_at_ = step_;
    ports_.bound_wait(step_);
  }
  if (it == grants_.end()) return;
  const bool rows_here = !rows_ || rows_ready(it->second);
  if (!rows_here || !params_ready()) return;
  const wire_message& g = it->second;

  // Host memory for the gradient, except where it is summed on the devices and never
  // downloaded by this worker (device reduction runs only on device backends).
  std::shared_ptr<float_buffer> buf;
  if (!setup_.device_reducer) buf = pinned_ ? pinned_->acquire() : grads_->acquire();
  copy_to_ = buf ? buf->data() : nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  float* out = host_backend_ ? buf->data() : grad_;
  // Every key arrived exactly once (key_coverage): the held pieces alone cover the vector.
  const float* w = held_.empty() ? params_ : whole_.as<float>().data();
  double loss = 0;
  std::size_t samples = 0;
  if (!compute(g, w, out, loss, samples)) return;
  whole_ = frame{};  // let the shard update in place
  held_.clear();
  copying_ = false;
  if (pinned_)
    be_->finish_downloads();  // started layer by layer during the backward pass
  else if (!host_backend_ && !setup_.device_reducer)
    be_->download(buf->data(), grad_, buf->size());
  auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  if (setup_.slowdown)  // a straggler (test hook): the step takes `factor` times as long
    if (const double factor = setup_.slowdown(setup_.rank, step_); factor > 1) {
      std::this_thread::sleep_for(
          std::chrono::microseconds(std::int64_t(double(us) * (factor - 1))));
      us = std::int64_t(double(us) * factor);
    }
  finish_step(g, std::move(buf), samples, loss, us);
}

/// The step computed: its pushes, its report to the master, and the next step asked for.
void worker_server::finish_step(const wire_message& g, std::shared_ptr<float_buffer> buf,
                                std::size_t samples, double loss, std::int64_t us) {
  // A shard of this process that the pushes wake may run on this thread once the step's
  // messages are out (actors::inline_scope).
  const auto scope = ports_.push_scope ? ports_.push_scope() : nullptr;
  push_flags_ = g.hdr.flags & (flag::snapshot | flag::with_state);
  last_pushes_.clear();
  // adascale: the totals of the version this step computed from (the step's own, or under ssp
  // the newest whole one), once for its pushes and its report.
  step_totals_.clear();
  const std::int64_t from = staleness_ > 0 ? newest_ : step_;
  if (auto totals = stats_.total(from)) step_totals_ = totals->to_list();
  stats_.forget_before(from);
  if (rows_ && samples > 0)
    row_pushes_ = rows_->push_parts([this](std::uint64_t key) { return owner_of(key); },
                                    std::move(row_grads_));
  if (setup_.reducer || setup_.device_reducer) {
    if (!push_reduced(samples, std::move(buf))) return;
  } else {
    for (std::uint32_t k = 0; k < ranges_.size(); ++k) {
      push_to(k, setup_.rank, samples, buf);
      if (asp_ && !ranges_[k].empty()) ++answers_due_;
    }
  }
  auto report = to(setup_.master, msg_kind::step_report);
  report.hdr.samples = samples;
  report.hdr.loss = loss;
  report.hdr.epoch = g.hdr.epoch;
  report.hdr.chunk_id = g.hdr.chunk_id;
  report.hdr.flags = g.hdr.flags;
  report.hdr.compute_us = std::uint64_t(us);
  report.hdr.grad_stats = step_totals_;  // adascale: for the master's record of the step
  // Function mode: its invocations so far (the master sums the ranks').
  const invocation_counts* counted = setup_.functions                  ? &setup_.functions->counts()
                                     : scripts_ && scripts_->bounded() ? &scripts_->counts()
                                                                       : nullptr;
  if (counted) {
    const auto& c = *counted;
    auto v = std::make_shared<std::vector<std::uint64_t>>(
        std::vector<std::uint64_t>{c.started, c.completed, c.timed_out, c.out_of_memory, c.failed,
                                   c.tasks, c.peak_memory_bytes});
    report.frames.push_back(frame::of(v, v->data(), v->size()));
  }
  ports_.send(std::move(report));

  grants_.erase(step_);
  row_pushes_.clear();
  ++step_;
  moved_keys_.clear();
  moved_from_.clear();
  received_->clear();
  catch_up();
  ports_.send(to(setup_.master, msg_kind::chunk_request));
}

}  // namespace coach::worker
