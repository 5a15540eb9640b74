#pragma once
// worker::binary_metrics: how well scores rank and predict 0/1 labels: the area under the ROC
// curve (AUC) and the log loss, the two figures click-through-rate models are judged by
// (worker/ctr_generator.hpp reports them for its planted model; a CTR model's evaluation reports
// them for its predictions).
//
// AUC is exact: the probability that a random positive scores above a random negative, a tie
// counted half (the Mann-Whitney U statistic over the pairs), computed by sorting once:
// O(n log n). Log loss is the mean of -[y log p + (1 - y) log(1 - p)] with p clamped to
// [1e-7, 1 - 1e-7], so a confident wrong prediction costs at most -log(1e-7) = 16.1 rather than
// infinity (a float near 1 is 1 - 6e-8 at best: the clamp keeps float and double scores alike).
//
// The streaming forms: log loss adds up per row (binary_log_loss_sum); binned_auc keeps counts
// in fixed bins of the score instead of the scores, so its memory does not grow with the rows.
// It is the exact AUC of the scores rounded down to their bin: pairs in one bin count as ties.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/error.hpp"

namespace coach::worker {

/// The bounds a probability is clamped to before its log is taken.
inline constexpr double log_loss_epsilon = 1e-7;

/// The exact AUC of `scores` against `labels` (each 0 or 1), ties counted half.
/// Errors (invalid_argument): sizes differ, a label other than 0 or 1, a score that is NaN, no
/// positive or no negative label (the AUC is undefined).
result<double> binary_auc(std::span<const double> scores, std::span<const float> labels);
result<double> binary_auc(std::span<const float> scores, std::span<const float> labels);

/// The mean log loss of probabilities `p` against `labels`, p clamped to
/// [log_loss_epsilon, 1 - log_loss_epsilon]. Errors (invalid_argument): sizes differ, no rows,
/// a label other than 0 or 1, a probability outside [0, 1] or NaN.
result<double> binary_log_loss(std::span<const double> p, std::span<const float> labels);
result<double> binary_log_loss(std::span<const float> p, std::span<const float> labels);

/// The log loss of one row, p clamped as binary_log_loss. REQUIRES: label is 0 or 1.
double binary_log_loss_term(double p, bool label) noexcept;

/// The AUC of a stream of (score, label) pairs kept as counts in `bins` equal bins over
/// [lo, hi) (a score outside goes to the first or last bin): memory 16 bytes a bin, whatever
/// the rows. Its value is the exact AUC of the scores rounded down to their bin's lower edge,
/// so it differs from the exact AUC only by pairs whose scores share a bin.
class binned_auc {
 public:
  /// REQUIRES: bins >= 1, lo < hi.
  explicit binned_auc(std::size_t bins = std::size_t{1} << 20, double lo = 0.0, double hi = 1.0);

  void add(double score, bool label) noexcept;

  std::uint64_t positives() const noexcept { return positives_; }
  std::uint64_t negatives() const noexcept { return negatives_; }

  /// The AUC so far. Errors (invalid_argument): no positive or no negative yet.
  result<double> auc() const;

 private:
  double lo_;
  double scale_;  // bins / (hi - lo)
  std::vector<std::uint64_t> pos_;
  std::vector<std::uint64_t> neg_;
  std::uint64_t positives_ = 0;
  std::uint64_t negatives_ = 0;
};

}  // namespace coach::worker
