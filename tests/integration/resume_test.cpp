// coach train --resume and periodic checkpoints (docs/design.md "Checkpoints"): a BSP run on
// digits with Adam, a cosine schedule and dropout, stopped after its first epoch's checkpoint
// and resumed on 3 shards instead of 2, ends with bitwise the parameters of the run that
// was never stopped; so does one whose `coach train` process is killed with SIGKILL once it
// printed its first checkpoint line (resumed on the same 2 shards); the checkpoint reads as a
// saved model; a checkpoint that does not fit the spec, a missing file and a junk file are
// one-line errors.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "actors/embedded_cluster.hpp"
#include "spec/checkpoint_file.hpp"
#include "tests/helpers/run_coach.hpp"
#include "worker/model_file.hpp"

extern char** environ;

namespace coach::actors {
namespace {

using coach::testing::run_coach;
using coach::testing::temp_file;

bool have_digits() {
  return std::filesystem::exists("data/digits.csv.gz");
}

/// Digits, 2 workers and 2 shards under BSP, Adam with a cosine schedule (and warm-up), dropout.
std::string spec_text(int epochs, int hidden = 32) {
  return "name: resume-digits\n"
         "dataset: {format: csv, path: " COACH_SOURCE_DIR
         "/data/digits.csv.gz, test_fraction: 0.2}\n"
         "model:\n"
         "  layers:\n"
         "    - {type: dense, units: " +
         std::to_string(hidden) +
         "}\n"
         "    - relu\n"
         "    - {type: dropout, p: 0.2}\n"
         "    - dense\n"
         "optimizer: {type: adam, learning_rate: 0.003, schedule: {type: cosine, min_lr: 0.0001, "
         "warmup_epochs: 0.5}}\n"
         "batch_size: 32\n"
         "epochs: " +
         std::to_string(epochs) +
         "\n"
         "consistency: bsp\n"
         "seed: 7\n"
         "workers: {min: 1, max: 4, initial: 2}\n"
         "shards: {min: 1, max: 4, initial: 2}\n"
         "slice_size: 1024\n"
         "backend: cpu\n";
}

scheduler::job_spec spec_of(const std::string& text) {
  auto spec = scheduler::parse_job_spec(text, "resume.yaml");
  EXPECT_TRUE(spec) << spec.error().message;
  return *spec;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(resume, a_run_stopped_after_its_first_checkpoint_ends_bitwise_where_the_straight_run_ends) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  const auto spec = spec_of(spec_text(3));
  auto straight = train_embedded(spec, {});
  ASSERT_TRUE(straight) << straight.error().to_string();
  ASSERT_EQ(straight->epochs.size(), 3u);

  // Stopped once the checkpoint of its first epoch is written. Its second epoch's steps wait
  // until that checkpoint is written, then run slowed down (the math does not change), so that
  // the stop comes before that epoch ends however late the first checkpoint is written.
  const auto path = temp_file("first.safetensors", "").string();
  std::atomic<bool> stop{false};
  std::vector<checkpoint_written> written;
  train_options first;
  first.checkpoint.path = path;
  first.stop = &stop;
  first.on_checkpoint = [&](const checkpoint_written& w) {
    written.push_back(w);
    stop = true;
  };
  first.slowdown = [&stop](std::uint32_t, std::int64_t step) {
    if (step < 23) return 1.0;
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // held till stop
    return 200.0;
  };
  auto stopped = train_embedded(spec, first);
  ASSERT_TRUE(stopped) << stopped.error().to_string();
  EXPECT_TRUE(stopped->cancelled);
  ASSERT_EQ(written.size(), 1u);
  EXPECT_FALSE(written[0].failure);
  EXPECT_EQ(written[0].epochs_completed, 1u);
  EXPECT_EQ(written[0].step, 23) << "1438 samples in chunks of 32, two per step";

  // Resumed on 3 shards (the cut does not change the math); workers: the checkpoint's.
  std::optional<scheduler::checkpoint_info> from;
  train_options again;
  again.resume = path;
  again.shards = 3;
  again.on_resume = [&](const scheduler::checkpoint_info& c) { from = c; };
  auto resumed = train_embedded(spec, again);
  ASSERT_TRUE(resumed) << resumed.error().to_string();
  ASSERT_TRUE(from);
  EXPECT_EQ(from->epochs_completed, 1u);
  EXPECT_EQ(from->workers, 2u);
  EXPECT_EQ(from->version, 23);
  EXPECT_FALSE(resumed->cancelled);
  EXPECT_EQ(resumed->workers, 2u);
  ASSERT_EQ(resumed->epochs.size(), 2u);
  EXPECT_EQ(resumed->epochs.front().epoch, 1u) << "epochs keep their numbers";
  EXPECT_TRUE(bitwise_equal(resumed->params, straight->params));
  EXPECT_EQ(resumed->test_accuracy, straight->test_accuracy);
  // The training loss is summed in the order the reports arrive: equal up to rounding.
  EXPECT_NEAR(resumed->epochs.back().train_loss, straight->epochs.back().train_loss, 1e-9);
}

/// `coach ARGS` started with its stderr on a pipe, read line by line.
struct child {
  pid_t pid = -1;
  FILE* err = nullptr;
  std::string seen;

