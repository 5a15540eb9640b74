// actors::zmq_transport: security and connection events (actors/zmq_transport_impl.hpp): ZAP
// requests answered with peer_authorizer's verdict, handshakes the ROUTER refused counted, and
// the DEALERs' monitor events handed to the connection tracker (contact, refusal, gone).
#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <zmq_addon.hpp>

#include "actors/zmq_transport_impl.hpp"

namespace coach::actors::detail {
namespace {

/// A DEALER monitor's event as the connection tracker tells them; nullopt for one it does not
/// follow (the monitors ask for no others).
std::optional<coach::transport_logic::link_event> link_event_of(std::uint16_t event,
                                                                std::uint32_t value) {
  using coach::transport_logic::link_event;
  switch (event) {
    case ZMQ_EVENT_CONNECTED:
      return link_event::connected;
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
      return link_event::handshake_succeeded;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      return link_event::handshake_refused;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      return value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH ? link_event::mechanism_mismatch
                                                                 : link_event::handshake_failed;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      return link_event::handshake_failed_no_detail;
    case ZMQ_EVENT_DISCONNECTED:
      return link_event::disconnected;
    case ZMQ_EVENT_CONNECT_RETRIED:
      return link_event::connect_retried;
    default:
      return std::nullopt;
  }
}

/// One monitor event: (event, value) and the endpoint; false when none waits.
bool next_monitor_event(zmq::socket_t& mon, std::uint16_t& event, std::uint32_t& value) {
  zmq::message_t head, where;
  if (!mon.recv(head, zmq::recv_flags::dontwait)) return false;
  if (head.more()) (void)mon.recv(where, zmq::recv_flags::dontwait);
  if (head.size() < 6) return false;
  std::memcpy(&event, head.data(), 2);
  std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
  return true;
}

}  // namespace

void zmq_transport_impl::serve_security() {
  std::vector<zmq::message_t> req;
  for (int n = 0; n < 64; ++n) {
    req.clear();
    try {
      if (!zmq::recv_multipart(zap_, std::back_inserter(req), zmq::recv_flags::dontwait)) break;
    } catch (const zmq::error_t&) {
      break;
    }
    answer_zap(req);
  }
  std::uint16_t event = 0;
  std::uint32_t value = 0;
  std::unique_lock router_lock{sock_mu_};
  while (next_monitor_event(router_monitor_, event, value)) {
    const bool mismatch = event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                          value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH;
    using refusal = coach::transport_logic::receive_counter::refusal;
    const auto total = recv_.refused(mismatch ? refusal::mechanism : refusal::handshake);
    warn("refused a connection: {} ({} refused so far)",
         mismatch
             ? (opt_.security.key ? "it offered no key" : "it offered a key; this node has none")
             : "its handshake failed (another server key, or not ZeroMQ)",
         total);
  }
  router_lock.unlock();
  std::vector<std::uint32_t> gone;
  {
    std::lock_guard lock{sock_mu_};
    gone = read_dealer_monitors();
  }
  report_gone(gone);
}

std::vector<std::uint32_t> zmq_transport_impl::read_dealer_monitors() {
  std::vector<std::uint32_t> gone;
  std::uint16_t event = 0;
  std::uint32_t value = 0;
  for (auto& [host, mon] : dealer_monitors_)
    while (next_monitor_event(mon, event, value)) {
      const auto e = link_event_of(event, value);
      if (!e) continue;
      std::string address;
      coach::transport_logic::connection_tracker::outcome out;
      {
        std::lock_guard lock{mu_};
        std::string expected;
        if (const auto* p = peers_.find_peer(host)) {
          address = p->address;
          expected = opt_.security.server_key_for(p->key);
        }
        out = links_.note(host, *e, clock::now(), address, expected);
      }
      // The peer may have restarted: its data connection's token and keys died with it.
      if (*e == coach::transport_logic::link_event::disconnected) forget_data_link(host);
      if (out.gone) gone.push_back(host);
      if (out.unanswered && opt_.log_refusals)
        log("the connection to {} was accepted but its handshake not answered within {:.0f} s (a "
            "frozen or overloaded host, or not a Coach node?); retrying",
            address, std::chrono::duration<double>(opt_.handshake_interval).count());
      if (!out.refusal.empty() && opt_.log_refusals) log("{}", out.refusal);
    }
  return gone;
}

void zmq_transport_impl::report_gone(const std::vector<std::uint32_t>& gone) {
  if (gone.empty()) return;
  peer_gone_handler handler;
  {
    std::lock_guard lock{mu_};
    handler = on_peer_gone_;
  }
  for (const auto host : gone) {
    if (opt_.log_refusals)
      log("the connection to host {} closed and nothing listens at its address: its process is "
          "gone",
          host);
    if (handler) handler(host);
  }
}

void zmq_transport_impl::answer_zap(std::vector<zmq::message_t>& req) {
  if (req.size() < 6) return;  // cannot happen: libzmq's own request
  const auto mechanism = req[5].to_string();
  std::string client_key;
  if (mechanism == "CURVE" && req.size() > 6 && req[6].size() == 32) {
    std::array<char, 41> z{};
    zmq_z85_encode(z.data(), static_cast<const std::uint8_t*>(req[6].data()), 32);
    client_key = z.data();
  }
  // The data ROUTER's connections (domain "coach-data", zmq_transport_data.cpp): admitted by a
  // token from a CURVE handshake; its user id, the token, marks every message they carry.
  const bool data = req[2].to_string_view() == "coach-data";
  if (data) client_key = req.size() > 7 ? req[7].to_string() : std::string();
  const auto verdict = data ? admit_data(mechanism, req[3].to_string_view(), client_key)
                            : authorizer_.check(mechanism, req[3].to_string_view(), client_key);
  if (!verdict.accepted()) {
    using refusal = coach::transport_logic::receive_counter::refusal;
    const auto total = recv_.refused(verdict.why == refusal_reason::key       ? refusal::key
                                     : verdict.why == refusal_reason::address ? refusal::address
                                                                              : refusal::mechanism);
    warn("refused a connection: {} ({} refused so far)", verdict.text, total);
  }
  const std::string_view code = verdict.accepted() ? "200" : "400";
  const std::string_view text = verdict.accepted() ? "OK" : "not authorized";
  const std::array<zmq::const_buffer, 6> reply{
      zmq::str_buffer("1.0"),  zmq::buffer(req[1].data(), req[1].size()),
      zmq::buffer(code),       zmq::buffer(text),
      zmq::buffer(client_key), zmq::const_buffer()};
  try {
    zmq::send_multipart(zap_, reply);
  } catch (const zmq::error_t& e) {
    log("cannot answer an authentication request: {}", e.what());
  }
}

}  // namespace coach::actors::detail
