#pragma once
// Small function-mode invocations for the tests of the invocation child and its runner
// (tests/unit/worker/invocation_test.cpp, tests/unit/worker/function_runner_test.cpp): an MLP setup
// and a task of random rows, both a pure function of their arguments; the same for a model with
// embedding tables, whose tasks carry the step's lookups and rows.

#include <algorithm>
#include <cstdint>
#include <random>

#include "worker/invocation.hpp"

namespace coach::worker::testing {

/// One hidden layer of `hidden` units over `inputs` features and 3 classes, batches of 4,
/// local SGD at rate 0.1 under averaging.
inline invocation_setup small_setup(bool averaging, int hidden = 6, int inputs = 5) {
  invocation_setup s;
  s.model.hidden = {hidden};
  s.inputs = inputs;
  s.classes = 3;
  s.max_batch = 4;
  s.averaging = averaging;
  s.local = {0.1f, 0.0f, 0.0f};
  return s;
}

/// `rows` random rows (features in [0, 1), labels 0..2) and the model initialised from `seed`;
/// under averaging the rows are cut into local steps of max_batch, else one batch.
inline invocation_task small_task(const invocation_setup& s, std::size_t rows, unsigned seed) {
  const network model = invocation_network(s).value();
  invocation_task t;
  t.params.resize(model.num_params());
  model.init_params(t.params, seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (std::size_t i = 0; i < rows * std::size_t(s.inputs); ++i) t.x.push_back(u(rng));
  for (std::size_t i = 0; i < rows; ++i) t.y.push_back(std::int32_t(rng() % 3));
  if (s.averaging) {
    for (std::size_t left = rows; left > 0;) {
      const auto n = std::min<std::size_t>(left, std::size_t(s.max_batch));
      t.sizes.push_back(std::uint32_t(n));
      left -= n;
    }
  } else {
    t.sizes = {std::uint32_t(rows)};
  }
  return t;
}

/// A model with embedding tables: one table of 1,000 rows of dim 4 per categorical field (2),
/// 3 dense features, a hidden layer of 6 units, 2 classes, batches of 8.
inline invocation_setup sparse_setup() {
  invocation_setup s;
  s.model.hidden = {6};
  embedding_config e;
  e.rows = 1000;
  e.dim = 4;
  s.model.embeddings = {e};
  s.inputs = 3;
  s.fields = 2;
  s.classes = 2;
  s.max_batch = 8;
  return s;
}

/// `rows` random samples of sparse_setup(): their dense features and labels, each field's
/// lookup one of `distinct` rows (random values in [-0.5, 0.5)), the model from `seed`.
inline invocation_task sparse_task(const invocation_setup& s, std::size_t rows,
                                   std::uint32_t distinct, unsigned seed) {
  const network model = invocation_network(s).value();
  invocation_task t;
  t.params.resize(model.num_params());
  model.init_params(t.params, seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (std::size_t i = 0; i < rows * std::size_t(s.inputs); ++i) t.x.push_back(u(rng));
  for (std::size_t i = 0; i < rows; ++i) t.y.push_back(std::int32_t(rng() % 2));
  t.sizes = {std::uint32_t(rows)};
  for (const auto& table : model.tables()) {
    invocation_rows r;
    for (std::size_t i = 0; i <= rows; ++i) r.offsets.push_back(std::uint32_t(i));
    for (std::size_t i = 0; i < rows; ++i) r.local.push_back(std::uint32_t(rng() % distinct));
    for (std::size_t i = 0; i < std::size_t(distinct) * table.config.dim; ++i)
      r.values.push_back(u(rng));
    t.tables.push_back(std::move(r));
  }
  return t;
}

}  // namespace coach::worker::testing
