#pragma once
// scheduler::report_plot: a job report's curves as an SVG image (`coach plot REPORT.json -o
// curves.svg`): training and test loss, and test accuracy, by epoch, one panel each, with a
// dashed line and a label at every change of workers or shards where it took effect (its
// first step, placed within its epoch by the epochs' step counts).
//
// Plain functions over plain records; the SVG is self-contained (no fonts or scripts fetched).

#include <string>
#include <vector>

#include "common/error.hpp"

namespace coach::scheduler {

struct plot_epoch {
  int epoch = 0;  ///< 1-based, as the report numbers them
  double train_loss = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  long long steps = 0;  ///< steps the epoch ran (places the changes)
};

struct plot_change {
  std::string what;  ///< "workers 3", "migrate 0 to node-b"
  long long step = 0;
};

struct plot_data {
  std::string name;
  std::vector<plot_epoch> epochs;
  std::vector<plot_change> changes;
};

/// Reads what the plot needs from a report's JSON text (`coach train --report`). Errors:
/// parse_error (not JSON, or no "epochs" list of objects with the fields above), naming
/// `source` and the field.
result<plot_data> read_report(const std::string& text, const std::string& source);

/// Where change `step` falls on the epoch axis: epoch e's steps span (e - 1, e].
double change_position(const std::vector<plot_epoch>& epochs, long long step);

/// The SVG image (width × height pixels).
std::string plot_svg(const plot_data& d, int width = 800, int height = 560);

}  // namespace coach::scheduler