  explicit child(const std::string& args) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    const std::string cmd = std::string(COACH_BINARY_DIR) + "/apps/coach " + args;
    const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
    // exec: the shell is replaced by coach, so the pid is coach's.
    const std::string exec_cmd = "exec " + cmd;
    argv[2] = exec_cmd.c_str();
    if (posix_spawn(&pid, "/bin/sh", &fa, nullptr, const_cast<char**>(argv), environ) != 0)
      pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    err = ::fdopen(fds[0], "r");
  }
  /// Reads until a line holding `text` (true) or the end of the output (false).
  bool await(const std::string& text) {
    char line[4096];
    while (err && std::fgets(line, sizeof line, err)) {
      seen += line;
      if (std::strstr(line, text.c_str())) return true;
    }
    return false;
  }
  /// The exit status once it ended (-1 killed by a signal).
  int wait() {
    if (err) std::fclose(err), err = nullptr;
    int status = 0;
    if (pid > 0) ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  ~child() {
    if (pid > 0) ::kill(pid, SIGKILL);
    wait();
  }
};

/// The tensors of two safetensors files are the same, name by name, byte for byte.
void expect_same_tensors(const std::string& a, const std::string& b) {
  auto fa = worker::read_safetensors(a);
  auto fb = worker::read_safetensors(b);
  ASSERT_TRUE(fa) << fa.error().message;
  ASSERT_TRUE(fb) << fb.error().message;
  ASSERT_EQ(fa->tensors.size(), fb->tensors.size());
  for (const auto& t : fa->tensors) {
    const auto* u = fb->find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(t.shape, u->shape) << t.name;
    EXPECT_TRUE(t.bytes == u->bytes) << t.name << " differs";
  }
}

TEST(resume, coach_train_killed_after_its_first_checkpoint_resumes_to_the_same_bits) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  const auto spec = temp_file("killed.yaml", spec_text(6, 64));
  const auto dir = spec.parent_path();
  const auto full = (dir / "full.safetensors").string();
  const auto ckpt = (dir / "killed-ckpt.safetensors").string();
  const auto resumed = (dir / "resumed.safetensors").string();
  auto straight = run_coach("train " + spec.string() + " --save " + full);
  ASSERT_EQ(straight.code, 0) << straight.output;

  {
    child c("train " + spec.string() + " --checkpoint " + ckpt + " --checkpoint-every 0");
    ASSERT_GT(c.pid, 0);
    ASSERT_TRUE(c.await("coach: checkpoint after epoch 1 ")) << c.seen;
    ASSERT_EQ(::kill(c.pid, SIGKILL), 0);
    EXPECT_EQ(c.wait(), -SIGKILL) << c.seen;
  }
  auto file = worker::read_safetensors(ckpt);
  ASSERT_TRUE(file) << file.error().message;
  auto info = scheduler::checkpoint_info_of(*file);
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_GE(info->epochs_completed, 1u);
  ASSERT_LT(info->epochs_completed, 6u) << "killed before its end";

