#include "wire/elastic_messages.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace coach::wire {
namespace {

wire_message header(const endpoint& src, const endpoint& dst, std::uint64_t job, msg_kind kind) {
  wire_message m;
  m.hdr.src = src;
  m.hdr.dst = dst;
  m.hdr.kind = kind;
  m.hdr.job = job;
  return m;
}

/// A frame of u32 values copied out (frames need not be aligned).
result<std::vector<std::uint32_t>> u32s(const wire_message& m, std::size_t i, const char* what) {
  const auto& f = m.frames[i];
  if (f.bytes % sizeof(std::uint32_t) != 0)
    return fail(errc::protocol_error, "{} message: {} frame of {} bytes is not a list of u32",
                to_string(m.hdr.kind), what, f.bytes);
  std::vector<std::uint32_t> out(f.bytes / sizeof(std::uint32_t));
  if (!out.empty()) std::memcpy(out.data(), f.data, f.bytes);
  return out;
}

/// Ranges ascending, disjoint and non-empty.
result<void> check_ranges(const wire_message& m) {
  for (std::size_t i = 0; i < m.hdr.ranges.size(); ++i) {
    const auto& r = m.hdr.ranges[i];
    if (r.size() == 0 || (i > 0 && r.begin < m.hdr.ranges[i - 1].end))
      return fail(errc::protocol_error,
                  "{} message: key ranges must be non-empty, ascending and disjoint (range {})",
                  to_string(m.hdr.kind), i);
  }
  return {};
}

result<void> expect_kind(const wire_message& m, msg_kind k) {
  if (m.hdr.kind != k)
    return fail(errc::protocol_error, "expected a {} message, got {}", to_string(k),
                to_string(m.hdr.kind));
  return {};
}

}  // namespace

wire_message make_configure(const endpoint& src, const endpoint& dst, std::uint64_t job,
                            const ps::job_config& c) {
  auto m = header(src, dst, job, msg_kind::configure);
  m.hdr.map_version = c.version;
  m.hdr.step = c.from_step;
  auto members = std::make_shared<std::vector<std::uint32_t>>(c.members);
  auto owners = std::make_shared<std::vector<std::uint32_t>>(c.map.owners());
  m.frames.push_back(frame::of(members, members->data(), members->size()));
  m.frames.push_back(frame::of(owners, owners->data(), owners->size()));
  return m;
}

result<ps::job_config> read_configure(const wire_message& m, std::size_t num_params,
                                      std::size_t slice_size) {
  if (auto ok = expect_kind(m, msg_kind::configure); !ok) return std::unexpected(ok.error());
  if (m.frames.size() != 2)
    return fail(errc::protocol_error, "configure message has {} frames, expected 2",
                m.frames.size());
  if (m.hdr.step < 0)
    return fail(errc::protocol_error, "configure message starts at step {}", m.hdr.step);
  auto members = u32s(m, 0, "members");
  if (!members) return std::unexpected(members.error());
  if (members->size() > max_members)
    return fail(errc::protocol_error, "configure message names {} members (at most {})",
                members->size(), max_members);
  for (std::size_t i = 1; i < members->size(); ++i)
    if ((*members)[i] <= (*members)[i - 1])
      return fail(errc::protocol_error, "configure message: member ranks are not ascending");
  auto owners = u32s(m, 1, "owners");
  if (!owners) return std::unexpected(owners.error());
  auto map =
      ps::shard_map::from_owners(num_params, slice_size, std::move(*owners), m.hdr.map_version);
  if (!map) return fail(errc::protocol_error, "configure message: {}", map.error().message);
  ps::job_config c;
  c.version = m.hdr.map_version;
  c.from_step = m.hdr.step;
  c.members = std::move(*members);
  c.map = std::move(*map);
  return c;
}

wire_message make_migrate(const endpoint& src, const endpoint& dst, std::uint64_t job,
                          const migrate_order& o) {
  auto m = header(src, dst, job, msg_kind::migrate);
  m.hdr.step = o.at_version;
  m.hdr.rank = o.to;
  m.hdr.map_version = o.config_version;
  m.hdr.ranges = o.ranges;
  return m;
}

result<migrate_order> read_migrate(const wire_message& m) {
  if (auto ok = expect_kind(m, msg_kind::migrate); !ok) return std::unexpected(ok.error());
  if (!m.frames.empty())
    return fail(errc::protocol_error, "migrate message has {} frames, expected none",
                m.frames.size());
  if (m.hdr.step < 0 || m.hdr.ranges.empty())
    return fail(errc::protocol_error, "migrate message needs a version >= 0 and key ranges");
  if (auto ok = check_ranges(m); !ok) return std::unexpected(ok.error());
  return migrate_order{m.hdr.step, m.hdr.rank, m.hdr.map_version, m.hdr.ranges};
}

