#include "scheduler/job_report.hpp"

#include "common/format.hpp"

#include <cmath>
#include <cstdio>

namespace coach::scheduler {
namespace {

std::string num(double v) {
  return json_number(v);
}

std::string quoted(const std::string& s) {
  return json_string(s);
}

}  // namespace

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", int(c));
          out += buf;
        } else
          out += c;
    }
  }
  return out + "\"";
}

std::string to_json(const change_report& c) {
  return coach::format(
      "{{\"what\": {}, \"step\": {}, \"join_ms\": {}, \"transfer_ms\": {}, "
      "\"moved_bytes\": {}, \"gap_ms\": {}, \"step_ms\": {}, \"pause_ms\": {}, "
      "\"step_spread_ms\": {}, \"samples_per_s_before\": {}, \"samples_per_s_after\": {}, "
      "\"prepare_ms\": {}}}",
      quoted(c.what), c.step, num(c.join_ms), num(c.transfer_ms), c.moved_bytes, num(c.gap_ms),
      num(c.step_ms), num(c.pause_ms), num(c.step_spread_ms), num(c.samples_per_s_before),
      num(c.samples_per_s_after), num(c.prepare_ms));
}

std::string to_json(const job_result& r) {
  std::string out = "{\n";
  out += coach::format("  \"name\": {},\n  \"cancelled\": {},\n", quoted(r.name),
                       r.cancelled ? "true" : "false");
  out += coach::format("  \"workers\": {},\n  \"shards\": {},\n  \"backend\": {},\n", r.workers,
                       r.shards, quoted(r.backend));
  out +=
      coach::format("  \"num_params\": {},\n  \"bytes_moved\": {},\n", r.num_params, r.bytes_moved);
  out += coach::format("  \"seconds\": {},\n  \"test_accuracy\": {},\n", num(r.seconds),
                       num(r.test_accuracy));
  out += "  \"epochs\": [";
  for (std::size_t i = 0; i < r.epochs.size(); ++i) {
    const auto& e = r.epochs[i];
    out += coach::format(
        "{}\n    {{\"epoch\": {}, \"train_loss\": {}, \"test_loss\": {}, \"test_accuracy\": {}, "
        "\"seconds\": {}, \"samples_per_s\": {}, \"samples\": {}, \"steps\": {}, "
        "\"compute_seconds\": {}, \"workers\": {}, \"shards\": {}}}",
        i ? "," : "", e.epoch + 1, num(e.train_loss), num(e.test_loss), num(e.test_accuracy),
        num(e.seconds), num(e.samples_per_s), e.samples, e.steps, num(e.compute_seconds), e.workers,
        e.shards);
  }
  out += r.epochs.empty() ? "],\n" : "\n  ],\n";
  out += "  \"changes\": [";
  for (std::size_t i = 0; i < r.changes.size(); ++i)
    out += coach::format("{}\n    {}", i ? "," : "", to_json(r.changes[i]));
  out += r.changes.empty() ? "]" : "\n  ]";
  if (const auto& i = r.invocations) {
    out += coach::format(
        ",\n  \"invocations\": {{\"started\": {}, \"completed\": {}, \"timed_out\": {}, "
        "\"out_of_memory\": {}, \"failed\": {}, \"tasks\": {}, \"peak_memory_bytes\": {}}}",
        i->started, i->completed, i->timed_out, i->out_of_memory, i->failed, i->tasks,
        i->peak_memory_bytes);
  }
  out += "\n}\n";
  return out;
}

}  // namespace coach::scheduler
