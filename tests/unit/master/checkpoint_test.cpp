// Checkpoints (docs/design.md "Checkpoints"): a shard's state exported (ps::shard::snapshot),
// assembled whole (master::snapshot_assembler) and imported into fresh shards cut another way
// (ps::slice_of, ps::shard::adopt) gives bitwise the updates of the shards that were never
// stopped, for every optimizer with a schedule and statistic ranges; the checkpoint file keeps
// that state exactly, reads in place of a saved model, and refuses a spec it does not fit with a
// one-line error; the schedule of checkpoints follows every_s on a manual clock.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "master/snapshot_assembler.hpp"
#include "ps/shard.hpp"
#include "ps/training_state.hpp"
#include "spec/checkpoint_config.hpp"
#include "spec/checkpoint_file.hpp"
#include "spec/job_spec.hpp"

namespace coach {
namespace {

using ps::key_range;
using ps::optimizer_config;
using ps::optimizer_kind;
using ps::shard;

std::unique_ptr<kernels::backend> cpu() {
  return std::move(*kernels::make_backend(kernels::backend_kind::cpu));
}

constexpr std::size_t num_keys = 5000;

/// Adam, AdamW, momentum or SGD with a cosine schedule (and warm-up) over 2 epochs of 40
/// samples, weight decay, and statistic ranges straddling the shard boundaries.
optimizer_config job_optimizer(optimizer_kind kind, bool decoupled) {
  optimizer_config o;
  o.kind = kind;
  o.sgd = {0.05f, kind == optimizer_kind::momentum ? 0.9f : 0.0f, 1e-3f};
  o.adam.learning_rate = 0.01f;
  o.adam.weight_decay = 0.01f;
  o.adam.decoupled = decoupled;
  o.schedule.kind = ps::schedule_kind::cosine;
  o.schedule.min_lr = 0.001;
  o.schedule.warmup_epochs = 0.5;
  o.samples_per_epoch = 40;
  o.epochs = 2;
  o.statistics = {{{1000, 1700}, 0.1f}, {{2990, 3010}, 0.5f}, {{4990, 5000}, 0.9f}};
  return o;
}

std::uint64_t samples_of(int step, std::uint32_t rank) {
  return rank == 0 ? 3 + std::uint64_t(step % 2) : (step % 3 == 2 ? 0 : 5);
}

std::shared_ptr<const std::vector<float>> gradient_of(int step, std::uint32_t rank) {
  std::mt19937 rng(std::uint32_t(step * 2 + rank + 1));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto g = std::make_shared<std::vector<float>>(num_keys);
  for (auto& x : *g) x = u(rng) * float(samples_of(step, rank));
  return g;
}

ps::contribution part_of(std::uint32_t rank, std::uint64_t samples,
                         const std::shared_ptr<const std::vector<float>>& g,
                         const std::vector<key_range>& ranges) {
  ps::contribution c;
  c.rank = rank;
  c.samples = samples;
  if (samples == 0) return c;
  for (const auto& r : ranges)
    c.parts.push_back(std::span<const float>(*g).subspan(r.begin, r.size()));
  c.keep_alive = g;
  return c;
}

/// The shards of one job, cut by a shard map of `num_shards`, driven step by step by two ranks.
struct cluster {
  optimizer_config opt;
  std::unique_ptr<kernels::backend> be = cpu();
  std::vector<std::unique_ptr<shard>> shards;
  int step = 0;

