#include "actors/http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sodium.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/curve_keys.hpp"
#include "actors/http_request.hpp"
#include "actors/http_response.hpp"

#include "common/format.hpp"
#include "common/log.hpp"

namespace coach::actors {

namespace {
using clock_type = std::chrono::steady_clock;
}  // namespace

/// The server: one thread reads every connection (epoll, non-blocking) until its request is
/// whole, within a deadline and the reader's limits; a few workers run the handlers and write
/// the answers. A connection holds no thread while its request comes, so slow or idle
/// connections cannot take the handlers from others; there are at most max_connections, the
/// oldest dropped for a new one (a request is answered within milliseconds of its connection,
/// so the oldest is the slowest).
struct http_server::impl {
  static constexpr std::size_t max_connections = 256;
  static constexpr std::size_t max_queued = 64;
  static constexpr auto request_deadline = std::chrono::seconds(5);
  static constexpr int workers_count = 2;

  struct connection {
    clock_type::time_point accepted;
    http_request_reader reader;
    bool loopback = false;
  };
  struct task {
    int fd;
    http_request req;
    bool loopback = false;
  };

  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;
  std::string url;
  std::string hostname;
  std::map<std::string, handler> gets;
  std::map<std::string, post_handler> posts;
  http_access access;
  std::map<int, connection> conns;
  std::thread io;
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<task> queue;
  bool stopping = false;

  ~impl() {
    for (auto& [fd, c] : conns) ::close(fd);
    for (auto& t : queue) ::close(t.fd);
    for (int fd : {listen_fd, epoll_fd, wake_fd})
      if (fd >= 0) ::close(fd);
  }

  void drop(int fd) {
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    conns.erase(fd);
  }

  void drop_oldest() {
    auto oldest = conns.begin();
    for (auto it = conns.begin(); it != conns.end(); ++it)
      if (it->second.accepted < oldest->second.accepted) oldest = it;
    if (oldest != conns.end()) drop(oldest->first);
  }

  void accept_all() {
    for (;;) {
      if (conns.size() >= max_connections) drop_oldest();
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      auto* pa = reinterpret_cast<sockaddr*>(&peer);
      int fd = ::accept4(listen_fd, pa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0 && (errno == EMFILE || errno == ENFILE) && !conns.empty()) {
        drop_oldest();  // out of descriptors: the slowest connection gives its own
        len = sizeof peer;
        fd = ::accept4(listen_fd, pa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      }
      if (fd < 0) return;  // EAGAIN: all taken; else try at the next wake
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = fd;
      if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        ::close(fd);
        continue;
      }
      char ip[INET6_ADDRSTRLEN] = {};
      if (peer.ss_family == AF_INET)
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&peer)->sin_addr, ip, sizeof ip);
      else if (peer.ss_family == AF_INET6)
        ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr, ip, sizeof ip);
      conns.emplace(fd,
                    connection{clock_type::now(), http_request_reader{}, is_loopback_address(ip)});
    }
  }

  void read_from(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    char buf[8192];
    for (;;) {
      const auto n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) return drop(fd);  // closed by the peer, or an error
      const auto st = it->second.reader.feed({buf, std::size_t(n)});
      if (st == http_request_reader::state::reading) continue;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
      if (st == http_request_reader::state::refused) {
        const auto& r = it->second.reader;
        http_detail::respond(
            fd, http_detail::text(r.refusal_status(), "refused: " + r.refusal() + "\n"));
        ::close(fd);
        conns.erase(it);
        return;
      }
      task t{fd, it->second.reader.request(), it->second.loopback};
      conns.erase(it);
      std::unique_lock lock(mu);
      if (queue.size() >= max_queued) {
        lock.unlock();
        http_detail::respond(
            fd, http_detail::text(503, "busy: too many requests at once; try again\n"));
        ::close(fd);
        return;
      }
      queue.push_back(std::move(t));
      lock.unlock();
      cv.notify_one();
      return;
    }
  }

  static void to_blocking(int fd) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }

  void io_loop() {
    epoll_event events[64];
    for (;;) {
      const int n = ::epoll_wait(epoll_fd, events, 64, 250);
      {
        std::lock_guard lock(mu);
        if (stopping) return;
      }
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listen_fd)
          accept_all();
        else if (fd != wake_fd)
          read_from(fd);
      }
      // Requests not whole by the deadline: answered 408 and closed.
      const auto late = clock_type::now() - request_deadline;
      std::vector<int> expired;
      for (const auto& [fd, c] : conns)
        if (c.accepted < late) expired.push_back(fd);
      for (int fd : expired) {
        http_detail::respond(
            fd, http_detail::text(408, "refused: the request was not whole within 5 s\n"));
        drop(fd);
      }
    }
  }

  /// Why a POST is refused for want of the admin credential, or nothing.
  std::optional<std::string> admin_refusal(const http_request& req, bool loopback) const {
    if (access.admin_token.empty())
      return loopback ? std::nullopt
                      : std::optional<std::string>(
                            "refused: on a node without a key, dashboard actions are taken from "
                            "loopback clients only\n");
    const auto token = req.header("x-coach-token");
    const auto& want = access.admin_token;
    // libsodium's comparison takes the same time wherever the first difference is.
    if (token.size() == want.size() && sodium_memcmp(token.data(), want.data(), want.size()) == 0)
      return std::nullopt;
    return std::string(
        "refused: a dashboard action needs this node's admin token (`coach dashboard-token` "
        "prints it from the cluster key; open the dashboard at http://HOST:PORT/#token=TOKEN)\n");
  }

  http_response answer(const http_request& req, bool loopback) {
    if (!access.public_reads && !loopback)
      return http_detail::text(
          403,
          "refused: this node serves HTTP to loopback clients only (coach-node "
          "--http-public serves every address; docs/security.md)\n");
    const bool get = req.method == "GET" || req.method == "HEAD";
    try {
      if (get) {
        auto it = gets.find(req.path);
        return it == gets.end() ? http_detail::text(404, "not found: " + req.path + "\n")
                                : it->second();
      }
      if (req.method == "POST") {
        auto it = posts.find(req.path);
        if (it == posts.end())
          return gets.contains(req.path) ? http_detail::text(405, "only GET here\n")
                                         : http_detail::text(404, "not found: " + req.path + "\n");
        if (auto why = post_refusal(req.headers.contains("x-coach-dashboard"), req.header("origin"),
                                    req.header("host"), hostname))
          return http_detail::text(403, *why);
        if (auto why = admin_refusal(req, loopback)) return http_detail::text(403, *why);
        return it->second(req.body);
      }
      return http_detail::text(405, "method " + req.method + " is not served\n");
    } catch (const std::exception& e) {
      return http_detail::text(500, std::string("internal error: ") + e.what() + "\n");
    }
  }

  void work() {
    for (;;) {
      task t;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        t = std::move(queue.front());
        queue.pop_front();
      }
      to_blocking(t.fd);
      http_detail::respond(t.fd, answer(t.req, t.loopback), t.req.method == "HEAD");
      ::close(t.fd);
    }
  }
};

