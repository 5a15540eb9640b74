#pragma once
// Helpers of the tests that drive transports directly: an actor that hands what it receives to
// the test, polling for a condition, and a numbered push message.
#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "actors/messages.hpp"

namespace coach::actors {

/// An actor that forwards every wire_message to `sink` (a scoped actor in the test).
inline caf::behavior forwarder(caf::event_based_actor*, caf::actor sink) {
  return {[sink](wire_message& m) { caf::anon_send(sink, std::move(m)); }};
}

/// Polls `pred` every 5 ms for up to `timeout`; its last value.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(3)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

/// A push of job 9 and step `step` carrying `floats` floats step, step + 1, ...
inline wire_message numbered(const endpoint& src, const endpoint& dst, std::int64_t step,
                             std::size_t floats = 4) {
  auto data = std::make_shared<std::vector<float>>(floats);
  std::iota(data->begin(), data->end(), float(step));
  wire_message m;
  m.hdr.src = src;
  m.hdr.dst = dst;
  m.hdr.kind = msg_kind::push;
  m.hdr.job = 9;
  m.hdr.step = step;
  m.hdr.ranges = {{0, floats}};
  m.frames.push_back(frame::of(data, data->data(), data->size()));
  return m;
}

}  // namespace coach::actors
