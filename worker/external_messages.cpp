// worker::external_process's exchanges with its script (external_process.hpp, docs/wire.md
// "External compute processes"): the handshake that registers or checks the layout and maps the
// shared file, a step, and an evaluation. The process itself (started, stopped, how it ended) and
// the channel's lines are in external_process.cpp; the rows of a script with tables in
// external_rows.cpp.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "common/format.hpp"
#include "common/log.hpp"
#include "worker/external_process.hpp"
#include "worker/external_shown.hpp"

namespace coach::worker {
namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;
using detail::shown;

std::atomic<std::uint64_t> next_shm{0};

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

}  // namespace

std::string external_totals::summary() const {
  const double per = steps ? 1000.0 / double(steps) : 0;
  return coach::format(
      "{} steps: parameters in {:.3f} ms, the script's copies {:.3f} ms, its compute {:.3f} ms, "
      "gradient out {:.3f} ms a step",
      steps, copy_in_s * per, handoff_s * per, (compute_s - handoff_s) * per, copy_out_s * per);
}

result<void> external_process::map_shared(std::size_t floats) {
  floats_ = floats;
  const std::size_t grads_offset = (floats * sizeof(float) + 63) / 64 * 64;
  map_bytes_ = grads_offset + floats * sizeof(float);
  shm_path_ = coach::format("/dev/shm/coach-{}-{}", ::getpid(), next_shm++);
  const int fd = ::open(shm_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    auto why = coach::format("{}: cannot create {}: {}", who_, shm_path_, std::strerror(errno));
    shm_path_.clear();
    return std::unexpected(refuse(error{errc::io_error, why}));
  }
  if (::ftruncate(fd, off_t(map_bytes_)) != 0) {
    ::close(fd);
    return std::unexpected(
        refuse(error{errc::io_error, coach::format("{}: cannot size {} to {} bytes: {}", who_,
                                                   shm_path_, map_bytes_, std::strerror(errno))}));
  }
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    return std::unexpected(
        refuse(error{errc::io_error, coach::format("{}: cannot map {}: {}", who_, shm_path_,
                                                   std::strerror(errno))}));
  }
  params_ = static_cast<float*>(map_);
  grads_ = reinterpret_cast<float*>(static_cast<char*>(map_) + grads_offset);
  return {};
}

result<external_layout> external_process::handshake(const external_layout* registered,
                                                    std::vector<float>* initial) {
  auto line = receive(clock_type::now() + start_timeout_, "before it called init");
  if (!line) return std::unexpected(timed_out_ ? start_timed_out() : line.error());
  const json hello = json::parse(*line, nullptr, false);
  if (hello.is_discarded() || !hello.is_object() || hello.value("op", "") != "hello")
    return std::unexpected(refuse(error{
        errc::protocol_error, coach::format("{}: script process {} sent '{}' where its hello was "
                                            "due",
                                            who_, pid_, shown(*line))}));
  auto layout = parse_hello(*line);
  std::optional<std::string> refused;
  if (!layout)
    refused = layout.error().message;
  else if (registered != nullptr)
    refused = layout_difference(*registered, *layout);
  if (refused) {
    (void)send(json{{"op", "refused"}, {"message", *refused}}.dump() + "\n");
    const errc code = layout ? errc::invalid_argument : layout.error().code;
    return std::unexpected(refuse(
        error{code, coach::format("{}: the script's layout is refused: {}", who_, *refused)}));
  }
  test_samples_ = layout->test_samples;
  tables_ = layout->tables;
  if (auto ok = map_shared(layout->floats); !ok) return std::unexpected(ok.error());
  const bool first = registered == nullptr;
  const json answer = {{"op", "layout"},
                       {"shm", shm_path_},
                       {"floats", layout->floats},
                       {"grads_offset", reinterpret_cast<char*>(grads_) - static_cast<char*>(map_)},
                       {"send_initial", first}};
  if (auto ok = send(answer.dump() + "\n"); !ok) return std::unexpected(ok.error());
  auto reply = receive(clock_type::now() + start_timeout_, "during its handshake");
  if (!reply) return std::unexpected(timed_out_ ? start_timed_out() : reply.error());
  const json r = json::parse(*reply, nullptr, false);
  const std::string want = first ? "initial" : "ready";
  if (r.is_discarded() || !r.is_object() || r.value("op", "") != want) {
    if (r.is_object() && r.value("op", "") == "error")
      return std::unexpected(refuse(
          error{errc::invalid_argument,
                coach::format("{}: {}", who_, shown(r.value("message", std::string("?")), 300))}));
    return std::unexpected(refuse(error{
        errc::protocol_error, coach::format("{}: script process {} sent '{}' where '{}' was due",
                                            who_, pid_, shown(*reply), want)}));
  }
  // Mapped by both: nothing is left behind whichever ends first.
  ::unlink(shm_path_.c_str());
  shm_path_.clear();
  if (first && initial != nullptr) initial->assign(params_, params_ + floats_);
  ready_ = true;
  log::debug("{}: script process {} ready ({} floats, {} tensors, {})", who_, pid_, floats_,
             layout->tensors.size(), layout->framework);
  return std::move(*layout);
}

