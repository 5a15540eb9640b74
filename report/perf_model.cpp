#include "report/perf_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/enforce.hpp"
#include "common/format.hpp"
#include "report/job_report.hpp"

namespace coach::scheduler {
namespace {

/// Where the prior's pseudo-epochs sit: a spread of worker counts with shards growing along,
/// as jobs are usually run, so the prior shapes every term.
constexpr std::array<std::array<int, 2>, 6> prior_grid{
    {{1, 1}, {2, 1}, {4, 2}, {8, 2}, {16, 4}, {32, 8}}};

/// Solves G_PP·s_P = h_P for the passive set P (Cholesky, with a ridge that grows until the
/// factorization succeeds: a rank-deficient G_PP, e.g. samples at one shard count, whose w/p
/// and w columns are then proportional, still gives a usable minimizer). Other entries: 0.
std::vector<double> solve_passive(std::span<const double> g, std::span<const double> h,
                                  std::size_t n, const std::vector<bool>& passive) {
  std::vector<std::size_t> idx;
  for (std::size_t k = 0; k < n; ++k)
    if (passive[k]) idx.push_back(k);
  const std::size_t m = idx.size();
  double max_diag = 0;
  for (std::size_t k : idx) max_diag = std::max(max_diag, g[k * n + k]);
  std::vector<double> out(n, 0.0);
  if (m == 0 || max_diag <= 0) return out;
  for (double ridge = 1e-13 * max_diag; ridge < max_diag; ridge *= 100) {
    std::vector<double> l(m * m, 0.0);
    bool ok = true;
    for (std::size_t i = 0; ok && i < m; ++i) {
      for (std::size_t j = 0; j <= i; ++j) {
        double sum = g[idx[i] * n + idx[j]] + (i == j ? ridge : 0.0);
        for (std::size_t k = 0; k < j; ++k) sum -= l[i * m + k] * l[j * m + k];
        if (i == j) {
          if (!(sum > 0)) {
            ok = false;
            break;
          }
          l[i * m + i] = std::sqrt(sum);
        } else {
          l[i * m + j] = sum / l[j * m + j];
        }
      }
    }
    if (!ok) continue;
    std::vector<double> y(m);
    for (std::size_t i = 0; i < m; ++i) {
      double sum = h[idx[i]];
      for (std::size_t k = 0; k < i; ++k) sum -= l[i * m + k] * y[k];
      y[i] = sum / l[i * m + i];
    }
    for (std::size_t i = m; i-- > 0;) {
      double sum = y[i];
      for (std::size_t k = i + 1; k < m; ++k) sum -= l[k * m + i] * y[k];
      y[i] = sum / l[i * m + i];
    }
    for (std::size_t i = 0; i < m; ++i) out[idx[i]] = y[i];
    return out;
  }
  return out;
}

}  // namespace

perf_theta perf_features(int workers, int shards) noexcept {
  const double w = workers, p = shards;
  return {1.0, 1.0 / w, w / p, w, p};
}

double epoch_seconds(const perf_theta& theta, int workers, int shards) noexcept {
  const perf_theta phi = perf_features(workers, shards);
  double t = 0;
  for (std::size_t k = 0; k < perf_terms; ++k) t += theta[k] * phi[k];
  return t;
}

int best_shards(const perf_theta& theta, int workers, int min_shards, int max_shards) noexcept {
  double ideal;
  if (theta[2] <= 0)
    ideal = min_shards;  // shards only cost
  else if (theta[4] <= 0)
    ideal = max_shards;  // shards only help
  else
    ideal = std::sqrt(theta[2] * workers / theta[4]);
  ideal = std::clamp(ideal, double(min_shards), double(max_shards));
  // The cost is convex in p, so the best integer is next to the real optimum.
  const int lo = std::max(min_shards, int(std::floor(ideal)));
  const int hi = std::min(max_shards, lo + 1);
  return epoch_seconds(theta, workers, hi) < epoch_seconds(theta, workers, lo) ? hi : lo;
}

std::vector<double> nnls(std::span<const double> gram, std::span<const double> rhs, std::size_t n) {
  COACH_ENFORCE(gram.size() == n * n && rhs.size() == n, "nnls: sizes match");
  double scale = 1;
  for (std::size_t k = 0; k < n; ++k)
    scale = std::max({scale, std::abs(rhs[k]), std::abs(gram[k * n + k])});
  const double tol = 1e-12 * scale;
  std::vector<double> x(n, 0.0);
  std::vector<bool> passive(n, false), blocked(n, false);
  auto gradient = [&](std::size_t k) {
    double g = rhs[k];
    for (std::size_t j = 0; j < n; ++j) g -= gram[k * n + j] * x[j];
    return g;
  };
  // Each outer pass frees one variable; with exact arithmetic n passes suffice, and the bound
  // only matters when rounding makes the method cycle.
  for (std::size_t outer = 0; outer < 4 * n + 4; ++outer) {
    std::size_t best = n;
    double best_g = tol;
    for (std::size_t k = 0; k < n; ++k) {
      if (passive[k] || blocked[k]) continue;
      const double g = gradient(k);
      if (g > best_g) best = k, best_g = g;
    }
    if (best == n) break;
    passive[best] = true;
    bool moved = false;
    for (std::size_t inner = 0; inner < 4 * n + 4; ++inner) {
      const std::vector<double> s = solve_passive(gram, rhs, n, passive);
      bool all_positive = true;
      for (std::size_t k = 0; k < n; ++k)
        if (passive[k] && s[k] <= 0) all_positive = false;
      if (all_positive) {
        x = s;
        moved = true;
        break;
      }
      // Step from x toward s until the first passive variable reaches 0, then free it.
      double alpha = 1;
      for (std::size_t k = 0; k < n; ++k)
        if (passive[k] && s[k] <= 0) alpha = std::min(alpha, x[k] / (x[k] - s[k]));
      bool any = false;
      for (std::size_t k = 0; k < n; ++k) {
        if (!passive[k]) continue;
        x[k] += alpha * (s[k] - x[k]);
        if (x[k] <= 1e-14 * scale) {
          x[k] = 0;
          passive[k] = false;
          any = true;
        }
        if (alpha > 0) moved = true;
      }
      if (!any) break;  // rounding: nothing reached 0; leave x as it is
    }
    // Lawson and Hanson's safeguard: a variable whose entry would not make progress is not
    // picked again until x moves.
    if (!moved) {
      blocked[best] = true;
    } else {
      std::fill(blocked.begin(), blocked.end(), false);
    }
  }
  return x;
}

void perf_stats::add(const perf_sample& s, const perf_theta& prior_shape) {
  if (!(s.weight > 0) || !(s.seconds > 0) || s.workers < 1 || s.shards < 1) return;
  perf_theta a = perf_features(s.workers, s.shards);
  for (double& v : a) v /= s.seconds;
  for (std::size_t i = 0; i < perf_terms; ++i) {
    rhs[i] += s.weight * a[i];
    for (std::size_t j = 0; j < perf_terms; ++j) gram[i * perf_terms + j] += s.weight * a[i] * a[j];
  }
  weight += s.weight;
  const double prior = epoch_seconds(prior_shape, s.workers, s.shards);
  if (prior > 0) log_ratio += s.weight * std::log(s.seconds / prior);
  ++count;
}

void perf_stats::add_scaled(const perf_stats& other, double k) {
  for (std::size_t i = 0; i < gram.size(); ++i) gram[i] += k * other.gram[i];
  for (std::size_t i = 0; i < perf_terms; ++i) rhs[i] += k * other.rhs[i];
  weight += k * other.weight;
  log_ratio += k * other.log_ratio;
}

std::optional<perf_theta> fit_perf(const perf_stats& data, const perf_fit_options& options) {
  if (!(data.weight > 1e-12)) return std::nullopt;
  perf_stats all = data;
  if (options.prior_weight > 0) {
    // The prior's level: the weighted geometric mean of observed / prior over the data.
    const double level = std::exp(data.log_ratio / data.weight);
    perf_stats prior;
    for (const auto& [w, p] : prior_grid) {
      const double t = level * epoch_seconds(options.prior_shape, w, p);
      prior.add(perf_sample{w, p, t, options.prior_weight}, options.prior_shape);
    }
    all.add_scaled(prior, 1.0);
  }
  // Equilibrate the columns (1/w and w differ by orders of magnitude), solve, scale back.
  constexpr std::size_t n = perf_terms;
  std::array<double, n> d{};
  for (std::size_t k = 0; k < n; ++k) {
    const double diag = all.gram[k * n + k];
    d[k] = diag > 0 ? 1.0 / std::sqrt(diag) : 0.0;
  }
  std::array<double, n * n> g{};
  std::array<double, n> h{};
  for (std::size_t i = 0; i < n; ++i) {
    h[i] = d[i] * all.rhs[i];
    for (std::size_t j = 0; j < n; ++j) g[i * n + j] = d[i] * all.gram[i * n + j] * d[j];
  }
  const std::vector<double> y = nnls(g, h, n);
  perf_theta theta{};
  for (std::size_t k = 0; k < n; ++k) theta[k] = d[k] * y[k];
  double any = 0;
  for (double v : theta) any += v;
  if (!(any > 0) || !std::isfinite(any)) return std::nullopt;
  return theta;
}

std::optional<perf_theta> fit_perf(std::span<const perf_sample> samples,
                                   const perf_fit_options& options) {
  perf_stats stats;
  for (const auto& s : samples) stats.add(s, options.prior_shape);
  return fit_perf(stats, options);
}

perf_model::perf_model(perf_model_options options) : options_(options) {}

perf_model::model_entry& perf_model::model_of(std::string_view model) {
  auto it = models_.find(model);
  if (it == models_.end()) it = models_.emplace(std::string(model), model_entry{}).first;
  return it->second;
}

bool perf_model::grown(double now, double then) const {
  if (now <= then + 1e-9) return false;
  return then < options_.refresh_after || now > then * (1 + options_.refresh_growth);
}

const std::optional<perf_theta>& perf_model::refresh(job_entry& job, model_entry& m) {
  const double others = std::max(0.0, m.stats.weight - job.stats.weight);
  const bool stale =
      !job.fitted || job.stats.count != job.fitted_count || grown(others, job.fitted_others);
  if (!stale) return job.theta;
  perf_stats combined = job.stats;
  if (others > 1e-12) {
    // The other jobs' epochs weigh s²/(s + n) in all (or what they have, if less).
    const double s = options_.pooled_samples;
    const double k = std::min(1.0, s * s / (s + job.stats.weight) / others);
    combined.add_scaled(m.stats, k);
    combined.add_scaled(job.stats, -k);
  }
  job.theta = fit_perf(combined, options_.fit);
  job.fitted = true;
  job.fitted_count = job.stats.count;
  job.fitted_others = others;
  return job.theta;
}

std::optional<perf_theta> perf_model::model_theta(std::string_view model) {
  auto it = models_.find(model);
  if (it == models_.end() || it->second.stats.count == 0) return std::nullopt;
  auto& m = it->second;
  if (m.fitted_count == 0 || grown(double(m.stats.count), double(m.fitted_count))) {
    m.theta = fit_perf(m.stats, options_.fit);
    m.fitted_count = m.stats.count;
  }
  return m.theta;
}

std::optional<perf_theta> perf_model::job_theta(std::uint64_t job, std::string_view model) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return model_theta(model);
  return refresh(it->second, *it->second.pool);
}

