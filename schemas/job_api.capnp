# schemas/job_api.capnp: the job API (coach submit/status/nodes/cancel/rescale/migrate/policy)
# between the `coach` CLI and the scheduler's node.
#
# RULES (the wire contract):
#   - Field ordinals (@N), enumerant numbers and union members are NEVER renumbered, reordered
#     or reused. A new field takes the next free ordinal; an unwanted one stays in place.
#   - Adding fields is always compatible (old readers skip them, new readers see defaults).
#   - The file id below is fixed forever.

@0xde5fdf69be3d1e2c;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("coach::schemas");

using Envelope = import "/schemas/envelope.capnp";
using Cluster = import "/schemas/cluster.capnp";

enum JobState {
  queued @0;
  running @1;
  succeeded @2;
  failed @3;
  cancelled @4;
  suspended @5;   # stopped by the policy, its checkpoint kept; it resumes from there
}

# coach submit JOB.yaml [--workers N] [--shards M] [--wait]
struct SubmitRequest {
  specYaml @0 :Text;           # the job spec, verbatim
  sourceName @1 :Text;         # file name, for error messages ("job.yaml:3: ...")
  workers @2 :UInt32;          # 0 = as the spec/policy says
  shards @3 :UInt32;           # 0 = as the spec/policy says
  wait @4 :Bool;               # reply only when the job ends
  baseDir @5 :Text;            # the spec file's folder: its relative paths resolve there
  token @6 :UInt64;            # random per `coach submit` (0: none): the same request again
                               # (re-sent after no answer) gets the job the first one stored
  script @7 :ScriptModel;      # set: the model is a script, registered by the submitter; its
                               # initial values (f32) and its files (a bundle) are the two
                               # payload frames after the ControlMessage
}

# A script's model (model: {script: ...}) as it travels with a submit and a StartJob
# (worker::script_payload). Its initial values and its files travel as payload frames after the
# ControlMessage (docs/wire.md, "Script jobs").
struct ScriptModel {
  entry @0 :Text;              # the script's path inside the bundle (its file name)
  layout @1 :Text;             # its layout: the JSON text of its first process's hello
}

struct SubmitReply {
  union {
    job @0 :UInt64;            # the new job's id
    error @1 :Envelope.Error;
  }
  final @2 :JobStatus;         # with wait: the job's last status
}

# coach status [JOB]
struct StatusRequest {
  job @0 :UInt64;              # 0 = every job
}

# Bytes one job sent from one host to another (counted by the transport).
struct HostTraffic {
  srcHost @0 :UInt32;
  dstHost @1 :UInt32;
  bytes @2 :UInt64;
  messages @3 :UInt64;
  job @4 :UInt64;              # the job whose bytes these are
}

struct JobStatus {
  job @0 :UInt64;
  name @1 :Text;
  state @2 :JobState;
  epochsDone @3 :UInt32;
  epochsTotal @4 :UInt32;
  testAccuracy @5 :Float64;    # after the last finished epoch; NaN before the first
  samplesPerSecond @6 :Float64;
  workers @7 :UInt32;
  shards @8 :UInt32;
  traffic @9 :List(HostTraffic);
  error @10 :Text;             # why the job failed; empty otherwise
  errorCode @11 :UInt16;       # coach::errc number of the failure; 0 otherwise
  loss @12 :Float64;           # mean training loss of the last progress report
  samplesDone @13 :UInt64;     # samples done in the current epoch
  samplesEpoch @14 :UInt64;    # samples per epoch
  workerNodes @15 :List(Text); # node name by worker rank
  shardNodes @16 :List(Text);  # node of each shard owning slices (its primary), by shard id
  seconds @17 :Float64;        # since the job started running
  epochSamples @18 :List(UInt64);  # samples trained in each finished epoch, in order
  changes @19 :List(ChangeReport);  # the job's changes of workers or shards (once it ended)
  model @20 :Text;             # the performance model's view of the job: one JSON object
  resumes @21 :UInt32;         # times the job restarted from its checkpoint
  placement @22 :Text;         # the placement that placed its parts (spread, dltap, ...)
  aggregationDegree @23 :Float64;  # share of its worker-shard bytes kept on one host; NaN: none
  changesDone @24 :UInt32;     # changes of workers or shards in effect so far (last progress)
  functionMode @25 :Bool;      # the job's workers run as bounded invocations
  invocations @26 :InvocationCounts;  # theirs so far (function mode)
  recoveriesLostS @27 :List(Float64);  # per recovery after a lost node: seconds of work lost
  failovers @28 :UInt32;       # shards whose backup took over after their primary's node was lost
  waiting @29 :Text;           # a queued job: why it does not start yet; empty otherwise
  epochSeconds @30 :List(Float64);  # each finished epoch's training time (as epochSamples)
  epochAccuracy @31 :List(Float64); # each finished epoch's test accuracy (as epochSamples)
  trafficFinal @32 :Bool;      # ended, and every node that ran a part has reported its last bytes
  shardIds @33 :List(UInt32);  # the id of each shard of shardNodes (ids change with migrations)
  orders @34 :List(Text);      # the user's orders that hold until released (pins, held counts)
}

