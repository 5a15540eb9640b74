// scheduler::job_store's jobs: adding and forgetting a job, its submit token, its state,
// allocation and history, and reading them back (the jobs table, job_states, allocations,
// submit_tokens). Split from scheduler/job_store.cpp, which opens the store (its schema and
// upgrades) and keeps the epochs, checkpoints and settings. The contract is in
// scheduler/job_store.hpp.

#include <sqlite3.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <utility>

#include "common/format.hpp"
#include "scheduler/job_store.hpp"
#include "scheduler/sqlite.hpp"

namespace coach::scheduler {
namespace {

using sqlite::sql_error;
using sqlite::sql_transaction;
using sqlite::statement;

std::string encode_nodes(std::span<const std::uint32_t> nodes) {
  std::string out;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(nodes[i]);
  }
  return out;
}

std::optional<std::vector<std::uint32_t>> decode_nodes(std::string_view text) {
  std::vector<std::uint32_t> out;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    std::uint32_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc{} || end != item.data() + item.size()) return std::nullopt;
    out.push_back(v);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  return out;
}

/// Seconds as "1.5,0.25" (shortest round-trip form: read back exactly).
std::string encode_seconds(std::span<const double> seconds) {
  std::string out;
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    if (i) out += ',';
    char buf[32];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, seconds[i]);
    out.append(buf, end);
  }
  return out;
}

std::optional<std::vector<double>> decode_seconds(std::string_view text) {
  std::vector<double> out;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    double v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc{} || end != item.data() + item.size()) return std::nullopt;
    out.push_back(v);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  return out;
}

constexpr const char* job_columns =
    "id, name, model, spec, source_name, base_dir, submitted, elastic, min_workers, max_workers, "
    "requested_workers, min_shards, max_shards, requested_shards, gpus_per_worker, epochs_total, "
    "state, state_since, workers, shards, worker_nodes, shard_nodes, epochs_done, message, "
    "recoveries, failovers, resumes, samples_per_epoch";

result<job_record> read_job(const statement& s, const std::string& path) {
  job_record j;
  j.id = std::uint64_t(s.integer(0));
  j.name = s.text(1);
  j.model = s.text(2);
  j.spec_yaml = s.text(3);
  j.source_name = s.text(4);
  j.base_dir = s.text(5);
  j.submitted = s.real(6);
  j.elastic = s.integer(7) != 0;
  j.min_workers = int(s.integer(8));
  j.max_workers = int(s.integer(9));
  j.requested_workers = int(s.integer(10));
  j.min_shards = int(s.integer(11));
  j.max_shards = int(s.integer(12));
  j.requested_shards = int(s.integer(13));
  j.gpus_per_worker = int(s.integer(14));
  j.epochs_total = int(s.integer(15));
  const std::string state = s.text(16);
  auto parsed = parse_job_state(state);
  if (!parsed)
    return fail(errc::parse_error, "job store '{}': job {} has an unknown state '{}'", path, j.id,
                state);
  j.state = *parsed;
  j.state_since = s.real(17);
  j.workers = int(s.integer(18));
  j.shards = int(s.integer(19));
  auto wn = decode_nodes(s.text(20));
  auto sn = decode_nodes(s.text(21));
  if (!wn || !sn)
    return fail(errc::parse_error, "job store '{}': job {} has a malformed node list", path, j.id);
  j.worker_nodes = std::move(*wn);
  j.shard_nodes = std::move(*sn);
  j.epochs_done = int(s.integer(22));
  j.message = s.text(23);
  auto lost = decode_seconds(s.text(24));
  if (!lost)
    return fail(errc::parse_error, "job store '{}': job {} has a malformed recovery list", path,
                j.id);
  j.recoveries_lost_s = std::move(*lost);
  j.failovers = int(s.integer(25));
  j.resumes = int(s.integer(26));
  j.samples_per_epoch = std::uint64_t(std::max<std::int64_t>(s.integer(27), 0));
  return j;
}

}  // namespace

result<std::optional<std::uint64_t>> job_store::job_by_token(std::uint64_t token) const {
  statement q(db_, "SELECT job FROM submit_tokens WHERE token = ?");
  q.bind(1, token);
  const int rc = q.step();
  if (rc == SQLITE_DONE) return std::optional<std::uint64_t>{};
  if (rc != SQLITE_ROW) return sql_error(db_, path_, "cannot look up a submit token");
  return std::optional<std::uint64_t>{std::uint64_t(q.integer(0))};
}

