#include "ps/optimizer.hpp"

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
