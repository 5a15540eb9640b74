// worker::external_process and external_pool against a real script
// (tests/python/scripts/external_worker.py over the `coach` package): the handshake that
// registers or checks a layout, steps whose gradients come back exactly through the shared
// file, evaluation, a clean stop, and every way a process fails named in one line. Needs Debian's
// python3 with NumPy (python3-numpy); skips with the reason otherwise.
#include "tests/helpers/numpy_python.hpp"
#include "worker/external_pool.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <thread>

#include "worker/external_process.hpp"

namespace coach::worker {
namespace {

const std::string& python = coach_tests::numpy_python;
using coach_tests::have_numpy;

script_options options(std::string mode, double timeout_s = 60) {
  script_options o;
  o.python = python;
  o.script = std::string(COACH_SOURCE_DIR) + "/tests/python/scripts/external_worker.py";
  o.args = {std::move(mode)};
  o.package_dir = std::string(COACH_SOURCE_DIR) + "/python";
  o.seed = 5;
  o.start_timeout_s = timeout_s;
  return o;
}

std::unique_ptr<external_process> started(const std::string& mode, double timeout_s = 60) {
  auto p = external_process::start(options(mode, timeout_s), "worker 1");
  EXPECT_TRUE(p) << p.error().to_string();
  return p ? std::move(*p) : nullptr;
}

TEST(external_process, the_first_process_registers_its_layout_and_initial_values) {
  COACH_NEED_NUMPY();
  auto p = started("normal");
  std::vector<float> initial;
  auto layout = p->handshake(nullptr, &initial);
  ASSERT_TRUE(layout) << layout.error().to_string();
  ASSERT_EQ(layout->tensors.size(), 2u);
  EXPECT_EQ(layout->tensors[0].name, "w");
  EXPECT_EQ(layout->tensors[1].kind, tensor_kind::buffer);
  EXPECT_EQ(layout->floats, 6u);
  EXPECT_EQ(layout->samples, 100u);
  EXPECT_EQ(initial, (std::vector<float>{1, 2, 3, 4, 0.5f, 0.5f}));
  // The shared file is gone once both sides mapped it.
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_FALSE(
        e.path().filename().string().starts_with("coach-" + std::to_string(::getpid()) + "-"))
        << e.path();
}

TEST(external_process, a_step_hands_over_the_parameters_and_returns_the_gradient_exactly) {
  COACH_NEED_NUMPY();
  auto p = started("normal");
  std::vector<float> initial;
  ASSERT_TRUE(p->handshake(nullptr, &initial));
  const std::vector<float> w = {0.25f, -1, 2, 8, 3, 4};
  const std::vector<std::uint32_t> idx = {3, 9, 40};
  std::vector<float> grad(6, -99);
  for (std::int64_t s = 0; s < 3; ++s) {
    auto r = p->step(s, 1, w.data(), idx, grad.data());
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->samples, 3u);
    EXPECT_EQ(r->loss_sum, 52.0);
    // w * n + sum(indices); the buffer's value + 1, times n
    EXPECT_EQ(grad, (std::vector<float>{52.75f, 49, 58, 76, 12, 15}));
  }
  auto ev = p->evaluate(4, w.data());
  ASSERT_TRUE(ev) << ev.error().to_string();
  EXPECT_EQ(ev->epoch, 4u);
  EXPECT_EQ(ev->samples, 10u);
  EXPECT_EQ(ev->correct, 7u);
  EXPECT_DOUBLE_EQ(ev->loss_sum, 9.25);
  p->stop();  // steps() ends; the script runs on to its end
}

TEST(external_process, a_later_process_is_checked_against_the_first_layout) {
  COACH_NEED_NUMPY();
  auto first = started("normal");
  std::vector<float> initial;
  auto layout = first->handshake(nullptr, &initial);
  ASSERT_TRUE(layout);
  auto same = started("normal");
  std::vector<float> untouched{42};
  ASSERT_TRUE(same->handshake(&*layout, &untouched));
  EXPECT_EQ(untouched, std::vector<float>{42}) << "only the first sends initial values";
  auto other = started("other-layout");
  auto refused = other->handshake(&*layout, nullptr);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_EQ(refused.error().message,
            "worker 1: the script's layout is refused: tensor 'w' has shape [5] where the first "
            "process registered [4]");
}

TEST(external_process, a_script_that_fails_before_init_is_named_with_its_traceback) {
  COACH_NEED_NUMPY();
  auto p = started("fail-before-init");
  auto r = p->handshake(nullptr, nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::io_error);
  const auto& m = r.error().message;
  EXPECT_NE(m.find("external_worker.py (worker 1, pid "), std::string::npos) << m;
  EXPECT_NE(m.find("exited with code 1 before it called init"), std::string::npos) << m;
  EXPECT_NE(m.find("RuntimeError: the data set is not where the script looks"), std::string::npos)
      << m;
}

TEST(external_process, a_script_that_never_calls_init_is_killed_at_its_timeout) {
  COACH_NEED_NUMPY();
  auto p = started("never-init", 0.5);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = p->handshake(nullptr, nullptr);
  ASSERT_FALSE(r);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(r.error().message,
            "worker 1: the script external_worker.py did not call init within 0.5 s "
            "(model.start_timeout_s); killed");
}

TEST(external_process, junk_on_the_channel_ends_the_process) {
  COACH_NEED_NUMPY();
  auto p = started("junk");
  auto r = p->handshake(nullptr, nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_NE(r.error().message.find("sent 'hello world' where its hello was due"), std::string::npos)
      << r.error().message;
}

TEST(external_process, a_process_killed_mid_step_is_an_error_at_once) {
  COACH_NEED_NUMPY();
  auto p = started("kill-at-step:2:0");
  std::vector<float> initial;
  ASSERT_TRUE(p->handshake(nullptr, &initial));
  std::vector<float> grad(6);
  const std::vector<std::uint32_t> idx = {1, 2};
  ASSERT_TRUE(p->step(1, 0, initial.data(), idx, grad.data()));
  auto r = p->step(2, 0, initial.data(), idx, grad.data());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::io_error);
  EXPECT_NE(r.error().message.find("was killed by signal 9 (Killed) during step 2"),
            std::string::npos)
      << r.error().message;
  EXPECT_FALSE(p->ready());
}

TEST(external_process, an_interpreter_that_is_not_there_is_named) {
  auto o = options("normal");
  o.python = "/nonexistent/python";
  auto p = external_process::start(o, "worker 0");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().message,
            "worker 0: cannot run /nonexistent/python " + o.script + ": No such file or directory");
}

