// shard::shard_server's sparse rows, driven without an actor system: a rows_pull waits for its
// version and is answered with the rows the shard holds (created at their initial values on
// first touch), those it does not hold named by their keys; a push's row gradients after its
// dense frames update the rows with the step; malformed row frames are counted, never applied.
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <vector>

#include "shard/shard_server.hpp"
#include "wire/row_frames.hpp"

namespace coach::shard {
namespace {

using wire::endpoint;
using wire::msg_kind;
using wire::wire_message;

constexpr std::uint64_t job_id = 3;
constexpr std::size_t num_params = 16;
constexpr std::size_t slice_size = 4;
constexpr std::uint64_t seed = 11;

endpoint shard_at(std::uint32_t k) {
  return {0, 100 + k};
}
endpoint worker_at(std::uint32_t r) {
  return {0, 1000 + r};
}

ps::sparse_rows_config rows_config() {
  ps::sparse_rows_config c;
  c.seed = seed;
  c.tables = {{1000, 2, 0.5f}};
  c.optimizer.kind = sparse::row_optimizer_kind::sgd;
  c.optimizer.learning_rate = 0.5f;
  c.num_params = num_params;
  return c;
}

/// Shard k of 2, holding the rows of its keys' buckets; its sends land in `sent`.
struct rows_shard {
  std::deque<wire_message> sent;
  std::optional<shard_server> server;

