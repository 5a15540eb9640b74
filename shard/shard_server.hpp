#pragma once
// shard::shard_server: one replica of a parameter-server shard as it meets the data path: the
// messages of its job (pushes, pulls, snapshot requests, configurations, migrate orders,
// transfers, and a replica chain's acknowledgements and take-overs) turned into calls on the
// shard's logic (ps::shard), and the answers, transfers and acknowledgements it sends back.
//
// What it adds to ps::shard: who waits for which version (pulls and snapshot requests, answered
// with one message holding every range, keys no longer owned answered `moved`; rows_pulls of
// sparse rows, answered with the rows, those it no longer holds named by their keys); a step's
// answers sent piece by piece to its pushers as the pieces are updated, in messages of about
// piece_floats floats; migrate orders and transfers applied once the shard reaches their
// version, each transfer sent after the answers of the step before it (they are on the
// workers' critical path, the transfer has their compute time to travel in); the consistency
// mode's rules (asp: each push applied on arrival and answered with the values as they are);
// and the replica chain (docs/design.md "Shard replicas"): copies forwarded to the next
// replica, acknowledgements to the one before, a head that answers only what the whole chain
// holds, a backup that keeps what the master asked of it and takes over when told.
//
// actors/shard_actor.cpp turns CAF messages into these calls; tests/unit/shard/ drive it with
// no actor system. Threads: one owner.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "ps/replica_chain.hpp"
#include "ps/shard.hpp"
#include "shard/answers_token.hpp"
#include "wire/elastic_messages.hpp"
#include "wire/message.hpp"

namespace coach::shard {

/// Who the server is and whom it talks to.
struct shard_server_setup {
  std::uint64_t job = 1;
  wire::endpoint self;    ///< this replica's endpoint (the sender of what it sends)
  wire::endpoint master;  ///< the job master's
  /// The endpoint of shard k's primary (where a transfer to shard k goes).
  std::function<wire::endpoint(std::uint32_t k)> shard_ep;
  std::size_t num_params = 0;       ///< floats in the job's parameter vector
  std::size_t slice_size = 0;       ///< floats a slice (to read configurations)
  std::size_t state_per_param = 0;  ///< optimizer floats a key (to read transfers)
  /// Replicas: this one's place (0: the primary) among `replicas` (1: none), and the
  /// endpoints of the replicas before and after it in the chain.
  std::uint32_t replica = 0;
  std::uint32_t replicas = 1;
  wire::endpoint prev;
  wire::endpoint next;
};

/// What the server does outside itself.
struct shard_server_ports {
  /// A message to a worker, the master, another shard or replica.
  std::function<void(wire::wire_message)> send;
  /// Called on any thread when a step's answers that a transfer waits for have left this
  /// process (their answers_token ended); the owner then calls answers_left() on its own
  /// thread. Not called for steps that queue no transfer. Empty: answers carry no token, and
  /// the transfers wait for nothing.
  std::function<void()> answers_gone;
};

class shard_server {
 public:
  /// Serves `core` (configured, and holding its starting state). `be` is the backend `core`
  /// computes on, kept as long as the server.
  shard_server(shard_server_setup setup, shard_server_ports ports,
               std::unique_ptr<kernels::backend> be, std::unique_ptr<ps::shard> core);

  /// A message of the data path addressed to this replica. Anything malformed or unexpected is
  /// counted (protocol_errors) and logged, never applied.
  void on_message(wire::wire_message& m);
  /// The answers of the last step have left this process: the transfers that waited go.
  void answers_left();

  const ps::shard& core() const { return *core_; }
  /// Malformed or unexpected messages met so far.
  std::uint64_t protocol_errors() const { return protocol_errors_; }

 private:
  /// A pull or snapshot request waiting for its version.
  struct waiter {
    wire::endpoint who;
    std::vector<ps::key_range> asked;  ///< empty: every key owned
    bool state = false;                ///< a snapshot with the optimizer state (flag::with_state)
    /// asp: the version the master asked for, answered with a later one (-1: none such).
    std::int64_t version = -1;
    /// A rows_pull (sparse tables): the request, answered with the rows it names (rows frames).
    std::shared_ptr<const wire::wire_message> rows;
  };

