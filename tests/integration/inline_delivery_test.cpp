// inline_scope: a thread that sends to an idle actor of its process bound with bind_inline runs
// that actor itself when the scope closes (a worker running its shard's update), for the
// in-process transport and for the local deliveries of the ZeroMQ one.

#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "actors/inline_delivery.hpp"
#include "actors/transport.hpp"
#include "actors/zmq_transport.hpp"

namespace coach::actors {
namespace {

using namespace std::chrono_literals;

/// What an actor saw: the thread each message ran on, and how many ran.
struct sightings {
  std::mutex mu;
  std::vector<std::thread::id> threads;  ///< by message, in the order handled
  std::vector<std::int64_t> steps;       ///< the messages' steps, in the order handled
  std::atomic<int> handled{0};
};

caf::behavior recorder(caf::event_based_actor*, std::shared_ptr<sightings> s) {
  return {[s](wire_message& m) {
    {
      std::lock_guard lock{s->mu};
      s->threads.push_back(std::this_thread::get_id());
      s->steps.push_back(m.hdr.step);
    }
    ++s->handled;
  }};
}

wire_message to(const endpoint& dst, std::int64_t step) {
  wire_message m;
  m.hdr.src = {1, 100};
  m.hdr.dst = dst;
  m.hdr.kind = msg_kind::push;
  m.hdr.step = step;
  return m;
}

bool wait_for(const sightings& s, int n) {
  for (int i = 0; i < 500 && s.handled.load() < n; ++i) std::this_thread::sleep_for(10ms);
  return s.handled.load() >= n;
}

class inline_delivery : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    cfg.set("logger.console", caf::atom("none"));
    cfg.set("scheduler.policy", caf::atom("sharing"));
    cfg.set("scheduler.max-threads", std::size_t(1));
    sys.emplace(cfg);
    if (GetParam() == "inproc") {
      net = make_inproc_transport();
    } else {
      auto z = zmq_transport::start({.host = 1, .listen = "tcp://127.0.0.1:0"});
      ASSERT_TRUE(z) << z.error().message;
      net = std::move(*z);
    }
  }
  void TearDown() override {
    net.reset();
    sys.reset();
  }
  caf::actor spawn_bound(const endpoint& ep, bool run_inline, std::shared_ptr<sightings> s) {
    auto a = sys->spawn(recorder, s);
    if (run_inline)
      net->bind_inline(ep, a);
    else
      net->bind(ep, a);
    // Once it handled a message it waits for the next (an actor just spawned is still being
    // started by the scheduler): from now on a delivery finds it idle.
    caf::anon_send(a, to(ep, -1));
    EXPECT_TRUE(wait_for(*s, 1));
    std::this_thread::sleep_for(10ms);  // a gap: the actor goes back to waiting
    std::lock_guard lock{s->mu};
    s->threads.clear();
    s->steps.clear();
    s->handled = 0;
    return a;
  }

  caf::actor_system_config cfg;
  std::optional<caf::actor_system> sys;
  std::shared_ptr<transport> net;
};

TEST_P(inline_delivery, an_idle_inline_actor_runs_on_the_sender_when_its_scope_closes) {
  const endpoint shard{1, 1};
  auto seen = std::make_shared<sightings>();
  spawn_bound(shard, true, seen);
  const endpoint plain{1, 3};
  auto other = std::make_shared<sightings>();
  spawn_bound(plain, false, other);
  const auto me = std::this_thread::get_id();
  {
    inline_scope scope;
    ASSERT_TRUE(net->send(to(shard, 0)));
    // CAF's one thread runs a plain actor's message sent after it meanwhile: it had the time
    // to run the inline one too, and did not.
    ASSERT_TRUE(net->send(to(plain, 0)));
    ASSERT_TRUE(wait_for(*other, 1));
    EXPECT_EQ(seen->handled.load(), 0) << "it ran before the scope closed";
  }
  ASSERT_EQ(seen->handled.load(), 1) << "the scope closed without running it";
  EXPECT_EQ(seen->threads[0], me);

  // Without a scope it runs on CAF's thread, as any actor does.
  ASSERT_TRUE(net->send(to(shard, 1)));
  ASSERT_TRUE(wait_for(*seen, 2));
  EXPECT_NE(seen->threads[1], me);
}

TEST_P(inline_delivery, only_the_first_actor_a_scope_wakes_runs_there_and_plain_binds_never) {
  const endpoint first{1, 1}, second{1, 2}, plain{1, 3};
  auto a = std::make_shared<sightings>(), b = std::make_shared<sightings>(),
       c = std::make_shared<sightings>();
  spawn_bound(first, true, a);
  spawn_bound(second, true, b);
  spawn_bound(plain, false, c);
  const auto me = std::this_thread::get_id();
  {
    inline_scope scope;
    ASSERT_TRUE(net->send(to(plain, 0)));
    ASSERT_TRUE(net->send(to(first, 0)));
    ASSERT_TRUE(net->send(to(second, 0)));  // goes to the scheduler at once (in parallel)
    ASSERT_TRUE(wait_for(*b, 1));
    ASSERT_TRUE(wait_for(*c, 1));
    EXPECT_EQ(a->handled.load(), 0);
  }
  ASSERT_EQ(a->handled.load(), 1);
  EXPECT_EQ(a->threads[0], me);
  EXPECT_NE(b->threads[0], me);
  EXPECT_NE(c->threads[0], me);
}

TEST_P(inline_delivery, a_nested_scope_is_inert_and_a_burst_keeps_its_order) {
  const endpoint shard{1, 1}, plain{1, 3};
  auto seen = std::make_shared<sightings>(), other = std::make_shared<sightings>();
  spawn_bound(shard, true, seen);
  spawn_bound(plain, false, other);
  const auto me = std::this_thread::get_id();
  {
    inline_scope outer;
    {
      inline_scope inner;
      for (int i = 0; i < 50; ++i) ASSERT_TRUE(net->send(to(shard, i)));
    }
    // A plain actor's message, sent after, runs on CAF's thread meanwhile; the burst did not.
    ASSERT_TRUE(net->send(to(plain, 0)));
    ASSERT_TRUE(wait_for(*other, 1));
    EXPECT_EQ(seen->handled.load(), 0) << "the inner scope ran it";
  }
  // A few ran here; the rest of the burst went on on CAF's thread.
  ASSERT_TRUE(wait_for(*seen, 50));
  std::lock_guard lock{seen->mu};
  EXPECT_EQ(seen->threads.front(), me);
  EXPECT_NE(seen->threads.back(), me);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(seen->steps[std::size_t(i)], i);
}

INSTANTIATE_TEST_SUITE_P(transports, inline_delivery, ::testing::Values("inproc", "zmq"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace coach::actors
