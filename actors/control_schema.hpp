#pragma once
// actors/control_schema.hpp: what the control plane's encoder (actors/control_encode.cpp) and
// decoder (actors/control_decode.cpp) share: the limits of a decoded control message
// (docs/wire.md, "Control plane") and the job state's schema enum. Private to those two files.

#include <cstddef>
#include <cstdint>

#include "common/error.hpp"
#include "scheduler/job_status.hpp"
#include "schemas/control.capnp.h"

namespace coach::actors::control_detail {

namespace schema = coach::schemas;
using scheduler::job_state;

// Limits of a decoded control message (docs/wire.md, "Control plane"). Encode never exceeds the
// text limits (it cuts); lists beyond the list limits are the caller's to avoid.
inline constexpr std::size_t max_payload_bytes = 16 << 20;  // a whole ControlMessage, checked first
inline constexpr std::size_t max_spec_bytes = 1 << 20;      // start_job / submit_request spec_yaml
inline constexpr std::size_t max_text_bytes =
    4096;  // every other text: names, addresses, paths, errors
inline constexpr std::size_t max_model_bytes = 1 << 20;  // a job status's model JSON
inline constexpr std::size_t max_epochs = 1 << 20;       // epochs listed in one job status
inline constexpr std::size_t max_items = 4096;     // nodes, jobs, peers, hosts by shard or rank
inline constexpr std::size_t max_links = 1 << 16;  // traffic entries of one heartbeat or job status
inline constexpr std::size_t max_gpus_held = 1 << 16;       // GPUs held by workers in one heartbeat
inline constexpr std::size_t max_gpus = 1024;               // ids in one GPU list
inline constexpr std::size_t max_slices = 1 << 24;          // slice owners of one job configuration
inline constexpr std::size_t max_config_members = 1 << 16;  // worker ranks of one configuration

inline constexpr std::uint16_t max_errc =
    std::uint16_t(errc::not_authorized);  // highest code in error.hpp
inline constexpr std::size_t word_bytes = sizeof(capnp::word);

inline schema::JobState to_wire(job_state s) noexcept {
  switch (s) {
    case job_state::queued:
      return schema::JobState::QUEUED;
    case job_state::running:
      return schema::JobState::RUNNING;
    case job_state::suspended:
      return schema::JobState::SUSPENDED;
    case job_state::succeeded:
      return schema::JobState::SUCCEEDED;
    case job_state::failed:
      return schema::JobState::FAILED;
    case job_state::cancelled:
      return schema::JobState::CANCELLED;
  }
  return schema::JobState::FAILED;
}

}  // namespace coach::actors::control_detail
