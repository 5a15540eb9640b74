#pragma once
// AdaScale's gain (spec `batch: {per_worker: N, lr_scaling: adascale}`): Johnson, Agrawal, Gu
// and Guestrin, "AdaScale SGD: A User-Friendly Algorithm for Distributed Training", ICML 2020.
//
// When a step averages N samples instead of the reference batch b0 (the initial workers'), its
// gradient is less noisy; AdaScale multiplies the rate by the gain
//
//   r = (mu2 + var / b0) / (mu2 + var / N)          in [1, N / b0] when N >= b0
//
// where mu2 is the squared norm of the true gradient and var the trace of one sample's gradient
// covariance. Both are estimated from the step's contributions: worker k pushes s_k, the sum of
// its n_k samples' gradients, and with S = sum_k s_k, N = sum_k n_k and K >= 2 contributions
//
//   var  = (sum_k |s_k|^2 / n_k  -  |S|^2 / N) / (K - 1)      (between-group variance; unbiased)
//   mu2  = |S|^2 / N^2  -  var / N                           (|mean|^2 less its noise)
//
// then smoothed over steps (an exponential average, `smoothing`). The sums add up key by key,
// so each shard computes them over its keys (grad_stats), a worker adds up every shard's (they
// come with the parameters of the version the step produced) and hands the total to each shard
// with its next push; every shard then folds the same totals into the same estimate and gives
// every key the same rate. The estimate lags the step by one: the gain of step t uses the
// statistics up to step t - 1.
//
// Coach's learning-rate schedule follows samples (epochs) under every lr_scaling; AdaScale's
// scale-invariant iterations (a schedule that advances by r a step) are not used.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

namespace coach::ps {

/// The sums one step's gradients give over some keys (a shard's, or every key: the sum of the
/// shards'), and the version that step produced.
struct grad_stats {
  std::int64_t version = 0;  ///< the version the step produced (the step's index + 1)
  double parts_sq = 0;       ///< sum over contributions of |s_k|^2 / n_k
  double sum_sq = 0;         ///< |sum_k s_k|^2
  double samples = 0;        ///< N, the step's samples
  double contributions = 0;  ///< K, contributions with samples (2 or more to estimate from)

  /// As the wire carries it (Envelope.gradStats): version, parts_sq, sum_sq, samples,
  /// contributions.
  std::vector<double> to_list() const;
  /// Read back; nullopt when `v` is not 5 finite numbers with samples > 0 and contributions >= 2.
  static std::optional<grad_stats> from_list(std::span<const double> v);
  /// Adds another shard's sums of the same step (the version, samples and contributions agree).
  void add(const grad_stats& other) noexcept;
};

/// Adds to `st` one run of keys: the contributions' parts `parts[k]` (sums of `samples[k]`
/// samples' gradients) and their sum `sum`, all of length `n`.
void add_to_stats(grad_stats& st, std::span<const float* const> parts,
                  std::span<const std::uint64_t> samples, const float* sum, std::size_t n);

/// The smoothed estimate of var and mu2 and the gain it gives. Observations older than the
/// newest seen are ignored (several pushes of a step carry the same totals).
class adascale_gain {
 public:
  /// Weight of the old estimate in the exponential average (the paper's theta).
  static constexpr double smoothing = 0.9;

  /// Folds in one step's totals over every key; false when not newer than the last one.
  bool observe(const grad_stats& st);
  /// The gain for a step of `samples` samples against the reference batch `reference`: 1 until a
  /// step was observed, and when the noise cannot be told from the signal (both estimates <= 0).
  double gain(double reference, double samples) const noexcept;
  bool seeded() const noexcept { return version_ > 0; }
  double variance() const noexcept { return var_; }
  double mean_sq() const noexcept { return mu2_; }

  /// The estimate as a transfer carries it to a shard that takes over keys: version, var, mu2.
  std::vector<double> state() const;
  /// Takes a state from state() unless this one has seen a newer step; false when malformed.
  bool restore(std::span<const double> s);

 private:
  std::int64_t version_ = 0;  ///< the newest version observed; 0: none
  double var_ = 0;
  double mu2_ = 0;
};

/// A worker's side: each shard's sums of a version as its parameters bring them, added up in
/// shard order (the same totals at every worker).
class stats_gatherer {
 public:
  /// Takes a shard's sums (a params message's gradStats; ignored when malformed or empty).
  void take(std::uint64_t shard, std::span<const double> list);
  /// The totals of `version` over the shards heard from; nullopt when none was.
  std::optional<grad_stats> total(std::int64_t version) const;
  /// Forgets the versions before `version`.
  void forget_before(std::int64_t version);

 private:
  std::map<std::int64_t, std::map<std::uint64_t, grad_stats>> by_version_;
};

}  // namespace coach::ps
