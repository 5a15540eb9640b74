#include "master/job_master.hpp"

#include <algorithm>
#include <set>
#include <span>

#include "common/format.hpp"
#include "common/log.hpp"
#include "master/change_planner.hpp"
#include "wire/elastic_messages.hpp"

namespace coach::master {
namespace {

using wire::wire_message;
namespace flag = wire::flag;
using wire::endpoint;
using wire::frame;
using wire::migrate_order;
using wire::msg_kind;

/// How the job's samples are cut into chunks: a fixed global batch takes the same chunks each
/// step whatever its members.
global_cut cut_of(const scheduler::job_spec& spec) {
  if (spec.fixed_global_batch())
    return cut_global_batch(std::size_t(spec.global_batch), std::uint32_t(spec.workers.max));
  return global_cut{std::size_t(spec.batch_size), 0};
}

step_planner make_planner(chunk_dispenser& d, const scheduler::job_spec& spec,
                          const ps::consistency& mode, const job_master_options& o) {
  return step_planner(d, o.first_epoch, std::uint32_t(spec.epochs), mode.chunks_per_step(),
                      mode.open_ahead(), o.first_step,
                      spec.fixed_global_batch() ? cut_of(spec).per_step : 0u);
}

}  // namespace

job_master::job_master(job_master_setup setup, job_master_options options, job_master_ports ports,
                       const scheduler::clock_source& clock)
    : setup_(std::move(setup)),
      options_(std::move(options)),
      ports_(std::move(ports)),
      clock_(clock),
      dispenser_(setup_.train_rows, cut_of(setup_.spec).chunk, setup_.spec.seed),
      mode_(ps::make_consistency(setup_.spec.consistency)),
      planner_(make_planner(dispenser_, setup_.spec, *mode_, options_)),
      state_per_param_(scheduler::shard_optimizer(setup_.spec).state_per_param()),
      snapshots_(setup_.num_params, state_per_param_),
      job_start_(clock.now()),
      last_progress_(clock.now()),
      changes_(setup_.initial),
      timer_(clock),
      ledger_(clock),
      next_rank_(std::uint32_t(setup_.initial.members.size())),
      next_shard_(setup_.shards) {
  configs_[0] = cfg();
  // A resumed job starts at its checkpoint's step: changes due before it are past.
  for (const auto& a : setup_.spec.schedule)
    if (a.at_step >= options_.first_step) changes_.queue({a, {}}, a.at_step);
  result_.name = setup_.spec.name;
}

void job_master::on_message(const wire_message& m) {
  switch (m.hdr.kind) {
    case msg_kind::chunk_request:
      return grant(m);
    case msg_kind::step_report:
      return on_report(m);
    case msg_kind::params:
      return on_snapshot(m);
    case msg_kind::state:
      return on_state(m);
    case msg_kind::transfer_ack:
      return on_ack(m);
    default:
      log::warn("job master: unexpected message {}", to_string(m.hdr.kind));
  }
}

void job_master::cancel() {
  if (done_ || cancelled_) return;
  cancelled_ = true;
  // Steps already open finish; the next one to open tells every worker to stop.
}

std::uint32_t job_master::live_shard_count() {
  // live_shards().size(), counted once per configuration version (each step's ledger entry
  // asks for it; a change is rare).
  if (counted_version_ != cfg().version) {
    counted_version_ = cfg().version;
    live_count_ = std::uint32_t(live_shards().size());
  }
  return live_count_;
}

wire_message job_master::to(const wire::endpoint& dst, msg_kind kind, std::int64_t step) const {
  wire_message m;
  m.hdr.src = setup_.master;
  m.hdr.dst = dst;
  m.hdr.kind = kind;
  m.hdr.job = setup_.job;
  m.hdr.map_version = cfg().version;
  m.hdr.step = step;
  return m;
}

bool job_master::asp() const {
  return mode_->step_per_request();
}

void job_master::fail_job(coach::error why) {
  if (done_) return;
  done_ = true;
  ports_.done(job_outcome{std::move(why), {}});
}

void job_master::regrant_parked() {
  auto waiting = std::move(parked_);
  parked_.clear();
  for (const auto& r : waiting) grant(r);
}

/// The flags that ask for a snapshot of version s on step s's grants (and so its pushes).
std::uint8_t job_master::snapshot_flags_of(std::int64_t s) const {
  if (!snapshots_.asked(s)) return 0;
  return flag::snapshot | (snapshots_.wants_state(s) ? flag::with_state : 0);
}

/// Whether the end of `epoch` is checkpointed (options.checkpoint_due, asked once).
bool job_master::checkpoint_due(std::uint32_t epoch) {
  if (!options_.checkpoint_due) return false;
  auto it = checkpointed_.find(epoch);
  if (it == checkpointed_.end())
    it = checkpointed_.emplace(epoch, options_.checkpoint_due(epoch)).first;
  return it->second;
}

/// Asks the shards of the current configuration (that of step s) for the snapshots of
/// versions up to s not asked for yet. Called as step s opens, before any of its grants: the
/// request for version s goes on them too (flag::snapshot), and from them on step s's pushes,
/// so a shard has it before those pushes take it past the version, whatever the links' speeds.
void job_master::ask_snapshots(std::int64_t s) {
  for (const auto version : snapshots_.to_ask(s)) {
    const bool state = snapshots_.wants_state(version);
    for (auto k : live_shards()) {
      auto m = to(setup_.shard_ep(k), msg_kind::snapshot_request, version);
      if (state) m.hdr.flags = flag::with_state;
      ports_.send(std::move(m));
    }
  }
}

/// Opens step s if it can: false when the epoch's last chunks are still being processed.
/// Begins the change due at step s, if any: false while step s must wait (for its new parts).
bool job_master::change_due(std::int64_t s) {
  // A change begins once the transfers of the one before are in; until then the steps go on
  // without it. One waiting for its new parts holds the step.
  auto d = changes_.at(s, cancelled_);
  using kind = change_sequencer::due::kind_type;
  if (d.kind == kind::wait) return false;
  if (d.kind == kind::begin) return begin_change(s, *d.change);
  return true;
}

/// Opens step s if it can, for every member of its configuration or (asp) for `only`.
bool job_master::open(std::int64_t s, std::optional<std::uint32_t> only) {
  if (options_.cancel_at_step >= 0 && s >= options_.cancel_at_step) cancelled_ = true;
  if (!change_due(s)) return false;
  if (cancelled_) {
    if (stop_step_ < 0) stop_step_ = s;
    snapshots_.request(s, dispenser_.epoch(), true, setup_.sparse_rows);
  }
  const std::uint32_t alone[] = {only.value_or(0)};
  const auto o = planner_.open(
      only ? std::span<const std::uint32_t>(alone) : std::span<const std::uint32_t>(cfg().members),
      cancelled_);
  if (!o) return false;  // the epoch's last chunks are still being processed
  if (o->epoch_begun) ledger_.begin(*o->epoch_begun);
  if (!o->finished) {
    ledger_.step_opened(dispenser_.epoch(), planner_.open_step(),
                        std::uint32_t(cfg().members.size()), live_shard_count());
    // The step that hands out an epoch's last chunk ends it: snapshot the version after it.
    if (o->ends_epoch) {
      ledger_.ends_with(dispenser_.epoch(), std::uint32_t(cfg().members.size()),
                        std::uint32_t(live_shards().size()));
      // Sparse rows travel in the shards' state snapshots only: every epoch end asks for them.
      snapshots_.request(s + 1, dispenser_.epoch(), false,
                         checkpoint_due(dispenser_.epoch()) || setup_.sparse_rows);
    }
  }
  // Step s's configuration is final now (its change, if any, has begun), and no grant of it
  // has gone out: the snapshots of versions up to s are asked for under it.
  ask_snapshots(s);
  return true;
}

void job_master::grant(const wire_message& req) {
  std::int64_t s = req.hdr.step;
  const std::uint32_t rank = req.hdr.rank;
  if (rank >= next_rank_) return;
  bool left = false;  // asp: a worker that is no member of the next step
  if (asp()) {
    // Each request opens the next step, with the asking worker its only member.
    s = planner_.open_step() + 1;
    if (!change_due(s)) return parked_.push_back(req);
    left = !cancelled_ && !cfg().is_member(rank);
    if (!left && !open(s, rank)) return parked_.push_back(req);
  } else {
    while (planner_.open_step() < s)
      if (!open(planner_.open_step() + 1)) return parked_.push_back(req);
  }
  using kind = step_planner::grant::kind;
  const auto g = left ? step_planner::grant{kind::finished, {}, 0} : planner_.take(rank, s);
  if (g.what == kind::stale) return;
  auto m = to(setup_.worker_ep(rank), msg_kind::chunk_grant, s);
  if (g.what == kind::finished) {
    m.hdr.flags = flag::finished;
  } else if (g.what == kind::no_chunk) {
    m.hdr.flags = flag::no_chunk | snapshot_flags_of(s);
    m.hdr.epoch = g.epoch;
  } else {
    // Frame 0: the chunks' indices one after the other; frame 1 (averaging): their sizes.
    auto copy = std::make_shared<std::vector<std::uint32_t>>();
    auto sizes = std::make_shared<std::vector<std::uint32_t>>();
    for (const auto& c : g.chunks) {
      auto idx = dispenser_.indices(c);
      copy->insert(copy->end(), idx.begin(), idx.end());
      sizes->push_back(std::uint32_t(idx.size()));
    }
    if (setup_.on_step) {
      auto& t = traces_[s];
      t.step = s;
      ++t.members;
      t.samples.insert(t.samples.end(), copy->begin(), copy->end());
    }
    m.hdr.flags = snapshot_flags_of(s);
    m.hdr.epoch = g.epoch;
    m.hdr.chunk_id = g.chunks.front().id;
    m.frames.push_back(frame::of(copy, copy->data(), copy->size()));
    if (mode_->pushes_deltas()) m.frames.push_back(frame::of(sizes, sizes->data(), sizes->size()));
  }
  ports_.send(std::move(m));
}

/// The on_step hook: a member's loss, and the step once every member reported.
void job_master::trace_report(const wire_message& m, bool step_done) {
  auto it = traces_.find(m.hdr.step);
  if (it == traces_.end()) return;  // no samples granted in it (the finishing step)
  it->second.loss_sum += m.hdr.loss;
  if (!it->second.grad_totals) it->second.grad_totals = ps::grad_stats::from_list(m.hdr.grad_stats);
  if (!step_done) return;
  std::sort(it->second.samples.begin(), it->second.samples.end());
  setup_.on_step(it->second);
  traces_.erase(it);
}

void job_master::on_report(const wire_message& m) {
  const auto r = planner_.report(m.hdr.rank, m.hdr.step);
  if (!r.known) return;
  if (r.step_samples) timer_.step_completed(m.hdr.step, *r.step_samples);
  follow_gain(m, r.step_samples);
  if (setup_.on_step) trace_report(m, r.step_samples.has_value());
  if (!m.frames.empty()) read_invocations(m);
  auto& last = last_report_.try_emplace(m.hdr.rank, -1).first->second;
  last = std::max(last, m.hdr.step);
  if (!r.chunks_done.empty()) {
    const std::uint32_t epoch = r.chunks_done.front().epoch;  // a step's chunks share it
    std::uint64_t samples = 0;
    for (const auto& c : r.chunks_done) samples += c.size();
    ledger_.reported(epoch, m.hdr.step, samples, m.hdr.loss, m.hdr.compute_us);
    if (r.epoch_done) {
      ledger_.completed(epoch);
      maybe_finish_epoch(epoch);
    }
    progress(epoch);
  }
  // Requests parked at the epoch's end can go on now.
  regrant_parked();
}

/// Frame 0 of a function-mode worker's step report: its invocation counts so far (u64 each:
/// started, completed, timed out, out of memory, failed, tasks, peak memory bytes).
void job_master::read_invocations(const wire_message& m) {
  const auto v = m.frames.front().as<std::uint64_t>();
  if (v.size() != 7) return;
  auto& c = invocations_[m.hdr.rank];
  c.started = v[0];
  c.completed = v[1];
  c.timed_out = v[2];
  c.out_of_memory = v[3];
  c.failed = v[4];
  c.tasks = v[5];
  c.peak_memory_bytes = v[6];
}

worker::invocation_counts job_master::summed_invocations() const {
  worker::invocation_counts sum;
  for (const auto& [rank, c] : invocations_) sum += c;
  return sum;
}

void job_master::progress(std::uint32_t epoch) {
  const auto now = clock_.now();
  if (now - last_progress_ < scheduler::seconds(0.2)) return;
  last_progress_ = now;
  auto p = ledger_.progress(epoch);
  p.epochs = num_epochs();
  p.samples_total = setup_.train_rows;
  p.workers = std::uint32_t(cfg().members.size());
  p.shards = std::uint32_t(live_shards().size());
  p.changes_done = timer_.changes_done();
  if (setup_.spec.function) p.invocations = summed_invocations();
  ports_.progress(p);
}

void job_master::on_snapshot(const wire_message& m) {
  std::vector<std::span<const float>> pieces;
  bool whole_floats = true;
  for (const auto& f : m.frames) {
    whole_floats = whole_floats && f.bytes % sizeof(float) == 0;
    pieces.push_back(f.as<float>());
  }
  using answer = coach::result<std::optional<snapshot_assembler::assembled>>;
  answer got = whole_floats ? snapshots_.add(m.hdr.step, m.hdr.ranges, pieces)
                            : answer(fail(errc::protocol_error, "a frame is not whole floats"));
  if (!got) {
    log::warn("job master: malformed snapshot from shard {}: {}", m.hdr.src.id,
              got.error().message);
    return;
  }
  if (*got) on_assembled(std::move(**got));  // else keys missing yet, or not wanted
}

/// A shard's snapshot with its optimizer state (a checkpoint's epoch end).
void job_master::on_state(const wire_message& m) {
  auto t = read_state(m, state_per_param_);
  auto got =
      t ? snapshots_.add_state(std::move(*t))
        : coach::result<std::optional<snapshot_assembler::assembled>>(std::unexpected(t.error()));
  if (!got) {
    log::warn("job master: malformed state snapshot from shard {}: {}", m.hdr.src.id,
              got.error().message);
    return;
  }
  if (*got) on_assembled(std::move(**got));
}

/// A version is whole: the job's last (a cancelled job's result), or an epoch's end, which
/// is evaluated (and reported with its state when it is a checkpoint's).
void job_master::on_assembled(snapshot_assembler::assembled a) {
  last_params_ = a.values;
  // A model with sparse tables: the shards' rows, which ride in their state snapshots.
  // Moved out of the state unless a checkpoint keeps the state (a large table's rows are
  // gigabytes: a copy an epoch would double the job's peak memory).
  last_rows_ = nullptr;
  if (a.state && !a.state->rows.empty())
    last_rows_ = std::make_shared<const std::vector<std::vector<std::byte>>>(
        !a.final && checkpoint_due(a.epoch) ? a.state->rows : std::move(a.state->rows));
  last_version_ = a.version;
  if (a.final) return finish(false);
  param_snapshot p{a.epoch, a.version, a.values, std::move(a.state)};
  if (last_rows_) {
    p.rows = last_rows_;
    // Asked for the rows alone, not for a checkpoint: no checkpoint is reported.
    if (!checkpoint_due(a.epoch)) p.state.reset();
  }
  epoch_params_[a.epoch] = p;
  p.state.reset();
  ports_.evaluate(std::move(p));
}

void job_master::evaluated(const eval_result& r) {
  ledger_.evaluated(r.epoch, r.correct, r.total, r.loss_sum, r.auc, r.log_loss);
  maybe_finish_epoch(r.epoch);
}

/// adascale: the shards' gain, followed from the totals the reports carry (the same the
/// pushes carried; every shard folds the same ones in, so the same estimate): the gain of
/// each completed step, for the epoch's report.
void job_master::follow_gain(const wire_message& m,
                             const std::optional<std::uint64_t>& step_samples) {
  const auto& o = setup_.spec.optimizer;
  if (o.lr_scaling != ps::lr_scaling_kind::adascale) return;
  if (auto totals = ps::grad_stats::from_list(m.hdr.grad_stats)) gain_.observe(*totals);
  if (step_samples && *step_samples > 0)
    last_gain_ = gain_.gain(double(o.reference_batch), double(*step_samples));
}

void job_master::maybe_finish_epoch(std::uint32_t epoch) {
  auto rep = ledger_.take_report(epoch);
  if (!rep) return;
  rep->lr_gain = last_gain_;
  result_.epochs.push_back(*rep);
  result_.test_accuracy = rep->test_accuracy;
  // The checkpoint holds the epoch's parameters now; the master keeps only last_params.
  auto params = epoch_params_.extract(epoch);
  if (!params.empty() && params.mapped().values &&
      (options_.report_params || params.mapped().state))
    ports_.checkpoint(std::move(params.mapped()));
  ports_.epoch(*rep);
  // A loss that is no longer a number stays so: the job fails rather than train on (issue 37).
  if (auto why = scheduler::diverged(*rep, setup_.spec.optimizer.base_learning_rate()))
    return fail_job(std::move(*why));
  if (epoch + 1 == num_epochs()) finish(true);
}

void job_master::finish(bool complete) {
  if (done_) return;
  done_ = true;
  result_.cancelled = !complete;
  result_.seconds = scheduler::to_seconds(clock_.now()) - scheduler::to_seconds(job_start_);
  result_.workers = std::uint32_t(cfg().members.size());
  result_.shards = std::uint32_t(live_shards().size());
  result_.backend = setup_.backend;
  result_.num_params = setup_.num_params;
  result_.changes = timer_.reports();
  if (setup_.spec.function) result_.invocations = summed_invocations();
  if (last_params_) result_.params = *last_params_;
  if (last_rows_) result_.rows = *last_rows_;
  // Where it stopped as the master decided it, not as the parameters say: a final snapshot
  // of another version (parameters of a step boundary other than the stop) shows.
  result_.steps = !complete && stop_step_ >= 0 ? stop_step_ : last_version_;
  ports_.done(job_outcome{std::nullopt, std::move(result_)});
}

}  // namespace coach::master
