#include <caf/send.hpp>

#include "actors/inline_delivery.hpp"
#include "actors/route_table.hpp"
#include "actors/transport.hpp"

namespace coach::actors {

std::uint64_t traffic_stats::total_bytes() const noexcept {
  std::uint64_t n = 0;
  for (const auto& l : links) n += l.bytes;
  return n;
}

void bind_while_alive(const std::shared_ptr<transport>& net, const endpoint& ep,
                      const caf::actor& handle, bool run_inline) {
  if (run_inline)
    net->bind_inline(ep, handle);
  else
    net->bind(ep, handle);
  // Weak: the actor holds this functor until it ends, and must not keep the transport alive.
  handle->attach_functor([weak = std::weak_ptr<transport>(net), ep, who = handle.address()] {
    if (auto n = weak.lock()) n->unbind_if(ep, who);
  });
}

std::uint64_t traffic_stats::cross_host_bytes() const noexcept {
  std::uint64_t n = 0;
  for (const auto& l : links)
    if (l.src_host != l.dst_host) n += l.bytes;
  return n;
}

namespace {

/// Delivery inside one process: a CAF message carrying the frames' shared pointers (no copy).
class inproc_transport final : public transport {
 public:
  std::string_view name() const noexcept override { return "inproc"; }
  void bind(const endpoint& ep, caf::actor handle) override { routes_.bind(ep, std::move(handle)); }
  void bind_inline(const endpoint& ep, caf::actor handle) override {
    routes_.bind(ep, std::move(handle), true);
  }
  void unbind(const endpoint& ep) override { routes_.unbind(ep); }
  void unbind_if(const endpoint& ep, const caf::actor_addr& who) override {
    routes_.unbind_if(ep, who);
  }

  bool send(wire_message msg) override {
    auto route = routes_.find_route(msg.hdr.dst);
    if (!route.handle) {
      counter_.dropped();
      return false;
    }
    counter_.sent(msg.hdr.job, msg.hdr.src.host, msg.hdr.dst.host, msg.hdr.kind, msg.wire_bytes());
    detail::deliver_local(route.handle, route.run_inline, std::move(msg));
    return true;
  }

  traffic_stats traffic() const override { return counter_.snapshot(); }

 private:
  detail::route_table routes_;
  detail::traffic_counter counter_;
};

}  // namespace

std::shared_ptr<transport> make_inproc_transport() {
  return std::make_shared<inproc_transport>();
}

}  // namespace coach::actors
