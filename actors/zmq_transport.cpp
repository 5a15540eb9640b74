// actors::zmq_transport: start and the public calls (actors/zmq_transport_impl.hpp has the
// files of the rest).
#include "actors/zmq_transport.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "actors/zmq_transport_impl.hpp"

namespace coach::actors {
namespace detail {

zmq_transport_impl::zmq_transport_impl(zmq_transport_options opt)
    : opt_(std::move(opt)),
      authorizer_(opt_.security.key ? opt_.security.authorized_dir : std::filesystem::path()),
      ctx_(std::max(1, opt_.io_threads)),
      peers_(opt_.host, {opt_.client_idle, opt_.max_clients}),
      links_({opt_.handshake_interval, opt_.vague_failures_to_refuse,
              opt_.security.key.has_value()}) {}

zmq_transport_impl::~zmq_transport_impl() {
  stop_ = true;
  wake();
  if (io_.joinable()) io_.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

result<void> zmq_transport_impl::open() {
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
    open_data();  // with a key: data connections (zmq_transport_data.cpp)
  } catch (const zmq::error_t& e) {
    return fail(errc::invalid_argument, "cannot listen on '{}': {}", opt_.listen, e.what());
  }
  io_ = std::thread([this] { run(); });
  return {};
}

bool zmq_transport_impl::send(wire_message msg) {
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
    auto route = peers_.route_to(host, clock::now());
    if (route.how == coach::transport_logic::peer_table::route::via::none) {
      counter_.dropped();
      log("no route to host {} (message {})", host, to_string(msg.hdr.kind));
      return false;
    }
    routing_id = std::move(route.routing_id);
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

void zmq_transport_impl::connect(std::uint32_t host) {
  std::lock_guard lock{sock_mu_};
  if (!closed_) dealer_for(host);
}

void zmq_transport_impl::add_peer(std::uint32_t host, std::string address, std::string public_key) {
  std::lock_guard socks{sock_mu_};
  std::lock_guard lock{mu_};
  // A changed key or address is reached over a new connection.
  if (peers_.add_peer(host, std::move(address), std::move(public_key)) &&
      dealers_.erase(host) > 0) {
    dealer_monitors_.erase(host);
    forget_data_link(host);
    links_.forget(host);
    ++sockets_changed_;
  }
}

void zmq_transport_impl::name_peer(std::uint32_t host, std::string name) {
  std::lock_guard lock{mu_};
  peers_.name(host, std::move(name));
}

std::string zmq_transport_impl::peer_label(std::uint32_t host) const {
  std::lock_guard lock{mu_};
  return peers_.label(host);
}

zmq_transport::peer_contact zmq_transport_impl::contact_of(std::uint32_t host) {
  std::vector<std::uint32_t> gone;
  {
    std::lock_guard socks{sock_mu_};
    gone = read_dealer_monitors();
  }
  report_gone(gone);
  std::lock_guard lock{mu_};
  return links_.contact(host);
}

std::string zmq_transport_impl::refusal_of(std::uint32_t host) const {
  std::lock_guard lock{mu_};
  return links_.refusal(host);
}

void zmq_transport_impl::on_peer_gone(peer_gone_handler handler) {
  std::lock_guard lock{mu_};
  on_peer_gone_ = std::move(handler);
}

std::string zmq_transport_impl::public_key() const {
  return opt_.security.key ? opt_.security.key->public_key : std::string();
}

bool zmq_transport_impl::has_peer(std::uint32_t host) {
  std::lock_guard lock{mu_};
  return peers_.has_peer(host);
}

void zmq_transport_impl::wake() {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
}

void zmq_transport_impl::note_readable(zmq::socket_t& s) {
  try {
    if (s.get(zmq::sockopt::events) & ZMQ_POLLIN) wake();
  } catch (const zmq::error_t&) {
  }
}

zmq::socket_t zmq_transport_impl::monitor(zmq::socket_t& s, const std::string& name, int events) {
  if (zmq_socket_monitor(s.handle(), name.c_str(), events) != 0) throw zmq::error_t();
  zmq::socket_t pair(ctx_, zmq::socket_type::pair);
  pair.set(zmq::sockopt::linger, 0);
  pair.connect(name);
  return pair;
}

}  // namespace detail

result<std::shared_ptr<zmq_transport>> zmq_transport::start(zmq_transport_options opt) {
  auto t = std::make_shared<detail::zmq_transport_impl>(std::move(opt));
  if (auto ok = t->open(); !ok) return std::unexpected(ok.error());
  return std::shared_ptr<zmq_transport>(std::move(t));
}

}  // namespace coach::actors
