#pragma once
// scheduler::checkpoint_keeper: one job's latest checkpoint (the training state after an
// epoch: values, optimizer state, counters) and when it is due in the store. The registry
// keeps it so that a suspended or recovering job resumes from it, and writes it to the store
// when it is due: store_every_s after the last write, and for the job's last epoch. A
// checkpoint may overtake the record of the epoch it ends: it is held until that record is in
// (so the store never holds a checkpoint ahead of its epochs' records). Plain data and rules;
// the store's writes stay with the registry (job_registry::store_checkpoint).
//
// Threads: one owner (the registry's).

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "ps/training_state.hpp"
#include "spec/checkpoint_config.hpp"

namespace coach::scheduler {

class checkpoint_keeper {
 public:
  using state_ptr = std::shared_ptr<const ps::training_state>;

  /// `store_every_s`: seconds between stored checkpoints (checkpoint_config::store_every_s());
  /// `now`: when the store last took one of the job's (its submission or its reading).
  explicit checkpoint_keeper(double store_every_s = checkpoint_config::default_store_every_s,
                             double now = 0)
      : store_every_s_(store_every_s), stored_at_(now) {}

  /// A checkpoint read from the store: kept, and stored already.
  void restore(std::uint32_t epoch, double at, state_ptr state);
  /// A checkpoint of the run after epoch `epoch`, at `now`; the job's records cover
  /// `epochs_done` epochs of `epochs_total`. Held when its epoch's record is not in yet; else
  /// kept (unstored). True when it is due in the store now (its job's last epoch, or
  /// store_every_s passed since the last write). A null state is ignored.
  bool offer(std::uint32_t epoch, state_ptr state, std::uint32_t epochs_done,
             std::uint32_t epochs_total, double now);
  /// The held checkpoint, taken out, once `epochs_done` covers its epoch; else nullopt.
  std::optional<std::pair<std::uint32_t, state_ptr>> release(std::uint32_t epochs_done);
  /// The kept checkpoint was written to the store at `now`.
  void stored(double now) {
    stored_ = true;
    stored_at_ = now;
  }
  /// The job ended: its checkpoint is no longer needed (what is held stays).
  void drop() noexcept { state_.reset(); }

  /// The latest checkpoint kept; null when none.
  const state_ptr& state() const noexcept { return state_; }
  std::uint32_t epoch() const noexcept { return epoch_; }  ///< the epoch `state` ends
  double at() const noexcept { return at_; }               ///< when it came (wall seconds)
  /// A kept checkpoint that is not in the store yet.
  bool unstored() const noexcept { return state_ && !stored_; }
  double stored_at() const noexcept { return stored_at_; }
  double store_every_s() const noexcept { return store_every_s_; }
  /// The epoch a run resumed from it starts at: the one after it; 0 without a checkpoint.
  std::uint32_t resume_epoch() const noexcept { return state_ ? epoch_ + 1 : 0; }
  bool holds() const noexcept { return held_.has_value(); }

 private:
  double store_every_s_;
  double stored_at_;
  state_ptr state_;
  std::uint32_t epoch_ = 0;
  double at_ = 0;
  bool stored_ = true;
  std::optional<std::pair<std::uint32_t, state_ptr>> held_;
};

}  // namespace coach::scheduler
