#pragma once
// buffer_pool: reusable float buffers handed out as shared pointers.
//
// Why: on these virtual machines the first write to freshly mapped memory runs at about 0.4 GB/s
// (a page fault per 4 KiB) against 30-50 GB/s for memory already touched, so the push/pull path
// never allocates per message. A buffer returns to its pool when the last shared_ptr to it drops.
//
// Threads: acquire() and the release performed by the deleter may run on any thread; the free
// list is guarded by a mutex. The pool must outlive every buffer it handed out (the deleter holds
// a shared_ptr to the pool's state, so this holds automatically).

#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace coach {

/// A contiguous float buffer of fixed size, owned by a buffer_pool. Its storage is its own
/// vector, or memory it was given without a copy (a message received from another process).
class float_buffer {
 public:
  explicit float_buffer(std::size_t n) : data_(n), ptr_(data_.data()), size_(n) {}
  /// Takes `v` as its storage (no copy).
  explicit float_buffer(std::vector<float> v) noexcept
      : data_(std::move(v)), ptr_(data_.data()), size_(data_.size()) {}
  /// Takes the `n` floats at `p` as its storage (no copy); `keep` owns that memory and is held
  /// as long as this buffer. REQUIRES: nobody else reads or writes the memory from now on.
  float_buffer(float* p, std::size_t n, std::shared_ptr<const void> keep) noexcept
      : ptr_(p), size_(n), keep_(std::move(keep)) {}
  float_buffer(const float_buffer&) = delete;
  float_buffer& operator=(const float_buffer&) = delete;
  float* data() noexcept { return ptr_; }
  const float* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return size_; }
  std::span<float> span() noexcept { return {ptr_, size_}; }
  std::span<const float> span() const noexcept { return {ptr_, size_}; }

 private:
  std::vector<float> data_;
  float* ptr_ = nullptr;
  std::size_t size_ = 0;
  std::shared_ptr<const void> keep_;  ///< owns the memory when data_ does not
};

/// Hands out float buffers of one fixed size and takes them back for reuse.
class buffer_pool {
 public:
  /// A pool of buffers holding `floats` floats each.
  explicit buffer_pool(std::size_t floats);

  /// A buffer of size floats(), contents unspecified (recycled buffers keep old values).
  std::shared_ptr<float_buffer> acquire();
  /// `v` (of size floats()) as a buffer of this pool, without copying it: memory that is
  /// already written costs no page faults to hand on.
  std::shared_ptr<float_buffer> adopt(std::vector<float> v);

  std::size_t floats() const noexcept { return floats_; }
  /// Buffers created so far (a steady value in a loop means no allocation per message).
  std::size_t created() const;

 private:
  struct state {
    std::mutex mu;
    std::vector<std::unique_ptr<float_buffer>> free;
    std::size_t created = 0;
  };
  std::size_t floats_;
  std::shared_ptr<state> state_;
};

}  // namespace coach