std::optional<double> perf_model::predict(std::uint64_t job, std::string_view model, int workers,
                                          int shards) {
  COACH_ENFORCE(workers >= 1 && shards >= 1, "predict at >= 1 worker and shard");
  auto theta = job_theta(job, model);
  if (!theta) return std::nullopt;
  return epoch_seconds(*theta, workers, shards);
}

void perf_model::observe(std::uint64_t job, std::string_view model, int workers, int shards,
                         double seconds) {
  if (workers < 1 || shards < 1 || !std::isfinite(seconds) || !(seconds > 0)) return;
  if (auto predicted = predict(job, model, workers, shards)) {
    const double err = std::abs(*predicted - seconds) / seconds;
    auto& m = model_of(model);
    ++m.predictions;
    m.abs_rel_error += err;
    ++predictions_;
    abs_rel_error_ += err;
    if (options_.history > 0) {
      if (recent_.size() == options_.history) recent_.pop_front();
      recent_.push_back(
          prediction_record{job, std::string(model), workers, shards, *predicted, seconds});
    }
  }
  auto [it, fresh] = jobs_.try_emplace(job);
  auto& j = it->second;
  if (fresh) {
    j.model = std::string(model);
    j.pool = &model_of(model);
    ++j.pool->jobs;
  }
  auto& m = *j.pool;
  const perf_sample s{workers, shards, seconds, 1.0};
  j.stats.add(s, options_.fit.prior_shape);
  m.stats.add(s, options_.fit.prior_shape);
}

