// coach-node: the daemon of one host. It runs the node agent (heartbeats, job parts) and, with
// --scheduler, the cluster scheduler and job API. SIGTERM or SIGINT drains: the node takes no new
// work, finishes what it runs, and exits; a second signal exits at once.
//
// The scheduler keeps its jobs in a job store (SQLite): --store PATH, default coach-jobs.db in
// the working directory; --store '' keeps it in memory. A scheduler started on an existing store
// resumes every job it holds (docs/scheduler.md, "In the cluster scheduler").
//
// Script jobs (model: {script: ...}, docs/python.md): the node writes the files that came with
// the job into $TMPDIR/coach-node-NAME/job-ID.XXXXXX and runs its workers' processes from there
// with --python.
//
// Authentication (docs/security.md): with --key every connection is CURVE and only keys in
// --authorized-keys may connect; without a key, only loopback addresses may. With a key, what a
// node sends to other nodes travels on data connections, encrypted (--data-protection encrypt,
// the default), only authenticated (authenticate: trusted networks), or over CURVE (none).
//
// What the transport received and refused, by reason (actors::receive_stats: malformed, foreign,
// unknown_dst, refused connections), is one line on stderr when the node stops, and every
// --stats-interval seconds while it runs: "received: messages 12, bytes 3456,
// malformed 3, ..." (docs/hostile-input.md).
//
// Exit codes: 0 after a clean drain; 1 when it cannot start (address in use, ...); 2 bad flags
// (a store that cannot be opened, or a key file, included).

#include <CLI/CLI.hpp>
#include <caf/all.hpp>

#include <sys/prctl.h>
#include <unistd.h>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "actors/address.hpp"
#include "actors/cluster.hpp"
#include "actors/dashboard.hpp"
#include "actors/http_server.hpp"
#include "actors/join_watch.hpp"
#include "actors/metrics.hpp"
#include "common/huge_pages.hpp"
#include "common/log.hpp"
#include "host/host_probe.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "scheduler/job_store.hpp"
#include "scheduler/placement.hpp"
#include "scheduler/policy.hpp"