result<void> job_store::forget_job(std::uint64_t job) {
  sql_transaction tx(db_);
  if (!tx.ok()) return sql_error(db_, path_, "cannot begin a transaction");
  {
    statement q(db_, "SELECT 1 FROM jobs WHERE id = ?");
    q.bind(1, job);
    const int rc = q.step();
    if (rc == SQLITE_DONE) return fail(errc::not_found, "job store '{}': no job {}", path_, job);
    if (rc != SQLITE_ROW) return sql_error(db_, path_, "cannot look up a job");
  }
  for (const char* table : {"job_states", "allocations", "epochs", "submit_tokens", "checkpoints",
                            "job_scripts", "jobs"}) {
    const std::string sql = coach::format("DELETE FROM {} WHERE {} = ?", table,
                                          std::string_view(table) == "jobs" ? "id" : "job");
    statement q(db_, sql.c_str());
    q.bind(1, job);
    if (q.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot forget a job");
  }
  statement up(db_,
               "INSERT INTO meta (key, value) VALUES ('forgotten_up_to', ?) ON CONFLICT(key) DO "
               "UPDATE SET value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))");
  up.bind(1, static_cast<std::int64_t>(job));
  if (up.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot forget a job");
  if (!tx.commit()) return sql_error(db_, path_, "cannot commit");
  return {};
}

result<std::uint64_t> job_store::add_job(const job_record& job, std::uint64_t token) {
  sql_transaction tx(db_);
  if (!tx.ok()) return sql_error(db_, path_, "cannot begin a transaction");
  std::uint64_t id = job.id;
  if (id == 0) {
    // Past every id stored or forgotten (forget_job): an id names one job, ever.
    statement q(db_,
                "SELECT MAX(COALESCE((SELECT MAX(id) FROM jobs), 0), COALESCE((SELECT "
                "CAST(value AS INTEGER) FROM meta WHERE key = 'forgotten_up_to'), 0)) + 1");
    if (q.step() != SQLITE_ROW) return sql_error(db_, path_, "cannot pick a job id");
    id = std::uint64_t(q.integer(0));
  } else {
    statement q(db_, "SELECT 1 FROM jobs WHERE id = ?");
    q.bind(1, id);
    const int rc = q.step();
    if (rc == SQLITE_ROW)
      return fail(errc::invalid_argument, "job store '{}': job {} exists already", path_, id);
    if (rc != SQLITE_DONE) return sql_error(db_, path_, "cannot look up a job");
  }
  const std::string sql = coach::format(
      "INSERT INTO jobs ({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
      "?, ?, ?, ?, ?, ?, ?, ?)",
      job_columns);
  statement ins(db_, sql.c_str());
  ins.bind(1, id)
      .bind(2, std::string_view(job.name))
      .bind(3, std::string_view(job.model))
      .bind(4, std::string_view(job.spec_yaml))
      .bind(5, std::string_view(job.source_name))
      .bind(6, std::string_view(job.base_dir))
      .bind(7, job.submitted)
      .bind(8, job.elastic ? 1 : 0)
      .bind(9, job.min_workers)
      .bind(10, job.max_workers)
      .bind(11, job.requested_workers)
      .bind(12, job.min_shards)
      .bind(13, job.max_shards)
      .bind(14, job.requested_shards)
      .bind(15, job.gpus_per_worker)
      .bind(16, job.epochs_total)
      .bind(17, to_string(job.state))
      .bind(18, job.state_since)
      .bind(19, job.workers)
      .bind(20, job.shards)
      .bind(21, std::string_view(encode_nodes(job.worker_nodes)))
      .bind(22, std::string_view(encode_nodes(job.shard_nodes)))
      .bind(23, job.epochs_done)
      .bind(24, std::string_view(job.message))
      .bind(25, std::string_view(encode_seconds(job.recoveries_lost_s)))
      .bind(26, job.failovers)
      .bind(27, job.resumes)
      .bind(28, job.samples_per_epoch);
  if (ins.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot add a job");
  statement st(db_, "INSERT INTO job_states (job, at, state, message) VALUES (?, ?, ?, ?)");
  st.bind(1, id)
      .bind(2, job.state_since)
      .bind(3, to_string(job.state))
      .bind(4, std::string_view(job.message));
  if (st.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot add a state");
  statement al(db_,
               "INSERT INTO allocations (job, at, workers, shards, worker_nodes, shard_nodes) "
               "VALUES (?, ?, ?, ?, ?, ?)");
  al.bind(1, id)
      .bind(2, job.state_since)
      .bind(3, job.workers)
      .bind(4, job.shards)
      .bind(5, std::string_view(encode_nodes(job.worker_nodes)))
      .bind(6, std::string_view(encode_nodes(job.shard_nodes)));
  if (al.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot add an allocation");
  if (token != 0) {
    statement tk(db_, "INSERT INTO submit_tokens (token, job) VALUES (?, ?)");
    tk.bind(1, token).bind(2, id);
    if (tk.step() != SQLITE_DONE)
      return sql_error(db_, path_, "cannot keep the submit token (used by another job?)");
  }
  if (!tx.commit()) return sql_error(db_, path_, "cannot commit");
  return id;
}

result<void> job_store::set_state(std::uint64_t job, job_state state, double at,
                                  std::string_view message) {
  sql_transaction tx(db_);
  if (!tx.ok()) return sql_error(db_, path_, "cannot begin a transaction");
  statement up(db_, "UPDATE jobs SET state = ?, state_since = ?, message = ? WHERE id = ?");
  up.bind(1, to_string(state)).bind(2, at).bind(3, message).bind(4, job);
  if (up.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot change a state");
  if (sqlite3_changes(db_) == 0)
    return fail(errc::not_found, "job store '{}': no job {}", path_, job);
  statement st(db_, "INSERT INTO job_states (job, at, state, message) VALUES (?, ?, ?, ?)");
  st.bind(1, job).bind(2, at).bind(3, to_string(state)).bind(4, message);
  if (st.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot add a state");
  if (!tx.commit()) return sql_error(db_, path_, "cannot commit");
  return {};
}

result<void> job_store::set_history(std::uint64_t job, std::span<const double> recoveries_lost_s,
                                    int failovers, int resumes) {
  statement up(db_, "UPDATE jobs SET recoveries = ?, failovers = ?, resumes = ? WHERE id = ?");
  const std::string lost = encode_seconds(recoveries_lost_s);
  up.bind(1, std::string_view(lost)).bind(2, failovers).bind(3, resumes).bind(4, job);
  if (up.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot record a job's history");
  if (sqlite3_changes(db_) == 0)
    return fail(errc::not_found, "job store '{}': no job {}", path_, job);
  return {};
}

result<void> job_store::set_allocation(std::uint64_t job, double at, int workers, int shards,
                                       std::span<const std::uint32_t> worker_nodes,
                                       std::span<const std::uint32_t> shard_nodes) {
  const std::string wn = encode_nodes(worker_nodes), sn = encode_nodes(shard_nodes);
  sql_transaction tx(db_);
  if (!tx.ok()) return sql_error(db_, path_, "cannot begin a transaction");
  statement up(db_,
               "UPDATE jobs SET workers = ?, shards = ?, worker_nodes = ?, shard_nodes = ? "
               "WHERE id = ?");
  up.bind(1, workers).bind(2, shards).bind(3, std::string_view(wn)).bind(4, std::string_view(sn));
  up.bind(5, job);
  if (up.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot change an allocation");
  if (sqlite3_changes(db_) == 0)
    return fail(errc::not_found, "job store '{}': no job {}", path_, job);
  statement al(db_,
               "INSERT INTO allocations (job, at, workers, shards, worker_nodes, shard_nodes) "
               "VALUES (?, ?, ?, ?, ?, ?)");
  al.bind(1, job).bind(2, at).bind(3, workers).bind(4, shards);
  al.bind(5, std::string_view(wn)).bind(6, std::string_view(sn));
  if (al.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot add an allocation");
  if (!tx.commit()) return sql_error(db_, path_, "cannot commit");
  return {};
}

result<std::vector<job_record>> job_store::jobs() const {
  const std::string sql = coach::format("SELECT {} FROM jobs ORDER BY id", job_columns);
  statement q(db_, sql.c_str());
  std::vector<job_record> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    auto j = read_job(q, path_);
    if (!j) return std::unexpected(j.error());
    out.push_back(std::move(*j));
  }
  if (rc != SQLITE_DONE) return sql_error(db_, path_, "cannot read the jobs");
  return out;
}

result<job_record> job_store::job(std::uint64_t id) const {
  const std::string sql = coach::format("SELECT {} FROM jobs WHERE id = ?", job_columns);
  statement q(db_, sql.c_str());
  q.bind(1, id);
  const int rc = q.step();
  if (rc == SQLITE_DONE) return fail(errc::not_found, "job store '{}': no job {}", path_, id);
  if (rc != SQLITE_ROW) return sql_error(db_, path_, "cannot read a job");
  return read_job(q, path_);
}

result<std::vector<state_change>> job_store::states(std::uint64_t job) const {
  statement q(db_, "SELECT at, state, message FROM job_states WHERE job = ? ORDER BY rowid");
  q.bind(1, job);
  std::vector<state_change> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    const std::string text = q.text(1);
    auto state = parse_job_state(text);
    if (!state)
      return fail(errc::parse_error, "job store '{}': job {} has an unknown state '{}'", path_, job,
                  text);
    out.push_back(state_change{q.real(0), *state, q.text(2)});
  }
  if (rc != SQLITE_DONE) return sql_error(db_, path_, "cannot read states");
  return out;
}

result<std::vector<allocation_change>> job_store::allocations(std::uint64_t job) const {
  statement q(db_,
              "SELECT at, workers, shards, worker_nodes, shard_nodes FROM allocations WHERE job "
              "= ? ORDER BY rowid");
  q.bind(1, job);
  std::vector<allocation_change> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    auto wn = decode_nodes(q.text(3));
    auto sn = decode_nodes(q.text(4));
    if (!wn || !sn)
      return fail(errc::parse_error, "job store '{}': job {} has a malformed node list", path_,
                  job);
    out.push_back(allocation_change{q.real(0), int(q.integer(1)), int(q.integer(2)), std::move(*wn),
                                    std::move(*sn)});
  }
  if (rc != SQLITE_DONE) return sql_error(db_, path_, "cannot read allocations");
  return out;
}
}  // namespace coach::scheduler
