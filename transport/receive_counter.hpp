#pragma once
// transport::receive_counter: what the ZeroMQ transport received from other hosts and what it
// refused, by reason (receive_stats: coach-node prints it as one line, docs/hostile-input.md).
// Thread-safe: the transport's I/O thread counts, any thread reads.

#include <cstdint>
#include <mutex>
#include <string>

namespace coach::transport_logic {

/// Counters of what arrived from other hosts.
struct receive_stats {
  std::uint64_t messages = 0;   ///< delivered to a local actor
  std::uint64_t bytes = 0;      ///< of delivered messages, header included
  std::uint64_t malformed = 0;  ///< undecodable header or frames that disagree with it
  /// Of `malformed`: a header that decodes, followed by payload frames whose count or sizes
  /// disagree with it (codec::check_frames).
  std::uint64_t malformed_frames = 0;
  std::uint64_t foreign = 0;      ///< another wire version
  std::uint64_t unknown_dst = 0;  ///< no local actor at the destination
  // Connections refused, by reason (actors/curve_keys.hpp, refusal_reason).
  std::uint64_t refused_key = 0;        ///< CURVE: a client key that is not authorized
  std::uint64_t refused_address = 0;    ///< no key here: a client not on loopback
  std::uint64_t refused_mechanism = 0;  ///< no key offered to a CURVE server, or the reverse
  std::uint64_t failed_handshakes = 0;  ///< undecryptable (another server key) or garbage
  // Sealed messages refused on a data connection (transport/frame_seal.hpp, docs/security.md).
  std::uint64_t stale = 0;   ///< replayed or reordered: a counter not past the last accepted
  std::uint64_t forged = 0;  ///< a tag that does not match: altered, moved, or another key
  std::uint64_t refused() const noexcept {
    return refused_key + refused_address + refused_mechanism + failed_handshakes;
  }
};

/// The counts as one line, each as its field's name and value, in the order of the fields:
/// "messages 12, bytes 3456, malformed 3, malformed_frames 1, foreign 0, unknown_dst 2,
/// refused_key 0, refused_address 0, refused_mechanism 0, failed_handshakes 0, stale 0,
/// forged 0" (coach-node prints it on stderr, docs/hostile-input.md).
std::string to_string(const receive_stats& s);

class receive_counter {
 public:
  /// Why a received message was dropped.
  enum class drop : std::uint8_t {
    malformed,  ///< no header frame, or one that does not decode
    frames,     ///< payload frames that disagree with the header (malformed too)
    foreign,    ///< another wire version
    stale,      ///< a sealed message replayed or reordered
    forged,     ///< a sealed message whose tag does not match
  };
  /// Why a connection was refused.
  enum class refusal : std::uint8_t {
    key,        ///< refused_key
    address,    ///< refused_address
    mechanism,  ///< refused_mechanism
    handshake,  ///< failed_handshakes
  };

  /// A message of `bytes` (header included) delivered to a local actor.
  void delivered(std::uint64_t bytes);
  /// A message for an actor this host does not have.
  void unknown_destination();
  void dropped(drop why);
  /// Counts a refused connection; returns the connections refused so far, this one included.
  std::uint64_t refused(refusal why);
  receive_stats snapshot() const;

 private:
  mutable std::mutex mu_;
  receive_stats s_;
};

}  // namespace coach::transport_logic
