#pragma once
// The texts the job spec tests parse (tests/unit/spec/job_spec_*_test.cpp): the full example of
// spec/job_spec.hpp, the smallest valid spec and that spec with one line replaced; and the checks
// they share (a message contains a part, a text fails to parse with one line).

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "spec/job_spec.hpp"

namespace coach::scheduler::spec_testing {

/// Whether `text` contains `part`; the failure quotes both.
inline ::testing::AssertionResult has(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

/// The full example of job_spec.hpp.
inline constexpr std::string_view full_example = R"(name: fashion-mlp
dataset: {format: idx, path: /usr/share/datasets/fashion-mnist, train_limit: 0, test_limit: 0}
model: {type: mlp, hidden: [256, 128], activation: relu}
optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9, weight_decay: 0}
batch_size: 64
epochs: 5
consistency: bsp        # bsp | ssp:S | asp | averaging:K
seed: 42
workers: {min: 1, max: 4, initial: 2}   # or a plain integer N meaning min=max=initial=N
shards: 2                                # same forms
gpus_per_worker: 0
backend: auto          # auto | cpu | cuda
slice_size: 16384
function: {deadline_s: 30, memory_mb: 512}   # optional
)";

/// The smallest valid spec: only the required fields.
inline constexpr std::string_view minimal = R"(name: tiny
dataset:
  path: /data/mnist
model: {}
optimizer:
  type: sgd
batch_size: 32
epochs: 2
)";

/// Parses `text`, expecting an error; returns it.
inline error parse_error_of(std::string_view text) {
  auto r = parse_job_spec(text, "job.yaml");
  EXPECT_FALSE(r) << "parsed although it should not:\n" << text;
  if (r) return {};
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << "not one line";
  return r.error();
}

/// `minimal` with the line that starts with `key:` replaced by `replacement` (appended when no
/// line matches). Line numbers of minimal: name 1, dataset 2, path 3, model 4, optimizer 5,
/// type 6, batch_size 7, epochs 8.
inline std::string with(std::string_view key, std::string_view replacement) {
  std::string out;
  bool replaced = false;
  std::size_t pos = 0;
  const std::string text(minimal);
  while (pos < text.size()) {
    const std::size_t eol = text.find('\n', pos);
    const std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!replaced && line.rfind(std::string(key) + ":", 0) == 0) {
      out += std::string(replacement) + "\n";
      replaced = true;
    } else {
      out += line + "\n";
    }
  }
  if (!replaced) out += std::string(replacement) + "\n";
  return out;
}

}  // namespace coach::scheduler::spec_testing
