#include "ps/key_coverage.hpp"

#include <iterator>
#include <vector>

namespace coach::ps {

void key_coverage::missing(const key_range& r, std::vector<key_range>& out) const {
  std::uint64_t at = r.begin;
  // The received range that starts at or before `at` may cover it.
  auto it = by_begin_.upper_bound(at);
  if (it != by_begin_.begin()) {
    auto before = std::prev(it);
    if (before->second > at) at = std::min(before->second, r.end);
  }
  for (; it != by_begin_.end() && it->first < r.end && at < r.end; ++it) {
    if (it->first > at) out.push_back({at, it->first});
    at = std::max(at, std::min(it->second, r.end));
  }
  if (at < r.end) out.push_back({at, r.end});
}

bool key_coverage::overlaps(const key_range& r) const {
  // The first range that starts at or after r.begin, and the one before it.
  auto next = by_begin_.lower_bound(r.begin);
  if (next != by_begin_.end() && next->first < r.end) return true;
  if (next != by_begin_.begin() && std::prev(next)->second > r.begin) return true;
  return false;
}

result<void> key_coverage::add(std::span<const key_range> ranges) {
  std::vector<std::uint64_t> added;  // begins inserted by this call, removed again on failure
  auto refuse = [&](const key_range& r, std::string_view why) -> result<void> {
    for (auto b : added) {
      covered_ -= by_begin_[b] - b;
      by_begin_.erase(b);
    }
    return fail(errc::protocol_error, "range [{}, {}) {}", r.begin, r.end, why);
  };
  for (const auto& r : ranges) {
    if (r.begin > r.end) return refuse(r, "ends before it begins");
    if (r.end > num_keys_) return refuse(r, coach::format("reaches past the {} keys", num_keys_));
    if (r.begin == r.end) continue;
    if (overlaps(r)) return refuse(r, "overlaps keys already received");
    by_begin_.emplace(r.begin, r.end);
    added.push_back(r.begin);
    covered_ += r.size();
  }
  return {};
}

}  // namespace coach::ps
