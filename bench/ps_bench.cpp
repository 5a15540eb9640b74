// ps_bench: push+pull throughput and round-trip latency between one worker (this process) and
// 1, 2 or 4 parameter-server shards in other processes, over the ZeroMQ transport, next to a
// raw ZeroMQ echo of the same sizes measured in the same run.
//
//   ps_bench [--sizes 4096,65536,1048576,16777216] [--shards 1,2,4] [--seconds 1] [--curve]
//            [--json]
//
// A round: the worker pushes a gradient for the whole vector (split by the shard map), every
// shard applies it (plain SGD) and answers with its updated slice, piece by piece (ps::piece).
// Throughput counts the bytes of both directions. The raw reference: a DEALER sends the same
// bytes to a ROUTER in another process that echoes them back ("zmq", the ratio the goal is set
// on). Beside it, for 2 and more shards, the same fan-out in raw ZeroMQ ("fan-out": as many echo
// processes, each sent its share): what spreading the bytes over that many processes costs by
// itself on this machine. The co-located line runs the shard in this process (no socket).
// --curve adds the same rounds with keys (docs/security.md; one key pair for all the processes),
// measured in the same turns, three ways: every message inside CURVE (--data-protection none),
// on sealed data connections encrypted (encrypt: AES-256-GCM where the CPU has AES-NI) and only
// authenticated (authenticate): the cost of security against the plain transport.

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "actors/roles.hpp"
#include "actors/zmq_transport.hpp"
#include "bench/bench_processes.hpp"
#include "bench/bench_rounds.hpp"
#include "bench/bench_shard.hpp"
#include "common/json.hpp"
#include "common/log.hpp"
#include "ps/key_coverage.hpp"

namespace {

using namespace coach;
using namespace coach::bench;
using namespace coach::actors;
using clock_type = std::chrono::steady_clock;
using transport_logic::data_protection;
/// The ways --curve measures, in this order: inside CURVE, encrypted, authenticated.
constexpr data_protection secured_modes[] = {data_protection::none, data_protection::encrypt,
                                             data_protection::authenticate};

/// The job context a shard needs: a vector of `floats` floats in `shards` shards on hosts
/// 1..shards, one worker on host 0.
std::shared_ptr<job_context> bench_context(std::size_t floats, std::uint32_t shards,
                                           std::shared_ptr<transport> net) {
  auto ctx = std::make_shared<job_context>(job_context{
      .job = 1,
      .spec = {},
      .backend = kernels::backend_kind::cpu,
      .data = nullptr,
      .model = worker::network::build(worker::model_config{.hidden = {}}, {1, 1, 1}, 2).value(),
      .map = ps::shard_map::even(floats, (floats + shards - 1) / shards, shards),
      .net = std::move(net),
      .master = {0, 1},
      .shards = {},
      .workers = {{0, 2}},
  });
  ctx->spec.optimizer.kind = ps::optimizer_kind::sgd;
  ctx->spec.optimizer.sgd.learning_rate = 1e-6f;
  for (std::uint32_t k = 0; k < shards; ++k) ctx->shards.push_back({k + 1, 0x10000u + k});
  return ctx;
}

/// Child: serves shard `id` until killed.
int serve_shard(std::uint32_t id, std::uint32_t shards, std::size_t floats,
                const std::string& listen, const std::string& parent, int ready_fd,
                const std::string& key_file, transport_logic::data_protection protection) {
  auto security = load_security(key_file, "", "");
  if (!security) {
    std::fprintf(stderr, "ps_bench shard: %s\n", security.error().to_string().c_str());
    return 1;
  }
  return serve_shard_process(
      "ps_bench", id,
      {.listen = listen, .security = std::move(*security), .data_protection = protection}, parent,
      ready_fd, [&](std::shared_ptr<transport> net) { return bench_context(floats, shards, net); },
      [&](const job_context&) { return std::vector<float>(floats, 0.5f); });
}

/// Push+pull rounds from a worker endpoint on host 0 through the job's transport to its shards.
class coach_rounds {
 public:
  coach_rounds(caf::actor_system& sys, std::shared_ptr<job_context> ctx, std::size_t floats)
      : ctx_(std::move(ctx)), self_(sys), floats_(floats), received_(floats) {
    me_ = ctx_->workers[0];
    ctx_->net->bind(me_, caf::actor_cast<caf::actor>(self_));
    grad_ = std::make_shared<std::vector<float>>(floats, 1.0f);
    for (std::uint32_t k = 0; k < ctx_->shards.size(); ++k)
      ranges_.push_back(ctx_->map.ranges_of(k));
  }
  ~coach_rounds() { ctx_->net->unbind(me_); }
  coach_rounds(const coach_rounds&) = delete;
  coach_rounds& operator=(const coach_rounds&) = delete;

