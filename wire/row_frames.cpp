#include "wire/row_frames.hpp"

#include <cstdint>

namespace coach::wire {

void append_row_parts(wire_message& m, std::span<const row_frames_part> parts,
                      const std::shared_ptr<const void>& owner, bool with_values) {
  if (parts.empty()) return;
  auto tables = std::make_shared<std::vector<std::uint32_t>>();
  for (const auto& p : parts) tables->push_back(p.table);
  m.frames.push_back(frame::of(tables, tables->data(), tables->size()));
  for (const auto& p : parts) {
    m.frames.push_back(frame::of(owner, p.ids.data(), p.ids.size()));
    if (with_values) m.frames.push_back(frame::of(owner, p.values.data(), p.values.size()));
  }
}

result<std::vector<row_frames_part>> read_row_parts(const wire_message& m, std::size_t first,
                                                    bool with_values) {
  std::vector<row_frames_part> out;
  if (first >= m.frames.size()) return out;
  const auto kind = to_string(m.hdr.kind);
  const auto aligned = [](const frame& f, std::size_t a) {
    return f.bytes == 0 || reinterpret_cast<std::uintptr_t>(f.data) % a == 0;
  };
  const frame& tf = m.frames[first];
  if (tf.bytes % sizeof(std::uint32_t) != 0 || tf.bytes == 0 || !aligned(tf, 4))
    return fail(errc::protocol_error, "{} message: a tables frame of {} bytes", kind, tf.bytes);
  const auto tables = tf.as<std::uint32_t>();
  const std::size_t per = with_values ? 2 : 1;
  if (m.frames.size() - first - 1 != tables.size() * per)
    return fail(errc::protocol_error, "{} message: {} row frames for {} tables", kind,
                m.frames.size() - first - 1, tables.size());
  for (std::size_t i = 0; i < tables.size(); ++i) {
    const frame& ids = m.frames[first + 1 + i * per];
    if (ids.bytes % sizeof(std::uint64_t) != 0 || !aligned(ids, alignof(std::uint64_t)))
      return fail(errc::protocol_error, "{} message: a row ids frame of {} bytes", kind, ids.bytes);
    row_frames_part p;
    p.table = tables[i];
    p.ids = ids.as<std::uint64_t>();
    if (with_values) {
      const frame& v = m.frames[first + 2 + i * per];
      if (v.bytes % sizeof(float) != 0 || !aligned(v, alignof(float)))
        return fail(errc::protocol_error, "{} message: a row values frame of {} bytes", kind,
                    v.bytes);
      p.values = v.as<float>();
      if (p.ids.empty() ? !p.values.empty() : p.values.size() % p.ids.size() != 0)
        return fail(errc::protocol_error, "{} message: {} values for {} rows of table {}", kind,
                    p.values.size(), p.ids.size(), p.table);
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace coach::wire
