#include "common/error.hpp"

namespace coach {

std::string_view to_string(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument:
      return "invalid_argument";
    case errc::parse_error:
      return "parse_error";
    case errc::io_error:
      return "io_error";
    case errc::not_found:
      return "not_found";
    case errc::unsupported:
      return "unsupported";
    case errc::resource_exhausted:
      return "resource_exhausted";
    case errc::cancelled:
      return "cancelled";
    case errc::protocol_error:
      return "protocol_error";
    case errc::internal:
      return "internal";
    case errc::not_authorized:
      return "not_authorized";
  }
  return "unknown";
}

std::string error::to_string() const {
  return std::string(coach::to_string(code)) + ": " + message;
}

}  // namespace coach
