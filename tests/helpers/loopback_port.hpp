#pragma once
// A loopback port for a process of a test or a bench to listen on.
//
// Why not the port the kernel gives a socket bound to port 0: that port lies in the ephemeral
// range (net.ipv4.ip_local_port_range), the one every outgoing connection takes its source port
// from. Released by the asker, it can become the source port of another test's connection
// before the node that was given it binds it ("Address already in use": seen twice in one day
// of suites run two tests at a time). Ports below that range are never handed out that way:
// one is drawn at random there, checked free by binding it, and never given twice in a process.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <random>
#include <set>

namespace test_ports {

/// The first port of the kernel's ephemeral range (32768 where it cannot be read).
inline int ephemeral_low() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768, high = 60999;
  if (!(f >> low >> high)) low = 32768;
  return low;
}

/// Whether 127.0.0.1:`port` can be bound now (SO_REUSEADDR, as ZeroMQ's listeners bind).
inline bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

/// A free port in [10000, the ephemeral range's start), never one this process was given
/// before; 0 when a thousand draws found none.
inline int listen_port() {
  static std::mutex mu;
  static std::set<int> given;
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::lock_guard lock(mu);
  const int low = 10000, high = std::max(ephemeral_low(), low + 1000);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = low + static_cast<int>(rng() % static_cast<unsigned>(high - low));
    if (given.contains(port) || !bindable(port)) continue;
    given.insert(port);
    return port;
  }
  return 0;
}

}  // namespace test_ports
