// sparse_bench: sparse rows over the data path (issue 43): one worker (this process) pulls the
// rows a step touches from 1, 2 or 4 shards in other processes and pushes their gradients, as a
// training step does (rows_pull, rows, push with row frames), next to raw ZeroMQ moving the
// same bytes to as many echo processes in the same run; and the same step while the table
// grows from 10^5 to 10^8 rows.
//
//   sparse_bench [--table-rows 100000,100000000] [--touched 8192] [--dim 8] [--shards 1,2,4]
//                [--seconds 1] [--fill] [--json]
//
// A round: `touched` distinct rows drawn uniformly from the table (one of 32 sets drawn before
// measuring, in turn) are pulled from the shards that hold them
// (ps/shard_rows.hpp), then pushed back with a gradient each, with the (tiny) dense part of
// the model; the round ends when every shard's answer to the push is here. Its bytes: the
// ids out, ids and values back, ids and gradients out (docs/wire.md "Sparse rows"). The raw
// reference: two echo rounds of ids and values (8 + 4 dim bytes a row) split over as many echo
// processes as shards, which moves more bytes than the Coach round (the pull's request carries
// ids only): its GB/s is what the ratio compares with. --fill first touches every row of the
// table (a 10^8-row table at dim 8 is 3.2 GB of rows in the shards), so the rounds run against
// a table of that size; the shards' resident memory (VmRSS) and this process's (the worker's
// side) are printed with each line. Shards run on huge pages where the system allows, as
// coach-node's (common/huge_pages.hpp).

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <caf/all.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "actors/roles.hpp"
#include "actors/zmq_transport.hpp"
#include "bench/bench_processes.hpp"
#include "bench/bench_rounds.hpp"
#include "bench/bench_shard.hpp"
#include "common/huge_pages.hpp"
#include "common/json.hpp"
#include "common/log.hpp"
#include "ps/key_coverage.hpp"
#include "ps/shard_rows.hpp"
#include "wire/row_frames.hpp"

namespace {

using namespace coach;
using namespace coach::bench;
using namespace coach::actors;

/// The model: one table of `rows` rows of `dim`, looked up by one field, under a dense layer.
worker::network sparse_model(std::uint64_t rows, std::uint32_t dim) {
  worker::model_config m;
  m.hidden = {};
  m.embeddings.push_back({.fields = {0}, .rows = rows, .dim = dim});
  worker::dataset shape;
  shape.features = 1;
  shape.fields = 1;
  shape.classes = 2;
  return worker::network::for_data(m, shape).value();
}

std::shared_ptr<job_context> bench_context(std::uint64_t rows, std::uint32_t dim,
                                           std::uint32_t shards, std::shared_ptr<transport> net) {
  auto model = sparse_model(rows, dim);
  const std::size_t n = model.num_params();
  auto ctx = std::make_shared<job_context>(job_context{
      .job = 1,
      .spec = {},
      .backend = kernels::backend_kind::cpu,
      .data = nullptr,
      .model = std::move(model),
      .map = ps::shard_map::even(n, (n + shards - 1) / shards, shards),
      .net = std::move(net),
      .master = {0, 1},
      .shards = {},
      .workers = {{0, 2}},
  });
  ctx->spec.optimizer.kind = ps::optimizer_kind::sgd;
  ctx->spec.optimizer.sgd.learning_rate = 1e-6f;
  ctx->spec.sparse_optimizer.kind = sparse::row_optimizer_kind::sgd;
  ctx->spec.sparse_optimizer.learning_rate = 1e-6f;
  for (std::uint32_t k = 0; k < shards; ++k) ctx->shards.push_back({k + 1, 0x10000u + k});
  return ctx;
}

/// Child: serves shard `id` until killed.
int serve_shard(std::uint32_t id, std::uint32_t shards, std::uint64_t rows, std::uint32_t dim,
                const std::string& listen, const std::string& parent, int ready_fd) {
  return serve_shard_process(
      "sparse_bench", id, {.listen = listen}, parent, ready_fd,
      [&](std::shared_ptr<transport> net) { return bench_context(rows, dim, shards, net); },
      [](const job_context& ctx) { return std::vector<float>(ctx.model.num_params(), 0.5f); });
}

/// VmRSS of process `pid` in bytes (0 when unreadable).
std::uint64_t resident(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  std::uint64_t kb = 0;
  while (in >> key)
    if (key == "VmRSS:") {
      in >> kb;
      return kb * 1024;
    } else {
      std::getline(in, key);
    }
  return 0;
}

/// The worker's side of the rounds.
class sparse_rounds {
 public:
  sparse_rounds(caf::actor_system& sys, std::shared_ptr<job_context> ctx, std::uint64_t rows,
                std::uint32_t dim, std::size_t touched)
      : ctx_(std::move(ctx)),
        self_(sys),
        rows_(rows),
        dim_(dim),
        touched_(touched),
        received_(ctx_->model.num_params()) {
    me_ = ctx_->workers[0];
    ctx_->net->bind(me_, caf::actor_cast<caf::actor>(self_));
    dense_ = std::make_shared<std::vector<float>>(ctx_->model.num_params(), 0.0f);
    for (std::uint32_t k = 0; k < ctx_->shards.size(); ++k)
      ranges_.push_back(ctx_->map.ranges_of(k));
  }
  ~sparse_rounds() { ctx_->net->unbind(me_); }

