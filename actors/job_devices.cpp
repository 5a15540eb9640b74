// The devices of a job's workers in this process, and the host reducer that fits them
// (actors/job_context.hpp).
#include <cstdio>
#include <string>

#include "actors/job_context.hpp"
#include "common/log.hpp"

namespace coach::actors {

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
  if (!ctx.devices) return kernels::make_backend(ctx.spec.backend);
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
