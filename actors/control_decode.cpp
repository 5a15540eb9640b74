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
#include "actors/control_schema.hpp"
#include "actors/curve_keys.hpp"
#include "common/format.hpp"
#include "wire/capnp_words.hpp"

namespace coach::actors {
namespace {

using namespace control_detail;

/// Why a message is refused; thrown by the readers, caught once in decode().
struct refusal {
  std::string message;
};

template <class... Args>
[[noreturn]] void refuse(std::string_view fmt, const Args&... args) {
  throw refusal{coach::format(fmt, args...)};
}

std::string get_text(capnp::Text::Reader t, std::string_view what,
                     std::size_t max = max_text_bytes) {
  if (t.size() > max) refuse("{} has {} bytes (at most {})", what, t.size(), max);
  return std::string(t.cStr(), t.size());  // NUL termination checked by Cap'n Proto
}

/// A CURVE public key: empty or 40 characters of Z85.
std::string get_key(capnp::Text::Reader t, std::string_view what) {
  auto key = get_text(t, what);
  if (!key.empty() && !is_z85_key(key)) refuse("{} is not a 40-character Z85 key", what);
  return key;
}

template <class List>
void check_count(const List& list, std::string_view what, std::size_t max) {
  if (list.size() > max) refuse("{} has {} entries (at most {})", what, list.size(), max);
}

error get_error(schema::Error::Reader e, std::string_view what) {
  const std::uint16_t code = e.getCode();
  if (code == 0 || code > max_errc) refuse("{} carries unknown error code {}", what, code);
  return error{static_cast<errc>(code), get_text(e.getMessage(), what)};
}

std::vector<int> get_gpus(capnp::List<std::uint32_t>::Reader list, std::string_view what) {
  check_count(list, what, max_gpus);
  std::vector<int> ids;
  ids.reserve(list.size());
  for (const std::uint32_t id : list) {
    if (id > static_cast<std::uint32_t>(INT_MAX)) refuse("{} lists GPU id {}", what, id);
    ids.push_back(static_cast<int>(id));
  }
  return ids;
}

std::vector<std::uint32_t> get_u32s(capnp::List<std::uint32_t>::Reader list, std::string_view what,
                                    std::size_t max = max_items) {
  check_count(list, what, max);
  std::vector<std::uint32_t> out;
  out.reserve(list.size());
  for (const std::uint32_t v : list) out.push_back(v);
  return out;
}

std::vector<std::string> get_texts(capnp::List<capnp::Text>::Reader list, std::string_view what) {
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
                       get_key(p.getPublicKey(), "startJob peer publicKey")});
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

api_request get_request(schema::Request::Reader r) {
  switch (r.which()) {
    case schema::Request::SUBMIT: {
      if (!r.hasSubmit()) refuse("job API request has no body");
      const auto s = r.getSubmit();
      return submit_request{
          .spec_yaml = get_text(s.getSpecYaml(), "submit specYaml", max_spec_bytes),
          .source_name = get_text(s.getSourceName(), "submit sourceName"),
          .base_dir = get_text(s.getBaseDir(), "submit baseDir"),
          .workers = s.getWorkers(),
          .shards = s.getShards(),
          .token = s.getToken()};
    }
    case schema::Request::STATUS:
      if (!r.hasStatus()) refuse("job API request status is null");
      return status_request{r.getStatus().getJob()};
    case schema::Request::NODES:
      if (!r.hasNodes()) refuse("job API request nodes is null");
      return nodes_request{};
    case schema::Request::CANCEL:
      if (!r.hasCancel()) refuse("job API request cancel is null");
      return cancel_request{r.getCancel().getJob()};
    case schema::Request::RESCALE: {
      if (!r.hasRescale()) refuse("job API request rescale is null");
      const auto q = r.getRescale();
      return rescale_request{q.getJob(), q.getWorkers(), q.getShards()};
    }
    case schema::Request::MIGRATE: {
      if (!r.hasMigrate()) refuse("job API request migrate is null");
      const auto q = r.getMigrate();
      return migrate_request{q.getJob(), q.getShard(), get_text(q.getToNode(), "migrate toNode")};
    }
    case schema::Request::POLICY: {
      if (!r.hasPolicy()) refuse("job API request policy is null");
      const auto p = r.getPolicy();
      if (p.which() == schema::PolicyRequest::GET) return policy_request{};
      if (p.which() == schema::PolicyRequest::SET)
        return policy_request{get_text(p.getSet(), "policy set")};
      refuse("policy request has unknown member {}", std::uint16_t(p.which()));
    }
    case schema::Request::LOGS: {
      if (!r.hasLogs()) refuse("job API request logs is null");
      const auto q = r.getLogs();
      return logs_request{q.getJob(), q.getAfter()};
    }
  }
  refuse("unknown job API request {}", std::uint16_t(r.which()));
}

job_status get_job_status(schema::JobStatus::Reader r) {
  job_status s;
  s.job = r.getJob();
  s.name = get_text(r.getName(), "job status name");
  switch (r.getState()) {
    case schema::JobState::QUEUED:
      s.state = job_state::queued;
      break;
    case schema::JobState::RUNNING:
      s.state = job_state::running;
      break;
    case schema::JobState::SUSPENDED:
      s.state = job_state::suspended;
      break;
    case schema::JobState::SUCCEEDED:
      s.state = job_state::succeeded;
      break;
    case schema::JobState::FAILED:
      s.state = job_state::failed;
      break;
    case schema::JobState::CANCELLED:
      s.state = job_state::cancelled;
      break;
    default:
      refuse("job status has unknown state {}", std::uint16_t(r.getState()));
  }
  s.epochs_done = r.getEpochsDone();
  s.epochs_total = r.getEpochsTotal();
  s.test_accuracy = r.getTestAccuracy();
  s.samples_per_second = r.getSamplesPerSecond();
  s.loss = r.getLoss();
  s.samples_done = r.getSamplesDone();
  s.samples_epoch = r.getSamplesEpoch();
  s.workers = r.getWorkers();
  s.shards = r.getShards();
  s.worker_nodes = get_texts(r.getWorkerNodes(), "job status workerNodes");
  s.shard_nodes = get_texts(r.getShardNodes(), "job status shardNodes");
  s.traffic = get_traffic(r.getTraffic(), "job status traffic");
  s.error = get_text(r.getError(), "job status error");
  s.error_code = r.getErrorCode();
  if (s.error_code > max_errc) refuse("job status has unknown error code {}", s.error_code);
  s.seconds = r.getSeconds();
  const auto es = r.getEpochSamples();
  if (es.size() > max_epochs)
    refuse("job status lists {} epochs (at most {})", es.size(), max_epochs);
  for (auto n : es) s.epoch_samples.push_back(n);
  const auto secs = r.getEpochSeconds();
  if (secs.size() > max_epochs)
    refuse("job status lists {} epoch times (at most {})", secs.size(), max_epochs);
  for (double x : secs) s.epoch_seconds.push_back(x);
  const auto acc = r.getEpochAccuracy();
  if (acc.size() > max_epochs)
    refuse("job status lists {} epoch accuracies (at most {})", acc.size(), max_epochs);
  for (double x : acc) s.epoch_accuracy.push_back(x);
  s.traffic_final = r.getTrafficFinal();
  const auto cs = r.getChanges();
  check_count(cs, "job status changes", max_items);
  for (const auto c : cs)
    s.changes.push_back({get_text(c.getWhat(), "job status change"), c.getStep(), c.getJoinMs(),
                         c.getTransferMs(), c.getMovedBytes(), c.getGapMs(), c.getStepMs(),
                         c.getPauseMs(), c.getSamplesPerSecondBefore(),
                         c.getSamplesPerSecondAfter(), c.getPrepareMs(), c.getStepSpreadMs()});
  s.model_json = get_text(r.getModel(), "job status model", max_model_bytes);
  s.resumes = r.getResumes();
  s.failovers = r.getFailovers();
  s.waiting = get_text(r.getWaiting(), "job status waiting");
  const auto lost = r.getRecoveriesLostS();
  check_count(lost, "job status recoveries", max_items);
  for (auto x : lost) s.recoveries_lost_s.push_back(x);
  s.placement = get_text(r.getPlacement(), "job status placement");
  s.aggregation_degree = r.getAggregationDegree();
  s.changes_done = r.getChangesDone();
  if (r.getFunctionMode()) {
    const auto c = r.getInvocations();
    s.invocations = worker::invocation_counts{
        c.getStarted(), c.getCompleted(),       c.getTimedOut(), c.getOutOfMemory(),
        c.getFailed(),  c.getPeakMemoryBytes(), c.getTasks()};
  }
  return s;
}

api_reply get_reply(schema::Reply::Reader r) {
  api_reply out;
  // A per-kind error stands in for Reply.error when that is null (another writer's choice).
  std::optional<error> body_error;
  switch (r.which()) {
    case schema::Reply::SUBMIT: {
      if (!r.hasSubmit()) refuse("job API reply has no body");
      const auto s = r.getSubmit();
      if (s.which() == schema::SubmitReply::JOB) {
        out.body = submit_reply{s.getJob()};
      } else if (s.which() == schema::SubmitReply::ERROR) {
        out.body = submit_reply{};
        if (!r.hasError()) body_error = get_error(s.getError(), "submit reply");
      } else {
        refuse("submit reply has unknown member {}", std::uint16_t(s.which()));
      }
      break;
    }
    case schema::Reply::STATUS: {
      if (!r.hasStatus()) refuse("job API reply status is null");
      const auto s = r.getStatus();
      const auto jobs = s.getJobs();
      check_count(jobs, "status reply jobs", max_items);
      status_reply body;
      body.jobs.reserve(jobs.size());
      for (const auto j : jobs) body.jobs.push_back(get_job_status(j));
      out.body = std::move(body);
      if (!r.hasError() && s.hasError()) body_error = get_error(s.getError(), "status reply");
      break;
    }
    case schema::Reply::NODES: {
      if (!r.hasNodes()) refuse("job API reply nodes is null");
      const auto statuses = r.getNodes().getStatuses();
      check_count(statuses, "nodes reply statuses", max_items);
      nodes_reply body;
      body.nodes.reserve(statuses.size());
      for (const auto n : statuses)
        body.nodes.push_back({get_heartbeat(n.getHeartbeat()), n.getSecondsSince(), n.getAlive()});
      out.body = std::move(body);
      break;
    }
    case schema::Reply::ACK: {
      if (!r.hasAck()) refuse("job API reply ack is null");
      const auto a = r.getAck();
      out.body = ack_reply{};
      if (!r.hasError() && a.hasError()) body_error = get_error(a.getError(), "ack reply");
      break;
    }
    case schema::Reply::POLICY: {
      if (!r.hasPolicy()) refuse("job API reply policy is null");
      const auto p = r.getPolicy();
      out.body = policy_reply{get_text(p.getActive(), "policy reply active")};
      if (!r.hasError() && p.hasError()) body_error = get_error(p.getError(), "policy reply");
      break;
    }
    case schema::Reply::LOGS: {
      if (!r.hasLogs()) refuse("job API reply logs is null");
      const auto l = r.getLogs();
      const auto es = l.getEvents();
      check_count(es, "logs reply events", max_items);
      logs_reply body;
      body.over = l.getOver();
      for (const auto e : es)
        body.events.push_back({e.getSeq(), e.getTime(), get_text(e.getText(), "logs event")});
      out.body = std::move(body);
      break;
    }
    default:
      refuse("unknown job API reply {}", std::uint16_t(r.which()));
  }
  if (r.hasError())
    out.failure = get_error(r.getError(), "job API reply");
  else
    out.failure = std::move(body_error);
  return out;
}

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
