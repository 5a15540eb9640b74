#pragma once
// actors::faulty_transport: a transport that wraps another and breaks the network the way real
// ones break, reproducibly: it drops, duplicates, delays and reorders messages (each with a
// probability, drawn from a seeded generator), cuts the link between two hosts, and kills an
// actor at a chosen message as a crash would. Fault injection lives here, around the transport
// seam, and nowhere in production code paths (docs/design.md, "Faults").
//
// What passes through is handed to the inner transport unchanged; with no fault planned the
// wrapper behaves as the inner transport (the contract suite runs over both). Messages held for
// a delay are sent by a timer thread of the wrapper; so are messages held for a reorder whose
// successor never comes (after max_delay).
//
// Threads: send() from any thread, as every transport; the plan's draws and the held messages
// are under one lock. The timer thread sends outside it.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "actors/transport.hpp"

namespace coach::actors {

/// What goes wrong, per message; probabilities in [0, 1].
struct fault_plan {
  std::uint64_t seed = 1;
  double drop = 0;       ///< lost
  double duplicate = 0;  ///< delivered twice (the copy right after the original)
  /// Held for a random time up to max_delay, the later messages of its link (sender and
  /// receiver) behind it, as on a slow connection: other links' messages overtake it.
  double delay = 0;
  /// Held until the next message to the same endpoint (from any sender) has gone: two
  /// messages swapped, the order of one link broken (which no connection does).
  double reorder = 0;
  std::chrono::microseconds max_delay{2000};
  /// The messages the probabilities apply to (default: all); cuts and kills apply regardless.
  std::function<bool(const wire_message&)> applies;
};

/// What the wrapper did so far.
struct fault_counts {
  std::uint64_t passed = 0;  ///< handed on unchanged, at once
  std::uint64_t dropped = 0;
  std::uint64_t duplicated = 0;
  std::uint64_t delayed = 0;
  std::uint64_t reordered = 0;
  std::uint64_t cut = 0;     ///< lost on a cut link
  std::uint64_t killed = 0;  ///< lost because their sender was killed
};

class faulty_transport : public transport {
 public:
  /// Faults are drawn per message; a plan of zeros passes everything through.
  static std::shared_ptr<faulty_transport> wrap(std::shared_ptr<transport> inner, fault_plan plan);

  /// Messages between hosts `a` and `b` (both ways) are lost until heal(a, b).
  virtual void cut(std::uint32_t a, std::uint32_t b) = 0;
  virtual void heal(std::uint32_t a, std::uint32_t b) = 0;
  /// A crash: once the actor at `ep` has sent `nth` messages of `kind` in `step`, the next
  /// message it sends (of any kind) and every later one are lost, `ep` is unbound and the actor
  /// bound there is killed (caf::exit_reason::kill; monitors see it die). E.g. a worker that
  /// crashes between its pushes to two shards: crash_after(worker, push, step, 1). "Every
  /// later one": those sent from the thread it crashed on (a detached actor's own: a
  /// worker's); messages other actors send in its name (a job master completing its steps)
  /// pass.
  virtual void crash_after(const endpoint& ep, msg_kind kind, std::int64_t step, int nth) = 0;
  virtual fault_counts counts() const = 0;
  /// Sends every held message now; returns once none is held.
  virtual void flush() = 0;
};

}  // namespace coach::actors
