#include <caf/all.hpp>

#include <limits>
#include <optional>

#include "actors/roles.hpp"
#include "common/log.hpp"
#include "ps/shard.hpp"
#include "ps/training_state.hpp"
#include "shard/shard_server.hpp"

namespace coach::actors {

namespace {

/// (answers_atom): the answers of the last applied step have left this process.
using answers_atom = caf::atom_constant<caf::atom("answered")>;

struct shard_state {
  std::optional<shard::shard_server> server;
  static inline const char* name = "coach.ps_shard";
};

caf::behavior shard_actor(caf::stateful_actor<shard_state>* self,
                          std::shared_ptr<const job_context> ctx, std::uint32_t id,
                          std::uint32_t replica, std::vector<ps::key_range> ranges,
                          std::vector<float> initial_owned, ps::job_config cfg,
                          std::optional<ps::slice_transfer> start_from) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  auto options = ps::make_consistency(ctx->spec.consistency)->shard_rules();
  // Sparse tables: the shard holds the rows of the buckets its keys carry (ps/shard_rows.hpp).
  if (!ctx->model.tables().empty()) {
    ps::sparse_rows_config rows;
    rows.seed = ctx->spec.seed;
    for (const auto& t : ctx->model.tables()) rows.tables.push_back(t.config);
    rows.optimizer = ctx->spec.sparse_optimizer;
    rows.num_params = ctx->model.num_params();
    options.rows = std::move(rows);
  }
  // The schedule counts epochs in training samples; batch norm's running statistics are folded
  // in, not trained.
  std::vector<ps::statistic_range> statistics;
  for (const auto& s : ctx->model.statistic_ranges())
    statistics.push_back({{s.keys.begin, s.keys.end}, s.momentum});
  auto core = std::make_unique<ps::shard>(
      id,
      scheduler::shard_optimizer(ctx->spec, ctx->data ? ctx->data->train.rows : 0,
                                 std::move(statistics)),
      *be, std::move(ranges), initial_owned, options);
  if (auto ok = core->configure(cfg); !ok) log::warn("{}", ok.error().to_string());
  // A resumed job's shard: its part of the checkpoint, adopted while it owns nothing, gives it
  // the checkpoint's values, state, version and counters.
  if (start_from)
    if (auto ok = core->adopt(std::move(*start_from)); !ok) log::warn("{}", ok.error().to_string());
  shard::shard_server_setup setup;
  setup.job = ctx->job;
  setup.self = ctx->replica_ep(id, replica);
  setup.master = ctx->master;
  setup.shard_ep = [c = ctx.get()](std::uint32_t k) { return c->shard_ep(k); };
  setup.num_params = ctx->model.num_params();
  setup.slice_size = ctx->spec.slice_size;
  setup.state_per_param = scheduler::shard_optimizer(ctx->spec).state_per_param();
  setup.replica = replica;
  setup.replicas = ctx->replicas_of(id);
  if (replica > 0) setup.prev = ctx->replica_ep(id, replica - 1);
  if (replica + 1 < setup.replicas) setup.next = ctx->replica_ep(id, replica + 1);
  shard::shard_server_ports ports;
  // The context outlives the shard (held here).
  ports.send = [ctx](wire_message m) { ctx->net->send(std::move(m)); };
  // On ZeroMQ's I/O thread, and only for a step that a transfer waits behind.
  ports.answers_gone = [addr = self->address()] {
    if (auto me = caf::actor_cast<caf::actor>(addr)) caf::anon_send(me, answers_atom::value);
  };
  self->state.server.emplace(std::move(setup), std::move(ports), std::move(be), std::move(core));
  return {
      [self](answers_atom) { self->state.server->answers_left(); },
      [self](wire_message& m) { self->state.server->on_message(m); },
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
  if (!ctx->model.tables().empty()) {
    // The checkpoint's rows of the buckets this shard's keys carry (ps/shard_rows.hpp): every
    // shard's rows merged, this shard's taken out.
    std::vector<sparse::table_config> tables;
    for (const auto& t : ctx->model.tables()) tables.push_back(t.config);
    const sparse::bucket_range all[] = {{0, sparse::bucket_count}};
    auto store = sparse::row_store::create(ctx->spec.seed, std::move(tables),
                                           ctx->spec.sparse_optimizer, all);
    for (const auto& blob : from.rows)
      if (store)
        if (auto ok = store->merge(blob); !ok) log::warn("{}", ok.error().to_string());
    if (store) {
      const auto mine = ctx->map.ranges_of(id);
      auto rows = store->release(ps::buckets_of(mine, ctx->model.num_params()));
      if (rows)
        part.rows = std::move(*rows);
      else
        log::warn("{}", rows.error().to_string());
    }
  }
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