  /// Pulls version 0's rows of nothing until every shard answers (children may still start).
  bool handshake() {
    std::vector<bool> ready(ctx_->shards.size(), false);
    for (int attempt = 0; attempt < 100 && std::count(ready.begin(), ready.end(), false) > 0;
         ++attempt) {
      for (std::uint32_t k = 0; k < ctx_->shards.size(); ++k)
        if (!ready[k]) send_pull(k, {});
      self_->receive(
          [&](wire::wire_message& m) {
            for (std::uint32_t k = 0; k < ctx_->shards.size(); ++k)
              if (m.hdr.src == ctx_->shards[k]) ready[k] = true;
          },
          caf::after(std::chrono::milliseconds(100)) >> [] {});
    }
    for (bool more = true; more;)
      self_->receive([](wire::wire_message&) {},
                     caf::after(std::chrono::milliseconds(50)) >> [&] { more = false; });
    return std::count(ready.begin(), ready.end(), false) == 0;
  }

  /// Touches every row of the table, `chunk` rows at a time (pulled at the current version).
  void fill(std::size_t chunk = 1 << 20) {
    for (std::uint64_t first = 0; first < rows_; first += chunk) {
      std::vector<std::uint64_t> ids(std::min<std::uint64_t>(chunk, rows_ - first));
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = first + i;
      pull(ids);
      if (first / chunk % 10 == 9)
        std::fprintf(stderr, "\r  filled %llu of %llu rows", (unsigned long long)(first + chunk),
                     (unsigned long long)rows_);
    }
    std::fprintf(stderr, "\r\033[K");
  }

  /// One step: pull `touched` random rows, push their gradients, await the answers. The rows
  /// of each round come from sets drawn before measuring (drawing and sorting them took a fifth
  /// of a round), cycled.
  void round() {
    if (sets_.empty()) draw_sets();
    pull(sets_[std::size_t(step_) % sets_.size()]);
    push();
    ++step_;
  }

  /// Payload bytes of a round, both directions: ids out; ids and values back; ids and
  /// gradients (and the dense part) out; the dense part back.
  std::size_t bytes_per_round() const {
    const std::size_t row = 8 + 4 * std::size_t(dim_);
    return touched_ * (8 + 2 * row) + 2 * dense_->size() * sizeof(float);
  }

 private:
  /// 32 sets of `touched` distinct rows drawn uniformly from the table, each ascending.
  void draw_sets() {
    std::uniform_int_distribution<std::uint64_t> pick(0, rows_ - 1);
    sets_.resize(32);
    for (auto& ids : sets_) {
      while (ids.size() < std::min<std::uint64_t>(touched_, rows_)) {
        const std::size_t want = touched_ - ids.size();
        for (std::size_t i = 0; i < want; ++i) ids.push_back(pick(rng_));
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      }
    }
  }

  std::uint32_t owner(std::uint64_t row) const {
    return ctx_->map.owner(ps::row_key_of(0, row, ctx_->model.num_params()) /
                           ctx_->map.slice_size());
  }

  void send_pull(std::uint32_t k, std::span<const std::uint64_t> ids) {
    wire::wire_message m;
    m.hdr = {.src = me_,
             .dst = ctx_->shards[k],
             .kind = wire::msg_kind::rows_pull,
             .job = 1,
             .step = step_};
    auto mem = std::make_shared<std::vector<std::uint64_t>>(ids.begin(), ids.end());
    const wire::row_frames_part part{0, *mem, {}};
    wire::append_row_parts(m, std::span(&part, 1), mem, false);
    ctx_->net->send(std::move(m));
  }