void perf_model::forget_job(std::uint64_t job) {
  jobs_.erase(job);
}

std::vector<perf_model_summary> perf_model::summary() {
  std::vector<std::string> names;
  for (const auto& [name, m] : models_) names.push_back(name);
  std::sort(names.begin(), names.end());
  std::vector<perf_model_summary> out;
  for (const auto& name : names) {
    auto& m = models_.at(name);
    perf_model_summary s;
    s.model = name;
    s.samples = m.stats.count;
    s.jobs = m.jobs;
    s.theta = model_theta(name);
    s.predictions = m.predictions;
    s.mean_abs_rel_error = m.predictions ? m.abs_rel_error / double(m.predictions) : 0.0;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<prediction_record> perf_model::recent() const {
  return {recent_.begin(), recent_.end()};
}

json perf_model::to_json() {
  json models = json::array();
  for (const auto& s : summary()) {
    json theta = nullptr;
    if (s.theta) {
      theta = json::array();
      for (std::size_t k = 0; k < perf_terms; ++k) theta.push_back(json_figure((*s.theta)[k]));
    }
    models.push_back(json{{"model", s.model},
                          {"samples", s.samples},
                          {"jobs", s.jobs},
                          {"theta", std::move(theta)},
                          {"predictions", s.predictions},
                          {"mean_abs_rel_error", json_figure(s.mean_abs_rel_error)}});
  }
  json recent = json::array();
  for (const auto& r : recent_)
    recent.push_back(json{{"job", r.job},
                          {"model", r.model},
                          {"workers", r.workers},
                          {"shards", r.shards},
                          {"predicted_s", json_figure(r.predicted_s)},
                          {"observed_s", json_figure(r.observed_s)}});
  return json{{"models", std::move(models)},
              {"predictions", predictions_},
              {"mean_abs_rel_error", json_figure(mean_abs_rel_error())},
              {"recent", std::move(recent)}};
}

}  // namespace coach::scheduler
