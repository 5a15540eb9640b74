#include "actors/address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

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

namespace {

bool is_ip(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

std::string with_port(const std::string& host, const std::string& port) {
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + port;
}

/// The first address of `host` of `family` (AF_INET, AF_INET6); empty when it has none.
std::string first_of(const addrinfo* list, int family) {
  for (auto* a = list; a; a = a->ai_next) {
    if (a->ai_family != family) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (::inet_ntop(family, raw, text, sizeof text)) return text;
  }
  return {};
}

bool loopback(const std::string& host) {
  return host.starts_with("127.") || host == "::1";
}

}  // namespace

result<std::string> node_address(std::string_view address, std::string_view flag) {
  auto s = split(address, flag);
  if (!s) return std::unexpected(s.error());
  if (s->host == "*" || is_ip(s->host)) return with_port(s->host, s->port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(s->host.c_str(), s->port.c_str(), &hints, &found); rc != 0)
    return fail(errc::not_found, "{} '{}': the name '{}' does not resolve ({})", flag, address,
                s->host, ::gai_strerror(rc));
  std::string ip = first_of(found, AF_INET);
  if (ip.empty()) ip = first_of(found, AF_INET6);
  ::freeaddrinfo(found);
  if (ip.empty())
    return fail(errc::not_found, "{} '{}': the name '{}' has no IP address", flag, address,
                s->host);
  return with_port(ip, s->port);
}

bool joins_itself(const std::string& join, const std::string& listen,
                  const std::string& advertised) {
  auto j = split(join, "--join");
  auto l = split(listen, "--listen");
  auto a = split(advertised, "--advertise");
  if (!j || !l) return false;
  if (j->host == l->host && j->port == l->port) return true;
  if (a && j->host == a->host && j->port == a->port) return true;
  // Listening on every interface: any address of this host at that port is this node.
  const bool every = l->host == "*" || l->host == "0.0.0.0" || l->host == "::";
  return every && j->port == l->port && (loopback(j->host) || (a && j->host == a->host));
}

}  // namespace coach::actors
