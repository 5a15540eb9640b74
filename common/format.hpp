#pragma once
// coach::format: "{}" placeholders filled from arguments, for error and log messages.
// g++ 12 ships no <format>; this covers what messages need: each "{}" takes the next argument
// as an ostream would print it (floating point with up to 6 significant digits); "{:.Nf}"
// prints a number in fixed notation with N decimals (N in 0..9); "{{" and "}}" print braces.
// Any other spec inside braces prints the argument as "{}" would.

#include <ios>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

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
    } else if (fmt[i] == '{' && i + 1 < fmt.size() && (fmt[i + 1] == '}' || fmt[i + 1] == ':')) {
      const std::size_t close = fmt.find('}', i + 1);
      if (close == std::string_view::npos) {
        out << fmt.substr(i);
        return;
      }
      const std::string_view spec = fmt.substr(i + 1, close - i - 1);  // "" or ":.3f"
      const bool fixed = spec.size() == 4 && spec[0] == ':' && spec[1] == '.' && spec[2] >= '0' &&
                         spec[2] <= '9' && spec[3] == 'f';
      if constexpr (std::is_same_v<T, unsigned char> || std::is_same_v<T, signed char>) {
        out << int(first);
      } else if constexpr (std::is_arithmetic_v<T>) {
        if (fixed) {
          const auto flags = out.flags();
          const auto precision = out.precision();
          out << std::fixed;
          out.precision(spec[2] - '0');
          out << double(first);
          out.flags(flags);
          out.precision(precision);
        } else {
          out << first;
        }
      } else {
        out << first;
      }
      format_rest(out, fmt.substr(close + 1), rest...);
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
