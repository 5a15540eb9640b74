#include "wire/message.hpp"

namespace coach::wire {

std::string_view to_string(msg_kind k) noexcept {
  switch (k) {
    case msg_kind::chunk_request:
      return "chunk_request";
    case msg_kind::chunk_grant:
      return "chunk_grant";
    case msg_kind::pull:
      return "pull";
    case msg_kind::push:
      return "push";
    case msg_kind::params:
      return "params";
    case msg_kind::snapshot_request:
      return "snapshot_request";
    case msg_kind::step_report:
      return "step_report";
    case msg_kind::control:
      return "control";
    case msg_kind::configure:
      return "configure";
    case msg_kind::migrate:
      return "migrate";
    case msg_kind::transfer:
      return "transfer";
    case msg_kind::transfer_ack:
      return "transfer_ack";
    case msg_kind::moved:
      return "moved";
    case msg_kind::state:
      return "state";
    case msg_kind::replica_ack:
      return "replica_ack";
    case msg_kind::take_over:
      return "take_over";
    case msg_kind::replica_lost:
      return "replica_lost";
    case msg_kind::rows_pull:
      return "rows_pull";
    case msg_kind::rows:
      return "rows";
  }
  return "unknown";
}

wire_message copy_to(const wire_message& m, const endpoint& dst, std::uint8_t flags) {
  wire_message out;
  out.hdr = m.hdr;
  out.hdr.dst = dst;
  out.hdr.flags |= flags;
  out.frames = m.frames;
  return out;
}

result<void> accept_params(const wire_message& m, ps::key_coverage& received) {
  if (m.hdr.ranges.size() != m.frames.size())
    return fail(errc::protocol_error, "{} ranges but {} frames", m.hdr.ranges.size(),
                m.frames.size());
  for (std::size_t i = 0; i < m.frames.size(); ++i)
    if (m.hdr.ranges[i].begin > m.hdr.ranges[i].end ||
        m.frames[i].bytes != m.hdr.ranges[i].size() * sizeof(float))
      return fail(errc::protocol_error, "frame {} has {} bytes for range [{}, {})", i,
                  m.frames[i].bytes, m.hdr.ranges[i].begin, m.hdr.ranges[i].end);
  return received.add(m.hdr.ranges);
}

std::size_t wire_message::payload_bytes() const noexcept {
  std::size_t n = 0;
  for (const auto& f : frames) n += f.bytes;
  return n;
}

std::size_t wire_message::wire_bytes() const noexcept {
  // Fixed fields plus 16 bytes per range: the size of the packed Cap'n Proto header, roughly.
  return payload_bytes() + 96 + 16 * hdr.ranges.size();
}

}  // namespace coach::wire
