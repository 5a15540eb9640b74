#pragma once
// JSON as Coach writes it: nlohmann-json with keys kept in the order they are written.

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace coach {

/// A JSON value whose object keys keep their insertion order (what a reader of the output sees).
using json = nlohmann::ordered_json;

/// A measured figure: rounded to 6 significant digits (what a timing or a loss can claim), null
/// for NaN and infinities.
inline json json_figure(double v) {
  if (!std::isfinite(v)) return nullptr;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return std::strtod(buf, nullptr);
}

}  // namespace coach
