#include "actors/http_server.hpp"

#include <httplib.h>

#include <charconv>
#include <thread>

#include "common/log.hpp"

namespace coach::actors {

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
  for (auto& [path, h] : posts)
    m.server.Post(path, [h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
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
