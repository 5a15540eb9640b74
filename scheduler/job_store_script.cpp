// scheduler/job_store_script.cpp: a script job's model kept with the job (job_store.hpp,
// table job_scripts).
#include <sqlite3.h>

#include <cstring>

#include "scheduler/job_store.hpp"
#include "scheduler/sqlite.hpp"

namespace coach::scheduler {

using sqlite::sql_error;
using sqlite::statement;

result<void> job_store::save_script(std::uint64_t job, const worker::script_payload& p) {
  statement q(db_,
              "INSERT OR REPLACE INTO job_scripts (job, entry, layout, initial, bundle) "
              "SELECT id, ?, ?, ?, ? FROM jobs WHERE id = ?");
  q.bind(1, std::string_view(p.entry)).bind(2, std::string_view(p.layout_json));
  if (p.initial)
    q.bind_blob(3, p.initial->data(), p.initial->size() * sizeof(float));
  else
    q.bind_blob(3, nullptr, 0);
  if (p.bundle)
    q.bind_blob(4, p.bundle->data(), p.bundle->size());
  else
    q.bind_blob(4, nullptr, 0);
  q.bind(5, job);
  if (q.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot store a job's script");
  if (sqlite3_changes(db_) == 0)
    return fail(errc::not_found, "job store '{}': no job {}", path_, job);
  return {};
}

result<std::optional<worker::script_payload>> job_store::script(std::uint64_t job) const {
  statement q(db_, "SELECT entry, layout, initial, bundle FROM job_scripts WHERE job = ?");
  q.bind(1, job);
  const int rc = q.step();
  if (rc == SQLITE_DONE) return std::optional<worker::script_payload>();
  if (rc != SQLITE_ROW) return sql_error(db_, path_, "cannot read a job's script");
  worker::script_payload p;
  p.entry = q.text(0);
  p.layout_json = q.text(1);
  const auto initial = q.blob(2);
  if (initial.size() % sizeof(float) != 0)
    return fail(errc::parse_error,
                "job store '{}': job {}'s script has {} bytes of initial values, not whole f32s",
                path_, job, initial.size());
  auto values = std::make_shared<std::vector<float>>(initial.size() / sizeof(float));
  if (!initial.empty()) std::memcpy(values->data(), initial.data(), initial.size());
  p.initial = std::move(values);
  const auto bundle = q.blob(3);
  p.bundle = std::make_shared<const std::vector<std::byte>>(bundle.begin(), bundle.end());
  return std::optional<worker::script_payload>(std::move(p));
}

result<void> job_store::drop_script(std::uint64_t job) {
  statement q(db_, "DELETE FROM job_scripts WHERE job = ?");
  q.bind(1, job);
  if (q.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot forget a job's script");
  return {};
}

}  // namespace coach::scheduler
