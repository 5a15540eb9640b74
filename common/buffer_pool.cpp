#include "common/buffer_pool.hpp"

#include "common/enforce.hpp"

namespace coach {

buffer_pool::buffer_pool(std::size_t floats) : floats_(floats), state_(std::make_shared<state>()) {}

std::shared_ptr<float_buffer> buffer_pool::acquire() {
  std::unique_ptr<float_buffer> buf;
  {
    std::lock_guard lock{state_->mu};
    if (!state_->free.empty()) {
      buf = std::move(state_->free.back());
      state_->free.pop_back();
    } else {
      ++state_->created;
    }
  }
  if (!buf) buf = std::make_unique<float_buffer>(floats_);
  auto keep = state_;
  return std::shared_ptr<float_buffer>(buf.release(), [keep](float_buffer* p) {
    std::lock_guard lock{keep->mu};
    keep->free.emplace_back(p);
  });
}

std::shared_ptr<float_buffer> buffer_pool::adopt(std::vector<float> v) {
  COACH_ENFORCE(v.size() == floats_, "buffer_pool::adopt: a vector of the wrong size");
  auto keep = state_;
  {
    std::lock_guard lock{keep->mu};
    ++keep->created;
  }
  return std::shared_ptr<float_buffer>(new float_buffer(std::move(v)), [keep](float_buffer* p) {
    std::lock_guard lock{keep->mu};
    keep->free.emplace_back(p);
  });
}

std::size_t buffer_pool::created() const {
  std::lock_guard lock{state_->mu};
  return state_->created;
}

}  // namespace coach
