#pragma once
// scheduler::svg_text: text made safe to place in an SVG (XML) document, for the charts that
// `coach plot` (report_plot) and `coach experiment` (experiment) write.

#include <string>
#include <string_view>

namespace coach::scheduler {

/// `s` with &, <, > and " written as entities.
inline std::string svg_text(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

}  // namespace coach::scheduler
