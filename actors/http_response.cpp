// actors/http_response.cpp: writing an answer (status line, headers, body) to a client, and the
// access rule of POST routes (post_refusal, declared in http_server.hpp).
#include "actors/http_response.hpp"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cctype>
#include <cerrno>
#include <string>

#include "actors/http_server.hpp"
#include "common/format.hpp"

namespace coach::actors {

namespace {

/// The host part of "HOST[:PORT]" or "[V6]:PORT", lower-cased.
std::string host_name(std::string_view host_port) {
  std::string_view h = host_port;
  if (h.starts_with('[')) {
    const auto end = h.find(']');
    h = h.substr(1, end == std::string_view::npos ? std::string_view::npos : end - 1);
  } else if (const auto colon = h.rfind(':');
             colon != std::string_view::npos && h.find(':') == colon) {
    h = h.substr(0, colon);
  }
  std::string out(h);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool ip_literal(const std::string& h) {
  in6_addr a6{};
  in_addr a4{};
  return ::inet_pton(AF_INET, h.c_str(), &a4) == 1 || ::inet_pton(AF_INET6, h.c_str(), &a6) == 1;
}

}  // namespace

std::optional<std::string> post_refusal(bool has_dashboard_header, std::string_view origin,
                                        std::string_view host, std::string_view hostname) {
  if (!has_dashboard_header)
    return std::string(
        "refused: a dashboard action needs the page's X-Coach-Dashboard header (a page of "
        "another site cannot send it)\n");
  if (!origin.empty()) {
    std::string_view o = origin;
    if (const auto scheme = o.find("://"); scheme != std::string_view::npos)
      o.remove_prefix(scheme + 3);
    std::string lo(o), lh(host);
    for (char& c : lo) c = char(std::tolower(static_cast<unsigned char>(c)));
    for (char& c : lh) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (lo != lh)
      return coach::format("refused: a cross-site request (Origin {}, Host {})\n", origin, host);
  }
  const std::string name = host_name(host);
  std::string self(hostname);
  for (char& c : self) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (!(name == "localhost" || ip_literal(name) || (!self.empty() && name == self)))
    return coach::format(
        "refused: Host '{}' does not name this node (an IP address, localhost or {}): a name "
        "pointed here by another's DNS is not trusted with actions\n",
        host, hostname);
  return std::nullopt;
}

namespace http_detail {

const char* reason_of(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Status";
  }
}

/// Writes `data` to `fd`. On a blocking socket (a handler thread's: its send timeout bounds a
/// reader that does not read), all of it; on the reading thread's non-blocking one, what the
/// kernel takes at once (a short answer fits its buffer; that thread never waits on a client).
void write_out(int fd, std::string_view data) {
  while (!data.empty()) {
    const auto n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(std::size_t(n));
  }
}

void respond(int fd, const http_response& r, bool head) {
  std::string out = coach::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
      r.status, reason_of(r.status), r.content_type, r.body.size(),
      r.status == 405 ? "Allow: GET, HEAD, POST\r\n" : "");
  if (!head) out += r.body;
  write_out(fd, out);
}

http_response text(int status, std::string body) {
  return {status, "text/plain; charset=utf-8", std::move(body)};
}

}  // namespace http_detail
}  // namespace coach::actors
