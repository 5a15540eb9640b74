#include "sparse/row_optimizer.hpp"

#include <algorithm>
#include <cmath>

namespace coach::sparse {

result<row_optimizer_kind> parse_row_optimizer_kind(std::string_view text) {
  if (text == "sgd") return row_optimizer_kind::sgd;
  if (text == "adagrad") return row_optimizer_kind::adagrad;
  if (text == "lazy_adam") return row_optimizer_kind::lazy_adam;
  return fail(errc::invalid_argument,
              "sparse_optimizer.type '{}' is not one of sgd, adagrad, lazy_adam", text);
}

std::string_view to_string(row_optimizer_kind kind) noexcept {
  switch (kind) {
    case row_optimizer_kind::sgd:
      return "sgd";
    case row_optimizer_kind::adagrad:
      return "adagrad";
    case row_optimizer_kind::lazy_adam:
      return "lazy_adam";
  }
  return "?";
}

std::size_t row_optimizer_config::state_per_element() const noexcept {
  switch (kind) {
    case row_optimizer_kind::sgd:
      return 0;
    case row_optimizer_kind::adagrad:
      return 1;
    case row_optimizer_kind::lazy_adam:
      return 2;
  }
  return 0;
}

result<void> row_optimizer_config::validate() const {
  const auto finite = [](float x) { return std::isfinite(x); };
  if (!finite(learning_rate) || learning_rate < 0)
    return fail(errc::invalid_argument, "sparse_optimizer.learning_rate must be >= 0, got {}",
                learning_rate);
  if (!finite(weight_decay) || weight_decay < 0)
    return fail(errc::invalid_argument, "sparse_optimizer.weight_decay must be >= 0, got {}",
                weight_decay);
  if (!finite(epsilon) || epsilon <= 0)
    return fail(errc::invalid_argument, "sparse_optimizer.epsilon must be > 0, got {}", epsilon);
  if (!finite(initial_accumulator) || initial_accumulator < 0)
    return fail(errc::invalid_argument, "sparse_optimizer.initial_accumulator must be >= 0, got {}",
                initial_accumulator);
  if (!(beta1 >= 0 && beta1 < 1))
    return fail(errc::invalid_argument, "sparse_optimizer.beta1 must be in [0, 1), got {}", beta1);
  if (!(beta2 >= 0 && beta2 < 1))
    return fail(errc::invalid_argument, "sparse_optimizer.beta2 must be in [0, 1), got {}", beta2);
  return {};
}

row_step make_row_step(const row_optimizer_config& c, float learning_rate, std::int64_t t) {
  row_step s;
  s.learning_rate = learning_rate;
  if (c.kind == row_optimizer_kind::lazy_adam) {
    const double n = static_cast<double>(std::max<std::int64_t>(t, 1));
    const double bias1 = 1.0 - std::pow(static_cast<double>(c.beta1), n);
    const double bias2 = 1.0 - std::pow(static_cast<double>(c.beta2), n);
    s.step_size = static_cast<float>(static_cast<double>(learning_rate) / bias1);
    s.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
  }
  return s;
}

void init_row_state(const row_optimizer_config& c, std::span<float> state) {
  // adagrad's accumulator starts at initial_accumulator; lazy_adam's moments at 0.
  const float first = c.kind == row_optimizer_kind::adagrad ? c.initial_accumulator : 0.0f;
  std::fill(state.begin(), state.end(), first);
}

void update_row(const row_optimizer_config& c, const row_step& s, std::span<float> values,
                std::span<float> state, std::span<const float> grad) {
  const std::size_t dim = values.size();
  const float wd = c.weight_decay;
  switch (c.kind) {
    case row_optimizer_kind::sgd:
      for (std::size_t i = 0; i < dim; ++i) {
        const float g = grad[i] + wd * values[i];
        values[i] -= s.learning_rate * g;
      }
      return;
    case row_optimizer_kind::adagrad: {
      float* acc = state.data();
      for (std::size_t i = 0; i < dim; ++i) {
        const float g = grad[i] + wd * values[i];
        acc[i] += g * g;
        values[i] -= s.learning_rate * g / (std::sqrt(acc[i]) + c.epsilon);
      }
      return;
    }
    case row_optimizer_kind::lazy_adam: {
      float* m = state.data();
      float* v = state.data() + dim;
      const float b1 = c.beta1, b2 = c.beta2;
      for (std::size_t i = 0; i < dim; ++i) {
        const float g = grad[i] + wd * values[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        values[i] -= s.step_size * m[i] / (std::sqrt(v[i]) * s.inv_sqrt_bias2 + c.epsilon);
      }
      return;
    }
  }
}

}  // namespace coach::sparse
