#pragma once
// Faults for embedded runs (train_options::wrap_transport), through actors/faulty_transport.hpp.
#include <cstdint>
#include <functional>
#include <memory>

#include "actors/faulty_transport.hpp"
#include "actors/job_context.hpp"

namespace coach::actors {

/// Worker `rank` of the run's job (the first: id 1) crashes in step `step` once its first push
/// is out: its push reached its first shard only (with one shard, its step report is lost).
inline std::function<std::shared_ptr<transport>(std::shared_ptr<transport>)>
crash_worker_after_first_push(std::uint32_t rank, std::int64_t step) {
  return [=](std::shared_ptr<transport> inner) -> std::shared_ptr<transport> {
    auto faulty = faulty_transport::wrap(std::move(inner), {});
    faulty->crash_after(worker_endpoint(1, rank), msg_kind::push, step, 1);
    return faulty;
  };
}

}  // namespace coach::actors
