#pragma once
// coach::format: "{}" placeholders filled from arguments, for error and log messages.
// g++ 12 ships no <format>; this covers what messages need: each "{}" takes the next argument
// as an ostream would print it (floating point with up to 6 significant digits); "{{" and "}}"
// print braces. Format specs inside braces ("{:.3f}") are not supported: use snprintf there.

#include <sstream>
#include <string>
#include <string_view>

namespace coach {
namespace detail {

inline void format_rest(std::ostringstream& out, std::string_view fmt) {
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if ((fmt[i] == '{' || fmt[i] == '}') && i + 1 < fmt.size() && fmt[i + 1] == fmt[i]) ++i;
    out << fmt[i];
  }
}

template <class T, class... Rest>
void format_rest(std::ostringstream& out, std::string_view fmt, const T& first,
                 const Rest&... rest) {
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if ((fmt[i] == '{' || fmt[i] == '}') && i + 1 < fmt.size() && fmt[i + 1] == fmt[i]) {
      out << fmt[i++];
    } else if (fmt[i] == '{' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      if constexpr (std::is_same_v<T, unsigned char> || std::is_same_v<T, signed char>)
        out << int(first);
      else
        out << first;
      format_rest(out, fmt.substr(i + 2), rest...);
      return;
    } else {
      out << fmt[i];
    }
  }
}

}  // namespace detail

/// format("shard {} of {}", 1, 4) == "shard 1 of 4". Extra arguments are ignored; a "{}"
/// without an argument is printed as is.
template <class... Args>
std::string format(std::string_view fmt, const Args&... args) {
  std::ostringstream out;
  detail::format_rest(out, fmt, args...);
  return out.str();
}

}  // namespace coach
