// actors/job_context.cpp: a job's endpoints, its context as one host sees it, the devices of
// its workers in this process and the host reducer that fits them.
#include <cstdio>
#include <string>

#include "actors/job_context.hpp"
#include "common/log.hpp"
#include "kernels/cpu/cpu_backend.hpp"

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

result<std::shared_ptr<job_context>> make_job_context(
    std::uint64_t job, const scheduler::job_spec& spec,
    std::shared_ptr<const worker::dataset_pair> data, std::shared_ptr<transport> net,
    std::uint32_t master_host, const std::vector<std::uint32_t>& shard_hosts,
    const std::vector<std::uint32_t>& worker_hosts) {
  auto model = worker::network::for_data(spec.model, data->train);
  if (!model) return fail(model.error().code, "job '{}': {}", spec.name, model.error().message);
  auto ctx = std::make_shared<job_context>(job_context{
      .job = job,
      .spec = spec,
      .backend = kernels::backend_kind::cpu,
      .data = data,
      .model = std::move(*model),
      .map = {},
      .net = std::move(net),
      .master = master_endpoint(job),
      .shards = {},
      .workers = {},
  });
  ctx->map = ps::shard_map::even(ctx->model.num_params(), spec.slice_size,
                                 std::uint32_t(shard_hosts.size()));
  ctx->master.host = master_host;
  for (std::uint32_t k = 0; k < shard_hosts.size(); ++k) {
    auto ep = shard_endpoint(job, k);
    ep.host = shard_hosts[k];
    ctx->shards.push_back(ep);
  }
  for (std::uint32_t r = 0; r < worker_hosts.size(); ++r) {
    auto ep = worker_endpoint(job, r);
    ep.host = worker_hosts[r];
    ctx->workers.push_back(ep);
  }
  // The backend the job's workers here run on (the node agent then sets up their devices and
  // host reduction: setup_job_devices).
  if (ctx->spec.backend == kernels::backend_kind::auto_select)
    ctx->backend =
        kernels::cuda_device_present() ? kernels::backend_kind::cuda : kernels::backend_kind::cpu;
  else
    ctx->backend = ctx->spec.backend;
  return ctx;
}

void setup_job_devices(job_context& ctx, kernels::backend_kind resolved,
                       std::shared_ptr<worker::device_assignment>& process_devices) {
  const bool device = resolved == kernels::backend_kind::cuda;
  if (device) {
    if (!process_devices)
      process_devices = std::make_shared<worker::device_assignment>(kernels::device_count());
    ctx.devices = process_devices;
  }
  if (!ctx.spec.host_reduce) return;
  const std::size_t n = ctx.model.num_params();
  if (!device) {
    ctx.reducer = std::make_shared<worker::host_reducer>(n);
    return;
  }
  ctx.device_reducer = std::make_shared<worker::device_reducer>(
      n, [resolved](int d) { return kernels::make_backend(resolved, d); },
      [](std::span<kernels::backend* const> ranks) {
        return kernels::make_device_all_reduce(ranks);
      });
}

namespace {

/// make_worker_backend before the precision is set.
result<std::unique_ptr<kernels::backend>> backend_for(const job_context& ctx, std::uint32_t rank,
                                                      std::string_view who) {
  if (!ctx.devices) {
    auto be = kernels::make_backend(ctx.spec.backend);
    // The cpu kernel (COACH_CPU_KERNEL or the widest this CPU has), once a job: every worker of
    // a process runs the same.
    if (be && rank == 0)
      if (const auto* cpu = dynamic_cast<const kernels::cpu_backend*>(be->get()))
        log::info("job {}: workers on the cpu, {} kernel", ctx.job,
                  kernels::to_string(cpu->gemm_kind()));
    return be;
  }
  // No device at all: the backend's own error says why (the CUDA runtime's reason).
  if (kernels::device_count() == 0) return kernels::make_backend(kernels::backend_kind::cuda);
  auto d = ctx.devices->take(ctx.job, rank, ctx.spec.gpus_per_worker);
  if (!d) return std::unexpected(d.error());
  auto be = kernels::make_backend(kernels::backend_kind::cuda, *d);
  if (!be) {
    ctx.devices->release(ctx.job, rank);
    return be;
  }
  log::info("{}: job {}: worker {} on cuda device {}", who, ctx.job, rank, *d);
  return be;
}

}  // namespace

result<std::unique_ptr<kernels::backend>> make_worker_backend(const job_context& ctx,
                                                              std::uint32_t rank,
                                                              std::string_view who) {
  auto be = backend_for(ctx, rank, who);
  if (be) (*be)->set_precision(ctx.spec.precision);
  return be;
}

}  // namespace coach::actors
