// scheduler::perf_model: NNLS finds the constrained minimum (checked by its optimality
// conditions), the fit recovers known coefficients from noisy epochs, best_shards agrees with a
// brute-force search, and the model pools epochs across jobs of one model, predicts a new
// job from them, and keeps predicted against observed.

#include "report/perf_model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace coach::scheduler {
namespace {

/// Normal equations of a dense least-squares problem A·x ≈ b (A row-major, m×n).
void normal_equations(const std::vector<double>& a, const std::vector<double>& b, std::size_t n,
                      std::vector<double>& g, std::vector<double>& h) {
  const std::size_t m = b.size();
  g.assign(n * n, 0.0);
  h.assign(n, 0.0);
  for (std::size_t r = 0; r < m; ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      h[i] += a[r * n + i] * b[r];
      for (std::size_t j = 0; j < n; ++j) g[i * n + j] += a[r * n + i] * a[r * n + j];
    }
  }
}

/// The Karush–Kuhn–Tucker conditions of min ||Ax − b||², x >= 0, with gradient h − G·x:
/// x >= 0, gradient <= 0 where x = 0, gradient = 0 where x > 0.
void expect_kkt(const std::vector<double>& g, const std::vector<double>& h,
                const std::vector<double>& x, double tol) {
  const std::size_t n = x.size();
  for (std::size_t k = 0; k < n; ++k) {
    double grad = h[k];
    for (std::size_t j = 0; j < n; ++j) grad -= g[k * n + j] * x[j];
    EXPECT_GE(x[k], 0.0) << "x[" << k << "]";
    if (x[k] > 0)
      EXPECT_NEAR(grad, 0.0, tol) << "x[" << k << "] > 0 needs a zero gradient";
    else
      EXPECT_LE(grad, tol) << "x[" << k << "] = 0 needs a non-positive gradient";
  }
}

TEST(nnls, equals_least_squares_when_that_is_non_negative) {
  // b = A·(1, 2, 3) exactly: the unconstrained minimum is feasible.
  const std::vector<double> a{1, 0, 1, 0, 1, 1, 1, 1, 0, 2, 1, 1};
  std::vector<double> b;
  for (std::size_t r = 0; r < 4; ++r)
    b.push_back(a[r * 3] * 1 + a[r * 3 + 1] * 2 + a[r * 3 + 2] * 3);
  std::vector<double> g, h;
  normal_equations(a, b, 3, g, h);
  const auto x = nnls(g, h, 3);
  EXPECT_NEAR(x[0], 1, 1e-9);
  EXPECT_NEAR(x[1], 2, 1e-9);
  EXPECT_NEAR(x[2], 3, 1e-9);
}

TEST(nnls, clamps_a_coefficient_that_least_squares_makes_negative) {
  // b = A·(4, −1) exactly, so unconstrained least squares gives x1 = −1. With x1 = 0 the best
  // x0 is mean(b) = 1.5, and the gradient of x1 there is 10 − 10·1.5 < 0: (1.5, 0) is optimal.
  const std::vector<double> a{1, 1, 1, 2, 1, 3, 1, 4};
  std::vector<double> b;
  for (std::size_t r = 0; r < 4; ++r) b.push_back(4 * a[r * 2] - a[r * 2 + 1]);
  std::vector<double> g, h;
  normal_equations(a, b, 2, g, h);
  const auto x = nnls(g, h, 2);
  EXPECT_NEAR(x[0], 1.5, 1e-9);
  EXPECT_EQ(x[1], 0.0);
  expect_kkt(g, h, x, 1e-9);
}

TEST(nnls, meets_the_optimality_conditions_on_random_problems) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal;
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + std::size_t(trial % 6), m = n + 3;
    std::vector<double> a(m * n), b(m);
    for (auto& v : a) v = normal(rng);
    for (auto& v : b) v = normal(rng);
    std::vector<double> g, h;
    normal_equations(a, b, n, g, h);
    SCOPED_TRACE(trial);
    expect_kkt(g, h, nnls(g, h, n), 1e-8);
  }
}

