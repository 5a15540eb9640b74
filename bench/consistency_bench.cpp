// consistency_bench: what each consistency mode buys beside a straggler. The same job (embedded
// cluster) trained under bsp, ssp:S, asp and averaging:K, with a straggler injected through the
// workers' `slowdown` test hook (actors::train_options):
//   moving:  at each step one worker, in turn, computes --factor times as long (a transient
//            straggler: a busy neighbour, a page fault storm, a GC pause);
//   fixed:   worker 0 computes --factor times as long at every step (a slow host);
//   none:    every worker at full speed.
// Prints per straggler and mode: samples/s over the whole run, its ratio to bsp's in the same
// run, wall time, the epochs it took to reach --target test accuracy, the test accuracy of the
// last epoch ended within --budget seconds of training, and the final test accuracy.
//
//   consistency_bench [--spec examples/fashion-ssp.yaml] [--workers 3] [--epochs 2]
//                     [--staleness 2] [--local-steps 4] [--factor 3] [--target 0.84]
//                     [--budget 8] [--straggler moving|fixed|none|all] [--json]
//
// SSP bounds how far a worker may run ahead of the slowest (Ho et al., "More effective
// distributed ML via a stale synchronous parallel parameter server", NIPS 2013): it absorbs a
// straggler that moves; against one that stays, every worker soon waits at the bound and the
// job runs at the straggler's pace, as BSP does. ASP waits for nobody: each worker asks for its
// next step as soon as it pushed, so a straggler, moving or fixed, only takes fewer steps.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "actors/embedded_cluster.hpp"
#include "common/format.hpp"
#include "common/json.hpp"
#include "report/job_report.hpp"

