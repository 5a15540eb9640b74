#pragma once
// scheduler::node_table: the cluster scheduler's view of its nodes, from their heartbeats. A
// node is alive while it heartbeats at least once per `timeout`; one silent for longer is dead
// (expire() reports it once) until it heartbeats again. Live nodes that are not draining take
// work; view() turns them into the cluster_view a policy sees, less what the scheduler has
// handed out on each (its reservations):
//
//   free GPUs  = the fewer of the GPU ids free on the node and the node's total less what the
//                scheduler gave out; an id is free when no Coach worker owns it
//                (gpus_per_worker >= 1, as the node reports) and either no process uses it
//                (measured: other programs count) or only Coach's sharing workers do;
//   free CPUs  = the node's advertised CPUs (coach-node --cpus N sets them, even above the
//                host's own count) less what the scheduler gave out: a load average counts our own
//                parts and lags by a minute, so it cannot say what a new part would get;
//   free memory = measured.
//
// Plain logic with an injected clock (common/clock.hpp): tests drive liveness with a
// manual_clock. Threads: none; the owner (the scheduler actor) calls it from one thread.

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "host/host_probe.hpp"
#include "scheduler/cluster_view.hpp"

namespace coach::scheduler {

/// What one heartbeat says of its node.
struct node_report {
  std::uint32_t host = 0;  ///< unique per node
  std::string name;
  std::string address;     ///< where its transport listens, "tcp://IP:PORT"
  std::string public_key;  ///< its CURVE public key (Z85); empty: none
  host_resources resources;
  std::uint32_t parts_running = 0;  ///< shards and workers it runs
  bool draining = false;            ///< takes no new work
};

/// A node as the table knows it.
struct node_entry {
  node_report last;   ///< its latest heartbeat
  time_point seen{};  ///< when that arrived
  bool alive = true;
};

/// What one heartbeat changed.
struct heard {
  bool joined = false;  ///< first heartbeat of this host
  bool back = false;    ///< it was dead and heartbeats again
  bool moved = false;   ///< its address is new (first heartbeat or a restart elsewhere)
};

class node_table {
 public:
  /// REQUIRES: `clock` outlives the table; timeout > 0.
  node_table(const clock_source& clock, seconds timeout) : clock_(clock), timeout_(timeout) {}

  /// Records a heartbeat (now, by the clock).
  heard heartbeat(node_report report);
  /// Marks dead the nodes silent for longer than the timeout; returns those newly dead. The owner
  /// calls it on a timer, every check_every(). Silence the owner could not have heard does not
  /// count: when more than two periods passed since the previous call (the owner was busy, its
  /// timer late, and heartbeats waited in its mailbox), every live node's silence is shortened
  /// by the gap less one period.
  std::vector<std::uint32_t> expire();
  /// expire() in two steps, for an owner whose mailbox may hold heartbeats it has not read
  /// (a scheduler busy with the job API): check() applies the busy-owner correction and returns
  /// the time to judge silence by (now) when some live node has been silent for longer than the
  /// timeout, nullopt when none has; the owner reads what its mailbox holds, then calls
  /// expire_as_of with that time, which marks dead only the nodes still silent for longer than
  /// the timeout as of it (a heartbeat read in between keeps its node alive).
  std::optional<time_point> check();
  std::vector<std::uint32_t> expire_as_of(time_point as_of);

  /// Marks a live node dead now, without waiting for the timeout: its process is known to be
  /// gone (its connections closed). True when it was alive (the owner handles the loss, as for
  /// one expire() reports); it is back on its next heartbeat.
  bool lose(std::uint32_t host);

  /// The node, or null.
  const node_entry* find(std::uint32_t host) const;
  /// Alive and not draining: takes work.
  bool usable(std::uint32_t host) const;
  /// The name of a node, or "host N" for one never heard of.
  std::string name(std::uint32_t host) const;
  /// The usable node named `name` (a live one before a dead one of that name). Errors:
  /// not_found (no such node), resource_exhausted (not heartbeating, draining), each naming it.
  result<std::uint32_t> by_name(std::string_view name) const;
  /// Seconds since the node's last heartbeat.
  double silent_for(std::uint32_t host) const;

  /// The usable nodes by name, free resources less `reserved` (see the file comment).
  cluster_view view(const std::map<std::uint32_t, resources>& reserved) const;

  const std::map<std::uint32_t, node_entry>& nodes() const noexcept { return nodes_; }
  seconds timeout() const noexcept { return timeout_; }
  /// REQUIRES: t > 0.
  void set_timeout(seconds t) noexcept { timeout_ = t; }
  /// How often the owner calls expire(): the scheduler checks at a quarter of the timeout, at
  /// most every 0.5 s.
  seconds check_every() const noexcept { return std::min(seconds(0.5), timeout_ / 4); }

 private:
  const clock_source& clock_;
  seconds timeout_;
  std::map<std::uint32_t, node_entry> nodes_;
  std::optional<time_point> last_expire_;
};

}  // namespace coach::scheduler
