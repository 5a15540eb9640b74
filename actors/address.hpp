#pragma once
// actors/address: the addresses users give (`coach --at`, `coach-node --join`): their forms, and
// whether their host name resolves. ZeroMQ resolves and connects in the background and retries
// forever, so a name that does not resolve would only show as a reply that never comes; the CLI
// looks it up first (whether something answers there: api_client::reach).
//
// Plain functions, no state.

#include <string>
#include <string_view>

#include "common/error.hpp"

namespace coach::actors {

/// A scheduler address as the user may give it: "tcp://HOST:PORT" or "HOST:PORT" (HOST a name,
/// an IPv4 address, or an IPv6 one in brackets). Returns the "tcp://HOST:PORT" form ZeroMQ
/// takes. invalid_argument naming `flag` when it is neither, or PORT is not 1..65535.
result<std::string> tcp_address(std::string_view address, std::string_view flag = "--at");

/// Looks up the host of `address` ("tcp://HOST:PORT"). not_found naming the address and the
/// host when the name does not resolve.
result<void> resolve_address(const std::string& address);

/// A node's own address as the user may give it (`coach-node --listen`, `--advertise`):
/// "tcp://HOST:PORT" or "HOST:PORT", where HOST may be a name ("localhost"): ZeroMQ binds only
/// to an IP address, `*` or an interface, and takes a name for an interface ("No such
/// device"). Returns "tcp://IP:PORT", a name replaced by its first IPv4 address (else IPv6);
/// `*` and IP addresses unchanged. invalid_argument naming `flag` for a malformed address,
/// not_found when the name does not resolve.
result<std::string> node_address(std::string_view address, std::string_view flag);

/// Whether `join` ("tcp://IP:PORT", resolved) reaches this node itself, which listens on
/// `listen` and is reached at `advertised` (both as node_address returns them): the same
/// address, or the same port on a loopback address or this host's advertised IP while it
/// listens on every interface.
bool joins_itself(const std::string& join, const std::string& listen,
                  const std::string& advertised);

}  // namespace coach::actors
