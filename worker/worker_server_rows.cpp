// worker::worker_server's sparse tables (worker/worker_server.hpp): the rows a step's batch looks
// up are pulled from the shards that hold them as soon as its grant is here (rows_pull), beside
// the dense parameters; the step computes once both are here, and each push carries the row
// gradients of the rows its shard holds (wire/row_frames.hpp, docs/wire.md "Sparse rows").

#include "common/format.hpp"
#include "common/log.hpp"
#include "worker/worker_server.hpp"

namespace coach::worker {

using wire::msg_kind;
using wire::wire_message;

std::uint32_t worker_server::owner_of(std::uint64_t key) const {
  return cfg_.map.owner(key / cfg_.map.slice_size());
}

bool worker_server::rows_ready(const wire_message& g) {
  if (rows_->step() != step_) {
    std::span<const std::uint32_t> indices;
    if (!(g.hdr.flags & wire::flag::no_chunk) && !g.frames.empty())
      indices = g.frames.front().as<std::uint32_t>();
    std::vector<std::vector<std::uint64_t>> rows;
    if (setup_.external) {
      // A script's tables: its process names the rows its samples look up.
      if (lookup_failed_ == step_) return false;
      auto ids = script_lookup(indices);
      if (!ids) {
        lookup_failed_ = step_;
        ports_.fail(std::move(ids.error()));
        return false;
      }
      rows = std::move(*ids);
    } else {
      lookups_ = sparse_batch(*setup_.model, setup_.data->train, indices);
      for (const auto& b : lookups_) rows.push_back(b.rows.rows);
    }
    rows_->start(step_, std::move(rows));
  }
  // Rows not asked yet: the step's, and those a shard said moved, once the configuration that
  // moved them is this worker's.
  if (!rows_->complete() && cfg_.version >= rows_->moved_version()) {
    for (auto& [k, parts] : rows_->requests([this](std::uint64_t key) { return owner_of(key); })) {
      auto m = to(setup_.shard_ep(k), msg_kind::rows_pull);
      wire::append_row_parts(m, parts.parts, parts.owner, false);
      ports_.send(std::move(m));
    }
  }
  return rows_->complete();
}

result<std::vector<std::vector<std::uint64_t>>> worker_server::script_lookup(
    std::span<const std::uint32_t> indices) {
  if (indices.empty())  // nothing granted: no rows
    return std::vector<std::vector<std::uint64_t>>(setup_.model->tables().size());
  if (!scripts_)
    scripts_ = std::make_unique<script_invocations>(
        setup_.external, coach::format("worker {}", setup_.rank), setup_.script_limits);
  return scripts_->lookup(step_, indices);
}

void worker_server::on_rows(const wire_message& m) {
  if (!rows_) {
    log::warn("worker {}: rows from shard {}; the model has no sparse tables", setup_.rank,
              m.hdr.src.id);
    return;
  }
  std::optional<std::uint32_t> from;
  for (std::uint32_t k = 0; k < ranges_.size() && !from; ++k)
    if (setup_.shard_ep(k) == m.hdr.src) from = k;
  if (!from) {
    log::warn("worker {}: rows from {}, not a shard of the job", setup_.rank, m.hdr.src.id);
    return;
  }
  if (auto ok = rows_->accept(m, *from); !ok)
    log::warn("worker {}: malformed rows from shard {}: {}", setup_.rank, m.hdr.src.id,
              ok.error().message);
}

void worker_server::add_push_rows(wire_message& m, std::uint32_t k) const {
  const auto it = row_pushes_.find(k);
  if (it == row_pushes_.end()) return;
  wire::append_row_parts(m, it->second.parts, it->second.owner, true);
}

}  // namespace coach::worker
