// master::step_planner under BSP: every member gets one chunk per step and the step completes
// when all reported; an epoch's chunks all complete before the next epoch opens; training ends
// after the last epoch (or at once when stopped); a rank that left gets "finished" and is not
// waited for; the chunks of workers that leave go back and are handed out again, so each epoch
// still trains every sample exactly once.

#include "master/step_planner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace coach::master {
namespace {

using kind = step_planner::grant::kind;

TEST(step_planner, each_member_gets_a_chunk_and_the_step_completes_when_all_reported) {
  chunk_dispenser d(100, 10, 7);  // 10 chunks per epoch
  step_planner p(d, 0, 2);
  const std::vector<std::uint32_t> members{0, 1};
  auto o = p.open(members, false);
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->finished);
  EXPECT_EQ(o->epoch_begun, 0u);
  EXPECT_FALSE(o->ends_epoch);
  EXPECT_EQ(p.open_step(), 0);
  const auto g0 = p.take(0, 0), g1 = p.take(1, 0);
  ASSERT_EQ(g0.what, kind::chunk);
  ASSERT_EQ(g1.what, kind::chunk);
  ASSERT_EQ(g0.chunks.size(), 1u);
  ASSERT_EQ(g1.chunks.size(), 1u);
  EXPECT_NE(g0.chunks[0].id, g1.chunks[0].id);
  EXPECT_EQ(p.take(7, 0).what, kind::finished) << "not a member of the step";
  auto r = p.report(0, 0);
  EXPECT_TRUE(r.known);
  EXPECT_FALSE(r.step_samples) << "rank 1 has not reported";
  ASSERT_EQ(r.chunks_done.size(), 1u);
  EXPECT_EQ(r.chunks_done[0].id, g0.chunks[0].id);
  r = p.report(1, 0);
  ASSERT_TRUE(r.step_samples);
  EXPECT_EQ(*r.step_samples, 20u);
  EXPECT_EQ(p.steps_open(), 0u) << "fetched and reported by all: forgotten";
  EXPECT_EQ(p.take(0, 0).what, kind::stale);
  EXPECT_FALSE(p.report(0, 0).known);
}

TEST(step_planner, the_next_epoch_waits_for_every_chunk_of_this_one_and_training_ends) {
  chunk_dispenser d(30, 10, 1);  // 3 chunks per epoch
  step_planner p(d, 0, 2);
  const std::vector<std::uint32_t> members{0, 1};
  ASSERT_TRUE(p.open(members, false));  // step 0: chunks 1 and 2 of 3
  auto o = p.open(members, false);      // step 1: the last chunk and none
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->ends_epoch);
  EXPECT_EQ(p.take(1, 1).what, kind::no_chunk);
  EXPECT_FALSE(p.open(members, false)) << "epoch 0's chunks are out but not complete";
  std::uint64_t samples = 0;
  for (std::int64_t s : {0, 1})
    for (std::uint32_t r : {0u, 1u}) {
      if (s == 0 || r == 0) p.take(r, s);
      auto rep = p.report(r, s);
      for (const auto& c : rep.chunks_done) samples += c.size();
      EXPECT_EQ(rep.epoch_done, s == 1 && r == 0) << "the last chunk was rank 0's at step 1";
    }
  EXPECT_EQ(samples, 30u);
  o = p.open(members, false);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->epoch_begun, 1u);
  // Epoch 1, then the step after its end finishes the job.
  std::int64_t s = p.open_step();
  for (int guard = 0; guard < 10; ++guard) {
    for (std::uint32_t r : {0u, 1u}) {
      p.take(r, s);
      p.report(r, s);
    }
    auto next = p.open(members, false);
    ASSERT_TRUE(next);
    s = p.open_step();
    if (next->finished) break;
  }
  EXPECT_EQ(s, 4) << "two steps per epoch";
  EXPECT_EQ(p.take(0, s).what, kind::finished);
}

TEST(step_planner, a_stopped_job_finishes_at_its_next_step) {
  chunk_dispenser d(100, 10, 7);
  step_planner p(d, 0, 5);
  const std::vector<std::uint32_t> members{0};
  ASSERT_TRUE(p.open(members, false));
  auto o = p.open(members, true);
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->finished);
  EXPECT_EQ(p.take(0, 1).what, kind::finished);
}

