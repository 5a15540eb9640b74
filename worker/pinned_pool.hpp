#pragma once
// worker::pinned_pool: gradient buffers in a backend's host memory for download_async (pinned
// on cuda, so the copy from the device runs without staging while the device computes), handed
// out as float_buffers that come back to the pool when the last reference drops (the pushes
// that carry a gradient may outlive the step that computed it).
//
// Threads: acquire() on the worker's thread; a buffer may be given back on any thread (a
// shard's or the transport's), under the pool's lock. The pool lives as long as its buffers.

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "common/buffer_pool.hpp"
#include "kernels/backend.hpp"

namespace coach::worker {

class pinned_pool : public std::enable_shared_from_this<pinned_pool> {
 public:
  /// Buffers of `floats` floats from be->alloc_host. Make it with std::make_shared.
  pinned_pool(std::shared_ptr<kernels::backend> be, std::size_t floats);
  ~pinned_pool();
  pinned_pool(const pinned_pool&) = delete;
  pinned_pool& operator=(const pinned_pool&) = delete;

  /// A buffer (contents unspecified). Throws as the backend's alloc_host does.
  std::shared_ptr<float_buffer> acquire();
  /// Buffers made so far (a steady value over steps: no allocation per step).
  std::size_t created() const;

 private:
  void give_back(float* p);

  std::shared_ptr<kernels::backend> be_;
  std::size_t floats_;
  mutable std::mutex mu_;
  std::vector<float*> free_;
  std::size_t created_ = 0;
};

}  // namespace coach::worker
