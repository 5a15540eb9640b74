#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <map>

#include "actors/roles.hpp"
#include "common/buffer_pool.hpp"

namespace coach::actors {
namespace {

struct worker_state {
  std::shared_ptr<const job_context> ctx;
  std::uint32_t rank = 0;
  endpoint self_ep;
  std::shared_ptr<kernels::backend> be;
  std::unique_ptr<worker::mlp_runner> runner;
  float* params = nullptr;  ///< backend memory: the parameters assembled from the shards
  /// Zero copy: with a host backend and one shard owning the whole vector, the step computes
  /// straight from the shard's shared values (held here until the step's gradient is computed).
  frame whole;
  float* grad = nullptr;  ///< backend memory (only for a backend whose memory is not the host's)
  bool host_backend = true;
  std::unique_ptr<buffer_pool> grads;              ///< host gradients pushed to the shards
  std::vector<std::vector<ps::key_range>> ranges;  ///< per shard, from the map
  std::int64_t step = 0;
  std::size_t params_received = 0;
  std::map<std::int64_t, wire_message> grants;  ///< chunk grants by step
  static inline const char* name = "coach.worker";

  ~worker_state() {
    if (be) {
      be->free(params);
      be->free(grad);
    }
  }

  wire_message to(const endpoint& dst, msg_kind kind) const {
    wire_message m;
    m.hdr.src = self_ep;
    m.hdr.dst = dst;
    m.hdr.kind = kind;
    m.hdr.job = ctx->job;
    m.hdr.map_version = ctx->map.version();
    m.hdr.rank = rank;
    m.hdr.step = step;
    return m;
  }

  void start() {
    for (const auto& s : ctx->shards) ctx->net->send(to(s, msg_kind::pull));
    ctx->net->send(to(ctx->master, msg_kind::chunk_request));
  }

  void on_params(const wire_message& m) {
    if (m.hdr.step != step) {
      std::fprintf(stderr, "coach: worker %u: parameters of version %lld while at step %lld\n",
                   rank, static_cast<long long>(m.hdr.step), static_cast<long long>(step));
      return;
    }
    const std::size_t n = ctx->model.num_params();
    if (host_backend && m.frames.size() == 1 && m.hdr.ranges.size() == 1 &&
        m.hdr.ranges[0] == ps::key_range{0, n} && m.frames[0].bytes == n * sizeof(float)) {
      whole = m.frames[0];
      ++params_received;
      return;
    }
    for (std::size_t i = 0; i < m.hdr.ranges.size() && i < m.frames.size(); ++i) {
      const auto& r = m.hdr.ranges[i];
      const auto values = m.frames[i].as<float>();
      if (values.size() != r.size() || r.end > ctx->model.num_params()) {
        std::fprintf(stderr, "coach: worker %u: malformed parameters from shard %llu\n", rank,
                     static_cast<unsigned long long>(m.hdr.src.id));
        return;
      }
      be->upload(params + r.begin, values.data(), values.size());
    }
    ++params_received;
  }

  /// Runs the step when its chunk and every shard's parameters are here.
  void try_step() {
    auto it = grants.find(step);
    if (it == grants.end() || params_received < ctx->shards.size()) return;
    const wire_message& g = it->second;
    std::span<const std::uint32_t> indices;
    if (!(g.hdr.flags & flag::no_chunk) && !g.frames.empty())
      indices = g.frames.front().as<std::uint32_t>();

    auto buf = grads->acquire();
    const auto t0 = std::chrono::steady_clock::now();
    float* out = host_backend ? buf->data() : grad;
    const float* w = whole.data ? whole.as<float>().data() : params;
    const double loss = runner->forward_backward(w, ctx->data->train, indices, out);
    whole = frame{};  // let the shard update in place
    if (!host_backend) be->download(buf->data(), grad, buf->size());
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count();

    std::shared_ptr<const void> owner = buf;
    for (std::size_t k = 0; k < ctx->shards.size(); ++k) {
      auto m = to(ctx->shards[k], msg_kind::push);
      m.hdr.samples = indices.size();
      if (!indices.empty()) {
        m.hdr.ranges = ranges[k];
        for (const auto& r : ranges[k])
          m.frames.push_back(frame::of(owner, buf->data() + r.begin, r.size()));
      }
      ctx->net->send(std::move(m));
    }
    auto report = to(ctx->master, msg_kind::step_report);
    report.hdr.samples = indices.size();
    report.hdr.loss = loss;
    report.hdr.epoch = g.hdr.epoch;
    report.hdr.chunk_id = g.hdr.chunk_id;
    report.hdr.flags = g.hdr.flags;
    report.hdr.compute_us = std::uint64_t(us);
    ctx->net->send(std::move(report));

    grants.erase(it);
    ++step;
    params_received = 0;
    ctx->net->send(to(ctx->master, msg_kind::chunk_request));
  }
};

caf::behavior worker_actor(caf::stateful_actor<worker_state>* self,
                           std::shared_ptr<const job_context> ctx, std::uint32_t rank,
                           std::shared_ptr<kernels::backend> be) {
  auto& st = self->state;
  st.ctx = ctx;
  st.rank = rank;
  st.self_ep = ctx->workers.at(rank);
  st.be = std::move(be);
  st.host_backend = st.be->name() == "cpu";
  const std::size_t n = ctx->model.num_params();
  st.params = st.be->alloc(n);
  if (!st.host_backend) st.grad = st.be->alloc(n);
  st.runner = std::make_unique<worker::mlp_runner>(ctx->model, *st.be, ctx->spec.batch_size);
  st.grads = std::make_unique<buffer_pool>(n);
  for (std::uint32_t k = 0; k < ctx->shards.size(); ++k) st.ranges.push_back(ctx->map.ranges_of(k));
  return {
      [self](start_atom) { self->state.start(); },
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
          default:
            std::fprintf(stderr, "coach: worker %u: unexpected message %s\n", s.rank,
                         std::string(to_string(m.hdr.kind)).c_str());
            return;
        }
        s.try_step();
      },
  };
}

}  // namespace

caf::actor spawn_worker(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                        std::uint32_t rank, std::shared_ptr<kernels::backend> be) {
  auto ep = ctx->workers.at(rank);
  auto net = ctx->net;
  auto a = sys.spawn<caf::detached>(worker_actor, std::move(ctx), rank, std::move(be));
  net->bind(ep, a);
  caf::anon_send(a, start_atom::value);
  return a;
}

}  // namespace coach::actors
