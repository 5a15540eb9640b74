// train_bench: samples/s of Coach's embedded cluster (actors, shards, in-process transport) for
// several worker and shard counts, next to a plain single-threaded loop training the same model
// with the same batch, optimizer and data (no actors, no shards), measured in the same run.
//
//   train_bench [--spec examples/fashion-mlp.yaml] [--samples 20000] [--repeat 3]
//               [--configs 1x1,2x1,4x1,1x2,2x2,4x2] [--backend cpu|cuda|auto] [--json]
//               [--layers N]   (N batches on one thread, each layer's share of the time)
//               [--compare-gemm] [--clock wall|cpu]
//
// On the cpu backend the kernel is COACH_CPU_KERNEL's (auto, avx512, avx2, eigen; unset: the
// widest this CPU has), printed in the header and in the JSON ("kernel"); a kernel this CPU
// lacks is a one-line error. With --layers the JSON carries the breakdown ("layers").
//
// Each figure is the training throughput of one epoch over `samples` training rows (the
// evaluation after the epoch is not timed). Each measurement is paired with a plain loop run
// right after it; a configuration's ratio is the median of its pairs' ratios.
// --backend applies to both sides: the cluster's workers and the plain loop compute on it (the
// shards' optimizer stays on the cpu, as in every run), so the ratio compares like with like.
// auto is resolved once, before the rounds, and the backend used is printed.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "actors/embedded_cluster.hpp"
#include "common/json.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/cpu_gemm.hpp"
#include "master/chunk_dispenser.hpp"
#include "worker/dataset.hpp"
#include "worker/network.hpp"