  // The checkpoint is a saved model too.
  auto eval = run_coach("eval " + ckpt + " --data " + spec.string());
  EXPECT_EQ(eval.code, 0) << eval.output;
  EXPECT_NE(eval.output.find("test accuracy"), std::string::npos) << eval.output;

  auto again = run_coach("train " + spec.string() + " --resume " + ckpt + " --save " + resumed +
                         " --checkpoint " + ckpt);
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("coach: resuming from " + ckpt + " after epoch"), std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("coach: checkpoint after epoch 6 "), std::string::npos)
      << again.output;
  expect_same_tensors(full, resumed);
}

TEST(resume, a_checkpoint_that_does_not_fit_a_missing_file_and_junk_are_one_line_errors) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  const auto spec = temp_file("small.yaml", spec_text(2, 16));
  const auto ckpt = (spec.parent_path() / "small-ckpt.safetensors").string();
  auto made = run_coach("train " + spec.string() + " --checkpoint " + ckpt);
  ASSERT_EQ(made.code, 0) << made.output;
  EXPECT_NE(made.output.find("coach: checkpoint after epoch 1 (step 23) written to " + ckpt),
            std::string::npos)
      << made.output;
  auto one_line = [](const std::string& out, const std::string& want) {
    EXPECT_NE(out.find(want), std::string::npos) << out;
    // The error is the last line, alone.
    const auto at = out.rfind("coach: ");
    ASSERT_NE(at, std::string::npos) << out;
    EXPECT_EQ(out.find('\n', at), out.size() - 1) << out;
  };
  // Every epoch of the spec is trained already.
  auto done = run_coach("train " + spec.string() + " --resume " + ckpt);
  EXPECT_EQ(done.code, 2);
  one_line(done.output, "nothing left to train");
  // Another model.
  const auto other = temp_file("other.yaml", spec_text(3, 24));
  auto model = run_coach("train " + other.string() + " --resume " + ckpt);
  EXPECT_EQ(model.code, 2);
  one_line(model.output, ckpt + ": the checkpoint's model differs from the spec's");
  // Another optimizer.
  auto text = spec_text(3, 16);
  text.replace(text.find("type: adam"), 10, "type: adamw");
  const auto adamw = temp_file("adamw.yaml", text);
  auto opt = run_coach("train " + adamw.string() + " --resume " + ckpt);
  EXPECT_EQ(opt.code, 2);
  one_line(opt.output, "trained with optimizer adam, the spec asks for adamw");
  // No file; a junk file; a saved model without optimizer state.
  auto missing = run_coach("train " + spec.string() + " --resume /nonexistent.safetensors");
  EXPECT_EQ(missing.code, 2);
  one_line(missing.output, "/nonexistent.safetensors: no such file");
  const auto junk = temp_file("junk.safetensors", "not a checkpoint at all");
  auto bad = run_coach("train " + spec.string() + " --resume " + junk.string());
  EXPECT_EQ(bad.code, 2);
  one_line(bad.output, "not a safetensors file");
  const auto saved = (spec.parent_path() / "saved.safetensors").string();
  ASSERT_EQ(run_coach("train " + other.string() + " --save " + saved).code, 0);
  auto plain = run_coach("train " + other.string() + " --resume " + saved);
  EXPECT_EQ(plain.code, 2);
  one_line(plain.output, "not a checkpoint");
  // Flags that make no sense.
  auto every = run_coach("train " + spec.string() + " --checkpoint-every 5");
  EXPECT_EQ(every.code, 2);
  one_line(every.output, "--checkpoint-every needs --checkpoint FILE");
  auto nodir = run_coach("train " + spec.string() + " --checkpoint /nonexistent/dir/c.safetensors");
  EXPECT_EQ(nodir.code, 2);
  one_line(nodir.output, "no directory /nonexistent/dir");
}

}  // namespace
}  // namespace coach::actors
