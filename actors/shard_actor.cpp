#include <caf/all.hpp>

#include <cstdio>
#include <map>

#include "actors/roles.hpp"
#include "ps/shard.hpp"

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

namespace {

struct shard_state {
  std::shared_ptr<const job_context> ctx;
  endpoint self_ep;
  std::unique_ptr<kernels::backend> be;
  std::unique_ptr<ps::shard> core;
  std::map<std::int64_t, std::vector<endpoint>> waiting;  ///< version -> who wants it
  std::uint64_t protocol_errors = 0;
  static inline const char* name = "coach.ps_shard";

  void report(const coach::error& e) {
    ++protocol_errors;
    std::fprintf(stderr, "coach: %s\n", e.to_string().c_str());
  }

  /// Sends version `v` of the owned values to everyone waiting for it (one shared copy).
  void serve(std::int64_t v) {
    auto it = waiting.find(v);
    if (it == waiting.end()) return;
    // Shared, not copied: the shard copies on write if a reader still holds it (ps/shard.hpp).
    auto values = core->share_values();
    std::shared_ptr<const void> owner = values;
    for (const auto& dst : it->second) {
      wire_message m;
      m.hdr.src = self_ep;
      m.hdr.dst = dst;
      m.hdr.kind = msg_kind::params;
      m.hdr.job = ctx->job;
      m.hdr.map_version = ctx->map.version();
      m.hdr.step = v;
      m.hdr.ranges = core->ranges();
      std::size_t off = 0;
      for (const auto& r : core->ranges()) {
        m.frames.push_back(frame::of(owner, values->data() + off, r.size()));
        off += r.size();
      }
      ctx->net->send(std::move(m));
    }
    waiting.erase(it);
  }

  void want(std::int64_t v, const endpoint& who) {
    if (v < core->applied_steps()) {
      report(
          {errc::protocol_error, coach::format("shard {}: version {} requested but {} is current",
                                               core->id(), v, core->applied_steps())});
      return;
    }
    waiting[v].push_back(who);
    if (v == core->applied_steps()) serve(v);
  }

  void on_push(wire_message& m) {
    ps::contribution c;
    c.rank = m.hdr.rank;
    c.samples = m.hdr.samples;
    c.loss_sum = m.hdr.loss;
    if (c.samples > 0) {
      for (const auto& f : m.frames) c.parts.push_back(f.as<float>());
      c.keep_alive = m.frames.empty() ? nullptr : m.frames.front().owner;
    }
    const std::int64_t step = m.hdr.step;
    auto done = core->push(step, std::move(c));
    if (!done) {
      report(done.error());
      return;
    }
    // A push asks for the next version too: the step's update comes back as its answer.
    waiting[step + 1].push_back(m.hdr.src);
    if (*done) serve(core->applied_steps());
  }
};

caf::behavior shard_actor(caf::stateful_actor<shard_state>* self,
                          std::shared_ptr<const job_context> ctx, std::uint32_t id,
                          std::vector<float> initial_owned) {
  auto& st = self->state;
  st.ctx = ctx;
  st.self_ep = ctx->shards.at(id);
  auto be = kernels::make_backend(kernels::backend_kind::cpu);
  st.be = std::move(*be);
  st.core = std::make_unique<ps::shard>(id, ctx->spec.optimizer, *st.be, ctx->map.ranges_of(id),
                                        initial_owned);
  std::vector<std::uint32_t> members;
  for (std::uint32_t r = 0; r < ctx->workers.size(); ++r) members.push_back(r);
  st.core->set_members(std::move(members));
  return {
      [self](wire_message& m) {
        auto& s = self->state;
        switch (m.hdr.kind) {
          case msg_kind::push:
            s.on_push(m);
            break;
          case msg_kind::pull:
          case msg_kind::snapshot_request:
            s.want(m.hdr.step, m.hdr.src);
            break;
          default:
            s.report({errc::protocol_error,
                      coach::format("shard {}: unexpected message {} from {}", s.core->id(),
                                    to_string(m.hdr.kind), m.hdr.src.id)});
        }
      },
  };
}

}  // namespace

caf::actor spawn_shard(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                       std::uint32_t id, const std::vector<float>& initial) {
  std::vector<float> owned;
  for (const auto& r : ctx->map.ranges_of(id))
    owned.insert(owned.end(), initial.begin() + std::ptrdiff_t(r.begin),
                 initial.begin() + std::ptrdiff_t(r.end));
  auto ep = ctx->shards.at(id);
  auto net = ctx->net;
  auto a = sys.spawn(shard_actor, std::move(ctx), id, std::move(owned));
  net->bind(ep, a);
  return a;
}

}  // namespace coach::actors
