// shard::shard_server driven without an actor system: the messages a shard replica gets from
// its workers, master, fellow shards and chain, and what it sends back: a step's new values to
// its pushers, pulls answered at their version (keys it no longer owns answered `moved`), a
// migration's transfer sent only once the step's answers have left, the destination's
// acknowledgement to the master, a head that answers only what its backup holds, and malformed
// input counted, never applied.
#include "shard/shard_server.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <vector>

#include "wire/elastic_messages.hpp"

namespace coach::shard {
namespace {

using wire::endpoint;
using wire::msg_kind;
using wire::wire_message;
namespace flag = wire::flag;

constexpr std::uint64_t job_id = 3;
constexpr std::size_t num_params = 16;
constexpr std::size_t slice_size = 4;  // 4 slices

endpoint master_ep() {
  return {0, 1};
}
endpoint shard_at(std::uint32_t k) {
  return {0, 100 + k};
}
endpoint backup_of(std::uint32_t k) {
  return {1, 200 + k};
}
endpoint worker_at(std::uint32_t r) {
  return {0, 1000 + r};
}

float initial(std::size_t i) {
  return float(i);
}

/// A shard replica whose sends land in `sent`.
struct replica {
  std::deque<wire_message> sent;
  std::optional<shard_server> server;
  int answers_gone = 0;  ///< calls of ports.answers_gone

  replica(std::uint32_t k, std::uint32_t shards, bool owns_from_start = true,
          std::uint32_t index = 0, std::uint32_t replicas = 1) {
    ps::job_config cfg;
    cfg.version = 1;
    cfg.members = {0, 1};
    cfg.map = ps::shard_map::even(num_params, slice_size, shards);
    auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
    ps::optimizer_config opt;
    opt.sgd.learning_rate = 0.5f;
    std::vector<ps::key_range> ranges;
    std::vector<float> owned;
    if (owns_from_start)
      for (auto r : cfg.map.ranges_of(k)) {
        ranges.push_back(r);
        for (auto i = r.begin; i < r.end; ++i) owned.push_back(initial(i));
      }
    auto core = std::make_unique<ps::shard>(k, opt, *be, ranges, owned);
    EXPECT_TRUE(core->configure(cfg));
    shard_server_setup s;
    s.job = job_id;
    s.self = index == 0 ? shard_at(k) : backup_of(k);
    s.master = master_ep();
    s.shard_ep = shard_at;
    s.num_params = num_params;
    s.slice_size = slice_size;
    s.state_per_param = 0;
    s.replica = index;
    s.replicas = replicas;
    if (index > 0) s.prev = shard_at(k);
    if (index + 1 < replicas) s.next = backup_of(k);
    shard_server_ports p;
    p.send = [this](wire_message m) { sent.push_back(std::move(m)); };
    p.answers_gone = [this] { ++answers_gone; };
    server.emplace(std::move(s), std::move(p), std::move(be), std::move(core));
  }

