#pragma once
// actors/http_response.hpp: how actors::http_server writes its answers (internal to it).

#include <string>
#include <string_view>

#include "actors/http_server.hpp"

namespace coach::actors::http_detail {

/// The reason phrase of an HTTP status ("Not Found").
const char* reason_of(int status);
/// Writes `data` to `fd`. On a blocking socket (a handler thread's: its send timeout bounds a
/// reader that does not read), all of it; on the reading thread's non-blocking one, what the
/// kernel takes at once (a short answer fits its buffer; that thread never waits on a client).
void write_out(int fd, std::string_view data);
/// Writes `r` as a whole answer that closes the connection (`head`: without its body).
void respond(int fd, const http_response& r, bool head = false);
/// A text/plain answer.
http_response text(int status, std::string body);

}  // namespace coach::actors::http_detail