TEST(external_pool, a_warm_process_is_ready_before_it_is_taken) {
  COACH_NEED_NUMPY();
  external_pool pool(options("normal"));
  ASSERT_TRUE(pool.register_first());
  // The registering process is kept for the evaluator (the script evaluates).
  auto first = pool.take_for_evaluation("job 1 evaluator");
  ASSERT_TRUE(first);
  EXPECT_EQ((*first)->who(), "job 1 evaluator");
  EXPECT_EQ(pool.warm(), 0u);
  pool.keep_warm(1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (pool.warm() < 1 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(pool.warm(), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  auto second = pool.take("worker 1");
  ASSERT_TRUE(second) << second.error().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
  EXPECT_EQ((*second)->who(), "worker 1");
  std::vector<float> grad(6);
  const std::vector<std::uint32_t> idx = {7};
  auto r = (*second)->step(0, 1, pool.initial()->data(), idx, grad.data());
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(grad[0], 8.0f);  // 1 * 1 + 7
}

TEST(external_process, a_scripts_table_rows_go_in_and_their_gradients_come_out) {
  COACH_NEED_NUMPY();
  auto o = options("normal");
  o.script = std::string(COACH_SOURCE_DIR) + "/tests/python/scripts/table_worker.py";
  auto started_p = external_process::start(o, "worker 1");
  ASSERT_TRUE(started_p) << started_p.error().to_string();
  auto& p = *started_p;
  std::vector<float> initial;
  auto layout = p->handshake(nullptr, &initial);
  ASSERT_TRUE(layout) << layout.error().to_string();
  ASSERT_EQ(layout->tables.size(), 1u);
  EXPECT_EQ(layout->tables[0], (external_table{"emb", 10, 2, 0.5f}));
  const std::vector<float> w = {1, 2};
  std::vector<float> grad(2);
  for (std::int64_t s = 0; s < 2; ++s) {
    // Samples 13, 3, 25 and 7 look up rows 3 (twice), 5 and 7: each once, ascending.
    const std::vector<std::uint32_t> idx = {13, 3, 25, 7};
    auto ids = p->lookup(s, idx);
    ASSERT_TRUE(ids) << ids.error().to_string();
    ASSERT_EQ(*ids, (std::vector<std::vector<std::uint64_t>>{{3, 5, 7}}));
    const std::vector<float> values = {0.5f, 1, 2, -1, 0.25f, 4};  // rows 3, 5, 7
    std::vector<std::vector<float>> row_grads;
    const external_step_rows rows{{std::span<const float>(values)}, &row_grads};
    auto r = p->step(s, 0, w.data(), idx, grad.data(), nullptr, &rows);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->loss_sum, 6.75);
    EXPECT_EQ(grad, (std::vector<float>{4, 4}));
    EXPECT_EQ(row_grads, (std::vector<std::vector<float>>{{4, 5, 9, 3, 7.5f, 15}}));
  }
  // The rows region is gone once both sides mapped it.
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_FALSE(
        e.path().filename().string().starts_with("coach-" + std::to_string(::getpid()) + "-rows-"))
        << e.path();
  // An evaluation's pull is answered from the row source.
  std::vector<std::uint64_t> asked;
  const external_row_source source = [&](std::uint32_t t, std::span<const std::uint64_t> ids,
                                         std::span<float> out) -> result<void> {
    EXPECT_EQ(t, 0u);
    asked.assign(ids.begin(), ids.end());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = float(ids[i / 2]) + 0.5f * float(i % 2);
    return {};
  };
  auto ev = p->evaluate(3, w.data(), &source);
  ASSERT_TRUE(ev) << ev.error().to_string();
  EXPECT_EQ(asked, (std::vector<std::uint64_t>{2, 7}));
  EXPECT_EQ(ev->loss_sum, 2 + 2.5 + 7 + 7.5);
  // Without a source (a job without tables) a pull is an error naming it.
  auto none = p->evaluate(4, w.data());
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("the script pulled rows, but the job has no tables"),
            std::string::npos)
      << none.error().message;
}

}  // namespace
}  // namespace coach::worker
