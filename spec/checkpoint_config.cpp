#include "spec/checkpoint_config.hpp"

#include "common/enforce.hpp"

namespace coach::scheduler {

checkpoint_schedule::checkpoint_schedule(double every_s, std::uint32_t epochs,
                                         const clock_source& clock)
    : every_s_(every_s), epochs_(epochs), clock_(clock), last_(clock.now()) {
  COACH_ENFORCE(every_s >= 0, "checkpoint_schedule: every_s must be >= 0");
}

bool checkpoint_schedule::due(std::uint32_t epoch) {
  const auto now = clock_.now();
  if (epoch + 1 < epochs_ && every_s_ > 0 && now - last_ < seconds(every_s_)) return false;
  last_ = now;
  return true;
}

}  // namespace coach::scheduler
