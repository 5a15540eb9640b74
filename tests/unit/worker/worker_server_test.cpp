// worker::worker_server driven without an actor system: what a worker sends when it starts, the
// step it computes only once its grant and every key of its version are here (the gradient
// bit for bit the network's), configurations that govern later steps and re-issues taken whole,
// keys a shard disowns pulled from their owner once the configuration that moved them is here,
// asp's bounded wait for its own pushes' answers, a backup's take-over, and input it refuses.
#include "worker/worker_server.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <numeric>
#include <vector>

#include "wire/elastic_messages.hpp"

namespace coach::worker {
namespace {

using wire::endpoint;
using wire::frame;
using wire::msg_kind;
using wire::wire_message;
namespace flag = wire::flag;

constexpr std::uint64_t job_id = 5;
constexpr std::size_t slice_size = 2;
constexpr std::uint32_t rank = 1;

endpoint master_ep() {
  return {0, 1};
}
endpoint shard_at(std::uint32_t k) {
  return {0, 100 + k};
}
endpoint worker_at(std::uint32_t r) {
  return {0, 1000 + r};
}

/// Six rows of three features, two classes.
std::shared_ptr<dataset_pair> rows() {
  auto d = std::make_shared<dataset_pair>();
  d->train.rows = 6;
  d->train.features = 3;
  d->train.classes = 2;
  for (int i = 0; i < 18; ++i) d->train.x.push_back(0.1f * float(i % 7) - 0.2f);
  d->train.y = {0, 1, 1, 0, 1, 0};
  return d;
}

/// A dense layer 3 -> 2: 8 parameters, 4 slices of 2.
std::shared_ptr<const network> model() {
  model_config softmax_regression;
  softmax_regression.hidden = {};
  return std::make_shared<const network>(network::build(softmax_regression, {1, 1, 3}, 2).value());
}

float initial(std::size_t i) {
  return 0.05f * float(i) - 0.1f;
}

ps::job_config config(std::uint64_t version, std::int64_t from_step, std::uint32_t shards) {
  ps::job_config c;
  c.version = version;
  c.from_step = from_step;
  c.members = {0, 1};
  c.map = ps::shard_map::even(8, slice_size, shards);
  return c;
}

/// A worker of rank 1 whose sends land in `sent`.
struct harness {
  std::deque<wire_message> sent;
  std::vector<std::int64_t> bounded;                      ///< steps whose wait was bounded
  std::vector<std::pair<std::uint32_t, endpoint>> heads;  ///< take-overs reported
  std::vector<std::string> failures;
  std::optional<worker_server> server;
  std::shared_ptr<const network> net = model();
  std::shared_ptr<dataset_pair> data = rows();

  explicit harness(std::uint32_t shards, ps::consistency_kind mode = ps::consistency_kind::bsp,
                   std::uint32_t replicas = 1) {
    worker_server_setup s;
    s.job = job_id;
    s.rank = rank;
    s.self = worker_at(rank);
    s.master = master_ep();
    s.shard_ep = shard_at;
    s.worker_ep = worker_at;
    s.model = net;
    s.data = data;
    s.slice_size = slice_size;
    s.batch_size = 4;
    s.replicas = replicas;
    s.consistency = ps::make_consistency({mode, 0, 0});
    worker_server_ports p;
    p.send = [this](wire_message m) { sent.push_back(std::move(m)); };
    p.bound_wait = [this](std::int64_t step) { bounded.push_back(step); };
    p.fail = [this](coach::error e) { failures.push_back(e.message); };
    p.took_over = [this](std::uint32_t k, endpoint head) { heads.emplace_back(k, head); };
    auto be = std::shared_ptr<kernels::backend>(
        std::move(*kernels::make_backend(kernels::backend_kind::cpu)));
    server.emplace(std::move(s), std::move(p), std::move(be), config(1, 0, shards), 0);
  }

