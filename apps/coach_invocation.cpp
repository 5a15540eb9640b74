// coach-invocation: one function-mode invocation (worker/invocation.hpp). A worker starts it
// under a deadline and a memory cap (worker::bounded_process) with pipes on stdin and stdout,
// sends the model and then one task per step, and reads one answer per task; the process exits
// after --tasks answers or when its input ends. Not meant to be run by hand.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdint>

#include "worker/invocation.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "coach-invocation: one bounded function-mode invocation of a Coach worker; "
      "reads its model and tasks on stdin and answers on stdout"};
  std::uint64_t tasks = 0;
  app.add_option("--tasks", tasks,
                 "Answer at most this many tasks, then exit (0: until stdin ends)");
  CLI11_PARSE(app, argc, argv);
  return coach::worker::run_invocation(STDIN_FILENO, STDOUT_FILENO, tasks);
}
