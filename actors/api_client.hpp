#pragma once
// actors::api_client: the `coach` CLI's end of the job API. It opens a ZeroMQ transport of its own
// (host id from client_host_id(), not a node), sends one api_request to the scheduler at an
// address and waits for the api_reply, which comes back on the same connection.

#include <caf/actor_system.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "actors/control.hpp"
#include "actors/curve_keys.hpp"
#include "common/error.hpp"

namespace coach::actors {

class api_client {
 public:
  /// Prepares a client of the scheduler at `address` ("tcp://HOST:PORT" or "HOST:PORT",
  /// actors/address.hpp), authenticated with `security`'s key when it has one. Errors: a
  /// malformed address (invalid_argument).
  static result<std::unique_ptr<api_client>> open(const std::string& address,
                                                  transport_security security = {});
  ~api_client();

  /// Waits until this client's connection to the scheduler's node is made (its handshake
  /// done), at most `within`. Errors naming the address: io_error when the connection is
  /// refused (nothing listens there) or none is made in time; not_authorized when the node
  /// refuses this client's key. For a user's command: the scheduler is not waited for. After a
  /// refusal the client's connection is closed (no reconnection: one attempt, one refusal
  /// counted at the node) and reach and call fail with the same reason.
  /// `slow` (if set) is called once when the connection has taken `slow_after` without an
  /// answer (a scheduler's host under load, a filtered network): to say what the wait is for.
  result<void> reach(std::chrono::milliseconds within = std::chrono::seconds(2),
                     std::function<void()> slow = {},
                     std::chrono::milliseconds slow_after = std::chrono::seconds(2));

  /// Sends `req` and waits up to `timeout` for the reply. Errors: io_error naming the address
  /// when no reply came in time (nothing listens there, or it is not a scheduler);
  /// not_authorized as soon as the node refuses this client's key or its lack of one. The
  /// scheduler's own refusal comes back as api_reply::failure, not as an error here.
  /// `resend_every` (0: never): while no reply came, the request is sent again this often (a
  /// scheduler that restarted meanwhile lost it); only for requests that are safe to repeat
  /// (status, nodes, a submit with a token).
  result<api_reply> call(const api_request& req,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10),
                         std::chrono::milliseconds resend_every = std::chrono::milliseconds(0));

  api_client(const api_client&) = delete;
  api_client& operator=(const api_client&) = delete;

 private:
  api_client() = default;
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace coach::actors