TEST(step_planner, the_chunks_of_workers_that_left_are_trained_by_the_others_once) {
  chunk_dispenser d(60, 10, 3);  // 6 chunks per epoch
  step_planner p(d, 0, 1);
  std::vector<std::uint32_t> members{0, 1, 2};
  ASSERT_TRUE(p.open(members, false));  // step 0: 3 chunks
  for (std::uint32_t r : members) p.take(r, 0);
  p.report(0, 0);
  p.report(1, 0);
  // Worker 2 dies before reporting step 0: its chunk goes back.
  const std::vector<std::uint32_t> gone{2};
  EXPECT_EQ(p.drop(gone, 0), std::set<std::uint32_t>{0});
  EXPECT_EQ(p.steps_open(), 0u) << "step 0 waits for rank 2 no more";
  members = {0, 1};
  std::uint64_t samples = 20;  // steps 0's two reported chunks
  for (std::int64_t s = 1; s < 10; ++s) {
    auto o = p.open(members, false);
    ASSERT_TRUE(o);
    if (o->finished) break;
    for (std::uint32_t r : members) {
      p.take(r, s);
      for (const auto& c : p.report(r, s).chunks_done) samples += c.size();
    }
  }
  EXPECT_EQ(samples, 60u) << "every sample once: the dead worker's chunk was trained again";
  EXPECT_TRUE(d.epoch_done());
}

TEST(step_planner, averaging_gives_each_member_k_chunks_and_takes_them_all_back_when_it_leaves) {
  chunk_dispenser d(95, 10, 5);  // 10 chunks per epoch, the last of 5 samples
  step_planner p(d, 0, 1, 3);
  std::vector<std::uint32_t> members{0, 1};
  auto o = p.open(members, false);  // step 0: 3 chunks each
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->ends_epoch);
  const auto g0 = p.take(0, 0), g1 = p.take(1, 0);
  ASSERT_EQ(g0.what, kind::chunk);
  ASSERT_EQ(g0.chunks.size(), 3u);
  ASSERT_EQ(g1.chunks.size(), 3u);
  std::set<std::uint64_t> ids;
  for (const auto* g : {&g0, &g1})
    for (const auto& c : g->chunks) ids.insert(c.id);
  EXPECT_EQ(ids.size(), 6u) << "no chunk handed out twice";
  auto r = p.report(0, 0);
  EXPECT_EQ(r.chunks_done.size(), 3u);
  EXPECT_FALSE(r.step_samples);
  // Rank 1 leaves with its three chunks: they go back.
  const std::vector<std::uint32_t> gone{1};
  EXPECT_EQ(p.drop(gone, 0), std::set<std::uint32_t>{0});
  members = {0};
  std::uint64_t samples = 30;
  std::size_t most = 0;
  for (std::int64_t s = 1; s < 10; ++s) {
    o = p.open(members, false);
    ASSERT_TRUE(o);
    if (o->finished) break;
    const auto g = p.take(0, s);
    most = std::max(most, g.chunks.size());
    for (const auto& c : p.report(0, s).chunks_done) samples += c.size();
  }
  EXPECT_EQ(most, 3u);
  EXPECT_EQ(samples, 95u) << "every sample of the epoch once, the short last chunk included";
  EXPECT_TRUE(d.epoch_done());
}

TEST(step_planner, at_an_epochs_end_averaging_shares_the_last_chunks_among_the_members) {
  chunk_dispenser d(40, 10, 5);  // 4 chunks
  step_planner p(d, 0, 1, 3);
  const std::vector<std::uint32_t> members{0, 1, 2};
  auto o = p.open(members, false);
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->ends_epoch);
  EXPECT_EQ(p.take(0, 0).chunks.size(), 2u);
  EXPECT_EQ(p.take(1, 0).chunks.size(), 1u);
  EXPECT_EQ(p.take(2, 0).chunks.size(), 1u);
}