namespace {

using namespace coach;

/// v with `decimals` digits after the point (what the figure can claim); NaN and infinities stay
/// as they are (JSON null).
double rounded(double v, int decimals) {
  if (!std::isfinite(v)) return v;
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}

/// The clock the plain loop and the layer breakdown read: wall time, or the calling thread's CPU
/// time (CLOCK_THREAD_CPUTIME_ID: one thread's work without the time other processes held its
/// core, for measuring on a loaded machine; the cluster's configurations always read wall time).
struct bench_clock {
  bool cpu = false;
  double now() const {
    if (!cpu)
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
};

/// One epoch's samples/s, and the share of its wall time x workers spent in forward/backward
/// (on the cpu backend; with cuda the plain loop's share counts kernel launches only, since it
/// does not wait for the device after each step).
struct measure {
  double samples_per_s = 0;
  double compute_share = 0;
};

/// The reference: one thread, one backend, forward/backward then the optimizer on the whole
/// vector, over the same shuffled chunks the dispenser hands out.
result<measure> plain_loop(const scheduler::job_spec& spec, const worker::dataset_pair& data,
                           kernels::backend_kind kind, bench_clock clock) {
  auto made = kernels::make_backend(kind);
  if (!made) return std::unexpected(made.error());
  auto be = std::move(*made);
  be->set_precision(spec.precision);
  const auto model = worker::network::for_data(spec.model, data.train).value();
  const std::size_t n = model.num_params();
  std::vector<float> host(n);
  model.init_params(host, spec.seed);
  float* w = be->alloc(n);
  float* g = be->alloc(n);
  float* m = be->alloc(n);
  float* v = be->alloc(n);
  be->upload(w, host.data(), n);
  worker::network_runner run(model, *be, spec.batch_size);
  master::chunk_dispenser d(data.train.rows, std::size_t(spec.batch_size), spec.seed);
  d.begin_epoch(0);
  std::int64_t t = 0;
  std::size_t samples = 0;
  double compute_s = 0;
  const double t0 = clock.now();
  while (auto c = d.take()) {
    auto idx = d.indices(*c);
    const double f0 = clock.now();
    run.forward_backward(w, data.train, idx, g);
    compute_s += clock.now() - f0;
    const float scale = 1.0f / float(idx.size());
    switch (spec.optimizer.kind) {
      case ps::optimizer_kind::sgd: {
        auto o = spec.optimizer.sgd;
        o.momentum = 0;
        be->sgd_update(w, nullptr, g, n, scale, o);
        break;
      }
      case ps::optimizer_kind::momentum:
        be->sgd_update(w, m, g, n, scale, spec.optimizer.sgd);
        break;
      case ps::optimizer_kind::adam:
        be->adam_update(w, m, v, g, n, scale, ++t, spec.optimizer.adam);
        break;
    }
    samples += idx.size();
  }
  be->download(host.data(), w, 1);  // wait for pending work
  const double s = clock.now() - t0;
  for (float* p : {w, g, m, v}) be->free(p);
  return measure{double(samples) / s, compute_s / s};
}

struct config {
  std::uint32_t workers, shards;
  bool host_reduce = false;  ///< "WxSr": the workers sum their gradients before pushing
};

/// One layer's time in a breakdown, ms a batch.
struct layer_time {
  std::string kind;
  double forward_ms = 0, backward_ms = 0;          ///< the mean over the batches (wall)
  double forward_min_ms = 0, backward_min_ms = 0;  ///< the fastest batch's (wall)
};

/// A breakdown's figures: the passes' samples/s and each layer's time.
struct breakdown {
  double samples_per_s = 0;
  std::vector<layer_time> layers;
};

/// The kernel a cpu backend runs ("avx2", ...), or the backend's name.
std::string kernel_of(const kernels::backend& be) {
  if (const auto* cpu = dynamic_cast<const kernels::cpu_backend*>(&be))
    return std::string(kernels::to_string(cpu->gemm_kind()));
  return std::string(be.name());
}

/// Where a step's time goes: `batches` forward and backward passes of one batch on one thread,
/// each layer's share printed (forward and backward apart).
breakdown print_layer_breakdown(const scheduler::job_spec& spec, const worker::dataset& train,
                                std::unique_ptr<kernels::backend> be, std::string_view label,
                                int batches, bench_clock clock) {
  be->set_precision(spec.precision);
  const auto model = worker::network::for_data(spec.model, train).value();
  const std::size_t n = model.num_params();
  std::vector<float> host(n);
  model.init_params(host, spec.seed);
  float* w = be->alloc(n);
  float* g = be->alloc(n);
  be->upload(w, host.data(), n);
  worker::network_runner run(model, *be, spec.batch_size);
  std::vector<std::uint32_t> idx(std::size_t(spec.batch_size));
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = std::uint32_t(i % train.rows);
  run.forward_backward(w, train, idx, g, 1);  // warm: workspaces grown, pages touched
  run.enable_timing(true);
  // Each layer's fastest batch too (the timings accumulate: a batch's are the differences), which
  // a loaded machine's preemptions move least.
  const std::size_t count = model.layers().size();
  std::vector<double> fwd_min(count, 1e30), bwd_min(count, 1e30), fwd_before(count),
      bwd_before(count);
  const double t0 = clock.now();
  for (int b = 0; b < batches; ++b) {
    run.forward_backward(w, train, idx, g, std::uint64_t(b));
    for (std::size_t i = 0; i < count; ++i) {
      const auto& t = run.timings()[i];
      fwd_min[i] = std::min(fwd_min[i], t.forward_s - fwd_before[i]);
      bwd_min[i] = std::min(bwd_min[i], t.backward_s - bwd_before[i]);
      fwd_before[i] = t.forward_s;
      bwd_before[i] = t.backward_s;
    }
  }
  const double wall = clock.now() - t0;
  // The gradient's copy to host memory, as a worker makes it after each step (what overlapping
  // it with the backward pass could save at most).
  std::vector<float> grad_host(n);
  const auto d0 = std::chrono::steady_clock::now();
  for (int b = 0; b < batches; ++b) be->download(grad_host.data(), g, n);
  const double copy = std::chrono::duration<double>(std::chrono::steady_clock::now() - d0).count();
  be->free(w);
  be->free(g);
  std::printf(
      "\nper layer (%.*s), batch %d, %d batches on one thread: %.2f ms a batch (%s), %.0f "
      "samples/s (forward + backward only)\n",
      int(label.size()), label.data(), spec.batch_size, batches, 1e3 * wall / batches,
      clock.cpu ? "thread CPU time" : "wall", double(batches) * spec.batch_size / wall);
  std::printf("%-4s %-12s %-12s %10s %10s %7s %10s %10s\n", "#", "layer", "output", "fwd ms",
              "bwd ms", "share", "fwd min", "bwd min");
  breakdown out{double(batches) * spec.batch_size / wall, {}};
  const auto& layers = model.layers();
  double layers_s = 0;  // the share's whole: the layers' time (wall, whichever the clock)
  for (const auto& t : run.timings()) layers_s += t.forward_s + t.backward_s;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& t = run.timings()[i];
    const auto& o = layers[i].out;
    const std::string shape =
        std::to_string(o[0]) + "x" + std::to_string(o[1]) + "x" + std::to_string(o[2]);
    std::printf("%-4zu %-12s %-12s %10.3f %10.3f %6.1f%% %10.3f %10.3f\n", i,
                std::string(worker::to_string(layers[i].cfg.kind)).c_str(), shape.c_str(),
                1e3 * t.forward_s / batches, 1e3 * t.backward_s / batches,
                100.0 * (t.forward_s + t.backward_s) / layers_s, 1e3 * fwd_min[i],
                1e3 * bwd_min[i]);
    out.layers.push_back({std::string(worker::to_string(layers[i].cfg.kind)),
                          1e3 * t.forward_s / batches, 1e3 * t.backward_s / batches,
                          1e3 * fwd_min[i], 1e3 * bwd_min[i]});
  }
  std::printf("gradient to host memory: %.3f ms a batch (%zu floats), %.1f%% of a batch's time\n",
              1e3 * copy / batches, n, 100.0 * copy / wall);
  return out;
}

/// The layer breakdown on `kind` (on the cpu backend: the kernel COACH_CPU_KERNEL names, or the
/// widest this CPU has), returned; on the cpu backend with `compare_gemm`, then once with Eigen's
/// product, once with the AVX2/FMA kernel and once with the AVX-512 one (where the CPU has
/// them), one after the other, and the ratios.
breakdown layer_breakdowns(const scheduler::job_spec& spec, const worker::dataset& train,
                           kernels::backend_kind kind, int batches, bool compare_gemm,
                           bench_clock clock) {
  auto made = std::move(*kernels::make_backend(kind));
  const std::string label = std::string(made->name()) + ", " + kernel_of(*made) +
                            (made->name() == "cpu" ? " kernel" : "");
  const breakdown chosen =
      print_layer_breakdown(spec, train, std::move(made), label, batches, clock);
  if (kind != kernels::backend_kind::cpu || !compare_gemm) return chosen;
  using kernels::cpu_gemm;
  const double eigen =
      print_layer_breakdown(spec, train, std::make_unique<kernels::cpu_backend>(cpu_gemm::eigen),
                            "cpu, eigen gemm", batches, clock)
          .samples_per_s;
  const struct {
    cpu_gemm kind;
    bool present;
    const char* missing;
  } packed[] = {
      {cpu_gemm::avx2_fma, kernels::detail::cpu_has_avx2_fma(), "AVX2 and FMA"},
      {cpu_gemm::avx512, kernels::detail::cpu_has_avx512f(), "AVX-512F"},
  };
  double before = eigen;
  std::string before_name = "eigen";
  for (const auto& k : packed) {
    const std::string name(kernels::to_string(k.kind));
    if (!k.present) {
      std::printf("\nthis CPU has no %s: no %s breakdown\n", k.missing, name.c_str());
      return chosen;
    }
    const double rate =
        print_layer_breakdown(spec, train, std::make_unique<kernels::cpu_backend>(k.kind),
                              "cpu, " + name + " gemm", batches, clock)
            .samples_per_s;
    std::printf("\n%s gemm / %s gemm: %.2fx samples/s; / eigen gemm: %.2fx\n", name.c_str(),
                before_name.c_str(), rate / before, rate / eigen);
    before = rate;
    before_name = name;
  }
  return chosen;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Coach train_bench: actor system samples/s vs a plain loop", "train_bench"};
  std::string spec_path = "examples/fashion-mlp.yaml", configs_text = "1x1,2x1,4x1,1x2,2x2,4x2";
  std::string backend = "cpu", kernel;
  std::size_t samples = 20000;
  int repeat = 3;
  bool json = false;
  int layer_batches = 0;
  app.add_option("--layers", layer_batches,
                 "Also time N batches on one thread and print each layer's share (0: no)");
  app.add_option("--spec", spec_path, "Job spec whose model, batch, optimizer and data are used");
  app.add_option("--samples", samples, "Training rows per measured epoch");
  app.add_option("--configs", configs_text,
                 "WORKERSxSHARDS list; a trailing r (4x2r) runs with host_reduce: true");
  app.add_option("--backend", backend, "cpu | cuda | auto: the workers' and the plain loop's");
  app.add_option("--repeat", repeat, "Rounds; a ratio is the median of its rounds' pairs");
  app.add_flag("--json", json, "Print one JSON object on the last line");
  bool compare_gemm = false;
  app.add_flag("--compare-gemm", compare_gemm,
               "With --layers on the cpu backend: the breakdown with Eigen's product, then with "
               "the AVX2/FMA kernel and with the AVX-512 one (where the CPU has them), and "
               "their ratios");
  std::string clock_name = "wall";
  app.add_option("--clock", clock_name,
                 "wall | cpu: the plain loop's and the breakdown's clock (cpu: the thread's CPU "
                 "time, for a loaded machine)")
      ->check(CLI::IsMember({"wall", "cpu"}));
  CLI11_PARSE(app, argc, argv);
  const bench_clock clock{clock_name == "cpu"};

  auto spec = scheduler::load_job_spec(spec_path);
  if (!spec) {
    std::fprintf(stderr, "train_bench: %s\n", spec.error().message.c_str());
    return 2;
  }
  auto kind = kernels::parse_backend_kind(backend);
  if (!kind) {
    std::fprintf(stderr, "train_bench: %s\n", kind.error().message.c_str());
    return 2;
  }
  {
    // Made once here so a backend that cannot run (cuda without a device) is a clear error, and
    // auto becomes the backend it picks for every measurement below.
    auto probe = kernels::make_backend(*kind);
    if (!probe) {
      std::fprintf(stderr, "train_bench: %s\n", probe.error().to_string().c_str());
      return 2;
    }
    backend = std::string((*probe)->name());
    kernel = kernel_of(**probe);
    kind = kernels::parse_backend_kind(backend);
  }
  spec->epochs = 1;
  spec->dataset.train_limit = samples;
  spec->dataset.test_limit = 1000;
  spec->backend = *kind;
  std::vector<config> configs;
  {
    std::stringstream ss(configs_text);
    std::string item;
    while (std::getline(ss, item, ',')) {
      unsigned w = 0, s = 0;
      char r = 0;
      const int got = std::sscanf(item.c_str(), "%ux%u%c", &w, &s, &r);
      if (got < 2 || w == 0 || s == 0 || (got == 3 && r != 'r')) {
        std::fprintf(stderr, "train_bench: bad --configs item '%s' (want WxS or WxSr)\n",
                     item.c_str());
        return 2;
      }
      configs.push_back({w, s, got == 3});
    }
  }
  auto data = worker::load_dataset(spec->dataset, spec->seed);
  if (!data) {
    std::fprintf(stderr, "train_bench: %s\n", data.error().to_string().c_str());
    return 1;
  }
  // Every measurement of a configuration is paired with a plain loop run right after it, and
  // a configuration's ratio is the median of its pairs' ratios: a slow or fast spell of a
  // shared machine falls on both sides of a pair. (Best of rounds on each side, the earlier
  // method, let one fast spell of the plain loop lower every ratio: 1x1 read 0.69-0.98 in three
  // runs of one build.) samples/s and the compute share are each configuration's best round.
  measure plain;
  std::vector<measure> best(configs.size());
  std::vector<std::vector<double>> ratios(configs.size());
  auto run_config = [&](const config& c) -> result<measure> {
    auto s = *spec;
    s.workers = {int(c.workers), int(c.workers), int(c.workers)};
    s.shards = {int(c.shards), int(c.shards), int(c.shards)};
    s.host_reduce = c.host_reduce;
    auto res = actors::train_embedded(s);
    if (!res) return std::unexpected(res.error());
    if (res->epochs.empty()) return fail(errc::internal, "no epoch finished");
    const auto& e = res->epochs.front();
    return measure{e.samples_per_s, e.compute_seconds / (e.seconds * double(c.workers))};
  };
  auto keep_best = [](measure& b, const measure& m) {
    if (m.samples_per_s > b.samples_per_s) b = m;
  };
  // The first training after the plain loop ran up to 30 % slower than the same configuration
  // right after it (2x2 then 2x2: 1.32 and 1.81 of the plain loop): one unmeasured run first.
  if (auto w = run_config(configs.front()); !w) {
    std::fprintf(stderr, "train_bench: %s\n", w.error().to_string().c_str());
    return 1;
  }
  for (int r = 0; r < repeat; ++r) {
    for (std::size_t i = 0; i < configs.size(); ++i) {
      auto m = run_config(configs[i]);
      if (!m) {
        std::fprintf(stderr, "train_bench: %s\n", m.error().to_string().c_str());
        return 1;
      }
      auto p = plain_loop(*spec, *data, *kind, clock);
      if (!p) {
        std::fprintf(stderr, "train_bench: %s\n", p.error().to_string().c_str());
        return 1;
      }
      keep_best(best[i], *m);
      keep_best(plain, *p);
      ratios[i].push_back(m->samples_per_s / p->samples_per_s);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  // vs plain: the median ratio of the pairs (range in brackets). compute: the share of wall
  // time x workers spent in forward/backward (the rest is the optimizer in the plain loop;
  // waiting for the shards, the master and the other workers in the cluster).
  std::printf("train_bench: %s, %zu samples, batch %d, %s backend (%s kernel), %d round(s)\n",
              spec->name.c_str(), data->train.rows, spec->batch_size, backend.c_str(),
              kernel.c_str(), repeat);
  std::printf("%-8s %-7s %10s %9s %13s %8s\n", "workers", "shards", "samples/s", "vs plain",
              "(range)", "compute");
  std::printf("%-8s %-7s %10.0f %9s %13s %8.2f\n", "plain", "-", plain.samples_per_s, "1.00", "",
              plain.compute_share);
  coach::json results = coach::json::array();
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const auto& c = configs[i];
    const auto& m = best[i];
    const double ratio = median(ratios[i]);
    const auto [lo, hi] = std::minmax_element(ratios[i].begin(), ratios[i].end());
    const std::string w = std::to_string(c.workers) + (c.host_reduce ? " (hr)" : "");
    char range[40];
    std::snprintf(range, sizeof range, "(%.2f-%.2f)", *lo, *hi);
    std::printf("%-8s %-7u %10.0f %9.2f %13s %8.2f\n", w.c_str(), c.shards, m.samples_per_s, ratio,
                range, m.compute_share);
    results.push_back(coach::json{{"workers", c.workers},
                                  {"shards", c.shards},
                                  {"host_reduce", c.host_reduce},
                                  {"samples_per_s", rounded(m.samples_per_s, 1)},
                                  {"ratio_to_plain", rounded(ratio, 4)},
                                  {"ratio_min", rounded(*lo, 4)},
                                  {"ratio_max", rounded(*hi, 4)},
                                  {"compute_share", rounded(m.compute_share, 4)}});
  }
  coach::json layers_json = coach::json::array();
  double layers_rate = 0;
  if (layer_batches > 0) {
    const auto b = layer_breakdowns(*spec, data->train, *kind, layer_batches, compare_gemm, clock);
    layers_rate = b.samples_per_s;
    for (const auto& l : b.layers)
      layers_json.push_back(coach::json{{"kind", l.kind},
                                        {"forward_ms", rounded(l.forward_ms, 4)},
                                        {"backward_ms", rounded(l.backward_ms, 4)},
                                        {"forward_min_ms", rounded(l.forward_min_ms, 4)},
                                        {"backward_min_ms", rounded(l.backward_min_ms, 4)}});
  }
  if (json)
    std::printf("%s\n", coach::json{{"backend", backend},
                                    {"kernel", kernel},
                                    {"clock", clock_name},
                                    {"plain_loop_samples_per_s", rounded(plain.samples_per_s, 1)},
                                    {"plain_loop_compute_share", rounded(plain.compute_share, 4)},
                                    {"results", std::move(results)},
                                    {"layers", std::move(layers_json)},
                                    {"layers_samples_per_s", rounded(layers_rate, 1)}}
                            .dump()
                            .c_str());
  return 0;
}