error external_process::missed(std::string_view what, const invocation_deadline* deadline) const {
  return error{errc::resource_exhausted,
               coach::format("{}: the script {} did not {} within its invocation's deadline ({:g} "
                             "s, function.deadline_s); killed",
                             who_, script_name_, what, deadline ? deadline->seconds : 0.0)};
}

error external_process::script_error(std::string_view kind, std::string_view message,
                                     std::string_view what) {
  // A MemoryError (or a framework's allocation failure) says "kind": "memory".
  const bool memory = kind == "memory";
  if (memory) end_ = process_end::out_of_memory;
  return refuse(error{memory ? errc::resource_exhausted : errc::invalid_argument,
                      coach::format("{}: {} failed in the script{}: {}", who_, what,
                                    memory ? " for memory" : "", shown(message, 300))});
}

result<external_step> external_process::step(std::int64_t step, std::uint32_t rank,
                                             const float* params,
                                             std::span<const std::uint32_t> indices, float* grad,
                                             const invocation_deadline* deadline,
                                             const external_step_rows* rows) {
  if (!ready_)
    return fail(errc::io_error, "{}: script process {} is not ready for a step", who_, pid_);
  external_step out;
  auto t0 = clock_type::now();
  if (params != params_) std::memcpy(params_, params, floats_ * sizeof(float));
  out.copy_in_s = seconds_since(t0);
  std::string msg =
      coach::format("{{\"op\":\"step\",\"step\":{},\"rank\":{},\"indices\":[", step, rank);
  msg.reserve(msg.size() + indices.size() * 7 + 4);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (i) msg += ',';
    msg += std::to_string(indices[i]);
  }
  msg += ']';
  if (rows != nullptr) {
    auto fields = put_step_rows(*rows);
    if (!fields) return std::unexpected(fields.error());
    msg += *fields;
  }
  msg += "}\n";
  t0 = clock_type::now();
  if (auto ok = send(msg); !ok) return std::unexpected(ok.error());
  auto line = receive(deadline ? std::optional(deadline->at) : std::nullopt,
                      coach::format("during step {}", step));
  if (!line && timed_out_)
    return std::unexpected(missed(coach::format("finish step {}", step), deadline));
  if (!line) return std::unexpected(line.error());
  out.compute_s = seconds_since(t0);
  const json r = json::parse(*line, nullptr, false);
  const auto op = r.is_object() ? r.value("op", "") : std::string();
  if (op == "error")
    return std::unexpected(script_error(r.value("kind", std::string()),
                                        r.value("message", std::string("?")),
                                        coach::format("step {}", step)));
  const auto samples = r.is_object() ? r.find("samples") : r.end();
  const auto loss = r.is_object() ? r.find("loss_sum") : r.end();
  if (op != "done" || r.value("step", std::int64_t(-1)) != step || samples == r.end() ||
      !samples->is_number_unsigned() || loss == r.end() || !(loss->is_number() || loss->is_null()))
    return std::unexpected(
        refuse(error{errc::protocol_error,
                     coach::format("{}: script process {} sent '{}' where step {}'s done was due",
                                   who_, pid_, shown(*line), step)}));
  out.samples = samples->get<std::uint64_t>();
  out.loss_sum = loss->is_null() ? std::nan("") : loss->get<double>();
  if (out.samples != indices.size())
    return std::unexpected(
        refuse(error{errc::invalid_argument,
                     coach::format("{}: the script computed {} samples of step {}; it was given {}",
                                   who_, out.samples, step, indices.size())}));
  if (auto h = r.find("handoff_s"); h != r.end() && h->is_number() && h->get<double>() >= 0)
    out.handoff_s = std::min(h->get<double>(), out.compute_s);
  t0 = clock_type::now();
  std::memcpy(grad, grads_, floats_ * sizeof(float));
  if (rows != nullptr) take_row_grads(*rows);
  out.copy_out_s = seconds_since(t0);
  ++totals_.steps;
  totals_.copy_in_s += out.copy_in_s;
  totals_.compute_s += out.compute_s;
  totals_.handoff_s += out.handoff_s;
  totals_.copy_out_s += out.copy_out_s;
  return out;
}

