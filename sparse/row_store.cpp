#include "sparse/row_store.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/enforce.hpp"

namespace coach::sparse {
namespace {

constexpr std::uint32_t blob_magic = 0x31525343;  // "CSR1" little-endian
constexpr std::uint32_t blob_format = 1;

template <class T>
void append_pod(std::vector<std::byte>& out, const T& v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

/// Reads the blob front to back; every read checks the bytes left.
class blob_reader {
 public:
  explicit blob_reader(std::span<const std::byte> b) : b_(b) {}
  template <class T>
  bool get(T& v) {
    if (b_.size() - at_ < sizeof(T)) return false;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  /// The next n items of T, or empty when fewer bytes are left (n may be 0).
  bool span_of(std::size_t n, std::size_t item, std::span<const std::byte>& out) {
    if (item != 0 && n > (b_.size() - at_) / item) return false;
    out = b_.subspan(at_, n * item);
    at_ += n * item;
    return true;
  }
  bool done() const noexcept { return at_ == b_.size(); }

 private:
  std::span<const std::byte> b_;
  std::size_t at_ = 0;
};

bool in_ranges(std::uint32_t bucket, std::span<const bucket_range> ranges) {
  return std::any_of(ranges.begin(), ranges.end(),
                     [&](const bucket_range& r) { return r.first <= bucket && bucket < r.end; });
}

result<void> check_ranges(std::span<const bucket_range> ranges) {
  for (const auto& r : ranges)
    if (r.first >= r.end || r.end > bucket_count)
      return fail(errc::protocol_error, "bucket range [{}, {}) is empty or past {}", r.first, r.end,
                  bucket_count);
  return {};
}

}  // namespace

result<row_store> row_store::create(std::uint64_t seed, std::vector<table_config> tables,
                                    row_optimizer_config opt, std::span<const bucket_range> owned) {
  if (auto ok = opt.validate(); !ok) return std::unexpected(ok.error());
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const auto& c = tables[t];
    if (c.rows == 0 || c.rows > (std::uint64_t{1} << 62))
      return fail(errc::invalid_argument, "sparse table {}: rows must be in [1, 2^62], got {}", t,
                  c.rows);
    if (c.dim == 0 || c.dim > 65536)
      return fail(errc::invalid_argument, "sparse table {}: dim must be in [1, 65536], got {}", t,
                  c.dim);
    if (!std::isfinite(c.init_scale) || c.init_scale < 0)
      return fail(errc::invalid_argument, "sparse table {}: init_scale must be >= 0, got {}", t,
                  c.init_scale);
  }
  if (auto ok = check_ranges(owned); !ok)
    return fail(errc::invalid_argument, "{}", ok.error().message);
  row_store s;
  s.seed_ = seed;
  s.tables_ = std::move(tables);
  s.opt_ = opt;
  s.owned_.assign(bucket_count, false);
  for (const auto& r : owned)
    for (std::uint32_t b = r.first; b < r.end; ++b) s.owned_[b] = true;
  s.rows_.resize(s.tables_.size());
  for (std::size_t t = 0; t < s.tables_.size(); ++t)
    s.rows_[t].stride = std::size_t{s.tables_[t].dim} * (1 + s.opt_.state_per_element());
  return s;
}

std::size_t row_store::stride(std::uint32_t table) const noexcept {
  return rows_[table].stride;
}

float* row_store::slot_data(std::uint32_t table, std::uint32_t slot) const noexcept {
  return rows_[table].blocks[slot / block_rows].get() +
         std::size_t{slot % block_rows} * stride(table);
}

std::uint32_t row_store::new_slot(std::uint32_t table) {
  auto& t = rows_[table];
  if (!t.free_slots.empty()) {
    const auto slot = t.free_slots.back();
    t.free_slots.pop_back();
    return slot;
  }
  COACH_ENFORCE(t.next_slot < ~std::uint32_t{0}, "row_store: 2^32 rows of one table on a shard");
  const auto slot = t.next_slot++;
  if (slot / block_rows >= t.blocks.size())
    t.blocks.push_back(std::make_unique<float[]>(std::size_t{block_rows} * stride(table)));
  return slot;
}

std::uint32_t row_store::slot_of(std::uint32_t table, std::uint64_t row) {
  auto& t = rows_[table];
  if (auto slot = t.index.find(row)) return *slot;
  const auto slot = new_slot(table);
  const std::size_t dim = tables_[table].dim;
  float* p = slot_data(table, slot);
  init_row(seed_, table, row, tables_[table].init_scale, std::span<float>(p, dim));
  init_row_state(opt_, std::span<float>(p + dim, stride(table) - dim));
  t.index.insert(row, slot);
  return slot;
}

result<void> row_store::check(std::uint32_t table, std::span<const std::uint64_t> rows,
                              std::size_t floats, const char* what) const {
  if (table >= tables_.size())
    return fail(errc::protocol_error, "{} of sparse table {}: the model has {} tables", what, table,
                tables_.size());
  const auto& c = tables_[table];
  if (floats != rows.size() * std::size_t{c.dim})
    return fail(errc::protocol_error, "{} of sparse table {}: {} floats for {} rows of dim {}",
                what, table, floats, rows.size(), c.dim);
  for (const auto row : rows) {
    if (row >= c.rows)
      return fail(errc::protocol_error, "{} of sparse table {}: row {} is not below its {} rows",
                  what, table, row, c.rows);
    if (!owns(bucket_of(table, row)))
      return fail(errc::protocol_error,
                  "{} of sparse table {}: row {} (bucket {}) is not held here", what, table, row,
                  bucket_of(table, row));
  }
  return {};
}

result<void> row_store::read(std::uint32_t table, std::span<const std::uint64_t> rows,
                             std::span<float> out) {
  if (auto ok = check(table, rows, out.size(), "a read"); !ok) return ok;
  const std::size_t dim = tables_[table].dim;
  // Two passes, each prefetching a few rows ahead: the index entries, then the rows' values
  // (a random row of a large table is a cache miss twice; the misses overlap this way).
  auto& slots = rows_[table].scratch_slots;
  slots.resize(rows.size());
  const auto& index = rows_[table].index;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i + prefetch_ahead < rows.size()) index.prefetch(rows[i + prefetch_ahead]);
    slots[i] = slot_of(table, rows[i]);
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i + prefetch_ahead < rows.size())
      __builtin_prefetch(slot_data(table, slots[i + prefetch_ahead]));
    std::memcpy(out.data() + i * dim, slot_data(table, slots[i]), dim * sizeof(float));
  }
  return {};
}