  /// Pulls version 0 from every shard until all answer (children may still start); false when
  /// some never did.
  bool handshake() {
    const auto shards = std::ptrdiff_t(ctx_->shards.size());
    std::vector<bool> ready(std::size_t(shards), false);
    for (int attempt = 0; attempt < 100 && std::count(ready.begin(), ready.end(), true) < shards;
         ++attempt) {
      for (std::ptrdiff_t k = 0; k < shards; ++k) {
        if (ready[std::size_t(k)]) continue;
        wire_message m;
        m.hdr = {.src = me_,
                 .dst = ctx_->shards[std::size_t(k)],
                 .kind = msg_kind::pull,
                 .job = 1,
                 .step = 0};
        ctx_->net->send(std::move(m));
      }
      self_->receive(
          [&](wire_message& m) {
            for (std::ptrdiff_t k = 0; k < shards; ++k)
              if (m.hdr.src == ctx_->shards[std::size_t(k)]) ready[std::size_t(k)] = true;
          },
          caf::after(std::chrono::milliseconds(100)) >> [] {});
    }
    // Drain duplicate answers to the retries.
    for (bool more = true; more;)
      self_->receive([](wire_message&) {},
                     caf::after(std::chrono::milliseconds(50)) >> [&] { more = false; });
    return std::count(ready.begin(), ready.end(), true) == shards;
  }

  /// One step: push the gradient to every shard, wait for every updated key.
  void round() {
    for (std::uint32_t k = 0; k < ctx_->shards.size(); ++k) {
      wire_message m;
      m.hdr = {.src = me_, .dst = ctx_->shards[k], .kind = msg_kind::push, .job = 1, .step = step_};
      m.hdr.samples = 1;
      m.hdr.ranges = ranges_[k];
      for (const auto& r : ranges_[k])
        m.frames.push_back(frame::of(grad_, grad_->data() + r.begin, r.size()));
      ctx_->net->send(std::move(m));
    }
    // The answer may come in pieces (one params message per piece of each shard): count keys.
    received_.clear();
    while (!received_.complete())
      self_->receive([&](wire_message& m) {
        if (m.hdr.kind != msg_kind::params || m.hdr.step != step_ + 1) return;
        auto ok = accept_params(m, received_);
        if (!ok) {
          std::fprintf(stderr, "ps_bench: malformed parameters from shard %llu: %s\n",
                       static_cast<unsigned long long>(m.hdr.src.id), ok.error().message.c_str());
          std::exit(1);
        }
      });
    ++step_;
  }

  std::size_t bytes_per_round() const { return 2 * floats_ * sizeof(float); }

