#include "worker/host_reducer.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/format.hpp"

namespace coach::worker {

host_reducer::host_reducer(std::size_t num_params)
    : n_(num_params), sums_(std::make_unique<buffer_pool>(num_params)) {}

std::size_t host_reducer::open_steps() const {
  std::lock_guard lock{mu_};
  return open_.size();
}

result<host_reducer::outcome> host_reducer::deposit(std::int64_t step,
                                                    std::span<const std::uint32_t> local_members,
                                                    std::uint32_t rank, std::uint64_t samples,
                                                    std::shared_ptr<const float_buffer> grad) {
  if (samples > 0 && (!grad || grad->size() != n_))
    return fail(errc::protocol_error,
                "host reduction: rank {} deposits a gradient of {} floats, not {}", rank,
                grad ? grad->size() : 0, n_);
  if (std::find(local_members.begin(), local_members.end(), rank) == local_members.end())
    return fail(errc::protocol_error, "host reduction: rank {} is not a local member of step {}",
                rank, step);
  std::lock_guard lock{mu_};
  auto& deposits = open_[step];
  if (!deposits.emplace(rank, entry{samples, samples > 0 ? std::move(grad) : nullptr}).second)
    return fail(errc::protocol_error, "host reduction: rank {} deposits step {} twice", rank, step);
  outcome out;
  out.leader = *std::min_element(local_members.begin(), local_members.end());
  for (auto m : local_members)
    if (!deposits.contains(m)) return out;

  // Complete: the sum in rank order (std::map iterates by rank), whoever deposited last.
  out.complete = true;
  std::vector<const entry*> with_data;
  for (const auto& [r, e] : deposits)
    if (e.samples > 0) {
      out.samples += e.samples;
      with_data.push_back(&e);
    }
  if (with_data.size() == 1) {
    out.sum = with_data.front()->grad;  // nothing to add: no copy
  } else if (!with_data.empty()) {
    auto sum = sums_->acquire();
    float* acc = sum->data();
    std::memcpy(acc, with_data.front()->grad->data(), n_ * sizeof(float));
    for (std::size_t k = 1; k < with_data.size(); ++k) {
      const float* g = with_data[k]->grad->data();
      for (std::size_t i = 0; i < n_; ++i) acc[i] += g[i];
    }
    out.sum = std::move(sum);
  }
  open_.erase(step);
  return out;
}

}  // namespace coach::worker
