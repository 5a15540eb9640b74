#pragma once
// scheduler::perf_model: how fast a job trains as a function of its workers w and shards p,
// learned from the epochs it and earlier jobs of the same model ran (Coach, after Optimus:
// Peng et al., "Optimus: an efficient dynamic resource scheduler for deep learning clusters",
// EuroSys 2018, section 4.2).
//
// The terms. An epoch at (w, p) takes
//
//     t(w, p) = θ0 + θ1/w + θ2·w/p + θ3·w + θ4·p        seconds, θ >= 0,
//
// and the job's speed is 1/t epochs per second. Each term is one cost of a parameter-server
// epoch: θ0 what no worker count changes (evaluation, the epoch barrier); θ1/w the computation,
// split among w workers; θ2·w/p the gradient traffic, since each shard receives pushes from all
// w workers for 1/p of the parameters; θ3·w what grows with every worker (stragglers at the
// step barrier, per-worker messages at the master); θ4·p what grows with every shard (one more
// request per step and worker). Optimus writes the compute term as θ1·M/w with M the batch
// size; a job's batch size is fixed, so M is folded into θ1. Because t is linear in θ, the fit
// is a linear least-squares problem; θ >= 0 (a cost cannot be negative) makes it non-negative
// least squares, solved by Lawson and Hanson's active-set method ("Solving Least Squares
// Problems", 1974, chapter 23) on the 5x5 normal equations.
//
// The fit. Residuals are relative, (θ·φ(w,p) − t)/t, so a 10 s epoch and a 1000 s epoch weigh
// the same and the model is good at every scale. Samples enter through their weighted normal
// equations (perf_stats): adding one is O(1) and a fit is O(1) in the number of samples, which
// lets the simulator refit thousands of jobs. A job's fit combines
//   - its own epochs (weight 1 each);
//   - the epochs of the other jobs of its model, scaled to weigh s²/(s + n) samples in all,
//     where s = `pooled_samples` and n is the job's own count: s for a new job, half that once
//     it has s epochs of its own, and fading as it gets more;
//   - a prior (perf_model_options::prior_shape) as pseudo-epochs at a few (w, p), scaled to the
//     data's level and weighted `prior_weight` each: with one or two measured configurations the
//     five terms are not determined, and without the prior NNLS would happily explain two points
//     with a constant (no speed-up from workers) or a pure 1/w (linear speed-up for ever).
// A job with no epochs and no pooled epochs has no prediction (nullopt): policies then treat it
// as its request says.
//
// Predicted against observed: observe() first predicts the epoch it is given (when a prediction
// exists) and keeps (predicted, observed) for `coach status --json` and the simulator's report.

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/json.hpp"

namespace coach::scheduler {

/// The number of terms of the model.
inline constexpr std::size_t perf_terms = 5;
/// Coefficients θ0..θ4 of t(w, p), in seconds.
using perf_theta = std::array<double, perf_terms>;

/// φ(w, p) = (1, 1/w, w/p, w, p). REQUIRES: workers >= 1, shards >= 1.
perf_theta perf_features(int workers, int shards) noexcept;
/// t(w, p) = θ·φ(w, p), seconds per epoch.
double epoch_seconds(const perf_theta& theta, int workers, int shards) noexcept;
/// The shard count in [min_shards, max_shards] with the shortest epoch at `workers` workers
/// (θ2·w/p + θ4·p is smallest at p = sqrt(θ2·w/θ4)); the smallest such count on ties.
/// REQUIRES: 1 <= min_shards <= max_shards.
int best_shards(const perf_theta& theta, int workers, int min_shards, int max_shards) noexcept;

/// Non-negative least squares in normal-equation form: the x >= 0 minimizing
/// ||A·x − b||², given G = AᵀA (n×n, row-major) and h = Aᵀb. Lawson–Hanson active set.
/// REQUIRES: gram.size() == n*n, rhs.size() == n, G symmetric positive semi-definite.
std::vector<double> nnls(std::span<const double> gram, std::span<const double> rhs, std::size_t n);

/// One measured epoch.
struct perf_sample {
  int workers = 1;
  int shards = 1;
  double seconds = 0;  ///< the epoch's training time; > 0
  double weight = 1;   ///< how much it counts, >= 0
};

/// The weighted normal equations of a set of samples under relative residuals, plus what the
/// prior's scale needs. Adding samples and merging sets is exact arithmetic on these sums.
struct perf_stats {
  std::array<double, perf_terms * perf_terms> gram{};  ///< Σ w·a·aᵀ, a = φ/t
  perf_theta rhs{};                                    ///< Σ w·a (the target a·θ is 1)
  double weight = 0;                                   ///< Σ w
  double log_ratio = 0;   ///< Σ w·log(t / t_prior(w, p)): the data's level against the prior
  std::size_t count = 0;  ///< samples added (unweighted)

