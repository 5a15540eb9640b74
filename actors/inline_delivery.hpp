#pragma once
// actors::detail::inline_unit and actors::inline_scope: running an idle actor on the thread that
// delivered a message to it, instead of waking a scheduler thread for it (transport::
// bind_inline). Two threads deliver that way:
// - a transport's receiving thread (zmq_transport's I/O thread) after each batch it receives;
// - a thread inside an inline_scope (a worker ending its step): for the messages it sends to
//   actors of its own process, when the scope closes.
//
// Threads: an inline_unit belongs to the one thread that delivers through it.

#include <caf/actor.hpp>
#include <caf/execution_unit.hpp>

#include <optional>

#include "actors/messages.hpp"

namespace coach::actors {

namespace detail {

/// A thread as a CAF execution unit: an actor bound with bind_inline that a delivery makes
/// ready (it was idle) is run on this thread by run_chosen(), at most one per batch of
/// deliveries; every other actor made ready goes to the scheduler at once, so several shards
/// of one node still update in parallel.
class inline_unit final : public caf::execution_unit {
 public:
  explicit inline_unit(caf::actor_system* sys) : caf::execution_unit(sys) {}

  /// Delivers `msg` to `dst`; `run_inline`: dst may be run here (see run_chosen()).
  void deliver(const caf::actor& dst, bool run_inline, wire_message msg);

  /// Called by CAF when a delivery (or an actor run here) makes an idle actor ready, holding a
  /// reference for us.
  void exec_later(caf::resumable* job) override;

  /// Runs the actor chosen during the last deliveries, a few messages at most; what is left in
  /// its mailbox goes on on a scheduler thread.
  void run_chosen();

 private:
  caf::resumable* candidate_ = nullptr;
  caf::resumable* chosen_ = nullptr;
};

/// Delivers a message to an actor of this process: through the calling thread's inline_scope
/// when there is one and the route allows it, else by an ordinary asynchronous send.
void deliver_local(const caf::actor& dst, bool run_inline, wire_message msg);

}  // namespace detail

/// While one is open on a thread, a message that thread sends to an idle actor of the same
/// process bound with bind_inline (a shard) may wake no scheduler thread: the first such actor
/// runs on this thread when the scope closes (a few messages at most; the rest of its mailbox
/// goes to the scheduler). For a thread that ends its work with such messages and then waits
/// for their answers: a worker pushing its gradient. Both hand-offs of a push and its reply are
/// then gone (the reply finds the worker awake). Scopes do not nest: an inner one is inert.
class inline_scope {
 public:
  inline_scope();
  ~inline_scope();
  inline_scope(const inline_scope&) = delete;
  inline_scope& operator=(const inline_scope&) = delete;

 private:
  friend void detail::deliver_local(const caf::actor&, bool, wire_message);
  bool active_ = false;
  std::optional<detail::inline_unit> unit_;  ///< made at the first delivery (needs the system)
};

}  // namespace coach::actors
