// Shard map and shard: BSP aggregation in rank order, errors on protocol violations, and the
// central property that cutting the vector into shards never changes the math.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>

#include "common/buffer_pool.hpp"
#include "ps/key_coverage.hpp"
#include "ps/shard.hpp"

namespace coach::ps {
namespace {

std::unique_ptr<kernels::backend> cpu() {
  return std::move(*kernels::make_backend(kernels::backend_kind::cpu));
}

TEST(shard_map, even_split_covers_every_key_once) {
  for (std::uint32_t shards : {1u, 2u, 3u, 4u, 7u}) {
    auto m = shard_map::even(1000, 64, shards);
    EXPECT_EQ(m.num_slices(), 16u);
    EXPECT_EQ(m.version(), 1u);
    std::vector<int> seen(1000, 0);
    for (std::uint32_t k = 0; k < shards; ++k)
      for (auto r : m.ranges_of(k))
        for (auto i = r.begin; i < r.end; ++i) ++seen[i];
    for (int s : seen) ASSERT_EQ(s, 1) << shards << " shards";
  }
  auto m = shard_map::even(1000, 64, 2);
  EXPECT_EQ(m.slice_range(15), (key_range{960, 1000}));
  EXPECT_EQ(m.ranges_of(0), (std::vector<key_range>{{0, 512}}));
}

TEST(shard_map, assign_moves_a_slice_and_bumps_the_version) {
  auto m = shard_map::even(100, 10, 2);
  m.assign(0, 1);
  EXPECT_EQ(m.version(), 2u);
  EXPECT_EQ(m.owner(0), 1u);
  EXPECT_EQ(m.ranges_of(0), (std::vector<key_range>{{10, 50}}));
  EXPECT_EQ(m.ranges_of(1), (std::vector<key_range>{{0, 10}, {50, 100}}));
}

contribution make(std::uint32_t rank, const std::vector<float>& g, std::uint64_t samples) {
  auto keep = std::make_shared<std::vector<float>>(g);
  contribution c;
  c.rank = rank;
  c.samples = samples;
  c.parts.push_back(std::span<const float>(*keep));
  c.keep_alive = keep;
  return c;
}

TEST(shard, bsp_waits_for_all_members_then_applies_mean_gradient) {
  auto be = cpu();
  optimizer_config opt;
  opt.sgd.learning_rate = 0.5f;
  std::vector<float> init{1, 2, 3};
  shard s(0, opt, *be, {{0, 3}}, init);
  s.set_members({0, 1});
  auto r = s.push(0, make(1, {2, 4, 6}, 2));
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r);
  EXPECT_EQ(s.applied_steps(), 0);
  r = s.push(0, make(0, {0, 0, 2}, 2));
  ASSERT_TRUE(r);
  EXPECT_TRUE(*r);
  EXPECT_EQ(s.applied_steps(), 1);
  // mean gradient = (g0 + g1) / 4 = {0.5, 1, 2}; w -= 0.5 * g
  EXPECT_FLOAT_EQ(s.values()[0], 0.75f);
  EXPECT_FLOAT_EQ(s.values()[1], 1.5f);
  EXPECT_FLOAT_EQ(s.values()[2], 2.0f);
  EXPECT_EQ(s.last_step_samples(), 4u);
}

TEST(shard, sums_in_rank_order_whatever_the_arrival_order) {
  // Values chosen so that float addition order matters: (a + b) + c != a + (b + c).
  const std::vector<std::vector<float>> g{{1e8f}, {1.0f}, {-1e8f}};
  std::vector<float> results;
  for (std::vector<std::uint32_t> order :
       {std::vector<std::uint32_t>{0, 1, 2}, {2, 1, 0}, {1, 2, 0}}) {
    auto be = cpu();
    optimizer_config opt;
    opt.sgd.learning_rate = 1.0f;
    std::vector<float> init{0};
    shard s(0, opt, *be, {{0, 1}}, init);
    s.set_members({0, 1, 2});
    for (auto r : order) ASSERT_TRUE(s.push(0, make(r, g[r], 1)));
    results.push_back(s.values()[0]);
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

TEST(shard, rejects_protocol_violations_with_clear_errors) {
  auto be = cpu();
  std::vector<float> init{0, 0};
  shard s(3, optimizer_config{}, *be, {{10, 12}}, init);
  s.set_members({0, 1});
  auto stale = s.push(5, make(0, {1, 1}, 1));
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, errc::protocol_error);
  EXPECT_NE(stale.error().message.find("pushed step 5 but the open step is 0"), std::string::npos);
  auto stranger = s.push(0, make(7, {1, 1}, 1));
  ASSERT_FALSE(stranger);
  EXPECT_NE(stranger.error().message.find("rank 7 is not a member"), std::string::npos);
  auto short_part = s.push(0, make(0, {1}, 1));
  ASSERT_FALSE(short_part);
  EXPECT_NE(short_part.error().message.find("has 1 floats, expected 2"), std::string::npos);
  ASSERT_TRUE(s.push(0, make(0, {1, 1}, 1)));
  auto twice = s.push(0, make(0, {1, 1}, 1));
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message.find("twice"), std::string::npos);
}

/// ssp:S: a push of a later step (by at most S) is held and applied when its step opens, in
/// rank order as in BSP, so the parameters are those of BSP given the same gradients; further
/// ahead it is refused.
TEST(shard, ssp_holds_pushes_of_later_steps_and_applies_them_in_step_and_rank_order) {
  auto be = cpu();
  optimizer_config opt;
  opt.sgd.learning_rate = 0.25f;
  const std::vector<float> init{1, 2, 3};
  job_config c;
  c.version = 1;
  c.members = {0, 1};
  shard_options ssp;
  ssp.max_ahead = 2;
  shard a(0, opt, *be, {{0, 3}}, init, ssp);
  shard b(0, opt, *be, {{0, 3}}, init);  // BSP, the same gradients in step order
  ASSERT_TRUE(a.configure(c));
  ASSERT_TRUE(b.configure(c));
  const std::vector<float> g00{1, 0, 0}, g10{0, 2, 0}, g01{3, 0, 1}, g11{0, 0, 5}, g02{1, 1, 1},
      g12{2, 2, 2};
  // Rank 0 runs two steps ahead: its pushes of steps 1 and 2 wait for step 0.
  EXPECT_FALSE(*a.push(0, 1, make(0, g00, 1)));
  EXPECT_FALSE(*a.push(1, 1, make(0, g01, 2)));
  EXPECT_FALSE(*a.push(2, 1, make(0, g02, 1)));
  const auto too_far = a.push(3, 1, make(0, g02, 1));
  ASSERT_FALSE(too_far);
  EXPECT_EQ(too_far.error().code, errc::protocol_error);
  EXPECT_EQ(too_far.error().message,
            "shard 0: rank 0 pushed step 3 but the open step is 0 (at most 2 ahead)");
  EXPECT_EQ(a.applied_steps(), 0);
  EXPECT_TRUE(*a.push(0, 1, make(1, g10, 1)));  // step 0 completes
  EXPECT_EQ(a.applied_steps(), 1);
  EXPECT_EQ(*a.resume(), 0) << "step 1 still waits for rank 1";
  EXPECT_TRUE(*a.push(1, 1, make(1, g11, 3)));
  EXPECT_EQ(*a.resume(), 0);
  EXPECT_TRUE(*a.push(2, 1, make(1, g12, 1)));
  EXPECT_EQ(a.applied_steps(), 3);
  for (auto [step, x, y, nx, ny] :
       {std::tuple{0, &g00, &g10, 1, 1}, {1, &g01, &g11, 2, 3}, {2, &g02, &g12, 1, 1}}) {
    ASSERT_FALSE(*b.push(step, 1, make(0, *x, std::uint64_t(nx))));
    ASSERT_TRUE(*b.push(step, 1, make(1, *y, std::uint64_t(ny))));
  }
  ASSERT_EQ(a.values().size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(a.values()[i], b.values()[i]) << i;
  // Worked by hand for key 0: 1 - 0.25*(1/2) = 0.875; - 0.25*(3/5) = 0.725; - 0.25*(3/2) = 0.35.
  EXPECT_FLOAT_EQ(a.values()[0], 0.35f);
}

/// ssp:S: pushes held for a step whose last missing push comes before them complete their
/// steps when resume() takes them, one after the other.
TEST(shard, ssp_held_pushes_complete_their_steps_when_the_one_before_completes) {
  auto be = cpu();
  optimizer_config opt;
  opt.sgd.learning_rate = 1.0f;
  job_config c;
  c.version = 1;
  c.members = {0, 1};
  shard_options ssp;
  ssp.max_ahead = 3;
  shard a(0, opt, *be, {{0, 1}}, std::vector<float>{0}, ssp);
  ASSERT_TRUE(a.configure(c));
  for (std::int64_t step = 1; step <= 3; ++step) {  // both ranks are ahead of step 0
    EXPECT_FALSE(*a.push(step, 1, make(0, {1}, 1)));
    EXPECT_FALSE(*a.push(step, 1, make(1, {1}, 1)));
  }
  EXPECT_FALSE(*a.push(0, 1, make(1, {1}, 1)));
  EXPECT_TRUE(*a.push(0, 1, make(0, {1}, 1)));
  EXPECT_EQ(a.applied_steps(), 1);
  EXPECT_EQ(*a.resume(), 3);
  EXPECT_EQ(a.applied_steps(), 4);
  EXPECT_FLOAT_EQ(a.values()[0], -4.0f);
}

TEST(shard, zero_sample_contributions_count_as_present_but_add_nothing) {
  auto be = cpu();
  optimizer_config opt;
  opt.sgd.learning_rate = 1.0f;
  std::vector<float> init{5};
  shard s(0, opt, *be, {{0, 1}}, init);
  s.set_members({0, 1});
  contribution empty;
  empty.rank = 1;
  ASSERT_TRUE(s.push(0, make(0, {2}, 2)));
  auto done = s.push(0, std::move(empty));
  ASSERT_TRUE(done);
  EXPECT_TRUE(*done);
  EXPECT_FLOAT_EQ(s.values()[0], 4.0f);  // 5 - 1 * (2 / 2)
}

/// Runs `steps` BSP steps of 3 workers with random gradients over `num_shards` shards and returns
/// the final parameter vector.
std::vector<float> run_sharded(std::uint32_t num_shards, optimizer_kind kind) {
  constexpr std::size_t n = 1000;
  auto map = shard_map::even(n, 37, num_shards);
  optimizer_config opt;
  opt.kind = kind;
  opt.sgd = {0.1f, kind == optimizer_kind::momentum ? 0.9f : 0.0f, 1e-4f};
  opt.adam.learning_rate = 0.01f;
  std::vector<float> init(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  for (auto& v : init) v = dist(rng);
  auto be = cpu();
  std::vector<std::unique_ptr<shard>> shards;
  for (std::uint32_t k = 0; k < num_shards; ++k) {
    std::vector<float> owned;
    for (auto r : map.ranges_of(k))
      owned.insert(owned.end(), init.begin() + r.begin, init.begin() + r.end);
    shards.push_back(std::make_unique<shard>(k, opt, *be, map.ranges_of(k), owned));
    shards.back()->set_members({0, 1, 2});
  }
  for (int step = 0; step < 20; ++step) {
    for (std::uint32_t rank : {2u, 0u, 1u}) {
      auto g = std::make_shared<std::vector<float>>(n);
      for (auto& v : *g) v = dist(rng);
      for (std::uint32_t k = 0; k < num_shards; ++k) {
        contribution c;
        c.rank = rank;
        c.samples = 8 + rank;
        for (auto r : map.ranges_of(k)) c.parts.emplace_back(g->data() + r.begin, r.size());
        c.keep_alive = g;
        EXPECT_TRUE(shards[k]->push(step, std::move(c)));
      }
    }
  }
  std::vector<float> out(n);
  for (std::uint32_t k = 0; k < num_shards; ++k) {
    std::size_t off = 0;
    for (auto r : map.ranges_of(k)) {
      std::copy_n(shards[k]->values().data() + off, r.size(), out.begin() + r.begin);
      off += r.size();
    }
  }
  return out;
}

class sharding_invariance : public ::testing::TestWithParam<optimizer_kind> {};

TEST_P(sharding_invariance, parameters_are_bitwise_equal_for_any_shard_count) {
  const auto one = run_sharded(1, GetParam());
  for (std::uint32_t k : {2u, 3u, 4u, 7u}) {
    const auto many = run_sharded(k, GetParam());
    ASSERT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float)))
        << k << " shards";
  }
}