/// ssp:S, driven as the master drives it, under random speeds, joins and deaths: no grant is
/// ever more than S steps after the step the slowest live member is at (the oldest it has not
/// reported), and every epoch still trains every sample exactly once.
TEST(step_planner, ssp_never_lets_a_worker_run_more_than_s_steps_ahead_of_the_slowest) {
  for (const std::int64_t S : {0, 1, 2, 4}) {
    std::int64_t widest = 0;  // over every run: the bound is reached, not just kept
    for (std::uint32_t seed = 1; seed <= 25; ++seed) {
      SCOPED_TRACE(testing::Message() << "S=" << S << " seed=" << seed);
      constexpr std::uint32_t epochs = 3;
      chunk_dispenser d(230, 10, seed);  // 23 chunks per epoch
      step_planner p(d, 0, epochs, 1, S);
      std::mt19937 rng(seed);
      struct member {
        std::int64_t at = 0;   ///< the step it asks for or computes
        bool granted = false;  ///< computing `at`
      };
      std::map<std::uint32_t, member> live;
      std::vector<std::uint32_t> members{0, 1, 2};
      for (auto r : members) live[r] = {};
      std::uint32_t next_rank = 3;
      std::map<std::uint32_t, std::uint64_t> samples;  // by epoch
      bool finished = false;
      for (int event = 0; event < 4000 && !finished && !live.empty(); ++event) {
        const auto roll = rng() % 100;
        if (roll < 3 && live.size() < 6) {  // a worker joins from the next step on
          const auto r = next_rank++;
          members.push_back(r);
          live[r] = {p.open_step() + 1, false};
          continue;
        }
        auto it = std::next(live.begin(), std::ptrdiff_t(rng() % live.size()));
        const auto r = it->first;
        auto& w = it->second;
        if (roll < 6 && live.size() > 1) {  // it dies: steps from its first unreported one
          const std::vector<std::uint32_t> gone{r};
          p.drop(gone, w.at);
          std::erase(members, r);
          live.erase(it);
          continue;
        }
        if (w.granted) {  // it reports its step and asks for the next one
          const auto rep = p.report(r, w.at);
          ASSERT_TRUE(rep.known);
          for (const auto& c : rep.chunks_done) samples[c.epoch] += c.size();
          ++w.at;
          w.granted = false;
          continue;
        }
        bool parked = false;
        while (p.open_step() < w.at && !parked) {
          auto o = p.open(members, false);
          if (!o) parked = true;
        }
        if (parked) continue;  // asked again after the next report
        const auto g = p.take(r, w.at);
        if (g.what == kind::finished) {
          finished = true;
          break;
        }
        ASSERT_NE(g.what, kind::stale);
        std::int64_t slowest = w.at;
        for (const auto& [other, m] : live) slowest = std::min(slowest, m.at);
        EXPECT_LE(w.at - slowest, S);
        widest = std::max(widest, w.at - slowest);
        w.granted = true;
      }
      ASSERT_TRUE(finished);
      for (std::uint32_t e = 0; e < epochs; ++e) EXPECT_EQ(samples[e], 230u) << "epoch " << e;
    }
    EXPECT_EQ(widest, S);
  }
}

}  // namespace
}  // namespace coach::master

namespace coach::master {
namespace {

TEST(global_cut, the_largest_chunk_that_gives_every_worker_one) {
  EXPECT_EQ(cut_global_batch(64, 2).chunk, 32u);
  EXPECT_EQ(cut_global_batch(64, 2).per_step, 2u);
  EXPECT_EQ(cut_global_batch(64, 4).chunk, 16u);
  EXPECT_EQ(cut_global_batch(96, 5).chunk, 16u) << "19 does not divide 96; 16 does";
  EXPECT_EQ(cut_global_batch(96, 5).per_step, 6u);
  EXPECT_EQ(cut_global_batch(7, 3).chunk, 1u) << "a prime: single samples";
  EXPECT_EQ(cut_global_batch(7, 3).per_step, 7u);
  EXPECT_EQ(cut_global_batch(4, 8).chunk, 1u) << "more workers than samples: some get none";
}

TEST(step_planner, a_fixed_global_batch_covers_the_same_positions_whatever_the_members) {
  // 100 samples, a global batch of 20 cut in 4 chunks of 5: every step covers the same 20
  // positions of the epoch's order with 1, 2, 3 or 4 members, each a contiguous run.
  std::vector<std::vector<std::uint32_t>> covered[4];
  for (std::uint32_t m = 1; m <= 4; ++m) {
    chunk_dispenser d(100, 5, 11);
    step_planner p(d, 0, 1, 1, -1, 0, 4);
    std::vector<std::uint32_t> members(m);
    for (std::uint32_t k = 0; k < m; ++k) members[k] = k;
    for (int s = 0; s < 5; ++s) {
      ASSERT_TRUE(p.open(members, false));
      std::vector<std::uint32_t> step;
      std::size_t most = 0, least = 100;
      for (auto r : members) {
        const auto g = p.take(r, s);
        std::size_t mine = 0;
        for (const auto& c : g.chunks) {
          const auto idx = d.indices(c);
          step.insert(step.end(), idx.begin(), idx.end());
          mine += c.size();
        }
        most = std::max(most, mine);
        least = std::min(least, mine);
        p.report(r, s);
      }
      EXPECT_EQ(step.size(), 20u);
      EXPECT_LE(most - least, 5u) << "shares differ by a chunk at most";
      std::sort(step.begin(), step.end());
      covered[m - 1].push_back(step);
    }
  }
  for (int m = 1; m < 4; ++m) EXPECT_EQ(covered[m], covered[0]) << m + 1 << " members";
}

}  // namespace
}  // namespace coach::master
