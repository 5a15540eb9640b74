// scheduler::report_plot and scheduler::train_events: what `coach plot` reads of a report and
// draws (each curve's points, a dashed line at each change where it took effect), and what
// `coach train --events` writes (one parseable JSON object a line, a change once).
#include "report/report_plot.hpp"
#include "report/train_events.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace coach::scheduler {
namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

job_result three_epochs() {
  job_result r;
  r.name = "digits <elastic>";
  for (std::uint32_t e = 0; e < 3; ++e) {
    epoch_report x;
    x.epoch = e;
    x.train_loss = 1.0 / (e + 1);
    x.test_loss = 1.1 / (e + 1);
    x.test_accuracy = 0.8 + 0.05 * e;
    x.steps = 10;
    r.epochs.push_back(x);
  }
  change_report c;
  c.what = "workers 3";
  c.step = 15;  // half-way through the second epoch
  r.changes.push_back(c);
  return r;
}

TEST(report_plot, reads_a_report_and_places_each_change_within_its_epoch) {
  auto d = read_report(to_json(three_epochs()), "r.json");
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->name, "digits <elastic>");
  ASSERT_EQ(d->epochs.size(), 3u);
  EXPECT_EQ(d->epochs[0].epoch, 1);
  EXPECT_DOUBLE_EQ(d->epochs[2].test_accuracy, 0.9);
  ASSERT_EQ(d->changes.size(), 1u);
  EXPECT_EQ(d->changes[0].what, "workers 3");
  EXPECT_DOUBLE_EQ(change_position(d->epochs, 15), 1.5);
  EXPECT_DOUBLE_EQ(change_position(d->epochs, 0), 0.0);
  EXPECT_DOUBLE_EQ(change_position(d->epochs, 29), 2.9);
}

TEST(report_plot, draws_three_curves_and_the_changes_as_svg) {
  auto d = read_report(to_json(three_epochs()), "r.json");
  ASSERT_TRUE(d);
  const auto svg = plot_svg(*d);
  EXPECT_EQ(svg.rfind("<svg xmlns='http://www.w3.org/2000/svg'", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 3u) << "training loss, test loss, test accuracy";
  EXPECT_EQ(count(svg, "<circle"), 9u) << "a point per epoch and curve";
  EXPECT_EQ(count(svg, "class='change'"), 2u) << "the change, in both panels";
  EXPECT_NE(svg.find("workers 3 (step 15)"), std::string::npos);
  EXPECT_NE(svg.find("digits &lt;elastic&gt;"), std::string::npos) << "the name, escaped";
}

TEST(report_plot, what_is_not_a_report_is_one_line_naming_the_file) {
  auto a = read_report("not json", "x.json");
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().message, "x.json: not a JSON object (a report of coach train --report)");
  auto b = read_report(R"({"name": "n"})", "y.json");
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message, "y.json: no \"epochs\" list (a report of coach train --report)");
  auto c = read_report(R"({"epochs": [{"train_loss": 1}]})", "z.json");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message, "z.json: epochs[0] has no integer \"epoch\"");
}

TEST(train_events, one_json_object_a_line_and_each_change_once) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("coach-events-" + std::to_string(::getpid()) + ".jsonl");
  {
    auto ev = train_events::open(path.string());
    ASSERT_TRUE(ev) << ev.error().message;
    ev->start("digits", 3, 2, 1);
    progress_event p;
    p.epoch = 1;
    p.samples_done = 512;
    p.workers = 3;
    p.shards = 1;
    p.changes_done = 1;
    ev->progress(p);
    ev->progress(p);  // the same change again: no second line
    auto r = three_epochs();
    r.epochs[0].test_accuracy = std::nan("");  // written as null
    r.epochs[0].workers = 3;                   // as the change left it: no second change line
    r.epochs[0].shards = 1;
    ev->epoch(r.epochs[0]);
    ev->end("succeeded", 0.9, 12.5, 3);
  }
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["event"], "start");
  EXPECT_EQ(lines[0]["workers"], 2);
  EXPECT_EQ(lines[1]["event"], "change");
  EXPECT_EQ(lines[1]["epoch"], 2) << "1-based";
  EXPECT_EQ(lines[1]["workers"], 3);
  EXPECT_EQ(lines[2]["event"], "epoch");
  EXPECT_TRUE(lines[2]["test_accuracy"].is_null());
  EXPECT_DOUBLE_EQ(lines[2]["train_loss"].get<double>(), 1.0);
  EXPECT_EQ(lines[3]["event"], "end");
  EXPECT_EQ(lines[3]["state"], "succeeded");
  EXPECT_EQ(lines[3]["epochs_done"], 3);
  for (const auto& l : lines) EXPECT_GT(l["time"].get<double>(), 1.7e9);
  std::filesystem::remove(path);
  auto bad = train_events::open("/nonexistent-dir/e.jsonl");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "--events /nonexistent-dir/e.jsonl: cannot write it (No such file or directory)");
}

}  // namespace
}  // namespace coach::scheduler
