// worker/external_rows.cpp: the rows of a script's embedding tables on the process's channel
// (external_rows.hpp; docs/wire.md "Rows of a script's tables"): `lookup` / `ids` before a
// step, the rows region a step's rows and gradients travel in, and an evaluation's `pull`.
#include "worker/external_rows.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/format.hpp"
#include "worker/external_process.hpp"
#include "worker/external_shown.hpp"

namespace coach::worker {
namespace {

using json = nlohmann::json;

std::atomic<std::uint64_t> next_rows_file{0};

std::size_t round_up_64(std::size_t n) {
  return (n + 63) / 64 * 64;
}

}  // namespace

shared_rows::~shared_rows() {
  release();
}

void shared_rows::release() noexcept {
  unlink();
  if (map_ != nullptr) ::munmap(map_, bytes_);
  map_ = nullptr;
  bytes_ = 0;
}

void shared_rows::unlink() noexcept {
  if (!path_.empty()) ::unlink(path_.c_str());
  path_.clear();
}

result<bool> shared_rows::reserve(std::size_t bytes, std::string_view who) {
  if (bytes <= bytes_ && map_ != nullptr) return false;
  const std::size_t want = std::max<std::size_t>({bytes, 2 * bytes_, 1 << 16});
  release();
  path_ = coach::format("/dev/shm/coach-{}-rows-{}", ::getpid(), next_rows_file++);
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    auto why = coach::format("{}: cannot create {}: {}", who, path_, std::strerror(errno));
    path_.clear();
    return fail(errc::io_error, "{}", why);
  }
  if (::ftruncate(fd, off_t(want)) != 0) {
    const int e = errno;
    ::close(fd);
    auto why =
        coach::format("{}: cannot size {} to {} bytes: {}", who, path_, want, std::strerror(e));
    unlink();
    return fail(errc::io_error, "{}", why);
  }
  map_ = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    auto why = coach::format("{}: cannot map {}: {}", who, path_, std::strerror(errno));
    unlink();
    return fail(errc::io_error, "{}", why);
  }
  bytes_ = want;
  return true;
}

rows_placement place_rows(std::span<const std::size_t> counts, std::span<const std::uint32_t> dims,
                          bool with_grads) {
  rows_placement p;
  std::size_t at = 0;
  for (std::size_t t = 0; t < counts.size(); ++t) {
    p.values.push_back(at);
    at += counts[t] * dims[t] * sizeof(float);
  }
  p.grads_offset = round_up_64(at);
  p.bytes = with_grads ? 2 * p.grads_offset : at;
  for (std::size_t t = 0; t < counts.size(); ++t) p.grads.push_back(p.grads_offset + p.values[t]);
  return p;
}

error external_process::junk(std::string_view line, std::string_view due) {
  return refuse(
      error{errc::protocol_error, coach::format("{}: script process {} sent '{}' where {} was due",
                                                who_, pid_, detail::shown(line), due)});
}

namespace {

/// `ids` of a message: one list a table, each ascending, each id once and < the table's rows.
/// `what` names them in errors ("step 3's ids"); an empty result's message says junk.
result<std::vector<std::vector<std::uint64_t>>> parse_ids(const json& ids,
                                                          const std::vector<external_table>& tables,
                                                          std::string_view what) {
  if (!ids.is_array() || ids.size() != tables.size()) return fail(errc::protocol_error, "");
  std::vector<std::vector<std::uint64_t>> out(tables.size());
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const auto& list = ids[t];
    if (!list.is_array()) return fail(errc::protocol_error, "");
    out[t].reserve(list.size());
    for (const auto& v : list) {
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v >= 0))
        return fail(errc::protocol_error, "");
      const auto id = v.get<std::uint64_t>();
      if (id >= tables[t].rows)
        return fail(errc::invalid_argument, "{} of table '{}' hold {}, outside [0, {})", what,
                    tables[t].name, id, tables[t].rows);
      if (!out[t].empty() && id <= out[t].back())
        return fail(errc::invalid_argument,
                    "{} of table '{}' are not ascending and unique ({} after {})", what,
                    tables[t].name, id, out[t].back());
      out[t].push_back(id);
    }
  }
  return out;
}

}  // namespace

