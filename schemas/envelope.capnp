# schemas/envelope.capnp: the header frame of every data-path message between hosts.
#
# A data-path message is one ZeroMQ multipart message: this header (a Cap'n Proto message in the
# standard unpacked framing), then the payload frames as raw bytes (docs/wire.md).
# actors/codec.cpp is the only code that reads or writes it; the core speaks actors::envelope.
#
# RULES (the wire contract):
#   - Field ordinals (@N) and enumerant numbers are NEVER renumbered, reordered or reused. A new
#     field takes the next free ordinal; a field that is no longer wanted is left in place
#     (renamed obsoleteX if needed) so old peers still read the rest.
#   - Adding a field never needs a new wire version: old readers skip it, new readers see its
#     default. Only a change old peers cannot read bumps Envelope.version (codec::wire_version).
#   - The file id below is fixed forever.

@0xb4e866f729630778;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("coach::schemas");

# Where an actor lives (actors::endpoint): a host number and an id unique on the cluster.
struct Endpoint {
  host @0 :UInt32;
  id @1 :UInt64;
}

# A half-open run [begin, end) of parameter indices (ps::key_range). begin <= end.
struct KeyRange {
  begin @0 :UInt64;
  end @1 :UInt64;
}

# Kinds of data-path messages. The numbers equal actors::msg_kind's; `unknown` (0, the default)
# is never sent: a header that carries it is refused.
enum MsgKind {
  unknown @0;
  chunkRequest @1;     # worker -> master: step, rank
  chunkGrant @2;       # master -> worker: step, epoch, chunkId, flags; frame 0 = sample indices (u32)
  pull @3;             # worker -> shard: step = parameter version wanted, ranges
  push @4;             # worker -> shard: step, rank, samples, loss, ranges; one frame per range
  params @5;           # shard -> worker or master: step = version, ranges; one frame per range
  snapshotRequest @6;  # master -> shard: step = version wanted (for evaluation)
  stepReport @7;       # worker -> master: step, rank, samples, loss, chunkId, computeUs
  control @8;          # any process -> any: frame 0 = a ControlMessage (schemas/control.capnp)
  configure @9;        # master -> shard or worker: mapVersion = config version, step = from step;
                       # frame 0 = member ranks (u32, ascending), frame 1 = owner of each slice (u32)
  migrate @10;         # master -> source shard: step = boundary version, rank = destination shard,
                       # mapVersion = the configuration it leads to, ranges = keys to hand over
  transfer @11;        # shard -> shard: step = version, chunkId = updates (Adam's t), rank = source
                       # shard, epoch = destination shard, ranges; frames: values, then optimizer
                       # state (one frame per state float per key: none, 1 or 2)
  transferAck @12;     # destination shard -> master: step = version, rank = destination shard,
                       # epoch = source shard
  moved @13;           # shard -> worker or master: step = version asked for, mapVersion = the
                       # configuration that moved the keys, ranges = keys asked for that it no
                       # longer owns
  state @14;           # shard -> master: the answer to a snapshotRequest with flag with_state (4):
                       # laid out as a transfer (step = version, chunkId = updates, samples =
                       # samples applied, rank = epoch = the shard, ranges = every key it owns;
                       # frames: values, then optimizer state)
  replicaAck @15;      # backup shard -> the replica before it in the shard's chain: step = version
                       # held (every step before it applied here and after), rank = the shard
  takeOver @16;        # master -> a backup shard and every worker: shard `rank`'s primary is now
                       # host `epoch`, id `chunkId`; mapVersion = the master's configuration
  replicaLost @17;     # master -> a replica of shard `rank`: the replicas after it are gone
  rowsPull @18;        # worker -> shard: step = version wanted; frames: tables (u32, one a part),
                       # then each part's row ids (u64) (docs/wire.md "Sparse rows")
  rows @19;            # shard -> worker: step = version; frames: tables (u32), then each part's
                       # ids (u64) and values (f32); ranges = keys of rows asked that it no
                       # longer owns, mapVersion = the configuration that moved them
}

# An error that crosses the network intact: coach::errc's number (docs/errors.md, 1..9) and the
# one-line message. Absent (a null pointer) means "no error".
struct Error {
  code @0 :UInt16;
  message @1 :Text;
}

# The header of a data-path message (actors::envelope plus what the wire needs).
struct Envelope {
  version @0 :UInt16;          # wire version (codec::wire_version); a reader refuses any other
  src @1 :Endpoint;
  dst @2 :Endpoint;
  kind @3 :MsgKind;
  job @4 :UInt64;
  mapVersion @5 :UInt64;       # shard map version the sender used
  step @6 :Int64;
  rank @7 :UInt32;
  epoch @8 :UInt32;
  samples @9 :UInt64;
  loss @10 :Float64;
  chunkId @11 :UInt64;
  computeUs @12 :UInt64;
  flags @13 :UInt8;            # actors::flag bits; unknown bits are ignored by readers
  ranges @14 :List(KeyRange);
  frameBytes @15 :List(UInt64);  # size in bytes of each payload frame that follows, in order
  error @16 :Error;            # set when the message reports a failure to its receiver
  # lr_scaling adascale (ps/adascale.hpp), else empty. params: this shard's sums over its keys of
  # the step that produced the version [version, partsSq, sumSq, samples, contributions]; push:
  # the same summed over every shard, of the version the gradient was computed from; transfer:
  # the source's gain estimate [version, variance, meanSq].
  gradStats @17 :List(Float64);
}
