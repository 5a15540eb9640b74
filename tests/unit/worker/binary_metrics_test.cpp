// worker::binary_metrics: AUC and log loss against hand-computed values, ties counted half,
// the clamp of the log loss, the errors, and the binned streaming AUC against the exact one.

#include "worker/binary_metrics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace coach::worker {
namespace {

TEST(binary_metrics, auc_counts_the_pairs_a_positive_wins) {
  // Positives 0.35 and 0.8 against negatives 0.1 and 0.4: 0.35 beats 0.1 only; 0.8 beats both.
  const std::vector<double> s{0.1, 0.4, 0.35, 0.8};
  const std::vector<float> y{0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(binary_auc(s, y).value(), 0.75);
  const std::vector<float> sf{0.1f, 0.4f, 0.35f, 0.8f};
  EXPECT_DOUBLE_EQ(binary_auc(sf, y).value(), 0.75);
  // Perfect and reversed rankings.
  EXPECT_DOUBLE_EQ(binary_auc(std::vector<double>{0.1, 0.2, 0.3, 0.4}, y).value(), 1.0);
  EXPECT_DOUBLE_EQ(binary_auc(std::vector<double>{0.4, 0.3, 0.2, 0.1}, y).value(), 0.0);
}

TEST(binary_metrics, a_tie_counts_half) {
  // Positives 0.5 and 0.9, negatives 0.5 and 0.5: 0.5 ties twice (1), 0.9 wins twice (2): 3/4.
  EXPECT_DOUBLE_EQ(
      binary_auc(std::vector<double>{0.5, 0.5, 0.5, 0.9}, std::vector<float>{1, 0, 0, 1}).value(),
      0.75);
  // Every score equal: 0.5 whatever the labels.
  EXPECT_DOUBLE_EQ(
      binary_auc(std::vector<double>{2, 2, 2, 2, 2}, std::vector<float>{1, 0, 1, 1, 0}).value(),
      0.5);
  // 3 positives, 2 negatives: pos {1, 3, 3}, neg {3, 0}: 1 beats 0 (1); each 3 beats 0 and
  // ties 3 (1.5 each): (1 + 1.5 + 1.5) / 6.
  EXPECT_DOUBLE_EQ(
      binary_auc(std::vector<double>{1, 3, 3, 3, 0}, std::vector<float>{1, 1, 1, 0, 0}).value(),
      4.0 / 6.0);
}

TEST(binary_metrics, log_loss_is_the_mean_negative_log_likelihood_clamped) {
  EXPECT_NEAR(binary_log_loss(std::vector<double>{0.9, 0.2}, std::vector<float>{1, 0}).value(),
              (-std::log(0.9) - std::log(0.8)) / 2, 1e-15);
  // p = 0 for a positive costs -log(1e-7), not infinity; p = 1 for a positive -log(1 - 1e-7).
  EXPECT_NEAR(binary_log_loss(std::vector<double>{0.0}, std::vector<float>{1}).value(),
              16.11809565095832, 1e-12);
  EXPECT_NEAR(binary_log_loss(std::vector<double>{1.0}, std::vector<float>{1}).value(),
              1.0000000494736474e-07, 1e-18);
  // 1 - 1e-7 rounds in a double: -log(1 - (1 - 1e-7)) is -log(1e-7) to 1e-9.
  EXPECT_NEAR(binary_log_loss(std::vector<float>{1.0f}, std::vector<float>{0}).value(),
              16.11809565095832, 1e-9);
  EXPECT_DOUBLE_EQ(binary_log_loss_term(0.25, false), -std::log(0.75));
}

TEST(binary_metrics, bad_input_gets_an_error_naming_it) {
  EXPECT_EQ(binary_auc(std::vector<double>{0.1, 0.2}, std::vector<float>{1}).error().message,
            "AUC of 2 scores against 1 labels: sizes differ");
  EXPECT_EQ(binary_auc(std::vector<double>{0.1, 0.2}, std::vector<float>{1, 2}).error().message,
            "label 2 of row 1 must be 0 or 1");
  EXPECT_EQ(binary_auc(std::vector<double>{0.1, 0.2}, std::vector<float>{1, 1}).error().message,
            "AUC is undefined with 2 positive and 0 negative labels (it needs both)");
  EXPECT_EQ(binary_auc(std::vector<double>{NAN, 0.2}, std::vector<float>{1, 0}).error().message,
            "score of row 0 is NaN");
  EXPECT_EQ(binary_log_loss(std::vector<double>{1.5}, std::vector<float>{1}).error().message,
            "probability 1.5 of row 0 is outside [0, 1]");
  EXPECT_EQ(binary_log_loss(std::vector<double>{}, std::vector<float>{}).error().message,
            "log loss of no rows");
  EXPECT_EQ(binary_log_loss(std::vector<double>{0.5}, std::vector<float>{1, 0}).error().code,
            errc::invalid_argument);
}

TEST(binary_metrics, binned_auc_is_exact_for_scores_in_distinct_bins_and_close_otherwise) {
  // Scores on distinct bins of 4 over [0, 1): the binned AUC is the exact one.
  binned_auc four(4);
  const std::vector<double> s{0.1, 0.4, 0.35, 0.8};
  const std::vector<float> y{0, 0, 1, 1};
  for (std::size_t i = 0; i < s.size(); ++i) four.add(s[i], y[i] != 0);
  // 0.35 and 0.4 share bin 1: a tie, so 0.35's pair counts half: (1 + 0.5 + 2) / 4.
  EXPECT_DOUBLE_EQ(four.auc().value(), 0.875);
  binned_auc fine(1000);
  for (std::size_t i = 0; i < s.size(); ++i) fine.add(s[i], y[i] != 0);
  EXPECT_DOUBLE_EQ(fine.auc().value(), 0.75);
  EXPECT_EQ(binned_auc().auc().error().message,
            "AUC is undefined with 0 positive and 0 negative labels (it needs both)");

  // 100000 random scores: the default 2^20 bins agree with the exact AUC to 1e-5.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> scores;
  std::vector<float> labels;
  binned_auc many;
  for (int i = 0; i < 100000; ++i) {
    const double p = u(rng);
    const bool label = u(rng) < p;
    scores.push_back(p);
    labels.push_back(label ? 1.0f : 0.0f);
    many.add(p, label);
  }
  const double exact = binary_auc(scores, labels).value();
  EXPECT_NEAR(exact, 5.0 / 6.0, 0.01);  // E[AUC] of p ~ U(0,1), y ~ Bernoulli(p)
  EXPECT_NEAR(many.auc().value(), exact, 1e-5);
  EXPECT_EQ(many.positives() + many.negatives(), 100000u);
}

}  // namespace
}  // namespace coach::worker