INSTANTIATE_TEST_SUITE_P(optimizers, sharding_invariance,
                         ::testing::Values(optimizer_kind::sgd, optimizer_kind::momentum,
                                           optimizer_kind::adam));

TEST(shard, shared_values_are_never_written_and_unshared_ones_are_updated_in_place) {
  auto be = cpu();
  optimizer_config opt;
  opt.sgd.learning_rate = 1.0f;
  std::vector<float> init{1, 2};
  shard s(0, opt, *be, {{0, 2}}, init);
  s.set_members({0});
  const float* before = s.share_values()->data();
  ASSERT_TRUE(s.push(0, make(0, {1, 1}, 1)));
  EXPECT_EQ(s.share_values()->data(), before);  // nobody held it: updated in place
  auto held = s.share_values();
  ASSERT_TRUE(s.push(1, make(0, {1, 1}, 1)));
  EXPECT_FLOAT_EQ(held->data()[0], 0.0f);  // the reader's copy is version 1, untouched
  EXPECT_FLOAT_EQ(s.values()[0], -1.0f);   // the shard moved on to version 2
  EXPECT_NE(s.share_values().get(), held.get());
}

/// What a run of piecewise applies produced: the final values and every reported piece.
struct piecewise_run {
  std::vector<float> values;
  std::vector<piece> pieces;  ///< of the last step
  bool pieces_final = true;   ///< every piece's values, read when reported, were the final ones
  bool one_buffer = true;     ///< every piece of a step was reported in one buffer
};

