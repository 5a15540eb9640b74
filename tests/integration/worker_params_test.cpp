// A worker assembles a parameter version from params messages by keys, not by messages: whole
// shards or pieces of them (ps::piece), in any order, copied or held without copying. Malformed
// messages (sizes that disagree, keys out of range or received twice) are refused as a whole with
// a clear error, and the worker goes on.
//
// The worker's peers (master, shards) are the test itself, on the in-process transport.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <thread>

#include "actors/roles.hpp"
#include "wire/elastic_messages.hpp"

namespace coach::actors {
namespace {

bool have_digits() {
  return std::filesystem::exists("data/digits.csv.gz");
}

/// One worker of a job with 2 shards, all of whose peers (master, shards) are the test.
struct worker_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<job_context> ctx;
  std::unique_ptr<caf::scoped_actor> peer;
  std::size_t n = 0;

  worker_fixture() {
    auto spec = scheduler::load_job_spec("examples/digits-mlp.yaml");
    EXPECT_TRUE(spec);
    auto data = worker::load_dataset(spec->dataset, spec->seed);
    EXPECT_TRUE(data);
    cfg.set("logger.console", caf::atom("none"));
    cfg.set("scheduler.policy", caf::atom("sharing"));
    sys = std::make_unique<caf::actor_system>(cfg);
    const auto model = worker::network::for_data(spec->model, data->train).value();
    n = model.num_params();
    spec->slice_size = 1024;
    ctx = std::make_shared<job_context>(job_context{
        .job = 1,
        .spec = *spec,
        .backend = kernels::backend_kind::cpu,
        .data = std::make_shared<const worker::dataset_pair>(std::move(*data)),
        .model = model,
        .map = ps::shard_map::even(n, 1024, 2),
        .net = make_inproc_transport(),
        .master = master_endpoint(1),
        .shards = {shard_endpoint(1, 0), shard_endpoint(1, 1)},
        .workers = {worker_endpoint(1, 0)},
    });
    peer = std::make_unique<caf::scoped_actor>(*sys);
    for (const auto& ep : {ctx->master, ctx->shards[0], ctx->shards[1]})
      ctx->net->bind(ep, caf::actor_cast<caf::actor>(*peer));
  }

  ~worker_fixture() {
    wire_message stop = to_worker(msg_kind::chunk_grant, 1);
    stop.hdr.flags = flag::finished;
    ctx->net->send(std::move(stop));
  }

  wire_message to_worker(msg_kind kind, std::int64_t step) const {
    wire_message m;
    m.hdr.src = kind == msg_kind::params ? ctx->shards[0] : ctx->master;
    m.hdr.dst = ctx->workers[0];
    m.hdr.kind = kind;
    m.hdr.job = 1;
    m.hdr.step = step;
    return m;
  }

  /// Waits for the next message of `kind` the worker sent.
  wire_message next(msg_kind kind) {
    wire_message got;
    bool done = false;
    while (!done)
      (*peer)->receive(
          [&](wire_message& m) {
            if (m.hdr.kind != kind) return;
            got = std::move(m);
            done = true;
          },
          caf::after(std::chrono::seconds(10)) >>
              [&] {
                ADD_FAILURE() << "no " << to_string(kind) << " from the worker";
                done = true;
              });
    return got;
  }

  /// A params message for version 0 whose frames are views of `owner` at the given keys.
  wire_message params(std::shared_ptr<const std::vector<float>> owner,
                      std::vector<ps::key_range> keys) const {
    auto m = to_worker(msg_kind::params, 0);
    for (const auto& r : keys)
      m.frames.push_back(frame::of(owner, owner->data() + r.begin, r.size()));
    m.hdr.ranges = std::move(keys);
    return m;
  }

  /// The gradient the worker pushed for step 0, assembled from its two pushes.
  std::vector<float> pushed_gradient() {
    std::vector<float> g(n, std::nanf(""));
    for (int k = 0; k < 2; ++k) {
      auto m = next(msg_kind::push);
      EXPECT_EQ(m.hdr.step, 0);
      for (std::size_t i = 0; i < m.frames.size(); ++i) {
        auto v = m.frames[i].as<float>();
        std::copy(v.begin(), v.end(), g.begin() + std::ptrdiff_t(m.hdr.ranges.at(i).begin));
      }
    }
    return g;
  }