TEST(perf_model, features_and_epoch_time_follow_the_documented_terms) {
  const perf_theta theta{10, 600, 4, 1, 2};
  const auto phi = perf_features(8, 2);
  EXPECT_DOUBLE_EQ(phi[0], 1);
  EXPECT_DOUBLE_EQ(phi[1], 1.0 / 8);
  EXPECT_DOUBLE_EQ(phi[2], 4);
  EXPECT_DOUBLE_EQ(phi[3], 8);
  EXPECT_DOUBLE_EQ(phi[4], 2);
  EXPECT_DOUBLE_EQ(epoch_seconds(theta, 8, 2), 10 + 75 + 16 + 8 + 4);
}

TEST(perf_model, best_shards_matches_a_brute_force_search) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0, 10);
  for (int trial = 0; trial < 500; ++trial) {
    perf_theta theta{u(rng), u(rng) * 100, trial % 7 == 0 ? 0 : u(rng), u(rng),
                     trial % 5 == 0 ? 0 : u(rng)};
    const int w = 1 + trial % 40, lo = 1 + trial % 3, hi = lo + trial % 17;
    int best = lo;
    for (int p = lo; p <= hi; ++p)
      if (epoch_seconds(theta, w, p) < epoch_seconds(theta, w, best) - 1e-12) best = p;
    const int got = best_shards(theta, w, lo, hi);
    SCOPED_TRACE(trial);
    EXPECT_GE(got, lo);
    EXPECT_LE(got, hi);
    EXPECT_NEAR(epoch_seconds(theta, w, got), epoch_seconds(theta, w, best), 1e-9);
  }
}

/// Epochs of a known curve at a grid of (w, p), each `repeats` times, times (1 + N(0, noise)).
std::vector<perf_sample> samples_of(const perf_theta& theta, double noise, int repeats,
                                    std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, noise);
  std::vector<perf_sample> out;
  for (int w : {1, 2, 4, 8, 16, 32, 64})
    for (int p : {1, 2, 4, 8, 16})
      for (int r = 0; r < repeats; ++r)
        out.push_back({w, p, epoch_seconds(theta, w, p) * (1 + normal(rng)), 1});
  return out;
}

TEST(perf_model, fit_recovers_exact_coefficients_from_exact_epochs) {
  const perf_theta truth{10, 600, 4, 1, 2};
  perf_fit_options o;
  o.prior_weight = 0;
  const auto fit = fit_perf(samples_of(truth, 0, 1, 1), o);
  ASSERT_TRUE(fit);
  for (std::size_t k = 0; k < perf_terms; ++k)
    EXPECT_NEAR((*fit)[k], truth[k], 1e-6 * truth[k]) << "theta" << k;
}

TEST(perf_model, fit_recovers_known_coefficients_from_noisy_epochs) {
  // 2% noise, the kind of spread epoch times show on a shared cluster.
  const perf_theta truth{10, 600, 4, 1, 2};
  perf_fit_options o;
  o.prior_weight = 0;
  for (std::uint64_t seed : {1, 2, 3}) {
    const auto fit = fit_perf(samples_of(truth, 0.02, 3, seed), o);
    ASSERT_TRUE(fit);
    SCOPED_TRACE(seed);
    // Each coefficient within 15% (θ0 is the smallest share of any epoch here: 30%).
    EXPECT_NEAR((*fit)[0], truth[0], 0.30 * truth[0]);
    for (std::size_t k = 1; k < perf_terms; ++k)
      EXPECT_NEAR((*fit)[k], truth[k], 0.15 * truth[k]) << "theta" << k;
    // And what matters to a scheduler: epoch times within 2% everywhere on the grid.
    for (int w : {1, 3, 8, 24, 64})
      for (int p : {1, 5, 16})
        EXPECT_NEAR(epoch_seconds(*fit, w, p) / epoch_seconds(truth, w, p), 1.0, 0.02)
            << w << " workers, " << p << " shards";
  }
}

