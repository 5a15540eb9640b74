#include "actors/http_request.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "common/format.hpp"

namespace coach::actors {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

}  // namespace

http_request_reader::state http_request_reader::refuse(int status, std::string why) {
  status_ = status;
  why_ = std::move(why);
  buf_.clear();
  return state_ = state::refused;
}

http_request_reader::state http_request_reader::feed(std::string_view bytes) {
  if (state_ != state::reading) return state_;
  buf_.append(bytes);
  if (!head_done_) {
    const auto end = buf_.find("\r\n\r\n");
    if (end == std::string::npos) {
      const auto line_end = buf_.find("\r\n");
      if (line_end == std::string::npos && buf_.size() > limits_.max_line)
        return refuse(414, coach::format("request line longer than {} bytes", limits_.max_line));
      if (buf_.size() > limits_.max_head)
        return refuse(431, coach::format("request head longer than {} bytes", limits_.max_head));
      return state_;
    }
    if (end + 4 > limits_.max_head)
      return refuse(431, coach::format("request head longer than {} bytes", limits_.max_head));
    if (parse_head() == state::refused) return state_;
    buf_.erase(0, end + 4);
    head_done_ = true;
  }
  if (buf_.size() < body_length_) return state_;
  req_.body = buf_.substr(0, body_length_);
  buf_.clear();
  return state_ = state::done;
}

http_request_reader::state http_request_reader::parse_head() {
  const auto head_end = buf_.find("\r\n\r\n");
  std::string_view head(buf_.data(), head_end);
  const auto line_end = head.find("\r\n");
  const std::string_view line = head.substr(0, line_end);
  if (line.size() > limits_.max_line)
    return refuse(414, coach::format("request line longer than {} bytes", limits_.max_line));
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      line.find(' ', sp2 + 1) != std::string_view::npos)
    return refuse(400, "malformed request line");
  const auto method = line.substr(0, sp1);
  const auto target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const auto version = line.substr(sp2 + 1);
  if (method.empty() || !std::ranges::all_of(method, token_char))
    return refuse(400, "malformed method");
  if (target.empty() || target.front() != '/') return refuse(400, "the target must be a path");
  if (version != "HTTP/1.1" && version != "HTTP/1.0")
    return refuse(version.starts_with("HTTP/") ? 505 : 400, "unsupported HTTP version");
  req_.method = std::string(method);
  req_.path = std::string(target.substr(0, target.find('?')));
  std::string_view rest =
      line_end == std::string_view::npos ? std::string_view() : head.substr(line_end + 2);
  while (!rest.empty()) {
    const auto e = rest.find("\r\n");
    const auto h = rest.substr(0, e);
    rest = e == std::string_view::npos ? std::string_view() : rest.substr(e + 2);
    const auto colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0 ||
        !std::ranges::all_of(h.substr(0, colon), token_char))
      return refuse(400, "malformed header line");
    std::string name(h.substr(0, colon));
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    req_.headers[name] = std::string(trim(h.substr(colon + 1)));
  }
  if (!req_.header("transfer-encoding").empty())
    return refuse(411, "chunked bodies are not taken: send Content-Length");
  if (const auto cl = req_.header("content-length"); !cl.empty()) {
    std::size_t n = 0;
    const auto [p, ec] = std::from_chars(cl.data(), cl.data() + cl.size(), n);
    if (ec == std::errc::result_out_of_range)
      n = std::size_t(-1);
    else if (ec != std::errc{} || p != cl.data() + cl.size())
      return refuse(400, "malformed Content-Length");
    if (n > limits_.max_body)
      return refuse(413,
                    coach::format("body of {} bytes; at most {} are taken", cl, limits_.max_body));
    body_length_ = n;
  }
  return state_;
}

}  // namespace coach::actors
