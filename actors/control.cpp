// actors/control.cpp: control_message <-> schemas/control.capnp. The only file that touches the
// generated Cap'n Proto types of the control plane (ControlMessage, StartJob, the job API's
// Request and Reply, cluster.capnp's Heartbeat).
//
// Encoding is straightforward and total: any control_message encodes. Short texts (names,
// addresses, paths, error messages) are cut to max_text_bytes, so that the receiver accepts
// them; negative GPU ids cannot be UInt32s and are left out. The job spec is never cut: a spec
// over max_spec_bytes is refused by the receiver, so callers check its size first.
//
// Decoding treats its input as hostile, as actors/codec.cpp does: the size is checked before
// parsing, an unaligned input is copied into words, the reader runs under a traversal limit
// proportional to the input and a nesting limit, every list and text is bounded, every enum and
// error code checked, and every kj::Exception becomes errc::protocol_error. Inside, a refusal is
// thrown (detail::refusal) and caught once at the top, so the readers stay straight-line code.

#include "actors/control.hpp"
#include "common/log.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>

#include "actors/curve_keys.hpp"
#include "common/format.hpp"
#include "common/log_limiter.hpp"
#include "schemas/control.capnp.h"
#include "wire/capnp_words.hpp"

namespace coach::actors {
namespace {

namespace wire = coach::schemas;

// Limits of a decoded control message (docs/wire.md, "Control plane"). Encode never exceeds the
// text limits (it cuts); lists beyond the list limits are the caller's to avoid.
constexpr std::size_t max_payload_bytes = 16 << 20;  // a whole ControlMessage, checked first
constexpr std::size_t max_spec_bytes = 1 << 20;      // start_job / submit_request spec_yaml
constexpr std::size_t max_text_bytes = 4096;  // every other text: names, addresses, paths, errors
constexpr std::size_t max_model_bytes = 1 << 20;  // a job status's model JSON
constexpr std::size_t max_epochs = 1 << 20;       // epochs listed in one job status
constexpr std::size_t max_items = 4096;           // nodes, jobs, peers, hosts by shard or rank
constexpr std::size_t max_links = 1 << 16;        // traffic entries of one heartbeat or job status
constexpr std::size_t max_gpus_held = 1 << 16;    // GPUs held by workers in one heartbeat
constexpr std::size_t max_gpus = 1024;            // ids in one GPU list
constexpr std::size_t max_slices = 1 << 24;       // slice owners of one job configuration
constexpr std::size_t max_config_members = 1 << 16;  // worker ranks of one configuration

constexpr std::uint16_t max_errc =
    std::uint16_t(errc::not_authorized);  // highest code in error.hpp
constexpr std::size_t word_bytes = sizeof(capnp::word);

wire::JobState to_wire(job_state s) noexcept {
  switch (s) {
    case job_state::queued:
      return wire::JobState::QUEUED;
    case job_state::running:
      return wire::JobState::RUNNING;
    case job_state::suspended:
      return wire::JobState::SUSPENDED;
    case job_state::succeeded:
      return wire::JobState::SUCCEEDED;
    case job_state::failed:
      return wire::JobState::FAILED;
    case job_state::cancelled:
      return wire::JobState::CANCELLED;
  }
  return wire::JobState::FAILED;
}

// --- encoding ------------------------------------------------------------------------------

/// Writes `s`, cut to `max` bytes, through `init` (a generated initX(size) of a Text field).
template <class Init>
void put_text(Init init, std::string_view s, std::size_t max = max_text_bytes) {
  const std::size_t n = std::min(s.size(), max);
  auto t = init(static_cast<unsigned>(n));
  if (n > 0) std::memcpy(t.begin(), s.data(), n);
}

void put_error(wire::Error::Builder b, const error& e) {
  b.setCode(static_cast<std::uint16_t>(e.code));
  put_text([&](unsigned n) { return b.initMessage(n); }, e.message);
}

/// GPU ids as UInt32: negative ids (never valid) are left out.
template <class Init>
void put_gpus(Init init, const std::vector<int>& ids) {
  const auto valid = std::count_if(ids.begin(), ids.end(), [](int id) { return id >= 0; });
  auto list = init(static_cast<unsigned>(valid));
  unsigned i = 0;
  for (const int id : ids)
    if (id >= 0) list.set(i++, static_cast<std::uint32_t>(id));
}

template <class Init>
void put_u32s(Init init, const std::vector<std::uint32_t>& values) {
  auto list = init(static_cast<unsigned>(values.size()));
  for (unsigned i = 0; i < values.size(); ++i) list.set(i, values[i]);
}

template <class Init>
void put_texts(Init init, const std::vector<std::string>& values) {
  auto list = init(static_cast<unsigned>(values.size()));
  for (unsigned i = 0; i < values.size(); ++i)
    put_text([&](unsigned n) { return list.init(i, n); }, values[i]);
}

void put_heartbeat(wire::Heartbeat::Builder b, const node_heartbeat& h) {
  put_text([&](unsigned n) { return b.initNodeName(n); }, h.name);
  put_text([&](unsigned n) { return b.initListenAddress(n); }, h.address);
  put_text([&](unsigned n) { return b.initPublicKey(n); }, h.public_key);
  b.setHostId(h.host);
  const auto& r = h.resources;
  b.setCpusTotal(r.cpus_total);
  b.setCpusFree(r.cpus_free);
  b.setCpusExternal(r.cpus_external);
  put_gpus([&](unsigned n) { return b.initGpusTotal(n); }, r.gpus_total);
  put_gpus([&](unsigned n) { return b.initGpusFree(n); }, r.gpus_free);
  b.setMemoryTotal(r.memory_total);
  b.setMemoryFree(r.memory_free);
  b.setActorsRunning(h.actors_running);
  b.setSequence(h.sequence);
  b.setUnixTimeMs(h.unix_time_ms);
  b.setLoad1(r.load1);
  put_text([&](unsigned n) { return b.initGpuError(n); }, r.gpu_error);
  b.setDraining(h.draining);
  std::vector<scheduler::gpu_hold> holds;  // a negative id is no GPU (as put_gpus drops them)
  for (const auto& g : r.gpus_held)
    if (g.device >= 0) holds.push_back(g);
  auto held = b.initGpusHeld(static_cast<unsigned>(holds.size()));
  for (unsigned i = 0; i < holds.size(); ++i) {
    const auto& g = holds[i];
    held[i].setJob(g.job);
    held[i].setRank(g.rank);
    held[i].setDevice(static_cast<std::uint32_t>(g.device));
    held[i].setOwn(g.own);
  }
  auto traffic = b.initTraffic(static_cast<unsigned>(h.traffic.size()));
  for (unsigned i = 0; i < h.traffic.size(); ++i) {
    const auto& t = h.traffic[i];
    traffic[i].setJob(t.job);
    traffic[i].setSrcHost(t.src_host);
    traffic[i].setDstHost(t.dst_host);
    traffic[i].setMessages(t.messages);
    traffic[i].setBytes(t.bytes);
  }
}

void put_start_job(wire::StartJob::Builder b, const start_job& s) {
  b.setJob(s.job);
  b.setWorkersPhase(s.workers_phase);
  put_text([&](unsigned n) { return b.initSpecYaml(n); }, s.spec_yaml, s.spec_yaml.size());
  put_text([&](unsigned n) { return b.initSourceName(n); }, s.source_name);
  put_text([&](unsigned n) { return b.initBaseDir(n); }, s.base_dir);
  b.setMasterHost(s.master_host);
  put_u32s([&](unsigned n) { return b.initShardHosts(n); }, s.shard_hosts);
  put_u32s([&](unsigned n) { return b.initWorkerHosts(n); }, s.worker_hosts);
  {
    auto chains = b.initBackupHosts(unsigned(s.backup_hosts.size()));
    for (unsigned k = 0; k < s.backup_hosts.size(); ++k)
      put_u32s([&](unsigned n) { return chains.init(k, n); }, s.backup_hosts[k]);
  }
  auto peers = b.initPeers(static_cast<unsigned>(s.peers.size()));
  for (unsigned i = 0; i < s.peers.size(); ++i) {
    peers[i].setHost(s.peers[i].host);
    put_text([&](unsigned n) { return peers[i].initAddress(n); }, s.peers[i].address);
    put_text([&](unsigned n) { return peers[i].initPublicKey(n); }, s.peers[i].public_key);
  }
  auto put_parts = [](auto list, const std::vector<part_host>& parts) {
    for (unsigned i = 0; i < parts.size(); ++i) {
      list[i].setId(parts[i].id);
      list[i].setHost(parts[i].host);
      put_u32s([&](unsigned n) { return list[i].initBackups(n); }, parts[i].backups);
    }
  };
  put_parts(b.initAddedShards(static_cast<unsigned>(s.added_shards.size())), s.added_shards);
  put_parts(b.initAddedWorkers(static_cast<unsigned>(s.added_workers.size())), s.added_workers);
  b.setFirstStep(s.first_step);
  b.setRun(s.run);
  if (s.initial) {
    b.setInitialUpdates(s.initial->updates);
    b.setInitialSamplesApplied(s.initial->samples_applied);
  }
  if (s.start) {
    auto p = b.initStart();
    p.setWorker(s.start->worker);
    p.setId(s.start->id);
    p.setFirstStep(s.start->first_step);
    p.setExpectKeys(s.start->expect_keys);
    auto c = p.initConfig();
    c.setVersion(s.start->version);
    c.setFromStep(s.start->from_step);
    put_u32s([&](unsigned n) { return c.initMembers(n); }, s.start->members);
    put_u32s([&](unsigned n) { return c.initSliceOwners(n); }, s.start->slice_owners);
  }
}

void put_request(wire::Request::Builder b, const api_request& r) {
  b.setSequence(0);  // one request per connection: nothing to match
  std::visit(
      [&](const auto& q) {
        using T = std::decay_t<decltype(q)>;
        if constexpr (std::is_same_v<T, submit_request>) {
          auto s = b.initSubmit();
          put_text([&](unsigned n) { return s.initSpecYaml(n); }, q.spec_yaml, q.spec_yaml.size());
          put_text([&](unsigned n) { return s.initSourceName(n); }, q.source_name);
          put_text([&](unsigned n) { return s.initBaseDir(n); }, q.base_dir);
          s.setWorkers(q.workers);
          s.setShards(q.shards);
          s.setToken(q.token);
        } else if constexpr (std::is_same_v<T, status_request>) {
          b.initStatus().setJob(q.job);
        } else if constexpr (std::is_same_v<T, nodes_request>) {
          b.initNodes();
        } else if constexpr (std::is_same_v<T, cancel_request>) {
          b.initCancel().setJob(q.job);
        } else if constexpr (std::is_same_v<T, rescale_request>) {
          auto r = b.initRescale();
          r.setJob(q.job);
          r.setWorkers(q.workers);
          r.setShards(q.shards);
        } else if constexpr (std::is_same_v<T, migrate_request>) {
          auto m = b.initMigrate();
          m.setJob(q.job);
          m.setShard(q.shard);
          put_text([&](unsigned n) { return m.initToNode(n); }, q.to_node);
        } else if constexpr (std::is_same_v<T, logs_request>) {
          auto l = b.initLogs();
          l.setJob(q.job);
          l.setAfter(q.after);
        } else {
          static_assert(std::is_same_v<T, policy_request>);
          auto p = b.initPolicy();
          if (q.set)
            put_text([&](unsigned n) { return p.initSet(n); }, *q.set);
          else
            p.setGet();
        }
      },
      r);
}

void put_job_status(wire::JobStatus::Builder b, const job_status& s) {
  b.setJob(s.job);
  put_text([&](unsigned n) { return b.initName(n); }, s.name);
  b.setState(to_wire(s.state));
  b.setEpochsDone(s.epochs_done);
  b.setEpochsTotal(s.epochs_total);
  b.setTestAccuracy(s.test_accuracy);
  b.setSamplesPerSecond(s.samples_per_second);
  b.setWorkers(s.workers);
  b.setShards(s.shards);
  auto traffic = b.initTraffic(static_cast<unsigned>(s.traffic.size()));
  for (unsigned i = 0; i < s.traffic.size(); ++i) {
    const auto& t = s.traffic[i];
    traffic[i].setJob(t.job);
    traffic[i].setSrcHost(t.src_host);
    traffic[i].setDstHost(t.dst_host);
    traffic[i].setMessages(t.messages);
    traffic[i].setBytes(t.bytes);
  }
  put_text([&](unsigned n) { return b.initError(n); }, s.error);
  b.setErrorCode(s.error_code);
  b.setLoss(s.loss);
  b.setSamplesDone(s.samples_done);
  b.setSamplesEpoch(s.samples_epoch);
  put_texts([&](unsigned n) { return b.initWorkerNodes(n); }, s.worker_nodes);
  put_texts([&](unsigned n) { return b.initShardNodes(n); }, s.shard_nodes);
  b.setSeconds(s.seconds);
  auto es = b.initEpochSamples(static_cast<unsigned>(s.epoch_samples.size()));
  for (unsigned i = 0; i < s.epoch_samples.size(); ++i) es.set(i, s.epoch_samples[i]);
  auto secs = b.initEpochSeconds(static_cast<unsigned>(s.epoch_seconds.size()));
  for (unsigned i = 0; i < s.epoch_seconds.size(); ++i) secs.set(i, s.epoch_seconds[i]);
  auto acc = b.initEpochAccuracy(static_cast<unsigned>(s.epoch_accuracy.size()));
  for (unsigned i = 0; i < s.epoch_accuracy.size(); ++i) acc.set(i, s.epoch_accuracy[i]);
  b.setTrafficFinal(s.traffic_final);
  auto cs = b.initChanges(static_cast<unsigned>(s.changes.size()));
  for (unsigned i = 0; i < s.changes.size(); ++i) {
    const auto& c = s.changes[i];
    put_text([&](unsigned n) { return cs[i].initWhat(n); }, c.what);
    cs[i].setStep(c.step);
    cs[i].setJoinMs(c.join_ms);
    cs[i].setTransferMs(c.transfer_ms);
    cs[i].setMovedBytes(c.moved_bytes);
    cs[i].setGapMs(c.gap_ms);
    cs[i].setStepMs(c.step_ms);
    cs[i].setPauseMs(c.pause_ms);
    cs[i].setSamplesPerSecondBefore(c.samples_per_s_before);
    cs[i].setSamplesPerSecondAfter(c.samples_per_s_after);
    cs[i].setPrepareMs(c.prepare_ms);
    cs[i].setStepSpreadMs(c.step_spread_ms);
  }
  put_text([&](unsigned n) { return b.initModel(n); }, s.model_json, max_model_bytes);
  b.setResumes(s.resumes);
  b.setFailovers(s.failovers);
  put_text([&](unsigned n) { return b.initWaiting(n); }, s.waiting, max_text_bytes);
  {
    auto lost = b.initRecoveriesLostS(unsigned(s.recoveries_lost_s.size()));
    for (unsigned i = 0; i < s.recoveries_lost_s.size(); ++i) lost.set(i, s.recoveries_lost_s[i]);
  }
  put_text([&](unsigned n) { return b.initPlacement(n); }, s.placement, max_text_bytes);
  b.setAggregationDegree(s.aggregation_degree);
  b.setChangesDone(s.changes_done);
  b.setFunctionMode(s.invocations.has_value());
  if (const auto& i = s.invocations) {
    auto c = b.initInvocations();
    c.setStarted(i->started);
    c.setCompleted(i->completed);
    c.setTimedOut(i->timed_out);
    c.setOutOfMemory(i->out_of_memory);
    c.setFailed(i->failed);
    c.setTasks(i->tasks);
    c.setPeakMemoryBytes(i->peak_memory_bytes);
  }
}

void put_reply(wire::Reply::Builder b, const api_reply& r) {
  b.setSequence(0);
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, ack_reply>) {
          b.initAck();
        } else if constexpr (std::is_same_v<T, submit_reply>) {
          b.initSubmit().setJob(body.job);
        } else if constexpr (std::is_same_v<T, status_reply>) {
          auto jobs = b.initStatus().initJobs(static_cast<unsigned>(body.jobs.size()));
          for (unsigned i = 0; i < body.jobs.size(); ++i) put_job_status(jobs[i], body.jobs[i]);
        } else if constexpr (std::is_same_v<T, policy_reply>) {
          put_text([&](unsigned n) { return b.initPolicy().initActive(n); }, body.active);
        } else if constexpr (std::is_same_v<T, logs_reply>) {
          auto l = b.initLogs();
          l.setOver(body.over);
          auto es = l.initEvents(static_cast<unsigned>(body.events.size()));
          for (unsigned i = 0; i < body.events.size(); ++i) {
            es[i].setSeq(body.events[i].seq);
            es[i].setTime(body.events[i].time);
            put_text([&](unsigned n) { return es[i].initText(n); }, body.events[i].text);
          }
        } else {
          static_assert(std::is_same_v<T, nodes_reply>);
          auto nodes = b.initNodes().initStatuses(static_cast<unsigned>(body.nodes.size()));
          for (unsigned i = 0; i < body.nodes.size(); ++i) {
            put_heartbeat(nodes[i].initHeartbeat(), body.nodes[i].last);
            nodes[i].setSecondsSince(body.nodes[i].seconds_since);
            nodes[i].setAlive(body.nodes[i].alive);
          }
        }
      },
      r.body);
  if (r.failure) put_error(b.initError(), *r.failure);
}

