#include "transport/connection_tracker.hpp"

#include <utility>

#include "common/format.hpp"

namespace coach::transport_logic {
namespace {

bool is_handshake_end(link_event e) {
  return e == link_event::handshake_succeeded || e == link_event::handshake_refused ||
         e == link_event::mechanism_mismatch || e == link_event::handshake_failed ||
         e == link_event::handshake_failed_no_detail;
}

/// Why a handshake that ended with `e` failed, for the user; empty when it succeeded.
std::string handshake_refusal(link_event e, bool keyed, std::string_view address,
                              std::string_view expected_key) {
  if (e == link_event::handshake_refused)
    return coach::format("not authorized: {} refused this process's {}", address,
                         keyed ? "key (it is not in that node's authorized keys)"
                               : "plain connection (that node takes them from loopback only; "
                                 "give --key or set COACH_KEY)");
  if (e == link_event::mechanism_mismatch)
    return keyed ? coach::format(
                       "not authorized: {} uses no keys, this process does "
                       "(--key / COACH_KEY): both sides need keys, or neither",
                       address)
                 : coach::format(
                       "not authorized: {} requires a key: give --key FILE or set "
                       "COACH_KEY (coach keygen makes one)",
                       address);
  if (e != link_event::handshake_succeeded)
    return keyed ? coach::format(
                       "not authorized: the handshake with {} failed: its key is not "
                       "the server key this process expects ({}...; --server-key), "
                       "or it uses no keys",
                       address, expected_key.substr(0, 8))
                 : coach::format(
                       "not authorized: the handshake with {} failed (it requires a "
                       "key: give --key FILE or set COACH_KEY)",
                       address);
  return {};
}

}  // namespace

connection_tracker::connection_tracker(connection_tracker_options opt) : opt_(opt) {}

connection_tracker::outcome connection_tracker::note(std::uint32_t host, link_event e,
                                                     clock::time_point now,
                                                     std::string_view address,
                                                     std::string_view expected_key) {
  outcome out;
  // How connecting goes (contact).
  auto& c = contacts_[host];
  const bool was_connected = c.connected;
  auto& reached = attempt_reached_[host];  // this attempt's TCP connection was made
  if (e == link_event::connected) {
    reached = true;
    connected_at_[host] = now;
  }
  if (e == link_event::handshake_succeeded) c = {true, false};
  if (e == link_event::disconnected) c.connected = false;
  if (e == link_event::connect_retried) {
    // Refused only when not even TCP got through (a handshake that failed is a refusal of
    // another kind: refusal says which).
    if (!c.connected && !reached) c.connect_failed = true;
    reached = false;
  }

  // Gone: closed after its handshake had succeeded (armed), then a reconnection refused (once),
  // or a handshake that succeeds again (disarmed).
  if (e == link_event::disconnected) {
    if (was_connected) closed_peers_[host] = true;
  } else if (e == link_event::connect_retried) {
    auto it = closed_peers_.find(host);
    if (it != closed_peers_.end() && it->second) {
      it->second = false;  // reported; again only after the next closed connection
      out.gone = true;
    }
    return out;
  } else if (e == link_event::handshake_succeeded) {
    closed_peers_.erase(host);
  }
  if (!is_handshake_end(e)) return out;

  // How the last handshake ended (refusal).
  const bool no_detail = e == link_event::handshake_failed_no_detail;
  if (no_detail && timed_out(host, now, out)) return out;
  auto why = handshake_refusal(e, opt_.keyed, address, expected_key);
  auto& vague = vague_failures_[host];
  if (why.empty()) {
    refusals_.erase(host);
    vague = 0;
    return out;
  }
  auto& last = refusals_[host];
  if (no_detail && ++vague < opt_.vague_failures_to_refuse) return out;  // a reason may follow
  if (no_detail && !last.empty()) return out;                            // one is known
  if (!no_detail) vague = 0;
  if (last != why) out.refusal = why;
  last = std::move(why);
  return out;
}

bool connection_tracker::timed_out(std::uint32_t host, clock::time_point now, outcome& out) {
  const auto at = connected_at_.find(host);
  if (at == connected_at_.end() || now - at->second < opt_.handshake_interval * 9 / 10)
    return false;
  auto& c = contacts_[host];
  if (c.unanswered) return true;
  c.unanswered = true;
  out.unanswered = true;
  return true;
}

peer_contact connection_tracker::contact(std::uint32_t host) const {
  auto it = contacts_.find(host);
  return it == contacts_.end() ? peer_contact{} : it->second;
}

std::string connection_tracker::refusal(std::uint32_t host) const {
  auto it = refusals_.find(host);
  return it == refusals_.end() ? std::string() : it->second;
}

void connection_tracker::forget(std::uint32_t host) {
  closed_peers_.erase(host);
  refusals_.erase(host);  // what the old connection was told
  contacts_.erase(host);
  attempt_reached_.erase(host);
  connected_at_.erase(host);
  vague_failures_.erase(host);
}

}  // namespace coach::transport_logic