namespace {

std::atomic<int> g_signals{0};

extern "C" void on_signal(int) {
  if (g_signals.fetch_add(1) >= 1) std::_Exit(1);  // a second signal: leave at once
}

/// One line of what the transport received and refused, by reason.
void print_received(const coach::actors::zmq_transport& net) {
  coach::log::info("received: {}", to_string(net.received()));
}

/// Stops the actors a coach-node started (a start that failed half-way).
void self_stop(caf::actor_system& sys, const caf::actor& agent, const caf::actor& sched) {
  caf::scoped_actor self{sys};
  self->send_exit(agent, caf::exit_reason::user_shutdown);
  if (sched) self->send_exit(sched, caf::exit_reason::user_shutdown);
}

/// Where this node writes the files of script jobs: $TMPDIR/coach-node-NAME (the name's
/// characters other than letters, digits, '.', '_' and '-' as '_').
std::string script_root(const std::string& name) {
  std::string safe;
  for (const char c : name)
    safe +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ? c : '_';
  std::error_code ec;
  auto tmp = std::filesystem::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  return (tmp / ("coach-node-" + safe)).string();
}

bool is_wildcard(const std::string& address) {
  return address.find("://*:") != std::string::npos ||
         address.find("://0.0.0.0:") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  // CUDA numbers the devices fastest first unless told otherwise; nvidia-smi (the GPU ids of
  // the heartbeat, --gpus) numbers them by PCI bus. The same order makes them the same ids.
  setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 0);  // a user's own setting stays
  using namespace coach;
  use_huge_pages(argv);  // large buffers on huge pages (common/huge_pages.hpp)
  keep_freed_memory();   // and what it frees stays mapped (before any thread starts)
  CLI::App app{"coach-node: the Coach daemon of one host", "coach-node"};
  std::string listen, join, name, advertise, gpus_text,
      store_path = "coach-jobs.db", policy, placement = "dltap", cpu_accounting = "measured";
  bool is_scheduler = false;
  std::uint32_t cpus = 0;
  double heartbeat_s = 1.0, node_timeout_s = 5.0, drain_timeout_s = 600.0, rebalance_s = 60.0,
         rr_slice_s = 600.0, stats_s = 0.0;
  app.add_option("--listen", listen,
                 "Data-path address to bind, tcp://IP:PORT (a host name such as localhost binds "
                 "to the address it resolves to)")
      ->required();
  app.add_option("--join", join,
                 "The scheduler's address, HOST:PORT or tcp://HOST:PORT (not with --scheduler)");
  app.add_flag("--scheduler", is_scheduler, "Run the cluster scheduler and the job API here");
  app.add_option("--name", name,
                 "Name shown by `coach nodes` and meant by `coach migrate --to` (default: the "
                 "address); one live node's only: the scheduler refuses a second node of a live "
                 "one's name");
  app.add_option("--advertise", advertise,
                 "Address other nodes use to reach this one (default: --listen)");
  app.add_option("--cpus", cpus,
                 "CPUs to advertise (one per worker or shard; default: those the host has; more "
                 "than it has oversubscribes it)");
  app.add_option("--cpu-accounting", cpu_accounting,
                 "measured: CPUs other programs keep busy are not given to jobs (running elastic "
                 "jobs shrink for them and grow back when they end); reserved: only what Coach "
                 "reserved counts")
      ->check(CLI::IsMember({"measured", "reserved"}))
      ->capture_default_str();
  app.add_option("--store", store_path,
                 "With --scheduler: the job store, an SQLite file ('' = in memory only)")
      ->capture_default_str();
  app.add_option("--policy", policy,
                 "With --scheduler: the policy when the store names none (default fifo)");
  app.add_option("--placement", placement,
                 "With --scheduler: where jobs' parts go unless a spec names its own placement: "
                 "spread | best-fit | random | dltap")
      ->capture_default_str();
  app.add_option("--rr-slice", rr_slice_s,
                 "With --scheduler: seconds of a job's turn under round-robin")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_option("--rebalance-interval", rebalance_s,
                 "With --scheduler: least seconds between two live shard moves of one dltap job "
                 "that raise its share of bytes kept on one host (0: never move)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--gpus", gpus_text, "GPUs this node may use, e.g. 0,1 (default: all)");
  app.add_option("--heartbeat", heartbeat_s, "Seconds between heartbeats")
      ->check(CLI::Range(0.05, 60.0))
      ->capture_default_str();
  app.add_option("--node-timeout", node_timeout_s,
                 "Seconds without a heartbeat before the scheduler declares a node dead (more "
                 "than twice every node's --heartbeat)")
      ->check(CLI::Range(0.2, 3600.0))
      ->capture_default_str();
  app.add_option("--drain-timeout", drain_timeout_s,
                 "Seconds a draining node waits for its work before it exits anyway")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--stats-interval", stats_s,
                 "Seconds between log lines with what the transport received and refused, "
                 "by reason (0: only when the node stops)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  std::string key_file, authorized_dir, server_key_file;
  app.add_option("--key", key_file,
                 "This node's key pair, a .key file from `coach keygen` (default: $COACH_KEY; "
                 "none: plain connections, accepted from loopback only)");
  app.add_option("--authorized-keys", authorized_dir,
                 "Directory of the public keys (*.pub) that may connect, read at every new "
                 "connection (default: $COACH_AUTHORIZED_KEYS, else the --key file's directory)");
  app.add_option("--server-key", server_key_file,
                 "The scheduler node's public key, a .pub file (default: $COACH_SERVER_KEY, else "
                 "this node's own: a cluster-wide key)");
  std::string data_protection_text, data_listen;
  app.add_option("--data-protection", data_protection_text,
                 "How messages to other nodes travel, with a key: encrypt (AES-256-GCM or "
                 "ChaCha20-Poly1305 on a data connection; the default), authenticate (in clear, "
                 "every frame authenticated: trusted networks), none (inside CURVE, slower); "
                 "docs/security.md")
      ->check(CLI::IsMember({"encrypt", "authenticate", "none"}));
  app.add_option("--data-listen", data_listen,
                 "Address of the data connections' listener, tcp://IP:PORT (default: --listen's "
                 "IP, any free port)");
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "Serve Prometheus metrics over HTTP at http://HOST:PORT/metrics (e.g. "
                 "127.0.0.1:9470; port 0: any free one, logged; default: none)");
  bool dashboard_admin = false;
  app.add_flag("--dashboard-admin", dashboard_admin,
               "With --scheduler and --metrics-listen: the dashboard may change the policy and "
               "cancel jobs, given the admin token (`coach dashboard-token`) on a node with a key, "
               "from loopback only without one (default: read-only)");
  std::size_t max_frame_mib = 1024;
  app.add_option("--max-frame-mib", max_frame_mib,
                 "Largest frame a peer may send, in MiB (a larger one closes its connection; it "
                 "must take a job's whole model: 4 bytes a parameter)")
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 20))
      ->capture_default_str();
  bool http_public = false;
  app.add_flag("--http-public", http_public,
               "With --metrics-listen: serve /metrics and the dashboard to every address "
               "(default: loopback clients only)");
  std::string log_level = "info", log_file;
  app.add_option("--log-level", log_level,
                 "Least level of the lines logged: trace, debug, info, warn, error or off")
      ->capture_default_str();
  app.add_option("--log-file", log_file,
                 "Append the log to this file instead of stderr (its directory must exist)");
  std::string python;
  app.add_option("--python", python,
                 "Interpreter for the processes of script jobs' workers (model: {script: ...}) "
                 "on this node, and their evaluators on the scheduler's (default: "
                 "$COACH_PYTHON, else /opt/coach-venv/bin/python, else python3)");
  bool exit_with_parent = false;
  app.add_flag("--exit-with-parent", exit_with_parent,
               "Die (SIGKILL) when the process that started this one exits: for tests and "
               "scripts, so that a killed test leaves no node behind");
  app.set_version_flag("--version", std::string("coach-node ") + COACH_VERSION,
                       "Print the version");
  const pid_t parent = ::getppid();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (exit_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) return 1;  // the parent was already gone
  }
  // COACH_CPU_KERNEL (kernels::make_backend's cpu kernel): a bad value is one line at start, not
  // a job's failure later.
  if (const auto& kernel = kernels::cpu_kernel_from_environment(); !kernel) {
    std::fprintf(stderr, "coach-node: %s\n", kernel.error().message.c_str());
    return 2;
  }
  auto min_level = log::parse_level(log_level);
  if (!min_level) {
    std::fprintf(stderr, "coach-node: --log-level: %s\n", min_level.error().message.c_str());
    return 2;
  }
  if (is_scheduler == !join.empty()) {
    std::fprintf(stderr, "coach-node: give either --scheduler or --join ADDRESS\n");
    return 2;
  }
  if (is_scheduler && node_timeout_s <= 2 * heartbeat_s) {
    std::fprintf(stderr,
                 "coach-node: --node-timeout %g s must be more than twice --heartbeat (%g s), or "
                 "live nodes are declared dead between two heartbeats; give every node a "
                 "shorter --heartbeat\n",
                 node_timeout_s, heartbeat_s);
    return 2;
  }
  if (!join.empty()) {
    auto j = actors::tcp_address(join, "--join");
    if (!j) {
      std::fprintf(stderr, "coach-node: %s\n", j.error().message.c_str());
      return 2;
    }
    join = std::move(*j);
  }
  // A name (localhost) becomes its address: ZeroMQ binds to IPs and interfaces only, and other
  // nodes reach this one at what it advertises.
  for (auto* a : {&listen, &advertise}) {
    if (a->empty()) continue;
    auto resolved = actors::node_address(*a, a == &listen ? "--listen" : "--advertise");
    if (!resolved) {
      std::fprintf(stderr, "coach-node: %s\n", resolved.error().message.c_str());
      return 2;
    }
    *a = std::move(*resolved);
  }
  const std::string address = advertise.empty() ? listen : advertise;
  if (!join.empty()) {
    // Joining its own address, it would reach itself and wait for a scheduler that is not there.
    auto target = actors::node_address(join, "--join");
    if (target && actors::joins_itself(*target, listen, address)) {
      std::fprintf(stderr,
                   "coach-node: --join %s is this node's own address (--listen %s): it would "
                   "join itself; give the scheduler's address, or --scheduler to run one here\n",
                   join.c_str(), listen.c_str());
      return 2;
    }
  }
  if (is_wildcard(address)) {
    std::fprintf(stderr,
                 "coach-node: --listen %s is a wildcard; give --advertise tcp://IP:PORT, the "
                 "address other nodes reach this one at\n",
                 listen.c_str());
    return 2;
  }
  if (address.size() > 1 && address.substr(address.rfind(':') + 1) == "0") {
    std::fprintf(stderr, "coach-node: --listen needs a port (other nodes must know it)\n");
    return 2;
  }
  // From here on every line is the daemon's: timestamp, level, node name.
  if (auto ok = log::init({.program = "coach-node",
                           .node = name.empty() ? address : name,
                           .min = *min_level,
                           .file = log_file,
                           .daemon = true});
      !ok) {
    std::fprintf(stderr, "coach-node: %s\n", ok.error().message.c_str());
    return 2;
  }
  std::optional<std::vector<int>> gpus;
  if (!gpus_text.empty()) {
    auto parsed = scheduler::parse_gpu_list(gpus_text);
    if (!parsed) {
      std::fprintf(stderr, "coach-node: --gpus: %s\n", parsed.error().message.c_str());
      return 2;
    }
    gpus = std::move(*parsed);
  }

  actors::scheduler_options so;
  if (is_scheduler) {
    // Opened before anything starts, so that a bad path is one line and exit code 2.
    auto store = scheduler::job_store::open(store_path.empty() ? ":memory:" : store_path);
    if (!store) {
      std::fprintf(stderr, "coach-node: --store: %s\n", store.error().message.c_str());
      return 2;
    }
    so.store = std::make_shared<scheduler::job_store>(std::move(*store));
    if (!policy.empty()) {
      if (auto p = scheduler::make_policy(policy); !p) {
        std::fprintf(stderr, "coach-node: --policy: %s\n", p.error().message.c_str());
        return 2;
      }
      so.policy = policy;
    }
    if (auto p = scheduler::make_placement(placement); !p) {
      std::fprintf(stderr, "coach-node: --placement: %s\n", p.error().message.c_str());
      return 2;
    }
    so.placement = placement;
  }

  auto security = actors::load_security(key_file, authorized_dir, server_key_file);
  if (!security) {
    std::fprintf(stderr, "coach-node: %s\n", security.error().message.c_str());
    return 2;
  }
  if (!security->key)
    log::warn(
        "no key (--key or COACH_KEY): connections are accepted from loopback addresses only; "
        "`coach keygen DIR` makes a key pair (docs/security.md)");
  for (const auto& w : security->warnings) log::warn("{}", w);
  const std::string public_key = security->key ? security->key->public_key : "";
  actors::http_access http_access{.public_reads = http_public, .admin_token = {}};
  if (dashboard_admin && security->key)
    http_access.admin_token = actors::admin_token(*security->key);
  using transport_logic::data_protection;
  auto protection = security->key ? data_protection::encrypt : data_protection::none;
  if (!data_protection_text.empty()) {
    protection = *transport_logic::parse_data_protection(data_protection_text);
    if (protection != data_protection::none && !security->key) {
      std::fprintf(stderr, "coach-node: --data-protection %s needs a key (--key or COACH_KEY)\n",
                   data_protection_text.c_str());
      return 2;
    }
  }
  const std::uint32_t host = actors::node_host_id(address);
  auto net = actors::zmq_transport::start({.host = host,
                                           .listen = listen,
                                           .max_frame = max_frame_mib << 20,
                                           .security = std::move(*security),
                                           .data_protection = protection,
                                           .data_listen = data_listen});
  if (!net) {
    log::error("{}", net.error().message);
    if (!log_file.empty()) std::fprintf(stderr, "coach-node: %s\n", net.error().message.c_str());
    return 1;
  }
  if (!join.empty()) (*net)->add_peer(0, join);

  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", std::size_t(std::max(2u, std::thread::hardware_concurrency())));
  cfg.set("logger.console", caf::atom("none"));
  caf::actor_system sys{cfg};

  caf::actor sched;
  if (is_scheduler) {
    so.node_timeout = std::chrono::milliseconds(long(node_timeout_s * 1000));
    so.rebalance_interval = std::chrono::milliseconds(long(rebalance_s * 1000));
    so.rr_slice = std::chrono::seconds(long(rr_slice_s));
    so.address = address;
    so.script = {python, script_root(name.empty() ? address : name)};
    so.cpus = cpus;
    sched = actors::spawn_cluster_scheduler(sys, *net, host, std::move(so));
  }
  actors::node_options no;
  no.name = name.empty() ? address : name;
  (*net)->name_peer(host, no.name);  // what it sends itself, labelled by its name
  no.address = address;
  no.public_key = public_key;
  no.host = host;
  if (cpus > 0) no.cpus = cpus;
  no.external_cpus = cpu_accounting == "measured";
  if (const unsigned have = std::thread::hardware_concurrency(); cpus > have && have > 0)
    log::warn("--cpus {} advertises more CPUs than this host has ({}): its parts will share them",
              cpus, have);
  no.gpus = gpus;
  no.heartbeat = std::chrono::milliseconds(long(heartbeat_s * 1000));
  no.script = {python, script_root(no.name)};
  // Set on the agent's thread before it quits; read here once it is down.
  auto refusal = std::make_shared<std::string>();
  no.refused = [refusal](const std::string& why) { *refusal = why; };
  auto agent = actors::spawn_node_agent(sys, *net, no);

  // /metrics: the node agent's families, the transport's, and the scheduler's where it runs.
  std::unique_ptr<actors::http_server> http;
  if (!metrics_listen.empty()) {
    auto scrape = [&sys, agent, sched, net = *net, node = no.name]() -> actors::http_response {
      caf::scoped_actor self{sys};
      std::string text;
      std::string late;
      auto ask = [&](const caf::actor& a, const char* who) {
        self->request(a, std::chrono::seconds(2), actors::metrics_atom::value)
            .receive([&](std::string& part) { text += part; }, [&](caf::error&) { late = who; });
      };
      ask(agent, "the node agent");
      text += actors::transport_metrics(node, net->traffic(), net->received(),
                                        [&](std::uint32_t h) { return net->peer_label(h); });
      if (sched && late.empty()) ask(sched, "the scheduler");
      if (!late.empty()) return {503, "text/plain; charset=utf-8", late + " did not answer\n"};
      return {200, "text/plain; version=0.0.4; charset=utf-8", std::move(text)};
    };
    std::map<std::string, actors::http_server::handler> routes{{"/metrics", scrape}};
    std::map<std::string, actors::http_server::post_handler> posts;
    if (sched) {
      // The dashboard: the page (compiled in) and the scheduler's state, read-only unless
      // --dashboard-admin (docs/operations.md, "Dashboard").
      for (const char* name : {"app.js", "style.css"}) {
        routes[std::string("/") + name] = [name]() -> actors::http_response {
          const auto [type, bytes] = actors::dashboard_asset(name);
          return {200, std::string(type), std::string(bytes)};
        };
      }
      auto state = [&sys, sched, dashboard_admin]() -> std::optional<std::string> {
        caf::scoped_actor self{sys};
        std::optional<std::string> out;
        self->request(sched, std::chrono::seconds(2), actors::dashboard_atom::value,
                      dashboard_admin)
            .receive([&](std::string& s) { out = std::move(s); }, [&](caf::error&) {});
        return out;
      };
      routes["/api/state"] = [state]() -> actors::http_response {
        if (auto s = state()) return {200, "application/json", std::move(*s)};
        return {503, "text/plain; charset=utf-8", "the scheduler did not answer\n"};
      };
      // The page comes with the state of the moment embedded: drawn as it loads.
      routes["/"] = routes["/index.html"] = [state]() -> actors::http_response {
        return {200, "text/html; charset=utf-8", actors::dashboard_page(state().value_or(""))};
      };
      for (const char* action : {"policy", "cancel"})
        posts[std::string("/api/") + action] = [&sys, sched, dashboard_admin,
                                                action](const std::string& body) {
          if (!dashboard_admin)
            return actors::http_response{
                403, "text/plain; charset=utf-8",
                "read-only: start the scheduler's coach-node with --dashboard-admin\n"};
          caf::scoped_actor self{sys};
          actors::http_response r{503, "text/plain; charset=utf-8",
                                  "the scheduler did not answer\n"};
          self->request(sched, std::chrono::seconds(5), actors::dashboard_atom::value,
                        std::string(action), body)
              .receive(
                  [&](std::string& why) {
                    r = why.empty()
                            ? actors::http_response{200, "text/plain; charset=utf-8", "done\n"}
                            : actors::http_response{400, "text/plain; charset=utf-8", why + "\n"};
                  },
                  [&](caf::error&) {});
          return r;
        };
    } else {
      // Not the scheduler: / says so and where the dashboard is, instead of a bare 404.
      routes["/"] = [page = actors::worker_page(no.name, join)]() -> actors::http_response {
        return {200, "text/html; charset=utf-8", page};
      };
    }
    auto server = actors::http_server::start(metrics_listen, std::move(routes), std::move(posts),
                                             http_access);
    if (!server) {
      log::error("--metrics-listen: {}", server.error().message);
      std::fprintf(stderr, "coach-node: --metrics-listen: %s\n", server.error().message.c_str());
      self_stop(sys, agent, sched);
      return 1;
    }
    http = std::move(*server);
    log::info("metrics at {}/metrics ({})", http->url(),
              http_public ? "served to every address" : "served to loopback clients only");
    if (sched)
      log::info("dashboard at {}/ ({})", http->url(),
                !dashboard_admin ? "read-only"
                : http_access.admin_token.empty()
                    ? "may change the policy and cancel jobs, from loopback"
                    : "may change the policy and cancel jobs with the admin token: `coach "
                      "dashboard-token`, then open it at /#token=TOKEN");
  }

  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  log::info("'{}' listening on {} (host {}){}", no.name, (*net)->bound_address(), host,
            is_scheduler ? std::string(", scheduler") : " joining " + join);

  int rc = 0;
  {
    caf::scoped_actor self{sys};
    self->monitor(agent);
    bool agent_down = false, drain_sent = false;
    auto drain_deadline = std::chrono::steady_clock::time_point::max();
    const auto stats_every = std::chrono::milliseconds(long(stats_s * 1000));
    auto next_stats = std::chrono::steady_clock::now() + stats_every;
    // A joining node says how its way to the scheduler goes (actors/join_watch.hpp).
    std::optional<actors::join_watch> joining;
    if (!join.empty()) joining.emplace(join);
    while (!agent_down) {
      self->receive([&](caf::down_msg&) { agent_down = true; },
                    caf::after(std::chrono::milliseconds(100)) >> [] {});
      if (joining) {
        const auto c = (*net)->contact_of(0);
        if (auto l = joining->look(c.connected, c.connect_failed, (*net)->refusal_of(0),
                                   std::chrono::steady_clock::now(), c.unanswered))
          log::at(l->level, "{}", l->text);
      }
      if (const auto now = std::chrono::steady_clock::now();
          stats_every.count() > 0 && now >= next_stats) {
        next_stats = now + stats_every;
        print_received(**net);
      }
      if (g_signals.load() > 0 && !drain_sent) {
        drain_sent = true;
        self->send(agent, actors::drain_atom::value);
        drain_deadline = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(long(drain_timeout_s * 1000));
      }
      if (!agent_down && std::chrono::steady_clock::now() > drain_deadline) {
        log::warn("drain timed out; stopping what still runs");
        rc = 1;
        break;
      }
    }
    self->send_exit(agent, caf::exit_reason::user_shutdown);
    if (sched) self->send_exit(sched, caf::exit_reason::user_shutdown);
  }
  http.reset();  // no scrape asks the actors once they are gone
  if (!refusal->empty()) {
    // Its --name is taken (the scheduler's reason says by whom): a bad argument, one line.
    if (!log_file.empty())
      std::fprintf(stderr, "coach-node: the scheduler refused this node: %s\n", refusal->c_str());
    rc = 2;
  }
  print_received(**net);
  log::info("'{}' stopped", no.name);
  return rc;
}
