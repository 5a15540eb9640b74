// Function-mode invocations (worker/invocation.hpp): the pipe messages round-trip (with a
// sparse model's rows too) and refuse what is malformed; the row gradients are the loss's; the
// coach-invocation child answers a task with the same bits as the computation in this process,
// exits after its tasks, and ends out of memory under a cap too small for its model or timed out at
// its deadline, leaving its task unanswered.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <csignal>

#include "tests/helpers/invocation_fixtures.hpp"
#include "worker/bounded_process.hpp"
#include "worker/invocation.hpp"

namespace coach::worker {
namespace {

struct pipe_pair {
  int fd[2] = {-1, -1};
  pipe_pair() { EXPECT_EQ(::pipe2(fd, O_CLOEXEC), 0); }
  ~pipe_pair() {
    close_write();
    if (fd[0] >= 0) ::close(fd[0]);
  }
  void close_write() {
    if (fd[1] >= 0) ::close(fd[1]);
    fd[1] = -1;
  }
};

using testing::small_setup;
using testing::small_task;

TEST(invocation, messages_round_trip_and_a_clean_end_is_no_error) {
  pipe_pair p;
  const auto s = small_setup(true);
  auto t = small_task(s, 10, 3);
  t.passes = 3;
  invocation_result r{10, 12.5, {1.0f, -2.0f}, 4096};
  ASSERT_TRUE(write_setup(p.fd[1], s));
  ASSERT_TRUE(write_task(p.fd[1], t));
  ASSERT_TRUE(write_result(p.fd[1], r));
  p.close_write();
  auto s2 = read_setup(p.fd[0]);
  ASSERT_TRUE(s2 && *s2);
  EXPECT_EQ(**s2, s);
  auto t2 = read_task(p.fd[0]);
  ASSERT_TRUE(t2 && *t2);
  EXPECT_EQ(**t2, t);
  auto r2 = read_result(p.fd[0]);
  ASSERT_TRUE(r2 && *r2);
  EXPECT_EQ(**r2, r);
  auto end = read_task(p.fd[0]);
  ASSERT_TRUE(end);
  EXPECT_FALSE(*end) << "the writer closed between messages";
}

TEST(invocation, a_wrong_kind_bad_magic_or_a_cut_message_is_refused) {
  {
    pipe_pair p;
    ASSERT_TRUE(write_setup(p.fd[1], small_setup(false)));
    auto t = read_task(p.fd[0]);
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code, errc::protocol_error);
    EXPECT_NE(t.error().message.find("kind 1 where 2 was expected"), std::string::npos);
  }
  {
    pipe_pair p;
    const char junk[16] = "not a message!!";
    ASSERT_EQ(::write(p.fd[1], junk, sizeof junk), ssize_t(sizeof junk));
    auto s = read_setup(p.fd[0]);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, errc::protocol_error);
  }
  {
    pipe_pair p;
    const std::uint32_t head[2] = {0x56494f43, 2};
    const std::uint64_t size = 1000;
    ASSERT_EQ(::write(p.fd[1], head, sizeof head), ssize_t(sizeof head));
    ASSERT_EQ(::write(p.fd[1], &size, sizeof size), ssize_t(sizeof size));
    p.close_write();
    auto t = read_task(p.fd[0]);
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code, errc::io_error);
    EXPECT_NE(t.error().message.find("ended inside a message"), std::string::npos);
  }
}

TEST(invocation, a_task_that_does_not_fit_the_model_is_a_clear_error) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  const auto s = small_setup(false);
  auto t = small_task(s, 4, 1);
  t.params.pop_back();
  auto r = compute_invocation(s, t, *be);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::invalid_argument);
  EXPECT_NE(r.error().message.find("parameters for a model of"), std::string::npos);
  t = small_task(s, 4, 1);
  t.y[2] = 7;
  r = compute_invocation(s, t, *be);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("label 7 of 3 classes"), std::string::npos);
}

using testing::sparse_setup;
using testing::sparse_task;