result<std::vector<std::vector<std::uint64_t>>> external_process::lookup(
    std::int64_t step, std::span<const std::uint32_t> indices,
    const invocation_deadline* deadline) {
  if (!ready_)
    return fail(errc::io_error, "{}: script process {} is not ready for a lookup", who_, pid_);
  std::string msg = coach::format("{{\"op\":\"lookup\",\"step\":{},\"indices\":[", step);
  msg.reserve(msg.size() + indices.size() * 7 + 4);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (i) msg += ',';
    msg += std::to_string(indices[i]);
  }
  msg += "]}\n";
  if (auto ok = send(msg); !ok) return std::unexpected(ok.error());
  auto line = receive(deadline ? std::optional(deadline->at) : std::nullopt,
                      coach::format("during step {}'s lookup", step));
  if (!line && timed_out_)
    return std::unexpected(missed(coach::format("answer step {}'s lookup", step), deadline));
  if (!line) return std::unexpected(line.error());
  const json r = json::parse(*line, nullptr, false);
  const auto op = r.is_object() ? r.value("op", "") : std::string();
  if (op == "error")
    return std::unexpected(script_error(r.value("kind", std::string()),
                                        r.value("message", std::string("?")),
                                        coach::format("step {}'s lookup", step)));
  const auto due = coach::format("step {}'s ids", step);
  if (op != "ids" || r.value("step", std::int64_t(-1)) != step || !r.contains("ids"))
    return std::unexpected(junk(*line, due));
  auto ids = parse_ids(r["ids"], tables_, coach::format("{}: step {}'s ids", who_, step));
  if (!ids && ids.error().code == errc::protocol_error) return std::unexpected(junk(*line, due));
  if (!ids) return std::unexpected(refuse(std::move(ids.error())));
  return ids;
}

result<std::string> external_process::put_step_rows(const external_step_rows& rows) {
  std::vector<std::size_t> counts;
  std::vector<std::uint32_t> dims;
  for (std::size_t t = 0; t < tables_.size(); ++t) {
    dims.push_back(tables_[t].dim);
    counts.push_back(t < rows.values.size() ? rows.values[t].size() / tables_[t].dim : 0);
  }
  placed_ = place_rows(counts, dims, true);
  auto fresh = rows_.reserve(placed_.bytes, who_);
  if (!fresh) return std::unexpected(refuse(std::move(fresh.error())));
  for (std::size_t t = 0; t < counts.size(); ++t) {
    const std::size_t bytes = counts[t] * dims[t] * sizeof(float);
    if (bytes == 0) continue;
    std::memcpy(rows_.data() + placed_.values[t], rows.values[t].data(), bytes);
    std::memset(rows_.data() + placed_.grads[t], 0, bytes);
  }
  std::string f = ",\"rows\":[";
  for (std::size_t t = 0; t < counts.size(); ++t)
    f += coach::format("{}{}", t ? "," : "", counts[t]);
  f += coach::format("],\"rows_bytes\":{},\"rows_grads_offset\":{}", rows_.size(),
                     placed_.grads_offset);
  if (*fresh) f += ",\"rows_shm\":" + json(rows_.path()).dump();
  return f;
}

void external_process::take_row_grads(const external_step_rows& rows) {
  rows_.unlink();  // mapped by both now
  if (rows.grads == nullptr) return;
  rows.grads->resize(tables_.size());
  for (std::size_t t = 0; t < tables_.size(); ++t) {
    const std::size_t n = t < rows.values.size() ? rows.values[t].size() : 0;
    const auto* g = reinterpret_cast<const float*>(rows_.data() + placed_.grads[t]);
    (*rows.grads)[t].assign(g, g + n);
  }
}

result<void> external_process::answer_pull(std::string_view line, std::uint32_t epoch,
                                           const external_row_source* source) {
  const json r = json::parse(line, nullptr, false);
  const auto due = coach::format("epoch {}'s evaluation", epoch);
  if (source == nullptr || tables_.empty())
    return std::unexpected(refuse(error{
        errc::invalid_argument,
        coach::format("{}: the script pulled rows, but the job has no tables to read them from",
                      who_)}));
  auto ids = parse_ids(r.value("ids", json()), tables_,
                       coach::format("{}: epoch {}'s pulled ids", who_, epoch));
  if (!ids && ids.error().code == errc::protocol_error) return std::unexpected(junk(line, due));
  if (!ids) return std::unexpected(refuse(std::move(ids.error())));
  std::vector<std::size_t> counts;
  std::vector<std::uint32_t> dims;
  for (std::size_t t = 0; t < tables_.size(); ++t) {
    counts.push_back((*ids)[t].size());
    dims.push_back(tables_[t].dim);
  }
  placed_ = place_rows(counts, dims, false);
  auto fresh = rows_.reserve(placed_.bytes, who_);
  if (!fresh) return std::unexpected(refuse(std::move(fresh.error())));
  for (std::uint32_t t = 0; t < tables_.size(); ++t) {
    if (counts[t] == 0) continue;
    std::span<float> out(reinterpret_cast<float*>(rows_.data() + placed_.values[t]),
                         counts[t] * dims[t]);
    if (auto ok = (*source)(t, (*ids)[t], out); !ok)
      return std::unexpected(refuse(
          error{ok.error().code, coach::format("{}: the rows of table '{}' for epoch {}: {}", who_,
                                               tables_[t].name, epoch, ok.error().message)}));
  }
  json answer = {{"op", "rows"}, {"rows", counts}, {"rows_bytes", rows_.size()}};
  if (*fresh) answer["rows_shm"] = rows_.path();
  return send(answer.dump() + "\n");
}

}  // namespace coach::worker