result<external_eval> external_process::evaluate(std::uint32_t epoch, const float* params,
                                                 const external_row_source* rows) {
  if (test_samples_ == 0)
    return fail(errc::unsupported, "{}: the script registered no evaluation (test_samples 0)",
                who_);
  if (!ready_)
    return fail(errc::io_error, "{}: script process {} is not ready to evaluate", who_, pid_);
  std::memcpy(params_, params, floats_ * sizeof(float));
  if (auto ok = send(coach::format("{{\"op\":\"evaluate\",\"epoch\":{}}}\n", epoch)); !ok)
    return std::unexpected(ok.error());
  const auto during = coach::format("while evaluating epoch {}", epoch);
  auto line = receive(std::nullopt, during);
  json r;
  std::string op;
  for (;; line = receive(std::nullopt, during)) {  // a script with tables pulls its rows
    if (!line) return std::unexpected(line.error());
    r = json::parse(*line, nullptr, false);
    op = r.is_object() ? r.value("op", "") : std::string();
    if (op != "pull") break;
    if (auto ok = answer_pull(*line, epoch, rows); !ok) return std::unexpected(ok.error());
  }
  rows_.unlink();
  if (op == "error")
    return std::unexpected(
        refuse(error{errc::invalid_argument,
                     coach::format("{}: evaluating epoch {} failed in the script: {}", who_, epoch,
                                   shown(r.value("message", std::string("?")), 300))}));
  external_eval out;
  try {
    if (op != "evaluated" || r.at("epoch").get<std::int64_t>() != std::int64_t(epoch))
      throw std::runtime_error("op");
    out.epoch = epoch;
    out.samples = r.at("samples").get<std::uint64_t>();
    out.correct = r.at("correct").get<std::uint64_t>();
    out.loss_sum = r.at("loss_sum").is_null() ? std::nan("") : r.at("loss_sum").get<double>();
    if (auto a = r.find("auc"); a != r.end() && a->is_number() && *a >= 0 && *a <= 1)
      out.auc = a->get<double>();
    if (auto l = r.find("log_loss"); l != r.end() && l->is_number() && *l >= 0)
      out.log_loss = l->get<double>();
  } catch (const std::exception&) {
    return std::unexpected(refuse(
        error{errc::protocol_error,
              coach::format("{}: script process {} sent '{}' where epoch {}'s evaluation was due",
                            who_, pid_, shown(*line), epoch)}));
  }
  if (out.correct > out.samples)
    return std::unexpected(
        refuse(error{errc::protocol_error,
                     coach::format("{}: the script's evaluation counts {} correct of {} samples",
                                   who_, out.correct, out.samples)}));
  return out;
}

}  // namespace coach::worker
