// actors/control_decode_api.cpp: the job API's requests and replies read from
// schemas/control.capnp (the rest of the decoder: actors/control_decode.cpp; the encoder:
// actors/control_encode.cpp). Hostile input is refused as there.
#include <algorithm>
#include <cmath>

#include "actors/control_read.hpp"

namespace coach::actors::control_detail {

namespace {
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
  const auto ids = r.getShardIds();
  check_count(ids, "job status shardIds", max_items);
  for (auto k : ids) s.shard_ids.push_back(k);
  s.orders = get_texts(r.getOrders(), "job status orders");
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

}  // namespace

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
          .token = s.getToken(),
          .script = s.hasScript() ? get_script(s.getScript(), "submit") : nullptr};
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
      return rescale_request{q.getJob(), q.getWorkers(), q.getShards(), q.getRelease()};
    }
    case schema::Request::MIGRATE: {
      if (!r.hasMigrate()) refuse("job API request migrate is null");
      const auto q = r.getMigrate();
      return migrate_request{q.getJob(), q.getShard(), get_text(q.getToNode(), "migrate toNode"),
                             q.getRelease()};
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
    case schema::Request::FORGET:
      if (!r.hasForget()) refuse("job API request forget is null");
      return forget_request{r.getForget().getJob()};
  }
  refuse("unknown job API request {}", std::uint16_t(r.which()));
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

}  // namespace coach::actors::control_detail