TEST(invocation, a_task_with_rows_and_its_row_gradients_round_trip) {
  pipe_pair p;
  const auto s = sparse_setup();
  const auto t = sparse_task(s, 5, 3, 7);
  ASSERT_EQ(t.tables.size(), 2u);
  invocation_result r{5, 3.25, {0.5f}, 1, {{1.0f, 2.0f}, {3.0f}}};
  ASSERT_TRUE(write_setup(p.fd[1], s));
  ASSERT_TRUE(write_task(p.fd[1], t));
  ASSERT_TRUE(write_result(p.fd[1], r));
  p.close_write();
  auto s2 = read_setup(p.fd[0]);
  ASSERT_TRUE(s2 && *s2);
  EXPECT_EQ(**s2, s);
  EXPECT_EQ((*s2)->model.embeddings, s.model.embeddings);
  EXPECT_EQ((*s2)->fields, 2u);
  auto t2 = read_task(p.fd[0]);
  ASSERT_TRUE(t2 && *t2);
  EXPECT_EQ(**t2, t);
  auto r2 = read_result(p.fd[0]);
  ASSERT_TRUE(r2 && *r2);
  EXPECT_EQ(**r2, r);
}

/// The loss sum of `t` under `s`, computed by an invocation.
double loss_of(const invocation_setup& s, const invocation_task& t, kernels::backend& be) {
  return compute_invocation(s, t, be).value().loss_sum;
}

// The row gradients an invocation answers are the gradients of the task's loss sum with
// respect to the task's rows: central differences agree (float32: a loose bound).
TEST(invocation, the_row_gradients_are_the_losss_gradients_with_respect_to_the_rows) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  const auto s = sparse_setup();
  const auto t = sparse_task(s, 6, 3, 11);
  auto r = compute_invocation(s, t, *be);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->row_grads.size(), 2u);
  ASSERT_EQ(r->row_grads[0].size(), 3u * 4u);
  double largest = 0;
  for (std::size_t table = 0; table < 2; ++table) {
    for (std::size_t i = 0; i < r->row_grads[table].size(); ++i) {
      const float h = 1e-2f;
      auto up = t, down = t;
      up.tables[table].values[i] += h;
      down.tables[table].values[i] -= h;
      const double numeric = (loss_of(s, up, *be) - loss_of(s, down, *be)) / (2.0 * h);
      EXPECT_NEAR(r->row_grads[table][i], numeric, 2e-3) << "table " << table << " value " << i;
      largest = std::max(largest, std::abs(numeric));
    }
  }
  EXPECT_GT(largest, 1e-3) << "the rows move the loss";
}

TEST(invocation, rows_that_do_not_fit_the_models_tables_are_a_clear_error) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  const auto s = sparse_setup();
  auto t = sparse_task(s, 4, 3, 1);
  t.tables[1].local[2] = 3;
  auto r = compute_invocation(s, t, *be);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "invocation: table 1: a lookup of row 3 of 3");
  t = sparse_task(s, 4, 3, 1);
  t.tables[0].offsets.pop_back();
  r = compute_invocation(s, t, *be);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "invocation: table 0: offsets of 4 entries for 4 samples and 4 lookups");
  t = sparse_task(s, 4, 3, 1);
  t.tables[0].values.pop_back();
  r = compute_invocation(s, t, *be);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "invocation: table 0: 11 values are not rows of 4");
  t = sparse_task(s, 4, 3, 1);
  t.tables.pop_back();
  r = compute_invocation(s, t, *be);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "invocation: 1 tables' rows for a model of 2 tables");
  auto averaging = s;
  averaging.averaging = true;
  r = compute_invocation(averaging, sparse_task(s, 4, 3, 1), *be);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "invocation: a model with embedding tables under averaging");
}

result<bounded_process> start_child(std::uint64_t tasks, const process_limits& limits) {
  std::signal(SIGPIPE, SIG_IGN);  // a child that died must not kill the test on a write
  return bounded_process::start({COACH_INVOCATION, "--tasks", std::to_string(tasks)}, limits,
                                memory_enforcement::rlimit, true);
}

