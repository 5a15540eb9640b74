#include "scheduler/node_table.hpp"

#include <algorithm>
#include <set>

#include "common/format.hpp"

namespace coach::scheduler {

heard node_table::heartbeat(node_report report) {
  auto [it, fresh] = nodes_.try_emplace(report.host);
  auto& n = it->second;
  heard out;
  out.joined = fresh;
  out.back = !fresh && !n.alive;
  out.moved = fresh || n.last.address != report.address;
  n.last = std::move(report);
  n.seen = clock_.now();
  n.alive = true;
  return out;
}

std::vector<std::uint32_t> node_table::expire() {
  const auto as_of = check();
  return as_of ? expire_as_of(*as_of) : std::vector<std::uint32_t>{};
}

std::optional<time_point> node_table::check() {
  const auto now = clock_.now();
  // A call on time comes one check period after the previous; one later than two periods means
  // the owner was busy, and what lies beyond the period it could not have heard.
  if (last_expire_ && now - *last_expire_ > 2 * check_every()) {
    const auto deaf = now - *last_expire_ - check_every();
    for (auto& [host, n] : nodes_)
      if (n.alive) n.seen = std::min(now, n.seen + deaf);
  }
  last_expire_ = now;
  for (const auto& [host, n] : nodes_)
    if (n.alive && now - n.seen > timeout_) return now;
  return std::nullopt;
}

std::vector<std::uint32_t> node_table::expire_as_of(time_point as_of) {
  std::vector<std::uint32_t> out;
  for (auto& [host, n] : nodes_) {
    if (!n.alive || as_of - n.seen <= timeout_) continue;
    n.alive = false;
    out.push_back(host);
  }
  return out;
}

bool node_table::lose(std::uint32_t host) {
  auto it = nodes_.find(host);
  if (it == nodes_.end() || !it->second.alive) return false;
  it->second.alive = false;
  return true;
}

const node_entry* node_table::find(std::uint32_t host) const {
  auto it = nodes_.find(host);
  return it == nodes_.end() ? nullptr : &it->second;
}

bool node_table::usable(std::uint32_t host) const {
  const auto* n = find(host);
  return n && n->alive && !n->last.draining;
}

std::string node_table::name(std::uint32_t host) const {
  const auto* n = find(host);
  return n ? n->last.name : coach::format("host {}", host);
}

result<std::uint32_t> node_table::by_name(std::string_view name) const {
  // A live node's name is its alone (the cluster scheduler refuses a second); a dead node's
  // may have been taken by a live one since, which is the one meant.
  const node_entry* dead = nullptr;
  for (const auto& [host, n] : nodes_) {
    if (n.last.name != name) continue;
    if (!n.alive) {
      dead = &n;
      continue;
    }
    if (n.last.draining) return fail(errc::resource_exhausted, "node '{}' is draining", name);
    return host;
  }
  if (dead) return fail(errc::resource_exhausted, "node '{}' is not heartbeating", name);
  return fail(errc::not_found, "no node named '{}'", name);
}

double node_table::silent_for(std::uint32_t host) const {
  const auto* n = find(host);
  return n ? (clock_.now() - n->seen).count() : 0.0;
}

namespace {

/// CPU figures closer to 0 than this are 0 (sums of fractional reservations).
constexpr double cpu_epsilon = 1e-9;

/// The node's GPU ids free for a new worker (see the file comment).
int free_gpus(const host_resources& r) {
  std::set<int> owned, shared;
  for (const auto& h : r.gpus_held) (h.own ? owned : shared).insert(h.device);
  int free = 0;
  for (int g : r.gpus_total) {
    if (owned.contains(g)) continue;
    const bool idle = std::find(r.gpus_free.begin(), r.gpus_free.end(), g) != r.gpus_free.end();
    if (idle || shared.contains(g)) ++free;
  }
  return free;
}

}  // namespace

cluster_view node_table::view(const std::map<std::uint32_t, resources>& reserved) const {
  std::vector<const node_entry*> usable;
  for (const auto& [host, n] : nodes_)
    if (n.alive && !n.last.draining) usable.push_back(&n);
  std::sort(usable.begin(), usable.end(),
            [](const node_entry* a, const node_entry* b) { return a->last.name < b->last.name; });
  cluster_view view;
  for (const auto* n : usable) {
    const auto& r = n->last.resources;
    node_view v;
    v.id = n->last.host;
    v.total = {int(r.gpus_total.size()), double(r.cpus_total), r.memory_total};
    resources out{};
    if (auto g = reserved.find(v.id); g != reserved.end()) out = g->second;
    v.free.gpus = std::max(0, std::min(free_gpus(r), v.total.gpus - out.gpus));
    // What other programs keep busy is not Coach's to give; below 0 the node is over-committed
    // and elastic policies shrink jobs there (policy_detail.hpp, planner::shed_overcommit).
    v.free.cpus =
        std::max(0.0, v.total.cpus - out.cpus) - std::clamp(r.cpus_external, 0.0, v.total.cpus);
    if (v.free.cpus > -cpu_epsilon && v.free.cpus < 0) v.free.cpus = 0;
    v.free.memory = std::min(r.memory_free, v.total.memory);
    view.nodes.push_back(v);
  }
  return view;
}

}  // namespace coach::scheduler