TEST(perf_model, fit_keeps_coefficients_non_negative_when_a_term_is_absent) {
  // A curve without the per-worker term: an unconstrained fit of noisy data would give θ3 < 0
  // about half of the time; NNLS gives 0 or a small positive value.
  const perf_theta truth{5, 300, 6, 0, 1};
  perf_fit_options o;
  o.prior_weight = 0;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    const auto fit = fit_perf(samples_of(truth, 0.03, 2, seed), o);
    ASSERT_TRUE(fit);
    for (double v : *fit) EXPECT_GE(v, 0.0);
    EXPECT_LT((*fit)[3], 0.05);
  }
}

TEST(perf_model, prior_shapes_a_curve_measured_at_one_or_two_sizes) {
  // Epochs at 1 and 2 workers only. The prior says more workers help with diminishing
  // returns; without it, NNLS could explain two points by a constant or a pure 1/w.
  const perf_theta truth{10, 600, 4, 1, 2};
  std::vector<perf_sample> s{{1, 1, epoch_seconds(truth, 1, 1), 1},
                             {2, 1, epoch_seconds(truth, 2, 1), 1}};
  const auto fit = fit_perf(s);
  ASSERT_TRUE(fit);
  const double t1 = epoch_seconds(*fit, 1, 1), t2 = epoch_seconds(*fit, 2, 1);
  const double t8 = epoch_seconds(*fit, 8, best_shards(*fit, 8, 1, 8));
  EXPECT_NEAR(t1 / epoch_seconds(truth, 1, 1), 1, 0.05);
  EXPECT_NEAR(t2 / epoch_seconds(truth, 2, 1), 1, 0.05);
  EXPECT_LT(t8, t2);      // more workers help
  EXPECT_GT(t8, t1 / 8);  // but less than linearly
}

TEST(perf_model, no_data_means_no_prediction) {
  perf_model m;
  EXPECT_FALSE(m.predict(1, "resnet", 4, 2));
  EXPECT_FALSE(m.model_theta("resnet"));
  EXPECT_FALSE(fit_perf(std::vector<perf_sample>{}));
  m.observe(1, "resnet", 0, 1, 10);   // ignored: no workers
  m.observe(1, "resnet", 1, 1, -1);   // ignored: negative time
  m.observe(1, "resnet", 1, 1, NAN);  // ignored
  EXPECT_FALSE(m.predict(1, "resnet", 4, 2));
}

TEST(perf_model, a_new_job_is_predicted_from_earlier_jobs_of_its_model) {
  const perf_theta truth{10, 600, 4, 1, 2};
  perf_model m;
  std::uint64_t job = 1;
  for (int w : {1, 2, 4, 8, 16})
    for (int p : {1, 2, 4}) m.observe(job++, "resnet", w, p, epoch_seconds(truth, w, p));
  // A job never seen, of the same model: the pooled fit.
  auto t = m.predict(100, "resnet", 12, 3);
  ASSERT_TRUE(t);
  EXPECT_NEAR(*t / epoch_seconds(truth, 12, 3), 1, 0.03);
  // Another model learned nothing from these.
  EXPECT_FALSE(m.predict(100, "vgg", 12, 3));
  // A job of another model with epochs of its own follows them, not resnet's.
  const perf_theta other{20, 100, 1, 5, 1};
  for (int w : {1, 2, 4, 8}) m.observe(200, "vgg", w, 2, epoch_seconds(other, w, 2));
  auto v = m.predict(200, "vgg", 6, 2);
  ASSERT_TRUE(v);
  EXPECT_NEAR(*v / epoch_seconds(other, 6, 2), 1, 0.05);
}

TEST(perf_model, a_jobs_own_epochs_outweigh_the_pool_as_they_accumulate) {
  // The pool says one curve, this job runs twice as slow (say, a larger batch).
  const perf_theta pool{10, 600, 4, 1, 2};
  perf_model m;
  std::uint64_t job = 1;
  for (int r = 0; r < 5; ++r)
    for (int w : {1, 2, 4, 8, 16}) m.observe(job++, "resnet", w, 2, epoch_seconds(pool, w, 2));
  const double before = *m.predict(999, "resnet", 4, 2);
  for (int r = 0; r < 10; ++r)
    for (int w : {1, 2, 4, 8}) m.observe(999, "resnet", w, 2, 2 * epoch_seconds(pool, w, 2));
  const double after = *m.predict(999, "resnet", 4, 2);
  EXPECT_NEAR(before / epoch_seconds(pool, 4, 2), 1, 0.05);
  EXPECT_NEAR(after / (2 * epoch_seconds(pool, 4, 2)), 1, 0.1);
}