  void report(const coach::error& e);
  wire::wire_message params_to(const wire::endpoint& dst, std::int64_t version) const;
  std::vector<ps::key_range> not_owned(std::vector<ps::key_range> asked) const;
  void serve(std::int64_t v);
  void on_piece(const ps::piece& p);
  void send_pieces();
  void answers_made();
  void send_transfers();
  void answer_applied();
  void on_configure(const wire::wire_message& m);
  void on_migrate(const wire::wire_message& m);
  void on_transfer(wire::wire_message& m);
  void run_moves();
  int run_moves_once();
  int resume();
  void want(std::int64_t v, const wire::endpoint& who, std::vector<ps::key_range> asked, bool pull,
            bool state);
  void on_push_alone(std::int64_t step, const wire::wire_message& m, ps::contribution c);
  void on_push(wire::wire_message& m);
  void answer_step(std::int64_t step);
  // Replica chain (shard_server_replicas.cpp).
  void forward(const wire::wire_message& m);
  void on_push_copy(std::int64_t step, const wire::wire_message& m, ps::contribution c);
  bool held_before(const wire::wire_message& m) const;
  bool serve_retained(std::int64_t v, const wire::endpoint& who, bool state);
  void chain_moved();
  void tell_prev(std::int64_t v);
  void release_gated();
  void serve_passed();
  bool chain_entry(wire::wire_message& m);
  void take_over();
  void handle(wire::wire_message& m);
  // Sparse rows (shard_server_rows.cpp).
  void on_rows_pull(const wire::wire_message& m);
  void send_rows(const waiter& w, std::int64_t v);
  /// The row gradients after a push's dense frames, into c.rows; false (reported) if malformed.
  bool read_push_rows(const wire::wire_message& m, ps::contribution& c);

  shard_server_setup setup_;
  shard_server_ports ports_;
  std::unique_ptr<kernels::backend> be_;
  std::unique_ptr<ps::shard> core_;
  /// Pull and snapshot requests by version: answered with one message holding every range.
  std::map<std::int64_t, std::vector<waiter>> waiting_;
  /// Who pushed to each step not answered yet (the open one and, in ssp:S, later ones held):
  /// each gets the step's result piece by piece, as soon as the pieces are updated (ps::piece),
  /// in params messages of about piece_floats floats.
  std::map<std::int64_t, std::vector<wire::endpoint>> pushers_;
  /// Finished pieces of the step being applied not sent yet: small pieces (a shard owning many
  /// short ranges) go out together, so a push is answered in as few messages as the piece size
  /// allows; each message costs several thread wake-ups (docs/performance.md, ps_bench).
  std::vector<ps::piece> unsent_;
  std::size_t unsent_floats_ = 0;
  /// Migrate orders and transfers waiting for this shard to reach their version.
  std::vector<wire::migrate_order> releases_;
  /// The newest configuration a release of this shard leads to: a `moved` answer names it, so
  /// the requester waits for that configuration (the master publishes it only after the
  /// transfer, so this shard may not have it yet).
  std::uint64_t released_for_ = 0;
  std::vector<ps::slice_transfer> adoptions_;
  /// A re-issue's configurations before its last (flag::more_configs): taken all at once.
  std::vector<ps::job_config> batch_;
  /// Each answer of a step carries `answering_` as its `sent` token; the token's end
  /// (answers_left) sends the transfers that waited for it.
  std::shared_ptr<answers_token> answering_;
  std::weak_ptr<answers_token> answers_out_;  ///< the last step's token, until its answers are out
  /// ports.answers_gone, shared by every token (a token may outlive the server).
  std::shared_ptr<const std::function<void()>> answers_gone_;
  std::vector<wire::wire_message> transfers_waiting_;
  /// The versions whose snapshot the master asked for (the last few): it asks in a
  /// snapshot_request and on the step's pushes (flag::snapshot), and is answered once.
  std::set<std::int64_t> snapshots_asked_;
  std::uint64_t protocol_errors_ = 0;
  /// Set when the shard has backups: this replica's place in the chain.
  std::optional<ps::replica_chain> chain_;
  /// A backup: messages sent to it as to a primary (a worker told of a take-over before this
  /// replica was), handled once it takes over.
  std::vector<wire::wire_message> parked_;
  /// The head: a completed step whose answers wait for the chain to hold its version.
  std::optional<std::int64_t> gated_step_;
  /// A backup: the snapshots the master asked of the versions it passed (flag::snapshot on a
  /// push's copy), kept in case the primary is lost before its answer left it; the head: those
  /// it passed before its chain held them (serve, serve_passed). The last two.
  std::map<std::int64_t, std::shared_ptr<const ps::slice_transfer>> retained_;
};

}  // namespace coach::shard