result<void> row_store::add(std::uint32_t table, std::span<const std::uint64_t> rows,
                            std::span<const float> grads) {
  if (auto ok = check(table, rows, grads.size(), "a push"); !ok) return ok;
  auto& t = rows_[table];
  const std::size_t dim = tables_[table].dim;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const float* g = grads.data() + i * dim;
    if (auto at = t.pending.find(rows[i])) {
      float* sum = t.sums.data() + std::size_t{*at} * dim;
      for (std::size_t k = 0; k < dim; ++k) sum[k] += g[k];
    } else {
      // The row's slot now (created if new): apply() updates it without a second lookup.
      if (i + prefetch_ahead < rows.size()) t.index.prefetch(rows[i + prefetch_ahead]);
      t.pending.insert(rows[i], static_cast<std::uint32_t>(t.pending_rows.size()));
      t.pending_rows.push_back(rows[i]);
      t.pending_slots.push_back(slot_of(table, rows[i]));
      t.sums.insert(t.sums.end(), g, g + dim);
    }
  }
  return {};
}

std::size_t row_store::pending_rows() const noexcept {
  std::size_t n = 0;
  for (const auto& t : rows_) n += t.pending_rows.size();
  return n;
}

std::size_t row_store::apply(float scale, float learning_rate, std::int64_t step_number) {
  const row_step step = make_row_step(opt_, learning_rate, step_number);
  std::size_t updated = 0;
  std::vector<float> grad;
  for (std::uint32_t table = 0; table < rows_.size(); ++table) {
    auto& t = rows_[table];
    const std::size_t dim = tables_[table].dim;
    grad.resize(dim);
    const std::size_t state = stride(table) - dim;
    for (std::size_t i = 0; i < t.pending_rows.size(); ++i) {
      if (i + prefetch_ahead < t.pending_rows.size())
        __builtin_prefetch(slot_data(table, t.pending_slots[i + prefetch_ahead]));
      const float* sum = t.sums.data() + i * dim;
      for (std::size_t k = 0; k < dim; ++k) grad[k] = sum[k] * scale;
      float* p = slot_data(table, t.pending_slots[i]);
      update_row(opt_, step, std::span<float>(p, dim), std::span<float>(p + dim, state), grad);
    }
    updated += t.pending_rows.size();
    t.pending.clear();
    t.pending_rows.clear();
    t.pending_slots.clear();
    t.sums.clear();
  }
  return updated;
}

