#include "report/report_plot.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "report/svg_text.hpp"

namespace coach::scheduler {
namespace {

/// One panel: a frame, axes with ticks, and polylines of `series` (values by epoch).
struct panel {
  double x0, y0, w, h;  ///< the plotting area in pixels
  double xmin, xmax, ymin, ymax;
  double px(double x) const { return x0 + (x - xmin) / (xmax - xmin) * w; }
  double py(double y) const { return y0 + h - (y - ymin) / (ymax - ymin) * h; }
};

void frame(std::string& svg, const panel& p, const std::string& title, int xticks) {
  svg += coach::format(
      "<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#888'/>\n"
      "<text x='{}' y='{}' font-size='14' font-weight='bold'>{}</text>\n",
      p.x0, p.y0, p.w, p.h, p.x0, p.y0 - 8, svg_text(title));
  for (int i = 0; i <= 4; ++i) {
    const double v = p.ymin + (p.ymax - p.ymin) * i / 4;
    svg += coach::format(
        "<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#eee'/>"
        "<text x='{}' y='{}' font-size='11' text-anchor='end'>{}</text>\n",
        p.x0, p.py(v), p.x0 + p.w, p.py(v), p.x0 - 6, p.py(v) + 4, coach::format("{:.3f}", v));
  }
  // Whole epochs, about `xticks` of them.
  const int every = std::max(1, int(std::ceil((p.xmax - p.xmin) / std::max(1, xticks))));
  for (int e = int(std::ceil(p.xmin)); e <= int(p.xmax); e += every)
    svg += coach::format("<text x='{}' y='{}' font-size='11' text-anchor='middle'>{}</text>\n",
                         p.px(e), p.y0 + p.h + 16, e);
}

void line(std::string& svg, const panel& p, const std::vector<plot_epoch>& es,
          double plot_epoch::*field, const char* color, const char* label, int slot,
          bool legend_low = false) {
  std::string pts;
  for (const auto& e : es) {
    const double v = e.*field;
    if (!std::isfinite(v)) continue;
    pts += coach::format("{},{} ", p.px(e.epoch), p.py(v));
  }
  svg += coach::format("<polyline fill='none' stroke='{}' stroke-width='2' points='{}'/>\n", color,
                       pts);
  for (const auto& e : es)
    if (std::isfinite(e.*field))
      svg += coach::format("<circle cx='{}' cy='{}' r='2.5' fill='{}'/>\n", p.px(e.epoch),
                           p.py(e.*field), color);
  const double lx = p.x0 + p.w - 150,
               ly = legend_low ? p.y0 + p.h - 12 - 16 * slot : p.y0 + 16 + 16 * slot;
  svg += coach::format(
      "<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='{}' stroke-width='2'/>"
      "<text x='{}' y='{}' font-size='12'>{}</text>\n",
      lx, ly - 4, lx + 20, ly - 4, color, lx + 26, ly, label);
}

}  // namespace

result<plot_data> read_report(const std::string& text, const std::string& source) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(errc::parse_error, "{}: not a JSON object (a report of coach train --report)",
                source);
  const auto eps = j.find("epochs");
  if (eps == j.end() || !eps->is_array())
    return fail(errc::parse_error, "{}: no \"epochs\" list (a report of coach train --report)",
                source);
  plot_data d;
  if (auto n = j.find("name"); n != j.end() && n->is_string()) d.name = n->get<std::string>();
  auto number = [](const nlohmann::json& o, const char* key) {
    const auto it = o.find(key);
    if (it == o.end()) return std::numeric_limits<double>::quiet_NaN();
    return it->is_number() ? it->get<double>() : std::numeric_limits<double>::quiet_NaN();
  };
  for (std::size_t i = 0; i < eps->size(); ++i) {
    const auto& e = (*eps)[i];
    if (!e.is_object() || !e.contains("epoch") || !e["epoch"].is_number_integer())
      return fail(errc::parse_error, "{}: epochs[{}] has no integer \"epoch\"", source, i);
    d.epochs.push_back(
        {e["epoch"].get<int>(), number(e, "train_loss"), number(e, "test_loss"),
         number(e, "test_accuracy"),
         e.contains("steps") && e["steps"].is_number_integer() ? e["steps"].get<long long>() : 0});
  }
  if (auto cs = j.find("changes"); cs != j.end() && cs->is_array())
    for (const auto& c : *cs)
      if (c.is_object() && c.contains("what") && c["what"].is_string() && c.contains("step") &&
          c["step"].is_number_integer())
        d.changes.push_back({c["what"].get<std::string>(), c["step"].get<long long>()});
  return d;
}