  /// The values of keys [begin, end) at version `step`, from shard `k`.
  wire_message params(std::uint32_t k, std::size_t begin, std::size_t end, std::int64_t step) {
    auto v = std::make_shared<std::vector<float>>();
    for (std::size_t i = begin; i < end; ++i) v->push_back(initial(i));
    wire_message m;
    m.hdr.src = shard_at(k);
    m.hdr.dst = worker_at(rank);
    m.hdr.kind = msg_kind::params;
    m.hdr.job = job_id;
    m.hdr.step = step;
    m.hdr.ranges = {{begin, end}};
    m.frames.push_back(frame::of(v, v->data(), v->size()));
    return m;
  }
  wire_message grant(std::int64_t step, std::vector<std::uint32_t> indices,
                     std::vector<std::uint32_t> sizes = {}) {
    wire_message m;
    m.hdr.src = master_ep();
    m.hdr.dst = worker_at(rank);
    m.hdr.kind = msg_kind::chunk_grant;
    m.hdr.job = job_id;
    m.hdr.step = step;
    m.hdr.epoch = 2;
    m.hdr.chunk_id = 40 + std::uint64_t(step);
    auto idx = std::make_shared<std::vector<std::uint32_t>>(std::move(indices));
    m.frames.push_back(frame::of(idx, idx->data(), idx->size()));
    if (!sizes.empty()) {
      auto sz = std::make_shared<std::vector<std::uint32_t>>(std::move(sizes));
      m.frames.push_back(frame::of(sz, sz->data(), sz->size()));
    }
    return m;
  }
  bool deliver(wire_message m) { return server->on_message(m); }