http_server::http_server() : impl_(std::make_unique<impl>()) {}

http_server::~http_server() {
  auto& m = *impl_;
  {
    std::lock_guard lock(m.mu);
    m.stopping = true;
  }
  m.cv.notify_all();
  if (m.wake_fd >= 0) {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(m.wake_fd, &one, sizeof one);
  }
  if (m.io.joinable()) m.io.join();
  for (auto& w : m.workers)
    if (w.joinable()) w.join();
}

const std::string& http_server::url() const noexcept {
  return impl_->url;
}

result<std::unique_ptr<http_server>> http_server::start(const std::string& address,
                                                        std::map<std::string, handler> routes,
                                                        std::map<std::string, post_handler> posts,
                                                        http_access access) {
  std::string_view rest = address;
  if (rest.starts_with("http://")) rest.remove_prefix(7);
  const auto colon = rest.rfind(':');
  int port = -1;
  if (colon != std::string_view::npos && colon > 0) {
    const auto p = rest.substr(colon + 1);
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (ec != std::errc{} || end != p.data() + p.size() || port > 65535) port = -1;
  }
  if (port < 0)
    return fail(errc::invalid_argument, "'{}': expected HOST:PORT (port 0: any free one)", address);
  std::string host(rest.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  std::unique_ptr<http_server> s(new http_server());
  auto& m = *s->impl_;
  m.gets = std::move(routes);
  m.posts = std::move(posts);
  m.access = std::move(access);
  char hostname[256] = {};
  if (::gethostname(hostname, sizeof hostname - 1) != 0) hostname[0] = '\0';
  m.hostname = hostname;

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &found);
      rc != 0)
    return fail(errc::invalid_argument, "cannot listen on {}: {}", address, ::gai_strerror(rc));
  int err = 0;
  for (auto* a = found; a && m.listen_fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR only: with SO_REUSEPORT a second node would bind the same port and the two
    // would share its scrapes; an address in use must be an error instead.
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      err = errno;
      ::close(fd);
      continue;
    }
    m.listen_fd = fd;
  }
  ::freeaddrinfo(found);
  if (m.listen_fd < 0)
    return fail(errc::io_error, "cannot listen on {}: {}", address, std::strerror(err));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  m.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  m.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m.epoll_fd < 0 || m.wake_fd < 0)
    return fail(errc::io_error, "cannot listen on {}: {}", address, std::strerror(errno));
  for (int fd : {m.listen_fd, m.wake_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
  m.url = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
          std::to_string(port);
  m.io = std::thread([&m] { m.io_loop(); });
  for (int i = 0; i < impl::workers_count; ++i) m.workers.emplace_back([&m] { m.work(); });
  return s;
}

}  // namespace coach::actors
