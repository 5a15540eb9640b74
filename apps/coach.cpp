// coach: the command-line front end. `train` runs the whole cluster in this process; `submit`,
// `status`, `nodes`, `cancel`, `rescale`, `migrate` and `policy` talk to a coach-node scheduler
// (apps/coach_api.hpp), authenticated with --key (docs/security.md); `keygen` makes keys.
//
// Exit codes: 0 success; 1 the job failed (or the scheduler cannot be reached); 2 bad input
// (command line, job spec, unknown job); 3 not authorized (the node refused this client's key);
// 130 stopped by Ctrl-C or cancelled (the report still lists the finished epochs).

#include <CLI/CLI.hpp>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "actors/curve_keys.hpp"
#include "actors/embedded_cluster.hpp"
#include "coach_api.hpp"
#include "coach_data.hpp"
#include "coach_experiment.hpp"
#include "coach_model.hpp"
#include "coach_train.hpp"
#include "common/nearest.hpp"
#include "common/writable.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "report/report_plot.hpp"
#include "spec/job_spec.hpp"

namespace {

int run_plot(const std::string& report, const std::string& out) {
  std::ifstream in(report);
  if (!in) {
    std::fprintf(stderr, "coach: %s: report not found\n", report.c_str());
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto data = coach::scheduler::read_report(text.str(), report);
  if (!data) {
    std::fprintf(stderr, "coach: %s\n", data.error().message.c_str());
    return 2;
  }
  if (auto why = coach::unwritable("-o", out)) {
    std::fprintf(stderr, "coach: %s\n", why->c_str());
    return 2;
  }
  std::ofstream svg(out);
  svg << coach::scheduler::plot_svg(*data);
  if (!svg.flush()) {
    std::fprintf(stderr, "coach: -o %s: cannot write it\n", out.c_str());
    return 1;
  }
  std::fprintf(stderr, "coach: %zu epoch(s), %zu change(s) drawn to %s\n", data->epochs.size(),
               data->changes.size(), out.c_str());
  return 0;
}

int run_keygen(const std::string& dir, const std::string& name) {
  auto keys = coach::actors::generate_key_pair();
  if (!keys) {
    std::fprintf(stderr, "coach: keygen: %s\n", keys.error().message.c_str());
    return 1;
  }
  if (auto ok = coach::actors::write_key_files(dir, name, *keys); !ok) {
    std::fprintf(stderr, "coach: keygen: %s\n", ok.error().message.c_str());
    return ok.error().code == coach::errc::io_error ? 1 : 2;
  }
  const auto base = (std::filesystem::path(dir) / name).string();
  std::printf("wrote %s.key (secret, mode 0600) and %s.pub\npublic key: %s\n", base.c_str(),
              base.c_str(), keys->public_key.c_str());
  return 0;
}

/// `coach dashboard-token`: the admin token of the nodes whose key is FILE (or $COACH_KEY).
int run_dashboard_token(std::string key_file) {
  if (key_file.empty())
    if (const char* env = std::getenv("COACH_KEY")) key_file = env;
  if (key_file.empty()) {
    std::fprintf(stderr,
                 "coach: dashboard-token: no key: give --key FILE (the scheduler node's .key "
                 "file) or set COACH_KEY; a node without a key takes dashboard actions from "
                 "loopback without a token\n");
    return 2;
  }
  auto keys = coach::actors::read_key_file(key_file);
  if (!keys) {
    std::fprintf(stderr, "coach: dashboard-token: %s\n", keys.error().message.c_str());
    return 2;
  }
  std::printf("%s\n", coach::actors::admin_token(*keys).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Coach: elastic training of deep-learning jobs on a parameter server", "coach"};
  app.require_subcommand(1);

  std::string spec_path, model_path, data_spec, predict_input;
  coach::apps::train_flags tf;
  double every_s = 0;
  bool header = false, wait = false, json = false;
  std::uint32_t workers = 0, shards = 0;
  auto* train = app.add_subcommand(
      "train", "Train a job with the whole cluster (scheduler, shards, workers) in this process");
  train->add_option("JOB", spec_path, "Job spec (YAML), e.g. examples/fashion-mlp.yaml")
      ->required();
  train->add_option("--workers", workers, "Workers (default: the spec's workers.initial)")
      ->check(CLI::Range(1u, 1u << 20));
  train
      ->add_option("--shards", shards,
                   "Parameter-server shards (default: the spec's shards.initial)")
      ->check(CLI::Range(1u, 1u << 20));
  train->add_option("--backend", tf.backend, "auto | cpu | cuda (default: the spec's backend)");
  train->add_option("--precision", tf.precision,
                    "fp32 | tf32 | bf16: the workers' matrix products (default: the spec's)");
  train->add_option("--python", tf.python,
                    "Interpreter for a script's model (model: {script: ...}; default: "
                    "$COACH_PYTHON, else /opt/coach-venv/bin/python, else python3)");
  train->add_option("--report", tf.report_path, "Write a JSON report of the run to this file");
  train->add_option("--events", tf.events,
                    "Write one JSON line per epoch and per change to this file while it runs");

  train->add_option("--save", tf.save_path,
                    "Write the final parameters to this .safetensors file (loads in PyTorch)");
  train->add_option("--checkpoint", tf.checkpoint,
                    "Write checkpoints (parameters and optimizer state, a .safetensors model) to "
                    "this file at epochs' ends");
  auto* every = train->add_option(
      "--checkpoint-every", every_s,
      "Seconds between checkpoints (default 0: every epoch; the last epoch always)");
  train->add_option("--resume", tf.resume,
                    "Go on from this checkpoint to the spec's epochs (default --workers and "
                    "--shards: the checkpoint's)");
  auto* eval = app.add_subcommand("eval", "Loss, accuracy (and confusion) of a saved model");
  eval->add_option("MODEL", model_path, "A .safetensors file from coach train --save")->required();
  eval->add_option("--data", data_spec, "Job spec whose data set's test split is used")->required();
  eval->add_flag("--json", json, "Print one JSON object, with the confusion matrix");
  auto* predict = app.add_subcommand("predict", "Print the predicted label of each sample");
  predict->add_option("MODEL", model_path, "A .safetensors file from coach train --save")
      ->required();
  predict
      ->add_option("INPUT", predict_input,
                   "A CSV file of feature rows, or an IDX image file (plain or gzipped); a "
                   "pipe, or - for standard input")
      ->required();
  predict->add_flag("--header", header, "The CSV file's first line is a header");
  std::string plot_report, plot_out;
  auto* plot = app.add_subcommand(
      "plot", "Draw a report's loss and accuracy by epoch, with its changes, as an SVG image");
  plot->add_option("REPORT", plot_report, "A report of coach train --report")->required();
  plot->add_option("-o,--output", plot_out, "The SVG file to write")->required();
  auto* version = app.add_subcommand("version", "Print the version and the compiled backends");
  // A callback: listing the backends loads the CUDA plugin, which no other command needs.
  app.set_version_flag("--version", std::function<std::string()>([] {
                         return std::string("coach ") + COACH_VERSION +
                                " (backends: " + std::string(coach::kernels::compiled_backends()) +
                                ")";
                       }),
                       "Print the version and the compiled backends");
  std::string key_dir, key_name = "coach";
  auto* keygen = app.add_subcommand(
      "keygen",
      "Write a CURVE key pair: DIR/NAME.key (secret) and DIR/NAME.pub (docs/security.md)");
  keygen->add_option("DIR", key_dir, "Directory to write to (created when missing)")->required();
  keygen->add_option("--name", key_name, "File name of the pair")->capture_default_str();

  std::string token_key;
  auto* dashboard_token = app.add_subcommand(
      "dashboard-token",
      "Print the token that admits the dashboard's actions on a node started with "
      "--dashboard-admin and this key; open the dashboard at http://HOST:PORT/#token=TOKEN "
      "(docs/operations.md)");
  dashboard_token->add_option("--key", token_key,
                              "The scheduler node's key pair, a .key file (default: $COACH_KEY)");

  coach::apps::data_command data(app);
  coach::apps::experiment_options xo;
  auto* experiment = app.add_subcommand(
      "experiment",
      "Answer a founding question with real jobs on a cluster: scaling (epoch time over a grid "
      "of workers and shards, 1-3 jobs at once, one node against several), prediction (the "
      "performance model fitted on half the grid predicts the rest), dynamic (a static and an "
      "elastic job while a program holds the CPUs, then frees them) or policies (five jobs "
      "under each policy: makespan, turnaround, wait)");
  experiment->add_option("STUDY", xo.study, "scaling | prediction | dynamic | policies")
      ->required();
  experiment->add_option("--at", xo.at,
                         "A running scheduler, HOST:PORT (default: start --local nodes here)");
  experiment->add_option("--local", xo.local, "coach-nodes to start on this machine")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  experiment
      ->add_option("--cpus", xo.cpus,
                   "CPU slots of each local node (default: 8; dynamic: this host's cores "
                   "+ 2; policies: 2)")
      ->check(CLI::Range(1, 1024));
  experiment
      ->add_option("--hog-seconds", xo.hog_s,
                   "dynamic: how long a program holds this host's CPUs after each submit")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  experiment
      ->add_option("--max-workers", xo.max_workers,
                   "dynamic: the elastic job's most workers (default: this host's cores)")
      ->check(CLI::Range(1, 1024));
  experiment->add_option("--spec", xo.spec, "The job to run (its allocation is the study's)")
      ->capture_default_str();
  experiment->add_option("--epochs", xo.epochs, "Epochs of each job")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  experiment
      ->add_option("--repeat", xo.repeat,
                   "scaling, prediction: runs of each grid point, the median taken")
      ->check(CLI::Range(1, 20))
      ->capture_default_str();
  experiment->add_option("--train-limit", xo.train_limit, "Training samples (0: the spec's)")
      ->capture_default_str();
  experiment->add_option("--out", xo.out, "Directory for the tables and charts")
      ->capture_default_str();
  experiment->add_option("--key", xo.key_file,
                         "This client's key pair (default: $COACH_KEY), given on to --local "
                         "nodes");
  experiment->add_option("--server-key", xo.server_key_file,
                         "The scheduler node's public key (default: $COACH_SERVER_KEY)");
  // The job API: each command talks to the scheduler at --at (or $COACH_SCHEDULER).
  std::string at, submit_path, key_file, server_key_file;
  std::uint64_t job = 0;
  auto add_at = [&](CLI::App* cmd) {
    cmd->add_option("--at", at,
                    "The scheduler's address, HOST:PORT or tcp://HOST:PORT (default: "
                    "$COACH_SCHEDULER)");
    cmd->add_option("--key", key_file,
                    "This client's key pair, a .key file from coach keygen (default: $COACH_KEY; "
                    "none: plain connection, which nodes accept from loopback only)");
    cmd->add_option("--server-key", server_key_file,
                    "The scheduler node's public key, a .pub file (default: $COACH_SERVER_KEY, "
                    "else the public key of --key: a cluster-wide key)");
    cmd->add_flag("--json", json, "Print JSON instead of a table");
  };
  auto* submit = app.add_subcommand(
      "submit",
      "Submit a job to a cluster of coach-nodes (a script's model: its first process runs here, "
      "and the files of its folder, at most 64 MiB, go with the job)");
  submit->add_option("JOB", submit_path, "Job spec (YAML)")->required();
  submit->add_option("--workers", workers, "Workers (default: the spec's workers.initial)")
      ->check(CLI::Range(1u, 1u << 20));
  submit->add_option("--shards", shards, "Shards (default: the spec's shards.initial)")
      ->check(CLI::Range(1u, 1u << 20));
  submit->add_flag("--wait", wait, "Show progress until the job ends; exit 0 only if it succeeds");
  std::string submit_python;
  submit->add_option("--python", submit_python,
                     "A script's model (model: {script: ...}): the interpreter that runs its first "
                     "process here, which registers the model before the job is sent with the "
                     "files of the script's folder (default: $COACH_PYTHON, else "
                     "/opt/coach-venv/bin/python, else python3)");
  add_at(submit);
  auto* status = app.add_subcommand("status", "Show the jobs of a cluster, or one job");
  status->add_option("JOB", job, "Job id (default: every job)");
  add_at(status);
  auto* nodes = app.add_subcommand("nodes", "Show the nodes of a cluster and their free resources");
  add_at(nodes);
  auto* cancel = app.add_subcommand("cancel", "Cancel a job");
  cancel->add_option("JOB", job, "Job id")->required();
  add_at(cancel);
  bool unhold = false;
  auto* rescale = app.add_subcommand(
      "rescale",
      "Change a running job's workers and/or shards at its next step (no restart). The counts "
      "hold: no policy resizes them (nor after `coach policy set`) until `coach rescale JOB "
      "--release`");
  rescale->add_option("JOB", job, "Job id")->required();
  auto* rescale_workers = rescale->add_option("--workers", workers, "The new number of workers")
                              ->check(CLI::Range(1u, 1u << 20));
  auto* rescale_shards = rescale->add_option("--shards", shards, "The new number of shards")
                             ->check(CLI::Range(1u, 1u << 20));
  rescale
      ->add_flag("--release", unhold,
                 "Release the counts an earlier rescale held: the policies size the job again")
      ->excludes(rescale_workers)
      ->excludes(rescale_shards);
  add_at(rescale);
  std::uint32_t shard = 0;
  std::string to_node;
  bool unpin = false;
  auto* migrate = app.add_subcommand(
      "migrate",
      "Move a running job's shard to another node at its next step (no restart). The shard "
      "stays pinned there (the rebalancer never moves it) until `coach migrate JOB --shard K "
      "--release`; coach status JOB lists the pins");
  migrate->add_option("JOB", job, "Job id")->required();
  migrate->add_option("--shard", shard, "The shard id (coach status JOB lists them)")->required();
  auto* migrate_to =
      migrate->add_option("--to", to_node, "The node's name (coach nodes lists them)");
  migrate
      ->add_flag("--release", unpin,
                 "Unpin the shard (a migration's new shard, as coach status JOB lists it): the "
                 "rebalancer may move it again")
      ->excludes(migrate_to);
  add_at(migrate);
  bool follow = false;
  auto* logs = app.add_subcommand(
      "logs", "Show a job's history: placements, changes, epochs, node losses, its end");
  logs->add_option("JOB", job, "Job id")->required();
  logs->add_flag("-f,--follow", follow, "Keep showing new lines until the job ends");
  add_at(logs);
  std::string policy_name;
  auto* policy = app.add_subcommand(
      "policy", "Show or change the scheduler's policy (at once; running jobs keep running)");
  policy->require_subcommand(1);
  auto* policy_get = policy->add_subcommand("get", "Print the active policy");
  add_at(policy_get);
  auto* policy_set = policy->add_subcommand("set", "Make NAME the active policy");
  policy_set->add_option("NAME", policy_name, "fifo | elastic-fifo | round-robin | coach")
      ->required();
  add_at(policy_set);

  // The first word that is no flag names the command (the top level takes flags only): an
  // unknown one is named, with the nearest command, rather than CLI11's "A subcommand is
  // required".
  if (argc > 1 && argv[1][0] != '-') {
    const std::string_view word = argv[1];
    std::vector<std::string> names;
    for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; }))
      names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), word) == names.end()) {
      std::string shown(word.substr(0, 40));
      for (char& c : shown)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
      const std::string_view near = coach::nearest(word, names);
      const std::string hint =
          near.empty() ? "" : coach::format(" (did you mean '{}'?)", std::string(near));
      std::fprintf(stderr, "coach: unknown command '%s'%s; coach --help lists the commands\n",
                   shown.c_str(), hint.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (*version) {
    std::printf("coach %s (backends: %s)\n", COACH_VERSION,
                std::string(coach::kernels::compiled_backends()).c_str());
    return 0;
  }
  if (*train || *eval || *predict)
    // COACH_CPU_KERNEL (kernels::make_backend's cpu kernel): a bad value is one line before any
    // backend is made.
    if (const auto& kernel = coach::kernels::cpu_kernel_from_environment(); !kernel) {
      std::fprintf(stderr, "coach: %s\n", kernel.error().message.c_str());
      return 2;
    }
  if (*train) {
    if (every->count() > 0) tf.every_s = every_s;
    return coach::apps::run_train(spec_path, workers, shards, tf);
  }
  if (*eval) return coach::apps::run_eval(model_path, data_spec, json);
  if (*predict) return coach::apps::run_predict(model_path, predict_input, header);
  if (*keygen) return run_keygen(key_dir, key_name);
  if (*dashboard_token) return run_dashboard_token(token_key);
  if (*plot) return run_plot(plot_report, plot_out);
  if (*experiment) return coach::apps::run_experiment(xo);
  if (data.chosen()) return data.run();
  auto security = coach::actors::load_security(key_file, "", server_key_file);
  if (!security) {
    std::fprintf(stderr, "coach: %s\n", security.error().message.c_str());
    return 2;
  }
  for (const auto& w : security->warnings) std::fprintf(stderr, "coach: warning: %s\n", w.c_str());
  coach::apps::use_security(std::move(*security));
  std::string address = coach::apps::resolve_at(at);
  if (address.empty()) {
    std::fprintf(stderr,
                 "coach: give --at HOST:PORT (the scheduler's address) or set "
                 "COACH_SCHEDULER\n");
    return 2;
  }
  // What can be checked here is, before the scheduler is asked anything: a script's model is
  // registered here (its first process run, its files packed).
  coach::apps::submit_input submission;
  if (*submit) {
    if (const int rc = coach::apps::check_submit(submit_path); rc != 0) return rc;
    if (const int rc = coach::apps::prepare_submit(submit_path, submit_python, submission); rc != 0)
      return rc;
  }
  if (*rescale && !unhold) {
    if (const int rc = coach::apps::check_rescale(workers, shards); rc != 0) return rc;
  }
  if (*migrate && !unpin && to_node.empty())
    return coach::apps::report_error({coach::errc::invalid_argument,
                                      "migrate: give --to NODE, or --release to unpin the shard"});
  // Nothing there (refused, no such name, silence): one line within 2 s, not a long wait.
  if (const int rc = coach::apps::reach_scheduler(address); rc != 0) return rc;
  // The connection closes before main returns, whichever command ran (or none did).
  struct release_at_exit {
    ~release_at_exit() { coach::apps::release_scheduler(); }
  } release;
  if (*submit) return coach::apps::run_submit(address, submission, workers, shards, wait, json);
  if (*status) return coach::apps::run_status(address, job, json);
  if (*nodes) return coach::apps::run_nodes(address, json);
  if (*rescale) return coach::apps::run_rescale(address, job, workers, shards, unhold, json);
  if (*migrate) return coach::apps::run_migrate(address, job, shard, to_node, unpin, json);
  if (*logs) return coach::apps::run_logs(address, job, follow, json);
  if (*policy) {
    if (*policy_set && policy_name.empty()) {
      std::fprintf(stderr,
                   "coach: policy set: give a policy name (fifo, elastic-fifo, "
                   "round-robin, coach)\n");
      return 2;
    }
    return coach::apps::run_policy(address, *policy_set ? policy_name : "", json);
  }
  return coach::apps::run_cancel(address, job, json);
}
