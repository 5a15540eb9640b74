// actors/control_decode.cpp: schemas/control.capnp -> control_message (the encoder is
// actors/control_encode.cpp; their limits, actors/control_schema.hpp).
//
// Decoding treats its input as hostile, as wire/codec.cpp does: the size is checked before
// parsing, an unaligned input is copied into words, the reader runs under a traversal limit
// proportional to the input and a nesting limit, every list and text is bounded, every enum and
// error code checked, and every kj::Exception becomes errc::protocol_error. Inside, a refusal is
// thrown (refusal) and caught once at the top, so the readers stay straight-line code.
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "actors/control.hpp"
#include "actors/control_read.hpp"
#include "actors/control_schema.hpp"
#include "common/format.hpp"
#include "wire/capnp_words.hpp"

namespace coach::actors {
namespace control_detail {

node_heartbeat get_heartbeat(schema::Heartbeat::Reader r) {
  node_heartbeat h;
  h.name = get_text(r.getNodeName(), "heartbeat nodeName");
  h.address = get_text(r.getListenAddress(), "heartbeat listenAddress");
  h.public_key = get_key(r.getPublicKey(), "heartbeat publicKey");
  h.host = r.getHostId();
  auto& res = h.resources;
  res.cpus_total = r.getCpusTotal();
  res.cpus_free = r.getCpusFree();
  // A value outside [0, cpusTotal] (a hostile or broken peer) is bounded, NaN read as 0.
  res.cpus_external = std::clamp(r.getCpusExternal(), 0.0, double(res.cpus_total));
  if (std::isnan(res.cpus_external)) res.cpus_external = 0;
  res.gpus_total = get_gpus(r.getGpusTotal(), "heartbeat gpusTotal");
  res.gpus_free = get_gpus(r.getGpusFree(), "heartbeat gpusFree");
  res.memory_total = r.getMemoryTotal();
  res.memory_free = r.getMemoryFree();
  res.load1 = r.getLoad1();
  res.gpu_error = get_text(r.getGpuError(), "heartbeat gpuError");
  res.gpus_held = get_gpus_held(r.getGpusHeld(), res.gpus_total);
  h.actors_running = r.getActorsRunning();
  h.sequence = r.getSequence();
  h.unix_time_ms = r.getUnixTimeMs();
  h.draining = r.getDraining();
  h.traffic = get_traffic(r.getTraffic(), "heartbeat traffic");
  return h;
}

start_job get_start_job(schema::StartJob::Reader r) {
  start_job s;
  s.job = r.getJob();
  s.workers_phase = r.getWorkersPhase();
  s.spec_yaml = get_text(r.getSpecYaml(), "startJob specYaml", max_spec_bytes);
  s.source_name = get_text(r.getSourceName(), "startJob sourceName");
  s.base_dir = get_text(r.getBaseDir(), "startJob baseDir");
  s.master_host = r.getMasterHost();
  s.first_step = r.getFirstStep();
  s.run = r.getRun();
  s.initial_updates = r.getInitialUpdates();
  s.initial_samples_applied = r.getInitialSamplesApplied();
  s.shard_hosts = get_u32s(r.getShardHosts(), "startJob shardHosts");
  s.worker_hosts = get_u32s(r.getWorkerHosts(), "startJob workerHosts");
  {
    const auto chains = r.getBackupHosts();
    check_count(chains, "startJob backupHosts", max_items);
    if (chains.size() != 0 && chains.size() != s.shard_hosts.size())
      refuse("startJob backupHosts lists {} shards, shardHosts {}", chains.size(),
             s.shard_hosts.size());
    for (unsigned k = 0; k < chains.size(); ++k) {
      auto hosts = get_u32s(chains[k], "startJob backupHosts", 3);
      for (auto h : hosts)
        if (h == s.shard_hosts[k])
          refuse("startJob backupHosts puts shard {}'s backup beside it", k);
      s.backup_hosts.push_back(std::move(hosts));
    }
  }
  const auto peers = r.getPeers();
  check_count(peers, "startJob peers", max_items);
  s.peers.reserve(peers.size());
  for (const auto p : peers)
    s.peers.push_back({p.getHost(), get_text(p.getAddress(), "startJob peer address"),
                       get_key(p.getPublicKey(), "startJob peer publicKey"),
                       get_text(p.getName(), "startJob peer name")});
  auto get_parts = [](auto list, std::string_view what) {
    check_count(list, what, max_items);
    std::vector<part_host> out;
    out.reserve(list.size());
    for (const auto p : list) {
      part_host h{p.getId(), p.getHost(), get_u32s(p.getBackups(), "startJob added backups", 3)};
      if (std::find(h.backups.begin(), h.backups.end(), h.host) != h.backups.end())
        refuse("startJob puts added shard {}'s backup beside it", h.id);
      out.push_back(std::move(h));
    }
    return out;
  };
  s.added_shards = get_parts(r.getAddedShards(), "startJob addedShards");
  s.added_workers = get_parts(r.getAddedWorkers(), "startJob addedWorkers");
  if (r.hasScript()) s.script = get_script(r.getScript(), "startJob");
  if (r.hasStart()) {
    const auto p = r.getStart();
    if (!p.hasConfig()) refuse("startJob start has no config");
    const auto c = p.getConfig();
    added_part a;
    a.worker = p.getWorker();
    a.id = p.getId();
    a.first_step = p.getFirstStep();
    a.expect_keys = p.getExpectKeys();
    a.version = c.getVersion();
    a.from_step = c.getFromStep();
    a.members = get_u32s(c.getMembers(), "startJob start members", max_config_members);
    a.slice_owners = get_u32s(c.getSliceOwners(), "startJob start sliceOwners", max_slices);
    if (a.first_step < 0 || a.from_step < 0) refuse("startJob start has a negative step");
    if (!std::is_sorted(a.members.begin(), a.members.end()) ||
        std::adjacent_find(a.members.begin(), a.members.end()) != a.members.end())
      refuse("startJob start members are not ascending and distinct");
    const auto& added = a.worker ? s.added_workers : s.added_shards;
    if (std::none_of(added.begin(), added.end(), [&](const part_host& h) { return h.id == a.id; }))
      refuse("startJob start names {} {}, which the added list does not place",
             a.worker ? "worker" : "shard", a.id);
    s.start = std::move(a);
  }
  return s;
}

}  // namespace control_detail

namespace {

using namespace control_detail;

control_message get_message(schema::ControlMessage::Reader r) {
  switch (r.which()) {
    case schema::ControlMessage::HEARTBEAT:
      // Discriminant 0 with a null struct is also what a message with nothing set looks like.
      if (!r.hasHeartbeat()) refuse("control message is empty (no union member set)");
      return get_heartbeat(r.getHeartbeat());
    case schema::ControlMessage::START_JOB:
      if (!r.hasStartJob()) refuse("control message startJob is null");
      return get_start_job(r.getStartJob());
    case schema::ControlMessage::STOP_JOB:
      if (!r.hasStopJob()) refuse("control message stopJob is null");
      return stop_job{r.getStopJob().getJob()};
    case schema::ControlMessage::COMMAND_REPLY: {
      if (!r.hasCommandReply()) refuse("control message commandReply is null");
      const auto c = r.getCommandReply();
      command_reply out{.job = c.getJob(), .failure = std::nullopt, .stopped = c.getStopped()};
      if (c.hasError()) out.failure = get_error(c.getError(), "command reply");
      return out;
    }
    case schema::ControlMessage::REQUEST:
      if (!r.hasRequest()) refuse("control message request is null");
      return get_request(r.getRequest());
    case schema::ControlMessage::REPLY:
      if (!r.hasReply()) refuse("control message reply is null");
      return get_reply(r.getReply());
    case schema::ControlMessage::REFUSE_NODE:
      if (!r.hasRefuseNode()) refuse("control message refuseNode is null");
      return node_refused{get_text(r.getRefuseNode().getReason(), "refuseNode reason")};
  }
  refuse("unknown control message member {}", std::uint16_t(r.which()));
}

control_message read(kj::ArrayPtr<const capnp::word> words) {
  capnp::ReaderOptions options;
  // Enough to read every word a few times over: aliasing pointers or lists of empty structs
  // cannot make the reader walk more than this.
  options.traversalLimitInWords = 4 * words.size() + 256;
  // The deepest path: message -> reply -> nodes -> statuses -> status -> heartbeat -> traffic
  // -> link, with margin.
  options.nestingLimit = 16;

  capnp::FlatArrayMessageReader message(words, options);
  if (message.getEnd() != words.end())
    refuse("{} bytes after its Cap'n Proto message", (words.end() - message.getEnd()) * word_bytes);
  return get_message(message.getRoot<schema::ControlMessage>());
}

}  // namespace

namespace control_codec {

result<control_message> decode(std::span<const std::byte> bytes) {
  auto w = read_words(bytes, max_payload_bytes, "control message");
  if (!w) return std::unexpected(w.error());
  try {
    return read(w->words);
  } catch (const refusal& r) {
    return fail(errc::protocol_error, "control message refused: {}", r.message);
  } catch (const kj::Exception& ex) {
    return fail(errc::protocol_error, "malformed control message: {}", describe(ex));
  }
}

}  // namespace control_codec
}  // namespace coach::actors
