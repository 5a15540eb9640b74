// scheduler/cluster_core_script.cpp: a script job's model in the cluster scheduler
// (cluster_core.hpp). The submitter registered it (worker/script_job.hpp); the scheduler checks
// what came, keeps it with the job (here and in the job store, so that a restart loses no
// queued script job) and hands it to each run, which sends it on to the job's nodes.
#include "common/format.hpp"
#include "scheduler/cluster_core.hpp"
#include "worker/script_bundle.hpp"

namespace coach::scheduler {

result<job_data> cluster_core::check_script(const job_spec& spec, const submit_request& req) {
  if (!req.script)
    return fail(errc::invalid_argument,
                "{}: the model is the script {}: its files and layout come with `coach submit`, "
                "which runs its first process (this request has none)",
                req.source_name, spec.model.script->path);
  if (!spec.model.script)
    return fail(errc::protocol_error, "{}: a script came with a spec whose model is not one",
                req.source_name);
  // Hostile input: a bundle whose paths leave its folder, a layout that is not one, initial
  // values of another size. Refused in one line, logged, the job never stored.
  auto checked = [&]() -> result<job_data> {
    if (!req.script->initial)
      return fail(errc::protocol_error, "the script's initial values did not come");
    auto model = worker::payload_model(*req.script, req.script->initial);
    if (!model) return std::unexpected(model.error());
    if (!req.script->bundle) return fail(errc::protocol_error, "the script's files did not come");
    auto files = worker::unpack_bundle(*req.script->bundle);
    if (!files) return std::unexpected(files.error());
    return std::make_shared<const worker::dataset_pair>(worker::script_dataset((*model)->layout));
  }();
  if (!checked) {
    ports_.note(coach::format("refused a submit of {}: {}", req.source_name.substr(0, 200),
                              checked.error().message));
    return std::unexpected(checked.error());
  }
  return checked;
}

result<void> cluster_core::keep_script(std::uint64_t id, job_script script) {
  if (auto saved = reg_->store()->save_script(id, *script); !saved)
    return std::unexpected(saved.error());
  scripts_[id] = std::move(script);
  return {};
}

result<job_script> cluster_core::script_of(std::uint64_t id) {
  if (auto it = scripts_.find(id); it != scripts_.end()) return it->second;
  auto stored = reg_->store()->script(id);
  if (!stored) return std::unexpected(stored.error());
  if (!*stored)
    return fail(errc::not_found,
                "job {}: its model is a script, and the job store has none of its files (submit "
                "it again)",
                id);
  auto script = std::make_shared<const worker::script_payload>(std::move(**stored));
  scripts_[id] = script;
  return script;
}

result<void> cluster_core::with_script_layout(std::uint64_t id, job_spec& spec) {
  if (!spec.model.script) return {};
  auto script = script_of(id);
  if (!script) return std::unexpected(script.error());
  auto model = worker::payload_model(**script, nullptr);
  if (!model) return std::unexpected(model.error());
  spec.model.external = std::move(*model);
  return {};
}

}  // namespace coach::scheduler
