// `coach data ctr` as a user runs it: the rows and the JSON summary written where asked, the
// planted figures printed, and bad values refused with one line and exit 2.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/helpers/run_coach.hpp"
#include "worker/ctr_data.hpp"

namespace {

namespace fs = std::filesystem;
using coach::testing::run_coach;

fs::path fresh_dir() {
  const fs::path dir = fs::temp_directory_path() / ("coach-data-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(data_cli, ctr_writes_the_rows_and_a_summary_whose_figures_it_prints) {
  const fs::path dir = fresh_dir();
  const std::string out = (dir / "c.tsv.gz").string();
  auto r = run_coach("data ctr --rows 3000 --out " + out +
                     " --fields 4 --dense 3 --max-vocab 1000 --signal-ids 10 --seed 9");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote 3000 rows to " + out), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(2700 training, then 300 held out)"), std::string::npos) << r.output;

  coach::worker::ctr_options read;
  read.path = out;
  read.n_dense = 3;
  read.n_fields = 4;
  auto set = coach::worker::load_ctr(read);
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_EQ(set->rows, 3000u);

  std::ifstream in(out + ".json");
  const auto json = nlohmann::json::parse(
      std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  EXPECT_EQ(json["rows"], 3000);
  EXPECT_EQ(json["parameters"]["signal_ids"], 10);
  EXPECT_EQ(json["parameters"]["vocab"].back(), 1000);
  char printed[64];
  std::snprintf(printed, sizeof printed, "held-out AUC %.4f, log loss %.4f",
                json["planted"]["test"]["auc"].get<double>(),
                json["planted"]["test"]["log_loss"].get<double>());
  EXPECT_NE(r.output.find(printed), std::string::npos) << r.output << "\nwanted: " << printed;
  fs::remove_all(dir);
}

TEST(data_cli, ctr_refuses_bad_values_with_one_line_and_exit_2) {
  const fs::path dir = fresh_dir();
  const std::string out = (dir / "c.tsv").string();
  auto r = run_coach("data ctr --rows 0 --out " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, "coach: data ctr: rows must be >= 2 (got 0)\n");
  r = run_coach("data ctr --rows 100 --test-fraction 1 --out " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, "coach: data ctr: test_fraction must lie in (0, 1) (got 1)\n");
  r = run_coach("data ctr --rows 100 --zipf -1 --out " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, "coach: data ctr: zipf exponent must lie in (0, 10] (got -1)\n");
  r = run_coach("data ctr --rows 100 --out " + (dir / "no" / "c.tsv").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.output,
            "coach: data ctr: " + (dir / "no" / "c.tsv").string() + ": cannot open for writing\n");
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}

}  // namespace
