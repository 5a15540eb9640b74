#include "actors/http_server.hpp"

#include <httplib.h>

#include <arpa/inet.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <thread>

#include "common/format.hpp"
#include "common/log.hpp"

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

struct http_server::impl {
  httplib::Server server;
  std::thread thread;
  std::string url;
};

http_server::http_server() : impl_(std::make_unique<impl>()) {}

http_server::~http_server() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

const std::string& http_server::url() const noexcept {
  return impl_->url;
}

result<std::unique_ptr<http_server>> http_server::start(const std::string& address,
                                                        std::map<std::string, handler> routes,
                                                        std::map<std::string, post_handler> posts) {
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
  // httplib's default also sets SO_REUSEPORT, with which a second node binds the same port and
  // the two share its scrapes: an address in use must be an error instead.
  m.server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  for (auto& [path, h] : routes)
    m.server.Get(path, [h = std::move(h)](const httplib::Request&, httplib::Response& res) {
      http_response r;
      try {
        r = h();
      } catch (const std::exception& e) {
        r = {500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n"};
      }
      res.status = r.status;
      res.set_content(std::move(r.body), r.content_type.c_str());
    });
  char hostname[256] = {};
  if (::gethostname(hostname, sizeof hostname - 1) != 0) hostname[0] = '\0';
  for (auto& [path, h] : posts)
    m.server.Post(path, [h = std::move(h), self = std::string(hostname)](
                            const httplib::Request& req, httplib::Response& res) {
      if (auto why =
              post_refusal(req.has_header("X-Coach-Dashboard"), req.get_header_value("Origin"),
                           req.get_header_value("Host"), self)) {
        res.status = 403;
        res.set_content(*why, "text/plain; charset=utf-8");
        return;
      }
      http_response r;
      try {
        r = h(req.body);
      } catch (const std::exception& e) {
        r = {500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n"};
      }
      res.status = r.status;
      res.set_content(std::move(r.body), r.content_type.c_str());
    });
  if (port == 0) {
    port = m.server.bind_to_any_port(host);
    if (port < 0)
      return fail(errc::io_error, "cannot listen on {}: {}", address, std::strerror(errno));
  } else if (!m.server.bind_to_port(host, port)) {
    return fail(errc::io_error, "cannot listen on {}: {}", address, std::strerror(errno));
  }
  m.url = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
          std::to_string(port);
  m.thread = std::thread([&server = m.server] { server.listen_after_bind(); });
  return s;
}

}  // namespace coach::actors
