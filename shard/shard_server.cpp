// shard::shard_server (shard/shard_server.hpp): the data path's messages into calls on
// ps::shard, and their answers and transfers. Its sparse rows are in shard_server_rows.cpp, its
// replica chain in shard_server_replicas.cpp.

#include "shard/shard_server.hpp"

#include <algorithm>

#include "common/format.hpp"
#include "common/log.hpp"

namespace coach::shard {
namespace {

using wire::endpoint;
using wire::frame;
using wire::msg_kind;
using wire::transfer_ack;
using wire::wire_message;
namespace flag = wire::flag;

}  // namespace

shard_server::shard_server(shard_server_setup setup, shard_server_ports ports,
                           std::unique_ptr<kernels::backend> be, std::unique_ptr<ps::shard> core)
    : setup_(std::move(setup)),
      ports_(std::move(ports)),
      be_(std::move(be)),
      core_(std::move(core)) {
  if (ports_.answers_gone)
    answers_gone_ = std::make_shared<const std::function<void()>>(ports_.answers_gone);
  if (setup_.replicas > 1)
    chain_.emplace(core_->applied_steps(), setup_.replica == 0,
                   setup_.replica + 1 < setup_.replicas);
}

void shard_server::on_message(wire_message& m) {
  if (chain_ && !chain_entry(m)) return;
  handle(m);
}

void shard_server::answers_left() {
  send_transfers();
}

void shard_server::report(const coach::error& e) {
  ++protocol_errors_;
  log::warn("{}", e.to_string());
}

wire_message shard_server::params_to(const endpoint& dst, std::int64_t version) const {
  wire_message m;
  m.hdr.src = setup_.self;
  m.hdr.dst = dst;
  m.hdr.kind = msg_kind::params;
  m.hdr.job = setup_.job;
  m.hdr.map_version = core_->config_version();
  m.hdr.step = version;
  if (auto st = core_->step_stats(version)) m.hdr.grad_stats = st->to_list();
  return m;
}

/// The keys of `asked` outside this shard's ranges (both ascending and disjoint).
std::vector<ps::key_range> shard_server::not_owned(std::vector<ps::key_range> asked) const {
  std::sort(asked.begin(), asked.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  std::vector<ps::key_range> out;
  const auto& own = core_->ranges();
  std::size_t j = 0;
  for (auto r : asked) {
    while (j < own.size() && own[j].end <= r.begin) ++j;
    for (std::size_t i = j; i < own.size() && own[i].begin < r.end; ++i) {
      if (own[i].begin > r.begin) out.push_back({r.begin, own[i].begin});
      r.begin = std::max(r.begin, own[i].end);
    }
    if (r.begin < r.end) out.push_back(r);
  }
  return out;
}

/// Sends version `v` of the owned values to everyone waiting for it (one shared copy): the
/// keys each asked for that this shard owns (all it owns for a request without ranges). Keys
/// asked for that it no longer owns (a pull that arrived after they moved away) are answered
/// with a `moved` message: the requester asks their new owner.
void shard_server::serve(std::int64_t v) {
  if (core_->options().one_push_per_step && v == core_->applied_steps()) {
    // asp: the version counts the steps applied without a gap, so it may jump past a
    // version asked for: whoever waits for an older one gets this one. The master's snapshot
    // is answered under the version it asked for (asp's parameters are of no one version:
    // these hold every step before it and some after), else it would wait for it forever.
    while (!waiting_.empty() && waiting_.begin()->first < v) {
      auto& older = waiting_.begin()->second;
      for (auto& w : older)
        if (w.version < 0) w.version = waiting_.begin()->first;
      auto& now = waiting_[v];
      now.insert(now.end(), older.begin(), older.end());
      waiting_.erase(waiting_.begin());
    }
  }
  auto it = waiting_.find(v);
  if (it == waiting_.end()) return;
  // A backup answers nothing.
  if (chain_ && !chain_->head()) return;
  // Between a boundary and the transfer (or release) it asks of this shard, what it owns is
  // not what the configuration says: wait for that (run_moves serves then).
  if (!core_->owns_assigned(v)) return;
  // A version the whole chain does not hold yet is not answered. The head may apply the
  // next step before its chain acknowledges this version (a new shard that adopted its
  // slices and took the pushes held for them): what the master asked of it is kept, and
  // answered once the chain holds it (serve_passed).
  if (chain_ && !chain_->may_answer(v)) {
    const bool master_waits =
        std::ranges::any_of(it->second, [&](const waiter& w) { return w.who == setup_.master; });
    if (master_waits && !retained_.contains(v)) {
      retained_[v] = std::make_shared<const ps::slice_transfer>(core_->snapshot());
      if (retained_.size() > 2) retained_.erase(retained_.begin());
    }
    return;
  }
  // Shared, not copied: the shard copies on write if a reader still holds it (ps/shard.hpp).
  auto values = core_->share_values();
  std::shared_ptr<const void> owner = values;
  std::shared_ptr<const ps::slice_transfer> snapshot;  // made once, for the state requests
  for (const auto& w : it->second) {
    const auto& [dst, asked, state, label, rows] = w;
    if (rows) {
      send_rows(w, v);
      continue;
    }
    if (state) {
      // The optimizer state is written in place by the next step: copied now, at version v.
      if (!snapshot) snapshot = std::make_shared<const ps::slice_transfer>(core_->snapshot());
      auto m = make_state(setup_.self, dst, setup_.job, snapshot);
      m.hdr.map_version = core_->config_version();
      ports_.send(std::move(m));
      continue;
    }
    wire_message m = params_to(dst, dst == setup_.master && label >= 0 ? label : v);
    std::size_t off = 0;
    for (const auto& r : core_->ranges()) {
      auto add = [&](std::uint64_t b, std::uint64_t e) {
        m.hdr.ranges.push_back({b, e});
        m.frames.push_back(frame::of(owner, values->data() + off + (b - r.begin), e - b));
      };
      if (asked.empty()) add(r.begin, r.end);
      for (const auto& w : asked)
        if (std::max(r.begin, w.begin) < std::min(r.end, w.end))
          add(std::max(r.begin, w.begin), std::min(r.end, w.end));
      off += r.size();
    }
    if (!m.hdr.ranges.empty()) ports_.send(std::move(m));
    if (asked.empty()) continue;
    if (auto gone = not_owned(asked); !gone.empty()) {
      wire_message moved = params_to(dst, v);
      moved.hdr.kind = msg_kind::moved;
      moved.hdr.map_version = std::max<std::uint64_t>(moved.hdr.map_version, released_for_);
      moved.hdr.ranges = std::move(gone);
      ports_.send(std::move(moved));
    }
  }
  waiting_.erase(it);
}

/// Takes a finished piece of the step being applied; sends the pieces taken so far once they
/// hold piece_floats floats. A piece's values are final: the shard does not write them again
/// before the next step.
void shard_server::on_piece(const ps::piece& p) {
  unsent_.push_back(p);
  unsent_floats_ += p.keys.size();
  if (chain_ && !chain_->may_answer(p.version)) return;  // the step's answers wait for the chain
  if (unsent_floats_ >= core_->options().piece_floats) send_pieces();
}

/// Sends the pieces not sent yet to everyone who pushed to the step, one message each.
void shard_server::send_pieces() {
  if (unsent_.empty()) return;
  auto values = core_->share_values();
  std::shared_ptr<const void> owner = values;
  if (!answering_ && answers_gone_) answering_ = std::make_shared<answers_token>(answers_gone_);
  for (const auto& dst : pushers_[unsent_.front().version - 1]) {
    wire_message m = params_to(dst, unsent_.front().version);
    for (const auto& p : unsent_) {
      m.hdr.ranges.push_back(p.keys);
      m.frames.push_back(frame::of(owner, values->data() + p.offset, p.keys.size()));
    }
    m.sent = answering_;
    ports_.send(std::move(m));
  }
  unsent_.clear();
  unsent_floats_ = 0;
}

/// The step's answers are all handed to the transport: from now on their token ends when the
/// last of them has left.
void shard_server::answers_made() {
  answers_out_ = answering_;
  answering_.reset();
}

/// Sends the transfers that waited for the answers, once those are out.
void shard_server::send_transfers() {
  if (auto out = answers_out_.lock()) {
    out->await();  // answers_gone, then answers_left(), once they are out
    return;
  }
  for (auto& m : transfers_waiting_) ports_.send(std::move(m));
  transfers_waiting_.clear();
}

/// Answers whoever waits for the current version, and those who pushed to the steps applied
/// whole (completed outside a push, or by pushes held for them): the current version, which
/// holds their step's update.
void shard_server::answer_applied() {
  const auto v = core_->applied_steps();
  for (auto it = pushers_.begin(); it != pushers_.end() && it->first < v;) {
    for (const auto& p : it->second) waiting_[v].push_back({p, {}, false});
    it = pushers_.erase(it);
  }
  serve(v);
}

void shard_server::on_configure(const wire_message& m) {
  auto c = read_configure(m, setup_.num_params, setup_.slice_size);
  if (!c) return report(c.error());
  // A re-issue (workers died) is taken whole, at its last configuration.
  batch_.push_back(std::move(*c));
  if (m.hdr.flags & flag::more_configs) return;
  const auto batch = std::move(batch_);
  batch_.clear();
  // Steps completed here (a removed worker was the last awaited, or held pushes were taken)
  // are answered as a whole: their pushers get the version from serve().
  auto before = core_->applied_steps();
  auto done = core_->configure(batch);
  if (!done) report(done.error());
  if (core_->applied_steps() > before) answer_applied();
}

void shard_server::on_migrate(const wire_message& m) {
  auto o = read_migrate(m);
  if (!o) return report(o.error());
  if (o->at_version < core_->applied_steps())
    return report({errc::protocol_error,
                   coach::format("shard {}: told to hand over keys at version {} but it is at {}",
                                 core_->id(), o->at_version, core_->applied_steps())});
  releases_.push_back(std::move(*o));
}

void shard_server::on_transfer(wire_message& m) {
  // Taken without a copy where it arrived from another process (an empty shard adopts it).
  auto t = read_transfer(std::move(m), setup_.state_per_param);
  if (!t) return report(t.error());
  adoptions_.push_back(std::move(*t));
}

/// Hands over and takes slices whose version has come (docs/design.md "Elastic jobs"). A
/// release waits until the step before the boundary is applied; an adoption until this shard
/// is at the transfer's version, or at once when it owns nothing. Pushes of the boundary's
/// step that waited for the move are taken then; a step they complete is answered as a whole.
///
/// Only steps that resume() completes are answered to the pushers: an empty shard's adoption
/// moves its version from 0 to the transfer's without completing any step, and the pushes it
/// held are of that step, not of the one before (their workers wait for the next version).
void shard_server::run_moves() {
  int completed = 0;
  // An adoption can make a release due (and the reverse): go on until nothing moves.
  for (std::size_t before = SIZE_MAX; before != releases_.size() + adoptions_.size();) {
    before = releases_.size() + adoptions_.size();
    completed += run_moves_once();
  }
  if (completed > 0) answer_applied();
}

/// One pass over the releases and adoptions due; returns the steps that held pushes taken
/// after them completed.
int shard_server::run_moves_once() {
  int completed = 0;
  for (auto it = releases_.begin(); it != releases_.end();) {
    // A head whose last step waits for its chain keeps the values that step's answers are
    // made of: it releases once they went out (release_gated).
    if (core_->applied_steps() != it->at_version || gated_step_) {
      ++it;
      continue;
    }
    auto t = core_->release(it->ranges, it->to);
    if (!t) {
      report(t.error());
    } else {
      released_for_ = std::max(released_for_, it->config_version);
      // A backup hands over nothing: the destination's primary gets its primary's transfer.
      if (!chain_ || chain_->head()) {
        auto shared = std::make_shared<const ps::slice_transfer>(std::move(*t));
        transfers_waiting_.push_back(
            make_transfer(setup_.self, setup_.shard_ep(it->to), setup_.job, shared));
        send_transfers();  // now, unless the step's answers are still going out
      }
      completed += resume();
      serve(core_->applied_steps());  // pulls that waited for the release
    }
    it = releases_.erase(it);
  }
  for (auto it = adoptions_.begin(); it != adoptions_.end();) {
    if (!core_->ranges().empty() && core_->applied_steps() != it->version) {
      ++it;
      continue;
    }
    const transfer_ack ack{it->version, it->from, core_->id()};
    if (auto ok = core_->adopt(std::move(*it)); !ok) {
      report(ok.error());
    } else {
      if (!chain_ || chain_->head())
        ports_.send(make_transfer_ack(setup_.self, setup_.master, setup_.job, ack));
      serve(core_->applied_steps());  // a new shard may have pulls waiting for this version
      completed += resume();
    }
    it = adoptions_.erase(it);
  }
  return completed;
}

/// Takes the pushes that waited for a move (ps::shard::resume); returns the steps they
/// completed (counted by the version, so also when one of them was refused).
int shard_server::resume() {
  const auto before = core_->applied_steps();
  if (auto done = core_->resume(); !done) report(done.error());
  return int(core_->applied_steps() - before);
}

/// A pull or snapshot request: `asked` are the keys wanted (empty: all this shard owns);
/// `state`: a snapshot with the optimizer state (answered with every key owned).
void shard_server::want(std::int64_t v, const endpoint& who, std::vector<ps::key_range> asked,
                        bool pull, bool state) {
  if (!pull) {
    if (!snapshots_asked_.insert(v).second) return;  // asked on the other path already
    if (snapshots_asked_.size() > 16) snapshots_asked_.erase(snapshots_asked_.begin());
  }
  // asp: the steps go on without a worker that starts, so the version it pulls may be gone
  // by the time it asks: it gets the current one (any version will do for it).
  if (pull && v < core_->applied_steps() && core_->options().one_push_per_step)
    v = core_->applied_steps();
  if (v < core_->applied_steps() && serve_retained(v, who, state)) return;
  if (v < core_->applied_steps()) {
    report({errc::protocol_error, coach::format("shard {}: version {} requested but {} is current",
                                                core_->id(), v, core_->applied_steps())});
    return;
  }
  waiting_[v].push_back({who, std::move(asked), state});
  if (v == core_->applied_steps()) serve(v);
}

/// asp: the push is applied on arrival (or held for a move), and its worker gets the values
/// as they are now, whatever it asked for.
void shard_server::on_push_alone(std::int64_t step, const wire_message& m, ps::contribution c) {
  auto done = core_->push(step, m.hdr.map_version, std::move(c), {});
  if (!done) report(done.error());
  waiting_[core_->applied_steps()].push_back({m.hdr.src, {}, false});
  serve(core_->applied_steps());
}

void shard_server::on_push(wire_message& m) {
  // Replicas: the copy goes on before the frames are taken into the contribution.
  if (chain_ && !chain_->head()) {
    if (chain_->has_next()) forward(m);
  } else if ((m.hdr.flags & flag::resent) && held_before(m)) {
    return;
  } else if (chain_ && chain_->has_next()) {
    forward(m);
  }
  ps::contribution c;
  c.rank = m.hdr.rank;
  c.samples = m.hdr.samples;
  c.loss_sum = m.hdr.loss;
  c.stats = ps::grad_stats::from_list(m.hdr.grad_stats);
  if (c.samples > 0) {
    // The dense frames, one a range, then the sparse rows' frames (wire/row_frames.hpp).
    const std::size_t dense = std::min(m.hdr.ranges.size(), m.frames.size());
    for (std::size_t i = 0; i < dense; ++i) c.parts.push_back(m.frames[i].as<float>());
    if (!read_push_rows(m, c)) return;
    // The contribution is read when the step's last push arrives: every frame's memory must
    // live until then. A local push's frames share one owner (the worker's gradient buffer);
    // a received one's frames each own their own ZeroMQ message, so all of them are kept.
    const bool one_owner = std::all_of(m.frames.begin(), m.frames.end(), [&](const frame& f) {
      return f.owner == m.frames.front().owner;
    });
    if (m.frames.empty() || one_owner)
      c.keep_alive = m.frames.empty() ? nullptr : m.frames.front().owner;
    else
      c.keep_alive = std::make_shared<const std::vector<frame>>(std::move(m.frames));
  }
  const std::int64_t step = m.hdr.step;
  if (chain_ && !chain_->head()) return on_push_copy(step, m, std::move(c));
  // The master's request for the version before this step, on the path that advances this
  // shard past it (a late push of a step applied already carries nothing wanted).
  if ((m.hdr.flags & flag::snapshot) && step >= core_->applied_steps())
    want(step, setup_.master, {}, false, (m.hdr.flags & flag::with_state) != 0);
  if (core_->options().one_push_per_step) return on_push_alone(step, m, std::move(c));
  // A push asks for the next version too: the step's update comes back as its answer, in
  // pieces, each sent while the next one is being updated.
  // A push sent again (flag::resent) is not answered: its sender pulls what it lacks.
  auto& who = pushers_[step];
  const bool answer = !(m.hdr.flags & flag::resent);
  if (answer) who.push_back(m.hdr.src);
  auto done = core_->push(step, m.hdr.map_version, std::move(c),
                          [this](const ps::piece& p) { on_piece(p); });
  if (!done) {
    if (answer) who.pop_back();
    if (who.empty()) pushers_.erase(step);
    report(done.error());
    return;
  }
  if (*done) {
    if (chain_) chain_->applied(core_->applied_steps());
    if (chain_ && !chain_->may_answer(core_->applied_steps())) {
      gated_step_ = step;  // answered once the chain holds the version (release_gated)
      return;
    }
    answer_step(step);
  }
}

/// Sends step `step`'s answers (its last pieces), then answers what waited for its version.
void shard_server::answer_step(std::int64_t step) {
  send_pieces();  // the step's last pieces
  answers_made();
  pushers_.erase(step);
  // ssp:S: pushes of the next steps held until now may complete them too.
  resume();
  answer_applied();
}

/// A shard's message (after chain_entry, for a replicated one).
void shard_server::handle(wire_message& m) {
  switch (m.hdr.kind) {
    case msg_kind::push:
      on_push(m);
      break;
    case msg_kind::pull:
      want(m.hdr.step, m.hdr.src, m.hdr.ranges, true, false);
      break;
    case msg_kind::rows_pull:
      on_rows_pull(m);
      break;
    case msg_kind::snapshot_request:
      want(m.hdr.step, m.hdr.src, m.hdr.ranges, false, (m.hdr.flags & flag::with_state) != 0);
      break;
    case msg_kind::configure:
      on_configure(m);
      break;
    case msg_kind::migrate:
      on_migrate(m);
      break;
    case msg_kind::transfer:
      on_transfer(m);
      break;
    default:
      report(
          {errc::protocol_error, coach::format("shard {}: unexpected message {} from {}",
                                               core_->id(), to_string(m.hdr.kind), m.hdr.src.id)});
  }
  run_moves();
  if (chain_) chain_moved();
}

}  // namespace coach::shard