double change_position(const std::vector<plot_epoch>& epochs, long long step) {
  long long before = 0;
  for (const auto& e : epochs) {
    if (e.steps > 0 && step < before + e.steps)
      return e.epoch - 1 + double(step - before) / double(e.steps);
    before += e.steps;
  }
  return epochs.empty() ? 0 : epochs.back().epoch;
}

std::string plot_svg(const plot_data& d, int width, int height) {
  std::string svg = coach::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' "
      "font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{}' y='22' font-size='16' text-anchor='middle'>{}</text>\n",
      width, height, width / 2, svg_text(d.name.empty() ? "coach job" : d.name));
  if (d.epochs.empty()) {
    svg += "<text x='40' y='80' font-size='14'>no finished epoch in this report</text>\n</svg>\n";
    return svg;
  }
  double lmin = std::numeric_limits<double>::infinity(), lmax = -lmin;
  double amin = lmin, amax = -lmin;
  for (const auto& e : d.epochs) {
    for (double v : {e.train_loss, e.test_loss})
      if (std::isfinite(v)) lmin = std::min(lmin, v), lmax = std::max(lmax, v);
    if (std::isfinite(e.test_accuracy))
      amin = std::min(amin, e.test_accuracy), amax = std::max(amax, e.test_accuracy);
  }
  if (!std::isfinite(lmin)) lmin = 0, lmax = 1;
  if (!std::isfinite(amin)) amin = 0, amax = 1;
  const auto pad = [](double& lo, double& hi) {
    const double m = hi > lo ? (hi - lo) * 0.08 : 0.05;
    lo -= m;
    hi += m;
  };
  pad(lmin, lmax);
  pad(amin, amax);
  lmin = std::max(0.0, lmin);
  amin = std::max(0.0, amin);
  amax = std::min(1.0, amax);
  const double xmin = d.epochs.size() > 1 ? d.epochs.front().epoch : d.epochs.front().epoch - 1;
  const double xmax = d.epochs.back().epoch;
  const double left = 70, right = 20, top = 50, gap = 60;
  const double pw = width - left - right, ph = (height - top - gap - 40) / 2.0;
  const panel loss{left, top, pw, ph, xmin, xmax, lmin, lmax};
  const panel acc{left, top + ph + gap, pw, ph, xmin, xmax, amin, amax};
  const int ticks = int(std::min<double>(10, xmax - xmin));
  frame(svg, loss, "loss by epoch", ticks);
  frame(svg, acc, "test accuracy by epoch", ticks);
  line(svg, loss, d.epochs, &plot_epoch::train_loss, "#1f77b4", "training loss", 0);
  line(svg, loss, d.epochs, &plot_epoch::test_loss, "#ff7f0e", "test loss", 1);
  line(svg, acc, d.epochs, &plot_epoch::test_accuracy, "#2ca02c", "test accuracy", 0, true);
  for (const auto& c : d.changes) {
    // A change before the first epoch's point (at its start) is drawn on the left border.
    const double x = std::clamp(change_position(d.epochs, c.step), xmin, xmax);
    for (const auto* p : {&loss, &acc})
      svg += coach::format(
          "<line class='change' x1='{}' y1='{}' x2='{}' y2='{}' stroke='#d62728' "
          "stroke-dasharray='4,3'/>\n",
          p->px(x), p->y0, p->px(x), p->y0 + p->h);
    svg += coach::format(
        "<text x='{}' y='{}' font-size='10' fill='#d62728' transform='rotate(-90 {} {})'>{} "
        "(step {})</text>\n",
        loss.px(x) - 3, loss.y0 + loss.h - 4, loss.px(x) - 3, loss.y0 + loss.h - 4,
        svg_text(c.what), c.step);
  }
  svg += coach::format("<text x='{}' y='{}' font-size='12' text-anchor='middle'>epoch</text>\n",
                       left + pw / 2, height - 8);
  return svg + "</svg>\n";
}

}  // namespace coach::scheduler
