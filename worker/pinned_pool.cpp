#include "worker/pinned_pool.hpp"

namespace coach::worker {

pinned_pool::pinned_pool(std::shared_ptr<kernels::backend> be, std::size_t floats)
    : be_(std::move(be)), floats_(floats) {}

pinned_pool::~pinned_pool() {
  for (float* p : free_) be_->free_host(p);
}

std::shared_ptr<float_buffer> pinned_pool::acquire() {
  float* p = nullptr;
  {
    std::lock_guard lock{mu_};
    if (!free_.empty()) {
      p = free_.back();
      free_.pop_back();
    }
  }
  if (p == nullptr) {
    p = be_->alloc_host(floats_);
    std::lock_guard lock{mu_};
    ++created_;
  }
  return std::shared_ptr<float_buffer>(new float_buffer(p, floats_, nullptr),
                                       [pool = shared_from_this(), p](float_buffer* b) {
                                         delete b;
                                         pool->give_back(p);
                                       });
}

std::size_t pinned_pool::created() const {
  std::lock_guard lock{mu_};
  return created_;
}

void pinned_pool::give_back(float* p) {
  std::lock_guard lock{mu_};
  free_.push_back(p);
}

}  // namespace coach::worker