  /// The gradient the network computes for `indices` from the initial values.
  std::vector<float> expected_gradient(std::vector<std::uint32_t> indices, double& loss) const {
    auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
    std::vector<float> w(8), g(8);
    for (std::size_t i = 0; i < 8; ++i) w[i] = initial(i);
    network_runner run(*net, *be, 4);
    loss = run.forward_backward(w.data(), data->train, indices, g.data(), noise_key(rank, 0));
    return g;
  }
};

std::vector<float> floats(const wire_message& m) {
  std::vector<float> v;
  for (const auto& f : m.frames)
    for (float x : f.as<float>()) v.push_back(x);
  return v;
}

TEST(worker_server, start_pulls_each_shards_keys_then_asks_for_work) {
  harness h(2);
  h.server->start();
  ASSERT_EQ(h.sent.size(), 3u);
  EXPECT_EQ(h.sent[0].hdr.kind, msg_kind::pull);
  EXPECT_EQ(h.sent[0].hdr.dst, shard_at(0));
  EXPECT_EQ(h.sent[0].hdr.ranges, (std::vector<ps::key_range>{{0, 4}}));
  EXPECT_EQ(h.sent[1].hdr.dst, shard_at(1));
  EXPECT_EQ(h.sent[1].hdr.ranges, (std::vector<ps::key_range>{{4, 8}}));
  EXPECT_EQ(h.sent[2].hdr.kind, msg_kind::chunk_request);
  EXPECT_EQ(h.sent[2].hdr.dst, master_ep());
  for (const auto& m : h.sent) {
    EXPECT_EQ(m.hdr.src, worker_at(rank));
    EXPECT_EQ(m.hdr.job, job_id);
    EXPECT_EQ(m.hdr.step, 0);
    EXPECT_EQ(m.hdr.map_version, 1u);
  }
}

TEST(worker_server, a_step_waits_for_its_grant_and_every_key_then_pushes_the_networks_gradient) {
  harness h(2);
  EXPECT_TRUE(h.deliver(h.grant(0, {0, 2, 5})));
  EXPECT_TRUE(h.deliver(h.params(0, 0, 4, 0)));
  EXPECT_TRUE(h.sent.empty()) << "shard 1's keys are missing";
  EXPECT_TRUE(h.deliver(h.params(1, 4, 8, 0)));
  ASSERT_EQ(h.sent.size(), 4u);  // a push to each shard, the report, the next request
  double loss = 0;
  const auto g = h.expected_gradient({0, 2, 5}, loss);
  for (std::uint32_t k = 0; k < 2; ++k) {
    const auto& push = h.sent[k];
    EXPECT_EQ(push.hdr.kind, msg_kind::push);
    EXPECT_EQ(push.hdr.dst, shard_at(k));
    EXPECT_EQ(push.hdr.samples, 3u);
    EXPECT_EQ(push.hdr.step, 0);
    ASSERT_EQ(push.hdr.ranges, (std::vector<ps::key_range>{{4 * k, 4 * k + 4}}));
    EXPECT_EQ(floats(push), std::vector<float>(g.begin() + 4 * k, g.begin() + 4 * k + 4));
  }
  const auto& report = h.sent[2];
  EXPECT_EQ(report.hdr.kind, msg_kind::step_report);
  EXPECT_EQ(report.hdr.samples, 3u);
  EXPECT_EQ(report.hdr.loss, loss);
  EXPECT_EQ(report.hdr.epoch, 2u);
  EXPECT_EQ(report.hdr.chunk_id, 40u);
  EXPECT_EQ(h.sent[3].hdr.kind, msg_kind::chunk_request);
  EXPECT_EQ(h.sent[3].hdr.step, 1);
  EXPECT_EQ(h.server->step(), 1);
}

TEST(worker_server, parameters_of_another_version_and_keys_twice_are_not_taken) {
  harness h(1);
  h.deliver(h.grant(0, {1}));
  h.deliver(h.params(0, 0, 8, 3));  // version 3 while at step 0
  EXPECT_TRUE(h.sent.empty());
  h.deliver(h.params(0, 0, 4, 0));
  h.deliver(h.params(0, 2, 6, 0));  // keys 2 and 3 twice: malformed, refused whole
  EXPECT_TRUE(h.sent.empty());
  h.deliver(h.params(0, 4, 8, 0));
  ASSERT_EQ(h.sent.size(), 3u);
  EXPECT_EQ(h.sent[0].hdr.kind, msg_kind::push);
}

TEST(worker_server, a_configuration_governs_from_its_first_step) {
  harness h(2);
  auto one_shard = config(2, 1, 1);  // from step 1, every key on shard 0
  auto c = wire::make_configure(master_ep(), worker_at(rank), job_id, one_shard);
  h.deliver(c);
  EXPECT_EQ(h.server->config().version, 1u);
  h.deliver(h.grant(0, {0}));
  h.deliver(h.params(0, 0, 4, 0));
  h.deliver(h.params(1, 4, 8, 0));
  ASSERT_EQ(h.sent.size(), 4u);
  EXPECT_EQ(h.sent[1].hdr.dst, shard_at(1)) << "step 0 still pushes under version 1";
  EXPECT_EQ(h.sent[3].hdr.map_version, 2u) << "step 1's request under version 2";
  EXPECT_EQ(h.server->config().from_step, 1);
  EXPECT_EQ(h.server->config().map.num_shards(), 1u);
  h.sent.clear();
  h.deliver(h.grant(1, {3}));
  h.deliver(h.params(0, 0, 8, 1));
  ASSERT_EQ(h.sent.size(), 3u);
  EXPECT_EQ(h.sent[0].hdr.dst, shard_at(0));
  EXPECT_EQ(h.sent[0].hdr.ranges, (std::vector<ps::key_range>{{0, 8}}));
}

TEST(worker_server, a_re_issue_is_taken_whole) {
  harness h(2);
  auto first = wire::make_configure(master_ep(), worker_at(rank), job_id, config(2, 0, 1));
  first.hdr.flags |= flag::more_configs;
  h.deliver(first);
  EXPECT_EQ(h.server->config().version, 1u) << "nothing taken before the last of a re-issue";
  h.deliver(wire::make_configure(master_ep(), worker_at(rank), job_id, config(3, 0, 2)));
  EXPECT_EQ(h.server->config().version, 3u);
}

TEST(worker_server, disowned_keys_are_pulled_from_their_owner_once_the_move_is_known) {
  harness h(2);
  wire_message moved;
  moved.hdr.src = shard_at(0);
  moved.hdr.kind = msg_kind::moved;
  moved.hdr.job = job_id;
  moved.hdr.step = 0;
  moved.hdr.map_version = 2;
  moved.hdr.ranges = {{0, 4}};
  h.deliver(moved);
  EXPECT_TRUE(h.sent.empty()) << "configuration 2 is not here yet";
  // Version 2: slices 0 and 1 (keys 0-3) on shard 1.
  auto c = config(2, 0, 2);
  c.map = ps::shard_map::from_owners(8, slice_size, {1, 1, 1, 1}, 2).value();
  h.deliver(wire::make_configure(master_ep(), worker_at(rank), job_id, c));
  ASSERT_EQ(h.sent.size(), 1u);
  EXPECT_EQ(h.sent[0].hdr.kind, msg_kind::pull);
  EXPECT_EQ(h.sent[0].hdr.dst, shard_at(1));
  EXPECT_EQ(h.sent[0].hdr.ranges, (std::vector<ps::key_range>{{0, 4}}));
  EXPECT_EQ(h.sent[0].hdr.map_version, 2u);
}

TEST(worker_server, asp_waits_for_its_own_pushes_answers_at_most_a_bounded_time) {
  harness h(1, ps::consistency_kind::asp);
  h.deliver(h.params(0, 0, 8, 7));  // the first pull answered at the shard's version
  h.deliver(h.grant(0, {0, 1}));
  ASSERT_EQ(h.sent.size(), 3u);  // push, report, request
  h.sent.clear();
  h.deliver(h.grant(1, {2}));
  EXPECT_TRUE(h.sent.empty()) << "step 1 waits for step 0's answer";
  EXPECT_EQ(h.bounded, (std::vector<std::int64_t>{1}));
  h.server->answers_late(0);  // a bound of another step: nothing
  EXPECT_TRUE(h.sent.empty());
  h.server->answers_late(1);
  ASSERT_EQ(h.sent.size(), 3u);
  EXPECT_EQ(h.sent[0].hdr.kind, msg_kind::push);
  EXPECT_EQ(h.sent[0].hdr.step, 1);
}

TEST(worker_server, a_backup_that_takes_over_gets_the_last_pushes_and_a_pull_of_what_is_missing) {
  harness h(2, ps::consistency_kind::bsp, 2);
  h.deliver(h.grant(0, {4}));
  h.deliver(h.params(0, 0, 4, 0));
  h.deliver(h.params(1, 4, 8, 0));
  ASSERT_EQ(h.sent.size(), 4u);
  h.sent.clear();
  h.deliver(h.params(0, 0, 4, 1));  // step 1: shard 1's answer lost with its primary
  wire_message take;
  take.hdr.kind = msg_kind::take_over;
  take.hdr.job = job_id;
  take.hdr.rank = 1;
  take.hdr.epoch = 3;      // the backup's host
  take.hdr.chunk_id = 77;  // and id
  h.deliver(take);
  const endpoint head{3, 77};
  ASSERT_EQ(h.heads.size(), 1u);
  EXPECT_EQ(h.heads[0].first, 1u);
  EXPECT_EQ(h.heads[0].second, head);
  ASSERT_EQ(h.sent.size(), 2u);
  EXPECT_EQ(h.sent[0].hdr.kind, msg_kind::push);
  EXPECT_EQ(h.sent[0].hdr.dst, head);
  EXPECT_EQ(h.sent[0].hdr.step, 0);
  EXPECT_TRUE(h.sent[0].hdr.flags & flag::resent);
  EXPECT_EQ(h.sent[1].hdr.kind, msg_kind::pull);
  EXPECT_EQ(h.sent[1].hdr.dst, head);
  EXPECT_EQ(h.sent[1].hdr.ranges, (std::vector<ps::key_range>{{4, 8}}));
  EXPECT_TRUE(h.sent[1].hdr.flags & flag::resent);
}

TEST(worker_server, a_grant_whose_local_steps_do_not_cut_its_samples_is_not_computed) {
  harness h(1);
  h.deliver(h.params(0, 0, 8, 0));
  h.deliver(h.grant(0, {0, 1}, {3}));
  EXPECT_TRUE(h.sent.empty());
  EXPECT_EQ(h.server->step(), 0);
}

TEST(worker_server, a_finished_grant_ends_the_worker) {
  harness h(1);
  auto g = h.grant(0, {});
  g.hdr.flags = flag::finished;
  EXPECT_FALSE(h.deliver(std::move(g)));
  EXPECT_TRUE(h.sent.empty());
}

}  // namespace
}  // namespace coach::worker
