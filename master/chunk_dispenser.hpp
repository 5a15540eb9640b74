#pragma once
// master::chunk_dispenser: cuts each epoch into shuffled fixed-size chunks of sample indices and
// hands them out dynamically (DESIGN.md "Data path"). A chunk handed to a worker that leaves or
// dies is given back and handed out again, so every sample of an epoch is processed exactly once.
//
// Pure logic: the job master owns one and calls it from its message handlers.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

namespace coach::master {

/// A chunk: a contiguous run of the epoch's shuffled order.
struct chunk {
  std::uint32_t epoch = 0;
  std::uint64_t id = 0;     ///< position of the chunk within its epoch
  std::uint64_t begin = 0;  ///< first position in the epoch's order
  std::uint64_t end = 0;    ///< one past the last position
  std::uint64_t size() const noexcept { return end - begin; }
};

class chunk_dispenser {
 public:
  /// REQUIRES: num_samples >= 1, chunk_size >= 1.
  chunk_dispenser(std::size_t num_samples, std::size_t chunk_size, std::uint64_t seed);

  /// Starts epoch `epoch`: reshuffles (a pure function of seed and epoch) and queues all chunks.
  /// REQUIRES: the previous epoch is done (or none started).
  void begin_epoch(std::uint32_t epoch);

  /// The next chunk: a given-back one first, else the next unhanded one; none when every chunk of
  /// the epoch has been handed out.
  std::optional<chunk> take();
  /// Returns a handed-out, uncompleted chunk to the queue (its worker left or died).
  void give_back(const chunk& c);
  /// Marks a handed-out chunk processed. Returns false (and changes nothing) for a chunk not
  /// outstanding: completing twice never counts samples twice.
  bool complete(const chunk& c);

  /// Sample indices of a chunk (valid until the next begin_epoch).
  std::span<const std::uint32_t> indices(const chunk& c) const;

  std::uint32_t epoch() const noexcept { return epoch_; }
  std::size_t chunks_per_epoch() const noexcept { return chunks_; }
  std::size_t chunk_size() const noexcept { return chunk_size_; }
  /// True when every chunk of the epoch has been handed out (some may still be outstanding).
  bool exhausted() const noexcept { return pending_.empty() && next_ == chunks_; }
  /// True when every chunk of the epoch has been completed.
  bool epoch_done() const noexcept { return completed_chunks_ == chunks_; }
  /// Samples completed in the current epoch.
  std::size_t samples_completed() const noexcept { return completed_samples_; }

 private:
  chunk make(std::uint64_t id) const;

  std::size_t num_samples_;
  std::size_t chunk_size_;
  std::size_t chunks_;
  std::uint64_t seed_;
  std::uint32_t epoch_ = 0;
  std::vector<std::uint32_t> order_;
  std::uint64_t next_ = 0;
  std::deque<std::uint64_t> pending_;  ///< given-back chunk ids
  std::vector<std::uint8_t> state_;    ///< per chunk: 0 queued, 1 outstanding, 2 completed
  std::size_t completed_chunks_ = 0;
  std::size_t completed_samples_ = 0;
};

/// Fisher-Yates shuffle of `v` driven by a 64-bit Mersenne Twister: the same on every platform
/// (std::shuffle's algorithm is implementation-defined).
void portable_shuffle(std::span<std::uint32_t> v, std::uint64_t seed);

}  // namespace coach::master