namespace {

/// A transfer or state message: the layout of a ps::slice_transfer.
wire_message make_slices(const endpoint& src, const endpoint& dst, std::uint64_t job,
                         std::shared_ptr<const ps::slice_transfer> t, msg_kind kind) {
  auto m = header(src, dst, job, kind);
  m.hdr.step = t->version;
  m.hdr.chunk_id = std::uint64_t(t->updates);
  m.hdr.samples = t->samples_applied;
  m.hdr.rank = t->from;
  m.hdr.epoch = t->to;
  m.hdr.ranges = t->ranges;
  m.hdr.grad_stats = t->gain_state;
  std::shared_ptr<const void> owner = t;
  const auto values = t->values_span();  // shared values travel without a copy too
  m.frames.push_back(frame::of(owner, values.data(), values.size()));
  if (!t->state_a.empty())
    m.frames.push_back(frame::of(owner, t->state_a.data(), t->state_a.size()));
  if (!t->state_b.empty())
    m.frames.push_back(frame::of(owner, t->state_b.data(), t->state_b.size()));
  // The sparse rows of the buckets the ranges carry (ps/shard_rows.hpp), as one frame.
  if (!t->rows.empty()) m.frames.push_back(frame::of(owner, t->rows.data(), t->rows.size()));
  return m;
}

/// read_transfer or read_state; `values` is m's values frame when the caller lets it be taken.
result<ps::slice_transfer> read_slices(const wire_message& m, std::size_t state_per_param,
                                       frame* values, msg_kind kind) {
  if (auto ok = expect_kind(m, kind); !ok) return std::unexpected(ok.error());
  if (auto ok = check_ranges(m); !ok) return std::unexpected(ok.error());
  if (m.hdr.step < 0)
    return fail(errc::protocol_error, "{} message at version {}", to_string(kind), m.hdr.step);
  std::size_t keys = 0;
  for (const auto& r : m.hdr.ranges) keys += r.size();
  // The values, the optimizer state, and the sparse rows' frame where the model has tables.
  if (m.frames.size() != 1 + state_per_param && m.frames.size() != 2 + state_per_param)
    return fail(errc::protocol_error,
                "{} message has {} frames, expected {} (values and optimizer state) or one more "
                "(sparse rows)",
                to_string(kind), m.frames.size(), 1 + state_per_param);
  for (std::size_t i = 0; i < 1 + state_per_param; ++i)
    if (const auto& f = m.frames[i]; f.bytes != keys * sizeof(float))
      return fail(errc::protocol_error, "{} message: a frame of {} bytes for {} keys",
                  to_string(kind), f.bytes, keys);
  ps::slice_transfer t;
  t.from = m.hdr.rank;
  t.to = m.hdr.epoch;
  t.version = m.hdr.step;
  t.updates = std::int64_t(m.hdr.chunk_id);
  t.samples_applied = m.hdr.samples;
  t.ranges = m.hdr.ranges;
  t.gain_state = m.hdr.grad_stats;  // checked by the shard that adopts it
  auto copy = [&](std::size_t i, std::vector<float>& out) {
    out.resize(keys);
    if (keys > 0) std::memcpy(out.data(), m.frames[i].data, m.frames[i].bytes);
  };
  // The values' frame becomes the transfer's storage when nobody else can see it: no copy, so
  // no page of the shard is written twice (a 256 MiB copy was the largest part of a migration's
  // pause, docs/performance.md "rescale_bench"). Floats need their alignment; ZeroMQ's buffers
  // have it (8 bytes).
  if (values && keys > 0 && values->exclusive && values->owner.use_count() == 1 &&
      reinterpret_cast<std::uintptr_t>(values->data) % alignof(float) == 0) {
    auto* p = reinterpret_cast<float*>(const_cast<std::byte*>(values->data));
    t.buffer = std::make_shared<float_buffer>(p, keys, std::move(values->owner));
    *values = frame{};
  } else {
    copy(0, t.values);
  }
  if (state_per_param >= 1) copy(1, t.state_a);
  if (state_per_param >= 2) copy(2, t.state_b);
  if (m.frames.size() == 2 + state_per_param) {
    const frame& rows = m.frames.back();
    t.rows.assign(rows.data, rows.data + rows.bytes);  // checked by the shard that adopts it
  }
  return t;
}

}  // namespace

wire_message make_transfer(const endpoint& src, const endpoint& dst, std::uint64_t job,
                           std::shared_ptr<const ps::slice_transfer> t) {
  return make_slices(src, dst, job, std::move(t), msg_kind::transfer);
}

result<ps::slice_transfer> read_transfer(const wire_message& m, std::size_t state_per_param) {
  return read_slices(m, state_per_param, nullptr, msg_kind::transfer);
}

result<ps::slice_transfer> read_transfer(wire_message&& m, std::size_t state_per_param) {
  return read_slices(m, state_per_param, m.frames.empty() ? nullptr : &m.frames[0],
                     msg_kind::transfer);
}

wire_message make_state(const endpoint& src, const endpoint& dst, std::uint64_t job,
                        std::shared_ptr<const ps::slice_transfer> t) {
  return make_slices(src, dst, job, std::move(t), msg_kind::state);
}

result<ps::slice_transfer> read_state(const wire_message& m, std::size_t state_per_param) {
  return read_slices(m, state_per_param, nullptr, msg_kind::state);
}

wire_message make_transfer_ack(const endpoint& src, const endpoint& dst, std::uint64_t job,
                               const transfer_ack& a) {
  auto m = header(src, dst, job, msg_kind::transfer_ack);
  m.hdr.step = a.version;
  m.hdr.rank = a.to;
  m.hdr.epoch = a.from;
  return m;
}

result<transfer_ack> read_transfer_ack(const wire_message& m) {
  if (auto ok = expect_kind(m, msg_kind::transfer_ack); !ok) return std::unexpected(ok.error());
  if (!m.frames.empty() || m.hdr.step < 0)
    return fail(errc::protocol_error, "transfer_ack message is malformed");
  return transfer_ack{m.hdr.step, m.hdr.epoch, m.hdr.rank};
}

}  // namespace coach::wire