/// Runs 12 BSP steps of 3 workers (rank 1 pushes no data in step 3) with random gradients on one
/// shard owning `ranges`, applied in pieces of at most `piece_floats` floats.
piecewise_run run_pieces(const std::vector<key_range>& ranges, optimizer_kind kind,
                         std::size_t piece_floats) {
  std::size_t n = 0;
  for (auto r : ranges) n += r.size();
  optimizer_config opt;
  opt.kind = kind;
  opt.sgd = {0.1f, kind == optimizer_kind::momentum ? 0.9f : 0.0f, 1e-4f};
  opt.adam.learning_rate = 0.01f;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist;
  std::vector<float> init(n);
  for (auto& v : init) v = dist(rng);
  auto be = cpu();
  shard s(0, opt, *be, ranges, init, shard_options{piece_floats});
  s.set_members({0, 1, 2});
  piecewise_run out;
  for (int step = 0; step < 12; ++step) {
    out.pieces.clear();
    struct seen {
      piece p;
      std::vector<float> values;
    };
    std::vector<seen> reported;
    const float_buffer* buffer = nullptr;
    for (std::uint32_t rank : {2u, 0u, 1u}) {
      contribution c;
      c.rank = rank;
      if (!(step == 3 && rank == 1)) {
        auto g = std::make_shared<std::vector<float>>(n);
        for (auto& v : *g) v = dist(rng);
        c.samples = 5 + rank;
        std::size_t off = 0;
        for (auto r : ranges) {
          c.parts.emplace_back(g->data() + off, r.size());
          off += r.size();
        }
        c.keep_alive = g;
      }
      auto done = s.push(step, std::move(c), [&](const piece& p) {
        auto shared = s.share_values();  // as an actor does: shared while the step goes on
        if (buffer && buffer != shared.get()) out.one_buffer = false;
        buffer = shared.get();
        reported.push_back(
            {p, {shared->data() + p.offset, shared->data() + p.offset + p.keys.size()}});
      });
      EXPECT_TRUE(done);
    }
    for (const auto& r : reported) {
      out.pieces.push_back(r.p);
      if (!std::equal(r.values.begin(), r.values.end(), s.values().begin() + r.p.offset))
        out.pieces_final = false;
    }
  }
  out.values.assign(s.values().begin(), s.values().end());
  return out;
}

