#pragma once
// actors/control_read.hpp: the reading side's pieces that the control plane's decoder shares
// between its files (actors/control_decode.cpp: the cluster's messages; control_decode_api.cpp:
// the job API's requests and replies). Private to those two files.
//
// A refusal is thrown by the readers (refuse) and caught once, in control_codec::decode: the
// readers stay straight-line code.

#include <capnp/list.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "actors/control.hpp"
#include "actors/control_schema.hpp"
#include "actors/curve_keys.hpp"
#include "common/format.hpp"

namespace coach::actors::control_detail {

/// Why a message is refused; thrown by the readers, caught once in decode().
struct refusal {
  std::string message;
};

template <class... Args>
[[noreturn]] void refuse(std::string_view fmt, const Args&... args) {
  throw refusal{coach::format(fmt, args...)};
}

inline std::string get_text(capnp::Text::Reader t, std::string_view what,
                            std::size_t max = max_text_bytes) {
  if (t.size() > max) refuse("{} has {} bytes (at most {})", what, t.size(), max);
  return std::string(t.cStr(), t.size());  // NUL termination checked by Cap'n Proto
}

/// A CURVE public key: empty or 40 characters of Z85.
inline std::string get_key(capnp::Text::Reader t, std::string_view what) {
  auto key = get_text(t, what);
  if (!key.empty() && !is_z85_key(key)) refuse("{} is not a 40-character Z85 key", what);
  return key;
}

template <class List>
void check_count(const List& list, std::string_view what, std::size_t max) {
  if (list.size() > max) refuse("{} has {} entries (at most {})", what, list.size(), max);
}

inline error get_error(schema::Error::Reader e, std::string_view what) {
  const std::uint16_t code = e.getCode();
  if (code == 0 || code > max_errc) refuse("{} carries unknown error code {}", what, code);
  return error{static_cast<errc>(code), get_text(e.getMessage(), what)};
}

inline std::vector<int> get_gpus(capnp::List<std::uint32_t>::Reader list, std::string_view what) {
  check_count(list, what, max_gpus);
  std::vector<int> ids;
  ids.reserve(list.size());
  for (const std::uint32_t id : list) {
    if (id > static_cast<std::uint32_t>(INT_MAX)) refuse("{} lists GPU id {}", what, id);
    ids.push_back(static_cast<int>(id));
  }
  return ids;
}

inline std::vector<std::uint32_t> get_u32s(capnp::List<std::uint32_t>::Reader list,
                                           std::string_view what, std::size_t max = max_items) {
  check_count(list, what, max);
  std::vector<std::uint32_t> out;
  out.reserve(list.size());
  for (const std::uint32_t v : list) out.push_back(v);
  return out;
}

inline std::vector<std::string> get_texts(capnp::List<capnp::Text>::Reader list,
                                          std::string_view what) {
  check_count(list, what, max_items);
  std::vector<std::string> out;
  out.reserve(list.size());
  for (const auto t : list) out.push_back(get_text(t, what));
  return out;
}

template <class List>
std::vector<link_traffic> get_traffic(List list, std::string_view what) {
  check_count(list, what, max_links);
  std::vector<link_traffic> out;
  out.reserve(list.size());
  for (const auto t : list)
    out.push_back({t.getJob(), t.getSrcHost(), t.getDstHost(), t.getMessages(), t.getBytes()});
  return out;
}

/// The GPUs held, each on a GPU the node has (`gpus`, as read from the same heartbeat).
template <class List>
std::vector<scheduler::gpu_hold> get_gpus_held(List list, const std::vector<int>& gpus) {
  check_count(list, "heartbeat gpusHeld", max_gpus_held);
  std::vector<scheduler::gpu_hold> out;
  out.reserve(list.size());
  for (const auto g : list) {
    const std::uint32_t device = g.getDevice();
    if (device > static_cast<std::uint32_t>(INT_MAX) ||
        std::find(gpus.begin(), gpus.end(), static_cast<int>(device)) == gpus.end())
      refuse("heartbeat gpusHeld: GPU {} is not among the node's GPUs", device);
    out.push_back({g.getJob(), g.getRank(), static_cast<int>(device), g.getOwn()});
  }
  return out;
}

/// A script's model (entry and layout; its initial values and files come as payload frames,
/// read_control puts them in).
inline std::shared_ptr<const worker::script_payload> get_script(schema::ScriptModel::Reader r,
                                                                std::string_view what) {
  auto p = std::make_shared<worker::script_payload>();
  p->entry = get_text(r.getEntry(), coach::format("{} script entry", what));
  p->layout_json = get_text(r.getLayout(), coach::format("{} script layout", what),
                            worker::max_layout_json_bytes);
  return p;
}

/// The readers of the cluster's messages that the job API's replies also carry
/// (control_decode.cpp) and of the job API (control_decode_api.cpp).
node_heartbeat get_heartbeat(schema::Heartbeat::Reader r);
api_request get_request(schema::Request::Reader r);
api_reply get_reply(schema::Reply::Reader r);

}  // namespace coach::actors::control_detail
