#include "actors/api_client.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <thread>
#include <utility>

#include "actors/address.hpp"
#include "actors/zmq_transport.hpp"

namespace coach::actors {

struct api_client::impl {
  std::string address;
  std::shared_ptr<zmq_transport> net;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::uint64_t next_id = 1;
  /// Set once the node refused this client: the transport is closed then (else it reconnects
  /// every 100 ms and each attempt is one more refusal counted and logged there), and every
  /// later call fails with the same reason.
  std::string refused;

  /// Closes the connection for good after a refusal `why`; returns the error.
  error refuse(std::string why) {
    refused = std::move(why);
    net.reset();
    return error{errc::not_authorized, refused};
  }
};

result<std::unique_ptr<api_client>> api_client::open(const std::string& address,
                                                     transport_security security) {
  auto normal = tcp_address(address);
  if (!normal) return std::unexpected(normal.error());
  std::unique_ptr<api_client> c(new api_client());
  c->impl_ = std::make_unique<impl>();
  auto& m = *c->impl_;
  m.address = *normal;
  // The reply comes back over this client's own connection; the listening socket is never used
  // by peers, so loopback with any port will do.
  auto net = zmq_transport::start({.host = client_host_id(),
                                   .listen = "tcp://127.0.0.1:0",
                                   .security = std::move(security),
                                   .log_refusals = false,
                                   .vague_failures_to_refuse = 1});
  if (!net) return std::unexpected(net.error());
  m.net = std::move(*net);
  m.net->add_peer(0, m.address);
  m.cfg.set("logger.console", caf::atom("none"));
  m.cfg.set("scheduler.max-threads", std::size_t(1));
  m.cfg.set("scheduler.policy", caf::atom("sharing"));
  m.sys = std::make_unique<caf::actor_system>(m.cfg);
  return c;
}

api_client::~api_client() {
  if (impl_) impl_->net.reset();
}

result<void> api_client::reach(std::chrono::milliseconds within, std::function<void()> slow,
                               std::chrono::milliseconds slow_after) {
  auto& m = *impl_;
  if (!m.net) return std::unexpected(error{errc::not_authorized, m.refused});
  const auto began = std::chrono::steady_clock::now();
  const auto deadline = began + within;
  m.net->connect(0);
  for (;;) {
    if (auto why = m.net->refusal_of(0); !why.empty())
      return std::unexpected(m.refuse(std::move(why)));
    const auto c = m.net->contact_of(0);
    if (c.connected) return {};
    if (c.connect_failed)
      return fail(errc::io_error,
                  "no answer from {}: connection refused (nothing listens there: is the "
                  "scheduler's coach-node running?)",
                  m.address);
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      return fail(errc::io_error, "no answer from {}: no connection within {} s{}", m.address,
                  std::chrono::duration<double>(within).count(),
                  c.unanswered ? " (it accepts connections but never answers the handshake: a "
                                 "frozen or overloaded host, or not a coach-node there?)"
                               : "");
    if (slow && now - began >= slow_after) std::exchange(slow, nullptr)();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

result<api_reply> api_client::call(const api_request& req, std::chrono::milliseconds timeout,
                                   std::chrono::milliseconds resend_every) {
  auto& m = *impl_;
  if (!m.net) return std::unexpected(error{errc::not_authorized, m.refused});
  caf::scoped_actor self{*m.sys};
  // The client's endpoint carries its transport's host id so the reply finds its way back.
  const endpoint from{m.net->host_id(), 0x1000 + m.next_id++};
  m.net->bind(from, caf::actor_cast<caf::actor>(self));
  m.net->send(make_control(from, {0, scheduler_id}, req));
  std::optional<result<api_reply>> out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto resend_at = std::chrono::steady_clock::now() + resend_every;
  while (!out) {
    if (resend_every.count() > 0 && std::chrono::steady_clock::now() >= resend_at) {
      m.net->send(make_control(from, {0, scheduler_id}, req));
      resend_at = std::chrono::steady_clock::now() + resend_every;
    }
    // A refused handshake is known within milliseconds; it ends the wait (looked at every
    // 50 ms) instead of the timeout.
    if (auto why = m.net->refusal_of(0); !why.empty()) {
      m.net->unbind(from);
      return std::unexpected(m.refuse(std::move(why)));
    }
    const auto left = std::min(std::chrono::milliseconds(50),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()));
    if (left.count() <= 0) break;
    self->receive(
        [&](wire_message& msg) {
          if (msg.hdr.kind != msg_kind::control || msg.frames.empty()) return;
          auto decoded = control_codec::decode({msg.frames[0].data, msg.frames[0].bytes});
          if (!decoded) {
            out = std::unexpected(decoded.error());
            return;
          }
          if (auto* r = std::get_if<api_reply>(&*decoded))
            out = std::move(*r);
          else
            out = fail(errc::protocol_error, "{} answered with something other than a reply",
                       m.address);
        },
        caf::after(left) >> [] {});
  }
  m.net->unbind(from);
  if (!out)
    return fail(errc::io_error, "no answer from a Coach scheduler at {} within {} s", m.address,
                double(timeout.count()) / 1000.0);
  return std::move(*out);
}

}  // namespace coach::actors
