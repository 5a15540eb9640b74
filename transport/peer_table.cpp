#include "transport/peer_table.hpp"

#include <algorithm>
#include <utility>

namespace coach::transport_logic {

peer_table::peer_table(std::uint32_t self, peer_table_options opt) : self_(self), opt_(opt) {}

bool peer_table::add_peer(std::uint32_t host, std::string address, std::string key) {
  auto& p = peers_[host];
  // A peer list may name a node whose key its sender did not know yet (the scheduler's own
  // before its first heartbeat): that is no change of key.
  if (key.empty()) key = p.key;
  // A node that came back with another key (rotated) is reached over a new connection.
  const bool changed = p.key != key || p.address != address;
  p.address = std::move(address);
  p.key = std::move(key);
  clients_.erase(host);
  return changed;
}

const peer_table::peer* peer_table::find_peer(std::uint32_t host) const {
  auto it = peers_.find(host);
  return it == peers_.end() ? nullptr : &it->second;
}

peer_table::route peer_table::route_to(std::uint32_t host, clock::time_point now) {
  if (peers_.contains(host)) return {route::via::peer, {}};
  auto it = clients_.find(host);
  if (it == clients_.end()) return {};
  it->second.last_used = now;
  return {route::via::client, it->second.routing_id};
}

void peer_table::remember_client(std::uint32_t host, std::string_view routing_id,
                                 clock::time_point now) {
  if (host == self_ || peers_.contains(host)) return;
  if (auto it = clients_.find(host); it != clients_.end()) {
    if (it->second.routing_id != routing_id) it->second.routing_id = std::string(routing_id);
    it->second.last_used = now;
    return;
  }
  if (clients_.size() >= std::max<std::size_t>(opt_.max_clients, 1)) {
    auto oldest = clients_.begin();
    for (auto it = clients_.begin(); it != clients_.end(); ++it)
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    clients_.erase(oldest);
  }
  clients_.emplace(host, client{std::string(routing_id), now});
}

void peer_table::forget_client(std::uint32_t host, std::string_view routing_id) {
  if (auto it = clients_.find(host); it != clients_.end() && it->second.routing_id == routing_id)
    clients_.erase(it);
}

void peer_table::prune_clients(clock::time_point now) {
  std::erase_if(clients_,
                [&](const auto& c) { return now - c.second.last_used > opt_.client_idle; });
}

std::string peer_table::client_id(std::uint32_t host) const {
  auto it = clients_.find(host);
  return it == clients_.end() ? std::string() : it->second.routing_id;
}

void peer_table::name(std::uint32_t host, std::string name) {
  if (!name.empty()) names_[host] = std::move(name);
}

std::string peer_table::label(std::uint32_t host) const {
  if (const auto it = names_.find(host); it != names_.end()) return it->second;
  if (host & 0x80000000u) return "clients";
  if (host == 0) return "scheduler";
  return std::to_string(host);
}

}  // namespace coach::transport_logic
