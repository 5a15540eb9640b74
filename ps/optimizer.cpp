#include "ps/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace coach::ps {

result<optimizer_kind> parse_optimizer_kind(std::string_view text) {
  if (text == "sgd") return optimizer_kind::sgd;
  if (text == "momentum") return optimizer_kind::momentum;
  if (text == "adam") return optimizer_kind::adam;
  std::string shown;
  for (char c : text.substr(0, 40)) {
    shown.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  }
  return fail(errc::invalid_argument, "unknown optimizer '{}' (expected sgd, momentum or adam)",
              shown);
}

std::string_view to_string(optimizer_kind kind) noexcept {
  switch (kind) {
    case optimizer_kind::sgd:
      return "sgd";
    case optimizer_kind::momentum:
      return "momentum";
    case optimizer_kind::adam:
      return "adam";
  }
  return "unknown";
}

std::string_view to_string(schedule_kind kind) noexcept {
  switch (kind) {
    case schedule_kind::constant:
      return "constant";
    case schedule_kind::step:
      return "step";
    case schedule_kind::cosine:
      return "cosine";
  }
  return "unknown";
}

std::string_view optimizer_config::type_name() const noexcept {
  if (kind == optimizer_kind::adam && adam.decoupled) return "adamw";
  return to_string(kind);
}

float optimizer_config::base_learning_rate() const noexcept {
  return kind == optimizer_kind::adam ? adam.learning_rate : sgd.learning_rate;
}

bool optimizer_config::scheduled() const noexcept {
  return schedule.kind != schedule_kind::constant || schedule.warmup_epochs > 0;
}

double optimizer_config::progress(std::uint64_t samples_applied) const noexcept {
  if (samples_per_epoch == 0) return 0.0;
  return double(samples_applied) / double(samples_per_epoch);
}

float optimizer_config::scaled_rate(float rate, std::uint64_t step_samples) const noexcept {
  // adascale: the shard multiplies by its gain (ps/adascale.hpp).
  if (lr_scaling == lr_scaling_kind::none || lr_scaling == lr_scaling_kind::adascale ||
      reference_batch == 0 || step_samples == reference_batch)
    return rate;
  const double ratio = double(step_samples) / double(reference_batch);
  return float(double(rate) * (lr_scaling == lr_scaling_kind::linear ? ratio : std::sqrt(ratio)));
}

float optimizer_config::learning_rate_at(double p) const noexcept {
  const float base = base_learning_rate();
  if (!scheduled()) return base;
  const double lr = double(base);
  double rate = lr;
  switch (schedule.kind) {
    case schedule_kind::constant:
      break;
    case schedule_kind::step:
      rate = lr * std::pow(schedule.gamma, std::floor(p / schedule.every_epochs));
      break;
    case schedule_kind::cosine: {
      const double e = double(epochs);
      rate = schedule.min_lr +
             (lr - schedule.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(p, e) / e));
      break;
    }
  }
  if (schedule.warmup_epochs > 0 && p < schedule.warmup_epochs) rate *= p / schedule.warmup_epochs;
  return float(rate);
}

std::size_t optimizer_config::state_per_param() const noexcept {
  switch (kind) {
    case optimizer_kind::sgd:
      return 0;
    case optimizer_kind::momentum:
      return 1;
    case optimizer_kind::adam:
      return 2;
  }
  return 0;
}

}  // namespace coach::ps
