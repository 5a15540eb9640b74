// The transport contract (actors/transport.hpp), one suite over every implementation: in
// process, ZeroMQ between two "hosts" on loopback, and the faulty wrapper with no fault planned
// around each. Then what the faulty wrapper does when faults are planned: drops, duplicates,
// delays, reorders and cuts, reproducibly from its seed, and crashes an actor at a chosen
// message as a real crash would.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "actors/faulty_transport.hpp"
#include "actors/zmq_transport.hpp"
#include "tests/integration/transport_test_helpers.hpp"

namespace coach::actors {
namespace {

using namespace std::chrono_literals;

/// Two endpoints and the transports they send and receive through (one for in-process).
struct rig {
  std::shared_ptr<transport> sender, receiver;
  endpoint src{1, 100}, dst{2, 200};
  std::vector<std::shared_ptr<transport>> keep;
};

enum class kind { inproc, zmq, faulty_inproc, faulty_zmq };

std::string name_of(kind k) {
  switch (k) {
    case kind::inproc:
      return "inproc";
    case kind::zmq:
      return "zmq";
    case kind::faulty_inproc:
      return "faulty_inproc";
    case kind::faulty_zmq:
      return "faulty_zmq";
  }
  return "?";
}

rig make_rig(kind k) {
  rig r;
  if (k == kind::inproc || k == kind::faulty_inproc) {
    r.sender = r.receiver = make_inproc_transport();
  } else {
    auto a = zmq_transport::start({.host = 1, .listen = "tcp://127.0.0.1:0"});
    auto b = zmq_transport::start({.host = 2, .listen = "tcp://127.0.0.1:0"});
    EXPECT_TRUE(a && b);
    (*a)->add_peer(2, (*b)->bound_address());
    (*b)->add_peer(1, (*a)->bound_address());
    r.sender = *a;
    r.receiver = *b;
  }
  if (k == kind::faulty_inproc || k == kind::faulty_zmq) {
    r.keep = {r.sender, r.receiver};
    auto s = faulty_transport::wrap(r.sender, {});
    r.receiver = r.sender == r.receiver ? s : faulty_transport::wrap(r.receiver, {});
    r.sender = s;
  }
  return r;
}

class transport_contract : public ::testing::TestWithParam<kind> {
 protected:
  void SetUp() override {
    cfg.set("logger.console", caf::atom("none"));
    sys = std::make_unique<caf::actor_system>(cfg);
    r = make_rig(GetParam());
    self = std::make_unique<caf::scoped_actor>(*sys);
    r.receiver->bind(r.dst, sys->spawn(forwarder, caf::actor_cast<caf::actor>(*self)));
  }
  void TearDown() override {
    self.reset();
    r = {};
    sys.reset();
  }
  std::optional<wire_message> await(std::chrono::milliseconds t = 3s) {
    std::optional<wire_message> got;
    (*self)->receive([&](wire_message& m) { got = std::move(m); }, caf::after(t) >> [] {});
    return got;
  }

  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  rig r;
  std::unique_ptr<caf::scoped_actor> self;
};

TEST_P(transport_contract, delivers_header_and_payload_intact) {
  ASSERT_TRUE(r.sender->send(numbered(r.src, r.dst, 41, 1 << 16)));
  auto got = await();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->hdr.step, 41);
  EXPECT_EQ(got->hdr.job, 9u);
  EXPECT_EQ(got->hdr.src, r.src);
  ASSERT_EQ(got->frames.size(), 1u);
  auto v = got->frames[0].as<float>();
  ASSERT_EQ(v.size(), std::size_t(1 << 16));
  for (std::size_t i = 0; i < v.size(); i += 97) ASSERT_EQ(v[i], float(41 + i));
}

TEST_P(transport_contract, keeps_the_order_of_one_sender_to_one_receiver) {
  for (int i = 0; i < 500; ++i) ASSERT_TRUE(r.sender->send(numbered(r.src, r.dst, i)));
  for (int i = 0; i < 500; ++i) {
    auto got = await();
    ASSERT_TRUE(got) << "message " << i;
    ASSERT_EQ(got->hdr.step, i);
  }
}

TEST_P(transport_contract, concurrent_senders_lose_and_repeat_nothing) {
  std::vector<std::thread> senders;
  for (std::uint32_t t = 0; t < 4; ++t)
    senders.emplace_back([&, t] {
      for (int i = 0; i < 250; ++i)
        r.sender->send(numbered({1, 100 + t}, r.dst, std::int64_t(t) * 1000 + i));
    });
  for (auto& t : senders) t.join();
  std::vector<std::int64_t> steps;
  for (int i = 0; i < 1000; ++i) {
    auto got = await();
    ASSERT_TRUE(got) << "after " << i;
    steps.push_back(got->hdr.step);
  }
  std::sort(steps.begin(), steps.end());
  EXPECT_EQ(std::adjacent_find(steps.begin(), steps.end()), steps.end());
  // Nothing repeated comes late: a marker sent after every sender finished arrives next.
  ASSERT_TRUE(r.sender->send(numbered(r.src, r.dst, -1)));
  auto next = await();
  ASSERT_TRUE(next) << "the marker did not arrive";
  EXPECT_EQ(next->hdr.step, -1) << "a message arrived after the 1000 distinct ones";
}

TEST_P(transport_contract, an_unbound_endpoint_gets_nothing_and_the_drop_is_counted) {
  const endpoint local{r.src.host, 999};  // on the sender's own host: known to be unbound
  const auto before = r.sender->traffic().dropped;
  EXPECT_FALSE(r.sender->send(numbered(r.src, local, 1)));
  EXPECT_EQ(r.sender->traffic().dropped, before + 1);
  // Another endpoint of the receiver's host, to the test too: a marker sent to it after the
  // message to the unbound one arrives first (one link keeps its order), so nothing came.
  const endpoint other{r.dst.host, 201};
  r.receiver->bind(other, sys->spawn(forwarder, caf::actor_cast<caf::actor>(*self)));
  r.receiver->unbind(r.dst);
  r.sender->send(numbered(r.src, r.dst, 2));
  ASSERT_TRUE(r.sender->send(numbered(r.src, other, 3)));
  auto next = await();
  ASSERT_TRUE(next) << "the marker did not arrive";
  EXPECT_EQ(next->hdr.step, 3) << "the unbound endpoint's message was delivered";
}

TEST_P(transport_contract, counts_messages_and_bytes_per_job_and_host_pair) {
  for (int i = 0; i < 3; ++i) r.sender->send(numbered(r.src, r.dst, i, 1024));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(await());
  // A sender counts once ZeroMQ took the message, possibly after it arrived.
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (r.sender->traffic().links.empty() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  const auto t = r.sender->traffic();
  ASSERT_EQ(t.links.size(), 1u);
  EXPECT_EQ(t.links[0].job, 9u);
  EXPECT_EQ(t.links[0].src_host, 1u);
  EXPECT_EQ(t.links[0].dst_host, 2u);
  EXPECT_EQ(t.links[0].messages, 3u);
  EXPECT_GE(t.links[0].bytes, 3u * 4096u);
  EXPECT_LT(t.links[0].bytes, 3u * 4096u + 3u * 1024u);
  EXPECT_EQ(t.kind_messages[std::size_t(msg_kind::push)], 3u);
}

TEST_P(transport_contract, a_route_ends_with_its_actor_and_keeps_no_ended_actor_alive) {
  // A detached actor's thread waits for the actor's last reference, and the actor system's end
  // for that thread: a route that outlived its actor hung shutdowns (a worker stopped before
  // its last message arrived).
  const auto sink = caf::actor_cast<caf::actor>(*self);
  const endpoint mine{r.dst.host, 201}, shared{r.dst.host, 202};
  const endpoint here{r.dst.host, 7};  // a sender on the receiver's host
  caf::weak_actor_ptr weak;
  caf::actor later = sys->spawn(forwarder, sink);
  {
    auto a = sys->spawn<caf::detached>(forwarder, sink);
    bind_while_alive(r.receiver, mine, a);
    bind_while_alive(r.receiver, shared, a);
    r.receiver->bind(shared, later);  // a later binding of the same endpoint
    ASSERT_TRUE(r.sender->send(numbered(r.src, mine, 5)));
    auto got = await();
    ASSERT_TRUE(got);
    EXPECT_EQ(got->hdr.step, 5);
    weak = caf::actor_cast<caf::weak_actor_ptr>(a);
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  EXPECT_TRUE(eventually([&] { return weak.lock() == nullptr; })) << "the ended actor lives on";
  EXPECT_FALSE(r.receiver->send(numbered(here, mine, 6)));
  ASSERT_TRUE(r.sender->send(numbered(r.src, shared, 7)));
  auto got = await();
  ASSERT_TRUE(got) << "the later binding went with the ended actor";
  EXPECT_EQ(got->hdr.step, 7);
  caf::anon_send_exit(later, caf::exit_reason::user_shutdown);
}

INSTANTIATE_TEST_SUITE_P(every_transport, transport_contract,
                         ::testing::Values(kind::inproc, kind::zmq, kind::faulty_inproc,
                                           kind::faulty_zmq),
                         [](const auto& info) { return name_of(info.param); });

// --- faults --------------------------------------------------------------------------------

struct faults : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  endpoint src{1, 100}, dst{2, 200};
  void SetUp() override {
    cfg.set("logger.console", caf::atom("none"));
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  /// Sends `n` numbered messages through a wrapper of `plan` and returns the steps received,
  /// in arrival order, once `n` plus the duplicates minus the losses arrived. `flush`: held
  /// messages go at once; else the wrapper's timer sends them when due.
  std::vector<std::int64_t> run(fault_plan plan, int n, fault_counts* counts = nullptr,
                                bool flush = true) {
    auto f = faulty_transport::wrap(make_inproc_transport(), std::move(plan));
    caf::scoped_actor self{*sys};
    f->bind(dst, sys->spawn(forwarder, caf::actor_cast<caf::actor>(self)));
    for (int i = 0; i < n; ++i) f->send(numbered(src, dst, i));
    if (flush) f->flush();
    const auto c = f->counts();
    const auto expected = std::uint64_t(n) + c.duplicated - c.dropped - c.cut;
    std::vector<std::int64_t> got;
    while (got.size() < expected) {
      bool timed_out = false;
      self->receive([&](wire_message& m) { got.push_back(m.hdr.step); },
                    caf::after(3s) >> [&] { timed_out = true; });
      if (timed_out) break;
    }
    if (counts) *counts = c;
    return got;
  }
};

TEST_F(faults, drops_are_reproducible_from_the_seed) {
  fault_counts c1, c2, c3;
  const auto a = run({.seed = 7, .drop = 0.2}, 1000, &c1);
  const auto b = run({.seed = 7, .drop = 0.2}, 1000, &c2);
  const auto other = run({.seed = 8, .drop = 0.2}, 1000, &c3);
  EXPECT_EQ(a, b);  // the same messages lost
  EXPECT_NE(a, other);
  EXPECT_GT(c1.dropped, 150u);
  EXPECT_LT(c1.dropped, 250u);
  EXPECT_EQ(a.size(), 1000u - c1.dropped);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));  // what is left keeps its order
}

TEST_F(faults, duplicates_arrive_twice_and_nothing_else_changes) {
  fault_counts c;
  auto got = run({.seed = 3, .duplicate = 0.25}, 400, &c);
  EXPECT_GT(c.duplicated, 60u);
  ASSERT_EQ(got.size(), 400u + c.duplicated);
  std::map<std::int64_t, int> times;
  for (auto s : got) ++times[s];
  ASSERT_EQ(times.size(), 400u);
  std::uint64_t twice = 0;
  for (auto [s, n] : times) {
    EXPECT_LE(n, 2) << s;
    twice += n == 2;
  }
  EXPECT_EQ(twice, c.duplicated);
}

TEST_F(faults, delays_and_reorders_change_the_order_and_lose_nothing) {
  fault_counts c;
  // Not flushed: the wrapper's timer sends what it holds (up to 3 ms late).
  auto got = run({.seed = 5, .delay = 0.2, .reorder = 0.2, .max_delay = 3ms}, 400, &c, false);
  EXPECT_GT(c.delayed, 40u);
  EXPECT_GT(c.reordered, 40u);
  ASSERT_EQ(got.size(), 400u);
  EXPECT_FALSE(std::is_sorted(got.begin(), got.end()));
  std::sort(got.begin(), got.end());
  for (int i = 0; i < 400; ++i) ASSERT_EQ(got[std::size_t(i)], i);
}

TEST_F(faults, a_cut_link_carries_nothing_until_healed) {
  auto f = faulty_transport::wrap(make_inproc_transport(), {});
  caf::scoped_actor self{*sys};
  f->bind(dst, sys->spawn(forwarder, caf::actor_cast<caf::actor>(self)));
  f->bind({3, 300}, sys->spawn(forwarder, caf::actor_cast<caf::actor>(self)));
  f->cut(2, 1);  // either order names the link
  f->send(numbered(src, dst, 1));
  f->send(numbered(src, {3, 300}, 2));  // another link: unaffected
  EXPECT_EQ(f->counts().cut, 1u);
  f->heal(1, 2);
  f->send(numbered(src, dst, 3));
  // The healed link's message comes behind anything the cut one let through (one forwarder,
  // in order; the other link's has its own): 2 (the other link) and 3, never 1.
  std::vector<std::int64_t> got;
  const auto has = [&](std::int64_t step) { return std::ranges::find(got, step) != got.end(); };
  while (!(has(2) && has(3)) && !::testing::Test::HasFailure())
    self->receive([&](wire_message& m) { got.push_back(m.hdr.step); },
                  caf::after(3s) >> [] { ADD_FAILURE() << "nothing after the heal"; });
  std::ranges::sort(got);
  EXPECT_EQ(got, (std::vector<std::int64_t>{2, 3}));
}

TEST_F(faults, a_crash_loses_the_next_message_and_kills_the_sender) {
  auto f = faulty_transport::wrap(make_inproc_transport(), {});
  caf::scoped_actor self{*sys};
  f->bind(dst, sys->spawn(forwarder, caf::actor_cast<caf::actor>(self)));
  // The crashing actor sends when told; the test watches it die.
  auto victim = sys->spawn([f, this](caf::event_based_actor*) -> caf::behavior {
    return {[f, this](std::int64_t step, int n) {
      for (int i = 0; i < n; ++i) f->send(numbered(src, dst, step * 10 + i));
    }};
  });
  f->bind(src, victim);
  self->monitor(victim);
  // Messages carry steps 30, 31, then 40, 41, 42: the crash comes after the one of step 40.
  f->crash_after(src, msg_kind::push, 40, 1);
  self->send(victim, std::int64_t{3}, 2);  // both arrive
  self->send(victim, std::int64_t{4}, 3);  // the first arrives, then the crash
  std::vector<std::int64_t> got;
  caf::exit_reason why = caf::exit_reason::normal;
  bool down = false;
  // The down message may overtake what the forwarder passes on: wait for both.
  while ((!down || got.size() < 3) && !::testing::Test::HasFailure())
    self->receive([&](wire_message& m) { got.push_back(m.hdr.step); },
                  [&](caf::down_msg& d) {
                    down = true;
                    why = caf::exit_reason(d.reason.code());
                  },
                  caf::after(3s) >> [&] { ADD_FAILURE() << "no death or too few messages"; });
  // Nothing the dead actor sent comes late: a marker sent now arrives next.
  f->send(numbered({1, 101}, dst, 99));
  self->receive([&](wire_message& m) { got.push_back(m.hdr.step); },
                caf::after(3s) >> [] { ADD_FAILURE() << "the marker did not arrive"; });
  EXPECT_EQ(got, (std::vector<std::int64_t>{30, 31, 40, 99}));
  EXPECT_EQ(why, caf::exit_reason::kill);
  EXPECT_EQ(f->counts().killed, 2u);  // 41 (the crash) and 42 (sent while dying)
}

}  // namespace
}  // namespace coach::actors