struct piecewise_case {
  optimizer_kind kind;
  std::size_t piece_floats;
};

class piecewise_apply : public ::testing::TestWithParam<piecewise_case> {};

TEST_P(piecewise_apply, gives_bitwise_the_parameters_of_a_one_shot_apply) {
  // Ranges smaller than a piece, equal to one, and several pieces long (with a short last piece),
  // at offsets in the values that are not multiples of 4 (the backend's head and tail paths).
  const std::vector<key_range> ranges{{0, 3},       {10, 1034},   {2000, 7000},
                                      {8000, 8001}, {9000, 9700}, {10000, 12049}};
  const auto one_shot = run_pieces(ranges, GetParam().kind, std::size_t(1) << 40);
  const auto pieces = run_pieces(ranges, GetParam().kind, GetParam().piece_floats);
  ASSERT_EQ(one_shot.values.size(), pieces.values.size());
  EXPECT_EQ(0, std::memcmp(one_shot.values.data(), pieces.values.data(),
                           one_shot.values.size() * sizeof(float)));
  EXPECT_EQ(one_shot.pieces.size(), ranges.size());  // one piece per range
  EXPECT_TRUE(pieces.pieces_final);
  EXPECT_TRUE(pieces.one_buffer);
}

INSTANTIATE_TEST_SUITE_P(kinds_and_sizes, piecewise_apply,
                         ::testing::Values(piecewise_case{optimizer_kind::sgd, 1024},
                                           piecewise_case{optimizer_kind::sgd, 4096},
                                           piecewise_case{optimizer_kind::momentum, 1024},
                                           piecewise_case{optimizer_kind::momentum, 4096},
                                           piecewise_case{optimizer_kind::adam, 1024},
                                           piecewise_case{optimizer_kind::adam, 2048},
                                           piecewise_case{optimizer_kind::adam, 4096}),
                         [](const auto& info) {
                           return std::string(to_string(info.param.kind)) + "_" +
                                  std::to_string(info.param.piece_floats);
                         });

