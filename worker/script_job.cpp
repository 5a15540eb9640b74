// worker/script_job.cpp: a script's model registered by the submitter and run from each host's
// copy of its files (script_job.hpp).
#include "worker/script_job.hpp"

#include <algorithm>
#include <filesystem>

#include "common/format.hpp"
#include "common/log.hpp"
#include "worker/external_pool.hpp"
#include "worker/script_bundle.hpp"

namespace coach::worker {

namespace fs = std::filesystem;

result<script_payload> prepare_submission(const script_config& script, std::uint64_t seed,
                                          std::string python) {
  const fs::path path(script.path);
  // The files first: a folder over the limit is bad input, said before anything runs.
  auto files = read_script_folder(path.parent_path().string());
  if (!files) return std::unexpected(files.error());
  script_payload p;
  p.entry = path.filename().string();
  if (std::none_of(files->begin(), files->end(),
                   [&](const bundle_file& f) { return f.path == p.entry; }))
    return fail(errc::not_found,
                "{}: the script is not among the files of its folder that travel (a name "
                "starting with '.' is left out)",
                script.path);
  auto opt = script_options_for(script, seed, 0, std::move(python), 0);
  if (!opt) return std::unexpected(opt.error());
  auto model = start_script_model(std::move(*opt));
  if (!model) return std::unexpected(model.error());
  p.layout_json = hello_json((*model)->layout);
  if (p.layout_json.size() > max_layout_json_bytes)
    return fail(errc::invalid_argument,
                "{}: its layout of {} tensors takes {} bytes as JSON; a cluster takes at most {}",
                script.path, (*model)->layout.tensors.size(), p.layout_json.size(),
                max_layout_json_bytes);
  p.initial = (*model)->initial;
  p.bundle = std::make_shared<const std::vector<std::byte>>(pack_bundle(*files));
  log::info(
      "{}: {} tensors, {} parameters, {} training and {} test samples ({}); {} file(s), "
      "{} bytes, go with the job",
      script.path, (*model)->layout.tensors.size(), (*model)->layout.floats,
      (*model)->layout.samples, (*model)->layout.test_samples, (*model)->layout.framework,
      files->size(), p.bundle->size());
  return p;  // the model goes here: its pool stops the first process
}

result<std::shared_ptr<external_model>> payload_model(
    const script_payload& p, std::shared_ptr<const std::vector<float>> initial) {
  if (p.layout_json.size() > max_layout_json_bytes)
    return fail(errc::protocol_error, "the script's layout has {} bytes (at most {})",
                p.layout_json.size(), max_layout_json_bytes);
  auto layout = parse_hello(p.layout_json);
  if (!layout) return fail(errc::protocol_error, "the script's layout: {}", layout.error().message);
  if (initial && initial->size() != layout->floats)
    return fail(errc::protocol_error,
                "the script's initial values are {} floats where its layout has {}",
                initial->size(), layout->floats);
  auto m = std::make_shared<external_model>();
  m->layout = std::move(*layout);
  m->initial = std::move(initial);
  return m;
}

result<std::shared_ptr<const external_model>> open_submitted(
    const script_payload& p, std::shared_ptr<const std::vector<float>> initial,
    const script_config& script, std::uint64_t seed, std::uint64_t job, const script_host& host,
    int threads, std::string_view folder_prefix, std::uint64_t memory_bytes) {
  auto model = payload_model(p, std::move(initial));
  if (!model) return std::unexpected(model.error());
  if (!p.bundle) return fail(errc::protocol_error, "the script's files did not come");
  auto files = unpack_bundle(*p.bundle);
  if (!files) return std::unexpected(files.error());
  if (bundle_path_problem(p.entry) ||
      std::none_of(files->begin(), files->end(),
                   [&](const bundle_file& f) { return f.path == p.entry; }))
    return fail(errc::not_found, "the script '{}' is not among the {} file(s) that came",
                p.entry.substr(0, 200), files->size());
  auto folder = script_folder::make(host.root, folder_prefix);
  if (!folder) return std::unexpected(folder.error());
  if (auto ok = (*folder)->write(*files); !ok) return std::unexpected(ok.error());
  script_config here = script;
  here.path = (fs::path((*folder)->path()) / p.entry).string();
  auto opt = script_options_for(here, seed, job, host.python, threads);
  if (!opt) return std::unexpected(opt.error());
  opt->memory_bytes = memory_bytes;
  auto pool = std::make_shared<external_pool>(std::move(*opt));
  pool->register_known((*model)->layout, (*model)->initial);
  log::info("job {}: the script {} and {} more file(s) written to {}", job, p.entry,
            files->size() - 1, (*folder)->path());
  pool->keep(std::move(*folder));
  (*model)->pool = std::move(pool);
  return std::shared_ptr<const external_model>(std::move(*model));
}

}  // namespace coach::worker