void put_message(wire::ControlMessage::Builder b, const control_message& m) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, node_heartbeat>) {
          put_heartbeat(b.initHeartbeat(), v);
        } else if constexpr (std::is_same_v<T, start_job>) {
          put_start_job(b.initStartJob(), v);
        } else if constexpr (std::is_same_v<T, stop_job>) {
          b.initStopJob().setJob(v.job);
        } else if constexpr (std::is_same_v<T, command_reply>) {
          auto c = b.initCommandReply();
          c.setJob(v.job);
          c.setStopped(v.stopped);
          if (v.failure) put_error(c.initError(), *v.failure);
        } else if constexpr (std::is_same_v<T, api_request>) {
          put_request(b.initRequest(), v);
        } else {
          static_assert(std::is_same_v<T, api_reply>);
          put_reply(b.initReply(), v);
        }
      },
      m);
}

// --- decoding ------------------------------------------------------------------------------

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

error get_error(wire::Error::Reader e, std::string_view what) {
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

node_heartbeat get_heartbeat(wire::Heartbeat::Reader r) {
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

start_job get_start_job(wire::StartJob::Reader r) {
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

api_request get_request(wire::Request::Reader r) {
  switch (r.which()) {
    case wire::Request::SUBMIT: {
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
    case wire::Request::STATUS:
      if (!r.hasStatus()) refuse("job API request status is null");
      return status_request{r.getStatus().getJob()};
    case wire::Request::NODES:
      if (!r.hasNodes()) refuse("job API request nodes is null");
      return nodes_request{};
    case wire::Request::CANCEL:
      if (!r.hasCancel()) refuse("job API request cancel is null");
      return cancel_request{r.getCancel().getJob()};
    case wire::Request::RESCALE: {
      if (!r.hasRescale()) refuse("job API request rescale is null");
      const auto q = r.getRescale();
      return rescale_request{q.getJob(), q.getWorkers(), q.getShards()};
    }
    case wire::Request::MIGRATE: {
      if (!r.hasMigrate()) refuse("job API request migrate is null");
      const auto q = r.getMigrate();
      return migrate_request{q.getJob(), q.getShard(), get_text(q.getToNode(), "migrate toNode")};
    }
    case wire::Request::POLICY: {
      if (!r.hasPolicy()) refuse("job API request policy is null");
      const auto p = r.getPolicy();
      if (p.which() == wire::PolicyRequest::GET) return policy_request{};
      if (p.which() == wire::PolicyRequest::SET)
        return policy_request{get_text(p.getSet(), "policy set")};
      refuse("policy request has unknown member {}", std::uint16_t(p.which()));
    }
    case wire::Request::LOGS: {
      if (!r.hasLogs()) refuse("job API request logs is null");
      const auto q = r.getLogs();
      return logs_request{q.getJob(), q.getAfter()};
    }
  }
  refuse("unknown job API request {}", std::uint16_t(r.which()));
}

job_status get_job_status(wire::JobStatus::Reader r) {
  job_status s;
  s.job = r.getJob();
  s.name = get_text(r.getName(), "job status name");
  switch (r.getState()) {
    case wire::JobState::QUEUED:
      s.state = job_state::queued;
      break;
    case wire::JobState::RUNNING:
      s.state = job_state::running;
      break;
    case wire::JobState::SUSPENDED:
      s.state = job_state::suspended;
      break;
    case wire::JobState::SUCCEEDED:
      s.state = job_state::succeeded;
      break;
    case wire::JobState::FAILED:
      s.state = job_state::failed;
      break;
    case wire::JobState::CANCELLED:
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

api_reply get_reply(wire::Reply::Reader r) {
  api_reply out;
  // A per-kind error stands in for Reply.error when that is null (another writer's choice).
  std::optional<error> body_error;
  switch (r.which()) {
    case wire::Reply::SUBMIT: {
      if (!r.hasSubmit()) refuse("job API reply has no body");
      const auto s = r.getSubmit();
      if (s.which() == wire::SubmitReply::JOB) {
        out.body = submit_reply{s.getJob()};
      } else if (s.which() == wire::SubmitReply::ERROR) {
        out.body = submit_reply{};
        if (!r.hasError()) body_error = get_error(s.getError(), "submit reply");
      } else {
        refuse("submit reply has unknown member {}", std::uint16_t(s.which()));
      }
      break;
    }
    case wire::Reply::STATUS: {
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
    case wire::Reply::NODES: {
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
    case wire::Reply::ACK: {
      if (!r.hasAck()) refuse("job API reply ack is null");
      const auto a = r.getAck();
      out.body = ack_reply{};
      if (!r.hasError() && a.hasError()) body_error = get_error(a.getError(), "ack reply");
      break;
    }
    case wire::Reply::POLICY: {
      if (!r.hasPolicy()) refuse("job API reply policy is null");
      const auto p = r.getPolicy();
      out.body = policy_reply{get_text(p.getActive(), "policy reply active")};
      if (!r.hasError() && p.hasError()) body_error = get_error(p.getError(), "policy reply");
      break;
    }
    case wire::Reply::LOGS: {
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

control_message get_message(wire::ControlMessage::Reader r) {
  switch (r.which()) {
    case wire::ControlMessage::HEARTBEAT:
      // Discriminant 0 with a null struct is also what a message with nothing set looks like.
      if (!r.hasHeartbeat()) refuse("control message is empty (no union member set)");
      return get_heartbeat(r.getHeartbeat());
    case wire::ControlMessage::START_JOB:
      if (!r.hasStartJob()) refuse("control message startJob is null");
      return get_start_job(r.getStartJob());
    case wire::ControlMessage::STOP_JOB:
      if (!r.hasStopJob()) refuse("control message stopJob is null");
      return stop_job{r.getStopJob().getJob()};
    case wire::ControlMessage::COMMAND_REPLY: {
      if (!r.hasCommandReply()) refuse("control message commandReply is null");
      const auto c = r.getCommandReply();
      command_reply out{.job = c.getJob(), .failure = std::nullopt, .stopped = c.getStopped()};
      if (c.hasError()) out.failure = get_error(c.getError(), "command reply");
      return out;
    }
    case wire::ControlMessage::REQUEST:
      if (!r.hasRequest()) refuse("control message request is null");
      return get_request(r.getRequest());
    case wire::ControlMessage::REPLY:
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
  return get_message(message.getRoot<wire::ControlMessage>());
}

}  // namespace

std::uint32_t node_host_id(std::string_view address) noexcept {
  std::uint32_t h = 2166136261u;  // FNV-1a, 32 bits
  for (const char c : address) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  h &= 0x7fffffffu;
  return h == 0 ? 1 : h;
}

std::uint32_t client_host_id() noexcept {
  std::uint32_t r = 0;
  try {
    std::random_device device;
    r = device();
  } catch (...) {
    // No entropy source: the clock and a stack address still differ between processes.
    const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
    const auto a = reinterpret_cast<std::uintptr_t>(&r);
    r = static_cast<std::uint32_t>(t ^ (t >> 32) ^ a ^ (a >> 32));
  }
  return r | 0x80000000u;
}

namespace control_codec {

std::vector<std::byte> encode(const control_message& m) {
  capnp::MallocMessageBuilder message;
  put_message(message.initRoot<wire::ControlMessage>(), m);
  const auto words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.begin(), bytes.size());
  return out;
}

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

wire_message make_control(const endpoint& src, const endpoint& dst, const control_message& m) {
  wire_message msg;
  msg.hdr.src = src;
  msg.hdr.dst = dst;
  msg.hdr.kind = msg_kind::control;
  msg.hdr.job = std::visit(
      [](const auto& v) -> std::uint64_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, start_job> || std::is_same_v<T, stop_job> ||
                      std::is_same_v<T, command_reply>) {
          return v.job;
        } else if constexpr (std::is_same_v<T, api_request>) {
          return std::visit(
              [](const auto& q) -> std::uint64_t {
                if constexpr (requires { q.job; })
                  return q.job;
                else
                  return 0;
              },
              v);
        } else if constexpr (std::is_same_v<T, api_reply>) {
          if (const auto* s = std::get_if<submit_reply>(&v.body)) return s->job;
          return 0;
        } else {
          return 0;  // a heartbeat is about no job
        }
      },
      m);
  auto bytes = std::make_shared<std::vector<std::byte>>(control_codec::encode(m));
  const std::byte* data = bytes->data();
  const std::size_t size = bytes->size();
  msg.frames.push_back(frame{std::move(bytes), data, size});
  // A resumed job's values and optimizer state go as raw floats next to the Cap'n Proto
  // message: no copy into a builder, and no Cap'n Proto size limit on a large model.
  if (const auto* sj = std::get_if<start_job>(&m); sj && sj->initial) {
    const auto& s = sj->initial;
    msg.frames.push_back(frame::of(s, s->values.data(), s->values.size()));
    if (!s->state_a.empty())
      msg.frames.push_back(frame::of(s, s->state_a.data(), s->state_a.size()));
    if (!s->state_b.empty())
      msg.frames.push_back(frame::of(s, s->state_b.data(), s->state_b.size()));
  }
  return msg;
}

std::optional<control_message> read_control(const wire_message& m) {
  if (m.hdr.kind != msg_kind::control || m.frames.empty()) return std::nullopt;
  auto msg = control_codec::decode({m.frames[0].data, m.frames[0].bytes});
  auto drop = [&](const std::string& why) -> std::optional<control_message> {
    // At most 5 lines a second: a flood of bad control messages once logged each of them.
    static log_limiter limit;
    if (const auto suffix = limit.allow())
      log::warn("dropped a control message from host {}: {}{}", m.hdr.src.host, why, *suffix);
    return std::nullopt;
  };
  if (!msg) return drop(msg.error().message);
  if (m.frames.size() == 1) return std::move(*msg);
  auto* sj = std::get_if<start_job>(&*msg);
  if (!sj || m.frames.size() > 4)
    return drop(coach::format("control message has {} payload frames (1, or 2 to 4 for a startJob)",
                              m.frames.size()));
  auto s = std::make_shared<ps::training_state>();
  s->version = sj->first_step;
  std::vector<float>* parts[] = {&s->values, &s->state_a, &s->state_b};
  for (std::size_t i = 1; i < m.frames.size(); ++i) {
    const auto& f = m.frames[i];
    if (f.bytes % sizeof(float) != 0)
      return drop(coach::format("startJob initial {} of {} bytes are not whole f32s",
                                i == 1 ? "parameters" : "optimizer state", f.bytes));
    // Copied: a ZeroMQ frame need not be aligned for floats, and the shards keep their own copy.
    parts[i - 1]->resize(f.bytes / sizeof(float));
    if (f.bytes > 0) std::memcpy(parts[i - 1]->data(), f.data, f.bytes);
  }
  s->updates = sj->initial_updates;
  s->samples_applied = sj->initial_samples_applied;
  sj->initial = std::move(s);
  return std::move(*msg);
}

}  // namespace coach::actors
