#include "ps/training_state.hpp"

#include "common/enforce.hpp"

namespace coach::ps {

result<void> check(const training_state& s, std::size_t num_params, std::size_t state_per_param) {
  if (s.values.size() != num_params)
    return fail(errc::invalid_argument, "the state has {} parameters, the model {}",
                s.values.size(), num_params);
  const std::size_t a = state_per_param >= 1 ? num_params : 0;
  const std::size_t b = state_per_param >= 2 ? num_params : 0;
  if (s.state_a.size() != a || s.state_b.size() != b)
    return fail(errc::invalid_argument,
                "the state holds {} and {} optimizer floats for {} parameters; the optimizer "
                "keeps {} per parameter",
                s.state_a.size(), s.state_b.size(), num_params, state_per_param);
  if (s.version < 0 || s.updates < 0 || s.updates > s.version)
    return fail(errc::invalid_argument, "the state's counters are impossible: {} steps, {} updates",
                s.version, s.updates);
  return {};
}

slice_transfer slice_of(const training_state& s, const std::vector<key_range>& ranges,
                        std::uint32_t to) {
  slice_transfer t;
  t.from = to;
  t.to = to;
  t.version = s.version;
  t.updates = s.updates;
  t.samples_applied = s.samples_applied;
  t.ranges = ranges;
  auto append = [](std::vector<float>& dst, const std::vector<float>& src, const key_range& r) {
    if (src.empty()) return;
    dst.insert(dst.end(), src.begin() + std::ptrdiff_t(r.begin),
               src.begin() + std::ptrdiff_t(r.end));
  };
  for (const auto& r : ranges) {
    COACH_ENFORCE(r.begin <= r.end && r.end <= s.values.size(),
                  "slice_of: range outside the state");
    append(t.values, s.values, r);
    append(t.state_a, s.state_a, r);
    append(t.state_b, s.state_b, r);
  }
  return t;
}

}  // namespace coach::ps
