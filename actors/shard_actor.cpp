#include <caf/all.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "actors/roles.hpp"
#include "common/log.hpp"
#include "ps/replica_chain.hpp"
#include "ps/shard.hpp"
#include "ps/training_state.hpp"
#include "wire/elastic_messages.hpp"

namespace coach::actors {

endpoint master_endpoint(std::uint64_t job) {
  return {0, (job << 32) | 1};
}
endpoint shard_endpoint(std::uint64_t job, std::uint32_t shard) {
  return {0, (job << 32) | (0x10000u + shard)};
}
endpoint worker_endpoint(std::uint64_t job, std::uint32_t rank) {
  return {0, (job << 32) | (0x100000u + rank)};
}

endpoint job_context::shard_ep(std::uint32_t k) const {
  if (spec.replicas > 1)
    if (auto head = added->head_of(k)) return *head;
  if (k < shards.size()) return shards[k];
  auto ep = shard_endpoint(job, k);
  ep.host = added->host_of(false, k).value_or(master.host);
  return ep;
}

endpoint job_context::replica_ep(std::uint32_t k, std::uint32_t i) const {
  if (i == 0) return k < shards.size() ? shards[k] : shard_ep(k);
  auto ep = shard_endpoint(job, k);
  ep.id |= std::uint64_t(i) << 28;  // shard ids stay below 0x100000, ranks are small
  ep.host = k < backup_hosts.size() ? backup_hosts[k].at(i - 1) : added->backups_of(k).at(i - 1);
  return ep;
}

endpoint job_context::worker_ep(std::uint32_t r) const {
  if (r < workers.size()) return workers[r];
  auto ep = worker_endpoint(job, r);
  ep.host = added->host_of(true, r).value_or(master.host);
  return ep;
}

ps::job_config job_context::initial_config() const {
  ps::job_config c;
  c.version = 1;
  c.from_step = 0;
  for (std::uint32_t r = 0; r < workers.size(); ++r) c.members.push_back(r);
  c.map = map;
  return c;
}

namespace {

/// (answers_atom): the answers of the last applied step have left this process.
using answers_atom = caf::atom_constant<caf::atom("answered")>;

/// Carried by a step's answers (wire_message::sent): tells the shard when the last has left.
struct answers_token {
  caf::actor_addr shard;
  explicit answers_token(caf::actor_addr a) : shard(std::move(a)) {}
  answers_token(const answers_token&) = delete;
  answers_token& operator=(const answers_token&) = delete;
  ~answers_token() {
    if (auto self = caf::actor_cast<caf::actor>(shard)) caf::anon_send(self, answers_atom::value);
  }
};

struct shard_state {
  std::shared_ptr<const job_context> ctx;
  endpoint self_ep;
  std::unique_ptr<kernels::backend> be;
  std::unique_ptr<ps::shard> core;
  /// A pull or snapshot request waiting for its version.
  struct waiter {
    endpoint who;
    std::vector<ps::key_range> asked;  ///< empty: every key owned
    bool state = false;                ///< a snapshot with the optimizer state (flag::with_state)
  };
  /// Pull and snapshot requests by version: answered with one message holding every range.
  std::map<std::int64_t, std::vector<waiter>> waiting;
  /// Who pushed to each step not answered yet (the open one and, in ssp:S, later ones held):
  /// each gets the step's result piece by piece, as soon as the pieces are updated (ps::piece),
  /// in params messages of about piece_floats floats.
  std::map<std::int64_t, std::vector<endpoint>> pushers;
  /// Finished pieces of the step being applied not sent yet: small pieces (a shard owning many
  /// short ranges) go out together, so a push is answered in as few messages as the piece size
  /// allows; each message costs several thread wake-ups (docs/performance.md, ps_bench).
  std::vector<ps::piece> unsent;
  std::size_t unsent_floats = 0;
  /// Migrate orders and transfers waiting for this shard to reach their version.
  std::vector<migrate_order> releases;
  /// The newest configuration a release of this shard leads to: a `moved` answer names it, so
  /// the requester waits for that configuration (the master publishes it only after the
  /// transfer, so this shard may not have it yet).
  std::uint64_t released_for = 0;
  std::vector<ps::slice_transfer> adoptions;
  /// The answers to a step's pushes go before a transfer that a release at its end makes: they
  /// are on the workers' critical path, while the transfer has the workers' compute time to
  /// travel in (sent together, they share this host's cores and links: at 256 MiB the answers
  /// came ~0.5 s later, and so did the step). Each answer of a step carries `answering` as its
  /// `sent` token; the token's end (answers_atom) sends the transfers that waited for it.
  std::shared_ptr<const void> answering;
  std::weak_ptr<const void> answers_out;  ///< the last step's token, until its answers are out
  std::vector<wire_message> transfers_waiting;
  /// The versions whose snapshot the master asked for (the last few): it asks in a
  /// snapshot_request and on the step's pushes (flag::snapshot), and is answered once.
  std::set<std::int64_t> snapshots_asked;
  caf::actor_addr self_addr;
  std::uint64_t protocol_errors = 0;

