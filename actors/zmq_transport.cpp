#include "actors/zmq_transport.hpp"
#include "common/log.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <caf/abstract_actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/execution_unit.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "actors/inline_delivery.hpp"
#include "actors/route_table.hpp"
#include "common/log_limiter.hpp"
#include "wire/codec.hpp"

namespace coach::actors {
namespace {

/// The monitor events a connection's handshake ends with.
constexpr int handshake_events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
/// The monitor events that tell a peer's process is gone: its connection closed, and the next
/// attempt to connect again was refused (nothing listens at its address any more).
constexpr int gone_events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED;
/// The monitor event of a TCP connection made (before its handshake): contact_of tells a refused
/// connection from a refused handshake by it.
constexpr int connected_event = ZMQ_EVENT_CONNECTED;

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

/// Frees a payload frame once ZeroMQ is done with it: drops the heap copy of its owner.
void release_owner(void*, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

class zmq_transport_impl final : public zmq_transport {
 public:
  explicit zmq_transport_impl(zmq_transport_options opt)
      : opt_(std::move(opt)),
        authorizer_(opt_.security.key ? opt_.security.authorized_dir : std::filesystem::path()),
        ctx_(std::max(1, opt_.io_threads)) {}

  ~zmq_transport_impl() override {
    stop_ = true;
    wake();
    if (io_.joinable()) io_.join();
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  result<void> open() {
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return fail(errc::internal, "eventfd failed");
    try {
      // ZeroMQ asks this socket (its context's ZAP endpoint) about every connection the ROUTER
      // accepts; the I/O thread answers.
      zap_ = zmq::socket_t(ctx_, zmq::socket_type::rep);
      zap_.set(zmq::sockopt::linger, 0);
      zap_.bind("inproc://zeromq.zap.01");
      router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
      router_.set(zmq::sockopt::linger, 0);
      // A domain makes ZeroMQ consult the handler for plain (NULL) connections too.
      router_.set(zmq::sockopt::zap_domain, "coach");
      if (const auto& key = opt_.security.key) {
        router_.set(zmq::sockopt::curve_server, true);
        router_.set(zmq::sockopt::curve_secretkey, key->secret_key);
      }
      router_monitor_ =
          monitor(router_, "inproc://coach-monitor-router",
                  ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL);
      router_.set(zmq::sockopt::rcvhwm, opt_.send_hwm);
      router_.set(zmq::sockopt::sndhwm, opt_.send_hwm);
      router_.set(zmq::sockopt::handshake_ivl, int(opt_.handshake_interval.count()));
      if (opt_.max_frame > 0) router_.set(zmq::sockopt::maxmsgsize, std::int64_t(opt_.max_frame));
      // A reply to a client that is gone fails (EHOSTUNREACH) instead of vanishing unseen.
      router_.set(zmq::sockopt::router_mandatory, true);
      router_.bind(opt_.listen);
      bound_ = router_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return fail(errc::invalid_argument, "cannot listen on '{}': {}", opt_.listen, e.what());
    }
    io_ = std::thread([this] { run(); });
    return {};
  }

  std::string_view name() const noexcept override { return "zmq"; }
  void bind(const endpoint& ep, caf::actor handle) override { routes_.bind(ep, std::move(handle)); }
  void bind_inline(const endpoint& ep, caf::actor handle) override {
    routes_.bind(ep, std::move(handle), true);
  }
  void unbind(const endpoint& ep) override { routes_.unbind(ep); }
  void unbind_if(const endpoint& ep, const caf::actor_addr& who) override {
    routes_.unbind_if(ep, who);
  }

  bool send(wire_message msg) override {
    // Host 0 is the node at the other end of peer 0 (the --join / --at address); a node with
    // no peer 0 (the scheduler's own node) is that node itself.
    if (msg.hdr.dst.host == 0 && !has_peer(0)) msg.hdr.dst.host = opt_.host;
    const std::uint32_t host = msg.hdr.dst.host;
    if (host == opt_.host) {
      auto route = routes_.find_route(msg.hdr.dst);
      if (!route.handle) {
        counter_.dropped();
        return false;
      }
      counter_.sent(msg.hdr.job, msg.hdr.src.host, host, msg.hdr.kind, msg.wire_bytes());
      detail::deliver_local(route.handle, route.run_inline, std::move(msg));
      return true;
    }
    std::string routing_id;  // empty: to a peer's DEALER
    {
      std::lock_guard lock{mu_};
      if (!peers_.contains(host)) {
        auto it = clients_.find(host);
        if (it == clients_.end()) {
          counter_.dropped();
          log("no route to host {} (message {})", host, to_string(msg.hdr.kind));
          return false;
        }
        it->second.last_used = clock::now();
        routing_id = it->second.routing_id;
      }
    }
    // Sent from this thread (no hand-off to the I/O thread) unless the socket has no room or
    // messages to the host wait already: those queue, in order, for the I/O thread's retries.
    std::lock_guard lock{sock_mu_};
    if (closed_) {
      counter_.dropped();
      return false;
    }
    if (!routing_id.empty()) {  // a reply to a client never waits
      send_now(msg, routing_id);
      note_readable(router_);
      return true;
    }
    auto& queue = queues_[host];
    if (queue.empty()) {
      auto* s = dealer_for(host);
      const auto r = s ? send_now(msg, {}) : sent::failed;
      if (s) note_readable(*s);
      if (r != sent::would_block) return r == sent::ok;
    }
    queue.push_back({std::move(msg), clock::now()});
    queued_ = true;
    wake();
    return true;
  }

  traffic_stats traffic() const override { return counter_.snapshot(); }

  void connect(std::uint32_t host) override {
    std::lock_guard lock{sock_mu_};
    if (!closed_) dealer_for(host);
  }

  void add_peer(std::uint32_t host, std::string address, std::string public_key) override {
    std::lock_guard socks{sock_mu_};
    std::lock_guard lock{mu_};
    auto& p = peers_[host];
    // A peer list may name a node whose key its sender did not know yet (the scheduler's own
    // before its first heartbeat): that is no change of key.
    if (public_key.empty()) public_key = p.key;
    // A node that came back with another key (rotated) is reached over a new connection.
    if ((p.key != public_key || p.address != address) && dealers_.erase(host) > 0) {
      dealer_monitors_.erase(host);
      closed_peers_.erase(host);
      refusals_.erase(host);  // what the old connection was told
      contacts_.erase(host);
      attempt_reached_.erase(host);
      connected_at_.erase(host);
      vague_failures_.erase(host);
      ++sockets_changed_;
    }
    p.address = std::move(address);
    p.key = std::move(public_key);
    clients_.erase(host);
  }

  peer_contact contact_of(std::uint32_t host) override {
    std::vector<std::uint32_t> gone;
    {
      std::lock_guard socks{sock_mu_};
      gone = read_dealer_monitors();
    }
    report_gone(gone);
    std::lock_guard lock{mu_};
    auto it = contacts_.find(host);
    return it == contacts_.end() ? peer_contact{} : it->second;
  }

  std::string refusal_of(std::uint32_t host) const override {
    std::lock_guard lock{mu_};
    auto it = refusals_.find(host);
    return it == refusals_.end() ? std::string() : it->second;
  }

  std::uint32_t host_id() const override { return opt_.host; }
  void on_peer_gone(peer_gone_handler handler) override {
    std::lock_guard lock{mu_};
    on_peer_gone_ = std::move(handler);
  }

  std::string public_key() const override {
    return opt_.security.key ? opt_.security.key->public_key : std::string();
  }

  bool has_peer(std::uint32_t host) {
    std::lock_guard lock{mu_};
    return peers_.contains(host);
  }
  std::string bound_address() const override { return bound_; }

  receive_stats received() const override {
    std::lock_guard lock{recv_mu_};
    return recv_;
  }

 private:
  using clock = std::chrono::steady_clock;

  /// A message to a peer waiting for room in its DEALER's queue.
  struct waiting {
    wire_message msg;
    clock::time_point since;
  };

  /// A host that sent through the ROUTER without being a peer.
  struct client {
    std::string routing_id;
    clock::time_point last_used;
  };

  enum class sent { ok, would_block, failed };

  /// At most 5 log lines a second of one kind: a flood of bad frames must not flood the log too.
  template <class... Args>
  void log_with(coach::log::level l, log_limiter& budget, std::string_view fmt,
                const Args&... args) {
    if (!coach::log::enabled(l)) return;
    const auto suffix = budget.allow();
    if (!suffix) return;
    coach::log::at(l, "transport {}: {}{}", bound_, coach::format(fmt, args...), *suffix);
  }
  template <class... Args>
  void log(std::string_view fmt, const Args&... args) {
    log_with(coach::log::level::info, log_, fmt, args...);
  }
  /// What an operator may have to act on (a refused connection: docs/operations.md), at
  /// warning, from the same budget.
  template <class... Args>
  void warn(std::string_view fmt, const Args&... args) {
    log_with(coach::log::level::warn, log_, fmt, args...);
  }
  /// Messages received and dropped have a budget of their own: a flood of them used up the
  /// common one, and refused connections went unlogged (still counted).
  template <class... Args>
  void log_dropped(std::string_view fmt, const Args&... args) {
    log_with(coach::log::level::warn, dropped_log_, fmt, args...);
  }

  void wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
  }

  /// After any operation on `s`: ZeroMQ's notification descriptor (ZMQ_FD) is edge-triggered
  /// and an operation may consume the edge of a message that arrived meanwhile, so whoever
  /// operated on the socket checks for waiting input and wakes the I/O thread if there is some.
  /// REQUIRES: sock_mu_ held.
  void note_readable(zmq::socket_t& s) {
    try {
      if (s.get(zmq::sockopt::events) & ZMQ_POLLIN) wake();
    } catch (const zmq::error_t&) {
    }
  }

  /// Starts monitoring `s`'s `events` on a PAIR socket of this transport (polled by the I/O
  /// thread).
  zmq::socket_t monitor(zmq::socket_t& s, const std::string& name, int events) {
    if (zmq_socket_monitor(s.handle(), name.c_str(), events) != 0) throw zmq::error_t();
    zmq::socket_t pair(ctx_, zmq::socket_type::pair);
    pair.set(zmq::sockopt::linger, 0);
    pair.connect(name);
    return pair;
  }

  /// The DEALER to a peer host, connected on first use. REQUIRES: sock_mu_ held.
  zmq::socket_t* dealer_for(std::uint32_t host) {
    auto it = dealers_.find(host);
    if (it != dealers_.end()) return &it->second;
    std::string address, key;
    {
      std::lock_guard lock{mu_};
      auto p = peers_.find(host);
      if (p == peers_.end()) return nullptr;
      address = p->second.address;
      key = p->second.key;
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
                        handshake_events | gone_events | connected_event));
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

  /// Remembers the ROUTER routing id of a host that is not a peer, so replies can reach it.
  /// I/O thread only.
  void remember_client(std::uint32_t host, const zmq::message_t& routing_id) {
    if (host == opt_.host) return;
    const auto now = clock::now();
    std::lock_guard lock{mu_};
    if (peers_.contains(host)) return;
    if (auto it = clients_.find(host); it != clients_.end()) {
      if (it->second.routing_id != routing_id.to_string_view())
        it->second.routing_id = routing_id.to_string();
      it->second.last_used = now;
      return;
    }
    if (clients_.size() >= std::max<std::size_t>(opt_.max_clients, 1)) {
      auto oldest = clients_.begin();
      for (auto it = clients_.begin(); it != clients_.end(); ++it)
        if (it->second.last_used < oldest->second.last_used) oldest = it;
      clients_.erase(oldest);
    }
    clients_.emplace(host, client{routing_id.to_string(), now});
  }

  /// Forgets a client whose connection is gone, unless it has come back on another one.
  void forget_client(std::uint32_t host, const std::string& routing_id) {
    std::lock_guard lock{mu_};
    if (auto it = clients_.find(host); it != clients_.end() && it->second.routing_id == routing_id)
      clients_.erase(it);
  }

  /// Forgets clients idle for longer than client_idle. I/O thread, about once a second.
  void prune_clients(clock::time_point now) {
    std::lock_guard lock{mu_};
    std::erase_if(clients_,
                  [&](const auto& c) { return now - c.second.last_used > opt_.client_idle; });
  }

  /// Hands `msg` to ZeroMQ without waiting: through the ROUTER to a client (`routing_id`) or
  /// through the peer's DEALER. would_block: the DEALER's queue is full (the peer is down or
  /// slow), nothing was sent. A reply to a client that would block is dropped: a client that
  /// stopped reading must not hold messages here. REQUIRES: sock_mu_ held.
  sent send_now(const wire_message& msg, const std::string& routing_id) {
    const bool to_client = !routing_id.empty();
    zmq::socket_t* s = to_client ? &router_ : dealer_for(msg.hdr.dst.host);
    if (!s) {
      counter_.dropped();
      return sent::failed;
    }
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
        forget_client(msg.hdr.dst.host, routing_id);
        log("client host {} is gone; message {} dropped", msg.hdr.dst.host,
            to_string(msg.hdr.kind));
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

  /// Retries the messages waiting for room, oldest first per host; drops those that waited
  /// longer than send_timeout. Returns true while messages still wait. I/O thread.
  bool flush_queues() {
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

  /// Takes up to `most` waiting messages off `s` (each as its parts) without decoding them.
  /// REQUIRES: sock_mu_ held.
  std::size_t take(zmq::socket_t& s, std::size_t most,
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

  /// Decodes and delivers one received message. A ROUTER (`routed`) prefixes the sender's
  /// routing id; on a DEALER parts[0] is the header. I/O thread.
  void deliver(std::vector<zmq::message_t>& parts, bool routed) {
    const std::size_t head = routed ? 1 : 0;
    enum class why { malformed, frames, foreign };
    auto bad = [&](const coach::error& e, why w) {
      {
        std::lock_guard lock{recv_mu_};
        ++(w == why::foreign ? recv_.foreign : recv_.malformed);
        if (w == why::frames) ++recv_.malformed_frames;
      }
      log_dropped(
          "dropped a message from '{}': {}",
          routed && !parts.empty() ? printable_id(parts[0]) : std::string("a peer's ROUTER"),
          e.message);
    };
    if (parts.size() < head + 1)
      return bad({errc::protocol_error, "no header frame"}, why::malformed);
    const auto& header = parts[head];
    auto hdr = codec::decode_header({static_cast<const std::byte*>(header.data()), header.size()});
    if (!hdr) {
      const bool foreign = hdr.error().message.find("foreign wire version") != std::string::npos;
      return bad(hdr.error(), foreign ? why::foreign : why::malformed);
    }
    recv_sizes_.clear();
    for (std::size_t i = head + 1; i < parts.size(); ++i) recv_sizes_.push_back(parts[i].size());
    if (auto ok = codec::check_frames(*hdr, recv_sizes_); !ok) return bad(ok.error(), why::frames);
    wire_message msg;
    msg.hdr = std::move(hdr->env);
    // A sender that addressed host 0 meant the node at the other end of its link: this one.
    if (msg.hdr.dst.host == 0) msg.hdr.dst.host = opt_.host;
    if (routed) remember_client(msg.hdr.src.host, parts[0]);
    std::size_t bytes = header.size();
    for (std::size_t i = head + 1; i < parts.size(); ++i) {
      auto owner = std::make_shared<zmq::message_t>(std::move(parts[i]));
      bytes += owner->size();
      msg.frames.push_back(
          frame{owner, static_cast<const std::byte*>(owner->data()), owner->size(), true});
    }
    auto route = msg.hdr.dst.host == opt_.host ? routes_.find_route(msg.hdr.dst)
                                               : detail::route_table::route{};
    const auto& dst = route.handle;
    {
      std::lock_guard lock{recv_mu_};
      if (!dst) {
        ++recv_.unknown_dst;
      } else {
        ++recv_.messages;
        recv_.bytes += bytes;
      }
    }
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

  /// Receives what waits on every socket, in bounded batches taken under the socket lock and
  /// decoded outside it, until no socket has input or after `rounds` rounds of batches; true
  /// when input may still wait then. Sends waiting for room are retried between batches. The
  /// bound returns a flooded I/O thread to run(), which answers ZAP requests and handshakes:
  /// without it, a peer sending without pause kept this loop going, and no new connection was
  /// accepted until the flood ended (`coach nodes` timed out; bench/fuzz_bench). I/O thread.
  bool receive_all() {
    constexpr std::size_t batch = 64;
    constexpr int rounds = 16;
    bool more = true;
    for (int round = 0; more && !stop_ && round < rounds; ++round) {
      more = false;
      incoming_.clear();
      routed_.clear();
      {
        std::lock_guard lock{sock_mu_};
        if (closed_) return false;
        if (take(router_, batch, incoming_) == batch) more = true;
        routed_.assign(incoming_.size(), true);
        for (auto& [host, d] : dealers_)
          if (take(d, batch, incoming_) == batch) more = true;
        routed_.resize(incoming_.size(), false);
      }
      for (std::size_t i = 0; i < incoming_.size(); ++i) deliver(incoming_[i], routed_[i]);
      incoming_.clear();
      if (unit_) unit_->run_chosen();
      if (more) flush_queues();
    }
    return more;
  }

  /// The descriptors to wait on: the eventfd, then each socket's ZMQ_FD. I/O thread.
  void refresh_poll_set(std::vector<pollfd>& fds, std::uint64_t& seen) {
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
    security_fds_ = fds.size();
    add(zap_);
    add(router_monitor_);
    for (auto& [host, m] : dealer_monitors_) add(m);
  }

  /// One monitor event: (event, value) and the endpoint; false when none waits.
  static bool next_event(zmq::socket_t& mon, std::uint16_t& event, std::uint32_t& value) {
    zmq::message_t head, where;
    if (!mon.recv(head, zmq::recv_flags::dontwait)) return false;
    if (head.more()) (void)mon.recv(where, zmq::recv_flags::dontwait);
    if (head.size() < 6) return false;
    std::memcpy(&event, head.data(), 2);
    std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
    return true;
  }

  /// Answers waiting ZAP requests (who may connect) and reads the handshake monitors: counts
  /// and logs refusals, records why a peer refused this node. I/O thread.
  void serve_security() {
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
    while (next_event(router_monitor_, event, value)) {
      const bool mismatch = event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                            value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH;
      std::uint64_t total = 0;
      {
        std::lock_guard r{recv_mu_};
        ++(mismatch ? recv_.refused_mechanism : recv_.failed_handshakes);
        total = recv_.refused();
      }
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

  /// Reads what the DEALERs' monitors say: connections made, closed, refused, handshakes.
  /// Returns the peers found gone. REQUIRES: sock_mu_ held (any thread: the I/O thread, or a
  /// caller of contact_of, which must not wait for the I/O thread's next wake).
  std::vector<std::uint32_t> read_dealer_monitors() {
    std::vector<std::uint32_t> gone;
    std::uint16_t event = 0;
    std::uint32_t value = 0;
    for (auto& [host, mon] : dealer_monitors_)
      while (next_event(mon, event, value)) {
        const bool was_connected = note_contact(host, event);
        if (note_connection(host, event, was_connected))
          gone.push_back(host);
        else if (event & handshake_events)
          note_handshake(host, event, value);
      }
    return gone;
  }

  /// Logs and hands on the peers found gone. Without sock_mu_.
  void report_gone(const std::vector<std::uint32_t>& gone) {
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

  /// Records how connecting to peer `host` went (contact_of); whether it was connected before
  /// this event. REQUIRES: sock_mu_ held.
  bool note_contact(std::uint32_t host, std::uint16_t event) {
    std::lock_guard lock{mu_};
    auto& c = contacts_[host];
    const bool was_connected = c.connected;
    auto& reached = attempt_reached_[host];  // this attempt's TCP connection was made
    if (event == ZMQ_EVENT_CONNECTED) {
      reached = true;
      connected_at_[host] = clock::now();
    }
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) c = {true, false};
    if (event == ZMQ_EVENT_DISCONNECTED) c.connected = false;
    if (event == ZMQ_EVENT_CONNECT_RETRIED) {
      // Refused only when not even TCP got through (a handshake that failed is a refusal of
      // another kind: refusal_of says which).
      if (!c.connected && !reached) c.connect_failed = true;
      reached = false;
    }
    return was_connected;
  }

  /// Follows a peer's connection: closed after its handshake had succeeded (armed; a handshake
  /// that failed or timed out closes a connection too, with its peer still there), then a
  /// reconnection refused (gone: true, once), or a handshake that succeeds again (disarmed).
  /// REQUIRES: sock_mu_ held.
  bool note_connection(std::uint32_t host, std::uint16_t event, bool was_connected) {
    if (event == ZMQ_EVENT_DISCONNECTED) {
      if (was_connected) closed_peers_[host] = true;
    } else if (event == ZMQ_EVENT_CONNECT_RETRIED) {
      auto it = closed_peers_.find(host);
      if (it == closed_peers_.end() || !it->second) return false;
      it->second = false;  // reported; again only after the next closed connection
      return true;
    } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      closed_peers_.erase(host);
    }
    return false;
  }

  /// ZAP (ZeroMQ RFC 27): version, request id, domain, address, routing id, mechanism, then the
  /// mechanism's credentials (CURVE: the client's 32-byte public key). I/O thread.
  void answer_zap(std::vector<zmq::message_t>& req) {
    if (req.size() < 6) return;  // cannot happen: libzmq's own request
    const auto mechanism = req[5].to_string();
    std::string client_key;
    if (mechanism == "CURVE" && req.size() > 6 && req[6].size() == 32) {
      std::array<char, 41> z{};
      zmq_z85_encode(z.data(), static_cast<const std::uint8_t*>(req[6].data()), 32);
      client_key = z.data();
    }
    const auto verdict = authorizer_.check(mechanism, req[3].to_string_view(), client_key);
    if (!verdict.accepted()) {
      std::uint64_t total = 0;
      {
        std::lock_guard r{recv_mu_};
        ++(verdict.why == refusal_reason::key       ? recv_.refused_key
           : verdict.why == refusal_reason::address ? recv_.refused_address
                                                    : recv_.refused_mechanism);
        total = recv_.refused();
      }
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

  /// Records how the last handshake with peer `host` ended: a refusal with its reason (the
  /// server's ZAP answer, or a mechanism mismatch) at once; a handshake that failed without
  /// detail (the server could not decrypt it: another server key; or it closed on a mismatch
  /// before saying so) only when no detailed reason is known, or the second time in a row.
  /// REQUIRES: sock_mu_ held.
  void note_handshake(std::uint32_t host, std::uint16_t event, std::uint32_t value) {
    std::string why, address, expected;
    {
      std::lock_guard lock{mu_};
      if (auto p = peers_.find(host); p != peers_.end()) {
        address = p->second.address;
        expected = opt_.security.server_key_for(p->second.key);
      }
    }
    const bool keyed = opt_.security.key.has_value();
    const bool no_detail = event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (no_detail && handshake_timed_out(host)) return;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      why = coach::format("not authorized: {} refused this process's {}", address,
                          keyed ? "key (it is not in that node's authorized keys)"
                                : "plain connection (that node takes them from loopback only; "
                                  "give --key or set COACH_KEY)");
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
             value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
      why = keyed ? coach::format(
                        "not authorized: {} uses no keys, this process does "
                        "(--key / COACH_KEY): both sides need keys, or neither",
                        address)
                  : coach::format(
                        "not authorized: {} requires a key: give --key FILE or set "
                        "COACH_KEY (coach keygen makes one)",
                        address);
    else if (event != ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
      why = keyed ? coach::format(
                        "not authorized: the handshake with {} failed: its key is not "
                        "the server key this process expects ({}...; --server-key), "
                        "or it uses no keys",
                        address, expected.substr(0, 8))
                  : coach::format(
                        "not authorized: the handshake with {} failed (it requires a "
                        "key: give --key FILE or set COACH_KEY)",
                        address);
    std::lock_guard lock{mu_};
    auto& vague = vague_failures_[host];
    if (why.empty()) {
      refusals_.erase(host);
      vague = 0;
      return;
    }
    auto& last = refusals_[host];
    if (no_detail && ++vague < opt_.vague_failures_to_refuse) return;  // a reason may follow
    if (no_detail && !last.empty()) return;                            // one is known
    if (!no_detail) vague = 0;
    if (last != why && opt_.log_refusals) log("{}", why);
    last = std::move(why);
  }

  /// A handshake that failed without detail as long after its TCP connection as
  /// handshake_interval: it timed out (the peer accepted the connection and never answered),
  /// which says nothing of keys. Noted in the peer's contact, said once. REQUIRES: sock_mu_ held.
  bool handshake_timed_out(std::uint32_t host) {
    std::string address;
    {
      std::lock_guard lock{mu_};
      const auto at = connected_at_.find(host);
      if (at == connected_at_.end() || clock::now() - at->second < opt_.handshake_interval * 9 / 10)
        return false;
      auto& c = contacts_[host];
      if (c.unanswered) return true;
      c.unanswered = true;
      if (auto p = peers_.find(host); p != peers_.end()) address = p->second.address;
    }
    if (opt_.log_refusals)
      log("the connection to {} was accepted but its handshake not answered within {:.0f} s (a "
          "frozen or overloaded host, or not a Coach node?); retrying",
          address, std::chrono::duration<double>(opt_.handshake_interval).count());
    return true;
  }

  void run() {
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
        prune_clients(now);
        serve_security();  // and once a second regardless
      }
    }
    flush_queues();
    std::lock_guard lock{sock_mu_};
    closed_ = true;
    dealer_monitors_.clear();
    dealers_.clear();
    router_monitor_.close();
    router_.close();
    zap_.close();
  }

  zmq_transport_options opt_;
  peer_authorizer authorizer_;
  /// Random per transport object: part of every DEALER's routing id.
  const std::uint32_t instance_ = std::random_device{}();
  zmq::context_t ctx_;
  std::string bound_;
  int wake_fd_ = -1;
  std::thread io_;
  std::atomic<bool> stop_{false};

  // Each lock (with what it guards) on cache lines of its own: senders on any thread and the
  // I/O thread take them on every message. Without this, adding one field to the options
  // (which shifts every member) went with 1 MiB ps_bench rounds at 0.78 instead of 0.84 of raw
  // ZeroMQ in 6 paired runs; aligned, the two layouts measure alike.
  /// A peer host: its address and, when known, its own public key.
  struct peer {
    std::string address;
    std::string key;
  };
  // guards peers_, clients_ and refusals_; taken after sock_mu_, never before it
  alignas(64) mutable std::mutex mu_;
  std::map<std::uint32_t, peer> peers_;
  std::map<std::uint32_t, std::string> refusals_;   ///< by peer host: why its handshake failed
  std::map<std::uint32_t, peer_contact> contacts_;  ///< by peer host: how connecting went
  std::map<std::uint32_t, bool> attempt_reached_;   ///< by peer host: TCP connected this try
  std::map<std::uint32_t, clock::time_point> connected_at_;  ///< by peer host: the last TCP connect
  std::map<std::uint32_t, int> vague_failures_;  ///< by peer host: failures without detail
  /// By peer host: its connection closed and no reconnection was refused since (true), or was
  /// (false: reported). Guarded by sock_mu_.
  std::map<std::uint32_t, bool> closed_peers_;
  peer_gone_handler on_peer_gone_;  ///< guarded by mu_
  std::unordered_map<std::uint32_t, client> clients_;

  // Sockets are used by whichever thread holds sock_mu_: senders send on them directly, the
  // I/O thread receives. Guarded by sock_mu_ too: the queues, the encoding scratch space.
  alignas(64) std::mutex sock_mu_;
  zmq::socket_t router_;
  zmq::socket_t zap_;             ///< the ZAP handler's endpoint (I/O thread only)
  zmq::socket_t router_monitor_;  ///< handshakes the ROUTER refused
  std::map<std::uint32_t, zmq::socket_t> dealers_;
  std::map<std::uint32_t, zmq::socket_t> dealer_monitors_;  ///< by host: its DEALER's handshakes
  std::uint64_t monitors_made_ = 0;
  std::map<std::uint32_t, std::deque<waiting>> queues_;  ///< by destination host
  bool queued_ = false;                                  ///< some queue is not empty
  bool closed_ = false;
  std::uint64_t sockets_changed_ = 0;
  std::vector<std::size_t> sizes_;
  std::vector<std::byte> header_;

  // I/O thread only.
  std::optional<detail::inline_unit>
      unit_;  ///< made at the first delivery (it needs the actor system)
  std::vector<std::vector<zmq::message_t>> incoming_;
  std::size_t security_fds_ = 0;  ///< where the ZAP and monitor sockets begin in the poll set
  std::vector<bool> routed_;
  std::vector<std::size_t> recv_sizes_;

  alignas(64) detail::route_table routes_;
  alignas(64) detail::traffic_counter counter_;
  alignas(64) mutable std::mutex recv_mu_;
  receive_stats recv_;
  log_limiter log_, dropped_log_;
};

}  // namespace

std::string to_string(const receive_stats& s) {
  return coach::format(
      "messages {}, bytes {}, malformed {}, malformed_frames {}, foreign {}, unknown_dst {}, "
      "refused_key {}, refused_address {}, refused_mechanism {}, failed_handshakes {}",
      s.messages, s.bytes, s.malformed, s.malformed_frames, s.foreign, s.unknown_dst, s.refused_key,
      s.refused_address, s.refused_mechanism, s.failed_handshakes);
}

result<std::shared_ptr<zmq_transport>> zmq_transport::start(zmq_transport_options opt) {
  auto t = std::make_shared<zmq_transport_impl>(std::move(opt));
  if (auto ok = t->open(); !ok) return std::unexpected(ok.error());
  return std::shared_ptr<zmq_transport>(std::move(t));
}

}  // namespace coach::actors
