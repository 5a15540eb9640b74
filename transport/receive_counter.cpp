#include "transport/receive_counter.hpp"

#include "common/format.hpp"

namespace coach::transport_logic {

std::string to_string(const receive_stats& s) {
  return coach::format(
      "messages {}, bytes {}, malformed {}, malformed_frames {}, foreign {}, unknown_dst {}, "
      "refused_key {}, refused_address {}, refused_mechanism {}, failed_handshakes {}, stale {}, "
      "forged {}",
      s.messages, s.bytes, s.malformed, s.malformed_frames, s.foreign, s.unknown_dst, s.refused_key,
      s.refused_address, s.refused_mechanism, s.failed_handshakes, s.stale, s.forged);
}

void receive_counter::delivered(std::uint64_t bytes) {
  std::lock_guard lock{mu_};
  ++s_.messages;
  s_.bytes += bytes;
}

void receive_counter::unknown_destination() {
  std::lock_guard lock{mu_};
  ++s_.unknown_dst;
}

void receive_counter::dropped(drop why) {
  std::lock_guard lock{mu_};
  ++(why == drop::foreign  ? s_.foreign
     : why == drop::stale  ? s_.stale
     : why == drop::forged ? s_.forged
                           : s_.malformed);
  if (why == drop::frames) ++s_.malformed_frames;
}

std::uint64_t receive_counter::refused(refusal why) {
  std::lock_guard lock{mu_};
  ++(why == refusal::key         ? s_.refused_key
     : why == refusal::address   ? s_.refused_address
     : why == refusal::mechanism ? s_.refused_mechanism
                                 : s_.failed_handshakes);
  return s_.refused();
}

receive_stats receive_counter::snapshot() const {
  std::lock_guard lock{mu_};
  return s_;
}

}  // namespace coach::transport_logic
