#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "actors/inline_delivery.hpp"
#include "actors/roles.hpp"
#include "common/log.hpp"
#include "worker/function_runner.hpp"
#include "worker/worker_server.hpp"

namespace coach::actors {
namespace {

using answers_late_atom = caf::atom_constant<caf::atom("ansLate")>;

struct worker_state {
  std::unique_ptr<worker::worker_server> server;
  static inline const char* name = "coach.worker";
};

/// Function mode: the runner of the job's invocations (worker/function_runner.hpp).
result<std::unique_ptr<worker::function_runner>> make_functions(const job_context& ctx,
                                                                bool averaging,
                                                                const kernels::sgd_options& local) {
  const auto& fn = *ctx.spec.function;
  auto program = worker::find_invocation_program();
  if (!program) return std::unexpected(program.error());
  worker::invocation_setup setup;
  setup.model = ctx.spec.model;
  setup.shape = ctx.model.input_shape();
  setup.inputs = ctx.model.inputs();
  setup.classes = ctx.model.classes();
  if (!ctx.model.tables().empty()) {
    // The tables resolve in the child against the fields; its tasks carry the dense features.
    setup.inputs = int(ctx.model.dense_inputs());
    setup.fields = std::uint32_t(ctx.data->train.fields);
  }
  // The largest share a step may give this worker (the invocation refuses larger ones).
  setup.max_batch = ctx.spec.fixed_global_batch()
                        ? std::max(ctx.spec.batch_size, ctx.spec.global_batch)
                        : ctx.spec.batch_size;
  setup.averaging = averaging;
  setup.local = local;
  const worker::process_limits limits{
      std::chrono::milliseconds(std::int64_t(fn.deadline_s * 1000.0)), fn.memory_mb << 20};
  return std::make_unique<worker::function_runner>(*program, std::move(setup), limits,
                                                   fn.chunks_per_invocation);
}

/// What worker `rank` of the job in `ctx` is and trains (the server's setup).
result<worker::worker_server_setup> server_setup(std::shared_ptr<const job_context> ctx,
                                                 std::uint32_t rank) {
  worker::worker_server_setup s;
  s.job = ctx->job;
  s.rank = rank;
  s.self = ctx->worker_ep(rank);
  s.master = ctx->master;
  s.shard_ep = [ctx](std::uint32_t k) { return ctx->shard_ep(k); };
  s.worker_ep = [ctx](std::uint32_t r) { return ctx->worker_ep(r); };
  s.model = std::shared_ptr<const worker::network>(ctx, &ctx->model);
  s.data = ctx->data;
  s.slice_size = ctx->spec.slice_size;
  s.batch_size = ctx->spec.batch_size;
  s.clip_norm = ctx->spec.optimizer.clip_norm;
  s.replicas = ctx->spec.replicas;
  s.consistency = ps::make_consistency(ctx->spec.consistency);
  s.local = ctx->spec.optimizer.sgd;
  if (ctx->spec.optimizer.kind == ps::optimizer_kind::sgd) s.local.momentum = 0;
  s.reducer = ctx->reducer;
  s.device_reducer = ctx->device_reducer;
  s.devices = ctx->devices;
  s.slowdown = ctx->slowdown;
  // COACH_COPY_OVERLAP=0 turns the overlap off (to measure what it gains: docs/cuda.md).
  const char* overlap = std::getenv("COACH_COPY_OVERLAP");
  s.copy_overlap = !(overlap && std::string_view(overlap) == "0");
  if (const auto& ext = ctx->model.external()) s.external = ext->pool;
  if (ctx->spec.function && s.external) {  // a script's processes are its invocations
    const auto& fn = *ctx->spec.function;
    worker::script_limits lim;
    lim.deadline = std::chrono::milliseconds(std::int64_t(fn.deadline_s * 1000.0));
    lim.steps_per_invocation = fn.chunks_per_invocation;
    lim.memory_bytes = fn.memory_mb << 20;
    s.script_limits = lim;
  } else if (ctx->spec.function) {
    auto fns = make_functions(*ctx, s.consistency->pushes_deltas(), s.local);
    if (!fns) return std::unexpected(fns.error());
    s.functions = std::move(*fns);
  }
  return s;
}

caf::behavior worker_actor(caf::stateful_actor<worker_state>* self,
                           std::shared_ptr<const job_context> ctx, std::uint32_t rank,
                           std::shared_ptr<kernels::backend> be, ps::job_config cfg,
                           std::int64_t first_step) {
  const auto self_ep = ctx->worker_ep(rank);
  auto end = [self, net = ctx->net, self_ep, rank](const coach::error* e) {
    if (e) log::warn("worker {}: {}", rank, e->message);
    net->unbind(self_ep);
    if (e)
      self->quit(caf::make_error(caf::sec::runtime_error, e->message));
    else
      self->quit();
  };
  auto setup = server_setup(ctx, rank);
  if (!setup) {
    if (ctx->devices) ctx->devices->release(ctx->job, rank);  // for a later worker
    end(&setup.error());
    return {};
  }
  worker::worker_server_ports ports;
  ports.send = [net = ctx->net](wire_message m) { net->send(std::move(m)); };
  // asp: a shard whose ranges move while a push to it is out may answer it late or not at all
  // (one left owning nothing sends no values): the wait for a push's answers ends after
  // asp_answer_wait, and the step computes from what is here, as asp allows.
  ports.bound_wait = [self](std::int64_t step) {
    self->delayed_send(self, worker::worker_server::asp_answer_wait, answers_late_atom::value,
                       step);
  };
  ports.fail = [end](coach::error e) { end(&e); };
  // A shard of this process that the pushes wake runs on this thread once the step's messages
  // are out (this thread only waits for its answer then): no scheduler thread is woken for it,
  // and its reply finds this one awake.
  ports.push_scope = [] { return std::shared_ptr<void>(std::make_shared<inline_scope>()); };
  ports.took_over = [ctx](std::uint32_t k, endpoint head) { ctx->added->take_over(k, head); };
  self->state.server = std::make_unique<worker::worker_server>(
      std::move(*setup), std::move(ports), std::move(be), std::move(cfg), first_step);
  return {
      [self](start_atom) { self->state.server->start(); },
      [self](answers_late_atom, std::int64_t step) { self->state.server->answers_late(step); },
      [self, end](wire_message& m) {
        if (!self->state.server->on_message(m)) end(nullptr);
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
