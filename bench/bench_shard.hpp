#pragma once
// bench/bench_shard.hpp: the shard process of the data-path benchmarks (ps_bench,
// sparse_bench): one shard of a job, on the ZeroMQ transport, run as coach-node runs its actors,
// until SIGTERM.

#include <unistd.h>

#include <caf/all.hpp>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/roles.hpp"
#include "actors/zmq_transport.hpp"
#include "common/log.hpp"

namespace coach::bench {

/// Serves shard `id` (host id + 1) of the job `make_context` builds on this process's
/// transport, its initial values those the context's map gives it of `initial` (the whole
/// vector); `parent` is host 0's address; writes a byte to `ready_fd` (when >= 0) once bound, so
/// the parent's first message finds it. Returns 1, saying why on stderr, when it cannot start.
inline int serve_shard_process(
    const char* bench, std::uint32_t id, actors::zmq_transport_options options,
    const std::string& parent, int ready_fd,
    const std::function<std::shared_ptr<actors::job_context>(std::shared_ptr<actors::transport>)>&
        make_context,
    const std::function<std::vector<float>(const actors::job_context&)>& initial) {
  // The bench ends a configuration by closing its side and then killing the shards: the
  // warning a shard would log about its peer's going is expected, so only errors are shown.
  (void)log::init({.program = bench, .min = log::level::error});
  options.host = id + 1;
  auto net = actors::zmq_transport::start(std::move(options));
  if (!net) {
    std::fprintf(stderr, "%s shard: %s\n", bench, net.error().to_string().c_str());
    return 1;
  }
  (*net)->add_peer(0, parent);
  caf::actor_system_config cfg;
  cfg.set("logger.console", caf::atom("none"));
  cfg.set("scheduler.max-threads", std::size_t(1));
  // As coach-node runs its actors: idle scheduler threads park on a condition variable. CAF's
  // default (work stealing) polls with 50 us sleeps, which added ~60 us to every hand-off from
  // the transport to the shard here, a cost a deployed shard does not pay.
  cfg.set("scheduler.policy", caf::atom("sharing"));
  caf::actor_system sys{cfg};
  auto ctx = make_context(*net);
  actors::spawn_shard(sys, ctx, id, initial(*ctx));
  if (ready_fd >= 0) {
    const char one = 1;
    [[maybe_unused]] auto n = ::write(ready_fd, &one, 1);
    ::close(ready_fd);
  }
  pause();  // until SIGTERM
  return 0;
}

}  // namespace coach::bench
