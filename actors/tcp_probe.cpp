#include "actors/tcp_probe.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

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

result<void> tcp_probe(const std::string& address, std::chrono::milliseconds within) {
  auto s = split(address, "address");
  if (!s) return std::unexpected(s.error());
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(s->host.c_str(), s->port.c_str(), &hints, &found); rc != 0)
    return fail(errc::not_found, "no answer from {}: name '{}' not found ({})", address, s->host,
                ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
  const auto deadline = std::chrono::steady_clock::now() + within;
  int last_errno = ETIMEDOUT;
  for (const addrinfo* a = list.get(); a; a = a->ai_next) {
    const int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    int err = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd p{fd, POLLOUT, 0};
        const int n = left.count() > 0 ? ::poll(&p, 1, int(left.count())) : 0;
        if (n <= 0) {
          err = ETIMEDOUT;
        } else {
          socklen_t len = sizeof err;
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
    }
    ::close(fd);
    if (err == 0) return {};
    last_errno = err;
    if (std::chrono::steady_clock::now() >= deadline) break;
  }
  const double seconds = std::chrono::duration<double>(within).count();
  switch (last_errno) {
    case ECONNREFUSED:
      return fail(errc::io_error,
                  "no answer from {}: connection refused (nothing listens there: is the "
                  "scheduler's coach-node running?)",
                  address);
    case ETIMEDOUT:
      return fail(errc::io_error, "no answer from {}: timed out after {} s", address, seconds);
    default:
      return fail(errc::io_error, "no answer from {}: {}", address, std::strerror(last_errno));
  }
}

}  // namespace coach::actors