  void take(wire_message m) { server->on_message(m); }
  std::vector<wire_message> drain() {
    std::vector<wire_message> out(std::make_move_iterator(sent.begin()),
                                  std::make_move_iterator(sent.end()));
    sent.clear();
    return out;
  }
};

wire_message from_worker(std::uint32_t r, endpoint to, msg_kind kind, std::int64_t step) {
  wire_message m;
  m.hdr.src = worker_at(r);
  m.hdr.dst = to;
  m.hdr.kind = kind;
  m.hdr.job = job_id;
  m.hdr.map_version = 1;
  m.hdr.step = step;
  m.hdr.rank = r;
  return m;
}

/// Worker r's push of step `step`: gradient `g` on every key of `ranges`, for `samples` samples.
wire_message push(std::uint32_t r, endpoint to, std::int64_t step,
                  const std::vector<ps::key_range>& ranges, float g, std::uint64_t samples) {
  auto m = from_worker(r, to, msg_kind::push, step);
  m.hdr.samples = samples;
  m.hdr.ranges = ranges;
  for (auto rg : ranges) {
    auto v = std::make_shared<std::vector<float>>(rg.size(), g);
    m.frames.push_back(wire::frame::of(v, v->data(), v->size()));
  }
  return m;
}

/// The values a params message carries, by key.
std::map<std::uint64_t, float> values_of(const wire_message& m) {
  std::map<std::uint64_t, float> out;
  for (std::size_t i = 0; i < m.hdr.ranges.size(); ++i) {
    const auto v = m.frames[i].as<float>();
    for (std::size_t j = 0; j < v.size(); ++j) out[m.hdr.ranges[i].begin + j] = v[j];
  }
  return out;
}

TEST(shard_server, a_step_is_applied_once_every_member_pushed_and_each_pusher_gets_the_values) {
  replica s(0, 2);  // keys [0, 8)
  const std::vector<ps::key_range> own{{0, 8}};
  s.take(push(1, shard_at(0), 0, own, 2.0f, 2));
  EXPECT_TRUE(s.drain().empty());  // waits for rank 0
  s.take(push(0, shard_at(0), 0, own, 6.0f, 2));
  // Mean gradient (2 + 6) / 4 = 2 on each key, rate 0.5: every value moves by -1.
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 2u);
  std::set<std::uint64_t> to;
  for (const auto& m : out) {
    EXPECT_EQ(m.hdr.kind, msg_kind::params);
    EXPECT_EQ(m.hdr.step, 1);
    to.insert(m.hdr.dst.id);
    const auto v = values_of(m);
    ASSERT_EQ(v.size(), 8u);
    for (const auto& [k, x] : v) EXPECT_EQ(x, initial(k) - 1.0f) << "key " << k;
  }
  EXPECT_EQ(to, (std::set<std::uint64_t>{worker_at(0).id, worker_at(1).id}));
  EXPECT_EQ(s.server->core().applied_steps(), 1);
  EXPECT_EQ(s.server->protocol_errors(), 0u);
}

TEST(shard_server, answers_no_transfer_waits_for_leave_without_telling_the_owner) {
  replica s(0, 1);
  const std::vector<ps::key_range> all{{0, 16}};
  for (std::int64_t step = 0; step < 3; ++step) {
    s.take(push(0, shard_at(0), step, all, 1.0f, 1));
    s.take(push(1, shard_at(0), step, all, 1.0f, 1));
    auto out = s.drain();
    ASSERT_EQ(out.size(), 2u);
    EXPECT_TRUE(out[0].sent);  // the answers carry the step's token
    EXPECT_EQ(out[0].sent, out[1].sent);
  }
  // Every step's answers are gone (drained and dropped): nobody waited, nobody was woken.
  EXPECT_EQ(s.answers_gone, 0);
}

TEST(shard_server, a_pull_waits_for_its_version_and_keys_owned_elsewhere_are_answered_moved) {
  replica s(0, 2);
  auto pull = from_worker(0, shard_at(0), msg_kind::pull, 1);
  pull.hdr.ranges = {{4, 12}};  // half of it is shard 1's
  s.take(pull);
  EXPECT_TRUE(s.drain().empty());  // version 1 does not exist yet
  const std::vector<ps::key_range> own{{0, 8}};
  s.take(push(0, shard_at(0), 0, own, 1.0f, 1));
  s.take(push(1, shard_at(0), 0, own, 1.0f, 1));
  bool values = false, moved = false;
  for (const auto& m : s.drain()) {
    const bool push_answer =
        m.hdr.kind == msg_kind::params && m.hdr.ranges.size() == 1 && m.hdr.ranges[0].begin == 0;
    if (m.hdr.dst != worker_at(0) || push_answer) continue;  // the answers to the pushes
    if (m.hdr.kind == msg_kind::params) {
      values = true;
      EXPECT_EQ(m.hdr.ranges, (std::vector<ps::key_range>{{4, 8}}));
      EXPECT_EQ(values_of(m)[4], initial(4) - 0.5f);
    }
    if (m.hdr.kind == msg_kind::moved) {
      moved = true;
      EXPECT_EQ(m.hdr.ranges, (std::vector<ps::key_range>{{8, 12}}));
    }
  }
  EXPECT_TRUE(values);
  EXPECT_TRUE(moved);
}

TEST(shard_server, a_release_is_sent_after_the_steps_answers_and_the_destination_acknowledges) {
  replica src(0, 1);         // owns everything
  replica dst(1, 1, false);  // a new, empty shard
  const std::vector<ps::key_range> all{{0, 16}};
  // The master: from step 1, shard 1 owns keys [8, 16).
  ps::job_config next;
  next.version = 2;
  next.from_step = 1;
  next.members = {0, 1};
  next.map = ps::shard_map::even(num_params, slice_size, 1);
  next.map.assign(2, 1);
  next.map.assign(3, 1);
  src.take(wire::make_migrate(master_ep(), shard_at(0), job_id, {1, 1, 2, {{8, 16}}}));
  src.take(wire::make_configure(master_ep(), shard_at(0), job_id, next));
  dst.take(wire::make_configure(master_ep(), shard_at(1), job_id, next));
  src.take(push(0, shard_at(0), 0, all, 2.0f, 1));
  src.take(push(1, shard_at(0), 0, all, 2.0f, 1));
  // The answers went out; the transfer waits until they have left (their token is held).
  auto out = src.drain();
  std::vector<wire_message> answers, transfers;
  for (auto& m : out) (m.hdr.kind == msg_kind::transfer ? transfers : answers).push_back(m);
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_TRUE(transfers.empty());
  EXPECT_EQ(src.answers_gone, 0);
  answers.clear();
  out.clear();
  EXPECT_EQ(src.answers_gone, 1);  // the last copy's end: the owner calls answers_left()
  src.server->answers_left();
  out = src.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.kind, msg_kind::transfer);
  EXPECT_EQ(out[0].hdr.dst, shard_at(1));
  EXPECT_EQ(src.server->core().ranges(), (std::vector<ps::key_range>{{0, 8}}));
  // The destination adopts the keys at version 1 and tells the master.
  dst.take(std::move(out[0]));
  out = dst.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.dst, master_ep());
  const auto ack = wire::read_transfer_ack(out[0]);
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->version, 1);
  EXPECT_EQ(ack->from, 0u);
  EXPECT_EQ(ack->to, 1u);
  EXPECT_EQ(dst.server->core().applied_steps(), 1);
  // It holds the values of version 1: the step's update of 2 * 0.5 on each key.
  auto pull = from_worker(0, shard_at(1), msg_kind::pull, 1);
  pull.hdr.map_version = 2;
  dst.take(pull);
  out = dst.drain();
  ASSERT_EQ(out.size(), 1u);
  const auto v = values_of(out[0]);
  ASSERT_EQ(v.size(), 8u);
  for (const auto& [k, x] : v) EXPECT_EQ(x, initial(k) - 1.0f) << "key " << k;
}

