// shard::shard_server's sparse rows (shard/shard_server.hpp): a rows_pull waits for its version
// like a pull and is answered with the rows it names; a push's row gradients follow its dense
// frames (wire/row_frames.hpp, docs/wire.md "Sparse rows").

#include <algorithm>

#include "common/format.hpp"
#include "shard/shard_server.hpp"
#include "wire/row_frames.hpp"

namespace coach::shard {

using wire::msg_kind;
using wire::wire_message;

void shard_server::on_rows_pull(const wire_message& m) {
  auto parts = wire::read_row_parts(m, 0, false);
  if (!parts) return report(parts.error());
  if (!core_->rows()) {
    return report({errc::protocol_error,
                   coach::format("shard {}: a rows_pull from {}; the model has no sparse tables",
                                 core_->id(), m.hdr.src.id)});
  }
  const std::int64_t v = m.hdr.step;
  if (v < core_->applied_steps()) {
    return report({errc::protocol_error,
                   coach::format("shard {}: rows of version {} requested but {} is current",
                                 core_->id(), v, core_->applied_steps())});
  }
  waiter w;
  w.who = m.hdr.src;
  w.rows = std::make_shared<const wire_message>(m);  // shares the frames, copies no row
  waiting_[v].push_back(std::move(w));
  if (v == core_->applied_steps()) serve(v);
}

/// Answers a rows_pull at version v: the rows this shard holds, read (and created on first
/// touch) now; those it does not hold (they moved with their keys) named by the runs of keys it
/// does not own that hold their keys, in the header's ranges, for the requester to ask their
/// owner under the configuration named.
void shard_server::send_rows(const waiter& w, std::int64_t v) {
  auto parts = wire::read_row_parts(*w.rows, 0, false);
  if (!parts) return report(parts.error());
  const auto& store = *core_->rows();
  const std::uint64_t n = setup_.num_params;
  // The answer's ids frames are the request's own (kept alive with it) where every row asked
  // is held here, the usual case: one pass over the rows; a copy of those held otherwise.
  struct answer_memory {
    std::shared_ptr<const wire_message> request;
    std::vector<std::vector<std::uint64_t>> held;
    std::vector<std::vector<float>> values;
  };
  auto mem = std::make_shared<answer_memory>();
  mem->request = w.rows;
  mem->held.reserve(parts->size());
  mem->values.reserve(parts->size());
  std::vector<wire::row_frames_part> out;
  std::vector<ps::key_range> gone;
  for (const auto& p : *parts) {
    if (p.table >= store.tables().size()) {
      return report({errc::protocol_error,
                     coach::format("shard {}: a rows_pull of table {}; the model has {}",
                                   core_->id(), p.table, store.tables().size())});
    }
    const std::size_t dim = store.tables()[p.table].dim;
    auto& values = mem->values.emplace_back(p.ids.size() * dim);
    if (core_->read_rows(p.table, p.ids, values)) {
      out.push_back({p.table, p.ids, values});
      continue;
    }
    // Some rows moved away with their keys (or the request is bad: read_rows says so below).
    auto& ids = mem->held.emplace_back();
    for (const auto id : p.ids) {
      if (store.owns(sparse::bucket_of(p.table, id))) {
        ids.push_back(id);
      } else {
        const auto key = ps::row_key_of(p.table, id, n);
        gone.push_back({key, key + 1});
      }
    }
    values.resize(ids.size() * dim);
    if (auto ok = core_->read_rows(p.table, ids, values); !ok) return report(ok.error());
    out.push_back({p.table, ids, values});
  }
  wire_message m = params_to(w.who, v);
  m.hdr.kind = msg_kind::rows;
  append_row_parts(m, out, mem, true);
  if (!gone.empty()) {
    // Named by the runs of keys this shard does not own that hold them (at most one more than
    // its ranges, whatever the rows: a key each could pass the wire's limit on ranges).
    for (const auto& gap : not_owned({{0, n}})) {
      const bool holds = std::any_of(gone.begin(), gone.end(), [&](const ps::key_range& k) {
        return gap.begin <= k.begin && k.begin < gap.end;
      });
      if (holds) m.hdr.ranges.push_back(gap);
    }
    m.hdr.map_version = std::max<std::uint64_t>(m.hdr.map_version, released_for_);
  }
  ports_.send(std::move(m));
}

bool shard_server::read_push_rows(const wire_message& m, ps::contribution& c) {
  const std::size_t dense = std::min(m.hdr.ranges.size(), m.frames.size());
  auto parts = wire::read_row_parts(m, dense, true);
  if (!parts) {
    report(parts.error());
    return false;
  }
  for (const auto& p : *parts) c.rows.push_back({p.table, p.ids, p.values});
  return true;
}

}  // namespace coach::shard
