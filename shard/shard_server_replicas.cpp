// shard::shard_server's replica chain (shard/shard_server.hpp, ps/replica_chain.hpp,
// docs/design.md "Shard replicas"): the head forwards its copies to the next replica, a backup
// applies them and acknowledges what it holds to the one before, the head answers only what the
// whole chain holds, and a backup takes over when the master says so.

#include "common/log.hpp"
#include "shard/shard_server.hpp"

namespace coach::shard {
namespace {

using wire::endpoint;
using wire::frame;
using wire::msg_kind;
using wire::wire_message;
namespace flag = wire::flag;

}  // namespace

/// A copy of `m` for the next replica of the chain.
void shard_server::forward(const wire_message& m) {
  ports_.send(copy_to(m, setup_.next, flag::replica));
}

/// A backup's copy of a push: applied as the primary applies it, answered to nobody. The
/// master's snapshot request on it is kept (`retained_`) in case the primary's answer is lost.
void shard_server::on_push_copy(std::int64_t step, const wire_message& m, ps::contribution c) {
  if ((m.hdr.flags & flag::snapshot) && step == core_->applied_steps() &&
      !retained_.contains(step)) {
    retained_[step] = std::make_shared<const ps::slice_transfer>(core_->snapshot());
    if (retained_.size() > 2) retained_.erase(retained_.begin());
  }
  if (auto done = core_->push(step, m.hdr.map_version, std::move(c)); !done) report(done.error());
}

/// A push sent again to a replica that took over (flag::resent): true when this replica
/// has it already (applied: the step held every member's push; or held for the open step,
/// its copy came from the lost primary). The sender pulls what it lacks of the next version.
bool shard_server::held_before(const wire_message& m) const {
  return m.hdr.step < core_->applied_steps() || core_->holds_push(m.hdr.step, m.hdr.rank);
}

/// Answers a snapshot request for version `v`, passed already, from a retained copy; false
/// when none is kept.
bool shard_server::serve_retained(std::int64_t v, const endpoint& who, bool state) {
  auto it = retained_.find(v);
  if (it == retained_.end()) return false;
  const auto& t = it->second;
  if (state) {
    auto m = make_state(setup_.self, who, setup_.job, t);
    m.hdr.map_version = core_->config_version();
    ports_.send(std::move(m));
    return true;
  }
  wire_message m = params_to(who, v);
  const auto values = t->values_span();
  std::size_t off = 0;
  for (const auto& r : t->ranges) {
    m.hdr.ranges.push_back(r);
    m.frames.push_back(frame::of(t, values.data() + off, r.size()));
    off += r.size();
  }
  ports_.send(std::move(m));
  return true;
}

/// Chain bookkeeping after a message: a backup acknowledges what it holds now; the head
/// answers what the chain holds now.
void shard_server::chain_moved() {
  if (auto v = chain_->applied(core_->applied_steps())) tell_prev(*v);
  release_gated();
}

void shard_server::tell_prev(std::int64_t v) {
  wire_message m = params_to(setup_.prev, v);
  m.hdr.kind = msg_kind::replica_ack;
  m.hdr.rank = core_->id();
  ports_.send(std::move(m));
}

/// The head: answers the step and the requests the chain now holds.
void shard_server::release_gated() {
  if (!chain_->head()) return;
  serve_passed();
  if (gated_step_ && chain_->may_answer(*gated_step_ + 1)) {
    const auto step = *gated_step_;
    gated_step_.reset();
    answer_step(step);
    run_moves();  // a release that waited for the step's answers
    return;
  }
  serve(core_->applied_steps());
}

/// The head: the master's requests for versions it passed while its chain did not hold them
/// yet, answered from the copies serve() kept, once the chain holds them.
void shard_server::serve_passed() {
  for (auto it = waiting_.begin(); it != waiting_.end() && it->first < core_->applied_steps();) {
    const auto kept = retained_.find(it->first);
    if (kept == retained_.end() || !chain_->may_answer(it->first)) {
      ++it;
      continue;
    }
    for (const auto& w : it->second)
      if (w.who == setup_.master) serve_retained(it->first, w.who, w.state);
    it = waiting_.erase(it);
  }
}

/// Messages of the chain, and where a replicated shard's messages go. Returns true when `m`
/// is to be handled as a shard's message here.
bool shard_server::chain_entry(wire_message& m) {
  switch (m.hdr.kind) {
    case msg_kind::replica_ack:
      if (auto v = chain_->successor_acked(m.hdr.step)) tell_prev(*v);
      release_gated();
      return false;
    case msg_kind::replica_lost:
      if (auto v = chain_->successor_lost()) tell_prev(*v);
      release_gated();
      return false;
    case msg_kind::take_over:
      take_over();
      return false;
    default:
      break;
  }
  if (chain_->head()) {
    // The head's copies: every message that changes the shard, before it is handled (a push
    // only once it is taken: on_push).
    if (chain_->has_next() && (m.hdr.kind == msg_kind::configure ||
                               m.hdr.kind == msg_kind::migrate || m.hdr.kind == msg_kind::transfer))
      forward(m);
    return true;
  }
  if (!(m.hdr.flags & flag::replica)) {
    parked_.push_back(std::move(m));  // to a primary this replica is not yet
    return false;
  }
  if (chain_->has_next() && m.hdr.kind != msg_kind::push) forward(m);
  return true;
}

/// This backup becomes its shard's primary (the master's take_over): it answers from now on,
/// first the messages sent to it as to the primary before it knew.
void shard_server::take_over() {
  if (chain_->head()) return;
  chain_->take_over();
  log::info("job {}: shard {}: backup takes over at version {}", setup_.job, core_->id(),
            core_->applied_steps());
  auto waiting_msgs = std::move(parked_);
  parked_.clear();
  for (auto& m : waiting_msgs) {
    if (chain_->has_next() && (m.hdr.kind == msg_kind::configure ||
                               m.hdr.kind == msg_kind::migrate || m.hdr.kind == msg_kind::transfer))
      forward(m);
    handle(m);
  }
  serve(core_->applied_steps());
}

}  // namespace coach::shard
