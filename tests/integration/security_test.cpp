// Authentication between processes (docs/security.md): ZeroMQ transports with CURVE keys
// exchange messages; a key that is not authorized, no key at all, or the wrong server key is
// refused, counted, and reported to the side that was refused at once; keys rotate without a
// restart. Then the same with coach-node and coach processes: the CLI says "not authorized"
// within 2 s and a node with a foreign key never joins.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <signal.h>
#include <chrono>
#include <numeric>
#include <thread>

#include "actors/zmq_transport.hpp"
#include "tests/integration/process_harness.hpp"
#include "tests/integration/transport_test_helpers.hpp"

namespace coach::actors {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct keyed_hosts : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  fs::path dir;  ///< the servers' authorized keys
  std::map<std::string, key_pair> keys;
  endpoint on_b{2, 200};

  void SetUp() override {
    cfg.set("logger.console", caf::atom("none"));
    sys = std::make_unique<caf::actor_system>(cfg);
    dir = itest::work_dir() /
          ("authorized-" +
           std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir);
    for (const char* name : {"a", "b"}) key(name, dir);
    key("stranger", dir / "elsewhere");
  }
  void TearDown() override {
    self.reset();
    sys.reset();
  }

  const key_pair& key(const std::string& name, const fs::path& where) {
    auto k = generate_key_pair();
    EXPECT_TRUE(k && write_key_files(where, name, *k));
    return keys[name] = *k;
  }
  /// A transport with `name`'s key (empty: none) that trusts `dir`.
  std::shared_ptr<zmq_transport> start(std::uint32_t host, const std::string& name) {
    transport_security s;
    if (!name.empty()) s.key = keys.at(name), s.authorized_dir = dir;
    auto t = zmq_transport::start(
        {.host = host, .listen = "tcp://127.0.0.1:0", .security = std::move(s)});
    EXPECT_TRUE(t) << t.error().to_string();
    return *t;
  }
  /// Messages to on_b at `server` come to the test (await).
  void deliver_to_test(zmq_transport& server) {
    self = std::make_unique<caf::scoped_actor>(*sys);
    server.bind(on_b, sys->spawn(forwarder, caf::actor_cast<caf::actor>(*self)));
  }
  std::optional<wire_message> await(std::chrono::milliseconds t = 3s) {
    std::optional<wire_message> got;
    (*self)->receive([&](wire_message& m) { got = std::move(m); }, caf::after(t) >> [] {});
    return got;
  }
  std::unique_ptr<caf::scoped_actor> self;
};

TEST_F(keyed_hosts, authorized_keys_carry_messages_intact) {
  auto a = start(1, "a");
  auto b = start(2, "b");
  a->add_peer(2, b->bound_address(), keys["b"].public_key);
  deliver_to_test(*b);
  ASSERT_TRUE(a->send(numbered({1, 1}, on_b, 7, 1 << 18)));  // 1 MiB, encrypted on the wire
  auto got = await();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->hdr.step, 7);
  auto v = got->frames.at(0).as<float>();
  ASSERT_EQ(v.size(), std::size_t(1 << 18));
  for (std::size_t i = 0; i < v.size(); i += 1021) ASSERT_EQ(v[i], float(7 + i));
  EXPECT_EQ(b->received().refused(), 0u);
  EXPECT_EQ(a->refusal_of(2), "");
}

TEST_F(keyed_hosts, an_unauthorized_key_is_refused_counted_and_told_at_once) {
  auto b = start(2, "b");
  auto c = start(3, "stranger");
  c->add_peer(2, b->bound_address(), keys["b"].public_key);
  deliver_to_test(*b);
  const auto t0 = std::chrono::steady_clock::now();
  c->send(numbered({3, 1}, on_b, 1, 16));
  ASSERT_TRUE(eventually([&] { return !c->refusal_of(2).empty(); }, 2s));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(c->refusal_of(2), "not authorized: " + b->bound_address() +
                                  " refused this process's key (it is not in that node's "
                                  "authorized keys)");
  ASSERT_TRUE(eventually([&] { return b->received().refused_key >= 1; }));
  EXPECT_EQ(b->received().refused(), b->received().refused_key);
  // Nothing got through: an authorized sender's marker is the first message b delivers.
  auto a = start(1, "a");
  a->add_peer(2, b->bound_address(), keys["b"].public_key);
  a->send(numbered({1, 1}, on_b, 99, 16));
  auto got = await();
  ASSERT_TRUE(got) << "the authorized marker did not arrive";
  EXPECT_EQ(got->hdr.step, 99);
  EXPECT_EQ(b->received().messages, 1u);
}