  // Replicas (docs/design.md "Shard replicas"; ps/replica_chain.hpp). Set when the shard has
  // backups: this replica's place in the chain, and who comes before and after it.
  std::optional<ps::replica_chain> chain;
  endpoint prev_ep;  ///< the replica before this one (a backup acknowledges to it)
  endpoint next_ep;  ///< the replica after it (gets a copy of every message that changes the shard)
  /// A backup: messages sent to it as to a primary (a worker told of a take-over before this
  /// replica was), handled once it takes over.
  std::vector<wire_message> parked;
  /// The head: a completed step whose answers wait for the chain to hold its version.
  std::optional<std::int64_t> gated_step;
  /// A backup: the snapshots the master asked of the versions it passed (flag::snapshot on a
  /// push's copy), kept in case the primary is lost before its answer left it; the head: those
  /// it passed before its chain held them (serve, serve_passed). The last two.
  std::map<std::int64_t, std::shared_ptr<const ps::slice_transfer>> retained;
  static inline const char* name = "coach.ps_shard";

  void report(const coach::error& e) {
    ++protocol_errors;
    log::warn("{}", e.to_string());
  }

  wire_message params_to(const endpoint& dst, std::int64_t version) const {
    wire_message m;
    m.hdr.src = self_ep;
    m.hdr.dst = dst;
    m.hdr.kind = msg_kind::params;
    m.hdr.job = ctx->job;
    m.hdr.map_version = core->config_version();
    m.hdr.step = version;
    if (auto st = core->step_stats(version)) m.hdr.grad_stats = st->to_list();
    return m;
  }

