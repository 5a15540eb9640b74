#include "master/chunk_dispenser.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>

#include "common/enforce.hpp"

namespace coach::master {

void portable_shuffle(std::span<std::uint32_t> v, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (std::size_t i = v.size(); i > 1; --i) {
    // Unbiased draw in [0, i) by rejection.
    const std::uint64_t bound = i;
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    std::uint64_t r;
    do r = rng();
    while (r >= limit);
    std::swap(v[i - 1], v[std::size_t(r % bound)]);
  }
}

chunk_dispenser::chunk_dispenser(std::size_t num_samples, std::size_t chunk_size,
                                 std::uint64_t seed)
    : num_samples_(num_samples),
      chunk_size_(chunk_size),
      chunks_((num_samples + chunk_size - 1) / std::max<std::size_t>(chunk_size, 1)),
      seed_(seed),
      order_(num_samples) {
  COACH_ENFORCE(num_samples >= 1 && chunk_size >= 1, "dispenser needs samples and chunk size");
  state_.assign(chunks_, 0);
}

void chunk_dispenser::begin_epoch(std::uint32_t epoch) {
  epoch_ = epoch;
  std::iota(order_.begin(), order_.end(), 0u);
  portable_shuffle(order_,
                   seed_ ^ (0xC0AC4ull << 20) ^ (std::uint64_t(epoch) * 0x9E3779B97F4A7C15ull));
  next_ = 0;
  pending_.clear();
  state_.assign(chunks_, 0);
  completed_chunks_ = 0;
  completed_samples_ = 0;
}

chunk chunk_dispenser::make(std::uint64_t id) const {
  const std::uint64_t begin = id * chunk_size_;
  const std::uint64_t end = std::min<std::uint64_t>(begin + chunk_size_, num_samples_);
  return chunk{epoch_, id, begin, end};
}

std::optional<chunk> chunk_dispenser::take() {
  std::uint64_t id;
  if (!pending_.empty()) {
    id = pending_.front();
    pending_.pop_front();
  } else if (next_ < chunks_) {
    id = next_++;
  } else {
    return std::nullopt;
  }
  state_[id] = 1;
  return make(id);
}

void chunk_dispenser::give_back(const chunk& c) {
  if (c.epoch != epoch_ || c.id >= chunks_ || state_[c.id] != 1) return;
  state_[c.id] = 0;
  pending_.push_back(c.id);
}

bool chunk_dispenser::complete(const chunk& c) {
  if (c.epoch != epoch_ || c.id >= chunks_ || state_[c.id] != 1) return false;
  state_[c.id] = 2;
  ++completed_chunks_;
  completed_samples_ += c.size();
  return true;
}

std::span<const std::uint32_t> chunk_dispenser::indices(const chunk& c) const {
  COACH_ENFORCE(c.end <= order_.size() && c.begin <= c.end, "chunk out of range");
  return std::span(order_.data() + c.begin, c.end - c.begin);
}

}  // namespace coach::master