TEST_F(keyed_hosts, no_key_against_a_key_and_a_key_against_none_are_refused_both_ways) {
  auto keyed = start(2, "b");
  auto plain = start(4, "");
  auto plain_client = start(5, "");
  plain_client->add_peer(2, keyed->bound_address());
  plain_client->send(numbered({5, 1}, on_b, 1, 4));
  ASSERT_TRUE(eventually([&] { return !plain_client->refusal_of(2).empty(); }, 2s));
  EXPECT_NE(plain_client->refusal_of(2).find("not authorized: "), std::string::npos);
  EXPECT_NE(plain_client->refusal_of(2).find("give --key FILE or set COACH_KEY"),
            std::string::npos);
  ASSERT_TRUE(eventually([&] { return keyed->received().refused() >= 1; }));

  auto keyed_client = start(6, "a");
  keyed_client->add_peer(4, plain->bound_address());
  keyed_client->send(numbered({6, 1}, {4, 1}, 1, 4));
  ASSERT_TRUE(eventually([&] { return !keyed_client->refusal_of(4).empty(); }, 2s));
  // ZeroMQ reports the mismatch to the client, or closes on it first; either way it is told.
  EXPECT_EQ(keyed_client->refusal_of(4).rfind("not authorized: ", 0), 0u);
  EXPECT_NE(keyed_client->refusal_of(4).find("uses no keys"), std::string::npos)
      << keyed_client->refusal_of(4);
  // The node counts it as a mechanism mismatch, or as a failed handshake when the connection
  // closed before ZeroMQ said which.
  ASSERT_TRUE(eventually([&] {
    const auto r = plain->received();
    return r.refused_mechanism + r.failed_handshakes >= 1;
  }));
  EXPECT_EQ(plain->received().messages, 0u);
}

TEST_F(keyed_hosts, a_server_that_is_not_the_expected_key_is_not_talked_to) {
  auto b = start(2, "b");
  auto a = start(1, "a");
  a->add_peer(2, b->bound_address(), keys["stranger"].public_key);  // not b's key
  a->send(numbered({1, 1}, on_b, 1, 4));
  ASSERT_TRUE(eventually([&] { return !a->refusal_of(2).empty(); }, 2s));
  EXPECT_NE(a->refusal_of(2).find("is not the server key this process expects (" +
                                  keys["stranger"].public_key.substr(0, 8)),
            std::string::npos)
      << a->refusal_of(2);
  ASSERT_TRUE(eventually([&] { return b->received().failed_handshakes >= 1; }));
  // Told the right key (a heartbeat carries it), it connects anew.
  deliver_to_test(*b);
  a->add_peer(2, b->bound_address(), keys["b"].public_key);
  a->send(numbered({1, 1}, on_b, 2, 4));
  auto got = await();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->hdr.step, 2);
  EXPECT_EQ(a->refusal_of(2), "");
}

TEST_F(keyed_hosts, keys_rotate_without_a_restart_and_connections_made_stay_up) {
  auto b = start(2, "b");
  auto a = start(1, "a");
  a->add_peer(2, b->bound_address(), keys["b"].public_key);
  deliver_to_test(*b);
  a->send(numbered({1, 1}, on_b, 1, 4));
  ASSERT_TRUE(await());

  // a's successor key is added, then a's old key removed: b is never restarted.
  key("a2", dir / "new");
  fs::copy_file(dir / "new" / "a2.pub", dir / "a2.pub");
  auto a2 = start(7, "a2");
  a2->add_peer(2, b->bound_address(), keys["b"].public_key);
  a2->send(numbered({7, 1}, on_b, 2, 4));
  auto got = await();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->hdr.step, 2);
  fs::remove(dir / "a.pub");
  // The connection a made before the removal still carries messages (jobs keep running) ...
  a->send(numbered({1, 1}, on_b, 3, 4));
  got = await();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->hdr.step, 3);
  // ... but the old key makes no new connection.
  auto a_again = start(8, "a");
  a_again->add_peer(2, b->bound_address(), keys["b"].public_key);
  a_again->send(numbered({8, 1}, on_b, 4, 4));
  ASSERT_TRUE(eventually([&] { return !a_again->refusal_of(2).empty(); }, 2s));
  // Nothing got through: a marker on a2's connection, authorized, is the next message.
  a2->send(numbered({7, 1}, on_b, 5, 4));
  got = await();
  ASSERT_TRUE(got) << "the authorized marker did not arrive";
  EXPECT_EQ(got->hdr.step, 5) << "the refused key's message was delivered";
  EXPECT_EQ(b->received().refused_key, 1u);
}

TEST_F(keyed_hosts, a_peer_named_again_without_its_key_keeps_its_connection) {
  // A restarted scheduler once listed its own host with an empty key (before its first
  // heartbeat): nodes took it for a key change, replaced their connection to it and lost the
  // answers queued on it, and a job waited forever for them.
  auto b = start(2, "b");
  auto a = start(1, "a");
  const auto at = b->bound_address();
  a->add_peer(2, at, keys["b"].public_key);
  deliver_to_test(*b);
  a->send(numbered({1, 1}, on_b, 1, 4));
  ASSERT_TRUE(await());
  a->add_peer(2, at, "");  // "key unknown", not "no key": b's key stays
  for (std::int64_t step = 2; step < 12; ++step) a->send(numbered({1, 1}, on_b, step, 4));
  for (std::int64_t step = 2; step < 12; ++step) {
    auto got = await();
    ASSERT_TRUE(got) << "message " << step << " lost";
    EXPECT_EQ(got->hdr.step, step);
  }
  EXPECT_EQ(a->refusal_of(2), "");
  EXPECT_EQ(a->public_key(), keys["a"].public_key);
}

