// The elastic invariant of issue 4, on the job's real logic (tests/helpers/elastic_sim.hpp): under
// random joins, leaves, added and drained shards, migrations, deaths and duplicated, late pushes,
// the parameters the master assembles at the job's last step must be exactly those of every
// gradient the shards took applied once; every epoch completed must have counted each sample once.
// With momentum and Adam the reference is one unmigrated shard fed the same contributions.
//
// Asynchronous (`consistency: asp`): each step is one worker's, pushed without waiting for any
// version and applied by each shard as it arrives; a dead worker's steps are completed by the
// master's stand-in pushes, and whichever of the stand-in and its own push reaches a shard
// second is dropped.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "tests/helpers/elastic_reference.hpp"
#include "tests/helpers/elastic_sim.hpp"

namespace coach {
namespace {

using namespace elastic_testing;

TEST(elastic_property, random_rescales_migrations_and_deaths_apply_every_gradient_once) {
  run_result total;
  int held = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    auto r = job_sim(plain_sgd(), seed, {.deaths = true}).run();
    if (HasFatalFailure()) return;
    expect_every_gradient_once(r, seed);
    if (HasFatalFailure()) return;
    total.joins += r.joins, total.leaves += r.leaves, total.deaths += r.deaths;
    total.adds += r.adds, total.drains += r.drains, total.migrations += r.migrations;
    held += r.held;
  }
  // The seeds exercise every kind of change many times, and pushes overtake their slices.
  EXPECT_GT(total.joins, 20);
  EXPECT_GT(total.leaves, 20);
  EXPECT_GT(total.deaths, 20);
  EXPECT_GT(total.adds, 20);
  EXPECT_GT(total.drains, 20);
  EXPECT_GT(total.migrations, 20);
  EXPECT_GT(held, 20) << "pushes never overtook the slices they needed";
}

TEST(elastic_property, duplicated_and_late_pushes_are_refused_and_every_gradient_applies_once) {
  // The network (a faulty_transport, say) delivers a tenth of the pushes twice, the copy late:
  // within the step, after it was applied, or after a rescale, a migration or a death.
  std::uint64_t copies = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    auto r = job_sim(plain_sgd(), seed, {.deaths = seed % 2 == 0, .duplicates = 0.1}).run();
    if (HasFatalFailure()) return;
    expect_every_gradient_once(r, seed);
    if (HasFatalFailure()) return;
    copies += r.copies;
  }
  EXPECT_GT(copies, 300u);
}

TEST(elastic_property, asp_applies_every_pushed_gradient_exactly_once) {
  int changes = 0, deaths = 0;
  std::uint64_t second = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    auto r = job_sim(plain_sgd(), seed, {.deaths = true, .asp = true}).run();
    if (HasFatalFailure()) return;
    expect_every_gradient_once(r, seed);
    if (HasFatalFailure()) return;
    ASSERT_EQ(r.dropped, r.second_pushes) << "seed " << seed;
    changes += r.joins + r.leaves + r.adds + r.drains + r.migrations;
    deaths += r.deaths;
    second += r.second_pushes;
  }
  EXPECT_GT(changes, 100);
  EXPECT_GT(deaths, 20);
  EXPECT_GT(second, 10u) << "stand-ins raced the dead workers' own pushes";
}

class elastic_invisible : public ::testing::TestWithParam<optimizer_kind> {};

TEST_P(elastic_invisible, migrated_run_is_bitwise_equal_to_one_unmigrated_shard) {
  optimizer_config opt;
  opt.kind = GetParam();
  opt.sgd = {0.05f, GetParam() == optimizer_kind::momentum ? 0.9f : 0.0f, 1e-3f};
  opt.adam.learning_rate = 0.01f;
  for (std::uint64_t seed = 100; seed < 120; ++seed) {
    auto r = job_sim(opt, seed, {}).run();
    if (HasFatalFailure()) return;
    ASSERT_EQ(r.params.size(), num_keys);
    const auto want = unmigrated(r, opt);
    ASSERT_EQ(0, std::memcmp(r.params.data(), want.data(), num_keys * sizeof(float)))
        << "seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(optimizers, elastic_invisible,
                         ::testing::Values(optimizer_kind::sgd, optimizer_kind::momentum,
                                           optimizer_kind::adam));

}  // namespace
}  // namespace coach
