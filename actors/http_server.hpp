#pragma once
// actors::http_server: a small HTTP server (cpp-httplib, Debian libcpp-httplib-dev) for a
// coach-node's /metrics and, on the scheduler's node, the dashboard. GET only; each route is a
// function that returns the body and its content type, or an error status.
//
// Threads: the server accepts on a thread of its own and runs handlers on its pool (a handful
// of threads): handlers must be thread-safe. The destructor stops the server and joins.

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/error.hpp"

namespace coach::actors {

struct http_response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
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
                                                    std::map<std::string, post_handler> posts = {});
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