// --- processes ---------------------------------------------------------------------------------

struct keyed_node : ::testing::Test {
  std::vector<itest::node_process> nodes;
  std::string at = itest::free_address();
  void SetUp() override {
    nodes.push_back(itest::start_node(
        {"--listen", at, "--scheduler", "--store", "", "--name", "sched", "--heartbeat", "0.2"},
        "sched", "security-sched"));
    ASSERT_TRUE(itest::await_nodes_alive(at, 1));
  }
  void TearDown() override { itest::stop_nodes(nodes); }
};

TEST_F(keyed_node, the_cli_says_not_authorized_within_2_s) {
  const auto other = itest::work_dir() / "cli-other";
  fs::remove_all(other);
  ASSERT_EQ(itest::coach("keygen " + other.string() + " --name me").code, 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = itest::coach("nodes --at " + at + " --key " + (other / "me.key").string() +
                        " --server-key " + (itest::work_dir() / "keys" / "cluster.pub").string());
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(r.err, "coach: not authorized: " + at +
                       " refused this process's key (it is not in that node's authorized keys)\n");
  EXPECT_LT(took, 2s);

  // No key at all: refused as fast, with the way out in the message.
  const std::string key = std::getenv("COACH_KEY");
  ::unsetenv("COACH_KEY");
  const auto t1 = std::chrono::steady_clock::now();
  r = itest::coach("submit examples/digits-mlp.yaml --at " + at);
  const auto took_plain = std::chrono::steady_clock::now() - t1;
  ::setenv("COACH_KEY", key.c_str(), 1);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("coach: not authorized: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--key"), std::string::npos) << r.err;
  EXPECT_LT(took_plain, 2s);
  // The scheduler counted and logged both, at warning, and took no job.
  EXPECT_TRUE(eventually(
      [&] { return itest::count(itest::slurp(nodes[0].log), "refused a connection") >= 2; }));
  // Each attempt counted once (issue 37: a client refused for offering no key reconnected
  // before it exited, and was counted twice): a third attempt is the third refusal.
  r = itest::coach("nodes --at " + at + " --key " + (other / "me.key").string() + " --server-key " +
                   (itest::work_dir() / "keys" / "cluster.pub").string());
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(eventually([&] {
    return itest::slurp(nodes[0].log).find("is not in") != std::string::npos &&
           itest::count(itest::slurp(nodes[0].log), "refused a connection") >= 3;
  })) << itest::slurp(nodes[0].log);
  const auto log = itest::slurp(nodes[0].log);
  EXPECT_NE(log.find("[warning] sched: transport " + at + ": refused a connection: key "),
            std::string::npos)
      << log;
  EXPECT_EQ(itest::count(log, "refused a connection"), 3) << log;
  EXPECT_NE(log.find("(3 refused so far)"), std::string::npos) << log;
  EXPECT_EQ(log.find("(4 refused so far)"), std::string::npos) << log;
  auto s = itest::coach("status --json --at " + at);
  ASSERT_EQ(s.code, 0) << s.err;
  const auto jobs = itest::json_field(itest::parse_json(s.out), "jobs");
  EXPECT_TRUE(jobs.is_array() && jobs.empty()) << s.out;
}

TEST_F(keyed_node, a_node_with_a_foreign_key_never_joins) {
  const auto other = itest::work_dir() / "node-other";
  fs::remove_all(other);
  ASSERT_EQ(itest::coach("keygen " + other.string() + " --name rogue").code, 0);
  nodes.push_back(itest::start_node(
      {"--listen", itest::free_address(), "--join", at, "--name", "rogue", "--key",
       (other / "rogue.key").string(), "--server-key",
       (itest::work_dir() / "keys" / "cluster.pub").string(), "--heartbeat", "0.2"},
      "rogue", "security-rogue"));
  ASSERT_TRUE(eventually(
      [&] {
        return itest::slurp(nodes[1].log)
                   .find("not authorized: " + at + " refused this process's key") !=
               std::string::npos;
      },
      5s))
      << itest::slurp(nodes[1].log);
  // An authorized node joins meanwhile; the rogue one is never listed.
  nodes.push_back(itest::start_node(
      {"--listen", itest::free_address(), "--join", at, "--name", "member", "--heartbeat", "0.2"},
      "member", "security-member"));
  ASSERT_TRUE(itest::await_nodes_alive(at, 2));
  auto r = itest::coach("nodes --json --at " + at);
  const auto names = itest::node_names(r.out);
  EXPECT_TRUE(itest::holds(names, "member")) << r.out;
  EXPECT_FALSE(itest::holds(names, "rogue")) << r.out;
}

}  // namespace
}  // namespace coach::actors
