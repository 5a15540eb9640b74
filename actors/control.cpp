// actors/control.cpp: host ids, and control messages as data-path messages (the codec:
// actors/control_encode.cpp and actors/control_decode.cpp).
#include "actors/control.hpp"

#include <chrono>
#include <cstring>
#include <memory>
#include <random>

#include "common/log.hpp"
#include "common/log_limiter.hpp"

namespace coach::actors {

std::uint32_t node_host_id(std::string_view address) noexcept {
  std::uint32_t h = 2166136261u;  // FNV-1a, 32 bits
  for (const char c : address) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  h &= 0x7fffffffu;
  return h == 0 ? 1 : h;
}

std::uint32_t client_host_id() noexcept {
  std::uint32_t r = 0;
  try {
    std::random_device device;
    r = device();
  } catch (...) {
    // No entropy source: the clock and a stack address still differ between processes.
    const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
    const auto a = reinterpret_cast<std::uintptr_t>(&r);
    r = static_cast<std::uint32_t>(t ^ (t >> 32) ^ a ^ (a >> 32));
  }
  return r | 0x80000000u;
}

wire_message make_control(const endpoint& src, const endpoint& dst, const control_message& m) {
  wire_message msg;
  msg.hdr.src = src;
  msg.hdr.dst = dst;
  msg.hdr.kind = msg_kind::control;
  msg.hdr.job = std::visit(
      [](const auto& v) -> std::uint64_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, start_job> || std::is_same_v<T, stop_job> ||
                      std::is_same_v<T, command_reply>) {
          return v.job;
        } else if constexpr (std::is_same_v<T, api_request>) {
          return std::visit(
              [](const auto& q) -> std::uint64_t {
                if constexpr (requires { q.job; })
                  return q.job;
                else
                  return 0;
              },
              v);
        } else if constexpr (std::is_same_v<T, api_reply>) {
          if (const auto* s = std::get_if<submit_reply>(&v.body)) return s->job;
          return 0;
        } else {
          return 0;  // a heartbeat is about no job
        }
      },
      m);
  auto bytes = std::make_shared<std::vector<std::byte>>(control_codec::encode(m));
  const std::byte* data = bytes->data();
  const std::size_t size = bytes->size();
  msg.frames.push_back(frame{std::move(bytes), data, size});
  // A resumed job's values and optimizer state go as raw floats next to the Cap'n Proto
  // message: no copy into a builder, and no Cap'n Proto size limit on a large model.
  if (const auto* sj = std::get_if<start_job>(&m); sj && sj->initial) {
    const auto& s = sj->initial;
    msg.frames.push_back(frame::of(s, s->values.data(), s->values.size()));
    if (!s->state_a.empty())
      msg.frames.push_back(frame::of(s, s->state_a.data(), s->state_a.size()));
    if (!s->state_b.empty())
      msg.frames.push_back(frame::of(s, s->state_b.data(), s->state_b.size()));
  }
  return msg;
}

std::optional<control_message> read_control(const wire_message& m) {
  if (m.hdr.kind != msg_kind::control || m.frames.empty()) return std::nullopt;
  auto msg = control_codec::decode({m.frames[0].data, m.frames[0].bytes});
  auto drop = [&](const std::string& why) -> std::optional<control_message> {
    // At most 5 lines a second: a flood of bad control messages once logged each of them.
    static log_limiter limit;
    if (const auto suffix = limit.allow())
      log::warn("dropped a control message from host {}: {}{}", m.hdr.src.host, why, *suffix);
    return std::nullopt;
  };
  if (!msg) return drop(msg.error().message);
  if (m.frames.size() == 1) return std::move(*msg);
  auto* sj = std::get_if<start_job>(&*msg);
  if (!sj || m.frames.size() > 4)
    return drop(coach::format("control message has {} payload frames (1, or 2 to 4 for a startJob)",
                              m.frames.size()));
  auto s = std::make_shared<ps::training_state>();
  s->version = sj->first_step;
  std::vector<float>* parts[] = {&s->values, &s->state_a, &s->state_b};
  for (std::size_t i = 1; i < m.frames.size(); ++i) {
    const auto& f = m.frames[i];
    if (f.bytes % sizeof(float) != 0)
      return drop(coach::format("startJob initial {} of {} bytes are not whole f32s",
                                i == 1 ? "parameters" : "optimizer state", f.bytes));
    // Copied: a ZeroMQ frame need not be aligned for floats, and the shards keep their own copy.
    parts[i - 1]->resize(f.bytes / sizeof(float));
    if (f.bytes > 0) std::memcpy(parts[i - 1]->data(), f.data, f.bytes);
  }
  s->updates = sj->initial_updates;
  s->samples_applied = sj->initial_samples_applied;
  sj->initial = std::move(s);
  return std::move(*msg);
}

}  // namespace coach::actors
