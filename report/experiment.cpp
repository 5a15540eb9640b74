#include "report/experiment.hpp"

#include <algorithm>
#include <cmath>

#include "common/format.hpp"
#include "report/perf_model.hpp"
#include "report/svg_text.hpp"

namespace coach::scheduler::experiment {

std::optional<double> typical_epoch(std::span<const double> epoch_seconds) {
  if (epoch_seconds.empty()) return std::nullopt;
  if (epoch_seconds.size() == 1) return epoch_seconds.front();
  std::vector<double> v(epoch_seconds.begin() + 1, epoch_seconds.end());
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

prediction_study predict_from_first(std::span<const measured_point> points, std::size_t k) {
  prediction_study out;
  out.fit_points = k;
  perf_model model;
  for (std::size_t i = 0; i < k && i < points.size(); ++i)
    model.observe(1, "study", points[i].workers, points[i].shards, points[i].epoch_s);
  double err = 0;
  std::size_t predicted = 0;
  std::optional<std::size_t> best, predicted_best;
  for (std::size_t i = 0; i < points.size(); ++i) {
    predicted_point p;
    p.measured = points[i];
    p.fitted = i < k;
    p.predicted_s = model.predict(1, "study", points[i].workers, points[i].shards).value_or(0);
    if (!p.fitted && points[i].epoch_s > 0) {
      err += std::abs(p.predicted_s - points[i].epoch_s) / points[i].epoch_s;
      ++predicted;
    }
    if (!best || points[i].epoch_s < points[*best].epoch_s) best = i;
    if (!predicted_best || p.predicted_s < out.points[*predicted_best].predicted_s)
      predicted_best = i;
    out.points.push_back(p);
  }
  out.mean_abs_rel_error = predicted ? err / double(predicted) : 0;
  if (best && predicted_best) {
    out.best = points[*best];
    out.predicted_best = points[*predicted_best];
    out.regret =
        out.predicted_best.epoch_s > 0 ? 1 - out.best.epoch_s / out.predicted_best.epoch_s : 0;
  }
  return out;
}

policy_figures policy_metrics(std::span<const job_times> jobs) {
  policy_figures f;
  if (jobs.empty()) return f;
  double first = jobs.front().submitted, last = jobs.front().finished;
  for (const auto& j : jobs) {
    first = std::min(first, j.submitted);
    last = std::max(last, j.finished);
    f.mean_turnaround_s += j.finished - j.submitted;
    f.mean_wait_s += j.started - j.submitted;
  }
  f.makespan_s = last - first;
  f.mean_turnaround_s /= double(jobs.size());
  f.mean_wait_s /= double(jobs.size());
  return f;
}

std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows) {
  const auto line = [](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (const auto& c : cells) s += " " + c + " |";
    return s + "\n";
  };
  std::string out = line(header) + "|";
  for (std::size_t i = 0; i < header.size(); ++i) out += "---|";
  out += "\n";
  for (const auto& r : rows) out += line(r);
  return out;
}

namespace {

/// A round step for an axis from 0 to `top` in about 5 ticks.
double tick_step(double top) {
  const double raw = top / 5;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

}  // namespace

std::string line_chart_svg(const std::string& title, const std::string& x_title,
                           const std::string& y_title, const std::vector<std::string>& x_labels,
                           const std::vector<chart_series>& series, int width, int height) {
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  const double left = 70, right = 160, top = 40, bottom = 60;
  const double w = width - left - right, h = height - top - bottom;
  double y_max = 0;
  for (const auto& s : series)
    for (const auto& y : s.y)
      if (y && std::isfinite(*y)) y_max = std::max(y_max, *y);
  if (y_max <= 0) y_max = 1;
  const double step = tick_step(y_max * 1.05);
  const double y_top = std::ceil(y_max * 1.05 / step) * step;
  const std::size_t n = std::max<std::size_t>(1, x_labels.size());
  const auto x_at = [&](std::size_t i) {
    return left + (n == 1 ? w / 2 : w * double(i) / double(n - 1));
  };
  const auto y_at = [&](double y) { return top + h * (1 - y / y_top); };
  std::string out = coach::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"22\" font-size=\"15\">{}</text>\n",
      width, height, left, svg_text(title));
  for (double y = 0; y <= y_top + step / 2; y += step) {
    out += coach::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3g}</text>\n",
        left, y_at(y), left + w, y_at(y), left - 6, y_at(y) + 4, y);
  }
  for (std::size_t i = 0; i < x_labels.size(); ++i)
    out += coach::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                         x_at(i), top + h + 18, svg_text(x_labels[i]));
  out += coach::format(
      "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"black\"/>\n"
      "<line x1=\"{0:.1f}\" y1=\"{3:.1f}\" x2=\"{0:.1f}\" y2=\"{1:.1f}\" stroke=\"black\"/>\n",
      left, top + h, left + w, top);
  out += coach::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                       left + w / 2, double(height) - 18, svg_text(x_title));
  out += coach::format(
      "<text transform=\"translate(18,{:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      top + h / 2, svg_text(y_title));
  for (std::size_t s = 0; s < series.size(); ++s) {
    const char* color = colors[s % (sizeof colors / sizeof *colors)];
    std::string points;
    for (std::size_t i = 0; i < series[s].y.size() && i < x_labels.size(); ++i) {
      const auto& y = series[s].y[i];
      if (!y || !std::isfinite(*y)) continue;
      points += coach::format("{:.1f},{:.1f} ", x_at(i), y_at(*y));
      out += coach::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", x_at(i),
                           y_at(*y), color);
    }
    if (!points.empty())
      out += coach::format(
          "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", points,
          color);
    const double ly = top + 10 + 20 * double(s);
    out += coach::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"2\"/>\n<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        left + w + 14, ly, left + w + 34, ly, color, left + w + 40, ly + 4,
        svg_text(series[s].name));
  }
  return out + "</svg>\n";
}

}  // namespace coach::scheduler::experiment
