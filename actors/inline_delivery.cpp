#include "actors/inline_delivery.hpp"

#include <caf/abstract_actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/send.hpp>

#include <utility>

namespace coach::actors {
namespace {

thread_local inline_scope* current_scope = nullptr;

}  // namespace

namespace detail {

void inline_unit::deliver(const caf::actor& dst, bool run_inline, wire_message msg) {
  candidate_ = run_inline
                   ? dynamic_cast<caf::resumable*>(caf::actor_cast<caf::abstract_actor*>(dst))
                   : nullptr;
  dst->eq_impl(caf::make_message_id(), nullptr, this, std::move(msg));
  candidate_ = nullptr;
}

void inline_unit::exec_later(caf::resumable* job) {
  if (job == candidate_ && chosen_ == nullptr)
    chosen_ = job;
  else
    system().scheduler().enqueue(job);
}

void inline_unit::run_chosen() {
  while (auto* job = std::exchange(chosen_, nullptr)) {
    switch (job->resume(this, 4)) {
      case caf::resumable::resume_later:
        system().scheduler().enqueue(job);
        break;
      default:  // done, awaiting_message (shutdown_execution_unit: not for actors)
        caf::intrusive_ptr_release(job);
        break;
    }
  }
}

void deliver_local(const caf::actor& dst, bool run_inline, wire_message msg) {
  auto* scope = current_scope;
  if (scope == nullptr || !run_inline) {
    caf::anon_send(dst, std::move(msg));
    return;
  }
  if (!scope->unit_)
    scope->unit_.emplace(&caf::actor_cast<caf::abstract_actor*>(dst)->home_system());
  scope->unit_->deliver(dst, true, std::move(msg));
}

}  // namespace detail

inline_scope::inline_scope() {
  if (current_scope != nullptr) return;
  current_scope = this;
  active_ = true;
}

inline_scope::~inline_scope() {
  if (!active_) return;
  // The actor run here sends as any other actor does (its messages are scheduled).
  current_scope = nullptr;
  if (unit_) unit_->run_chosen();
}

}  // namespace coach::actors
