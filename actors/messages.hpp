#pragma once
// actors/messages.hpp: the data path's message structs (wire/message.hpp) as the actors name
// them, and the CAF atoms of the control messages between actors of one process.

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include "wire/message.hpp"

namespace coach::actors {
/// The actors speak the data path's messages (wire/): its names are theirs.
using namespace wire;
}  // namespace coach::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(coach::wire::wire_message)

namespace coach::actors {
// Control atoms (local to a process in this version). CAF 0.17 atoms: at most 10 characters.
using start_atom = caf::atom_constant<caf::atom("start")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using progress_atom = caf::atom_constant<caf::atom("progress")>;
using epoch_atom = caf::atom_constant<caf::atom("epoch")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using eval_atom = caf::atom_constant<caf::atom("eval")>;
using submit_atom = caf::atom_constant<caf::atom("submit")>;
using traffic_atom = caf::atom_constant<caf::atom("traffic")>;
/// (watch_atom, rank, worker): the job master watches a worker; its death drops it from the job.
using watch_atom = caf::atom_constant<caf::atom("watch")>;
/// (lost_atom, ranks): workers of the job died (their node stopped heartbeating); the job
/// master drops them and goes on.
using lost_atom = caf::atom_constant<caf::atom("lost")>;
/// (take_over_atom, heads, cut): shard replicas lost with a node (docs/design.md "Shard
/// replicas"). `heads`: pairs (shard, replica) flattened, the backup that becomes each listed
/// shard's primary; `cut`: pairs (shard, replica), the replica whose successors are gone.
using take_over_atom = caf::atom_constant<caf::atom("takeover")>;
/// (ready_atom, worker?, id, error): a part the job master asked for through its elastic hooks
/// started elsewhere (error empty) or could not start (error says why).
using ready_atom = caf::atom_constant<caf::atom("ready")>;
/// (rescale_atom, workers, shards) -> std::string: change a running job's counts at its next
/// step boundary (0: unchanged); the answer is empty, or why the change is refused.
using rescale_atom = caf::atom_constant<caf::atom("rescale")>;
/// (migrate_atom, shard, node) -> std::string: move every slice of a shard to a new shard (on
/// `node`, when not empty) at the next step boundary; the answer is empty, or why not.
using migrate_atom = caf::atom_constant<caf::atom("migrate")>;
/// (checkpoint_atom, param_snapshot): a job master tells its observer the parameters at the end
/// of an epoch (sent before that epoch's epoch_atom), for a checkpoint.
using checkpoint_atom = caf::atom_constant<caf::atom("checkpt")>;
}  // namespace coach::actors
