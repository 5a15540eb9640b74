// actors::zmq_transport: receiving (actors/zmq_transport_impl.hpp): the I/O thread's loop, its
// poll set, messages taken off the sockets in bounded batches under the socket lock, and each
// decoded and delivered outside it (malformed and foreign ones counted and dropped).
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <zmq_addon.hpp>

#include "actors/zmq_transport_impl.hpp"
#include "wire/codec.hpp"

namespace coach::actors::detail {
namespace {

/// A routing id for the log: as it is when printable (a Coach DEALER's "SRC.DST.NONCE"), else
/// in hex (ZeroMQ's own ids are a zero byte and four random ones; a hostile one may be anything).
std::string printable_id(const zmq::message_t& id) {
  const auto text = id.to_string_view();
  if (!text.empty() &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c < 0x7f; }))
    return std::string(text);
  constexpr char digits[] = "0123456789abcdef";
  std::string hex = "0x";
  for (unsigned char c : text) hex += {digits[c >> 4], digits[c & 15]};
  return hex;
}

}  // namespace

std::size_t zmq_transport_impl::take(zmq::socket_t& s, std::size_t most,
                                     std::vector<std::vector<zmq::message_t>>& out) {
  std::size_t n = 0;
  try {
    while (n < most && (s.get(zmq::sockopt::events) & ZMQ_POLLIN)) {
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(s, std::back_inserter(parts), zmq::recv_flags::dontwait)) break;
      out.push_back(std::move(parts));
      ++n;
    }
  } catch (const zmq::error_t& e) {
    log("receive failed: {}", e.what());
  }
  return n;
}

void zmq_transport_impl::deliver(std::vector<zmq::message_t>& parts, bool routed) {
  const std::size_t head = routed ? 1 : 0;
  if (parts.size() < head + 1) {
    recv_.dropped(coach::transport_logic::receive_counter::drop::malformed);
    log_dropped("dropped a message from '{}': no header frame",
                routed && !parts.empty() ? printable_id(parts[0]) : std::string("a peer's ROUTER"));
    return;
  }
  // The data connections' handshake travels on the CURVE connections (zmq_transport_data.cpp).
  if (routed && is_data_hello(parts[1])) return answer_hello(parts);
  if (!routed && is_data_welcome(parts[0])) return accept_welcome(parts[0]);
  const auto& header = parts[head];
  deliver_decoded({static_cast<const std::byte*>(header.data()), header.size()}, parts, head + 1,
                  parts.size(), routed ? parts[0].to_string_view() : std::string_view(),
                  routed ? printable_id(parts[0]) : std::string("a peer's ROUTER"));
}

void zmq_transport_impl::deliver_decoded(std::span<const std::byte> header,
                                         std::vector<zmq::message_t>& parts, std::size_t first,
                                         std::size_t last, std::string_view client_id,
                                         const std::string& from) {
  using why = coach::transport_logic::receive_counter::drop;
  auto bad = [&](const coach::error& e, why w) {
    recv_.dropped(w);
    log_dropped("dropped a message from '{}': {}", from, e.message);
  };
  auto hdr = codec::decode_header(header);
  if (!hdr) {
    const bool foreign = hdr.error().message.find("foreign wire version") != std::string::npos;
    return bad(hdr.error(), foreign ? why::foreign : why::malformed);
  }
  recv_sizes_.clear();
  for (std::size_t i = first; i < last; ++i) recv_sizes_.push_back(parts[i].size());
  if (auto ok = codec::check_frames(*hdr, recv_sizes_); !ok) return bad(ok.error(), why::frames);
  wire_message msg;
  msg.hdr = std::move(hdr->env);
  // A sender that addressed host 0 meant the node at the other end of its link: this one.
  if (msg.hdr.dst.host == 0) msg.hdr.dst.host = opt_.host;
  if (!client_id.empty()) {     // a host that is no peer is a client: replies reach it through the
    std::lock_guard lock{mu_};  // ROUTER
    peers_.remember_client(msg.hdr.src.host, client_id, clock::now());
  }
  std::size_t bytes = header.size();
  for (std::size_t i = first; i < last; ++i) {
    auto owner = std::make_shared<zmq::message_t>(std::move(parts[i]));
    bytes += owner->size();
    const auto* data = static_cast<const std::byte*>(owner->data());
    // libzmq receives small messages back to back into one buffer, at any offset: a frame read
    // as floats or row ids (u64) must be aligned, so such a frame gets a copy that is (a large
    // message has a buffer of its own, aligned, and is not copied).
    if (reinterpret_cast<std::uintptr_t>(data) % alignof(std::uint64_t) != 0) {
      auto copy = std::make_shared<std::vector<std::uint64_t>>((owner->size() + 7) / 8);
      std::memcpy(copy->data(), data, owner->size());
      msg.frames.push_back(
          frame{copy, reinterpret_cast<const std::byte*>(copy->data()), owner->size(), true});
      continue;
    }
    msg.frames.push_back(frame{owner, data, owner->size(), true});
  }
  auto route = msg.hdr.dst.host == opt_.host ? routes_.find_route(msg.hdr.dst)
                                             : detail::route_table::route{};
  const auto& dst = route.handle;
  if (!dst)
    recv_.unknown_destination();
  else
    recv_.delivered(bytes);
  if (!dst) {
    // Routine: an actor that ended (a job stopped, a worker left) still gets what was in
    // flight to it. Counted (receive_stats::unknown_dst); a debug line only.
    log_with(coach::log::level::debug, dropped_log_, "no actor {} on host {} (message {})",
             msg.hdr.dst.id, msg.hdr.dst.host, to_string(msg.hdr.kind));
    return;
  }
  if (!unit_) unit_.emplace(&caf::actor_cast<caf::abstract_actor*>(dst)->home_system());
  // Only messages small enough that the handler is short run here: a shard's update takes
  // about as long as the copying of its bytes (~1.5 ms for the default limit of 8 MiB), and
  // meanwhile nothing else on this node is delivered. Larger ones gain little (a wake-up
  // against milliseconds) and go to the scheduler.
  const bool here = route.run_inline && bytes <= opt_.inline_bytes;
  unit_->deliver(dst, here, std::move(msg));
}