TEST(shard, pieces_cover_the_ranges_in_order_and_never_cross_a_range) {
  const std::vector<key_range> ranges{{0, 3}, {10, 1034}, {2000, 7000}, {8000, 8001}};
  const auto run = run_pieces(ranges, optimizer_kind::sgd, 1024);
  std::size_t at = 0, off = 0;
  std::size_t range = 0;
  std::uint64_t next_key = ranges[0].begin;
  for (const auto& p : run.pieces) {
    EXPECT_EQ(p.version, 12);
    EXPECT_LE(p.keys.size(), 1024u);
    EXPECT_GT(p.keys.size(), 0u);
    if (next_key == ranges[range].end) {
      ++range;
      ASSERT_LT(range, ranges.size());
      next_key = ranges[range].begin;
    }
    EXPECT_EQ(p.range, range);
    EXPECT_EQ(p.keys.begin, next_key);
    EXPECT_LE(p.keys.end, ranges[range].end);
    EXPECT_EQ(p.offset, off);
    next_key = p.keys.end;
    off += p.keys.size();
    ++at;
  }
  EXPECT_EQ(range, ranges.size() - 1);
  EXPECT_EQ(next_key, ranges.back().end);
  EXPECT_EQ(off, run.values.size());
  EXPECT_EQ(at, 1u + 1u + 5u + 1u);  // 3 | 1024 | 4 x 1024 + 904 | 1
}

