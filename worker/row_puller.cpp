#include "worker/row_puller.hpp"

#include <algorithm>
#include <cstring>

#include "ps/shard_rows.hpp"

namespace coach::worker {

row_puller::row_puller(std::vector<std::uint32_t> dims, std::uint64_t num_params)
    : dims_(std::move(dims)), num_params_(num_params), tables_(dims_.size()) {}

void row_puller::start(std::int64_t step, std::vector<std::vector<std::uint64_t>> rows) {
  step_ = step;
  missing_ = 0;
  moved_version_ = 0;
  for (std::uint32_t t = 0; t < tables_.size(); ++t) {
    auto& tb = tables_[t];
    tb.rows = t < rows.size() ? std::move(rows[t]) : std::vector<std::uint64_t>{};
    tb.values.assign(tb.rows.size() * dims_[t], 0.0f);
    tb.state.assign(tb.rows.size(), row_state::to_ask);
    tb.asked_of.assign(tb.rows.size(), 0);
    missing_ += tb.rows.size();
  }
}

std::ptrdiff_t row_puller::find(std::uint32_t t, std::uint64_t row) const {
  const auto& r = tables_[t].rows;
  const auto it = std::lower_bound(r.begin(), r.end(), row);
  return it != r.end() && *it == row ? it - r.begin() : -1;
}

namespace {

/// Row ids (and values) gathered per shard and table, kept alive by the message.
struct gathered {
  std::map<std::uint32_t, std::map<std::uint32_t, std::vector<std::uint64_t>>> ids;
  std::map<std::uint32_t, std::map<std::uint32_t, std::vector<float>>> values;
};

std::map<std::uint32_t, row_parts_for> to_parts(const std::shared_ptr<gathered>& g) {
  std::map<std::uint32_t, row_parts_for> out;
  for (const auto& [k, by_table] : g->ids) {
    auto& o = out[k];
    o.owner = g;
    for (const auto& [t, ids] : by_table) {
      wire::row_frames_part p{t, ids, {}};
      if (auto it = g->values.find(k); it != g->values.end()) p.values = it->second.at(t);
      o.parts.push_back(p);
    }
  }
  return out;
}

}  // namespace

std::map<std::uint32_t, row_parts_for> row_puller::requests(const key_owner& owner) {
  auto g = std::make_shared<gathered>();
  for (std::uint32_t t = 0; t < tables_.size(); ++t) {
    auto& tb = tables_[t];
    for (std::size_t i = 0; i < tb.rows.size(); ++i) {
      if (tb.state[i] != row_state::to_ask) continue;
      const auto k = owner(ps::row_key_of(t, tb.rows[i], num_params_));
      tb.state[i] = row_state::asked;
      tb.asked_of[i] = k;
      g->ids[k][t].push_back(tb.rows[i]);
    }
  }
  return to_parts(g);
}

result<void> row_puller::accept(const wire::wire_message& m, std::uint32_t from) {
  if (m.hdr.step != step_) return {};
  auto parts = wire::read_row_parts(m, 0, true);
  if (!parts) return std::unexpected(parts.error());
  // Check all of it before taking any.
  for (const auto& p : *parts) {
    if (p.table >= tables_.size())
      return fail(errc::protocol_error, "rows from shard {}: table {}; the model has {}", from,
                  p.table, tables_.size());
    if (p.values.size() != p.ids.size() * dims_[p.table])
      return fail(errc::protocol_error, "rows from shard {}: {} values for {} rows of dim {}", from,
                  p.values.size(), p.ids.size(), dims_[p.table]);
    for (const auto id : p.ids) {
      const auto i = find(p.table, id);
      const auto& tb = tables_[p.table];
      if (i < 0 || tb.state[std::size_t(i)] == row_state::to_ask ||
          tb.asked_of[std::size_t(i)] != from)
        return fail(errc::protocol_error, "rows from shard {}: row {} of table {} not asked of it",
                    from, id, p.table);
      if (tables_[p.table].state[std::size_t(i)] == row_state::here)
        return fail(errc::protocol_error, "rows from shard {}: row {} of table {} twice", from, id,
                    p.table);
    }
  }
  for (const auto& p : *parts) {
    auto& tb = tables_[p.table];
    const std::size_t dim = dims_[p.table];
    for (std::size_t j = 0; j < p.ids.size(); ++j) {
      const auto i = std::size_t(find(p.table, p.ids[j]));
      if (tb.state[i] == row_state::here) continue;  // (the same id twice in one answer)
      std::memcpy(tb.values.data() + i * dim, p.values.data() + j * dim, dim * sizeof(float));
      tb.state[i] = row_state::here;
      --missing_;
    }
  }
  // Rows the shard no longer holds: asked again of their holder by the next requests().
  if (!m.hdr.ranges.empty()) {
    for (std::uint32_t t = 0; t < tables_.size(); ++t) {
      auto& tb = tables_[t];
      for (std::size_t i = 0; i < tb.rows.size(); ++i) {
        if (tb.state[i] != row_state::asked || tb.asked_of[i] != from) continue;
        const auto key = ps::row_key_of(t, tb.rows[i], num_params_);
        for (const auto& r : m.hdr.ranges)
          if (r.begin <= key && key < r.end) tb.state[i] = row_state::to_ask;
      }
    }
    moved_version_ = std::max(moved_version_, m.hdr.map_version);
  }
  return {};
}

void row_puller::ask_again(std::uint32_t shard) {
  for (auto& tb : tables_)
    for (std::size_t i = 0; i < tb.rows.size(); ++i)
      if (tb.state[i] == row_state::asked && tb.asked_of[i] == shard)
        tb.state[i] = row_state::to_ask;
}

std::map<std::uint32_t, row_parts_for> row_puller::push_parts(
    const key_owner& owner, std::vector<std::vector<float>> grads) const {
  auto g = std::make_shared<gathered>();
  for (std::uint32_t t = 0; t < tables_.size(); ++t) {
    const auto& tb = tables_[t];
    const std::size_t dim = dims_[t];
    for (std::size_t i = 0; i < tb.rows.size(); ++i) {
      const auto k = owner(ps::row_key_of(t, tb.rows[i], num_params_));
      g->ids[k][t].push_back(tb.rows[i]);
      const float* row = grads[t].data() + i * dim;
      auto& v = g->values[k][t];
      v.insert(v.end(), row, row + dim);
    }
  }
  return to_parts(g);
}

}  // namespace coach::worker
