// actors::post_refusal: which dashboard actions the HTTP server refuses before their handler
// (issue 37, item 11: a cross-site POST with Origin and Host evil.example, text/plain, cancelled
// a job and changed the policy).
#include <gtest/gtest.h>

#include "actors/http_request.hpp"
#include "actors/http_server.hpp"

namespace coach::actors {
namespace {

TEST(post_refusal, the_dashboards_own_requests_pass) {
  EXPECT_FALSE(post_refusal(true, "", "127.0.0.1:8080", "gpu-3"));
  EXPECT_FALSE(post_refusal(true, "http://127.0.0.1:8080", "127.0.0.1:8080", "gpu-3"));
  EXPECT_FALSE(post_refusal(true, "http://localhost:8080", "localhost:8080", "gpu-3"));
  EXPECT_FALSE(post_refusal(true, "http://GPU-3:8080", "gpu-3:8080", "gpu-3"));
  EXPECT_FALSE(post_refusal(true, "", "[::1]:8080", "gpu-3"));
  EXPECT_FALSE(post_refusal(true, "", "10.0.0.7", "gpu-3"));
}

TEST(post_refusal, cross_site_and_rebound_requests_are_refused_saying_why) {
  // No dashboard header: what a form or a text/plain fetch of another site sends.
  EXPECT_EQ(post_refusal(false, "http://evil.example", "evil.example", "gpu-3"),
            "refused: a dashboard action needs the page's X-Coach-Dashboard header (a page of "
            "another site cannot send it)\n");
  // Another origin than the Host.
  EXPECT_EQ(post_refusal(true, "http://evil.example", "127.0.0.1:8080", "gpu-3"),
            "refused: a cross-site request (Origin http://evil.example, Host 127.0.0.1:8080)\n");
  EXPECT_TRUE(post_refusal(true, "http://127.0.0.1:9999", "127.0.0.1:8080", "gpu-3"));
  // DNS rebinding: the page's own origin, but a name that is not this node's.
  EXPECT_EQ(post_refusal(true, "http://evil.example:8080", "evil.example:8080", "gpu-3"),
            "refused: Host 'evil.example:8080' does not name this node (an IP address, "
            "localhost or gpu-3): a name pointed here by another's DNS is not trusted with "
            "actions\n");
  EXPECT_TRUE(post_refusal(true, "", "localhost.evil.example", "gpu-3"));
}

}  // namespace
}  // namespace coach::actors

namespace coach::actors {
namespace {

using st = http_request_reader::state;

TEST(http_request_reader, a_request_in_pieces_is_whole_once_its_body_is) {
  http_request_reader r;
  EXPECT_EQ(r.feed("POST /api/cancel?x=1 HTTP/1.1\r\nHo"), st::reading);
  EXPECT_EQ(r.feed("st: 127.0.0.1:9470\r\nContent-Length: 2\r\nX-Coach-Dashboard:  1 \r\n\r\n4"),
            st::reading);
  EXPECT_EQ(r.feed("2"), st::done);
  EXPECT_EQ(r.request().method, "POST");
  EXPECT_EQ(r.request().path, "/api/cancel");
  EXPECT_EQ(r.request().header("host"), "127.0.0.1:9470");
  EXPECT_EQ(r.request().header("x-coach-dashboard"), "1");
  EXPECT_EQ(r.request().body, "42");
}

TEST(http_request_reader, oversized_and_malformed_requests_are_refused_with_their_status) {
  auto refused = [](std::string_view bytes, http_limits l = {}) {
    http_request_reader r(l);
    r.feed(bytes);
    return r.current() == st::refused ? r.refusal_status() : 0;
  };
  EXPECT_EQ(refused("GET /" + std::string(9000, 'a')), 414) << "before the line ends";
  EXPECT_EQ(refused("GET / HTTP/1.1\r\nX: " + std::string(20000, 'b')), 431);
  // The body's size is judged from its header, before a byte of it is read.
  EXPECT_EQ(refused("POST /api/policy HTTP/1.1\r\nContent-Length: 268435456\r\n\r\n"), 413);
  EXPECT_EQ(refused("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"), 413);
  EXPECT_EQ(refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), 411);
  EXPECT_EQ(refused("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(refused("GET /\r\n\r\n"), 400);
  EXPECT_EQ(refused("GET http://evil/ HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(refused("GET / HTTP/1.1\r\nno colon\r\n\r\n"), 400);
  EXPECT_EQ(refused("GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n"), 400);
  EXPECT_EQ(refused("GET / HTTP/1.1\r\n\r\n"), 0);
  EXPECT_EQ(refused("POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n", {.max_body = 64}), 413);
}

}  // namespace
}  // namespace coach::actors
