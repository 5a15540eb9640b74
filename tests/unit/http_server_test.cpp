// actors::post_refusal: which dashboard actions the HTTP server refuses before their handler
// (issue 37, item 11: a cross-site POST with Origin and Host evil.example, text/plain, cancelled
// a job and changed the policy).
#include <gtest/gtest.h>

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
