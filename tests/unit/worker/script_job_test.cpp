// worker::script_job: a script's model registered where `coach submit` runs (its first process
// run, its layout and initial values taken, its folder packed), and run again from a host's own
// copy of the files (a private folder, a pool that checks every process against the registered
// layout), with tests/python/scripts/external_worker.py over the `coach` package. The parts
// that start processes need Debian's python3 with NumPy and skip without it.
#include "worker/script_job.hpp"
#include "tests/helpers/numpy_python.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "worker/external_pool.hpp"
#include "worker/script_bundle.hpp"

namespace coach::worker {
namespace {

namespace fs = std::filesystem;

const std::string& python = coach_tests::numpy_python;
using coach_tests::have_numpy;

class script_job_test : public ::testing::Test {
 protected:
  fs::path dir;   ///< the user's folder: a copy of the test script and a data file
  fs::path root;  ///< the host's folder for job folders
  void SetUp() override {
    ::setenv("COACH_PYTHON_PACKAGE", (std::string(COACH_SOURCE_DIR) + "/python").c_str(), 1);
    dir = fs::temp_directory_path() /
          ("coach-script-job-test-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir / "user");
    fs::copy_file(std::string(COACH_SOURCE_DIR) + "/tests/python/scripts/external_worker.py",
                  dir / "user" / "external_worker.py");
    std::ofstream(dir / "user" / "notes.txt") << "beside the script\n";
    root = dir / "coach-node-test";
  }
  void TearDown() override { fs::remove_all(dir); }

  script_config config(std::string mode) const {
    script_config c;
    c.path = (dir / "user" / "external_worker.py").string();
    c.args = {std::move(mode)};
    c.start_timeout_s = 60;
    return c;
  }
};

TEST_F(script_job_test, the_submitter_registers_the_model_and_packs_the_folder) {
  COACH_NEED_NUMPY();
  auto p = prepare_submission(config("normal"), 5, python);
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->entry, "external_worker.py");
  auto layout = parse_hello(p->layout_json);
  ASSERT_TRUE(layout) << layout.error().to_string();
  EXPECT_EQ(layout->floats, 6u);
  EXPECT_EQ(layout->samples, 100u);
  ASSERT_TRUE(p->initial);
  EXPECT_EQ(*p->initial, (std::vector<float>{1, 2, 3, 4, 0.5f, 0.5f}));
  auto files = unpack_bundle(*p->bundle);
  ASSERT_TRUE(files) << files.error().to_string();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].path, "external_worker.py");
  EXPECT_EQ((*files)[1].path, "notes.txt");
}

TEST_F(script_job_test, a_script_that_fails_before_init_fails_the_submission_with_its_error) {
  COACH_NEED_NUMPY();
  auto p = prepare_submission(config("fail-before-init"), 5, python);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, errc::io_error);
  EXPECT_NE(p.error().message.find("before it called init"), std::string::npos)
      << p.error().message;
  EXPECT_NE(p.error().message.find("the data set is not where the script looks"), std::string::npos)
      << p.error().message;
}

TEST_F(script_job_test, a_folder_over_the_limit_fails_before_the_script_runs) {
  std::ofstream(dir / "user" / "big.bin") << std::string(1 << 20, 'x');
  // never-init would hold the test for its timeout if it ran: the limit is said first.
  auto files = read_script_folder((dir / "user").string(), 1 << 19);
  ASSERT_FALSE(files);
  EXPECT_EQ(files.error().code, errc::invalid_argument);
}

TEST_F(script_job_test, a_host_runs_checked_processes_from_its_own_copy_of_the_files) {
  COACH_NEED_NUMPY();
  auto p = prepare_submission(config("normal"), 5, python);
  ASSERT_TRUE(p) << p.error().to_string();
  fs::remove_all(dir / "user");  // the host never reads the submitter's folder
  std::string folder;
  {
    auto model =
        open_submitted(*p, p->initial, config("normal"), 5, 9, {python, root.string()}, 1, "job-9");
    ASSERT_TRUE(model) << model.error().to_string();
    EXPECT_EQ((*model)->layout.floats, 6u);
    EXPECT_EQ((*model)->initial, p->initial);
    const auto& opt = (*model)->pool->options();
    folder = fs::path(opt.script).parent_path().string();
    EXPECT_EQ(fs::path(folder).parent_path(), root);
    EXPECT_TRUE(fs::exists(fs::path(folder) / "notes.txt"));
    EXPECT_EQ(opt.threads, 1);
    EXPECT_EQ(opt.job, 9u);
    auto proc = (*model)->pool->take("worker 0");
    ASSERT_TRUE(proc) << proc.error().to_string();
    std::vector<float> params{1, 1, 1, 1, 0, 0}, grad(6);
    const std::uint32_t idx[] = {1, 2};
    auto step = (*proc)->step(0, 0, params.data(), idx, grad.data());
    ASSERT_TRUE(step) << step.error().to_string();
    EXPECT_EQ(step->loss_sum, 3.0);
    EXPECT_EQ(grad[0], 1 * 2 + 3.0f);
  }
  EXPECT_FALSE(fs::exists(folder)) << "the job's folder goes with its model";
}

TEST_F(script_job_test, a_hosts_process_of_another_layout_is_refused_in_one_line) {
  COACH_NEED_NUMPY();
  auto p = prepare_submission(config("normal"), 5, python);
  ASSERT_TRUE(p) << p.error().to_string();
  auto model = open_submitted(*p, nullptr, config("other-layout"), 5, 9, {python, root.string()}, 1,
                              "job-9");
  ASSERT_TRUE(model) << model.error().to_string();
  auto proc = (*model)->pool->take("worker 1");
  ASSERT_FALSE(proc);
  EXPECT_EQ(proc.error().code, errc::invalid_argument);
  EXPECT_NE(proc.error().message.find("tensor 'w' has shape [5] where the first process "
                                      "registered [4]"),
            std::string::npos)
      << proc.error().message;
}

TEST_F(script_job_test, a_hostile_payload_is_refused_before_anything_is_written) {
  script_payload p;
  p.entry = "run.py";
  p.layout_json = R"({"samples":4,"tensors":[{"name":"w","shape":[2],"dtype":"float32",)"
                  R"("kind":"param"}]})";
  const bundle_file escape{"../run.py", false, "print(1)"};
  p.bundle = std::make_shared<const std::vector<std::byte>>(pack_bundle(std::span(&escape, 1)));
  auto hostile =
      open_submitted(p, nullptr, config("normal"), 1, 1, {python, root.string()}, 1, "job-1");
  ASSERT_FALSE(hostile);
  EXPECT_EQ(hostile.error().code, errc::protocol_error);
  EXPECT_NE(hostile.error().message.find("leaves the bundle's folder"), std::string::npos);
  EXPECT_FALSE(fs::exists(root)) << "nothing written";
  // The values of another size than the layout's, and a script the bundle lacks.
  const bundle_file other{"other.py", false, "print(1)"};
  p.bundle = std::make_shared<const std::vector<std::byte>>(pack_bundle(std::span(&other, 1)));
  auto sized = payload_model(p, std::make_shared<const std::vector<float>>(3));
  ASSERT_FALSE(sized);
  EXPECT_NE(sized.error().message.find("3 floats where its layout has 2"), std::string::npos);
  auto missing =
      open_submitted(p, nullptr, config("normal"), 1, 1, {python, root.string()}, 1, "job-1");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("'run.py' is not among the 1 file(s)"), std::string::npos)
      << missing.error().message;
}

}  // namespace
}  // namespace coach::worker