TEST(shard, copy_on_write_is_decided_once_before_the_first_piece) {
  auto be = cpu();
  optimizer_config opt;
  opt.sgd.learning_rate = 1.0f;
  std::vector<float> init(2500, 1.0f);
  shard s(0, opt, *be, {{0, 2500}}, init, shard_options{1024});
  s.set_members({0});
  auto held = s.share_values();  // a reader of version 0
  std::vector<const float_buffer*> buffers;
  std::vector<std::shared_ptr<const float_buffer>> shared;
  ASSERT_TRUE(s.push(0, make(0, std::vector<float>(2500, 1.0f), 1), [&](const piece& p) {
    shared.push_back(s.share_values());  // pieces shared one by one while the step goes on
    buffers.push_back(shared.back().get());
    EXPECT_EQ(p.version, 1);
  }));
  ASSERT_EQ(buffers.size(), 3u);  // 1024 + 1024 + 452
  EXPECT_NE(buffers[0], held.get());
  EXPECT_EQ(buffers[0], buffers[1]);  // not copied again although piece 0 was shared
  EXPECT_EQ(buffers[1], buffers[2]);
  for (float v : held->span()) EXPECT_EQ(v, 1.0f);  // version 0 untouched
  for (float v : s.values()) EXPECT_EQ(v, 0.0f);
  held.reset();
  shared.clear();
  const float* before = s.share_values()->data();
  ASSERT_TRUE(s.push(1, make(0, std::vector<float>(2500, 1.0f), 1)));
  EXPECT_EQ(s.share_values()->data(), before);  // nobody held it: updated in place
}

TEST(shard, a_step_without_data_still_reports_every_piece) {
  auto be = cpu();
  std::vector<float> init(2100, 2.0f);
  shard s(0, optimizer_config{}, *be, {{0, 2100}}, init, shard_options{1024});
  s.set_members({0});
  contribution empty;
  std::vector<key_range> keys;
  ASSERT_TRUE(s.push(0, std::move(empty), [&](const piece& p) { keys.push_back(p.keys); }));
  EXPECT_EQ(keys, (std::vector<key_range>{{0, 1024}, {1024, 2048}, {2048, 2100}}));
  for (float v : s.values()) EXPECT_EQ(v, 2.0f);
  EXPECT_EQ(s.applied_steps(), 1);
}

TEST(key_coverage, counts_each_key_once_whatever_the_order) {
  key_coverage c(100);
  const std::vector<key_range> a{{50, 100}}, b{{0, 10}, {10, 20}}, d{{20, 50}, {30, 30}};
  ASSERT_TRUE(c.add(a));
  ASSERT_TRUE(c.add(b));
  EXPECT_FALSE(c.complete());
  EXPECT_EQ(c.covered(), 70u);
  ASSERT_TRUE(c.add(d));
  EXPECT_TRUE(c.complete());
  c.clear();
  EXPECT_EQ(c.covered(), 0u);
  EXPECT_FALSE(c.complete());
}

TEST(key_coverage, refuses_overlaps_and_out_of_range_keys_all_or_none) {
  key_coverage c(100);
  const std::vector<key_range> first{{10, 20}};
  ASSERT_TRUE(c.add(first));
  const std::vector<key_range> overlap{{0, 5}, {19, 25}};
  auto r = c.add(overlap);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_NE(r.error().message.find("[19, 25) overlaps"), std::string::npos);
  EXPECT_EQ(c.covered(), 10u);  // [0, 5) was not kept either
  const std::vector<key_range> inside{{12, 13}}, around{{5, 30}}, twice{{40, 50}, {45, 46}};
  EXPECT_FALSE(c.add(inside));
  EXPECT_FALSE(c.add(around));
  EXPECT_FALSE(c.add(twice));
  const std::vector<key_range> past{{90, 101}}, reversed{{30, 29}};
  auto p = c.add(past);
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message.find("reaches past the 100 keys"), std::string::npos);
  auto q = c.add(reversed);
  ASSERT_FALSE(q);
  EXPECT_NE(q.error().message.find("ends before it begins"), std::string::npos);
  EXPECT_EQ(c.covered(), 10u);
  const std::vector<key_range> rest{{0, 10}, {20, 100}};
  ASSERT_TRUE(c.add(rest));
  EXPECT_TRUE(c.complete());
}

TEST(buffer_pool, reuses_released_buffers) {
  buffer_pool pool(1024);
  for (int i = 0; i < 100; ++i) {
    auto a = pool.acquire();
    auto b = pool.acquire();
    a->data()[0] = float(i);
  }
  EXPECT_EQ(pool.created(), 2u);
}

}  // namespace
}  // namespace coach::ps
