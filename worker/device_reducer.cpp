#include "worker/device_reducer.hpp"

#include <algorithm>

namespace coach::worker {

device_reducer::device_reducer(std::size_t num_params, backend_factory make_backend,
                               all_reduce_factory make_all_reduce)
    : n_(num_params),
      make_backend_(std::move(make_backend)),
      make_all_reduce_(std::move(make_all_reduce)),
      sums_(std::make_unique<buffer_pool>(num_params)) {}

device_reducer::~device_reducer() {
  groups_.clear();  // the all-reduces first: they use the devices' streams
  for (auto& [d, state] : devices_) {
    for (const auto& [step, deposits] : open_)
      for (const auto& [rank, e] : deposits)
        if (e.device == d) state.be->free(e.slot);
    for (float* p : state.free_slots) state.be->free(p);
  }
}

std::size_t device_reducer::open_steps() const {
  std::lock_guard lock{mu_};
  return open_.size();
}

std::uint64_t device_reducer::all_reduces() const {
  std::lock_guard lock{mu_};
  return all_reduces_;
}

result<device_reducer::device_state*> device_reducer::device_of(int device) {
  if (auto it = devices_.find(device); it != devices_.end()) return &it->second;
  auto be = make_backend_(device);
  if (!be)
    return fail(errc::internal, "host reduction: no backend on device {}: {}", device,
                be.error().message);
  return &devices_.emplace(device, device_state{std::move(*be), {}}).first->second;
}

result<device_reducer::outcome> device_reducer::deposit(
    std::int64_t step, std::span<const std::uint32_t> local_members, std::uint32_t rank,
    std::uint64_t samples, kernels::backend& be, const float* grad) {
  if (samples > 0 && grad == nullptr)
    return fail(errc::protocol_error, "host reduction: rank {} deposits {} samples but no gradient",
                rank, samples);
  if (std::find(local_members.begin(), local_members.end(), rank) == local_members.end())
    return fail(errc::protocol_error, "host reduction: rank {} is not a local member of step {}",
                rank, step);
  entry e{samples, be.device(), nullptr};
  if (samples > 0) {
    {
      std::lock_guard lock{mu_};
      auto dev = device_of(e.device);
      if (!dev) return std::unexpected(dev.error());
      auto& slots = (*dev)->free_slots;
      if (slots.empty()) {
        e.slot = (*dev)->be->alloc(n_);
      } else {
        e.slot = slots.back();
        slots.pop_back();
      }
    }
    // On the worker's own stream, after the ops that wrote its gradient; waited for, so the
    // worker may overwrite `grad` once this returns and the reducer's stream may read the slot.
    be.copy(e.slot, grad, n_);
    be.synchronize();
  }

  std::lock_guard lock{mu_};
  auto& deposits = open_[step];
  if (!deposits.emplace(rank, e).second) {
    if (e.slot != nullptr) devices_.at(e.device).free_slots.push_back(e.slot);
    return fail(errc::protocol_error, "host reduction: rank {} deposits step {} twice", rank, step);
  }
  outcome out;
  out.leader = *std::min_element(local_members.begin(), local_members.end());
  for (auto m : local_members)
    if (!deposits.contains(m)) return out;
  out.complete = true;
  auto done = reduce(deposits, out);
  release(deposits);
  open_.erase(step);
  if (!done) return std::unexpected(done.error());
  return out;
}

result<void> device_reducer::reduce(const std::map<std::uint32_t, entry>& deposits, outcome& out) {
  // 1. Per device, in rank order (std::map iterates by rank): the first slot is the device's sum.
  std::map<int, float*> partial;
  for (const auto& [rank, e] : deposits) {
    if (e.samples == 0) continue;
    out.samples += e.samples;
    auto [it, first] = partial.emplace(e.device, e.slot);
    if (!first) devices_.at(e.device).be->axpy(n_, 1.0f, e.slot, it->second);
  }
  if (partial.empty()) return {};

  // 2. Across the devices (a group of one on a one-GPU host), where there are devices.
  if (make_all_reduce_) {
    std::vector<int> ids;
    std::vector<kernels::backend*> ranks;
    std::vector<float*> bufs;
    for (const auto& [d, buf] : partial) {
      ids.push_back(d);
      ranks.push_back(devices_.at(d).be.get());
      bufs.push_back(buf);
    }
    auto group = groups_.find(ids);
    if (group == groups_.end()) {
      auto made = make_all_reduce_(ranks);
      if (!made)
        return fail(errc::internal, "host reduction: no all-reduce over {} device(s): {}",
                    ids.size(), made.error().message);
      group = groups_.emplace(ids, std::move(*made)).first;
    }
    group->second->sum(bufs, n_);
    ++all_reduces_;
  } else if (partial.size() > 1) {
    return fail(errc::internal, "host reduction: gradients on {} devices and no all-reduce",
                partial.size());
  }

  // 3. One download, of the first device's buffer.
  const auto& [device, sum] = *partial.begin();
  auto host = sums_->acquire();
  devices_.at(device).be->download(host->data(), sum, n_);
  // The other devices' parts of the all-reduce finished too before their slots are reused (a
  // depositor's copy into a slot runs on its own stream, unordered with the reducer's).
  for (const auto& [d, buf] : partial)
    if (d != device) devices_.at(d).be->synchronize();
  out.sum = std::move(host);
  return {};
}

void device_reducer::release(const std::map<std::uint32_t, entry>& deposits) {
  for (const auto& [rank, e] : deposits)
    if (e.slot != nullptr) devices_.at(e.device).free_slots.push_back(e.slot);
}

}  // namespace coach::worker
