#include "worker/device_assignment.hpp"

#include <algorithm>
#include <limits>

#include "common/format.hpp"

namespace coach::worker {
namespace {

std::string devices_text(const std::vector<int>& ds) {
  return ds.size() == 1 ? coach::format("device {}", ds.front())
                        : coach::format("devices {}-{}", ds.front(), ds.back());
}

}  // namespace

device_assignment::device_assignment(int devices) : devices_(std::max(devices, 0)) {}

result<int> device_assignment::take(std::uint64_t job, std::uint32_t rank, int gpus_per_worker) {
  std::lock_guard lock{mu_};
  const holder who{job, rank};
  if (auto it = held_.find(who); it != held_.end()) return it->second.devices.front();
  if (devices_ == 0)
    return fail(errc::resource_exhausted,
                "job {} worker {} needs a CUDA device and this process sees none", job, rank);
  std::vector<int> users(std::size_t(devices_), 0);
  std::vector<bool> owned(std::size_t(devices_), false);
  for (const auto& [h, hd] : held_)
    for (int d : hd.devices) {
      ++users[std::size_t(d)];
      if (hd.own) owned[std::size_t(d)] = true;
    }

  const int g = std::max(gpus_per_worker, 0);
  if (g == 0) {
    // The least used device, among the unowned ones while there are any.
    int best = 0;
    auto key = [&](int d) { return std::pair(bool(owned[std::size_t(d)]), users[std::size_t(d)]); };
    for (int d = 1; d < devices_; ++d)
      if (key(d) < key(best)) best = d;
    held_[who] = {{best}, false};
    return best;
  }
  int best = -1, best_users = std::numeric_limits<int>::max();
  for (int first = 0; first + g <= devices_; ++first) {
    int sharing = 0;
    bool free = true;
    for (int d = first; d < first + g && free; ++d) {
      free = !owned[std::size_t(d)];
      sharing += users[std::size_t(d)];
    }
    if (free && sharing < best_users) {
      best = first;
      best_users = sharing;
    }
  }
  if (best < 0) {
    std::string owners;
    for (const auto& [h, hd] : held_)
      if (hd.own)
        owners += coach::format("{}job {} worker {} owns {}", owners.empty() ? "" : ", ", h.first,
                                h.second, devices_text(hd.devices));
    return fail(errc::resource_exhausted,
                "job {} worker {} needs {} GPU(s) of its own in a row and none are left of the {} "
                "this process sees ({})",
                job, rank, g, devices_, owners);
  }
  hold mine{std::vector<int>(static_cast<std::size_t>(g)), true};
  for (int i = 0; i < g; ++i) mine.devices[std::size_t(i)] = best + i;
  held_[who] = std::move(mine);
  return best;
}

void device_assignment::release(std::uint64_t job, std::uint32_t rank) {
  std::lock_guard lock{mu_};
  held_.erase({job, rank});
}

std::map<device_assignment::holder, std::vector<int>> device_assignment::held() const {
  std::lock_guard lock{mu_};
  std::map<holder, std::vector<int>> out;
  for (const auto& [h, hd] : held_) out[h] = hd.devices;
  return out;
}

std::string device_assignment::describe() const {
  std::lock_guard lock{mu_};
  std::string out;
  for (const auto& [h, hd] : held_)
    out += coach::format("{}job {} worker {}: {}{}", out.empty() ? "" : ", ", h.first, h.second,
                         devices_text(hd.devices), hd.own ? " (own)" : "");
  return out;
}

}  // namespace coach::worker