  /// The keys of `asked` outside this shard's ranges (both ascending and disjoint).
  std::vector<ps::key_range> not_owned(std::vector<ps::key_range> asked) const {
    std::sort(asked.begin(), asked.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
    std::vector<ps::key_range> out;
    const auto& own = core->ranges();
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
  void serve(std::int64_t v) {
    if (core->options().one_push_per_step && v == core->applied_steps()) {
      // asp: the version counts the steps applied without a gap, so it may jump past a
      // version asked for: whoever waits for an older one gets this one.
      while (!waiting.empty() && waiting.begin()->first < v) {
        auto& older = waiting.begin()->second;
        auto& now = waiting[v];
        now.insert(now.end(), older.begin(), older.end());
        waiting.erase(waiting.begin());
      }
    }
    auto it = waiting.find(v);
    if (it == waiting.end()) return;
    // A backup answers nothing.
    if (chain && !chain->head()) return;
    // Between a boundary and the transfer (or release) it asks of this shard, what it owns is
    // not what the configuration says: wait for that (run_moves serves then).
    if (!core->owns_assigned(v)) return;
    // A version the whole chain does not hold yet is not answered. The head may apply the
    // next step before its chain acknowledges this version (a new shard that adopted its
    // slices and took the pushes held for them): what the master asked of it is kept, and
    // answered once the chain holds it (serve_passed).
    if (chain && !chain->may_answer(v)) {
      const bool master_waits =
          std::ranges::any_of(it->second, [&](const waiter& w) { return w.who == ctx->master; });
      if (master_waits && !retained.contains(v)) {
        retained[v] = std::make_shared<const ps::slice_transfer>(core->snapshot());
        if (retained.size() > 2) retained.erase(retained.begin());
      }
      return;
    }
    // Shared, not copied: the shard copies on write if a reader still holds it (ps/shard.hpp).
    auto values = core->share_values();
    std::shared_ptr<const void> owner = values;
    std::shared_ptr<const ps::slice_transfer> snapshot;  // made once, for the state requests
    for (const auto& [dst, asked, state] : it->second) {
      if (state) {
        // The optimizer state is written in place by the next step: copied now, at version v.
        if (!snapshot) snapshot = std::make_shared<const ps::slice_transfer>(core->snapshot());
        auto m = make_state(self_ep, dst, ctx->job, snapshot);
        m.hdr.map_version = core->config_version();
        ctx->net->send(std::move(m));
        continue;
      }
      wire_message m = params_to(dst, v);
      std::size_t off = 0;
      for (const auto& r : core->ranges()) {
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
      if (!m.hdr.ranges.empty()) ctx->net->send(std::move(m));
      if (asked.empty()) continue;
      if (auto gone = not_owned(asked); !gone.empty()) {
        wire_message moved = params_to(dst, v);
        moved.hdr.kind = msg_kind::moved;
        moved.hdr.map_version = std::max<std::uint64_t>(moved.hdr.map_version, released_for);
        moved.hdr.ranges = std::move(gone);
        ctx->net->send(std::move(moved));
      }
    }
    waiting.erase(it);
  }

  /// Takes a finished piece of the step being applied; sends the pieces taken so far once they
  /// hold piece_floats floats. A piece's values are final: the shard does not write them again
  /// before the next step.
  void on_piece(const ps::piece& p) {
    unsent.push_back(p);
    unsent_floats += p.keys.size();
    if (chain && !chain->may_answer(p.version)) return;  // the step's answers wait for the chain
    if (unsent_floats >= core->options().piece_floats) send_pieces();
  }

  /// Sends the pieces not sent yet to everyone who pushed to the step, one message each.
  void send_pieces() {
    if (unsent.empty()) return;
    auto values = core->share_values();
    std::shared_ptr<const void> owner = values;
    if (!answering) answering = std::make_shared<const answers_token>(self_addr);
    for (const auto& dst : pushers[unsent.front().version - 1]) {
      wire_message m = params_to(dst, unsent.front().version);
      for (const auto& p : unsent) {
        m.hdr.ranges.push_back(p.keys);
        m.frames.push_back(frame::of(owner, values->data() + p.offset, p.keys.size()));
      }
      m.sent = answering;
      ctx->net->send(std::move(m));
    }
    unsent.clear();
    unsent_floats = 0;
  }

  /// The step's answers are all handed to the transport: from now on their token ends when the
  /// last of them has left.
  void answers_made() {
    answers_out = answering;
    answering.reset();
  }

  /// Sends the transfers that waited for the answers, once those are out.
  void send_transfers() {
    if (!answers_out.expired()) return;
    for (auto& m : transfers_waiting) ctx->net->send(std::move(m));
    transfers_waiting.clear();
  }

  /// Answers whoever waits for the current version, and those who pushed to the steps applied
  /// whole (completed outside a push, or by pushes held for them): the current version, which
  /// holds their step's update.
  void answer_applied() {
    const auto v = core->applied_steps();
    for (auto it = pushers.begin(); it != pushers.end() && it->first < v;) {
      for (const auto& p : it->second) waiting[v].push_back({p, {}, false});
      it = pushers.erase(it);
    }
    serve(v);
  }

  void on_configure(const wire_message& m) {
    auto c = read_configure(m, ctx->model.num_params(), ctx->spec.slice_size);
    if (!c) return report(c.error());
    // Steps completed here (a removed worker was the last awaited, or held pushes were taken)
    // are answered as a whole: their pushers get the version from serve().
    auto before = core->applied_steps();
    auto done = core->configure(*c);
    if (!done) report(done.error());
    if (core->applied_steps() > before) answer_applied();
  }

  void on_migrate(const wire_message& m) {
    auto o = read_migrate(m);
    if (!o) return report(o.error());
    if (o->at_version < core->applied_steps())
      return report({errc::protocol_error,
                     coach::format("shard {}: told to hand over keys at version {} but it is at {}",
                                   core->id(), o->at_version, core->applied_steps())});
    releases.push_back(std::move(*o));
  }

  void on_transfer(wire_message& m) {
    // Taken without a copy where it arrived from another process (an empty shard adopts it).
    auto t = read_transfer(std::move(m), scheduler::shard_optimizer(ctx->spec).state_per_param());
    if (!t) return report(t.error());
    adoptions.push_back(std::move(*t));
  }

  /// Hands over and takes slices whose version has come (docs/design.md "Elastic jobs"). A
  /// release waits until the step before the boundary is applied; an adoption until this shard
  /// is at the transfer's version, or at once when it owns nothing. Pushes of the boundary's
  /// step that waited for the move are taken then; a step they complete is answered as a whole.
  ///
  /// Only steps that resume() completes are answered to the pushers: an empty shard's adoption
  /// moves its version from 0 to the transfer's without completing any step, and the pushes it
  /// held are of that step, not of the one before (their workers wait for the next version).
  void run_moves() {
    int completed = 0;
    // An adoption can make a release due (and the reverse): go on until nothing moves.
    for (std::size_t before = SIZE_MAX; before != releases.size() + adoptions.size();) {
      before = releases.size() + adoptions.size();
      completed += run_moves_once();
    }
    if (completed > 0) answer_applied();
  }

  /// One pass over the releases and adoptions due; returns the steps that held pushes taken
  /// after them completed.
  int run_moves_once() {
    int completed = 0;
    for (auto it = releases.begin(); it != releases.end();) {
      // A head whose last step waits for its chain keeps the values that step's answers are
      // made of: it releases once they went out (release_gated).
      if (core->applied_steps() != it->at_version || gated_step) {
        ++it;
        continue;
      }
      auto t = core->release(it->ranges, it->to);
      if (!t) {
        report(t.error());
      } else {
        released_for = std::max(released_for, it->config_version);
        // A backup hands over nothing: the destination's primary gets its primary's transfer.
        if (!chain || chain->head()) {
          auto shared = std::make_shared<const ps::slice_transfer>(std::move(*t));
          transfers_waiting.push_back(
              make_transfer(self_ep, ctx->shard_ep(it->to), ctx->job, shared));
          send_transfers();  // now, unless the step's answers are still going out
        }
        completed += resume();
        serve(core->applied_steps());  // pulls that waited for the release
      }
      it = releases.erase(it);
    }
    for (auto it = adoptions.begin(); it != adoptions.end();) {
      if (!core->ranges().empty() && core->applied_steps() != it->version) {
        ++it;
        continue;
      }
      const transfer_ack ack{it->version, it->from, core->id()};
      if (auto ok = core->adopt(std::move(*it)); !ok) {
        report(ok.error());
      } else {
        if (!chain || chain->head())
          ctx->net->send(make_transfer_ack(self_ep, ctx->master, ctx->job, ack));
        serve(core->applied_steps());  // a new shard may have pulls waiting for this version
        completed += resume();
      }
      it = adoptions.erase(it);
    }
    return completed;
  }

  /// Takes the pushes that waited for a move (ps::shard::resume); returns the steps they
  /// completed (counted by the version, so also when one of them was refused).
  int resume() {
    const auto before = core->applied_steps();
    if (auto done = core->resume(); !done) report(done.error());
    return int(core->applied_steps() - before);
  }

  /// A pull or snapshot request: `asked` are the keys wanted (empty: all this shard owns);
  /// `state`: a snapshot with the optimizer state (answered with every key owned).
  void want(std::int64_t v, const endpoint& who, std::vector<ps::key_range> asked,
            bool pull = false, bool state = false) {
    if (!pull) {
      if (!snapshots_asked.insert(v).second) return;  // asked on the other path already
      if (snapshots_asked.size() > 16) snapshots_asked.erase(snapshots_asked.begin());
    }
    // asp: the steps go on without a worker that starts, so the version it pulls may be gone
    // by the time it asks: it gets the current one (any version will do for it).
    if (pull && v < core->applied_steps() && core->options().one_push_per_step)
      v = core->applied_steps();
    if (v < core->applied_steps() && serve_retained(v, who, state)) return;
    if (v < core->applied_steps()) {
      report(
          {errc::protocol_error, coach::format("shard {}: version {} requested but {} is current",
                                               core->id(), v, core->applied_steps())});
      return;
    }
    waiting[v].push_back({who, std::move(asked), state});
    if (v == core->applied_steps()) serve(v);
  }

  /// asp: the push is applied on arrival (or held for a move), and its worker gets the values
  /// as they are now, whatever it asked for.
  void on_push_alone(std::int64_t step, const wire_message& m, ps::contribution c) {
    auto done = core->push(step, m.hdr.map_version, std::move(c), {});
    if (!done) report(done.error());
    waiting[core->applied_steps()].push_back({m.hdr.src, {}, false});
    serve(core->applied_steps());
  }

  void on_push(wire_message& m) {
    // Replicas: the copy goes on before the frames are taken into the contribution.
    if (chain && !chain->head()) {
      if (chain->has_next()) forward(m);
    } else if ((m.hdr.flags & flag::resent) && held_before(m)) {
      return;
    } else if (chain && chain->has_next()) {
      forward(m);
    }
    ps::contribution c;
    c.rank = m.hdr.rank;
    c.samples = m.hdr.samples;
    c.loss_sum = m.hdr.loss;
    c.stats = ps::grad_stats::from_list(m.hdr.grad_stats);
    if (c.samples > 0) {
      for (const auto& f : m.frames) c.parts.push_back(f.as<float>());
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
    if (chain && !chain->head()) return on_push_copy(step, m, std::move(c));
    // The master's request for the version before this step, on the path that advances this
    // shard past it (a late push of a step applied already carries nothing wanted).
    if ((m.hdr.flags & flag::snapshot) && step >= core->applied_steps())
      want(step, ctx->master, {}, false, (m.hdr.flags & flag::with_state) != 0);
    if (core->options().one_push_per_step) return on_push_alone(step, m, std::move(c));
    // A push asks for the next version too: the step's update comes back as its answer, in
    // pieces, each sent while the next one is being updated.
    // A push sent again (flag::resent) is not answered: its sender pulls what it lacks.
    auto& who = pushers[step];
    const bool answer = !(m.hdr.flags & flag::resent);
    if (answer) who.push_back(m.hdr.src);
    auto done = core->push(step, m.hdr.map_version, std::move(c),
                           [this](const ps::piece& p) { on_piece(p); });
    if (!done) {
      if (answer) who.pop_back();
      if (who.empty()) pushers.erase(step);
      report(done.error());
      return;
    }
    if (*done) {
      if (chain) chain->applied(core->applied_steps());
      if (chain && !chain->may_answer(core->applied_steps())) {
        gated_step = step;  // answered once the chain holds the version (release_gated)
        return;
      }
      answer_step(step);
    }
  }

  /// Sends step `step`'s answers (its last pieces), then answers what waited for its version.
  void answer_step(std::int64_t step) {
    send_pieces();  // the step's last pieces
    answers_made();
    pushers.erase(step);
    // ssp:S: pushes of the next steps held until now may complete them too.
    resume();
    answer_applied();
  }

  // --- replicas (ps/replica_chain.hpp) --------------------------------------------------------

  /// A copy of `m` for the next replica of the chain.
  void forward(const wire_message& m) { ctx->net->send(copy_to(m, next_ep, flag::replica)); }

  /// A backup's copy of a push: applied as the primary applies it, answered to nobody. The
  /// master's snapshot request on it is kept (`retained`) in case the primary's answer is lost.
  void on_push_copy(std::int64_t step, const wire_message& m, ps::contribution c) {
    if ((m.hdr.flags & flag::snapshot) && step == core->applied_steps() &&
        !retained.contains(step)) {
      retained[step] = std::make_shared<const ps::slice_transfer>(core->snapshot());
      if (retained.size() > 2) retained.erase(retained.begin());
    }
    if (auto done = core->push(step, m.hdr.map_version, std::move(c)); !done) report(done.error());
  }

  /// A push sent again to a replica that took over (flag::resent): true when this replica
  /// has it already (applied: the step held every member's push; or held for the open step,
  /// its copy came from the lost primary). The sender pulls what it lacks of the next version.
  bool held_before(const wire_message& m) const {
    return m.hdr.step < core->applied_steps() || core->holds_push(m.hdr.step, m.hdr.rank);
  }

  /// Answers a snapshot request for version `v`, passed already, from a retained copy; false
  /// when none is kept.
  bool serve_retained(std::int64_t v, const endpoint& who, bool state) {
    auto it = retained.find(v);
    if (it == retained.end()) return false;
    const auto& t = it->second;
    if (state) {
      auto m = make_state(self_ep, who, ctx->job, t);
      m.hdr.map_version = core->config_version();
      ctx->net->send(std::move(m));
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
    ctx->net->send(std::move(m));
    return true;
  }

  /// Chain bookkeeping after a message: a backup acknowledges what it holds now; the head
  /// answers what the chain holds now.
  void chain_moved() {
    if (auto v = chain->applied(core->applied_steps())) tell_prev(*v);
    release_gated();
  }

  void tell_prev(std::int64_t v) {
    wire_message m = params_to(prev_ep, v);
    m.hdr.kind = msg_kind::replica_ack;
    m.hdr.rank = core->id();
    ctx->net->send(std::move(m));
  }

  /// The head: answers the step and the requests the chain now holds.
  void release_gated() {
    if (!chain->head()) return;
    serve_passed();
    if (gated_step && chain->may_answer(*gated_step + 1)) {
      const auto step = *gated_step;
      gated_step.reset();
      answer_step(step);
      run_moves();  // a release that waited for the step's answers
      return;
    }
    serve(core->applied_steps());
  }

  /// The head: the master's requests for versions it passed while its chain did not hold them
  /// yet, answered from the copies serve() kept, once the chain holds them.
  void serve_passed() {
    for (auto it = waiting.begin(); it != waiting.end() && it->first < core->applied_steps();) {
      const auto kept = retained.find(it->first);
      if (kept == retained.end() || !chain->may_answer(it->first)) {
        ++it;
        continue;
      }
      for (const auto& w : it->second)
        if (w.who == ctx->master) serve_retained(it->first, w.who, w.state);
      it = waiting.erase(it);
    }
  }

  /// Messages of the chain, and where a replicated shard's messages go. Returns true when `m`
  /// is to be handled as a shard's message here.
  bool chain_entry(wire_message& m) {
    switch (m.hdr.kind) {
      case msg_kind::replica_ack:
        if (auto v = chain->successor_acked(m.hdr.step)) tell_prev(*v);
        release_gated();
        return false;
      case msg_kind::replica_lost:
        if (auto v = chain->successor_lost()) tell_prev(*v);
        release_gated();
        return false;
      case msg_kind::take_over:
        take_over();
        return false;
      default:
        break;
    }
    if (chain->head()) {
      // The head's copies: every message that changes the shard, before it is handled (a push
      // only once it is taken: on_push).
      if (chain->has_next() &&
          (m.hdr.kind == msg_kind::configure || m.hdr.kind == msg_kind::migrate ||
           m.hdr.kind == msg_kind::transfer))
        forward(m);
      return true;
    }
    if (!(m.hdr.flags & flag::replica)) {
      parked.push_back(std::move(m));  // to a primary this replica is not yet
      return false;
    }
    if (chain->has_next() && m.hdr.kind != msg_kind::push) forward(m);
    return true;
  }

  /// This backup becomes its shard's primary (the master's take_over): it answers from now on,
  /// first the messages sent to it as to the primary before it knew.
  void take_over() {
    if (chain->head()) return;
    chain->take_over();
    log::info("job {}: shard {}: backup takes over at version {}", ctx->job, core->id(),
              core->applied_steps());
    auto waiting_msgs = std::move(parked);
    parked.clear();
    for (auto& m : waiting_msgs) {
      if (chain->has_next() &&
          (m.hdr.kind == msg_kind::configure || m.hdr.kind == msg_kind::migrate ||
           m.hdr.kind == msg_kind::transfer))
        forward(m);
      handle(m);
    }
    serve(core->applied_steps());
  }

  /// A shard's message (after chain_entry, for a replicated one).
  void handle(wire_message& m) {
    switch (m.hdr.kind) {
      case msg_kind::push:
        on_push(m);
        break;
      case msg_kind::pull:
        want(m.hdr.step, m.hdr.src, m.hdr.ranges, true);
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
                                                 core->id(), to_string(m.hdr.kind), m.hdr.src.id)});
    }
    run_moves();
    if (chain) chain_moved();
  }
};

caf::behavior shard_actor(caf::stateful_actor<shard_state>* self,
                          std::shared_ptr<const job_context> ctx, std::uint32_t id,
                          std::uint32_t replica, std::vector<ps::key_range> ranges,
                          std::vector<float> initial_owned, ps::job_config cfg,
                          std::optional<ps::slice_transfer> start_from) {
  auto& st = self->state;
  st.ctx = ctx;
  st.self_ep = ctx->replica_ep(id, replica);
  st.self_addr = self->address();
  auto be = kernels::make_backend(kernels::backend_kind::cpu);
  st.be = std::move(*be);
  ps::shard_options options;
  if (ctx->spec.consistency.kind == scheduler::consistency_kind::ssp)
    options.max_ahead = ctx->spec.consistency.staleness;
  if (ctx->spec.consistency.kind == scheduler::consistency_kind::asp) {
    options.one_push_per_step = true;
    options.max_ahead = std::numeric_limits<std::int32_t>::max();  // a straggler's step is open
  }
  // The schedule counts epochs in training samples; batch norm's running statistics are folded
  // in, not trained.
  std::vector<ps::statistic_range> statistics;
  for (const auto& s : ctx->model.statistic_ranges())
    statistics.push_back({{s.keys.begin, s.keys.end}, s.momentum});
  st.core = std::make_unique<ps::shard>(
      id,
      scheduler::shard_optimizer(ctx->spec, ctx->data ? ctx->data->train.rows : 0,
                                 std::move(statistics)),
      *st.be, std::move(ranges), initial_owned, options);
  if (auto ok = st.core->configure(cfg); !ok) st.report(ok.error());
  // A resumed job's shard: its part of the checkpoint, adopted while it owns nothing, gives it
  // the checkpoint's values, state, version and counters.
  if (start_from)
    if (auto ok = st.core->adopt(std::move(*start_from)); !ok) st.report(ok.error());
  if (const auto n = ctx->replicas_of(id); n > 1) {
    st.chain.emplace(st.core->applied_steps(), replica == 0, replica + 1 < n);
    if (replica > 0) st.prev_ep = ctx->replica_ep(id, replica - 1);
    if (replica + 1 < n) st.next_ep = ctx->replica_ep(id, replica + 1);
  }
  return {
      [self](answers_atom) { self->state.send_transfers(); },
      [self](wire_message& m) {
        auto& s = self->state;
        if (s.chain && !s.chain_entry(m)) return;
        s.handle(m);
      },
  };
}

}  // namespace

caf::actor spawn_shard(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                       std::uint32_t id, const std::vector<float>& initial, std::uint32_t replica) {
  std::vector<float> owned;
  for (const auto& r : ctx->map.ranges_of(id))
    owned.insert(owned.end(), initial.begin() + std::ptrdiff_t(r.begin),
                 initial.begin() + std::ptrdiff_t(r.end));
  auto ep = ctx->replica_ep(id, replica);
  auto net = ctx->net;
  auto ranges = ctx->map.ranges_of(id);
  auto cfg = ctx->initial_config();
  auto a = sys.spawn(shard_actor, std::move(ctx), id, replica, std::move(ranges), std::move(owned),
                     std::move(cfg), std::optional<ps::slice_transfer>{});
  bind_while_alive(net, ep, a, true);
  return a;
}

caf::actor spawn_shard(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                       std::uint32_t id, const ps::training_state& from, std::uint32_t replica) {
  auto ep = ctx->replica_ep(id, replica);
  auto net = ctx->net;
  auto part = ps::slice_of(from, ctx->map.ranges_of(id), id);
  auto cfg = ctx->initial_config();
  auto a = sys.spawn(shard_actor, std::move(ctx), id, replica, std::vector<ps::key_range>{},
                     std::vector<float>{}, std::move(cfg),
                     std::optional<ps::slice_transfer>{std::move(part)});
  bind_while_alive(net, ep, a, true);
  return a;
}

caf::actor spawn_added_shard(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                             std::uint32_t id, const ps::job_config& c, std::uint32_t replica) {
  auto ep = ctx->replica_ep(id, replica);
  auto net = ctx->net;
  auto a = sys.spawn(shard_actor, std::move(ctx), id, replica, std::vector<ps::key_range>{},
                     std::vector<float>{}, c, std::optional<ps::slice_transfer>{});
  bind_while_alive(net, ep, a, true);
  return a;
}

}  // namespace coach::actors
