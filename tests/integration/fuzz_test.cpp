// Hostile input against a live coach-node (docs/hostile-input.md): a few thousand messages from
// tests/fuzz/hostile_frames.hpp (random bytes, mutated and truncated headers, wrong versions,
// frame counts and sizes, unknown endpoints, huge announced sizes, empty messages, thousands of
// frames, mutated control payloads) over one authenticated DEALER. The node stays up, still
// answers `coach nodes`, counts every message under the reason the generator predicted, and
// drains cleanly on SIGTERM. bench/fuzz_bench sends a million, with jobs running beside them.
// A message for an actor that is gone is counted, and logged only at --log-level debug.
#include <gtest/gtest.h>

#include <signal.h>

#include <array>
#include <chrono>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "actors/curve_keys.hpp"
#include "actors/job_context.hpp"
#include "tests/fuzz/hostile_frames.hpp"
#include "tests/integration/process_harness.hpp"

namespace coach::fuzz {
namespace {

using namespace std::chrono_literals;

/// `s`: a DEALER connected to the node at `at` with the suite's key (COACH_KEY), as any process
/// of the suite; a send waits 10 s at most.
void connect_keyed(zmq::context_t& ctx, const std::string& at, zmq::socket_t& s) {
  auto security = actors::load_security(itest::suite_key().string(), "", "");
  ASSERT_TRUE(security) << security.error().to_string();
  ASSERT_TRUE(security->key) << "the suite's processes have a key";
  s = zmq::socket_t(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndtimeo, 10000);
  s.set(zmq::sockopt::curve_serverkey, security->server_key_for(""));
  s.set(zmq::sockopt::curve_publickey, security->key->public_key);
  s.set(zmq::sockopt::curve_secretkey, security->key->secret_key);
  s.connect(at);
}

TEST(hostile_input, a_node_counts_5000_hostile_messages_by_reason_and_keeps_answering) {
  const std::string at = itest::free_address();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<itest::node_process> nodes{itest::start_node(
      {"--listen", at, "--scheduler", "--store", "", "--name", "fuzzed", "--stats-interval", "0.1"},
      "fuzzed")};
  ASSERT_TRUE(itest::await_nodes_alive(at, 1)) << itest::slurp(nodes[0].log);

  // An authenticated DEALER, as any process of the suite (COACH_KEY).
  zmq::context_t ctx;
  zmq::socket_t s;
  ASSERT_NO_FATAL_FAILURE(connect_keyed(ctx, at, s));

  // The flood, made first: its mix reaching every kind and every reason is a precondition
  // (the comparisons with the node's counts below prove nothing for a reason never sent).
  constexpr std::uint64_t total = 5000;
  hostile_frames gen(17, actors::node_host_id(at));
  std::vector<hostile_message> flood(total);
  std::array<std::uint64_t, outcome_count> expected{};
  std::array<std::uint64_t, hostile_kind_count> kinds{};
  std::uint64_t undecodable_control = 0;  // delivered control messages the node must drop
  for (auto& m : flood) {
    gen.next(m);
    ++expected[std::size_t(m.expected)];
    ++kinds[std::size_t(m.kind)];
    if (m.expected == outcome::delivered && m.parts.size() > 1) {
      auto h = actors::codec::decode_header(m.parts[0]);
      if (h && h->env.kind == actors::msg_kind::control &&
          !actors::control_codec::decode(m.parts[1]))
        ++undecodable_control;
    }
  }
  for (std::size_t k = 0; k < hostile_kind_count; ++k)
    ASSERT_GT(kinds[k], 0u) << "precondition: no message of kind " << to_string(hostile_kind(k));
  for (std::size_t o = 0; o < outcome_count; ++o)
    ASSERT_GT(expected[o], 0u) << "precondition: no message counted as " << to_string(outcome(o));
  ASSERT_GT(undecodable_control, 0u) << "precondition: no undecodable control payload delivered";
  for (std::uint64_t i = 0; i < total; ++i) {
    const auto& m = flood[i];
    for (std::size_t k = 0; k < m.parts.size(); ++k) {
      const auto more = k + 1 < m.parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      ASSERT_TRUE(s.send(zmq::buffer(m.parts[k].data(), m.parts[k].size()), more))
          << "the node took no message for 10 s after " << i;
    }
  }

  // Still serving: the job API answers and lists the node alive.
  auto r = itest::coach("nodes --json --at " + at);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(itest::alive_nodes(r.out), 1u) << r.out;

  // The node's counts (a line every 0.1 s) reach the messages sent; then it drains on SIGTERM
  // and its last line has the final counts.
  auto all_counted = [&] {
    auto c = last_receive_stats(itest::slurp(nodes[0].log));
    return c && c->malformed + c->foreign + c->unknown_dst + c->messages >= total;
  };
  for (int i = 0; i < 200 && !all_counted(); ++i) std::this_thread::sleep_for(50ms);
  const pid_t pid = nodes[0].pid;
  ::kill(pid, SIGTERM);
  EXPECT_EQ(itest::wait_exit(pid, 20s), 0) << itest::slurp(nodes[0].log);
  nodes.clear();
  const auto log = itest::slurp(itest::work_dir() / "fuzzed.log");
  const auto c = last_receive_stats(log);
  ASSERT_TRUE(c) << log;
  const auto exp = [&](outcome o) { return expected[std::size_t(o)]; };
  EXPECT_EQ(c->malformed, exp(outcome::malformed) + exp(outcome::malformed_frames));
  EXPECT_EQ(c->malformed_frames, exp(outcome::malformed_frames));
  EXPECT_EQ(c->foreign, exp(outcome::foreign));
  EXPECT_EQ(c->unknown_dst, exp(outcome::unknown_dst));
  // Delivered: the flood's own, and the requests of `coach nodes` (a few).
  EXPECT_GE(c->messages, exp(outcome::delivered));
  EXPECT_LE(c->messages, exp(outcome::delivered) + 200);
  EXPECT_EQ(c->refused(), 0u);
  // The mutated control payloads that reached an actor were read and dropped, said in the log.
  EXPECT_GE(itest::count(log, "dropped a control message"), 1u) << log;
  EXPECT_NE(log.find("[info] fuzzed: 'fuzzed' stopped"), std::string::npos) << log;
  // The log does not grow with the flood: at most 5 lines a second of each kind (read_control's
  // dropped control messages once logged one line each).
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto dropped_lines = itest::count(log, "dropped a control message");
  EXPECT_LE(double(dropped_lines), 5 * (seconds + 1)) << seconds << " s";
  // Messages to actors that are not there are counted (unknown_dst above), logged only at the
  // debug level: at the default level, not one line.
  EXPECT_EQ(itest::count(log, "no actor "), 0u);
}

TEST(hostile_input, a_message_to_a_vanished_actor_is_counted_and_at_debug_logged) {
  // A worker that left still gets what was in flight to it: routine, so counted (unknown_dst)
  // and written only at --log-level debug (the test above: not at the default level).
  const std::string at = itest::free_address();
  std::vector<itest::node_process> nodes{
      itest::start_node({"--listen", at, "--scheduler", "--store", "", "--name", "debugged",
                         "--stats-interval", "0.1", "--log-level", "debug"},
                        "debugged")};
  ASSERT_TRUE(itest::await_nodes_alive(at, 1)) << itest::slurp(nodes[0].log);
  zmq::context_t ctx;
  zmq::socket_t s;
  ASSERT_NO_FATAL_FAILURE(connect_keyed(ctx, at, s));
  // Params for workers 0..2 of job 77, which never ran here.
  const std::uint32_t host = actors::node_host_id(at);
  std::vector<std::string> want;
  for (std::uint32_t rank = 0; rank < 3; ++rank) {
    actors::envelope e;
    e.src = {host, 0x1000 + rank};
    e.dst = actors::worker_endpoint(77, rank);
    e.dst.host = host;
    e.kind = actors::msg_kind::params;
    e.job = 77;
    std::vector<std::byte> header;
    actors::codec::encode_header(e, {}, header);
    ASSERT_TRUE(s.send(zmq::buffer(header.data(), header.size()), zmq::send_flags::none));
    want.push_back("[debug] debugged: transport " + at + ": no actor " + std::to_string(e.dst.id) +
                   " on host " + std::to_string(host) + " (message params)");
  }
  auto counted = [&] {
    auto c = last_receive_stats(itest::slurp(nodes[0].log));
    return c && c->unknown_dst >= 3;
  };
  for (int i = 0; i < 200 && !counted(); ++i) std::this_thread::sleep_for(50ms);  // poll, 10 s
  const auto log = itest::slurp(nodes[0].log);
  const auto c = last_receive_stats(log);
  ASSERT_TRUE(c) << log;
  EXPECT_EQ(c->unknown_dst, 3u) << log;
  EXPECT_EQ(c->malformed, 0u) << log;
  for (const auto& line : want) EXPECT_EQ(itest::count(log, line), 1u) << line << "\n" << log;
  itest::stop_nodes(nodes);
}

}  // namespace
}  // namespace coach::fuzz