  /// The gradient of `indices` at `w`, computed here.
  std::vector<float> expected_gradient(const std::vector<float>& w,
                                       const std::vector<std::uint32_t>& indices) const {
    auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
    worker::network_runner runner(ctx->model, *be, ctx->spec.batch_size);
    std::vector<float> g(n);
    runner.forward_backward(w.data(), ctx->data->train, indices, g.data());
    return g;
  }

  /// Starts the worker and grants it `indices` for step 0.
  void start(const std::vector<std::uint32_t>& indices) {
    spawn_worker(*sys, ctx, 0, std::move(*kernels::make_backend(kernels::backend_kind::cpu)));
    next(msg_kind::chunk_request);
    auto grant = to_worker(msg_kind::chunk_grant, 0);
    auto idx = std::make_shared<const std::vector<std::uint32_t>>(indices);
    grant.frames.push_back(frame::of(idx, idx->data(), idx->size()));
    ctx->net->send(std::move(grant));
  }
};

std::shared_ptr<const std::vector<float>> random_params(std::size_t n) {
  auto w = std::make_shared<std::vector<float>>(n);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 0.1f);
  for (auto& v : *w) v = dist(rng);
  return w;
}

TEST(worker_params, pieces_in_any_order_make_the_version_and_malformed_ones_are_refused) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  worker_fixture f;
  const std::vector<std::uint32_t> indices{3, 1, 4, 15, 9, 26, 5, 35};
  const auto w = random_params(f.n);
  // Garbage that would land on real keys if it were taken.
  auto junk = std::make_shared<const std::vector<float>>(f.n, 1e6f);
  testing::internal::CaptureStderr();
  f.start(indices);
  auto& net = *f.ctx->net;
  net.send(f.params(junk, {{f.n - 10, f.n + 10}}));  // reaches past the model
  auto short_frame = f.params(junk, {{0, 100}});
  short_frame.frames[0].bytes -= 4;
  net.send(std::move(short_frame));  // frame smaller than its range
  auto extra_range = f.params(junk, {{0, 100}});
  extra_range.hdr.ranges.push_back({100, 200});
  net.send(std::move(extra_range));  // two ranges, one frame
  net.send(f.params(w, {{500, 1000}, {0, 100}}));
  net.send(f.params(junk, {{1000, 1100}, {900, 1000}}));  // [900, 1000) again: all refused
  // The rest, copied from separate buffers, in pieces of one range each, out of order.
  std::vector<ps::key_range> rest{{1000, f.n}, {100, 500}};
  for (const auto& r : rest) {
    auto copy = std::make_shared<const std::vector<float>>(*w);
    net.send(f.params(copy, {r}));
  }
  const auto pushed = f.pushed_gradient();
  const std::string err = testing::internal::GetCapturedStderr();
  const auto expected = f.expected_gradient(*w, indices);
  ASSERT_EQ(pushed.size(), expected.size());
  EXPECT_EQ(0, std::memcmp(pushed.data(), expected.data(), pushed.size() * sizeof(float)));
  EXPECT_NE(err.find("malformed parameters from shard"), std::string::npos) << err;
  EXPECT_NE(err.find("reaches past the " + std::to_string(f.n) + " keys"), std::string::npos)
      << err;
  EXPECT_NE(err.find("frame 0 has 396 bytes for range [0, 100)"), std::string::npos) << err;
  EXPECT_NE(err.find("2 ranges but 1 frames"), std::string::npos) << err;
  EXPECT_NE(err.find("[900, 1000) overlaps keys already received"), std::string::npos) << err;
}

