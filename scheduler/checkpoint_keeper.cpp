// scheduler/checkpoint_keeper.cpp: one job's latest checkpoint (checkpoint_keeper.hpp).
#include "scheduler/checkpoint_keeper.hpp"

namespace coach::scheduler {

void checkpoint_keeper::restore(std::uint32_t epoch, double at, state_ptr state) {
  state_ = std::move(state);
  epoch_ = epoch;
  at_ = at;
  stored_ = true;
}

bool checkpoint_keeper::offer(std::uint32_t epoch, state_ptr state, std::uint32_t epochs_done,
                              std::uint32_t epochs_total, double now) {
  if (!state) return false;
  // A checkpoint may overtake its epoch's record; taken first, a restart in between would
  // resume after an epoch the store has no record of (its samples missing from the status).
  if (epoch >= epochs_done) {
    held_.emplace(epoch, std::move(state));
    return false;
  }
  state_ = std::move(state);
  epoch_ = epoch;
  at_ = now;
  stored_ = false;
  return epoch + 1 >= epochs_total || now - stored_at_ >= store_every_s_;
}

std::optional<std::pair<std::uint32_t, checkpoint_keeper::state_ptr>> checkpoint_keeper::release(
    std::uint32_t epochs_done) {
  if (!held_ || held_->first >= epochs_done) return std::nullopt;
  auto out = std::move(*held_);
  held_.reset();
  return out;
}

}  // namespace coach::scheduler
