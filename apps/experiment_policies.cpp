// coach experiment policies: five jobs under each policy, swapped live
// (apps/experiment_studies.hpp).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/experiment_studies.hpp"
#include "common/format.hpp"
#include "report/experiment.hpp"

namespace coach::apps::experiment {
namespace {

namespace ex = scheduler::experiment;
using namespace std::chrono_literals;

/// The policies study's jobs: (name, epochs, min, max, initial workers), submitted 1 s apart.
struct policy_job {
  std::string name;
  int epochs;
  int min, max, initial;
};

/// Runs the sequence under `policy`; each job's times from the first submit.
result<std::vector<ex::job_times>> run_sequence(session& s, const YAML::Node& base,
                                                const experiment_options& o,
                                                const std::string& policy,
                                                const std::vector<policy_job>& seq) {
  if (auto r = s.set_policy(policy); !r) return std::unexpected(r.error());
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<ex::job_times> times(seq.size());
  std::vector<std::uint64_t> ids(seq.size(), 0);
  std::vector<bool> started(seq.size(), false), over(seq.size(), false);
  std::size_t next = 0, left = seq.size();
  while (left > 0) {
    if (next < seq.size() && since() >= double(next)) {
      const auto& j = seq[next];
      YAML::Node n = YAML::Clone(base);
      n["name"] = coach::format("{}-{}", policy, j.name);
      n["epochs"] = j.epochs;
      n["backend"] = "cpu";
      n["shards"] = 1;
      YAML::Node w;
      w["min"] = j.min;
      w["max"] = j.max;
      w["initial"] = j.initial;
      n["workers"] = w;
      if (o.train_limit > 0) n["dataset"]["train_limit"] = o.train_limit;
      YAML::Emitter e;
      e << n;
      times[next].name = j.name;
      times[next].submitted = since();
      auto id = s.submit(e.c_str(), j.name);
      if (!id) return std::unexpected(id.error());
      ids[next++] = *id;
    }
    std::this_thread::sleep_for(100ms);
    for (std::size_t i = 0; i < next; ++i) {
      if (over[i]) continue;
      auto st = s.status(ids[i]);
      if (!st) return std::unexpected(st.error());
      const double now = since();
      if (!started[i] && (st->state == scheduler::job_state::running || st->epochs_done > 0)) {
        started[i] = true;
        times[i].started = now;
      }
      auto end = ended(*st);
      if (!end) return std::unexpected(end.error());
      if (!*end) continue;
      if (!started[i]) times[i].started = now;
      times[i].finished = now;
      over[i] = true;
      --left;
    }
  }
  return times;
}

}  // namespace

int policies(session& s, const YAML::Node& base, const experiment_options& o) {
  const int e = o.epochs;
  const std::vector<policy_job> seq{{"a", 2 * e, 1, 4, 3},
                                    {"b", e, 1, 2, 2},
                                    {"c", 2 * e, 1, 4, 2},
                                    {"d", e, 1, 3, 2},
                                    {"e", 2 * e, 1, 4, 3}};
  std::vector<std::vector<std::string>> rows;
  std::vector<ex::chart_series> cs;
  for (const char* policy : {"fifo", "elastic-fifo", "round-robin", "coach"}) {
    auto times = run_sequence(s, base, o, policy, seq);
    if (!times) return say(times.error().message), 1;
    const auto f = ex::policy_metrics(*times);
    say(coach::format("{}: makespan {:.1f} s, mean turnaround {:.1f} s, mean wait {:.1f} s", policy,
                      f.makespan_s, f.mean_turnaround_s, f.mean_wait_s));
    rows.push_back({policy, coach::format("{:.1f}", f.makespan_s),
                    coach::format("{:.1f}", f.mean_turnaround_s),
                    coach::format("{:.1f}", f.mean_wait_s)});
    cs.push_back({policy, {}});
    for (const auto& t : *times) cs.back().y.push_back(t.finished - t.submitted);
  }
  auto table =
      ex::markdown_table({"policy", "makespan s", "mean turnaround s", "mean wait s"}, rows);
  table += coach::format(
      "\nFive jobs submitted 1 s apart (epochs {}, {}, {}, {}, {}; workers min 1, max "
      "4/2/4/3/4, asked 3/2/2/2/3; 1 shard each; {}), the same sequence under each policy, "
      "swapped between runs.\n",
      2 * e, e, 2 * e, e, 2 * e,
      o.at.empty() ? coach::format("{} local nodes of {} CPU slots", o.local, study_cpus(o))
                   : "the cluster at " + o.at);
  std::printf("%s", table.c_str());
  write(fs::path(o.out) / "policies.md", table);
  std::vector<std::string> labels;
  for (const auto& j : seq) labels.push_back("job " + j.name);
  write(fs::path(o.out) / "policies.svg",
        ex::line_chart_svg("Turnaround of each job by policy", "job (in submission order)",
                           "turnaround (s)", labels, cs));
  return 0;
}

}  // namespace coach::apps::experiment
