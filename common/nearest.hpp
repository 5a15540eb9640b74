#pragma once
// coach::nearest: the known name closest to a mistyped one, for "did you mean" in messages (a
// job spec's unknown field, an unknown `coach` command).

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

namespace coach {

/// The Levenshtein distance between `a` and `b` (insertions, deletions, substitutions).
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// The name of `names` closest to `word` at an edit distance below `below` (the first of equals),
/// or "" when none is that close.
template <class Names>
std::string_view nearest(std::string_view word, const Names& names, std::size_t below = 3) {
  std::string_view best;
  for (const auto& n : names) {
    const std::string_view name(n);
    const std::size_t d = edit_distance(word, name);
    if (d < below) {
      below = d;
      best = name;
    }
  }
  return best;
}

}  // namespace coach
