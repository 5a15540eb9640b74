// actors/control_encode.cpp: control_message -> schemas/control.capnp. With the decoder
// (actors/control_decode.cpp) the only code that touches the generated Cap'n Proto types of the
// control plane (ControlMessage, StartJob, the job API's Request and Reply, cluster.capnp's
// Heartbeat); their limits are in actors/control_schema.hpp.
//
// Encoding is straightforward and total: any control_message encodes. Short texts (names,
// addresses, paths, error messages) are cut to max_text_bytes, so that the receiver accepts
// them; negative GPU ids cannot be UInt32s and are left out. The job spec is never cut: a spec
// over max_spec_bytes is refused by the receiver, so callers check its size first.
#include <capnp/message.h>
#include <capnp/serialize.h>

#include <algorithm>
#include <cstring>

#include "actors/control.hpp"
#include "actors/control_schema.hpp"

namespace coach::actors {
namespace {

using namespace control_detail;

/// Writes `s`, cut to `max` bytes, through `init` (a generated initX(size) of a Text field).
template <class Init>
void put_text(Init init, std::string_view s, std::size_t max = max_text_bytes) {
  const std::size_t n = std::min(s.size(), max);
  auto t = init(static_cast<unsigned>(n));
  if (n > 0) std::memcpy(t.begin(), s.data(), n);
}

void put_error(schema::Error::Builder b, const error& e) {
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

void put_heartbeat(schema::Heartbeat::Builder b, const node_heartbeat& h) {
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

/// A script's model: its entry and layout (never cut: the receiver refuses one over
/// worker::max_layout_json_bytes); its initial values and files go as payload frames.
void put_script(schema::ScriptModel::Builder b, const worker::script_payload& p) {
  put_text([&](unsigned n) { return b.initEntry(n); }, p.entry);
  put_text([&](unsigned n) { return b.initLayout(n); }, p.layout_json, p.layout_json.size());
}

void put_start_job(schema::StartJob::Builder b, const start_job& s) {
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
    put_text([&](unsigned n) { return peers[i].initName(n); }, s.peers[i].name);
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
  if (s.script) put_script(b.initScript(), *s.script);
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

void put_request(schema::Request::Builder b, const api_request& r) {
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
          if (q.script) put_script(s.initScript(), *q.script);
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
          r.setRelease(q.release);
        } else if constexpr (std::is_same_v<T, migrate_request>) {
          auto m = b.initMigrate();
          m.setJob(q.job);
          m.setShard(q.shard);
          put_text([&](unsigned n) { return m.initToNode(n); }, q.to_node);
          m.setRelease(q.release);
        } else if constexpr (std::is_same_v<T, logs_request>) {
          auto l = b.initLogs();
          l.setJob(q.job);
          l.setAfter(q.after);
        } else if constexpr (std::is_same_v<T, forget_request>) {
          b.initForget().setJob(q.job);
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

void put_job_status(schema::JobStatus::Builder b, const job_status& s) {
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
  {
    auto ids = b.initShardIds(static_cast<unsigned>(s.shard_ids.size()));
    for (unsigned i = 0; i < s.shard_ids.size(); ++i) ids.set(i, s.shard_ids[i]);
  }
  put_texts([&](unsigned n) { return b.initOrders(n); }, s.orders);
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

void put_reply(schema::Reply::Builder b, const api_reply& r) {
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

void put_message(schema::ControlMessage::Builder b, const control_message& m) {
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
        } else if constexpr (std::is_same_v<T, node_refused>) {
          put_text([&](unsigned n) { return b.initRefuseNode().initReason(n); }, v.reason);
        } else {
          static_assert(std::is_same_v<T, api_reply>);
          put_reply(b.initReply(), v);
        }
      },
      m);
}

}  // namespace

namespace control_codec {

std::vector<std::byte> encode(const control_message& m) {
  capnp::MallocMessageBuilder message;
  put_message(message.initRoot<schema::ControlMessage>(), m);
  const auto words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.begin(), bytes.size());
  return out;
}

}  // namespace control_codec
}  // namespace coach::actors