  /// Pulls `ids` (ascending) from their holders, awaiting every answer.
  void pull(std::span<const std::uint64_t> ids) {
    by_shard_.assign(ctx_->shards.size(), {});
    for (auto id : ids) by_shard_[owner(id)].push_back(id);
    std::size_t waiting = 0;
    for (std::uint32_t k = 0; k < by_shard_.size(); ++k) {
      if (by_shard_[k].empty()) continue;
      send_pull(k, by_shard_[k]);
      ++waiting;
    }
    while (waiting > 0)
      self_->receive([&](wire::wire_message& m) {
        if (m.hdr.kind != wire::msg_kind::rows || m.hdr.step != step_) return;
        auto parts = wire::read_row_parts(m, 0, true);
        if (!parts || !m.hdr.ranges.empty()) {
          std::fprintf(stderr, "sparse_bench: a malformed or short rows answer\n");
          std::exit(1);
        }
        --waiting;
      });
  }

  void push() {
    auto grads = std::make_shared<std::vector<float>>();
    for (std::uint32_t k = 0; k < ctx_->shards.size(); ++k) {
      wire::wire_message m;
      m.hdr = {.src = me_,
               .dst = ctx_->shards[k],
               .kind = wire::msg_kind::push,
               .job = 1,
               .step = step_};
      m.hdr.samples = 1;
      m.hdr.ranges = ranges_[k];
      for (const auto& r : ranges_[k])
        m.frames.push_back(wire::frame::of(dense_, dense_->data() + r.begin, r.size()));
      if (!by_shard_[k].empty()) {
        auto mem = std::make_shared<std::pair<std::vector<std::uint64_t>, std::vector<float>>>(
            std::move(by_shard_[k]), std::vector<float>(by_shard_[k].size() * dim_, 1e-3f));
        mem->second.assign(mem->first.size() * dim_, 1e-3f);
        const wire::row_frames_part part{0, mem->first, mem->second};
        wire::append_row_parts(m, std::span(&part, 1), mem, true);
      }
      ctx_->net->send(std::move(m));
    }
    received_.clear();
    while (!received_.complete())
      self_->receive([&](wire::wire_message& m) {
        if (m.hdr.kind != wire::msg_kind::params || m.hdr.step != step_ + 1) return;
        if (auto ok = wire::accept_params(m, received_); !ok) {
          std::fprintf(stderr, "sparse_bench: %s\n", ok.error().message.c_str());
          std::exit(1);
        }
      });
  }