  explicit rows_shard(std::uint32_t k) {
    ps::job_config cfg;
    cfg.version = 1;
    cfg.members = {0, 1};
    cfg.map = ps::shard_map::even(num_params, slice_size, 2);
    auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
    ps::optimizer_config opt;
    opt.sgd.learning_rate = 0.5f;
    const auto ranges = cfg.map.ranges_of(k);
    std::vector<float> owned(8, 1.0f);
    ps::shard_options o;
    o.rows = rows_config();
    auto core = std::make_unique<ps::shard>(k, opt, *be, ranges, owned, o);
    EXPECT_TRUE(core->configure(cfg));
    shard_server_setup s;
    s.job = job_id;
    s.self = shard_at(k);
    s.master = {0, 1};
    s.shard_ep = shard_at;
    s.num_params = num_params;
    s.slice_size = slice_size;
    shard_server_ports p;
    p.send = [this](wire_message m) { sent.push_back(std::move(m)); };
    server.emplace(std::move(s), std::move(p), std::move(be), std::move(core));
  }
  std::vector<wire_message> drain() {
    std::vector<wire_message> out(std::make_move_iterator(sent.begin()),
                                  std::make_move_iterator(sent.end()));
    sent.clear();
    return out;
  }
};

wire_message from_worker(std::uint32_t r, std::uint32_t k, msg_kind kind, std::int64_t step) {
  wire_message m;
  m.hdr.src = worker_at(r);
  m.hdr.dst = shard_at(k);
  m.hdr.kind = kind;
  m.hdr.job = job_id;
  m.hdr.map_version = 1;
  m.hdr.step = step;
  m.hdr.rank = r;
  return m;
}

wire_message rows_pull(std::uint32_t r, std::uint32_t k, std::int64_t step,
                       std::vector<std::uint64_t> ids) {
  auto m = from_worker(r, k, msg_kind::rows_pull, step);
  auto mem = std::make_shared<std::vector<std::uint64_t>>(std::move(ids));
  const wire::row_frames_part part{0, *mem, {}};
  wire::append_row_parts(m, std::span(&part, 1), mem, false);
  return m;
}

/// Rank r's push to shard k of step `step`: dense gradient 0 on its 8 keys, and gradient `g`
/// on both elements of each row of `ids`.
wire_message push(std::uint32_t r, std::uint32_t k, std::int64_t step,
                  std::vector<std::uint64_t> ids, float g) {
  auto m = from_worker(r, k, msg_kind::push, step);
  m.hdr.samples = 2;
  m.hdr.ranges = {{k * 8ull, k * 8ull + 8}};
  struct memory {
    std::vector<float> dense = std::vector<float>(8, 0.0f);
    std::vector<std::uint64_t> ids;
    std::vector<float> grads;
  };
  auto mem = std::make_shared<memory>();
  mem->ids = std::move(ids);
  mem->grads.assign(mem->ids.size() * 2, g);
  m.frames.push_back(wire::frame::of(mem, mem->dense.data(), mem->dense.size()));
  const wire::row_frames_part part{0, mem->ids, mem->grads};
  wire::append_row_parts(m, std::span(&part, 1), mem, true);
  return m;
}

/// A row id of table 0 whose key shard k holds (keys [8k, 8k + 8)), the n-th such from 0.
std::uint64_t row_of(std::uint32_t k, int n) {
  for (std::uint64_t row = 0;; ++row)
    if (ps::row_key_of(0, row, num_params) / 8 == k && n-- == 0) return row;
}

std::vector<float> init_of(std::uint64_t row) {
  std::vector<float> v(2);
  sparse::init_row(seed, 0, row, 0.5f, v);
  return v;
}

TEST(shard_server_rows, a_rows_pull_is_answered_with_the_rows_held_and_the_keys_of_the_others) {
  rows_shard s(0);
  const auto mine = row_of(0, 0), other = row_of(1, 0);
  auto m = rows_pull(0, 0, 0, {mine, other});
  s.server->on_message(m);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.kind, msg_kind::rows);
  EXPECT_EQ(out[0].hdr.dst, worker_at(0));
  EXPECT_EQ(out[0].hdr.step, 0);
  const auto parts = wire::read_row_parts(out[0], 0, true);
  ASSERT_TRUE(parts) << parts.error().to_string();
  ASSERT_EQ(parts->size(), 1u);
  EXPECT_EQ(std::vector<std::uint64_t>((*parts)[0].ids.begin(), (*parts)[0].ids.end()),
            std::vector<std::uint64_t>{mine});
  EXPECT_EQ(std::vector<float>((*parts)[0].values.begin(), (*parts)[0].values.end()),
            init_of(mine));
  EXPECT_EQ(out[0].hdr.ranges, (std::vector<ps::key_range>{{8, 16}}))
      << "named by the keys it does not own that hold the row's key";
  EXPECT_EQ(s.server->protocol_errors(), 0u);
}

TEST(shard_server_rows, a_pull_of_the_next_version_waits_for_the_step_and_gets_its_update) {
  rows_shard s(0);
  const auto a = row_of(0, 0), b = row_of(0, 1);
  auto early = rows_pull(1, 0, 1, {a, b});
  s.server->on_message(early);
  EXPECT_TRUE(s.drain().empty()) << "version 1 is not there yet";
  auto p1 = push(1, 0, 0, {a}, 3.0f);
  s.server->on_message(p1);
  auto p0 = push(0, 0, 0, {a, b}, 1.0f);
  s.server->on_message(p0);
  wire_message rows;
  for (auto& m : s.drain())
    if (m.hdr.kind == msg_kind::rows) rows = std::move(m);
  ASSERT_EQ(rows.hdr.kind, msg_kind::rows);
  EXPECT_EQ(rows.hdr.step, 1);
  const auto parts = wire::read_row_parts(rows, 0, true);
  ASSERT_TRUE(parts);
  const auto v = (*parts)[0].values;
  const auto ia = init_of(a), ib = init_of(b);
  // 4 samples, rate 0.5: a's gradient (1 + 3) / 4, b's 1 / 4.
  EXPECT_EQ(v[0], ia[0] - 0.5f * (4.0f * 0.25f));
  EXPECT_EQ(v[1], ia[1] - 0.5f * (4.0f * 0.25f));
  EXPECT_EQ(v[2], ib[0] - 0.5f * (1.0f * 0.25f));
  EXPECT_EQ(v[3], ib[1] - 0.5f * (1.0f * 0.25f));
}

TEST(shard_server_rows, malformed_row_frames_are_counted_and_not_applied) {
  rows_shard s(0);
  auto bad = push(0, 0, 0, {row_of(0, 0)}, 1.0f);
  bad.frames.pop_back();  // the values frame of the only part
  s.server->on_message(bad);
  EXPECT_EQ(s.server->protocol_errors(), 1u);
  auto foreign = push(1, 0, 0, {row_of(1, 0)}, 1.0f);  // a row shard 1 holds
  s.server->on_message(foreign);
  EXPECT_EQ(s.server->protocol_errors(), 2u);
  EXPECT_EQ(s.server->core().applied_steps(), 0);
  EXPECT_EQ(s.server->core().rows()->stats().rows, 0u);
}

}  // namespace
}  // namespace coach::shard