  /// Adds one sample; `prior_shape` is the curve log_ratio compares against.
  void add(const perf_sample& s, const perf_theta& prior_shape);
  /// this += k·other, count unchanged (k < 0 takes a subset's samples back out).
  void add_scaled(const perf_stats& other, double k);
};

/// How fits are made.
struct perf_fit_options {
  /// The prior curve's shape (its scale is fitted to the data): about 5% of a 1-worker epoch
  /// that no worker count removes, a little traffic and per-part overhead, so that more
  /// workers help with diminishing returns until measurements say otherwise.
  perf_theta prior_shape{0.05, 1.0, 0.02, 0.005, 0.01};
  /// Weight of each of the prior's six pseudo-epochs (a measured epoch weighs 1); 0 turns the
  /// prior off.
  double prior_weight = 0.05;
};

/// θ >= 0 minimizing Σ weight·((θ·φ − t)/t)² over `data` plus the prior's pseudo-epochs;
/// nullopt when `data` has no weight.
std::optional<perf_theta> fit_perf(const perf_stats& data, const perf_fit_options& options = {});
/// The same, from samples.
std::optional<perf_theta> fit_perf(std::span<const perf_sample> samples,
                                   const perf_fit_options& options = {});

/// Options of perf_model.
struct perf_model_options {
  perf_fit_options fit;
  /// How many samples' worth the epochs of other jobs of the same model weigh in the fit of a
  /// job with no epochs of its own (see the file comment for how that fades).
  double pooled_samples = 8;
  /// A job's fit is redone when it has a new epoch; the pool's, and a job's share of it, at
  /// every new epoch of the model until `refresh_after` are behind the fit, then once the
  /// model has `refresh_growth` more (0.1: 10%). Bounds refits when thousands of jobs of one
  /// model report at once, in the simulator.
  double refresh_growth = 0.1;
  double refresh_after = 100;
  /// How many (predicted, observed) records recent() keeps.
  std::size_t history = 256;
};

/// One prediction set against the epoch that then happened.
struct prediction_record {
  std::uint64_t job = 0;
  std::string model;
  int workers = 0;
  int shards = 0;
  double predicted_s = 0;
  double observed_s = 0;
};

/// What the model knows about one model name.
struct perf_model_summary {
  std::string model;
  std::size_t samples = 0;          ///< epochs observed, every job together
  std::size_t jobs = 0;             ///< jobs that reported at least one epoch
  std::optional<perf_theta> theta;  ///< the pooled fit over every job of the model
  std::size_t predictions = 0;      ///< epochs that had a prediction when they arrived
  double mean_abs_rel_error = 0;    ///< mean |predicted − observed| / observed over those
};

/// Learns epoch times per job and per model name; predicts them for any (w, p).
/// Not thread-safe: one owner calls it (the scheduler, or the simulator), and a policy that
/// holds it runs inside that owner's decide() calls.
class perf_model {
 public:
  explicit perf_model(perf_model_options options = {});

  /// Records that `job` (of model `model`) ran an epoch at (workers, shards) in `seconds`.
  /// Ignored unless workers >= 1, shards >= 1 and seconds is finite and > 0.
  void observe(std::uint64_t job, std::string_view model, int workers, int shards, double seconds);
  /// The predicted epoch time of `job` at (workers, shards); nullopt when neither the job nor
  /// any job of `model` has an epoch. A job with no epoch of its own gets the pooled fit of its
  /// model. REQUIRES: workers >= 1, shards >= 1.
  std::optional<double> predict(std::uint64_t job, std::string_view model, int workers, int shards);
  /// The coefficients used for `job`'s predictions (see the file comment), or nullopt.
  std::optional<perf_theta> job_theta(std::uint64_t job, std::string_view model);
  /// The pooled fit over every epoch of `model`, or nullopt when it has none.
  std::optional<perf_theta> model_theta(std::string_view model);
  /// Drops `job`'s own cache (a finished job); its epochs stay in its model's pool.
  void forget_job(std::uint64_t job);

  /// Every model name seen, sorted by name.
  std::vector<perf_model_summary> summary();
  /// The latest predictions against observations, oldest first.
  std::vector<prediction_record> recent() const;
  /// Over every model: epochs that had a prediction, and the mean |relative error| of those.
  std::size_t predictions() const noexcept { return predictions_; }
  double mean_abs_rel_error() const noexcept {
    return predictions_ ? abs_rel_error_ / double(predictions_) : 0.0;
  }
  /// {"models": [{"model", "samples", "jobs", "theta": [5 numbers] | null, "predictions",
  ///  "mean_abs_rel_error"}], "predictions", "mean_abs_rel_error",
  ///  "recent": [{"job", "model", "workers", "shards", "predicted_s", "observed_s"}]}
  json to_json();

  const perf_model_options& options() const noexcept { return options_; }

 private:
  struct model_entry {
    perf_stats stats;  ///< every epoch of every job of the model
    std::size_t jobs = 0;
    std::size_t predictions = 0;
    double abs_rel_error = 0;
    std::optional<perf_theta> theta;  ///< pooled fit, valid while fitted_count == stats.count
    std::size_t fitted_count = 0;
  };
  struct job_entry {
    std::string model;
    model_entry* pool = nullptr;  ///< its model's entry (nodes of models_ never move)
    perf_stats stats;
    std::optional<perf_theta> theta;
    bool fitted = false;
    std::size_t fitted_count = 0;  ///< stats.count at the last fit
    double fitted_others = 0;      ///< weight of the other jobs' epochs at the last fit
  };
  model_entry& model_of(std::string_view model);
  /// Whether a fit made with `then` samples' weight is stale at `now` (refresh_after/growth).
  bool grown(double now, double then) const;
  const std::optional<perf_theta>& refresh(job_entry& job, model_entry& m);

  perf_model_options options_;
  /// Hashes std::string and std::string_view alike, so lookups by a view allocate nothing.
  struct name_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_map<std::string, model_entry, name_hash, std::equal_to<>> models_;
  std::unordered_map<std::uint64_t, job_entry> jobs_;
  std::deque<prediction_record> recent_;
  std::size_t predictions_ = 0;
  double abs_rel_error_ = 0;
};

}  // namespace coach::scheduler