TEST(perf_model, keeps_predicted_against_observed) {
  const perf_theta truth{10, 600, 4, 1, 2};
  perf_model m;
  m.observe(1, "resnet", 1, 1, epoch_seconds(truth, 1, 1));  // nothing to predict it from
  EXPECT_EQ(m.predictions(), 0u);
  for (int w : {2, 4, 8, 16}) m.observe(1, "resnet", w, 2, epoch_seconds(truth, w, 2));
  EXPECT_EQ(m.predictions(), 4u);
  const auto recent = m.recent();
  ASSERT_EQ(recent.size(), 4u);
  for (std::size_t k = 0; k < recent.size(); ++k) {
    EXPECT_EQ(recent[k].job, 1u);
    EXPECT_EQ(recent[k].workers, 2 << k);
    EXPECT_EQ(recent[k].shards, 2);
    EXPECT_DOUBLE_EQ(recent[k].observed_s, epoch_seconds(truth, 2 << k, 2));
  }
  // The first prediction comes from one epoch at (1, 1) and the prior's shape: off, but the
  // right order of magnitude. Later ones have more epochs behind them.
  EXPECT_NEAR(recent[0].predicted_s / recent[0].observed_s, 1, 0.5);
  double sum = 0;
  for (const auto& r : recent) sum += std::abs(r.predicted_s - r.observed_s) / r.observed_s;
  EXPECT_NEAR(m.mean_abs_rel_error(), sum / 4, 1e-12);
  const auto summary = m.summary();
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].model, "resnet");
  EXPECT_EQ(summary[0].samples, 5u);
  EXPECT_EQ(summary[0].jobs, 1u);
  EXPECT_EQ(summary[0].predictions, 4u);
  EXPECT_NEAR(summary[0].mean_abs_rel_error, sum / 4, 1e-12);
  const auto json = m.to_json();
  ASSERT_EQ(json["models"].size(), 1u) << json.dump();
  EXPECT_EQ(json["models"][0]["model"], "resnet");
  EXPECT_EQ(json["models"][0]["samples"], 5);
  EXPECT_EQ(json["models"][0]["theta"].size(), coach::scheduler::perf_terms) << json.dump();
  EXPECT_EQ(json["predictions"], 4);
  ASSERT_EQ(json["recent"].size(), 4u) << json.dump();
  EXPECT_EQ(json["recent"][0]["job"], 1);
  EXPECT_EQ(json["recent"][0]["model"], "resnet");
  EXPECT_EQ(json["recent"][0]["workers"], 2);
}

TEST(perf_model, history_keeps_the_latest_records) {
  const perf_theta truth{10, 600, 4, 1, 2};
  perf_model_options o;
  o.history = 2;
  perf_model m(o);
  for (int w : {1, 2, 4, 8, 16}) m.observe(1, "resnet", w, 2, epoch_seconds(truth, w, 2));
  const auto recent = m.recent();
  ASSERT_EQ(recent.size(), 2u);
  EXPECT_EQ(recent[0].workers, 8);
  EXPECT_EQ(recent[1].workers, 16);
  EXPECT_EQ(m.predictions(), 4u);  // the count covers every prediction, kept or not
}

TEST(perf_model, forgetting_a_job_keeps_its_epochs_in_the_pool) {
  const perf_theta truth{10, 600, 4, 1, 2};
  perf_model m;
  for (int w : {1, 2, 4, 8}) m.observe(7, "resnet", w, 2, epoch_seconds(truth, w, 2));
  m.forget_job(7);
  auto t = m.predict(8, "resnet", 4, 2);
  ASSERT_TRUE(t);
  EXPECT_NEAR(*t / epoch_seconds(truth, 4, 2), 1, 0.05);
  EXPECT_EQ(m.summary()[0].samples, 4u);
}

}  // namespace
}  // namespace coach::scheduler
