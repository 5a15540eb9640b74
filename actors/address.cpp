#include "actors/address.hpp"

#include <netdb.h>
#include <charconv>

namespace coach::actors {
namespace {

struct split_address {
  std::string host;
  std::string port;
};

result<split_address> split(std::string_view address, std::string_view flag) {
  std::string_view rest = address;
  if (rest.starts_with("tcp://")) rest.remove_prefix(6);
  const auto bad = [&] {
    return fail(errc::invalid_argument, "{} '{}': expected HOST:PORT or tcp://HOST:PORT", flag,
                address);
  };
  const auto colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || rest.find("://") != std::string_view::npos)
    return bad();
  std::string_view host = rest.substr(0, colon), port = rest.substr(colon + 1);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return bad();
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return bad();  // an IPv6 address without brackets: its port cannot be told apart
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc{} || end != port.data() + port.size() || value == 0 ||
      value > 65535)
    return fail(errc::invalid_argument, "{} '{}': the port must be a number in 1..65535", flag,
                address);
  return split_address{std::string(host), std::string(port)};
}

}  // namespace

result<std::string> tcp_address(std::string_view address, std::string_view flag) {
  auto s = split(address, flag);
  if (!s) return std::unexpected(s.error());
  const bool v6 = s->host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + s->host + "]" : s->host) + ":" + s->port;
}

result<void> resolve_address(const std::string& address) {
  auto s = split(address, "address");
  if (!s) return std::unexpected(s.error());
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(s->host.c_str(), s->port.c_str(), &hints, &found); rc != 0)
    return fail(errc::not_found, "no answer from {}: name '{}' not found ({})", address, s->host,
                ::gai_strerror(rc));
  ::freeaddrinfo(found);
  return {};
}

}  // namespace coach::actors
