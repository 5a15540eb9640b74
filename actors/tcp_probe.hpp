#pragma once
// actors::tcp_probe: whether anything answers at a scheduler's address, found out within a
// bound. ZeroMQ connects in the background and retries forever, so a `coach` command sent to an
// address where nothing listens would only learn it when its reply timed out (10 s, 120 s for a
// submit). The CLI probes first with a plain TCP connect: a name that does not resolve, a
// refused connection or a silent address is a one-line error at once (within `within`).
//
// Plain functions, no state; each call opens and closes its own socket.

#include <chrono>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace coach::actors {

/// A scheduler address as the user may give it: "tcp://HOST:PORT" or "HOST:PORT" (HOST a name,
/// an IPv4 address, or an IPv6 one in brackets). Returns the "tcp://HOST:PORT" form ZeroMQ
/// takes. invalid_argument naming `flag` when it is neither, or PORT is not 1..65535.
result<std::string> tcp_address(std::string_view address, std::string_view flag = "--at");

/// Connects to `address` ("tcp://HOST:PORT") and closes again. Errors, each naming the address:
/// not_found (the host name does not resolve), io_error (connection refused: nothing listens
/// there; or no answer within `within`, or the network is unreachable).
result<void> tcp_probe(const std::string& address,
                       std::chrono::milliseconds within = std::chrono::seconds(2));

}  // namespace coach::actors
