// `coach submit`'s preparation (apps/coach_api.hpp, prepare_submit): the spec read and, for a
// script's model, the script registered where the user is, so that a broken script fails on the
// submitter's terminal with its traceback before anything reaches the cluster
// (worker/script_job.hpp; docs/python.md "On a cluster of coach-nodes").
#include <filesystem>
#include <fstream>
#include <sstream>

#include "coach_api.hpp"
#include "spec/job_spec.hpp"

namespace coach::apps {

int prepare_submit(const std::string& spec_path, const std::string& python, submit_input& out) {
  std::ifstream in(spec_path);
  if (!in) return report_error({errc::not_found, spec_path + ": job spec file not found"});
  std::stringstream text;
  text << in.rdbuf();
  out.spec_yaml = text.str();
  out.source_name = spec_path;
  std::error_code ec;
  // The spec's relative paths resolve against its folder, on the scheduler's side as in
  // `coach train` (spec/job_spec.hpp, load_job_spec).
  out.base_dir = std::filesystem::absolute(spec_path, ec).parent_path().string();
  // Read here only to see whether the model is a script (found beside the spec): any other
  // fault of the spec is the scheduler's to report, as for every spec.
  auto spec = scheduler::parse_job_spec(out.spec_yaml, spec_path, out.base_dir, out.base_dir);
  if (!spec || !spec->model.script) return 0;
  auto script = worker::prepare_submission(*spec->model.script, spec->seed, python);
  if (!script) return report_error(script.error());
  // A script with embedding tables runs only where a model with tables does: said here.
  if (auto layout = worker::parse_hello(script->layout_json); layout)
    if (auto ok = scheduler::apply_script_tables(*spec, *layout); !ok)
      return report_error(ok.error());
  out.script = std::make_shared<const worker::script_payload>(std::move(*script));
  return 0;
}

}  // namespace coach::apps
