# schemas/cluster.capnp: what node agents and the scheduler tell each other between hosts.
#
# RULES (the wire contract):
#   - Field ordinals (@N), enumerant numbers and union members are NEVER renumbered, reordered
#     or reused. A new field takes the next free ordinal; an unwanted one stays in place.
#   - Adding fields is always compatible (old readers skip them, new readers see defaults).
#   - The file id below is fixed forever.

@0x9a0e600ee7542812;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("coach::schemas");

using Envelope = import "/schemas/envelope.capnp";

# A node agent's periodic report of itself (scheduler::host_resources plus identity). Resources
# are measured, so processes that are not Coach's count.
struct Heartbeat {
  nodeName @0 :Text;           # coach-node --name
  listenAddress @1 :Text;      # "tcp://IP:PORT" of its data-path socket
  hostId @2 :UInt32;           # the host number in Endpoint.host
  cpusTotal @3 :UInt32;        # online logical CPUs (capped by --cpus)
  cpusFree @4 :Float64;        # in [0, cpusTotal], over the last interval
  gpusTotal @5 :List(UInt32);  # GPU ids (nvidia-smi indices), ascending (capped by --gpus)
  gpusFree @6 :List(UInt32);   # ids with no compute process; a subset of gpusTotal
  memoryTotal @7 :UInt64;      # bytes
  memoryFree @8 :UInt64;       # bytes available
  actorsRunning @9 :UInt32;    # Coach actors (shards, workers) this node runs
  sequence @10 :UInt64;        # increases by one per heartbeat of one node process
  unixTimeMs @11 :Int64;       # sender's clock when measured
  load1 @12 :Float64;          # one-minute load average
  gpuError @13 :Text;          # why GPU detection failed; empty when it worked
  draining @14 :Bool;          # SIGTERM received: takes no new work, leaves when its work ends
  traffic @15 :List(LinkTraffic);  # cumulative bytes this node's transport sent, per job and link
  gpusHeld @16 :List(GpuHold);     # the GPUs Coach's workers hold on this node
  publicKey @17 :Text;         # its CURVE public key (Z85, 40 characters); empty: it has none
  cpusExternal @18 :Float64;   # CPUs programs other than Coach kept busy; 0 under reserved accounting
}

# A GPU one of Coach's workers holds (scheduler::gpu_hold): worker `rank` of `job` runs on GPU
# `device`, its own (gpus_per_worker >= 1) or shared.
struct GpuHold {
  job @0 :UInt64;
  rank @1 :UInt32;
  device @2 :UInt32;
  own @3 :Bool;
}

# Messages and bytes one job sent from one host to another (actors::link_traffic), as counted by
# the sender's transport since it started. job 0: traffic of no job (control messages).
struct LinkTraffic {
  job @0 :UInt64;
  srcHost @1 :UInt32;
  dstHost @2 :UInt32;
  messages @3 :UInt64;
  bytes @4 :UInt64;
}

# A command from the scheduler to a node agent.
struct NodeCommand {
  sequence @0 :UInt64;         # scheduler's command number, echoed in the reply
  job @1 :UInt64;
  union {
    startShard @2 :StartShard;
    startWorker @3 :StartWorker;
    stopActor @4 :StopActor;
  }

  struct StartShard {
    shard @0 :UInt32;          # shard index in the job's shard map
    self @1 :Envelope.Endpoint;     # the endpoint the new shard answers at
    master @2 :Envelope.Endpoint;   # the job master it reports to
  }

  struct StartWorker {
    rank @0 :UInt32;
    self @1 :Envelope.Endpoint;
    master @2 :Envelope.Endpoint;
    gpus @3 :List(UInt32);     # GPU ids to use; empty = CPU
  }

  struct StopActor {
    actor @0 :Envelope.Endpoint;
  }
}

# A node agent's answer to a NodeCommand.
struct NodeCommandReply {
  sequence @0 :UInt64;         # the command's sequence
  error @1 :Envelope.Error;    # null when the command succeeded
}
