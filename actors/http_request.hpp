#pragma once
// actors::http_request_reader: the HTTP/1.1 request a connection of actors::http_server sends,
// read incrementally from the bytes as they come, within limits (issue 37, item 10): a request
// line of at most max_line bytes (else 414), a head of at most max_head bytes (else 431), a body
// of at most max_body bytes (else 413, said before the body is read), no chunked bodies (411).
// No sockets here: the server feeds it what recv() returned.

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace coach::actors {

struct http_request {
  std::string method;                          ///< GET, POST, HEAD, ...
  std::string path;                            ///< the target without its query string
  std::map<std::string, std::string> headers;  ///< names lower-cased; values trimmed
  std::string body;

  /// The header `name` (lower-case), or "".
  std::string_view header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string_view() : std::string_view(it->second);
  }
};

struct http_limits {
  std::size_t max_line = 8 * 1024;
  std::size_t max_head = 16 * 1024;
  std::size_t max_body = 64 * 1024;
};

class http_request_reader {
 public:
  enum class state { reading, done, refused };

  explicit http_request_reader(http_limits limits = {}) : limits_(limits) {}

  /// Takes the next bytes of the connection; the state after them.
  state feed(std::string_view bytes);

  state current() const noexcept { return state_; }
  /// The request, once done.
  const http_request& request() const noexcept { return req_; }
  /// Once refused: the status to answer (400, 411, 413, 414, 431, 505) and why.
  int refusal_status() const noexcept { return status_; }
  const std::string& refusal() const noexcept { return why_; }

 private:
  state refuse(int status, std::string why);
  state parse_head();

  http_limits limits_;
  state state_ = state::reading;
  std::string buf_;
  bool head_done_ = false;
  std::size_t body_length_ = 0;
  http_request req_;
  int status_ = 0;
  std::string why_;
};

}  // namespace coach::actors
