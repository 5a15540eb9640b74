#pragma once
// `coach data`: data sets made here for the models of the project. `coach data ctr` writes a
// click-through-rate set in the Criteo layout from the planted model of
// worker/ctr_generator.hpp, with its JSON summary (docs/sparse.md). Kept apart from coach.cpp,
// which only registers the command and runs it.

#include <cstdint>
#include <string>

#include "worker/ctr_generator.hpp"

namespace CLI {
class App;
}

namespace coach::apps {

/// The `data` command of `coach`: its subcommands, their flags and their runs.
class data_command {
 public:
  /// Adds `data` and its subcommands to `app`.
  explicit data_command(CLI::App& app);

  /// True when the command line chose `coach data ...`.
  bool chosen() const;

  /// Runs the chosen subcommand; prints errors on stderr as one line. Exit code: 0 done, 1 a
  /// file could not be written, 2 a bad value.
  int run() const;

 private:
  int run_ctr() const;

  CLI::App* data_ = nullptr;
  CLI::App* ctr_ = nullptr;
  worker::ctr_generator_options ctr_options_;
  std::string ctr_out_;
};

}  // namespace coach::apps
