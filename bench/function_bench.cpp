// function_bench: the serverless seed's experiment. The same job trained three ways under the
// same deadline and memory cap per function (worker::bounded_process):
//   (a) one function: a single coach-invocation gets the whole training set and trains every
//       epoch in one invocation (sequential SGD over one shuffled order, the spec's optimizer);
//   (b) function mode with averaging:K: each worker's steps run in invocations of
//       --chunks steps each, the shards average the models (coach train, embedded cluster);
//   (c) function mode with bsp.
// Prints per mode: completed or failed (and how), wall time, peak memory of one invocation,
// invocations started, test accuracy.
//
//   function_bench [--spec examples/fashion-averaging.yaml] [--memory-mb 160] [--deadline-s 600]
//                  [--local-steps 4] [--chunks 16] [--epochs N] [--json]
//
// The seed (serverless data-parallel training with a weighted averaging of intermediate
// models) reports 0 % failures and -45 % memory, -58 % time against one big function; here the
// cap is chosen so that (a) cannot hold the data set.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "actors/embedded_cluster.hpp"
#include "common/format.hpp"
#include "common/json.hpp"
#include "master/chunk_dispenser.hpp"
#include "worker/function_runner.hpp"

namespace {

using namespace coach;

struct outcome {
  std::string mode;
  std::string result;  ///< "completed", or how it failed
  double wall_s = 0;
  std::uint64_t peak_bytes = 0;
  std::uint64_t invocations = 0;
  double accuracy = -1;
};

/// (a): the whole job in one bounded invocation.
outcome one_function(const scheduler::job_spec& spec, const worker::dataset_pair& data,
                     const worker::process_limits& limits, const std::string& program) {
  outcome o{"(a) one function", "", 0, 0, 1, -1};
  const auto& train = data.train;
  const auto model = worker::network::for_data(spec.model, train).value();
  worker::invocation_setup setup;
  setup.model = spec.model;
  setup.shape = train.shape;
  setup.inputs = int(train.features);
  setup.classes = train.classes;
  setup.max_batch = spec.batch_size;
  setup.averaging = true;  // local steps over the whole data: one machine's SGD
  setup.local = spec.optimizer.sgd;
  if (spec.optimizer.kind == ps::optimizer_kind::sgd) setup.local.momentum = 0;
  worker::invocation_task task;
  task.params.resize(model.num_params());
  model.init_params(task.params, spec.seed);
  std::vector<std::uint32_t> order(train.rows);
  std::iota(order.begin(), order.end(), 0u);
  master::portable_shuffle(order, spec.seed);
  task.x.reserve(train.rows * train.features);
  for (auto i : order) {
    task.x.insert(task.x.end(), train.x.begin() + std::ptrdiff_t(i * train.features),
                  train.x.begin() + std::ptrdiff_t((i + 1) * train.features));
    task.y.push_back(train.y[i]);
  }
  for (std::size_t left = train.rows; left > 0;) {
    const auto n = std::min<std::size_t>(left, std::size_t(spec.batch_size));
    task.sizes.push_back(std::uint32_t(n));
    left -= n;
  }
  task.passes = std::uint32_t(spec.epochs);

  const auto t0 = std::chrono::steady_clock::now();
  auto child = worker::bounded_process::start({program, "--tasks", "1"}, limits,
                                              worker::default_memory_enforcement(), true);
  if (!child) {
    o.result = "failed: " + child.error().message;
    return o;
  }
  std::optional<worker::invocation_result> answer;
  if (worker::write_setup(child->input_fd(), setup) &&
      worker::write_task(child->input_fd(), task)) {
    auto ready = child->await_output();
    if (ready && *ready)
      if (auto r = worker::read_result(child->output_fd()); r && *r) answer = std::move(**r);
  }
  child->close_input();
  auto end = child->wait();
  o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!end) {
    o.result = "failed: " + end.error().message;
    return o;
  }
  // Its own high-water mark when it answered (under rlimit, wait4's figure includes this
  // process's memory at the fork); one killed at its cap used all of it.
  if (answer)
    o.peak_bytes = answer->peak_rss_bytes;
  else if (end->enforcement == worker::memory_enforcement::cgroup)
    o.peak_bytes = end->peak_memory_bytes;
  else if (end->end == worker::process_end::out_of_memory)
    o.peak_bytes = limits.memory_bytes;
  if (!answer || end->end != worker::process_end::completed) {
    o.result = std::string(worker::to_string(end->end));
    return o;
  }
  o.result = "completed";
  // w = w0 - d / n, then the test accuracy.
  std::vector<float> w = task.params;
  const float inv = 1.0f / float(answer->samples);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] -= answer->out[i] * inv;
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  float* dw = be->alloc(w.size());
  be->upload(dw, w.data(), w.size());
  worker::network_runner runner(model, *be, 256);
  o.accuracy = runner.evaluate(dw, data.test).accuracy();
  be->free(dw);
  return o;
}

