#include "worker/binary_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/enforce.hpp"

namespace coach::worker {
namespace {

result<void> check_labels(std::span<const float> labels) {
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != 0.0f && labels[i] != 1.0f) {
      return fail(errc::invalid_argument, "label {} of row {} must be 0 or 1", labels[i], i);
    }
  }
  return {};
}

/// The AUC of counts over distinct score values in ascending order: for each value, its
/// positives beat every negative of a lower value and tie (half) with the negatives of their own.
class pair_counter {
 public:
  void add(std::uint64_t pos, std::uint64_t neg) noexcept {
    wins_ += double(pos) * double(negatives_below_) + 0.5 * double(pos) * double(neg);
    negatives_below_ += neg;
    positives_ += pos;
  }
  result<double> auc() const {
    if (positives_ == 0 || negatives_below_ == 0) {
      return fail(errc::invalid_argument,
                  "AUC is undefined with {} positive and {} negative labels (it needs both)",
                  positives_, negatives_below_);
    }
    return wins_ / (double(positives_) * double(negatives_below_));
  }

 private:
  double wins_ = 0;  // exact in a double up to 2^53 pairs; beyond, to a relative 1e-16
  std::uint64_t negatives_below_ = 0;
  std::uint64_t positives_ = 0;
};

template <class Score>
result<double> auc_of(std::span<const Score> scores, std::span<const float> labels) {
  if (scores.size() != labels.size()) {
    return fail(errc::invalid_argument, "AUC of {} scores against {} labels: sizes differ",
                scores.size(), labels.size());
  }
  if (auto ok = check_labels(labels); !ok) return std::unexpected(std::move(ok.error()));
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i])) return fail(errc::invalid_argument, "score of row {} is NaN", i);
  }
  std::vector<std::uint32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](std::uint32_t a, std::uint32_t b) { return scores[a] < scores[b]; });
  pair_counter pairs;
  for (std::size_t i = 0; i < order.size();) {
    std::uint64_t pos = 0, neg = 0;
    const Score value = scores[order[i]];
    for (; i < order.size() && scores[order[i]] == value; ++i) {
      (labels[order[i]] != 0.0f ? pos : neg) += 1;
    }
    pairs.add(pos, neg);
  }
  return pairs.auc();
}

template <class Score>
result<double> log_loss_of(std::span<const Score> p, std::span<const float> labels) {
  if (p.size() != labels.size()) {
    return fail(errc::invalid_argument,
                "log loss of {} probabilities against {} labels: sizes differ", p.size(),
                labels.size());
  }
  if (p.empty()) return fail(errc::invalid_argument, "log loss of no rows");
  if (auto ok = check_labels(labels); !ok) return std::unexpected(std::move(ok.error()));
  double sum = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (!(p[i] >= 0 && p[i] <= 1)) {
      return fail(errc::invalid_argument, "probability {} of row {} is outside [0, 1]", p[i], i);
    }
    sum += binary_log_loss_term(double(p[i]), labels[i] != 0.0f);
  }
  return sum / double(p.size());
}

}  // namespace

result<double> binary_auc(std::span<const double> scores, std::span<const float> labels) {
  return auc_of(scores, labels);
}
result<double> binary_auc(std::span<const float> scores, std::span<const float> labels) {
  return auc_of(scores, labels);
}
result<double> binary_log_loss(std::span<const double> p, std::span<const float> labels) {
  return log_loss_of(p, labels);
}
result<double> binary_log_loss(std::span<const float> p, std::span<const float> labels) {
  return log_loss_of(p, labels);
}

double binary_log_loss_term(double p, bool label) noexcept {
  const double q = std::clamp(p, log_loss_epsilon, 1.0 - log_loss_epsilon);
  return label ? -std::log(q) : -std::log1p(-q);
}

binned_auc::binned_auc(std::size_t bins, double lo, double hi)
    : lo_(lo), scale_(double(bins) / (hi - lo)), pos_(bins, 0), neg_(bins, 0) {
  COACH_ENFORCE(bins >= 1 && lo < hi, "binned_auc needs bins >= 1 and lo < hi");
}

void binned_auc::add(double score, bool label) noexcept {
  const double at = std::floor((score - lo_) * scale_);
  std::size_t bin = 0;
  if (at >= double(pos_.size())) {
    bin = pos_.size() - 1;
  } else if (at > 0) {
    bin = std::size_t(at);
  }
  ++(label ? pos_ : neg_)[bin];
  ++(label ? positives_ : negatives_);
}

result<double> binned_auc::auc() const {
  pair_counter pairs;
  for (std::size_t b = 0; b < pos_.size(); ++b) pairs.add(pos_[b], neg_[b]);
  return pairs.auc();
}

}  // namespace coach::worker
