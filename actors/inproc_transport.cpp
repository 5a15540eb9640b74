#include <caf/send.hpp>

#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "actors/transport.hpp"

namespace coach::actors {

std::uint64_t traffic_stats::total_bytes() const noexcept {
  std::uint64_t n = 0;
  for (const auto& l : links) n += l.bytes;
  return n;
}

std::uint64_t traffic_stats::cross_host_bytes() const noexcept {
  std::uint64_t n = 0;
  for (const auto& l : links)
    if (l.src_host != l.dst_host) n += l.bytes;
  return n;
}

namespace {

// Routing table under a shared_mutex (read on every send, written on bind/unbind); counters
// under a plain mutex held for a few additions per message.
class inproc_transport final : public transport {
 public:
  std::string_view name() const noexcept override { return "inproc"; }

  void bind(const endpoint& ep, caf::actor handle) override {
    std::unique_lock lock{routes_mu_};
    routes_[key(ep)] = std::move(handle);
  }

  void unbind(const endpoint& ep) override {
    std::unique_lock lock{routes_mu_};
    routes_.erase(key(ep));
  }

  bool send(wire_message msg) override {
    caf::actor dst;
    {
      std::shared_lock lock{routes_mu_};
      auto it = routes_.find(key(msg.hdr.dst));
      if (it != routes_.end()) dst = it->second;
    }
    const std::size_t bytes = msg.wire_bytes();
    const auto kind = std::size_t(msg.hdr.kind);
    {
      std::lock_guard lock{stats_mu_};
      if (!dst) {
        ++stats_.dropped;
        return false;
      }
      auto& link = links_[{msg.hdr.src.host, msg.hdr.dst.host}];
      ++link.first;
      link.second += bytes;
      if (kind < msg_kind_count) {
        ++stats_.kind_messages[kind];
        stats_.kind_bytes[kind] += bytes;
      }
    }
    caf::anon_send(dst, std::move(msg));
    return true;
  }

  traffic_stats traffic() const override {
    std::lock_guard lock{stats_mu_};
    traffic_stats out = stats_;
    for (const auto& [k, v] : links_) out.links.push_back({k.first, k.second, v.first, v.second});
    return out;
  }

 private:
  static std::uint64_t key(const endpoint& ep) noexcept {
    return ep.id ^ (std::uint64_t(ep.host) << 48);
  }

  mutable std::shared_mutex routes_mu_;
  std::unordered_map<std::uint64_t, caf::actor> routes_;
  mutable std::mutex stats_mu_;
  traffic_stats stats_;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::pair<std::uint64_t, std::uint64_t>> links_;
};

}  // namespace

std::shared_ptr<transport> make_inproc_transport() {
  return std::make_shared<inproc_transport>();
}

}  // namespace coach::actors