/// (b) and (c): function mode under coach train's embedded cluster.
outcome function_mode(std::string mode, scheduler::job_spec spec) {
  outcome o{std::move(mode), "", 0, 0, 0, -1};
  const auto t0 = std::chrono::steady_clock::now();
  auto r = actors::train_embedded(spec);
  o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r) {
    o.result = "failed: " + r.error().message;
    return o;
  }
  o.result = "completed";
  o.accuracy = r->test_accuracy;
  if (r->invocations) {
    o.peak_bytes = r->invocations->peak_memory_bytes;
    o.invocations = r->invocations->started;
    const auto& c = *r->invocations;
    if (c.timed_out + c.out_of_memory + c.failed > 0)
      o.result += coach::format(" ({} timed out, {} out of memory, {} failed)", c.timed_out,
                                c.out_of_memory, c.failed);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"function_bench: one big bounded function against function mode (averaging, bsp)"};
  std::string spec_path = "examples/fashion-averaging.yaml";
  double memory_mb = 160, deadline_s = 600;
  int local_steps = 4, epochs = 0;
  std::uint32_t chunks = 16;
  bool json = false;
  app.add_option("--spec", spec_path, "The job (its optimizer must be sgd or momentum)");
  app.add_option("--memory-mb", memory_mb, "Memory cap of every function")
      ->check(CLI::PositiveNumber);
  app.add_option("--deadline-s", deadline_s, "Deadline of every function")
      ->check(CLI::PositiveNumber);
  app.add_option("--local-steps", local_steps, "K of (b)'s averaging:K")
      ->check(CLI::PositiveNumber);
  app.add_option("--chunks", chunks, "Steps one invocation trains in (b) and (c)")
      ->check(CLI::PositiveNumber);
  app.add_option("--epochs", epochs, "Overrides the spec's epochs")->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "One JSON object on stdout instead of the table");
  CLI11_PARSE(app, argc, argv);

  auto spec = scheduler::load_job_spec(spec_path);
  if (!spec) {
    std::fprintf(stderr, "function_bench: %s\n", spec.error().message.c_str());
    return 2;
  }
  if (epochs > 0) spec->epochs = epochs;
  if (spec->optimizer.kind == ps::optimizer_kind::adam) {
    std::fprintf(stderr, "function_bench: %s: use sgd or momentum (averaging refuses adam)\n",
                 spec_path.c_str());
    return 2;
  }
  auto program = worker::find_invocation_program();
  if (!program) {
    std::fprintf(stderr, "function_bench: %s\n", program.error().message.c_str());
    return 1;
  }
  auto data = worker::load_dataset(spec->dataset, spec->seed);
  if (!data) {
    std::fprintf(stderr, "function_bench: %s\n", data.error().message.c_str());
    return 1;
  }
  const worker::process_limits limits{std::chrono::milliseconds(std::int64_t(deadline_s * 1000)),
                                      std::uint64_t(memory_mb * 1024 * 1024)};
  FILE* out = json ? stderr : stdout;
  std::fprintf(out,
               "%s: %zu training rows, %d epochs; every function: deadline %.0f s, memory "
               "%.0f MB (%s)\n",
               spec->name.c_str(), data->train.rows, spec->epochs, deadline_s, memory_mb,
               std::string(worker::to_string(worker::default_memory_enforcement())).c_str());

  std::vector<outcome> results;
  std::fprintf(out, "running (a) ...\n");
  results.push_back(one_function(*spec, *data, limits, *program));
  auto fn = *spec;
  fn.function = scheduler::function_limits{deadline_s, std::uint64_t(memory_mb), chunks};
  fn.consistency = {scheduler::consistency_kind::averaging, 0, local_steps};
  std::fprintf(out, "running (b) ...\n");
  results.push_back(function_mode(coach::format("(b) functions, averaging:{}", local_steps), fn));
  fn.consistency = {};
  std::fprintf(out, "running (c) ...\n");
  results.push_back(function_mode("(c) functions, bsp", fn));

  std::fprintf(out, "%-28s %-40s %8s %12s %11s %9s\n", "mode", "result", "wall_s", "peak_mem_MB",
               "invocations", "accuracy");
  for (const auto& o : results)
    std::fprintf(out, "%-28s %-40s %8.1f %12.1f %11llu %9.4f\n", o.mode.c_str(), o.result.c_str(),
                 o.wall_s, double(o.peak_bytes) / (1024.0 * 1024.0),
                 static_cast<unsigned long long>(o.invocations), o.accuracy);
  if (json) {
    coach::json modes = coach::json::array();
    for (const auto& o : results)
      modes.push_back(coach::json{{"mode", o.mode},
                                  {"result", o.result},
                                  {"wall_s", coach::json_figure(o.wall_s)},
                                  {"peak_memory_bytes", o.peak_bytes},
                                  {"invocations", o.invocations},
                                  {"accuracy", coach::json_figure(o.accuracy)}});
    std::printf("%s\n", coach::json{{"modes", std::move(modes)}}.dump().c_str());
  }
  return 0;
}