std::vector<std::byte> row_store::save() const {
  // Sized up front: a large table's blob is gigabytes, and growing it by doubling would hold
  // half as much again while it moves.
  std::size_t bytes = 4 * sizeof(std::uint32_t);
  for (std::uint32_t table = 0; table < rows_.size(); ++table)
    bytes += sizeof(std::uint32_t) + sizeof(std::uint64_t) +
             rows_[table].index.size() * (sizeof(std::uint64_t) + stride(table) * sizeof(float));
  std::vector<std::byte> out;
  out.reserve(bytes);
  append_pod(out, blob_magic);
  append_pod(out, blob_format);
  append_pod(out, static_cast<std::uint32_t>(tables_.size()));
  append_pod(out, static_cast<std::uint32_t>(opt_.state_per_element()));
  for (std::uint32_t table = 0; table < rows_.size(); ++table) {
    const auto& t = rows_[table];
    append_pod(out, tables_[table].dim);
    append_pod(out, static_cast<std::uint64_t>(t.index.size()));
    std::vector<std::pair<std::uint64_t, std::uint32_t>> held;
    held.reserve(t.index.size());
    t.index.for_each([&](std::uint64_t row, std::uint32_t slot) { held.emplace_back(row, slot); });
    for (const auto& [row, slot] : held) append_pod(out, row);
    const std::size_t bytes = stride(table) * sizeof(float);
    for (const auto& [row, slot] : held) {
      const auto* p = reinterpret_cast<const std::byte*>(slot_data(table, slot));
      out.insert(out.end(), p, p + bytes);
    }
  }
  return out;
}

result<std::vector<std::byte>> row_store::release(std::span<const bucket_range> ranges) {
  if (auto ok = check_ranges(ranges); !ok) return std::unexpected(ok.error());
  if (pending_rows() != 0)
    return fail(errc::protocol_error, "a release of buckets while a step is open ({} rows summed)",
                pending_rows());
  for (const auto& r : ranges)
    for (std::uint32_t b = r.first; b < r.end; ++b)
      if (!owned_[b])
        return fail(errc::protocol_error, "a release of bucket {}: not owned here", b);
  std::vector<std::byte> out;
  append_pod(out, blob_magic);
  append_pod(out, blob_format);
  append_pod(out, static_cast<std::uint32_t>(tables_.size()));
  append_pod(out, static_cast<std::uint32_t>(opt_.state_per_element()));
  for (std::uint32_t table = 0; table < rows_.size(); ++table) {
    auto& t = rows_[table];
    std::vector<std::pair<std::uint64_t, std::uint32_t>> moving;
    t.index.for_each([&](std::uint64_t row, std::uint32_t slot) {
      if (in_ranges(bucket_of(table, row), ranges)) moving.emplace_back(row, slot);
    });
    append_pod(out, tables_[table].dim);
    append_pod(out, static_cast<std::uint64_t>(moving.size()));
    for (const auto& [row, slot] : moving) append_pod(out, row);
    const std::size_t bytes = stride(table) * sizeof(float);
    for (const auto& [row, slot] : moving) {
      const auto* p = reinterpret_cast<const std::byte*>(slot_data(table, slot));
      out.insert(out.end(), p, p + bytes);
      t.index.erase(row);
      t.free_slots.push_back(slot);
    }
  }
  for (const auto& r : ranges)
    for (std::uint32_t b = r.first; b < r.end; ++b) owned_[b] = false;
  return out;
}

result<void> row_store::adopt(std::span<const std::byte> blob,
                              std::span<const bucket_range> ranges) {
  if (auto ok = check_ranges(ranges); !ok) return ok;
  for (const auto& r : ranges)
    for (std::uint32_t b = r.first; b < r.end; ++b)
      if (owned_[b])
        return fail(errc::protocol_error, "an adoption of bucket {}: owned already", b);
  if (auto ok = take_in(blob, ranges); !ok) return ok;
  for (const auto& r : ranges)
    for (std::uint32_t b = r.first; b < r.end; ++b) owned_[b] = true;
  return {};
}

result<void> row_store::merge(std::span<const std::byte> blob) {
  for (std::uint32_t b = 0; b < bucket_count; ++b)
    if (!owned_[b])
      return fail(errc::protocol_error, "a merge of rows into a store that lacks bucket {}", b);
  const bucket_range all[] = {{0, bucket_count}};
  return take_in(blob, all);
}

result<void> row_store::merge(std::span<const std::byte> blob,
                              std::span<const std::vector<std::uint64_t>> keep) {
  COACH_ENFORCE(keep.size() == tables_.size(), "merge: one list of rows to keep per table");
  for (std::uint32_t b = 0; b < bucket_count; ++b)
    if (!owned_[b])
      return fail(errc::protocol_error, "a merge of rows into a store that lacks bucket {}", b);
  const bucket_range all[] = {{0, bucket_count}};
  return take_in(blob, all, keep);
}