bool zmq_transport_impl::receive_all() {
  constexpr std::size_t batch = 64;
  constexpr int rounds = 16;
  bool more = true;
  for (int round = 0; more && !stop_ && round < rounds; ++round) {
    more = false;
    incoming_.clear();
    source_.clear();
    {
      std::lock_guard lock{sock_mu_};
      if (closed_) return false;
      if (take(router_, batch, incoming_) == batch) more = true;
      source_.assign(incoming_.size(), 0);
      for (auto& [host, d] : dealers_)
        if (take(d, batch, incoming_) == batch) more = true;
      source_.resize(incoming_.size(), 1);
      if (data_router_ && take(data_router_, batch, incoming_) == batch) more = true;
      source_.resize(incoming_.size(), 2);
    }
    for (std::size_t i = 0; i < incoming_.size(); ++i) {
      if (source_[i] == 2)
        deliver_sealed(incoming_[i]);
      else
        deliver(incoming_[i], source_[i] == 0);
    }
    incoming_.clear();
    if (unit_) unit_->run_chosen();
    if (more) flush_queues();
  }
  return more;
}

void zmq_transport_impl::refresh_poll_set(std::vector<pollfd>& fds, std::uint64_t& seen) {
  std::lock_guard lock{sock_mu_};
  if (seen == sockets_changed_ && !fds.empty()) return;
  seen = sockets_changed_;
  fds.clear();
  fds.push_back({wake_fd_, POLLIN, 0});
  auto add = [&](zmq::socket_t& s) {
    try {
      fds.push_back({s.get(zmq::sockopt::fd), POLLIN, 0});
    } catch (const zmq::error_t& e) {
      log("cannot poll a socket: {}", e.what());
    }
  };
  add(router_);
  for (auto& [host, d] : dealers_) add(d);
  if (data_router_) add(data_router_);
  security_fds_ = fds.size();
  add(zap_);
  add(router_monitor_);
  for (auto& [host, m] : dealer_monitors_) add(m);
}

void zmq_transport_impl::run() {
  std::vector<pollfd> fds;
  std::uint64_t seen = 0;
  auto last_prune = clock::now();
  bool waiting_sends = false, input_left = false;
  while (!stop_) {
    refresh_poll_set(fds, seen);
    // Sends waiting for room are retried every few milliseconds; otherwise the sockets'
    // descriptors and the eventfd wake this thread. Input left by receive_all() is taken at
    // once, after a look at the other sockets.
    const int timeout_ms = input_left ? 0 : waiting_sends ? 2 : 200;
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      log("poll failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (fds[0].revents & POLLIN) {
      std::uint64_t n;
      [[maybe_unused]] auto r = ::read(wake_fd_, &n, sizeof n);
    }
    // Handshakes are rare: their sockets are read when they signal (this thread alone reads
    // them, to the last message, so the next one signals again), not on every message.
    bool handshakes = false;
    for (std::size_t i = security_fds_; i < fds.size(); ++i)
      handshakes = handshakes || fds[i].revents != 0;
    if (handshakes) serve_security();
    waiting_sends = flush_queues();
    input_left = receive_all();
    waiting_sends = flush_queues() || waiting_sends;
    if (const auto now = clock::now(); now - last_prune >= std::chrono::seconds(1)) {
      last_prune = now;
      {
        std::lock_guard lock{mu_};
        peers_.prune_clients(now);
      }
      serve_security();  // and once a second regardless
    }
  }
  flush_queues();
  std::lock_guard lock{sock_mu_};
  closed_ = true;
  dealer_monitors_.clear();
  dealers_.clear();
  data_links_.clear();
  if (data_router_) data_router_.close();
  router_monitor_.close();
  router_.close();
  zap_.close();
}

}  // namespace coach::actors::detail
