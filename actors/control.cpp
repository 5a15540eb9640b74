// actors/control.cpp: host ids, and control messages as data-path messages (the codec:
// actors/control_encode.cpp and actors/control_decode.cpp).
#include "actors/control.hpp"

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <span>

#include "common/log.hpp"
#include "common/log_limiter.hpp"
#include "worker/script_bundle.hpp"

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
  // message: no copy into a builder, and no Cap'n Proto size limit on a large model. So do a
  // script's initial values and its files.
  const worker::script_payload* script = nullptr;
  if (const auto* sj = std::get_if<start_job>(&m)) {
    if (const auto& s = sj->initial) {
      msg.frames.push_back(frame::of(s, s->values.data(), s->values.size()));
      if (!s->state_a.empty())
        msg.frames.push_back(frame::of(s, s->state_a.data(), s->state_a.size()));
      if (!s->state_b.empty())
        msg.frames.push_back(frame::of(s, s->state_b.data(), s->state_b.size()));
    }
    script = sj->script.get();
  } else if (const auto* q = std::get_if<api_request>(&m)) {
    if (const auto* sub = std::get_if<submit_request>(q); sub && sub->script) {
      script = sub->script.get();
      const auto& v = script->initial;
      msg.frames.push_back(v ? frame::of(v, v->data(), v->size()) : frame{});
    }
  }
  if (script) {
    const auto& b = script->bundle;
    msg.frames.push_back(b ? frame::of(b, b->data(), b->size()) : frame{});
  }
  return msg;
}

namespace {

/// Floats copied out of a frame (a ZeroMQ frame need not be aligned for floats, and the
/// receiver keeps its own copy); nothing when its bytes are not whole f32s.
std::optional<std::vector<float>> floats_of(const frame& f) {
  if (f.bytes % sizeof(float) != 0) return std::nullopt;
  std::vector<float> v(f.bytes / sizeof(float));
  if (f.bytes > 0) std::memcpy(v.data(), f.data, f.bytes);
  return v;
}

/// `script` with the bundle of frame `f` (copied). Errors: over the packed bundle's limit.
result<std::shared_ptr<const worker::script_payload>> with_bundle(
    const std::shared_ptr<const worker::script_payload>& script, const frame& f) {
  if (f.bytes > worker::max_packed_bundle_bytes)
    return fail(errc::protocol_error, "its script's bundle has {} bytes (at most {})", f.bytes,
                worker::max_packed_bundle_bytes);
  auto p = std::make_shared<worker::script_payload>(*script);
  p->bundle = std::make_shared<const std::vector<std::byte>>(f.data, f.data + f.bytes);
  return p;
}

/// A startJob's frames after the first: its initial state (values, then the optimizer's), then
/// its script's bundle when it has a script. A message string on failure.
std::optional<std::string> read_start_frames(start_job& sj, std::span<const frame> extra) {
  if (sj.script) {
    if (extra.empty()) return "startJob has a script and no bundle frame";
    auto s = with_bundle(sj.script, extra.back());
    if (!s) return "startJob: " + s.error().message;
    sj.script = std::move(*s);
    extra = extra.first(extra.size() - 1);
  }
  if (extra.empty()) return std::nullopt;
  if (extra.size() > 3)
    return coach::format("startJob has {} initial state frames (at most 3)", extra.size());
  auto s = std::make_shared<ps::training_state>();
  s->version = sj.first_step;
  std::vector<float>* parts[] = {&s->values, &s->state_a, &s->state_b};
  for (std::size_t i = 0; i < extra.size(); ++i) {
    auto v = floats_of(extra[i]);
    if (!v)
      return coach::format("startJob initial {} of {} bytes are not whole f32s",
                           i == 0 ? "parameters" : "optimizer state", extra[i].bytes);
    *parts[i] = std::move(*v);
  }
  s->updates = sj.initial_updates;
  s->samples_applied = sj.initial_samples_applied;
  sj.initial = std::move(s);
  return std::nullopt;
}

/// A submit's frames after the first: with a script, its initial values then its bundle.
std::optional<std::string> read_submit_frames(submit_request& q, std::span<const frame> extra) {
  if (!q.script && extra.empty()) return std::nullopt;
  if (!q.script || extra.size() != 2)
    return coach::format("submit has {} payload frames ({} with a script)", extra.size() + 1,
                         q.script ? 3 : 1);
  auto v = floats_of(extra[0]);
  if (!v)
    return coach::format("submit's script initial values of {} bytes are not whole f32s",
                         extra[0].bytes);
  auto s = with_bundle(q.script, extra[1]);
  if (!s) return "submit: " + s.error().message;
  auto p = std::make_shared<worker::script_payload>(**s);
  p->initial = std::make_shared<const std::vector<float>>(std::move(*v));
  q.script = std::move(p);
  return std::nullopt;
}

}  // namespace

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
  const auto extra = std::span<const frame>(m.frames).subspan(1);
  std::optional<std::string> why;
  if (auto* sj = std::get_if<start_job>(&*msg)) {
    why = read_start_frames(*sj, extra);
  } else if (auto* sub = std::get_if<api_request>(&*msg)
                             ? std::get_if<submit_request>(&std::get<api_request>(*msg))
                             : nullptr) {
    why = read_submit_frames(*sub, extra);
  } else if (!extra.empty()) {
    why = coach::format(
        "control message has {} payload frames (1, more only for a startJob or "
        "a script's submit)",
        m.frames.size());
  }
  if (why) return drop(*why);
  return std::move(*msg);
}

}  // namespace coach::actors