# A function-mode job's invocations (worker::invocation_counts).
struct InvocationCounts {
  started @0 :UInt64;
  completed @1 :UInt64;
  timedOut @2 :UInt64;
  outOfMemory @3 :UInt64;
  failed @4 :UInt64;
  tasks @5 :UInt64;
  peakMemoryBytes @6 :UInt64;
}

# One change of a running job, timed by its master (scheduler::change_report); -1 = n/a.
struct ChangeReport {
  what @0 :Text;               # "workers 3", "shards 2", "migrate 0 to node-b"
  step @1 :Int64;              # first step of the new configuration
  joinMs @2 :Float64;          # request -> first step with the new workers applied
  transferMs @3 :Float64;      # migrate orders sent -> last slice adopted
  movedBytes @4 :UInt64;       # values and optimizer state moved
  gapMs @5 :Float64;           # between the step before the change and its first step applied
  stepMs @6 :Float64;          # median gap between applied steps before the request
  pauseMs @7 :Float64;         # gapMs - stepMs, at least 0
  samplesPerSecondBefore @8 :Float64;
  samplesPerSecondAfter @9 :Float64;
  prepareMs @10 :Float64;      # request -> a migration's new shard placed and its memory warmed
  stepSpreadMs @11 :Float64;   # longest gap before the request - stepMs (the noise of a pause)
}

struct StatusReply {
  jobs @0 :List(JobStatus);
  error @1 :Envelope.Error;    # e.g. not_found for an unknown job
}

# coach nodes
struct NodesRequest {}

# This version writes `statuses` only and reads only it; `nodes` and `dead` stay in place for the
# contract (never reused).
struct NodesReply {
  nodes @0 :List(Cluster.Heartbeat);  # the latest heartbeat of each live node
  dead @1 :List(Text);         # names of nodes that stopped heartbeating
  statuses @2 :List(NodeStatus);  # every known node, live and dead (what this version writes)
}

# What `coach nodes` shows of one node (actors::node_status).
struct NodeStatus {
  heartbeat @0 :Cluster.Heartbeat;  # its latest heartbeat
  secondsSince @1 :Float64;    # since that heartbeat arrived at the scheduler
  alive @2 :Bool;              # false once its heartbeats stopped
}

# coach cancel JOB
struct CancelRequest {
  job @0 :UInt64;
}

# Forget an ended job: the scheduler drops it from its list and its store (coach experiment
# does, for the jobs it ran). Answered with Ack.
struct ForgetRequest {
  job @0 :UInt64;
}

# coach rescale JOB --workers N [--shards M]
struct RescaleRequest {
  job @0 :UInt64;
  workers @1 :UInt32;          # 0 = unchanged
  shards @2 :UInt32;           # 0 = unchanged
  release @3 :Bool;            # coach rescale JOB --release: the held counts are released
}

# coach migrate JOB --shard K --to NODE
struct MigrateRequest {
  job @0 :UInt64;
  shard @1 :UInt32;
  toNode @2 :Text;             # node name
  release @3 :Bool;            # coach migrate JOB --shard K --release: shard K is unpinned
}

# coach policy get | coach policy set NAME
struct PolicyRequest {
  union {
    get @0 :Void;
    set @1 :Text;              # fifo | elastic-fifo | round-robin | coach
  }
}

struct PolicyReply {
  active @0 :Text;             # the policy in force after the request
  error @1 :Envelope.Error;
}

# Answer to cancel, rescale and migrate: done, or why not.
struct Ack {
  error @0 :Envelope.Error;    # null when the request was carried out
}

# coach logs JOB [-f]: the job's history after event `after` (0: all the scheduler keeps).
struct LogsRequest {
  job @0 :UInt64;
  after @1 :UInt64;
}

struct JobEvent {
  seq @0 :UInt64;              # 1, 2, ... per job
  time @1 :Float64;            # Unix seconds
  text @2 :Text;
}

struct LogsReply {
  events @0 :List(JobEvent);   # oldest first
  over @1 :Bool;               # the job ended: nothing more will come
}

# One request from the CLI to the scheduler, and its reply, as the job API frames them.
struct Request {
  sequence @0 :UInt64;         # echoed in the reply
  union {
    submit @1 :SubmitRequest;
    status @2 :StatusRequest;
    nodes @3 :NodesRequest;
    cancel @4 :CancelRequest;
    rescale @5 :RescaleRequest;
    migrate @6 :MigrateRequest;
    policy @7 :PolicyRequest;
    logs @8 :LogsRequest;
    forget @9 :ForgetRequest;
  }
}

# `error` is where this version reports a failure, whatever the reply's kind (the kind tells which
# request failed). It does not write the per-kind errors (SubmitReply.error, StatusReply.error,
# Ack.error); a reader takes one of those when `error` is null.
struct Reply {
  sequence @0 :UInt64;
  union {
    submit @1 :SubmitReply;
    status @2 :StatusReply;
    nodes @3 :NodesReply;
    ack @4 :Ack;
    policy @5 :PolicyReply;
    logs @7 :LogsReply;
  }
  error @6 :Envelope.Error;    # why the request failed, for every kind of reply; null = it worked
}