TEST(worker_params, pieces_of_one_shared_buffer_make_the_version_and_are_let_go_after_the_step) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  worker_fixture f;
  const std::vector<std::uint32_t> indices{2, 7, 1, 8, 28, 18};
  const auto w = random_params(f.n);
  f.start(indices);
  // As an in-process shard owning every key answers in pieces: views of one buffer.
  std::vector<ps::key_range> pieces;
  for (std::uint64_t b = 0; b < f.n; b += 1024)
    pieces.push_back({b, std::min<std::uint64_t>(b + 1024, f.n)});
  std::reverse(pieces.begin(), pieces.end());
  for (const auto& p : pieces) f.ctx->net->send(f.params(w, {p}));
  const auto pushed = f.pushed_gradient();
  const auto expected = f.expected_gradient(*w, indices);
  EXPECT_EQ(0, std::memcmp(pushed.data(), expected.data(), pushed.size() * sizeof(float)));
  // Held, not copied (nothing to see from outside but the result), and let go after the step.
  // (The last params message dies when the worker's handler returns, after it pushed: wait.)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (w.use_count() > 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(w.use_count(), 1);
}

TEST(worker_params, keys_a_shard_disowns_are_pulled_from_their_new_owner) {
  // A worker's first pull can reach a shard after keys moved away from it (docs/design.md
  // "Elastic jobs"): the shard answers `moved`, and the worker asks the new owner once it has
  // the configuration that moved them; not before (it would ask the same shard again).
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  worker_fixture f;
  const std::vector<std::uint32_t> indices{4, 8, 15, 16, 23, 42};
  const auto w = random_params(f.n);
  spawn_worker(*f.sys, f.ctx, 0, std::move(*kernels::make_backend(kernels::backend_kind::cpu)));
  const auto first = f.next(msg_kind::pull);
  const auto second = f.next(msg_kind::pull);
  const auto& to_one = first.hdr.dst == f.ctx->shards[1] ? first : second;
  ASSERT_EQ(to_one.hdr.dst, f.ctx->shards[1]);
  const auto moved_keys = f.ctx->map.ranges_of(1);
  EXPECT_EQ(to_one.hdr.ranges, moved_keys);
  f.next(msg_kind::chunk_request);

  auto& net = *f.ctx->net;
  net.send(f.params(w, f.ctx->map.ranges_of(0)));  // shard 0 answers its keys
  auto moved = f.to_worker(msg_kind::moved, 0);
  moved.hdr.src = f.ctx->shards[1];
  moved.hdr.map_version = 2;
  moved.hdr.ranges = moved_keys;
  net.send(std::move(moved));
  // Configuration 2 from step 0: shard 0 owns everything.
  ps::job_config c;
  c.version = 2;
  c.from_step = 0;
  c.members = {0};
  c.map = *ps::shard_map::from_owners(f.n, 1024,
                                      std::vector<std::uint32_t>(f.ctx->map.num_slices(), 0), 2);
  net.send(make_configure(f.ctx->master, f.ctx->workers[0], 1, c));
  const auto again = f.next(msg_kind::pull);
  EXPECT_EQ(again.hdr.dst, f.ctx->shards[0]);
  EXPECT_EQ(again.hdr.ranges, moved_keys);
  EXPECT_EQ(again.hdr.step, 0);
  net.send(f.params(w, moved_keys));

  auto grant = f.to_worker(msg_kind::chunk_grant, 0);
  auto idx = std::make_shared<const std::vector<std::uint32_t>>(indices);
  grant.frames.push_back(frame::of(idx, idx->data(), idx->size()));
  net.send(std::move(grant));
  // One push, to shard 0, of the gradient at w: every key arrived once, from its owner.
  auto push = f.next(msg_kind::push);
  EXPECT_EQ(push.hdr.dst, f.ctx->shards[0]);
  EXPECT_EQ(push.hdr.map_version, 2u);
  std::vector<float> g(f.n, std::nanf(""));
  for (std::size_t i = 0; i < push.frames.size(); ++i) {
    auto v = push.frames[i].as<float>();
    std::copy(v.begin(), v.end(), g.begin() + std::ptrdiff_t(push.hdr.ranges.at(i).begin));
  }
  const auto expected = f.expected_gradient(*w, indices);
  EXPECT_EQ(0, std::memcmp(g.data(), expected.data(), g.size() * sizeof(float)));
}

}  // namespace
}  // namespace coach::actors