TEST(invocation, the_child_answers_with_the_bits_of_this_process_and_exits_after_its_tasks) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  for (bool averaging : {false, true}) {
    SCOPED_TRACE(averaging ? "averaging" : "gradient");
    const auto s = small_setup(averaging);
    auto child = start_child(2, {std::chrono::milliseconds(20'000), 0});
    ASSERT_TRUE(child) << child.error().to_string();
    ASSERT_TRUE(write_setup(child->input_fd(), s));
    for (unsigned seed : {1u, 2u}) {
      const auto t = small_task(s, averaging ? 10 : 4, seed);
      ASSERT_TRUE(write_task(child->input_fd(), t));
      auto answer = read_result(child->output_fd());
      ASSERT_TRUE(answer && *answer);
      auto here = compute_invocation(s, t, *be);
      ASSERT_TRUE(here);
      EXPECT_EQ((*answer)->samples, here->samples);
      EXPECT_EQ((*answer)->loss_sum, here->loss_sum);
      EXPECT_EQ((*answer)->out, here->out) << "the same bits as in this process";
      EXPECT_GT((*answer)->peak_rss_bytes, 0u);
    }
    auto end = child->wait();  // it stops after its 2 tasks without being told
    ASSERT_TRUE(end);
    EXPECT_EQ(end->end, process_end::completed);
  }
}

TEST(invocation, the_child_answers_a_task_with_rows_with_the_bits_of_this_process) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  const auto s = sparse_setup();
  auto child = start_child(1, {std::chrono::milliseconds(20'000), 0});
  ASSERT_TRUE(child) << child.error().to_string();
  ASSERT_TRUE(write_setup(child->input_fd(), s));
  const auto t = sparse_task(s, 8, 5, 4);
  ASSERT_TRUE(write_task(child->input_fd(), t));
  auto answer = read_result(child->output_fd());
  ASSERT_TRUE(answer && *answer);
  auto here = compute_invocation(s, t, *be);
  ASSERT_TRUE(here);
  EXPECT_EQ((*answer)->loss_sum, here->loss_sum);
  EXPECT_EQ((*answer)->out, here->out);
  EXPECT_EQ((*answer)->row_grads, here->row_grads);
  ASSERT_EQ(here->row_grads.size(), 2u);
  EXPECT_EQ(here->row_grads[0].size(), 5u * 4u);
  auto end = child->wait();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->end, process_end::completed);
}

TEST(invocation, a_model_too_big_for_the_cap_ends_out_of_memory_with_its_task_unanswered) {
  invocation_setup s = small_setup(true);
  s.inputs = 64;
  s.model.hidden = {60'000};  // ~4.5 M parameters: 18 MB a copy, several copies
  auto child = start_child(1, {std::chrono::milliseconds(60'000), 48ull << 20});
  ASSERT_TRUE(child) << child.error().to_string();
  ASSERT_TRUE(write_setup(child->input_fd(), s));
  const auto t = small_task(s, 4, 1);
  // The write may fail once the child is gone (its stdin closed): either way no answer comes.
  (void)write_task(child->input_fd(), t);
  auto answer = read_result(child->output_fd());
  EXPECT_TRUE(!answer || !*answer) << "no answer from a child out of memory";
  auto end = child->wait();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->end, process_end::out_of_memory);
}

TEST(invocation, a_child_past_its_deadline_is_killed_with_its_task_unanswered) {
  auto child = start_child(1, {std::chrono::milliseconds(300), 0});
  ASSERT_TRUE(child) << child.error().to_string();
  ASSERT_TRUE(write_setup(child->input_fd(), small_setup(false)));
  // No task comes: the child waits for one until its deadline.
  auto end = child->wait();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->end, process_end::timed_out);
  auto answer = read_result(child->output_fd());
  EXPECT_TRUE(answer && !*answer) << "its stdout ended without an answer";
}

}  // namespace
}  // namespace coach::worker