TEST(shard_server, a_head_answers_a_step_only_once_its_backup_holds_it) {
  replica head(0, 1, true, 0, 2);
  replica backup(0, 1, true, 1, 2);
  const std::vector<ps::key_range> all{{0, 16}};
  for (std::uint32_t r : {0u, 1u}) head.take(push(r, shard_at(0), 0, all, 1.0f, 1));
  // Two copies went to the backup; no answer to the workers yet.
  auto out = head.drain();
  ASSERT_EQ(out.size(), 2u);
  for (auto& m : out) {
    EXPECT_EQ(m.hdr.dst, backup_of(0));
    EXPECT_TRUE(m.hdr.flags & flag::replica);
    backup.take(std::move(m));
  }
  // The backup applied the step and acknowledges to the head; it answers nobody else.
  out = backup.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.kind, msg_kind::replica_ack);
  EXPECT_EQ(out[0].hdr.dst, shard_at(0));
  EXPECT_EQ(backup.server->core().applied_steps(), 1);
  head.take(std::move(out[0]));
  out = head.drain();
  ASSERT_EQ(out.size(), 2u);
  for (const auto& m : out) EXPECT_EQ(m.hdr.kind, msg_kind::params);
}

TEST(shard_server, malformed_or_unexpected_messages_are_counted_and_change_nothing) {
  replica s(0, 2);
  auto bad = wire::make_configure(master_ep(), shard_at(0), job_id, {});
  bad.frames.clear();  // no slice owners
  s.take(bad);
  auto grant = from_worker(0, shard_at(0), msg_kind::chunk_grant, 0);
  s.take(grant);
  auto past = from_worker(0, shard_at(0), msg_kind::pull, 0);
  s.take(push(0, shard_at(0), 0, {{0, 8}}, 1.0f, 1));
  s.take(push(1, shard_at(0), 0, {{0, 8}}, 1.0f, 1));
  s.drain();
  s.take(past);  // version 0 is gone
  EXPECT_EQ(s.server->protocol_errors(), 3u);
  EXPECT_TRUE(s.drain().empty());
  EXPECT_EQ(s.server->core().applied_steps(), 1);
}

}  // namespace
}  // namespace coach::shard
