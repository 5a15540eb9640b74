# schemas/control.capnp: the control plane between processes (actors/control.hpp). Every control
# message travels as an Envelope of kind `control` (envelope.capnp) with exactly one payload
# frame: a ControlMessage, in the standard unpacked framing. actors/control.cpp is the only code
# that reads or writes it; the core speaks actors::control_message. docs/wire.md, "Control plane".
#
# RULES (the wire contract):
#   - Field ordinals (@N), enumerant numbers and union members are NEVER renumbered, reordered
#     or reused. A new field takes the next free ordinal; an unwanted one stays in place.
#   - Adding fields is always compatible (old readers skip them, new readers see defaults).
#   - The file id below is fixed forever.

@0x87a81bdaacb1f707;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("coach::schemas");

using Envelope = import "/schemas/envelope.capnp";
using Cluster = import "/schemas/cluster.capnp";
using JobApi = import "/schemas/job_api.capnp";

# Scheduler -> node agent: run your part of a job (actors::start_job). Every node of the job gets
# the same description; a node runs the shards (workersPhase false) or the worker ranks
# (workersPhase true) placed on its host.
struct StartJob {
  job @0 :UInt64;
  workersPhase @1 :Bool;
  specYaml @2 :Text;           # the job spec as submitted
  sourceName @3 :Text;         # for error messages
  baseDir @4 :Text;            # the spec file's folder: its relative paths resolve there
  masterHost @5 :UInt32;       # host of the job master
  shardHosts @6 :List(UInt32);   # host of each shard, by shard id
  workerHosts @7 :List(UInt32);  # host of each worker, by rank
  peers @8 :List(Peer);        # the data-path address of every host of the job
  addedShards @9 :List(PartHost);   # shards added while the job runs (ids past shardHosts)
  addedWorkers @10 :List(PartHost); # workers added while the job runs (ranks past workerHosts)
  start @11 :AddedPart;        # set: a running job grows by this part, started by the node
                               # that addedShards/addedWorkers place it on (every other node of
                               # the job learns where it runs); null: workersPhase says what
  firstStep @12 :Int64;        # the step the job starts at: its checkpoint's version (0: new)
  initialUpdates @13 :Int64;   # with initial state frames: the checkpoint's update count
  initialSamplesApplied @14 :UInt64;  # ... and its samples applied (ps::training_state)
  backupHosts @15 :List(List(UInt32));  # shard replicas: by shard id, the hosts of its backups
                               # in chain order (backup i on element i - 1); empty: none
  run @16 :UInt32;             # the job's run (the scheduler's generation) this start belongs
                               # to: a node that holds parts of another run of the job (it was
                               # taken for dead, and they went on) stops them first
  script @17 :JobApi.ScriptModel;  # set: the model is a script; its files (a bundle) are the
                               # last payload frame (after any initial state's)

  struct Peer {
    host @0 :UInt32;
    address @1 :Text;          # "tcp://IP:PORT"
    publicKey @2 :Text;        # its CURVE public key (Z85); empty: unknown or none
    name @3 :Text;             # its node name (coach-node --name); empty: unknown
  }

  struct PartHost {
    id @0 :UInt32;             # shard id or worker rank
    host @1 :UInt32;
    backups @2 :List(UInt32);  # an added shard's backups, in chain order (replicas > 1)
  }
}

# A shard or worker added to a running job, and the job configuration it starts under.
struct AddedPart {
  worker @0 :Bool;             # a worker (else a shard)
  id @1 :UInt32;               # its rank or shard id
  firstStep @2 :Int64;         # a worker's first step
  config @3 :JobConfig;
  expectKeys @4 :UInt64;       # a shard: keys it will adopt soon; its node warms memory for them
}

# ps::job_config: members and the owner of every slice of the parameter vector, from a step on.
struct JobConfig {
  version @0 :UInt64;
  fromStep @1 :Int64;
  members @2 :List(UInt32);    # worker ranks, ascending
  sliceOwners @3 :List(UInt32);  # shard id per slice (the job spec's slice_size)
}

# Scheduler -> node agent: stop every actor of the job (actors::stop_job).
struct StopJob {
  job @0 :UInt64;
}

# Scheduler -> node agent: its join is refused (actors::node_refused), e.g. its --name is taken
# by another live node; the node says why in one line and exits.
struct RefuseNode {
  reason @0 :Text;
}

# Node agent -> scheduler: the answer to a StartJob or StopJob (actors::command_reply).
struct CommandReply {
  job @0 :UInt64;
  error @1 :Envelope.Error;    # null when the command was carried out
  stopped @2 :Bool;            # answers a stopJob (a stop may be asked again; its answers are
                               # never taken for a start's)
}

# The one payload frame of a `control` envelope. A message whose union member is null (nothing
# set: the default member heartbeat with no struct) is refused, as is an unknown member.
struct ControlMessage {
  union {
    heartbeat @0 :Cluster.Heartbeat;  # node agent -> scheduler, periodically
    startJob @1 :StartJob;            # scheduler -> node agent
    stopJob @2 :StopJob;              # scheduler -> node agent
    commandReply @3 :CommandReply;    # node agent -> scheduler
    request @4 :JobApi.Request;       # `coach` CLI -> scheduler
    reply @5 :JobApi.Reply;           # scheduler -> `coach` CLI
    refuseNode @6 :RefuseNode;        # scheduler -> node agent
  }
}