result<void> row_store::take_in(std::span<const std::byte> blob,
                                std::span<const bucket_range> ranges,
                                std::span<const std::vector<std::uint64_t>> keep) {
  // Check the whole blob before taking anything in.
  blob_reader in(blob);
  std::uint32_t magic = 0, format = 0, tables = 0, state = 0;
  if (!in.get(magic) || !in.get(format) || !in.get(tables) || !in.get(state) ||
      magic != blob_magic || format != blob_format)
    return fail(errc::protocol_error, "a rows transfer without the CSR1 header");
  if (tables != tables_.size() || state != opt_.state_per_element())
    return fail(errc::protocol_error,
                "a rows transfer of {} tables with {} state floats per element; this store has {} "
                "and {}",
                tables, state, tables_.size(), opt_.state_per_element());
  struct part {
    std::span<const std::byte> rows, values;
    std::uint64_t n = 0;
  };
  std::vector<part> parts(tables);
  for (std::uint32_t table = 0; table < tables; ++table) {
    std::uint32_t dim = 0;
    auto& p = parts[table];
    if (!in.get(dim) || !in.get(p.n))
      return fail(errc::protocol_error, "a rows transfer cut short in table {}", table);
    if (dim != tables_[table].dim)
      return fail(errc::protocol_error,
                  "a rows transfer of table {} with dim {}; the model's is {}", table, dim,
                  tables_[table].dim);
    if (!in.span_of(p.n, sizeof(std::uint64_t), p.rows) ||
        !in.span_of(p.n, stride(table) * sizeof(float), p.values))
      return fail(errc::protocol_error, "a rows transfer cut short in table {}", table);
    row_index seen;
    for (std::uint64_t i = 0; i < p.n; ++i) {
      std::uint64_t row = 0;
      std::memcpy(&row, p.rows.data() + i * sizeof row, sizeof row);
      if (row >= tables_[table].rows || !in_ranges(bucket_of(table, row), ranges))
        return fail(errc::protocol_error,
                    "a rows transfer holds row {} of table {}, outside the buckets it moves", row,
                    table);
      if (rows_[table].index.find(row) || seen.find(row))
        return fail(errc::protocol_error, "a rows transfer holds row {} of table {} twice", row,
                    table);
      seen.insert(row, 0);
    }
  }
  if (!in.done()) return fail(errc::protocol_error, "a rows transfer with bytes after its tables");
  for (std::uint32_t table = 0; table < tables; ++table) {
    const auto& p = parts[table];
    const std::size_t bytes = stride(table) * sizeof(float);
    for (std::uint64_t i = 0; i < p.n; ++i) {
      std::uint64_t row = 0;
      std::memcpy(&row, p.rows.data() + i * sizeof row, sizeof row);
      if (!keep.empty() && !std::binary_search(keep[table].begin(), keep[table].end(), row))
        continue;
      const auto slot = new_slot(table);
      std::memcpy(slot_data(table, slot), p.values.data() + i * bytes, bytes);
      rows_[table].index.insert(row, slot);
    }
  }
  return {};
}

std::vector<std::uint64_t> row_store::held_rows(std::uint32_t table) const {
  std::vector<std::uint64_t> out;
  if (table >= rows_.size()) return out;
  out.reserve(rows_[table].index.size());
  rows_[table].index.for_each([&](std::uint64_t row, std::uint32_t) { out.push_back(row); });
  std::sort(out.begin(), out.end());
  return out;
}

result<void> row_store::put(std::uint32_t table, std::uint64_t row, std::span<const float> values) {
  const std::uint64_t one[] = {row};
  if (auto ok = check(table, one, values.size(), "a put"); !ok) return ok;
  std::memcpy(slot_data(table, slot_of(table, row)), values.data(), values.size_bytes());
  return {};
}

std::span<const float> row_store::find(std::uint32_t table, std::uint64_t row) const {
  if (table >= rows_.size()) return {};
  const auto slot = rows_[table].index.find(row);
  if (!slot) return {};
  return {slot_data(table, *slot), tables_[table].dim};
}

std::span<const float> row_store::find_state(std::uint32_t table, std::uint64_t row) const {
  if (table >= rows_.size()) return {};
  const auto slot = rows_[table].index.find(row);
  if (!slot) return {};
  const std::size_t dim = tables_[table].dim;
  return {slot_data(table, *slot) + dim, stride(table) - dim};
}

store_stats row_store::stats() const noexcept {
  store_stats s;
  for (std::uint32_t table = 0; table < rows_.size(); ++table) {
    const auto& t = rows_[table];
    s.rows += t.index.size();
    s.value_bytes += t.blocks.size() * std::uint64_t{block_rows} * stride(table) * sizeof(float);
    s.index_bytes += t.index.bytes();
  }
  return s;
}

}  // namespace coach::sparse
