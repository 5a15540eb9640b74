// scheduler::job_traffic: a job's bytes between hosts are its links between nodes, from every
// node's latest heartbeat; the scheduler's answers to `coach` clients (which carry the job's id)
// are not among them (issue 42: a queued job showed 272 B between hosts, its submit's answer).

#include "scheduler/cluster_messages.hpp"

#include <gtest/gtest.h>

#include <map>

namespace coach::scheduler {
namespace {

constexpr std::uint32_t clients = 0x80000000u;  // the host the transports count clients under

node_heartbeat node(std::uint32_t host, std::vector<link_traffic> traffic) {
  node_heartbeat h;
  h.host = host;
  h.name = "n" + std::to_string(host);
  h.traffic = std::move(traffic);
  return h;
}

TEST(job_traffic, counts_the_links_between_nodes_and_leaves_out_answers_to_clients) {
  std::map<std::uint32_t, node_heartbeat> hbs;
  hbs[1] = node(1, {{7, 1, 1, 2, 100},
                    {7, 1, 2, 5, 1000},
                    {7, 1, clients, 1, 272},
                    {8, 1, 2, 3, 999},
                    {0, 1, 2, 9, 50}});
  hbs[2] = node(2, {{7, 2, 1, 4, 2000}, {7, 2, 9, 1, 64}});
  const auto links = job_traffic(7, hbs);
  ASSERT_EQ(links.size(), 3u);
  EXPECT_EQ(links[0], (link_traffic{7, 1, 1, 2, 100}));
  EXPECT_EQ(links[1], (link_traffic{7, 1, 2, 5, 1000}));
  EXPECT_EQ(links[2], (link_traffic{7, 2, 1, 4, 2000}));
  std::uint64_t cross = 0;
  for (const auto& l : links)
    if (l.src_host != l.dst_host) cross += l.bytes;
  EXPECT_EQ(cross, 3000u);
}

TEST(job_traffic, a_job_that_only_answered_its_submit_has_no_bytes) {
  std::map<std::uint32_t, node_heartbeat> hbs;
  hbs[1] = node(1, {{3, 1, clients, 1, 272}});
  hbs[2] = node(2, {});
  EXPECT_TRUE(job_traffic(3, hbs).empty());
}

}  // namespace
}  // namespace coach::scheduler
