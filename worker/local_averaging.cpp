// worker/local_averaging.cpp: a worker's local steps of model averaging (local_averaging.hpp).
#include "worker/local_averaging.hpp"

#include <algorithm>
#include <cassert>
#include <vector>

namespace coach::worker {

local_averaging::local_averaging(kernels::backend& be, std::size_t num_params,
                                 const kernels::sgd_options& opt)
    : be_(be), n_(num_params), opt_(opt) {
  w_ = be_.alloc(n_);
  g_ = be_.alloc(n_);
  if (opt_.momentum > 0) {
    v_ = be_.alloc(n_);
    zeros_.assign(n_, 0.0f);
  }
}

local_averaging::~local_averaging() {
  be_.free(w_);
  be_.free(g_);
  be_.free(v_);
  be_.free(stats_);
}

local_averaging::outcome local_averaging::run(network_runner& runner, const float* w0,
                                              const dataset& data,
                                              std::span<const std::uint32_t> indices,
                                              std::span<const std::uint32_t> sizes, float* delta,
                                              std::uint32_t passes, std::uint64_t noise) {
  const auto& stats = runner.model().statistic_ranges();
  if (!stats.empty() && stats_ == nullptr) {
    std::size_t total = 0;
    for (const auto& st : stats) total += st.keys.size();
    stats_ = be_.alloc(total);
  }
  std::uint64_t local_step = 0;
  outcome out;
  // w = w0 (a copy through the backend: w0 may be a view of the shard's buffer).
  be_.copy(w_, w0, n_);
  if (v_) be_.upload(v_, zeros_.data(), n_);  // not scale(0): a diverged round may leave NaN
  for (std::uint32_t pass = 0; pass < passes; ++pass) {
    std::size_t at = 0;
    for (const auto size : sizes) {
      assert(at + size <= indices.size());
      if (size == 0) continue;
      out.loss_sum += runner.forward_backward(w_, data, indices.subspan(at, size), g_,
                                              noise + (++local_step << 52));
      if (stats.empty()) {
        be_.sgd_update(w_, v_, g_, n_, 1.0f / float(size), opt_);
      } else {
        // The statistic keys hold the batch's statistics times its rows: fold them in instead
        // of training them (the update below may touch them; they are written after it).
        std::size_t at_s = 0;
        for (const auto& st : stats) {
          const std::size_t len = st.keys.size();
          float* blended = stats_ + at_s;
          be_.copy(blended, w_ + st.keys.begin, len);
          be_.scale(len, 1.0f - st.momentum, blended);
          be_.axpy(len, st.momentum / float(size), g_ + st.keys.begin, blended);
          at_s += len;
        }
        be_.sgd_update(w_, v_, g_, n_, 1.0f / float(size), opt_);
        at_s = 0;
        for (const auto& st : stats) {
          be_.copy(w_ + st.keys.begin, stats_ + at_s, st.keys.size());
          at_s += st.keys.size();
        }
      }
      at += size;
      out.samples += size;
    }
  }
  // delta = n * (w0 - w)
  be_.copy(delta, w0, n_);
  be_.axpy(n_, -1.0f, w_, delta);
  be_.scale(n_, float(out.samples), delta);
  return out;
}

}  // namespace coach::worker
