// actors::zmq_transport: sending (actors/zmq_transport_impl.hpp): the DEALER to each peer, made
// on first use; a message handed to ZeroMQ at once without copying its frames; the queues of
// messages that wait for room, retried by the I/O thread and dropped after send_timeout.
#include <cerrno>
#include <memory>
#include <utility>
#include <zmq_addon.hpp>

#include "actors/zmq_transport_impl.hpp"
#include "wire/codec.hpp"

namespace coach::actors::detail {
namespace {

/// What a DEALER's monitor reports (read_dealer_monitors hands each to the connection tracker):
/// how a connection's handshake ends; a connection closed and an attempt to connect again
/// (refused: the peer's process is gone); a TCP connection made before its handshake (contact_of
/// tells a refused connection from a refused handshake by it).
constexpr int dealer_monitor_events =
    ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
    ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
    ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_CONNECTED;

/// Frees a payload frame once ZeroMQ is done with it: drops the heap copy of its owner.
void release_owner(void*, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

}  // namespace

zmq::socket_t* zmq_transport_impl::dealer_for(std::uint32_t host) {
  auto it = dealers_.find(host);
  if (it != dealers_.end()) return &it->second;
  std::string address, key;
  {
    std::lock_guard lock{mu_};
    const auto* p = peers_.find_peer(host);
    if (!p) return nullptr;
    address = p->address;
    key = p->key;
  }
  zmq::socket_t s(ctx_, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, opt_.send_hwm);
  s.set(zmq::sockopt::rcvhwm, opt_.send_hwm);
  s.set(zmq::sockopt::reconnect_ivl, int(opt_.reconnect_interval.count()));
  s.set(zmq::sockopt::handshake_ivl, int(opt_.handshake_interval.count()));
  if (opt_.max_frame > 0) s.set(zmq::sockopt::maxmsgsize, std::int64_t(opt_.max_frame));
  // Unique per connection: a ROUTER refuses a second connection with a routing id it already
  // has, and one node may hold two DEALERs to the same address (peer 0 and the scheduler's
  // own host id), or come back after a restart while its old connection lingers.
  s.set(zmq::sockopt::routing_id, coach::format("{}.{}.{}", opt_.host, host, instance_));
  try {
    if (const auto& own = opt_.security.key) {
      s.set(zmq::sockopt::curve_serverkey, opt_.security.server_key_for(key));
      s.set(zmq::sockopt::curve_publickey, own->public_key);
      s.set(zmq::sockopt::curve_secretkey, own->secret_key);
    }
    dealer_monitors_.insert_or_assign(
        host, monitor(s, coach::format("inproc://coach-monitor-{}-{}", host, ++monitors_made_),
                      dealer_monitor_events));
    s.connect(address);
  } catch (const zmq::error_t& e) {
    dealer_monitors_.erase(host);
    log("cannot connect to host {} at '{}': {}", host, address, e.what());
    return nullptr;
  }
  ++sockets_changed_;
  wake();  // the I/O thread polls the new socket from now on
  return &dealers_.emplace(host, std::move(s)).first->second;
}

zmq_transport_impl::sent zmq_transport_impl::send_now(const wire_message& msg,
                                                      const std::string& routing_id) {
  const bool to_client = !routing_id.empty();
  zmq::socket_t* s = to_client ? &router_ : dealer_for(msg.hdr.dst.host);
  if (!s) {
    counter_.dropped();
    return sent::failed;
  }
  if (!to_client && sealing()) return send_sealed(msg, *s);
  sizes_.clear();
  for (const auto& f : msg.frames) sizes_.push_back(f.bytes);
  codec::encode_header(msg.hdr, sizes_, header_);
  std::size_t bytes = header_.size();
  const auto wait = zmq::send_flags::dontwait;
  try {
    if (to_client &&
        !s->send(zmq::buffer(routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      counter_.dropped();
      log("client host {} is not reading; message {} dropped", msg.hdr.dst.host,
          to_string(msg.hdr.kind));
      return sent::failed;
    }
    const auto more = msg.frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
    if (!s->send(zmq::buffer(header_.data(), header_.size()), more | wait)) {
      if (!to_client) return sent::would_block;
      counter_.dropped();
      log("client host {} is not reading; message {} dropped", msg.hdr.dst.host,
          to_string(msg.hdr.kind));
      return sent::failed;
    }
    for (std::size_t i = 0; i < msg.frames.size(); ++i) {
      const auto& f = msg.frames[i];
      const bool last = i + 1 == msg.frames.size();
      // The last frame also holds the message's `sent` token: ZeroMQ lets go of it once the
      // frame is written out.
      auto* hint = new std::shared_ptr<const void>(
          last && msg.sent
              ? std::make_shared<
                    const std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(
                    f.owner, msg.sent)
              : f.owner);
      zmq::message_t part(const_cast<std::byte*>(f.data), f.bytes, release_owner, hint);
      // Once the first frame is queued the rest of the message goes too (ZeroMQ multipart).
      s->send(part, (last ? zmq::send_flags::none : zmq::send_flags::sndmore) | wait);
      bytes += f.bytes;
    }
  } catch (const zmq::error_t& e) {
    counter_.dropped();
    if (to_client && e.num() == EHOSTUNREACH) {
      {
        // Unless it came back on another connection since.
        std::lock_guard lock{mu_};
        peers_.forget_client(msg.hdr.dst.host, routing_id);
      }
      log("client host {} is gone; message {} dropped", msg.hdr.dst.host, to_string(msg.hdr.kind));
    } else {
      log("send to host {} failed: {}", msg.hdr.dst.host, e.what());
    }
    return sent::failed;
  }
  // All clients are one destination (clients_host): a client names its own host id, random
  // per `coach` process (or anything, when hostile); counted apart, each added a link for
  // good, carried by every heartbeat (a decoder refuses one of more than 65536 links).
  counter_.sent(msg.hdr.job, msg.hdr.src.host, to_client ? clients_host : msg.hdr.dst.host,
                msg.hdr.kind, bytes);
  return sent::ok;
}

bool zmq_transport_impl::flush_queues() {
  std::lock_guard lock{sock_mu_};
  if (!queued_) return false;
  const auto now = clock::now();
  bool left = false;
  for (auto& [host, queue] : queues_) {
    while (!queue.empty()) {
      auto& w = queue.front();
      if (now - w.since > opt_.send_timeout) {
        counter_.dropped();
        log("send to host {} timed out; message {} dropped", host, to_string(w.msg.hdr.kind));
        queue.pop_front();
        continue;
      }
      if (send_now(w.msg, {}) == sent::would_block) break;
      queue.pop_front();
    }
    if (auto it = dealers_.find(host); it != dealers_.end()) note_readable(it->second);
    left = left || !queue.empty();
  }
  queued_ = left;
  return left;
}

}  // namespace coach::actors::detail