  std::shared_ptr<job_context> ctx_;
  caf::scoped_actor self_;
  std::uint64_t rows_;
  std::uint32_t dim_;
  std::size_t touched_;
  wire::endpoint me_;
  std::shared_ptr<std::vector<float>> dense_;
  std::vector<std::vector<ps::key_range>> ranges_;
  std::vector<std::vector<std::uint64_t>> by_shard_;
  std::vector<std::vector<std::uint64_t>> sets_;
  ps::key_coverage received_;
  std::mt19937_64 rng_{43};
  std::int64_t step_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Coach sparse_bench: sparse rows pulled and pushed vs raw ZeroMQ", "sparse_bench"};
  std::string tables_text = "100000,100000000", shards_text = "1,2,4";
  std::size_t touched = 8192;
  std::uint32_t dim = 8;
  double seconds = 1.0;
  bool json = false, fill = false;
  std::string listen, parent;
  int serve_shard_id = -1, ready_fd = -1;
  bool serve_echo_flag = false;
  std::uint32_t shards_arg = 1;
  std::uint64_t rows_arg = 0;
  app.add_option("--table-rows", tables_text, "Rows of the table, one configuration each");
  app.add_option("--touched", touched, "Distinct rows a step pulls and pushes");
  app.add_option("--dim", dim, "Floats a row");
  app.add_option("--shards", shards_text, "Shard counts");
  app.add_option("--seconds", seconds, "Measuring time per configuration");
  app.add_flag("--fill", fill, "Touch every row of the table before measuring");
  app.add_flag("--json", json, "Print one JSON object on the last line");
  app.add_option("--serve-shard", serve_shard_id)->group("");  // internal: child processes
  app.add_flag("--serve-echo", serve_echo_flag)->group("");
  app.add_option("--listen", listen)->group("");
  app.add_option("--parent", parent)->group("");
  app.add_option("--num-shards", shards_arg)->group("");
  app.add_option("--rows", rows_arg)->group("");
  app.add_option("--ready-fd", ready_fd)->group("");
  CLI11_PARSE(app, argc, argv);
  // The bench's output is its table: its transport's warnings (each configuration's shard
  // processes stopped, their connections closed) are expected; errors still show.
  (void)log::init({.program = "sparse_bench", .min = log::level::error});
  if (serve_echo_flag) return serve_echo(listen);
  coach::use_huge_pages(argv);  // as coach-node: large buffers (a shard's index) on huge pages
  if (serve_shard_id >= 0)
    return serve_shard(std::uint32_t(serve_shard_id), shards_arg, rows_arg, dim, listen, parent,
                       ready_fd);
  if (touched == 0 || dim == 0) {
    std::fprintf(stderr, "sparse_bench: --touched and --dim must be >= 1\n");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  coach::json lines = coach::json::array();
  std::printf("%12s %6s %10s %12s %10s %11s %9s %17s %14s %14s\n", "table rows", "shards", "p50 us",
              "rows/s", "GB/s", "raw GB/s", "ratio", "sent B/row (rows)", "shards' RSS",
              "worker's RSS");
  for (const auto table : parse_list(tables_text))
    for (const auto m : parse_list(shards_text)) {
      std::vector<child> children;
      {  // the actor system and the transport end before the shards: no warning of their going
        auto net = zmq_transport::start({.host = 0, .listen = free_address()}).value();
        for (std::uint32_t k = 0; k < m; ++k) {
          int fds[2];
          if (::pipe(fds) != 0) return 1;
          const std::string addr = free_address();
          net->add_peer(k + 1, addr);
          children.push_back(spawn_self(
              {"--serve-shard", std::to_string(k), "--num-shards", std::to_string(m), "--rows",
               std::to_string(table), "--dim", std::to_string(dim), "--listen", addr, "--parent",
               net->bound_address(), "--ready-fd", std::to_string(fds[1])}));
          ::close(fds[1]);
          char one = 0;
          [[maybe_unused]] auto n = ::read(fds[0], &one, 1);
          ::close(fds[0]);
        }
        caf::actor_system_config cfg;
        cfg.set("logger.console", caf::atom("none"));
        caf::actor_system sys{cfg};
        {
          sparse_rounds coach_side(sys, bench_context(table, dim, std::uint32_t(m), net), table,
                                   dim, touched);
          if (!coach_side.handshake()) {
            std::fprintf(stderr, "sparse_bench: the shards did not answer\n");
            stop(children);
            return 1;
          }
          if (fill) coach_side.fill();
          const std::size_t row_bytes = 8 + 4 * std::size_t(dim);
          echo_rounds raw(touched * row_bytes, m);
          const auto sent_before = net->traffic().total_bytes();
          const auto got =
              interleaved({[&] { coach_side.round(); },
                           [&] {
                             raw.round();
                             raw.round();
                           }},
                          {coach_side.bytes_per_round(), 2 * raw.bytes_per_round()}, seconds);
          // What the worker's side sent a round, as its transport counted it (headers included),
          // against what the touched rows imply: ids out, then ids and gradients out.
          const double sent_per_row = double(net->traffic().total_bytes() - sent_before) /
                                      double(got[0].rounds) / double(touched);
          const double implied_per_row = double(8 + 8 + 4 * std::size_t(dim));
          std::uint64_t rss = 0;
          for (const auto& c : children) rss += resident(c.pid);
          const double rows_per_s = double(touched) / (got[0].p50_us / 1e6);
          const double ratio = got[0].gbps / got[1].gbps;
          const std::uint64_t own = resident(::getpid());
          std::printf(
              "%12llu %6zu %10.0f %12.0f %10.3f %11.3f %9.2f %9.1f (%5.1f) %10.1f MiB "
              "%10.1f MiB\n",
              (unsigned long long)table, m, got[0].p50_us, rows_per_s, got[0].gbps, got[1].gbps,
              ratio, sent_per_row, implied_per_row, double(rss) / (1 << 20),
              double(own) / (1 << 20));
          std::fflush(stdout);
          coach::json line = coach::json::object();
          line["table_rows"] = table;
          line["shards"] = m;
          line["p50_us"] = rounded(got[0].p50_us, 1);
          line["rows_per_s"] = rounded(rows_per_s, 0);
          line["gbps"] = rounded(got[0].gbps, 3);
          line["raw_gbps"] = rounded(got[1].gbps, 3);
          line["ratio"] = rounded(ratio, 3);
          line["bytes_per_row"] =
              rounded(double(coach_side.bytes_per_round()) / double(touched), 1);
          line["sent_bytes_per_row"] = rounded(sent_per_row, 2);
          line["implied_sent_bytes_per_row"] = implied_per_row;
          line["shards_rss_bytes"] = rss;
          line["worker_rss_bytes"] = own;
          lines.push_back(line);
        }
      }
      stop(children);
    }
  if (json) std::printf("%s\n", coach::json{{"lines", std::move(lines)}}.dump().c_str());
  return 0;
}