  /// Shards starting from the seed's values.
  cluster(optimizer_config o, std::uint32_t num_shards) : opt(std::move(o)) {
    std::vector<float> init(num_keys);
    std::mt19937 rng(99);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& x : init) x = u(rng);
    const auto map = ps::shard_map::even(num_keys, 1024, num_shards);
    for (std::uint32_t k = 0; k < num_shards; ++k) {
      std::vector<float> v;
      for (const auto& r : map.ranges_of(k))
        v.insert(v.end(), init.begin() + std::ptrdiff_t(r.begin),
                 init.begin() + std::ptrdiff_t(r.end));
      shards.push_back(
          std::make_unique<shard>(k, opt, *be, map.ranges_of(k), v, ps::shard_options{1024}));
      shards.back()->set_members({0, 1});
    }
  }
  /// Shards resumed from `state`: each empty, adopting its part.
  cluster(optimizer_config o, std::uint32_t num_shards, const ps::training_state& state)
      : opt(std::move(o)), step(int(state.version)) {
    const auto map = ps::shard_map::even(num_keys, 1024, num_shards);
    for (std::uint32_t k = 0; k < num_shards; ++k) {
      shards.push_back(std::make_unique<shard>(k, opt, *be, std::vector<key_range>{},
                                               std::span<const float>{}, ps::shard_options{1024}));
      shards.back()->set_members({0, 1});
      auto ok = shards.back()->adopt(ps::slice_of(state, map.ranges_of(k), k));
      EXPECT_TRUE(ok) << ok.error().message;
    }
  }
  void run(int steps) {
    for (int end = step + steps; step < end; ++step) {
      const auto g0 = gradient_of(step, 0), g1 = gradient_of(step, 1);
      for (auto& s : shards) {
        if (s->ranges().empty()) continue;
        ASSERT_TRUE(s->push(step, part_of(1, samples_of(step, 1), g1, s->ranges())));
        auto done = s->push(step, part_of(0, samples_of(step, 0), g0, s->ranges()));
        ASSERT_TRUE(done && *done) << "shard " << s->id() << " step " << step;
      }
    }
  }
  /// Every shard's snapshot assembled, as a job master does for a checkpoint.
  ps::training_state state() const {
    master::snapshot_assembler a(num_keys, opt.state_per_param());
    a.request(step, 0, false, true);
    EXPECT_EQ(a.to_ask(step), (std::vector<std::int64_t>{step}));
    EXPECT_TRUE(a.wants_state(step));
    std::optional<master::snapshot_assembler::assembled> whole;
    for (const auto& s : shards) {
      auto got = a.add_state(s->snapshot());
      EXPECT_TRUE(got) << got.error().message;
      if (got && *got) whole = std::move(**got);
    }
    EXPECT_TRUE(whole && whole->state) << "every key arrived";
    return whole && whole->state ? *whole->state : ps::training_state{};
  }
};

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class resume_shards : public ::testing::TestWithParam<std::tuple<optimizer_kind, bool>> {};

TEST_P(resume_shards, a_state_exported_and_imported_gives_the_same_updates_bitwise) {
  const auto [kind, decoupled] = GetParam();
  const auto opt = job_optimizer(kind, decoupled);
  cluster straight(opt, 2);
  straight.run(14);
  const auto expected = straight.state();

  // Stopped after 5 steps, its state taken and put into 3 shards cut another way (and into
  // one), then trained on: bitwise the parameters and the state of the run never stopped.
  cluster first(opt, 2);
  first.run(5);
  const auto saved = first.state();
  EXPECT_EQ(saved.version, 5);
  EXPECT_EQ(saved.updates, 5 - 0) << "every step of these has samples";
  EXPECT_EQ(saved.samples_applied, first.shards[0]->samples_applied());
  ASSERT_TRUE(ps::check(saved, num_keys, opt.state_per_param()));
  for (std::uint32_t n : {3u, 1u}) {
    cluster resumed(opt, n, saved);
    resumed.run(9);
    const auto got = resumed.state();
    EXPECT_EQ(got.version, expected.version);
    EXPECT_EQ(got.updates, expected.updates);
    EXPECT_EQ(got.samples_applied, expected.samples_applied);
    EXPECT_TRUE(bitwise_equal(got.values, expected.values)) << n << " shards";
    EXPECT_TRUE(bitwise_equal(got.state_a, expected.state_a)) << n << " shards";
    EXPECT_TRUE(bitwise_equal(got.state_b, expected.state_b)) << n << " shards";
  }
  // The statistic ranges keep no optimizer state.
  if (!saved.state_a.empty()) {
    EXPECT_EQ(saved.state_a[1200], 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(optimizers, resume_shards,
                         ::testing::Values(std::tuple{optimizer_kind::sgd, false},
                                           std::tuple{optimizer_kind::momentum, false},
                                           std::tuple{optimizer_kind::adam, false},
                                           std::tuple{optimizer_kind::adam, true}),
                         [](const auto& info) {
                           const auto kind = std::get<0>(info.param);
                           return std::get<1>(info.param) ? std::string("adamw")
                                                          : std::string(ps::to_string(kind));
                         });

TEST(snapshot_assembler_state, refuses_what_was_not_asked_and_keeps_the_larger_counts) {
  master::snapshot_assembler a(4, 1);
  a.request(3, 0, false, true);
  a.request(5, 1, false, false);
  a.request(3, 0, true, false);  // again: only `final` is added
  EXPECT_TRUE(a.wants_state(3));
  EXPECT_FALSE(a.wants_state(5));
  const std::vector<float> v{1, 2};
  const key_range r[] = {{0, 2}};
  const std::span<const float> p[] = {v};
  auto plain = a.add(3, r, p);
  ASSERT_FALSE(plain);
  EXPECT_NE(plain.error().message.find("optimizer state was asked for"), std::string::npos);

  ps::slice_transfer t;
  t.from = 1;
  t.version = 5;
  t.ranges = {{0, 2}};
  t.values = {1, 2};
  t.state_a = {0.5f, 0.25f};
  auto unasked = a.add_state(t);
  ASSERT_FALSE(unasked);
  EXPECT_NE(unasked.error().message.find("not asked for"), std::string::npos);

  t.version = 3;
  t.updates = 2;
  t.samples_applied = 40;
  t.state_a = {0.5f};  // one float short
  auto short_state = a.add_state(t);
  ASSERT_FALSE(short_state);
  EXPECT_NE(short_state.error().message.find("state floats"), std::string::npos);
  t.state_a = {0.5f, 0.25f};
  auto half = a.add_state(t);
  ASSERT_TRUE(half) << half.error().message;
  EXPECT_FALSE(*half);
  ps::slice_transfer u = t;
  u.from = 2;
  u.ranges = {{2, 4}};
  u.values = {3, 4};
  u.state_a = {-1, -2};
  u.updates = 3;  // a dying worker's last step was an update here only
  u.samples_applied = 30;
  auto whole = a.add_state(u);
  ASSERT_TRUE(whole && *whole);
  const auto& s = *(*whole)->state;
  EXPECT_TRUE((*whole)->final);
  EXPECT_EQ(s.version, 3);
  EXPECT_EQ(s.updates, 3);
  EXPECT_EQ(s.samples_applied, 40u);
  EXPECT_EQ(s.values, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(*(*whole)->values, s.values);
  EXPECT_EQ(s.state_a, (std::vector<float>{0.5f, 0.25f, -1, -2}));
  EXPECT_TRUE(s.state_b.empty());
}

TEST(training_state, check_names_what_does_not_fit) {
  ps::training_state s;
  s.values.assign(4, 0.0f);
  s.state_a.assign(4, 0.0f);
  EXPECT_TRUE(ps::check(s, 4, 1));
  auto params = ps::check(s, 5, 1);
  ASSERT_FALSE(params);
  EXPECT_NE(params.error().message.find("4 parameters, the model 5"), std::string::npos);
  EXPECT_FALSE(ps::check(s, 4, 2));
  s.updates = 2;
  s.version = 1;
  EXPECT_FALSE(ps::check(s, 4, 1)) << "more updates than steps";
}

// --- the checkpoint file ---------------------------------------------------------------------

constexpr const char* spec_text = R"(name: ckpt
dataset: {format: csv, path: data/digits.csv.gz}
model:
  layers:
    - {type: dense, units: 6}
    - {type: batch_norm}
    - relu
    - dense
optimizer: {type: adam, learning_rate: 0.01, schedule: {type: cosine}}
batch_size: 8
epochs: 3
seed: 11
)";

scheduler::job_spec spec_of(const std::string& text) {
  auto s = scheduler::parse_job_spec(text, "test.yaml");
  EXPECT_TRUE(s) << s.error().message;
  return *s;
}

worker::network net_of(const scheduler::job_spec& spec) {
  auto n = worker::network::build(spec.model, {1, 1, 5}, 3);
  EXPECT_TRUE(n) << n.error().message;
  return std::move(*n);
}

std::filesystem::path temp_dir() {
  auto d = std::filesystem::temp_directory_path() / ("coach-ckpt-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

/// A state with every float distinct, its statistics' optimizer state zero.
ps::training_state some_state(const worker::network& net, std::size_t per) {
  ps::training_state s;
  s.version = 42;
  s.updates = 40;
  s.samples_applied = 336;
  for (std::size_t i = 0; i < net.num_params(); ++i) s.values.push_back(0.5f + float(i));
  if (per >= 1) s.state_a.assign(net.num_params(), 0.0f);
  if (per >= 2) s.state_b.assign(net.num_params(), 0.0f);
  for (std::size_t i = 0; i < net.num_params(); ++i) {
    bool statistic = false;
    for (const auto& r : net.statistic_ranges()) statistic |= i >= r.keys.begin && i < r.keys.end;
    if (statistic) continue;
    if (per >= 1) s.state_a[i] = -1.0f / float(i + 3);
    if (per >= 2) s.state_b[i] = 1e-7f * float(i + 1);
  }
  return s;
}

TEST(checkpoint_file, keeps_the_state_exactly_and_reads_as_a_saved_model) {
  const auto spec = spec_of(spec_text);
  const auto net = net_of(spec);
  const auto state = some_state(net, 2);
  const auto info = scheduler::describe_checkpoint(spec, state, 1, 2, 1, 80);
  const auto path = (temp_dir() / "one.safetensors").string();
  ASSERT_TRUE(scheduler::write_checkpoint(path, net, state, info, spec.name, {}));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  auto loaded = scheduler::load_checkpoint(path, spec, net, 80);
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(loaded->info, info);
  EXPECT_EQ(loaded->info.epochs_completed, 1u);
  EXPECT_EQ(loaded->info.workers, 2u);
  EXPECT_EQ(loaded->state.version, 42);
  EXPECT_EQ(loaded->state.updates, 40);
  EXPECT_EQ(loaded->state.samples_applied, 336u);
  EXPECT_TRUE(bitwise_equal(loaded->state.values, state.values));
  EXPECT_TRUE(bitwise_equal(loaded->state.state_a, state.state_a));
  EXPECT_TRUE(bitwise_equal(loaded->state.state_b, state.state_b));

  // A saved model as --save writes it, plus PyTorch-named optimizer tensors of the same shapes.
  auto file = worker::read_safetensors(path);
  ASSERT_TRUE(file);
  auto params = worker::unpack_params(net, *file);
  ASSERT_TRUE(params);
  EXPECT_TRUE(bitwise_equal(*params, state.values));
  EXPECT_EQ(file->metadata.at("coach.epochs"), "1");
  EXPECT_EQ(file->metadata.at("format"), "pt");
  ASSERT_NE(file->find("optimizer.exp_avg.0.weight"), nullptr);
  EXPECT_EQ(file->find("optimizer.exp_avg.0.weight")->shape, file->find("0.weight")->shape);
  ASSERT_NE(file->find("optimizer.exp_avg_sq.1.weight"), nullptr);
  EXPECT_EQ(file->find("optimizer.exp_avg.1.running_mean"), nullptr) << "statistics have none";
  EXPECT_EQ(file->find("optimizer.momentum_buffer.0.weight"), nullptr);
}

TEST(checkpoint_file, refuses_a_spec_it_does_not_fit_with_one_line) {
  const auto spec = spec_of(spec_text);
  const auto net = net_of(spec);
  const auto state = some_state(net, 2);
  const auto dir = temp_dir();
  const auto path = (dir / "two.safetensors").string();
  ASSERT_TRUE(scheduler::write_checkpoint(
      path, net, state, scheduler::describe_checkpoint(spec, state, 1, 2, 1, 80), spec.name, {}));
  auto refused = [&](const scheduler::job_spec& other, std::uint64_t rows, const std::string& why) {
    auto n = worker::network::build(other.model, {1, 1, 5}, 3);
    ASSERT_TRUE(n) << n.error().message;
    auto r = scheduler::load_checkpoint(path, other, *n, rows);
    ASSERT_FALSE(r) << why;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
    EXPECT_EQ(r.error().message.rfind(path + ": ", 0), 0u) << r.error().message;
    EXPECT_NE(r.error().message.find(why), std::string::npos) << r.error().message;
  };
  auto text = std::string(spec_text);
  auto with = [&](const std::string& from, const std::string& to) {
    auto t = text;
    t.replace(t.find(from), from.size(), to);
    return spec_of(t);
  };
  refused(with("units: 6", "units: 7"), 80, "the checkpoint's model differs from the spec's");
  refused(with("type: adam,", "type: momentum,"), 80,
          "trained with optimizer adam, the spec asks for momentum");
  refused(spec, 81, "trained on 80 training samples, the spec's data set has 81");
  refused(with("seed: 11", "seed: 12"), 80, "ran with seed 11, the spec says 12");
  refused(with("epochs: 3", "epochs: 1"), 80, "nothing left to train");

  // Not a checkpoint: a saved model, a junk file, no file.
  const auto model = (dir / "model.safetensors").string();
  ASSERT_TRUE(worker::write_safetensors(model, worker::pack_model(net, state.values, {}, {}, {})));
  auto plain = scheduler::load_checkpoint(model, spec, net, 80);
  ASSERT_FALSE(plain);
  EXPECT_NE(plain.error().message.find("not a checkpoint"), std::string::npos);
  const auto junk = (dir / "junk.safetensors").string();
  std::ofstream(junk) << "junk";
  auto bad = scheduler::load_checkpoint(junk, spec, net, 80);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, errc::parse_error);
  auto missing = scheduler::load_checkpoint((dir / "none").string(), spec, net, 80);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found);
}

TEST(checkpoint_schedule, every_epoch_at_zero_else_after_every_s_and_always_the_last) {
  scheduler::manual_clock clock;
  scheduler::checkpoint_schedule each(0, 3, clock);
  EXPECT_TRUE(each.due(0));
  EXPECT_TRUE(each.due(1));
  EXPECT_TRUE(each.due(2));

  scheduler::checkpoint_schedule timed(10, 6, clock);
  clock.advance(scheduler::seconds(4));
  EXPECT_FALSE(timed.due(0));  // 4 s after the start
  clock.advance(scheduler::seconds(6));
  EXPECT_TRUE(timed.due(1));  // 10 s
  clock.advance(scheduler::seconds(9));
  EXPECT_FALSE(timed.due(2));  // 9 s after the last
  clock.advance(scheduler::seconds(2));
  EXPECT_TRUE(timed.due(3));
  EXPECT_FALSE(timed.due(4));
  EXPECT_TRUE(timed.due(5)) << "the last epoch always";
}

}  // namespace
}  // namespace coach
