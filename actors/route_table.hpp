#pragma once
// actors::detail::route_table and traffic_counter: the parts every transport shares — where
// local endpoints are, and counts of what was sent.
//
// Threads: both are called from any thread. route_table is read on every send and written on
// bind/unbind, under a shared_mutex; traffic_counter adds under a plain mutex held for a few
// additions per message.

#include <caf/actor.hpp>

#include <map>
#include <mutex>
#include <shared_mutex>
#include <tuple>
#include <unordered_map>

#include "actors/transport.hpp"

namespace coach::actors::detail {

class route_table {
 public:
  /// Where messages for an endpoint go; `run_inline`: see transport::bind_inline.
  struct route {
    caf::actor handle;
    bool run_inline = false;
  };

  void bind(const endpoint& ep, caf::actor handle, bool run_inline = false) {
    std::unique_lock lock{mu_};
    routes_[key(ep)] = route{std::move(handle), run_inline};
  }
  void unbind(const endpoint& ep) {
    std::unique_lock lock{mu_};
    routes_.erase(key(ep));
  }
  void unbind_if(const endpoint& ep, const caf::actor_addr& who) {
    std::unique_lock lock{mu_};
    auto it = routes_.find(key(ep));
    if (it != routes_.end() && it->second.handle.address() == who) routes_.erase(it);
  }
  /// The actor bound to ep, or an invalid handle.
  caf::actor find(const endpoint& ep) const { return find_route(ep).handle; }
  /// The route of ep; an invalid handle when there is none.
  route find_route(const endpoint& ep) const {
    std::shared_lock lock{mu_};
    auto it = routes_.find(key(ep));
    return it == routes_.end() ? route{} : it->second;
  }

 private:
  static std::uint64_t key(const endpoint& ep) noexcept {
    return ep.id ^ (std::uint64_t(ep.host) << 48);
  }
  mutable std::shared_mutex mu_;
  std::unordered_map<std::uint64_t, route> routes_;
};

class traffic_counter {
 public:
  void sent(std::uint64_t job, std::uint32_t src_host, std::uint32_t dst_host, msg_kind kind,
            std::size_t bytes) {
    std::lock_guard lock{mu_};
    auto& link = links_[{job, src_host, dst_host}];
    ++link.first;
    link.second += bytes;
    const auto k = std::size_t(kind);
    if (k < msg_kind_count) {
      ++stats_.kind_messages[k];
      stats_.kind_bytes[k] += bytes;
    }
  }
  void dropped() {
    std::lock_guard lock{mu_};
    ++stats_.dropped;
  }
  traffic_stats snapshot() const {
    std::lock_guard lock{mu_};
    traffic_stats out = stats_;
    for (const auto& [k, v] : links_)
      out.links.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), v.first, v.second});
    return out;
  }

 private:
  mutable std::mutex mu_;
  traffic_stats stats_;
  std::map<std::tuple<std::uint64_t, std::uint32_t, std::uint32_t>,
           std::pair<std::uint64_t, std::uint64_t>>
      links_;
};

}  // namespace coach::actors::detail
