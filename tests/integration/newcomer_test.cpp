// What a newcomer hit trying Coach from its README (issue 41, item 6), as the `coach` command
// answers now: each case runs the command a user runs and checks its exit code and its words.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/integration/process_harness.hpp"

namespace {

using namespace itest;

const std::string source = COACH_SOURCE_DIR;
const std::string coach_bin = std::string(COACH_BINARY_DIR) + "/apps/coach";

/// `sh -c COMMAND` run in `dir`, its stdout and stderr apart (for pipes into coach).
run_result shell(const std::string& dir, const std::string& command) {
  static int n = 0;
  const auto out = work_dir() / ("sh-out" + std::to_string(++n));
  const auto err = work_dir() / ("sh-err" + std::to_string(n));
  const std::string cmd =
      "cd '" + dir + "' && (" + command + ") >'" + out.string() + "' 2>'" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  run_result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

/// The last line of `text` (without its newline).
std::string last_line(std::string text) {
  if (!text.empty() && text.back() == '\n') text.pop_back();
  const auto nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

/// A folder of the test's own, made afresh.
fs::path fresh_dir(const std::string& name) {
  const auto d = work_dir() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// A small digits job whose data set is `data` (as written in the spec).
std::string digits_spec(const std::string& data, const std::string& extra = "") {
  return "name: newcomer\n"
         "dataset: {format: csv, path: " +
         data +
         ", test_fraction: 0.2}\n"
         "model: {type: mlp, hidden: [16]}\n"
         "optimizer: {type: sgd, learning_rate: 0.1}\n"
         "batch_size: 32\nepochs: 2\nworkers: 1\nshards: 1\nbackend: cpu\n" +
         extra;
}

bool have_digits() {
  return fs::exists(source + "/data/digits.csv.gz");
}

TEST(newcomer, a_tab_in_a_specs_indentation_is_named_with_its_line_and_column) {
  const auto dir = fresh_dir("tab");
  std::ofstream(dir / "tab.yaml") << "name: t\ndataset:\n\tpath: x.csv\nepochs: 1\n";
  auto r = coach("train " + (dir / "tab.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "coach: " + (dir / "tab.yaml").string() +
                       ":3:1: a tab indents this line: YAML indents with spaces\n");
}

TEST(newcomer, a_csv_gz_that_is_not_gzip_says_so_with_its_first_bytes) {
  const auto dir = fresh_dir("notgz");
  std::ofstream(dir / "rows.csv.gz") << "hello,1\nworld,2\n";
  std::ofstream(dir / "job.yaml") << digits_spec("rows.csv.gz");
  auto r = coach("train " + (dir / "job.yaml").string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(last_line(r.err),
            "coach: " + (dir / "rows.csv.gz").string() +
                ": is not gzip data though its name ends in .gz: it starts with 68 65 6c 6c, "
                "gzip with 1f 8b (compress it with gzip, or drop .gz from its name)")
      << r.err;
}

TEST(newcomer, a_data_path_that_is_a_directory_exits_2_naming_it) {
  const auto dir = fresh_dir("dirdata");
  fs::create_directories(dir / "digits");
  std::ofstream(dir / "job.yaml") << digits_spec("digits");
  auto r = coach("train " + (dir / "job.yaml").string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(last_line(r.err),
            "coach: " + (dir / "digits").string() + ": is a directory, expected a data file")
      << r.err;
}

TEST(newcomer, predict_reads_rows_from_a_pipe_and_from_dash) {
  if (!have_digits()) GTEST_SKIP() << "no data/digits.csv.gz: run scripts/setup.sh";
  const auto dir = fresh_dir("predict");
  const auto model = (dir / "digits.safetensors").string();
  auto train = coach("train examples/digits-mlp.yaml --save " + model);
  ASSERT_EQ(train.code, 0) << train.err;
  // Five rows of features (the label, the 65th column, cut off).
  const std::string rows =
      "gzip -dc '" + source + "/data/digits.csv.gz' | head -n 5 | cut -d, -f1-64";
  auto file = shell(dir.string(),
                    rows + " > rows.csv && '" + coach_bin + "' predict '" + model + "' rows.csv");
  ASSERT_EQ(file.code, 0) << file.err;
  EXPECT_EQ(count(file.out, "\n"), 5u) << file.out;
  for (const std::string input : {"-", "/dev/stdin"}) {
    SCOPED_TRACE(input);
    auto piped =
        shell(dir.string(), rows + " | '" + coach_bin + "' predict '" + model + "' " + input);
    EXPECT_EQ(piped.code, 0) << piped.err;
    EXPECT_EQ(piped.out, file.out) << "the same labels as from the file";
  }
  // A bad row read from standard input is named as such.
  auto bad = shell(dir.string(), "echo 1,2,x | '" + coach_bin + "' predict '" + model + "' -");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err,
            "coach: <stdin>: line 1, column 3: 'x' is not a number (a header? give --header)\n");
}

TEST(newcomer, an_unknown_command_is_named_with_the_nearest_one) {
  auto r = coach("trian examples/digits-mlp.yaml");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "coach: unknown command 'trian' (did you mean 'train'?); coach --help lists the "
            "commands\n");
  r = coach("stauts");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "coach: unknown command 'stauts' (did you mean 'status'?); coach --help lists the "
            "commands\n");
  r = coach("frobnicate");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "coach: unknown command 'frobnicate'; coach --help lists the commands\n");
}

TEST(newcomer, readmes_train_command_works_from_the_repository_and_from_elsewhere) {
  if (!have_digits()) GTEST_SKIP() << "no data/digits.csv.gz: run scripts/setup.sh";
  // The spec says `path: ../data/digits.csv.gz`: its own folder's, wherever coach runs.
  const std::string reads = "coach: training 'digits-mlp' on " + source + "/data/digits.csv.gz\n";
  auto here = coach("train examples/digits-mlp.yaml");
  EXPECT_EQ(here.code, 0) << here.err;
  EXPECT_EQ(here.err.rfind(reads, 0), 0u) << here.err;
  auto elsewhere = shell(fs::temp_directory_path().string(),
                         "'" + coach_bin + "' train '" + source + "/examples/digits-mlp.yaml'");
  EXPECT_EQ(elsewhere.code, 0) << elsewhere.err;
  EXPECT_EQ(elsewhere.err.rfind(reads, 0), 0u) << elsewhere.err;
  EXPECT_NE(elsewhere.err.find("coach: done after 20 epoch(s)"), std::string::npos)
      << elsewhere.err;
}

TEST(newcomer, a_submitted_specs_relative_data_path_means_the_specs_folder) {
  if (!have_digits()) GTEST_SKIP() << "no data/digits.csv.gz: run scripts/setup.sh";
  // The spec and its data in a folder of their own; submitted from the source tree.
  const auto dir = fresh_dir("submitted");
  fs::copy_file(source + "/data/digits.csv.gz", dir / "my-digits.csv.gz");
  std::ofstream(dir / "job.yaml") << digits_spec("my-digits.csv.gz");
  const std::string at = free_address();
  std::vector<node_process> nodes;
  nodes.push_back(start_node({"--listen", at, "--scheduler", "--store", "", "--name", "solo",
                              "--cpus", "4", "--heartbeat", "0.25"},
                             "solo", "newcomer-solo"));
  ASSERT_TRUE(await_nodes_alive(at, 1)) << slurp(nodes[0].log);
  auto r = coach("submit " + (dir / "job.yaml").string() + " --wait --json --at " + at);
  EXPECT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_EQ(state_of(r.out), "succeeded") << r.out;
  stop_nodes(nodes);
}

TEST(newcomer, a_study_of_one_epoch_warns_that_its_times_are_start_up) {
  // Said before anything runs (here the spec is missing, so nothing does).
  const std::string missing = (work_dir() / "no-such-spec.yaml").string();
  auto r = coach("experiment prediction --epochs 1 --spec " + missing);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("coach: experiment: warning: --epochs 1 is too short to time: a job's "
                        "first epoch includes its start, so it is left out when there are "
                        "more; the epoch times, and the model's error fitted on them, mean "
                        "something from --epochs 3 (the median of 2 timed epochs a job)\n",
                        0),
            0u)
      << r.err;
  // Three epochs, or a study that times no epoch (policies), are not warned.
  for (const std::string args : {"prediction --epochs 3", "policies --epochs 1"}) {
    r = coach("experiment " + args + " --spec " + missing);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  }
}

TEST(newcomer, a_study_on_a_given_cluster_leaves_no_job_in_its_list) {
  if (!have_digits()) GTEST_SKIP() << "no data/digits.csv.gz: run scripts/setup.sh";
  const std::string at = free_address();
  std::vector<node_process> nodes;
  nodes.push_back(start_node({"--listen", at, "--scheduler", "--store", "", "--name", "solo",
                              "--cpus", "8", "--heartbeat", "0.25"},
                             "solo", "newcomer-study"));
  ASSERT_TRUE(await_nodes_alive(at, 1)) << slurp(nodes[0].log);
  auto r = coach("experiment prediction --at " + at +
                 " --epochs 3 --train-limit 0 --spec examples/digits-mlp.yaml --out " +
                 (work_dir() / "given-cluster").string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("coach: experiment: 8 of its 8 job(s) removed from the cluster's list\n"),
            std::string::npos)
      << r.err;
  auto st = coach("status --json --at " + at);
  ASSERT_EQ(st.code, 0) << st.err;
  EXPECT_EQ(json_field(parse_json(st.out), "jobs"), nlohmann::json::array()) << st.out;
  stop_nodes(nodes);
}

TEST(newcomer, dropouts_rate_is_refused_naming_p) {
  const auto dir = fresh_dir("dropout");
  std::ofstream(dir / "job.yaml")
      << "name: d\ndataset: {format: csv, path: x.csv}\nmodel:\n  layers:\n"
         "    - {type: dense, units: 8}\n    - {type: dropout, rate: 0.2}\n    - dense\n"
         "optimizer: {type: sgd}\nbatch_size: 8\nepochs: 1\n";
  auto r = coach("train " + (dir / "job.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "coach: " + (dir / "job.yaml").string() +
                       ":6: field 'model.layers[1].rate' is not a dropout field: its "
                       "probability is p, as PyTorch's nn.Dropout(p) ({type: dropout, p: 0.2})\n");
}

}  // namespace