namespace {

using namespace coach;

struct outcome {
  std::string straggler;
  std::string mode;
  double samples_per_s = 0;
  double ratio = 0;  ///< to bsp's samples/s beside the same straggler
  double wall_s = 0;
  double accuracy = 0;
  int epochs_to_target = 0;       ///< 1-based; 0: not reached
  double accuracy_in_budget = 0;  ///< of the last epoch ended within the budget; 0: none
  std::string error;
};

std::function<double(std::uint32_t, std::int64_t)> straggler(const std::string& kind, double factor,
                                                             std::uint32_t workers) {
  if (kind == "moving")
    return [=](std::uint32_t rank, std::int64_t step) {
      return std::uint32_t(step % workers) == rank % workers ? factor : 1.0;
    };
  if (kind == "fixed")
    return [=](std::uint32_t rank, std::int64_t) { return rank == 0 ? factor : 1.0; };
  return {};
}

outcome run(const scheduler::job_spec& spec, const std::string& kind, double factor,
            std::uint32_t workers, double target, double budget_s) {
  outcome o;
  o.straggler = kind;
  o.mode = scheduler::to_string(spec.consistency);
  actors::train_options opt;
  opt.workers = workers;
  opt.slowdown = straggler(kind, factor, workers);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = actors::train_embedded(spec, opt);
  o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r) {
    o.error = r.error().message;
    return o;
  }
  double samples = 0, seconds = 0;
  for (const auto& e : r->epochs) {
    samples += double(e.samples);
    seconds += e.seconds;
    if (o.epochs_to_target == 0 && e.test_accuracy >= target) o.epochs_to_target = int(e.epoch) + 1;
    if (seconds <= budget_s) o.accuracy_in_budget = e.test_accuracy;
  }
  o.samples_per_s = seconds > 0 ? samples / seconds : 0;
  o.accuracy = r->test_accuracy;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "consistency_bench: samples/s of bsp, ssp:S, asp and averaging:K beside a straggler"};
  std::string spec_path = "examples/fashion-ssp.yaml", which = "all";
  std::uint32_t workers = 3;
  int epochs = 2, staleness = 2, local_steps = 4;
  double factor = 3, target = 0.84, budget = 8;
  bool json = false;
  app.add_option("--spec", spec_path,
                 "The job (averaging needs sgd or momentum: adam is "
                 "replaced by momentum 0.9, learning rate 0.05 there)");
  app.add_option("--workers", workers, "Workers of every run")->check(CLI::Range(2u, 64u));
  app.add_option("--epochs", epochs, "Epochs of every run")->check(CLI::PositiveNumber);
  app.add_option("--staleness", staleness, "S of ssp:S")->check(CLI::NonNegativeNumber);
  app.add_option("--local-steps", local_steps, "K of averaging:K")->check(CLI::PositiveNumber);
  app.add_option("--factor", factor, "How many times as long a straggler's step takes")
      ->check(CLI::Range(1.0, 100.0));
  app.add_option("--target", target, "Test accuracy whose epochs to reach are counted")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--budget", budget, "Seconds of training after which the accuracy is read")
      ->check(CLI::PositiveNumber);
  app.add_option("--straggler", which, "moving, fixed, none or all")
      ->check(CLI::IsMember({"moving", "fixed", "none", "all"}));
  app.add_flag("--json", json, "One JSON object on stdout instead of the table");
  CLI11_PARSE(app, argc, argv);

  auto spec = scheduler::load_job_spec(spec_path);
  if (!spec) {
    std::fprintf(stderr, "consistency_bench: %s\n", spec.error().message.c_str());
    return 2;
  }
  spec->epochs = epochs;
  if (int(workers) > spec->workers.max) spec->workers.max = int(workers);
  FILE* out = json ? stderr : stdout;
  std::fprintf(out, "%s: %u workers, %d epoch(s), straggler %gx\n", spec->name.c_str(), workers,
               epochs, factor);

  std::vector<scheduler::job_spec> modes;
  auto bsp = *spec;
  bsp.consistency = {};
  modes.push_back(bsp);
  auto ssp = *spec;
  ssp.consistency = {scheduler::consistency_kind::ssp, staleness, 0};
  modes.push_back(ssp);
  auto asp = *spec;
  asp.consistency = {scheduler::consistency_kind::asp, 0, 0};
  modes.push_back(asp);
  auto avg = *spec;
  avg.consistency = {scheduler::consistency_kind::averaging, 0, local_steps};
  if (avg.optimizer.kind == ps::optimizer_kind::adam) {
    avg.optimizer = {};
    avg.optimizer.kind = ps::optimizer_kind::momentum;
    avg.optimizer.sgd.learning_rate = 0.05f;
    avg.optimizer.sgd.momentum = 0.9f;
  }
  modes.push_back(avg);

  std::vector<std::string> stragglers{"moving", "fixed", "none"};
  if (which != "all") stragglers = {which};
  std::vector<outcome> results;
  for (const auto& kind : stragglers) {
    double base = 0;
    for (const auto& m : modes) {
      std::fprintf(out, "running %s beside straggler '%s' ...\n",
                   scheduler::to_string(m.consistency).c_str(), kind.c_str());
      auto o = run(m, kind, factor, workers, target, budget);
      if (m.consistency.kind == scheduler::consistency_kind::bsp) base = o.samples_per_s;
      o.ratio = base > 0 ? o.samples_per_s / base : 0;
      results.push_back(std::move(o));
    }
  }
  std::fprintf(out, "%-10s %-14s %12s %9s %8s %10s %10s %9s\n", "straggler", "mode", "samples/s",
               "vs_bsp", "wall_s", coach::format("ep_to_{}", target).c_str(),
               coach::format("acc_{}s", budget).c_str(), "accuracy");
  for (const auto& o : results) {
    if (!o.error.empty()) {
      std::fprintf(out, "%-10s %-14s failed: %s\n", o.straggler.c_str(), o.mode.c_str(),
                   o.error.c_str());
      continue;
    }
    const auto reached = o.epochs_to_target ? std::to_string(o.epochs_to_target) : "-";
    char in_budget[16] = "-";
    if (o.accuracy_in_budget > 0)
      std::snprintf(in_budget, sizeof in_budget, "%.4f", o.accuracy_in_budget);
    std::fprintf(out, "%-10s %-14s %12.0f %8.2fx %8.1f %10s %10s %9.4f\n", o.straggler.c_str(),
                 o.mode.c_str(), o.samples_per_s, o.ratio, o.wall_s, reached.c_str(), in_budget,
                 o.accuracy);
  }
  if (json) {
    coach::json runs = coach::json::array();
    for (const auto& o : results)
      runs.push_back(coach::json{{"straggler", o.straggler},
                                 {"mode", o.mode},
                                 {"samples_per_s", coach::json_figure(o.samples_per_s)},
                                 {"vs_bsp", coach::json_figure(o.ratio)},
                                 {"wall_s", coach::json_figure(o.wall_s)},
                                 {"epochs_to_target", o.epochs_to_target},
                                 {"accuracy_in_budget", coach::json_figure(o.accuracy_in_budget)},
                                 {"accuracy", coach::json_figure(o.accuracy)},
                                 {"error", o.error}});
    std::printf("%s\n", coach::json{{"runs", std::move(runs)}}.dump().c_str());
  }
  return 0;
}
