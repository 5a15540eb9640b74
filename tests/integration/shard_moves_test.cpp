// A shard added to a running job takes the pushes of the boundary step while its slices travel:
// the workers go on at the boundary (docs/design.md "Elastic jobs"), so their pushes can reach
// the new shard before, around or after the transfer. Whatever the order, every pusher gets the
// step's update (the next version) exactly once and nobody is answered with the boundary's
// version: a worker that pushed waits for the next one, and an answer it cannot use would leave
// it waiting forever.
//
// The shard's peers (master, the source shard, the workers) are the test itself, on the
// in-process transport.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include "actors/roles.hpp"
#include "ps/shard.hpp"
#include "wire/elastic_messages.hpp"

namespace coach::actors {
namespace {

constexpr std::int64_t boundary = 3;  ///< the step at which shard 1 takes its slices

struct added_shard_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<job_context> ctx;
  std::unique_ptr<caf::scoped_actor> peer;
  ps::job_config next;        ///< from the boundary: shard 1 owns the odd slices
  std::vector<float> values;  ///< shard 1's slices at the boundary, concatenated
  std::size_t keys = 0;       ///< how many that is
  caf::actor shard;           ///< shard 1, the one under test

  added_shard_fixture() {
    auto spec = scheduler::load_job_spec("examples/digits-mlp.yaml");
    EXPECT_TRUE(spec);
    cfg.set("logger.console", caf::atom("none"));
    cfg.set("scheduler.policy", caf::atom("sharing"));
    sys = std::make_unique<caf::actor_system>(cfg);
    const auto model = worker::network::build(spec->model, {1, 1, 64}, 10).value();
    const std::size_t n = model.num_params();
    spec->slice_size = 1024;
    ctx = std::make_shared<job_context>(job_context{
        .job = 1,
        .spec = *spec,
        .backend = kernels::backend_kind::cpu,
        .data = nullptr,
        .model = model,
        .map = ps::shard_map::even(n, 1024, 1),
        .net = make_inproc_transport(),
        .master = master_endpoint(1),
        .shards = {shard_endpoint(1, 0)},
        .workers = {worker_endpoint(1, 0), worker_endpoint(1, 1)},
    });
    peer = std::make_unique<caf::scoped_actor>(*sys);
    for (const auto& ep : {ctx->master, ctx->shards[0], ctx->workers[0], ctx->workers[1]})
      ctx->net->bind(ep, caf::actor_cast<caf::actor>(*peer));

    next.version = 2;
    next.from_step = boundary;
    next.members = {0, 1};
    next.map = ps::shard_map::even(n, 1024, 2);
    for (const auto& r : next.map.ranges_of(1)) keys += r.size();
    values.resize(keys);
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 0.1f);
    for (auto& v : values) v = dist(rng);
    shard = spawn_added_shard(*sys, ctx, 1, next);
  }

  ~added_shard_fixture() {
    ctx->net->unbind(ctx->shard_ep(1));
    caf::anon_send_exit(shard, caf::exit_reason::kill);
  }

  /// Rank r's gradient for shard 1's slices (the same on every run).
  std::shared_ptr<const std::vector<float>> gradient(std::uint32_t r) const {
    auto g = std::make_shared<std::vector<float>>(keys);
    std::mt19937 rng(11 + r);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (auto& v : *g) v = dist(rng);
    return g;
  }

  void push(std::uint32_t r) const {
    wire_message m;
    m.hdr.src = ctx->workers[r];
    m.hdr.dst = ctx->shard_ep(1);
    m.hdr.kind = msg_kind::push;
    m.hdr.job = 1;
    m.hdr.map_version = next.version;
    m.hdr.rank = r;
    m.hdr.step = boundary;
    m.hdr.samples = 8;
    auto g = gradient(r);
    std::size_t off = 0;
    for (const auto& range : next.map.ranges_of(1)) {
      m.hdr.ranges.push_back(range);
      m.frames.push_back(frame::of(g, g->data() + off, range.size()));
      off += range.size();
    }
    ctx->net->send(std::move(m));
  }

  /// Shard 0 hands shard 1 its slices at the boundary (momentum starts at zero).
  void transfer() const {
    auto t = std::make_shared<ps::slice_transfer>();
    t->from = 0;
    t->to = 1;
    t->version = boundary;
    t->updates = boundary;
    t->ranges = next.map.ranges_of(1);
    t->values = values;
    const auto per = ctx->spec.optimizer.state_per_param();
    if (per >= 1) t->state_a.assign(keys, 0.0f);
    if (per >= 2) t->state_b.assign(keys, 0.0f);
    ctx->net->send(make_transfer(ctx->shards[0], ctx->shard_ep(1), 1, std::move(t)));
  }

  /// The master asks shard 1 for version `v` of its slices (answered with params to it).
  void request_snapshot(std::int64_t v) const {
    wire_message m;
    m.hdr.src = ctx->master;
    m.hdr.dst = ctx->shard_ep(1);
    m.hdr.kind = msg_kind::snapshot_request;
    m.hdr.job = 1;
    m.hdr.map_version = next.version;
    m.hdr.step = v;
    m.hdr.ranges = next.map.ranges_of(1);
    ctx->net->send(std::move(m));
  }

