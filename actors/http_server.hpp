#pragma once
// actors::http_server: a small HTTP/1.1 server for a coach-node's /metrics and, on the
// scheduler's node, the dashboard. GET (and HEAD) routes, and POST routes for the dashboard's
// actions (post_refusal guards them); each route is a function that returns the body and its
// content type, or an error status. Every answer closes its connection.
//
// Bounded against hostile clients (issue 37, item 10; docs/hostile-input.md): one thread reads
// every connection (epoll) until its request is whole, so slow or idle connections hold no
// handler; a request must be whole within 5 s (else 408) and within http_limits (else 413, 414,
// 431); at most 256 connections are open, the oldest dropped for a new one; at most 64 whole
// requests wait for the 2 handler threads (else 503). Handlers must be thread-safe. The
// destructor stops the server and joins its threads.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace coach::actors {

/// Why a POST (every POST route is a dashboard action) is refused before its handler, or
/// nothing: it must carry the dashboard's `X-Coach-Dashboard` header (a page of another site
/// cannot add a header to a cross-site request without this server's consent, which it never
/// gives: no CORS), an `Origin` (when sent) whose host and port are the `Host` header's, and a
/// `Host` naming this node: an IP address, `localhost` or `hostname` (this machine's name) — a
/// name an attacker's DNS points here (DNS rebinding) is refused. Issue 37: a cross-site
/// text/plain POST cancelled a job.
std::optional<std::string> post_refusal(bool has_dashboard_header, std::string_view origin,
                                        std::string_view host, std::string_view hostname);

struct http_response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

/// Who the server answers (issue 37, item 11).
struct http_access {
  /// Serve clients of any address; false: loopback clients only (others get 403).
  bool public_reads = false;
  /// POST routes need the header `X-Coach-Token: TOKEN` (compared in constant time); empty:
  /// POSTs are taken from loopback clients only.
  std::string admin_token;
};

class http_server {
 public:
  using handler = std::function<http_response()>;
  /// A POST route: the request's body in, the response out.
  using post_handler = std::function<http_response(const std::string& body)>;

  /// Serves `routes` (GET, path -> handler) and `posts` (POST) on `address` ("HOST:PORT" or
  /// "http://HOST:PORT"; port 0 picks a free one). Errors: invalid_argument (a malformed
  /// address), io_error (cannot bind).
  static result<std::unique_ptr<http_server>> start(const std::string& address,
                                                    std::map<std::string, handler> routes,
                                                    std::map<std::string, post_handler> posts = {},
                                                    http_access access = {});
  ~http_server();

  /// "http://HOST:PORT" with the port bound.
  const std::string& url() const noexcept;

  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

 private:
  http_server();
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace coach::actors
