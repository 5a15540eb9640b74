#include "worker/device_assignment.hpp"

#include <algorithm>
#include <limits>

#include "common/format.hpp"

namespace coach::worker {
namespace {

/// "device 3", "devices 0-1" (a run of indices) or "devices 0,2".
std::string devices_text(const std::vector<int>& ds) {
  if (ds.size() == 1) return coach::format("device {}", ds.front());
  if (ds.back() - ds.front() + 1 == int(ds.size()))
    return coach::format("devices {}-{}", ds.front(), ds.back());
  std::string out = "devices ";
  for (std::size_t i = 0; i < ds.size(); ++i) out += coach::format("{}{}", i ? "," : "", ds[i]);
  return out;
}

}  // namespace

device_assignment::device_assignment(int devices) {
  for (int d = 0; d < devices; ++d) ids_.push_back(d);
}

device_assignment::device_assignment(std::vector<int> ids) : ids_(std::move(ids)) {
  std::sort(ids_.begin(), ids_.end());
  ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
}

result<int> device_assignment::take(std::uint64_t job, std::uint32_t rank, int gpus_per_worker) {
  std::lock_guard lock{mu_};
  const holder who{job, rank};
  if (auto it = held_.find(who); it != held_.end()) return it->second.devices.front();
  const int count = int(ids_.size());
  if (count == 0)
    return fail(errc::resource_exhausted,
                "job {} worker {} needs a CUDA device and this process sees none", job, rank);
  // By position in ids_.
  std::vector<int> users(ids_.size(), 0);
  std::vector<bool> owned(ids_.size(), false);
  for (const auto& [h, hd] : held_)
    for (int d : hd.devices) {
      const auto i = std::size_t(std::lower_bound(ids_.begin(), ids_.end(), d) - ids_.begin());
      ++users[i];
      if (hd.own) owned[i] = true;
    }

  const int g = std::max(gpus_per_worker, 0);
  if (g == 0) {
    // The least used device, among the unowned ones while there are any.
    int best = 0;
    auto key = [&](int i) { return std::pair(bool(owned[std::size_t(i)]), users[std::size_t(i)]); };
    for (int i = 1; i < count; ++i)
      if (key(i) < key(best)) best = i;
    held_[who] = {{ids_[std::size_t(best)]}, false};
    return ids_[std::size_t(best)];
  }
  int best = -1, best_users = std::numeric_limits<int>::max();
  for (int first = 0; first + g <= count; ++first) {
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
                job, rank, g, count, owners);
  }
  hold mine{std::vector<int>(static_cast<std::size_t>(g)), true};
  for (int i = 0; i < g; ++i) mine.devices[std::size_t(i)] = ids_[std::size_t(best + i)];
  const int first = mine.devices.front();
  held_[who] = std::move(mine);
  return first;
}

void device_assignment::release(std::uint64_t job, std::uint32_t rank) {
  std::lock_guard lock{mu_};
  held_.erase({job, rank});
}

std::vector<device_assignment::hold_info> device_assignment::holds() const {
  std::lock_guard lock{mu_};
  std::vector<hold_info> out;
  for (const auto& [h, hd] : held_) out.push_back({h.first, h.second, hd.devices, hd.own});
  return out;
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
