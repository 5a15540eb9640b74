#pragma once
// A script's job trained through the embedded cluster with every step traced, and the comparison
// of a rescaled run with one that never rescales: what script_model_test (the NumPy worker) and
// torch_script_test (PyTorch) both check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "actors/embedded_cluster.hpp"

namespace coach::actors {

struct script_run {
  coach::result<scheduler::job_result> result;
  std::vector<step_trace> steps;  ///< by step
};

/// `spec` trained with `python` as the script's interpreter (`workers` 0: the spec's).
inline script_run train_script(const scheduler::job_spec& spec, const std::string& python,
                               std::uint32_t workers = 0) {
  std::mutex mu;
  std::vector<step_trace> steps;
  train_options opt;
  opt.python = python;
  opt.workers = workers;
  opt.on_step = [&](const step_trace& t) {
    std::lock_guard lock(mu);
    steps.push_back(t);
  };
  auto r = train_embedded(spec, opt);
  std::sort(steps.begin(), steps.end(),
            [](const step_trace& a, const step_trace& b) { return a.step < b.step; });
  return {std::move(r), std::move(steps)};
}

/// Every step of `rescaled` covers the samples of the same step of `plain`, with the same mean
/// loss within `tolerance`, and the steps cover `samples` samples in all (each once). Returns the
/// largest per-step difference (printed).
inline double expect_same_steps(const script_run& plain, const script_run& rescaled,
                                std::size_t steps, std::size_t samples, double tolerance) {
  EXPECT_TRUE(plain.result) << plain.result.error().to_string();
  EXPECT_TRUE(rescaled.result) << rescaled.result.error().to_string();
  EXPECT_EQ(plain.steps.size(), steps);
  if (rescaled.steps.size() != plain.steps.size()) {
    ADD_FAILURE() << "the rescaled run has " << rescaled.steps.size() << " steps, the plain one "
                  << plain.steps.size();
    return -1;
  }
  std::size_t covered = 0;
  double worst = 0;
  for (std::size_t s = 0; s < plain.steps.size(); ++s) {
    const auto& a = plain.steps[s];
    const auto& b = rescaled.steps[s];
    EXPECT_EQ(b.step, a.step);
    EXPECT_EQ(b.samples, a.samples) << "step " << s << " covers other samples";
    covered += a.samples.size();
    const double la = a.loss_sum / double(a.samples.size());
    const double lb = b.loss_sum / double(b.samples.size());
    worst = std::max(worst, std::abs(la - lb));
    EXPECT_NEAR(lb, la, tolerance) << "step " << s;
  }
  EXPECT_EQ(covered, samples) << "every sample once";
  std::printf("%zu steps, largest per-step mean-loss difference %.3g\n", plain.steps.size(), worst);
  return worst;
}

}  // namespace coach::actors