 private:
  std::shared_ptr<job_context> ctx_;
  caf::scoped_actor self_;
  std::size_t floats_;
  endpoint me_;
  std::shared_ptr<std::vector<float>> grad_;
  std::vector<std::vector<ps::key_range>> ranges_;
  ps::key_coverage received_;
  std::int64_t step_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Coach ps_bench: push+pull over the ZeroMQ transport vs raw ZeroMQ", "ps_bench"};
  std::string sizes_text = "4096,65536,1048576,16777216", shards_text = "1,2,4";
  double seconds = 1.0;
  bool json = false;
  std::string listen, parent;
  int serve_shard_id = -1;
  int ready_fd = -1;
  std::uint32_t shards_arg = 1;
  std::size_t floats_arg = 0;
  bool serve_echo_flag = false, curve = false;
  std::string key_file, protection_text = "none";
  app.add_option("--data-protection", protection_text)->group("");
  app.add_option("--sizes", sizes_text, "Bytes of the whole parameter vector per round");
  app.add_option("--shards", shards_text, "Shard counts");
  app.add_option("--seconds", seconds, "Measuring time per configuration");
  app.add_flag("--json", json, "Print one JSON object on the last line");
  app.add_flag("--curve", curve, "Also measure the transport with CURVE keys, side by side");
  app.add_option("--key", key_file)->group("");
  app.add_option("--serve-shard", serve_shard_id)->group("");  // internal: child processes
  app.add_flag("--serve-echo", serve_echo_flag)->group("");
  app.add_option("--listen", listen)->group("");
  app.add_option("--parent", parent)->group("");
  app.add_option("--num-shards", shards_arg)->group("");
  app.add_option("--floats", floats_arg)->group("");
  app.add_option("--ready-fd", ready_fd)->group("");
  CLI11_PARSE(app, argc, argv);
  // The bench's output is its table: its transport's warnings (each configuration's shard
  // processes stopped, their connections closed) are expected; errors still show.
  (void)log::init({.program = "ps_bench", .min = log::level::error});
  if (serve_echo_flag) {
    std::string secret;
    if (!key_file.empty()) {
      auto keys = read_key_file(key_file);
      if (!keys) return 1;
      secret = keys->secret_key;
    }
    return serve_echo(listen, secret);
  }
  if (serve_shard_id >= 0)
    return serve_shard(std::uint32_t(serve_shard_id), shards_arg, floats_arg, listen, parent,
                       ready_fd, key_file,
                       transport_logic::parse_data_protection(protection_text)
                           .value_or(transport_logic::data_protection::none));
  // --curve: one key pair for every process of the run, in a directory of its own.
  std::string curve_key;
  key_pair curve_pair;
  if (curve) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("coach-ps-bench-keys-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    auto keys = generate_key_pair();
    if (!keys || !write_key_files(dir, "bench", *keys)) {
      std::fprintf(stderr, "ps_bench: cannot make a key pair in %s\n", dir.c_str());
      return 1;
    }
    curve_key = (dir / "bench.key").string();
    curve_pair = *keys;
  }
  struct remove_keys {
    std::string key;
    ~remove_keys() {
      if (!key.empty()) std::filesystem::remove_all(std::filesystem::path(key).parent_path());
    }
  } keys_cleanup{curve_key};

  const auto sizes = parse_list(sizes_text);
  const auto shard_counts = parse_list(shards_text);
  caf::actor_system_config cfg;
  cfg.set("logger.console", caf::atom("none"));
  cfg.set("scheduler.policy", caf::atom("sharing"));  // as coach-node and the embedded cluster
  caf::actor_system sys{cfg};