  /// What shard 1's slices are after the boundary step, computed by a plain ps::shard.
  std::vector<float> expected() const {
    auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
    ps::shard ref(1, ctx->spec.optimizer, *be, next.map.ranges_of(1), values);
    ref.set_members({0, 1});
    for (std::uint32_t r : {0u, 1u}) {
      auto g = gradient(r);
      ps::contribution c;
      c.rank = r;
      c.samples = 8;
      std::size_t off = 0;
      for (const auto& range : next.map.ranges_of(1)) {
        c.parts.push_back(std::span<const float>(g->data() + off, range.size()));
        off += range.size();
      }
      c.keep_alive = g;
      EXPECT_TRUE(ref.push(0, std::move(c)));
    }
    auto v = ref.values();
    return {v.begin(), v.end()};
  }
};

/// The order in which the two pushes and the transfer reach the new shard.
class added_shard_order : public testing::TestWithParam<int> {};

TEST_P(added_shard_order, every_pusher_gets_the_boundary_steps_update_once) {
  added_shard_fixture f;
  const int at = GetParam();  // the transfer comes after `at` pushes
  for (int i = 0; i <= 2; ++i) {
    if (i == at) f.transfer();
    if (i < 2) f.push(std::uint32_t(i));
  }
  // Each worker gets version boundary + 1 of every key of shard 1; the master the ack.
  std::map<std::uint64_t, std::vector<float>> got;  // by worker endpoint id
  std::map<std::uint64_t, std::size_t> floats;
  bool acked = false;
  std::vector<std::string> wrong;
  const auto want = f.expected();
  auto done = [&] {
    return acked && floats[f.ctx->workers[0].id] == f.keys &&
           floats[f.ctx->workers[1].id] == f.keys;
  };
  for (bool timed_out = false; !done() && !timed_out;)
    (*f.peer)->receive(
        [&](wire_message& m) {
          if (m.hdr.kind == msg_kind::transfer_ack) {
            acked = true;
            return;
          }
          if (m.hdr.kind != msg_kind::params) {
            wrong.push_back(std::string(to_string(m.hdr.kind)));
            return;
          }
          if (m.hdr.step != boundary + 1) {
            wrong.push_back("params of version " + std::to_string(m.hdr.step));
            return;
          }
          auto& v = got[m.hdr.dst.id];
          v.resize(f.keys, std::nanf(""));
          // Keys to offsets within shard 1's slices.
          for (std::size_t i = 0; i < m.frames.size(); ++i) {
            std::size_t off = 0;
            for (const auto& range : f.next.map.ranges_of(1)) {
              const auto& r = m.hdr.ranges[i];
              if (r.begin >= range.begin && r.end <= range.end) {
                auto src = m.frames[i].as<float>();
                std::copy(src.begin(), src.end(),
                          v.begin() + std::ptrdiff_t(off + r.begin - range.begin));
                floats[m.hdr.dst.id] += r.size();
                break;
              }
              off += range.size();
            }
          }
        },
        caf::after(std::chrono::seconds(10)) >> [&] { timed_out = true; });
  EXPECT_TRUE(acked) << "no transfer_ack reached the master";
  EXPECT_TRUE(wrong.empty()) << "unexpected: " << wrong.front();
  // Exactly once: a late duplicate would come behind the updates above. The master then asks
  // for a snapshot of the same version; the shard answers in the order it handles messages, so
  // anything it sent a worker before that answer has arrived once the answer has.
  f.request_snapshot(boundary + 1);
  bool answered = false;
  std::vector<std::string> late;
  for (bool timed_out = false; !answered && !timed_out;)
    (*f.peer)->receive(
        [&](wire_message& m) {
          if (m.hdr.kind == msg_kind::params && m.hdr.dst == f.ctx->master)
            answered = true;
          else
            late.push_back(std::string(to_string(m.hdr.kind)) + " of version " +
                           std::to_string(m.hdr.step) + " to " + std::to_string(m.hdr.dst.id));
        },
        caf::after(std::chrono::seconds(10)) >> [&] { timed_out = true; });
  EXPECT_TRUE(answered) << "the shard never answered the snapshot request";
  EXPECT_TRUE(late.empty()) << "after the step's updates: " << late.size() << ", the first "
                            << late.front();
  for (const auto& w : f.ctx->workers) {
    ASSERT_EQ(floats[w.id], f.keys) << "worker " << w.id << " did not get the step's update";
    EXPECT_EQ(0, std::memcmp(got[w.id].data(), want.data(), want.size() * sizeof(float)))
        << "worker " << w.id << " got other values than the step's update";
  }
}

INSTANTIATE_TEST_SUITE_P(transfer_after, added_shard_order, testing::Values(0, 1, 2),
                         [](const testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param) + "_pushes";
                         });

}  // namespace
}  // namespace coach::actors