  std::printf("ps_bench: push+pull rounds, %.1f s per configuration\n", seconds);
  std::printf("%10s %6s %10s %10s %8s %11s %8s %10s %10s%s\n", "bytes", "shards", "GB/s",
              "zmq GB/s", "ratio", "fan-out GB/s", "ratio", "p50 us", "p99 us",
              curve ? "  curve GB/s  /plain  zmq curve  /zmq-c  curve p50  enc GB/s  /plain "
                      " auth GB/s  /plain"
                    : "");
  coach::json results = coach::json::array();
  for (std::size_t bytes : sizes) {
    const std::size_t floats = std::max<std::size_t>(bytes / sizeof(float), 1);
    echo_rounds echo(floats * sizeof(float), 1);
    std::optional<echo_rounds> curve_echo;  // raw ZeroMQ over CURVE: what encryption costs alone
    if (curve) curve_echo.emplace(floats * sizeof(float), 1, &curve_pair, curve_key);
    for (std::size_t m : shard_counts) {
      // m shard processes serving `net` (with the key or without): false when one fails.
      auto start_shards = [&](const std::shared_ptr<zmq_transport>& net, const std::string& key,
                              data_protection protection, std::vector<child>& children) {
        for (std::uint32_t k = 0; k < m; ++k) {
          const std::string addr = free_address();
          net->add_peer(k + 1, addr);
          int fds[2];
          if (::pipe(fds) != 0) return false;
          std::vector<std::string> args{
              "--serve-shard", std::to_string(k),      "--num-shards", std::to_string(m),
              "--floats",      std::to_string(floats), "--listen",     addr,
              "--parent",      net->bound_address(),   "--ready-fd",   std::to_string(fds[1])};
          if (!key.empty())
            args.insert(args.end(), {"--key", key, "--data-protection",
                                     std::string(transport_logic::to_string(protection))});
          children.push_back(spawn_self(args));
          ::close(fds[1]);
          char one = 0;
          const bool ready = ::read(fds[0], &one, 1) == 1;  // EOF: the child died first
          ::close(fds[0]);
          if (!ready) {
            std::fprintf(stderr, "ps_bench: shard process %u did not start\n", k);
            return false;
          }
        }
        return true;
      };
      auto start_net = [&](const std::string& key,
                           data_protection protection) -> std::shared_ptr<zmq_transport> {
        auto security = load_security(key, "", "");
        if (!security) return nullptr;
        auto t = zmq_transport::start({.host = 0,
                                       .listen = "tcp://127.0.0.1:0",
                                       .security = std::move(*security),
                                       .data_protection = protection});
        if (!t) std::fprintf(stderr, "ps_bench: %s\n", t.error().to_string().c_str());
        return t ? *t : nullptr;
      };
      auto net = start_net("", data_protection::none);
      if (!net) return 1;
      std::vector<child> children;
      auto ctx = bench_context(floats, std::uint32_t(m), net);
      if (!start_shards(net, "", data_protection::none, children)) {
        stop(children);
        return 1;
      }
      // With keys: inside CURVE, encrypted and authenticated data connections (that order).
      std::vector<std::shared_ptr<job_context>> secured_ctx;
      if (curve)
        for (auto p : secured_modes) {
          auto secured_net = start_net(curve_key, p);
          if (!secured_net) return 1;
          secured_ctx.push_back(bench_context(floats, std::uint32_t(m), secured_net));
          if (!start_shards(secured_net, curve_key, p, children)) {
            stop(children);
            return 1;
          }
        }
      // Coach, the raw echo and, for more than one shard, the same fan-out in raw ZeroMQ (m
      // echo processes, each sent its share), measured in turns.
      coach_rounds coach(sys, ctx, floats);
      std::vector<std::unique_ptr<coach_rounds>> secured;
      for (auto& c : secured_ctx) secured.push_back(std::make_unique<coach_rounds>(sys, c, floats));
      bool answered = coach.handshake();
      for (auto& s : secured) answered = answered && s->handshake();
      if (!answered) {
        std::fprintf(stderr, "ps_bench: shards did not answer\n");
        stop(children);
        return 1;
      }
      std::optional<echo_rounds> fan_out;
      if (m > 1) fan_out.emplace(floats * sizeof(float), m);
      std::vector<std::function<void()>> rounds = {[&] { coach.round(); }, [&] { echo.round(); }};
      std::vector<std::size_t> bytes_per_round = {coach.bytes_per_round(), echo.bytes_per_round()};
      if (fan_out) {
        rounds.push_back([&] { fan_out->round(); });
        bytes_per_round.push_back(fan_out->bytes_per_round());
      }
      const std::size_t secured_at = rounds.size() + 1;  // after the raw CURVE echo
      if (!secured.empty()) {
        rounds.push_back([&] { curve_echo->round(); });
        bytes_per_round.push_back(curve_echo->bytes_per_round());
        for (auto& s : secured) {
          rounds.push_back([&s] { s->round(); });
          bytes_per_round.push_back(s->bytes_per_round());
        }
      }
      const auto got = interleaved(rounds, bytes_per_round, seconds);
      const auto& r = got[0];
      const auto& ref = got[1];
      const auto& fan = fan_out ? got[2] : got[1];
      fan_out.reset();
      secured.clear();
      stop(children);
      std::printf("%10zu %6zu %10.3f %10.3f %8.2f %11.3f %8.2f %10.1f %10.1f", floats * 4, m,
                  r.gbps, ref.gbps, r.gbps / ref.gbps, fan.gbps, r.gbps / fan.gbps, r.p50_us,
                  r.p99_us);
      coach::json item{{"size_bytes", floats * 4},
                       {"shards", m},
                       {"gbps", rounded(r.gbps, 4)},
                       {"zmq_gbps", rounded(ref.gbps, 4)},
                       {"ratio_to_zmq", rounded(r.gbps / ref.gbps, 4)},
                       {"zmq_fanout_gbps", rounded(fan.gbps, 4)},
                       {"ratio_to_fanout", rounded(r.gbps / fan.gbps, 4)},
                       {"p50_us", rounded(r.p50_us, 1)},
                       {"p99_us", rounded(r.p99_us, 1)}};
      if (curve) {
        const auto& c = got[secured_at];
        const auto& raw = got[secured_at - 1];
        const auto& enc = got[secured_at + 1];
        const auto& auth = got[secured_at + 2];
        std::printf(" %10.3f %8.2f %10.3f %8.2f %10.1f %9.3f %7.2f %9.3f %7.2f", c.gbps,
                    c.gbps / r.gbps, raw.gbps, c.gbps / raw.gbps, c.p50_us, enc.gbps,
                    enc.gbps / r.gbps, auth.gbps, auth.gbps / r.gbps);
        item["encrypt_gbps"] = rounded(enc.gbps, 4);
        item["encrypt_ratio"] = rounded(enc.gbps / r.gbps, 4);
        item["encrypt_p50_us"] = rounded(enc.p50_us, 1);
        item["authenticate_gbps"] = rounded(auth.gbps, 4);
        item["authenticate_ratio"] = rounded(auth.gbps / r.gbps, 4);
        item["authenticate_p50_us"] = rounded(auth.p50_us, 1);
        item["curve_gbps"] = rounded(c.gbps, 4);
        item["curve_ratio"] = rounded(c.gbps / r.gbps, 4);
        item["zmq_curve_gbps"] = rounded(raw.gbps, 4);
        item["curve_ratio_to_zmq_curve"] = rounded(c.gbps / raw.gbps, 4);
        item["curve_p50_us"] = rounded(c.p50_us, 1);
      }
      std::printf("\n");
      results.push_back(std::move(item));
    }
    // Co-located: the shard in this process, no socket.
    auto local = make_inproc_transport();
    auto ctx = bench_context(floats, 1, local);
    ctx->shards = {{0, 0x10000u}};
    std::vector<float> initial(floats, 0.5f);
    auto shard = spawn_shard(sys, ctx, 0, initial);
    measurement r;
    {
      coach_rounds coach(sys, ctx, floats);
      coach.handshake();
      r = interleaved({[&] { coach.round(); }}, {coach.bytes_per_round()}, seconds)[0];
    }
    caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
    std::printf("%10zu %6s %10.3f %10s %8s %11s %8s %10.1f %10.1f\n", floats * 4, "local", r.gbps,
                "-", "-", "-", "-", r.p50_us, r.p99_us);
    results.push_back(coach::json{{"size_bytes", floats * 4},
                                  {"shards", 0},
                                  {"colocated", true},
                                  {"gbps", rounded(r.gbps, 4)},
                                  {"p50_us", rounded(r.p50_us, 1)},
                                  {"p99_us", rounded(r.p99_us, 1)}});
  }
  if (json) std::printf("%s\n", coach::json{{"results", std::move(results)}}.dump().c_str());
  return 0;
}
