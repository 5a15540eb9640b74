// actors/control: the control plane's codec (docs/wire.md, "Control plane"). Every variant of
// control_message round-trips with every field set; every malformed payload (empty, truncated,
// garbage, flipped, unset or unknown union member, out-of-range values, oversized lists and
// texts) gives protocol_error with a one-line message, never a crash. Host ids and make_control.

#include "actors/control.hpp"
#include "worker/script_bundle.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "schemas/control.capnp.h"
#include "wire/codec.hpp"

namespace coach::actors {
namespace {

using bytes = std::vector<std::byte>;

// --- values with every field set, unlike its default and unlike each other -----------------

node_heartbeat full_heartbeat() {
  node_heartbeat h;
  h.name = "node-a";
  h.address = "tcp://10.1.2.3:5555";
  h.public_key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";  // Z85, 40 characters
  h.host = node_host_id(h.address);
  h.resources.cpus_total = 64;
  h.resources.cpus_free = 12.75;
  h.resources.memory_total = 256ull << 30;
  h.resources.memory_free = 100ull << 30;
  h.resources.gpus_total = {0, 1, 2, 3};
  h.resources.gpus_free = {1, 3};
  h.resources.gpus_held = {{5, 0, 0, true}, {6, 3, 2, false}, {6, 4, 2, false}};
  h.resources.load1 = 3.5;
  h.resources.gpu_error = "nvidia-smi: exit 9";
  h.actors_running = 7;
  h.sequence = 0x1234567890ull;
  h.unix_time_ms = -42;  // a clock before 1970 still round-trips
  h.draining = true;
  h.traffic = {{5, 11, 12, 100, 1 << 20}, {0, 11, 13, 3, 999}, {6, 11, 14, 1ull << 40, 1ull << 50}};
  return h;
}

start_job full_start_job() {
  start_job s;
  s.job = 0xdeadbeefcafeull;
  s.workers_phase = true;
  s.spec_yaml = "name: mnist\nepochs: 3\n";
  s.source_name = "jobs/mnist.yaml";
  s.base_dir = "/home/user/coach";
  s.master_host = 0x7000'0001;
  s.shard_hosts = {1, 2, 2, 3};
  s.worker_hosts = {3, 1, 0x7fff'ffff};
  s.backup_hosts = {{2, 3}, {1}, {3, 1}, {}};
  s.peers = {{1, "tcp://10.0.0.1:1", "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "node-a"},
             {2, "tcp://10.0.0.2:2", "", "n\u00e9ud \"b\""},
             {3, ""}};
  s.run = 0xfeed'0007;
  return s;
}

/// A running job grows: a worker (or a shard) added, placed, with its configuration.
start_job growing_start_job(bool worker) {
  start_job s = full_start_job();
  s.workers_phase = false;
  s.added_shards = {{4, 2, {3, 1}}, {5, 0x7fff'fffe}};  // shard 4 with two backups
  s.added_workers = {{3, 1}, {9, 3}};
  s.start = added_part{.worker = worker,
                       .id = worker ? 9u : 5u,
                       .first_step = worker ? 1234 : 0,
                       .version = 17,
                       .from_step = 1200,
                       .members = {0, 1, 2, 9},
                       .slice_owners = {0, 0, 5, 2, 1, 5, 4}};
  return s;
}

job_status full_job_status(std::uint64_t job) {
  job_status s;
  s.job = job;
  s.name = "mnist-" + std::to_string(job);
  s.state = job_state::failed;
  s.epochs_done = 2;
  s.epochs_total = 5;
  s.test_accuracy = 0.9731;
  s.samples_per_second = 12345.5;
  s.loss = 0.125;
  s.samples_done = 30000;
  s.samples_epoch = 60000;
  s.epoch_samples = {60000, 60000, 59999};
  s.workers = 3;
  s.shards = 2;
  s.worker_nodes = {"node-a", "node-b", "node-a"};
  s.shard_nodes = {"node-c", "node-b"};
  s.shard_ids = {0, 2};
  s.orders = {"shard 2 pinned to 'node-b' (coach migrate)", "workers 3 held (coach rescale)"};
  s.traffic = {{job, 1, 2, 10, 4096}, {job, 2, 1, 11, 8192}};
  s.error = "worker 2: out of memory";
  s.error_code = std::uint16_t(errc::resource_exhausted);
  s.seconds = 61.5;
  s.changes = {{"workers 3", 10, 41.5, -1, 0, 12.25, 3.5, 8.75, 9000.5, 12000.25},
               {"migrate 0 to node-b", 40, -1, 55.5, 1 << 30, 70.0, 5.0, 65.0, 1e6, 2e6}};
  s.model_json = R"({"model": "m", "theta": [1, 2, 3, 4, 5], "predicted_epoch_s": 1.5})";
  s.resumes = 2;
  return s;
}

node_status full_node_status(bool alive) {
  node_status n;
  n.last = full_heartbeat();
  n.last.name = alive ? "live" : "dead";
  n.seconds_since = alive ? 0.5 : 31.25;
  n.alive = alive;
  return n;
}

// --- field-by-field comparison (doubles by bits, so NaN compares equal to itself) ----------

void expect_same_double(double a, double b, const char* what) {
  EXPECT_EQ(std::bit_cast<std::uint64_t>(a), std::bit_cast<std::uint64_t>(b)) << what;
}

void expect_same(const scheduler::host_resources& a, const scheduler::host_resources& b) {
  EXPECT_EQ(a.cpus_total, b.cpus_total);
  expect_same_double(a.cpus_free, b.cpus_free, "cpus_free");
  EXPECT_EQ(a.memory_total, b.memory_total);
  EXPECT_EQ(a.memory_free, b.memory_free);
  EXPECT_EQ(a.gpus_total, b.gpus_total);
  EXPECT_EQ(a.gpus_free, b.gpus_free);
  EXPECT_EQ(a.gpus_held, b.gpus_held);
  expect_same_double(a.load1, b.load1, "load1");
  EXPECT_EQ(a.gpu_error, b.gpu_error);
}

void expect_same(const node_heartbeat& a, const node_heartbeat& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.address, b.address);
  EXPECT_EQ(a.public_key, b.public_key);
  EXPECT_EQ(a.host, b.host);
  expect_same(a.resources, b.resources);
  EXPECT_EQ(a.actors_running, b.actors_running);
  EXPECT_EQ(a.sequence, b.sequence);
  EXPECT_EQ(a.unix_time_ms, b.unix_time_ms);
  EXPECT_EQ(a.draining, b.draining);
  EXPECT_EQ(a.traffic, b.traffic);
}

void expect_same(const start_job& a, const start_job& b) {
  EXPECT_EQ(a.job, b.job);
  EXPECT_EQ(a.workers_phase, b.workers_phase);
  EXPECT_EQ(a.spec_yaml, b.spec_yaml);
  EXPECT_EQ(a.source_name, b.source_name);
  EXPECT_EQ(a.base_dir, b.base_dir);
  EXPECT_EQ(a.master_host, b.master_host);
  EXPECT_EQ(a.shard_hosts, b.shard_hosts);
  EXPECT_EQ(a.worker_hosts, b.worker_hosts);
  EXPECT_EQ(a.backup_hosts, b.backup_hosts);
  EXPECT_EQ(a.peers, b.peers);
  EXPECT_EQ(a.added_shards, b.added_shards);
  EXPECT_EQ(a.added_workers, b.added_workers);
  EXPECT_EQ(a.start, b.start);
  EXPECT_EQ(a.run, b.run);
  ASSERT_EQ(bool(a.script), bool(b.script));
  if (a.script) {
    EXPECT_EQ(a.script->entry, b.script->entry);
    EXPECT_EQ(a.script->layout_json, b.script->layout_json);
  }
}

void expect_same(const std::optional<error>& a, const std::optional<error>& b) {
  ASSERT_EQ(a.has_value(), b.has_value());
  if (!a) return;
  EXPECT_EQ(a->code, b->code);
  EXPECT_EQ(a->message, b->message);
}

void expect_same(const job_status& a, const job_status& b) {
  EXPECT_EQ(a.job, b.job);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.epochs_done, b.epochs_done);
  EXPECT_EQ(a.epochs_total, b.epochs_total);
  expect_same_double(a.test_accuracy, b.test_accuracy, "test_accuracy");
  expect_same_double(a.samples_per_second, b.samples_per_second, "samples_per_second");
  expect_same_double(a.loss, b.loss, "loss");
  EXPECT_EQ(a.samples_done, b.samples_done);
  EXPECT_EQ(a.samples_epoch, b.samples_epoch);
  EXPECT_EQ(a.epoch_samples, b.epoch_samples);
  EXPECT_EQ(a.workers, b.workers);
  EXPECT_EQ(a.shards, b.shards);
  EXPECT_EQ(a.worker_nodes, b.worker_nodes);
  EXPECT_EQ(a.shard_nodes, b.shard_nodes);
  EXPECT_EQ(a.shard_ids, b.shard_ids);
  EXPECT_EQ(a.orders, b.orders);
  EXPECT_EQ(a.traffic, b.traffic);
  EXPECT_EQ(a.error, b.error);
  EXPECT_EQ(a.error_code, b.error_code);
  expect_same_double(a.seconds, b.seconds, "seconds");
  EXPECT_EQ(a.model_json, b.model_json);
  EXPECT_EQ(a.resumes, b.resumes);
  ASSERT_EQ(a.changes.size(), b.changes.size());
  for (std::size_t i = 0; i < a.changes.size(); ++i) {
    const auto &x = a.changes[i], &y = b.changes[i];
    EXPECT_EQ(x.what, y.what);
    EXPECT_EQ(x.step, y.step);
    EXPECT_EQ(x.moved_bytes, y.moved_bytes);
    for (auto [p, q] : {std::pair{x.join_ms, y.join_ms},
                        {x.transfer_ms, y.transfer_ms},
                        {x.gap_ms, y.gap_ms},
                        {x.step_ms, y.step_ms},
                        {x.pause_ms, y.pause_ms},
                        {x.samples_per_s_before, y.samples_per_s_before},
                        {x.samples_per_s_after, y.samples_per_s_after}})
      expect_same_double(p, q, "change timing");
  }
}

void expect_same(const api_request& a, const api_request& b) {
  ASSERT_EQ(a.index(), b.index());
  if (const auto* x = std::get_if<submit_request>(&a)) {
    const auto& y = std::get<submit_request>(b);
    EXPECT_EQ(x->spec_yaml, y.spec_yaml);
    EXPECT_EQ(x->source_name, y.source_name);
    EXPECT_EQ(x->base_dir, y.base_dir);
    EXPECT_EQ(x->workers, y.workers);
    EXPECT_EQ(x->shards, y.shards);
    EXPECT_EQ(x->token, y.token);
    ASSERT_EQ(bool(x->script), bool(y.script));
    if (x->script) {
      EXPECT_EQ(x->script->entry, y.script->entry);
      EXPECT_EQ(x->script->layout_json, y.script->layout_json);
    }
  } else if (const auto* s = std::get_if<status_request>(&a)) {
    EXPECT_EQ(s->job, std::get<status_request>(b).job);
  } else if (const auto* c = std::get_if<cancel_request>(&a)) {
    EXPECT_EQ(c->job, std::get<cancel_request>(b).job);
  } else if (const auto* r = std::get_if<rescale_request>(&a)) {
    const auto& y = std::get<rescale_request>(b);
    EXPECT_EQ(r->job, y.job);
    EXPECT_EQ(r->workers, y.workers);
    EXPECT_EQ(r->shards, y.shards);
    EXPECT_EQ(r->release, y.release);
  } else if (const auto* m = std::get_if<migrate_request>(&a)) {
    const auto& y = std::get<migrate_request>(b);
    EXPECT_EQ(m->job, y.job);
    EXPECT_EQ(m->shard, y.shard);
    EXPECT_EQ(m->release, y.release);
    EXPECT_EQ(m->to_node, y.to_node);
  } else if (const auto* p = std::get_if<policy_request>(&a)) {
    EXPECT_EQ(p->set, std::get<policy_request>(b).set);
  } else if (const auto* l = std::get_if<logs_request>(&a)) {
    EXPECT_EQ(l->job, std::get<logs_request>(b).job);
    EXPECT_EQ(l->after, std::get<logs_request>(b).after);
  } else if (const auto* f = std::get_if<forget_request>(&a)) {
    EXPECT_EQ(f->job, std::get<forget_request>(b).job);
  }
}

void expect_same(const api_reply& a, const api_reply& b) {
  expect_same(a.failure, b.failure);
  ASSERT_EQ(a.body.index(), b.body.index());
  if (const auto* x = std::get_if<submit_reply>(&a.body)) {
    EXPECT_EQ(x->job, std::get<submit_reply>(b.body).job);
  } else if (const auto* s = std::get_if<status_reply>(&a.body)) {
    const auto& t = std::get<status_reply>(b.body);
    ASSERT_EQ(s->jobs.size(), t.jobs.size());
    for (std::size_t i = 0; i < s->jobs.size(); ++i) expect_same(s->jobs[i], t.jobs[i]);
  } else if (const auto* n = std::get_if<nodes_reply>(&a.body)) {
    const auto& m = std::get<nodes_reply>(b.body);
    ASSERT_EQ(n->nodes.size(), m.nodes.size());
    for (std::size_t i = 0; i < n->nodes.size(); ++i) {
      expect_same(n->nodes[i].last, m.nodes[i].last);
      expect_same_double(n->nodes[i].seconds_since, m.nodes[i].seconds_since, "seconds_since");
      EXPECT_EQ(n->nodes[i].alive, m.nodes[i].alive);
    }
  } else if (const auto* p = std::get_if<policy_reply>(&a.body)) {
    EXPECT_EQ(p->active, std::get<policy_reply>(b.body).active);
  } else if (const auto* l = std::get_if<logs_reply>(&a.body)) {
    EXPECT_EQ(l->events, std::get<logs_reply>(b.body).events);
    EXPECT_EQ(l->over, std::get<logs_reply>(b.body).over);
  }
}

void expect_same(const control_message& a, const control_message& b) {
  ASSERT_EQ(a.index(), b.index());
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        const auto& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, stop_job>) {
          EXPECT_EQ(x.job, y.job);
        } else if constexpr (std::is_same_v<T, node_refused>) {
          EXPECT_EQ(x.reason, y.reason);
        } else if constexpr (std::is_same_v<T, command_reply>) {
          EXPECT_EQ(x.job, y.job);
          expect_same(x.failure, y.failure);
          EXPECT_EQ(x.stopped, y.stopped);
        } else {
          expect_same(x, y);
        }
      },
      a);
}

control_message round_trip(const control_message& m) {
  const auto out = control_codec::encode(m);
  EXPECT_EQ(out.size() % 8, 0u);
  auto back = control_codec::decode(out);
  EXPECT_TRUE(back) << back.error().to_string();
  return back ? *back : control_message{};
}

std::string decode_error(std::span<const std::byte> b) {
  const auto m = control_codec::decode(b);
  if (m) return "(decoded)";
  EXPECT_EQ(m.error().code, errc::protocol_error);
  EXPECT_FALSE(m.error().message.empty());
  EXPECT_EQ(m.error().message.find('\n'), std::string::npos) << "one line";
  return m.error().message;
}

/// A payload built with the generated types directly, to make what encode never makes.
template <class Fill>
bytes raw(Fill fill) {
  capnp::MallocMessageBuilder message;
  fill(message.initRoot<schemas::ControlMessage>());
  const auto words = capnp::messageToFlatArray(message);
  const auto b = words.asBytes();
  bytes out(b.size());
  std::memcpy(out.data(), b.begin(), b.size());
  return out;
}

/// One of each variant (every reply body with and without a failure), every field set.
std::vector<control_message> every_variant() {
  std::vector<control_message> all;
  all.push_back(full_heartbeat());
  all.push_back(full_start_job());
  all.push_back(growing_start_job(true));
  all.push_back(growing_start_job(false));
  all.push_back(stop_job{0xfeedull});
  all.push_back(node_refused{"the name 'b' is taken by the live node at tcp://127.0.0.1:7001"});
  all.push_back(command_reply{77, std::nullopt});
  all.push_back(command_reply{79, std::nullopt, true});
  all.push_back(command_reply{78, error{errc::not_found, "no such dataset: mnist/train"}});
  all.push_back(api_request{submit_request{"epochs: 1\n", "a.yaml", "/tmp/w", 4, 2}});
  all.push_back(
      api_request{submit_request{"epochs: 1\n", "a.yaml", "/tmp/w", 0, 0, 0xfedcba9876543210ull}});
  all.push_back(api_request{status_request{99}});
  all.push_back(api_request{nodes_request{}});
  all.push_back(api_request{cancel_request{100}});
  all.push_back(api_request{rescale_request{101, 7, 3}});
  all.push_back(api_request{migrate_request{102, 4, "node-b"}});
  all.push_back(api_request{rescale_request{105, 0, 0, true}});
  all.push_back(api_request{migrate_request{106, 2, "", true}});
  all.push_back(api_request{policy_request{}});
  all.push_back(api_request{policy_request{"elastic-fifo"}});
  all.push_back(api_request{logs_request{103, 0}});
  all.push_back(api_request{logs_request{104, std::uint64_t(1) << 40}});
  all.push_back(api_request{forget_request{105}});
  const error why{errc::invalid_argument, "field 'workers' must be > 0"};
  for (const bool failed : {false, true}) {
    const auto failure = failed ? std::optional<error>(why) : std::nullopt;
    all.push_back(api_reply{failure, ack_reply{}});
    all.push_back(api_reply{failure, submit_reply{failed ? 0u : 4242u}});
    all.push_back(api_reply{failure, status_reply{{full_job_status(1), full_job_status(2)}}});
    all.push_back(
        api_reply{failure, nodes_reply{{full_node_status(true), full_node_status(false)}}});
    all.push_back(api_reply{failure, policy_reply{"round-robin"}});
    all.push_back(api_reply{failure, logs_reply{{{1, 1764100000.25, "job 3 'x' submitted"},
                                                 {2, 1764100001.5, "job 3: epoch 1/2: ..."}},
                                                true}});
  }
  return all;
}

// --- round trips ---------------------------------------------------------------------------

TEST(control_codec, every_variant_round_trips_field_by_field) {
  for (const auto& m : every_variant()) {
    SCOPED_TRACE(testing::Message() << "variant " << m.index());
    expect_same(round_trip(m), m);
  }
}

TEST(control_codec, defaults_round_trip) {
  for (const control_message& m :
       {control_message{node_heartbeat{}}, control_message{start_job{}},
        control_message{stop_job{}}, control_message{command_reply{}},
        control_message{api_request{}}, control_message{api_reply{}},
        control_message{api_reply{std::nullopt, status_reply{{job_status{}}}}},
        control_message{api_reply{std::nullopt, nodes_reply{{node_status{}}}}}}) {
    expect_same(round_trip(m), m);
  }
}

TEST(control_codec, extremes_and_nan_round_trip) {
  job_status s = full_job_status(std::numeric_limits<std::uint64_t>::max());
  s.test_accuracy = std::numeric_limits<double>::quiet_NaN();  // before the first epoch
  s.loss = -std::numeric_limits<double>::infinity();
  s.samples_per_second = std::numeric_limits<double>::denorm_min();
  s.state = job_state::cancelled;
  s.epochs_total = std::numeric_limits<std::uint32_t>::max();
  s.error_code = std::uint16_t(errc::internal);
  const control_message m = api_reply{std::nullopt, status_reply{{s}}};
  const auto back = round_trip(m);
  expect_same(back, m);
  const auto& got = std::get<status_reply>(std::get<api_reply>(back).body).jobs.at(0);
  EXPECT_TRUE(std::isnan(got.test_accuracy));
  EXPECT_EQ(got.state, job_state::cancelled);

  node_heartbeat h = full_heartbeat();
  h.host = std::numeric_limits<std::uint32_t>::max();
  h.unix_time_ms = std::numeric_limits<std::int64_t>::min();
  h.resources.cpus_free = std::numeric_limits<double>::quiet_NaN();
  h.resources.gpus_total = {0, std::numeric_limits<int>::max()};
  h.resources.gpus_held = {{std::numeric_limits<std::uint64_t>::max(),
                            std::numeric_limits<std::uint32_t>::max(),
                            std::numeric_limits<int>::max(), true}};
  expect_same(round_trip(h), control_message{h});
}

TEST(control_codec, every_job_state_round_trips) {
  for (const auto state : {job_state::queued, job_state::running, job_state::suspended,
                           job_state::succeeded, job_state::failed, job_state::cancelled}) {
    job_status s;
    s.state = state;
    const auto back = round_trip(api_reply{std::nullopt, status_reply{{s}}});
    EXPECT_EQ(std::get<status_reply>(std::get<api_reply>(back).body).jobs.at(0).state, state);
  }
}

TEST(control_codec, negative_gpu_ids_are_left_out) {
  node_heartbeat h;
  h.resources.gpus_total = {-1, 0, 2, -7};
  h.resources.gpus_free = {-3};
  const auto back = std::get<node_heartbeat>(round_trip(h));
  EXPECT_EQ(back.resources.gpus_total, (std::vector<int>{0, 2}));
  EXPECT_TRUE(back.resources.gpus_free.empty());
}

TEST(control_codec, long_texts_are_cut_and_the_spec_is_not) {
  command_reply c{1, error{errc::internal, std::string(10000, 'e')}};
  const auto back = std::get<command_reply>(round_trip(c));
  ASSERT_TRUE(back.failure);
  EXPECT_EQ(back.failure->message, std::string(4096, 'e'));

  start_job s = full_start_job();
  s.spec_yaml = std::string(1 << 20, 'y');  // exactly the limit
  s.source_name = std::string(5000, 's');
  const auto got = std::get<start_job>(round_trip(s));
  EXPECT_EQ(got.spec_yaml, s.spec_yaml);
  EXPECT_EQ(got.source_name, std::string(4096, 's'));

  s.spec_yaml.push_back('!');  // one byte over: encoded whole, refused by the receiver
  EXPECT_EQ(decode_error(control_codec::encode(s)),
            "control message refused: startJob specYaml has 1048577 bytes (at most 1048576)");
  submit_request q;
  q.spec_yaml = s.spec_yaml;
  EXPECT_EQ(decode_error(control_codec::encode(api_request{q})),
            "control message refused: submit specYaml has 1048577 bytes (at most 1048576)");
}

TEST(control_codec, unaligned_input_decodes) {
  const auto out = control_codec::encode(full_start_job());
  std::vector<std::byte> shifted(out.size() + 1);
  std::memcpy(shifted.data() + 1, out.data(), out.size());
  const auto m = control_codec::decode(std::span(shifted).subspan(1));
  ASSERT_TRUE(m) << m.error().to_string();
  expect_same(*m, control_message{full_start_job()});
}

// --- refusals ------------------------------------------------------------------------------

TEST(control_codec, wrong_sizes_are_refused_before_parsing) {
  EXPECT_EQ(decode_error({}), "control message of 0 bytes is too short (at least 8)");
  EXPECT_EQ(decode_error(bytes(12)),
            "control message of 12 bytes is not a whole number of 8-byte words");
  EXPECT_EQ(decode_error(bytes((16 << 20) + 8)),
            "control message of 16777224 bytes is over the limit of 16777216");
}

TEST(control_codec, every_truncation_of_every_variant_is_refused) {
  for (const auto& m : every_variant()) {
    const auto out = control_codec::encode(m);
    for (std::size_t n = 0; n < out.size(); ++n) {
      const auto d = control_codec::decode(std::span(out).first(n));
      ASSERT_FALSE(d) << "variant " << m.index() << " truncated to " << n << " bytes decoded";
      EXPECT_EQ(d.error().code, errc::protocol_error);
      EXPECT_FALSE(d.error().message.empty());
    }
  }
  const auto out = control_codec::encode(stop_job{1});
  EXPECT_EQ(decode_error(std::span(out).first(16)),
            "malformed control message: Message ends prematurely in first segment.");
}

TEST(control_codec, trailing_bytes_are_refused) {
  auto out = control_codec::encode(stop_job{1});
  out.resize(out.size() + 16);
  EXPECT_EQ(decode_error(out), "control message refused: 16 bytes after its Cap'n Proto message");
}

TEST(control_codec, random_garbage_is_refused_without_crashing) {
  std::mt19937_64 rng(20240602);
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    bytes b(8 * (rng() % 64) + (i % 4 == 0 ? rng() % 8 : 0));
    for (auto& x : b) x = std::byte(rng());
    const auto m = control_codec::decode(b);
    if (!m) {
      ++refused;
      EXPECT_EQ(m.error().code, errc::protocol_error);
    }
  }
  EXPECT_EQ(refused, 20000) << "random bytes are never a valid control message";
}

TEST(control_codec, flipped_bits_never_crash_and_what_decodes_re_encodes) {
  int refused = 0, decoded = 0;
  for (const auto& m : every_variant()) {
    const auto out = control_codec::encode(m);
    for (std::size_t i = 0; i < out.size(); ++i) {
      for (int bit = 0; bit < 8; bit += 3) {
        auto b = out;
        b[i] ^= std::byte(1 << bit);
        const auto d = control_codec::decode(b);
        if (!d) {
          ++refused;
          EXPECT_EQ(d.error().code, errc::protocol_error);
          continue;
        }
        ++decoded;  // a flipped data bit is a different, valid message: it must survive a trip
        const auto once = control_codec::encode(*d);
        const auto again = control_codec::decode(once);
        ASSERT_TRUE(again) << again.error().to_string();
        EXPECT_EQ(control_codec::encode(*again), once);
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(decoded, 0);
}

TEST(control_codec, message_with_no_member_set_is_refused) {
  EXPECT_EQ(decode_error(raw([](auto) {})),
            "control message refused: control message is empty (no union member set)");
}

TEST(control_codec, null_member_and_unknown_member_are_refused) {
  // A member chosen but never initialised: the discriminant says stopJob, the pointer is null.
  auto out = raw([](auto root) { root.initStopJob().setJob(5); });
  // Word 0: segment table; word 1: root pointer; word 2: the root's data (the discriminant);
  // word 3: its one pointer (shared by every union member).
  ASSERT_GE(out.size(), 32u);
  auto null_pointer = out;
  std::memset(null_pointer.data() + 24, 0, 8);
  EXPECT_EQ(decode_error(null_pointer), "control message refused: control message stopJob is null");

  auto unknown = out;
  const std::uint16_t nine = 9;
  std::memcpy(unknown.data() + 16, &nine, 2);
  EXPECT_EQ(decode_error(unknown), "control message refused: unknown control message member 9");
}

TEST(control_codec, a_part_to_start_must_be_placed_and_well_formed) {
  auto with = [](auto edit) {
    return decode_error(raw([&](auto root) {
      auto sj = root.initStartJob();
      auto added = sj.initAddedWorkers(1);
      added[0].setId(3);
      added[0].setHost(1);
      auto p = sj.initStart();
      p.setWorker(true);
      p.setId(3);
      auto c = p.initConfig();
      auto m = c.initMembers(2);
      m.set(0, 0);
      m.set(1, 3);
      edit(sj, p, c);
    }));
  };
  EXPECT_EQ(with([](auto, auto, auto) {}), "(decoded)");
  EXPECT_EQ(with([](auto, auto p, auto) { p.setId(4); }),
            "control message refused: startJob start names worker 4, which the added list does "
            "not place");
  EXPECT_EQ(with([](auto, auto p, auto) { p.setWorker(false); }),
            "control message refused: startJob start names shard 3, which the added list does "
            "not place");
  EXPECT_EQ(with([](auto, auto p, auto) { p.setFirstStep(-1); }),
            "control message refused: startJob start has a negative step");
  EXPECT_EQ(with([](auto, auto, auto c) {
              auto m = c.initMembers(2);
              m.set(0, 3);
              m.set(1, 3);
            }),
            "control message refused: startJob start members are not ascending and distinct");
  EXPECT_EQ(decode_error(raw([](auto root) {
              auto sj = root.initStartJob();
              sj.initAddedShards(1)[0].setId(0);
              sj.initStart();
            })),
            "control message refused: startJob start has no config");
}

TEST(control_codec, empty_requests_and_replies_are_refused) {
  EXPECT_EQ(decode_error(raw([](auto root) { root.initRequest(); })),
            "control message refused: job API request has no body");
  EXPECT_EQ(decode_error(raw([](auto root) { root.initReply(); })),
            "control message refused: job API reply has no body");
}

TEST(control_codec, per_kind_error_of_another_writer_becomes_the_failure) {
  const auto out = raw([](auto root) {
    auto e = root.initReply().initSubmit().initError();
    e.setCode(std::uint16_t(errc::resource_exhausted));
    e.setMessage("no node has 4 GPUs free");
  });
  const auto m = control_codec::decode(out);
  ASSERT_TRUE(m) << m.error().to_string();
  const auto& r = std::get<api_reply>(*m);
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->code, errc::resource_exhausted);
  EXPECT_EQ(r.failure->message, "no node has 4 GPUs free");
  EXPECT_EQ(std::get<submit_reply>(r.body).job, 0u);

  // Reply.error, where this version writes, wins over a per-kind error.
  const auto both = raw([](auto root) {
    auto reply = root.initReply();
    reply.initAck().initError().setCode(std::uint16_t(errc::internal));
    reply.initError().setCode(std::uint16_t(errc::not_found));
  });
  const auto b = control_codec::decode(both);
  ASSERT_TRUE(b) << b.error().to_string();
  EXPECT_EQ(std::get<api_reply>(*b).failure->code, errc::not_found);
}

TEST(control_codec, public_keys_that_are_not_z85_keys_are_refused) {
  EXPECT_EQ(decode_error(raw([](auto root) {
              auto hb = root.initHeartbeat();
              hb.setNodeName("n");
              hb.setPublicKey("too short");
            })),
            "control message refused: heartbeat publicKey is not a 40-character Z85 key");
  EXPECT_EQ(decode_error(raw([](auto root) {
              root.initStartJob().initPeers(1)[0].setPublicKey(
                  "0123456789012345678901234567890123456789\"");
            })),
            "control message refused: startJob peer publicKey is not a 40-character Z85 key");
}

TEST(control_codec, shard_backups_must_match_the_shards_and_stand_apart_from_them) {
  EXPECT_EQ(decode_error(raw([](auto root) {
              auto sj = root.initStartJob();
              sj.initShardHosts(2);
              sj.initBackupHosts(1);
            })),
            "control message refused: startJob backupHosts lists 1 shards, shardHosts 2");
  EXPECT_EQ(decode_error(raw([](auto root) {
              auto sj = root.initStartJob();
              auto hosts = sj.initShardHosts(2);
              hosts.set(0, 4);
              hosts.set(1, 5);
              auto chains = sj.initBackupHosts(2);
              chains.init(0, 1).set(0, 6);
              chains.init(1, 1).set(0, 5);
            })),
            "control message refused: startJob backupHosts puts shard 1's backup beside it");
  EXPECT_EQ(decode_error(raw([](auto root) {
              auto sj = root.initStartJob();
              sj.initShardHosts(1);
              sj.initBackupHosts(1).init(0, 4);
            })),
            "control message refused: startJob backupHosts has 4 entries (at most 3)");
  // A shard added while the job runs: its own backups, never beside it either.
  EXPECT_EQ(decode_error(raw([](auto root) {
              auto added = root.initStartJob().initAddedShards(1);
              added[0].setId(2);
              added[0].setHost(7);
              auto b = added[0].initBackups(2);
              b.set(0, 8);
              b.set(1, 7);
            })),
            "control message refused: startJob puts added shard 2's backup beside it");
  EXPECT_EQ(decode_error(raw([](auto root) {
              auto added = root.initStartJob().initAddedShards(1);
              added[0].initBackups(4);
            })),
            "control message refused: startJob added backups has 4 entries (at most 3)");
}

TEST(control_codec, out_of_range_values_are_refused) {
  EXPECT_EQ(decode_error(raw([](auto root) { root.initCommandReply().initError().setCode(11); })),
            "control message refused: command reply carries unknown error code 11");
  EXPECT_EQ(decode_error(raw([](auto root) { root.initCommandReply().initError(); })),
            "control message refused: command reply carries unknown error code 0");
  EXPECT_EQ(
      decode_error(raw([](auto root) {
        root.initReply().initStatus().initJobs(1)[0].setState(static_cast<schemas::JobState>(6));
      })),
      "control message refused: job status has unknown state 6");
  EXPECT_EQ(decode_error(raw(
                [](auto root) { root.initReply().initStatus().initJobs(1)[0].setErrorCode(11); })),
            "control message refused: job status has unknown error code 11");
  EXPECT_EQ(decode_error(
                raw([](auto root) { root.initHeartbeat().initGpusFree(1).set(0, 0x80000000u); })),
            "control message refused: heartbeat gpusFree lists GPU id 2147483648");
  EXPECT_EQ(decode_error(raw([](auto root) {
              auto hb = root.initHeartbeat();
              hb.initGpusTotal(2).set(1, 1);  // GPUs 0 and 1
              hb.initGpusHeld(1)[0].setDevice(2);
            })),
            "control message refused: heartbeat gpusHeld: GPU 2 is not among the node's GPUs");
}

TEST(control_codec, oversized_lists_and_texts_are_refused) {
  EXPECT_EQ(decode_error(raw([](auto root) { root.initStartJob().initShardHosts(4097); })),
            "control message refused: startJob shardHosts has 4097 entries (at most 4096)");
  EXPECT_EQ(decode_error(raw([](auto root) { root.initReply().initStatus().initJobs(4097); })),
            "control message refused: status reply jobs has 4097 entries (at most 4096)");
  EXPECT_EQ(decode_error(raw([](auto root) { root.initReply().initNodes().initStatuses(4097); })),
            "control message refused: nodes reply statuses has 4097 entries (at most 4096)");
  EXPECT_EQ(decode_error(raw([](auto root) { root.initHeartbeat().initGpusTotal(1025); })),
            "control message refused: heartbeat gpusTotal has 1025 entries (at most 1024)");
  EXPECT_EQ(decode_error(raw([](auto root) { root.initHeartbeat().initTraffic(65537); })),
            "control message refused: heartbeat traffic has 65537 entries (at most 65536)");
  EXPECT_EQ(decode_error(raw([](auto root) { root.initHeartbeat().initNodeName(4097); })),
            "control message refused: heartbeat nodeName has 4097 bytes (at most 4096)");
  // At the limits, accepted.
  const auto at_limit = control_codec::decode(raw([](auto root) {
    auto s = root.initStartJob();
    s.initShardHosts(4096);
    s.initPeers(4096);
  }));
  ASSERT_TRUE(at_limit) << at_limit.error().to_string();
  EXPECT_EQ(std::get<start_job>(*at_limit).peers.size(), 4096u);
}

// --- make_control, host ids, names ---------------------------------------------------------

TEST(control, make_control_builds_one_frame_of_kind_control) {
  const endpoint src{node_host_id("tcp://10.0.0.1:7000"), node_agent_id};
  const endpoint dst{0, scheduler_id};
  const start_job s = full_start_job();
  const auto msg = make_control(src, dst, s);
  EXPECT_EQ(msg.hdr.kind, msg_kind::control);
  EXPECT_EQ(msg.hdr.src, src);
  EXPECT_EQ(msg.hdr.dst, dst);
  EXPECT_EQ(msg.hdr.job, s.job);
  ASSERT_EQ(msg.frames.size(), 1u);
  EXPECT_EQ(msg.payload_bytes(), control_codec::encode(s).size());
  const auto back = control_codec::decode({msg.frames[0].data, msg.frames[0].bytes});
  ASSERT_TRUE(back) << back.error().to_string();
  expect_same(*back, control_message{s});

  // The frame owns its bytes: a copy of the message keeps them alive.
  const wire_message copy = [&] { return make_control(src, dst, stop_job{9}); }();
  EXPECT_EQ(
      std::get<stop_job>(*control_codec::decode({copy.frames[0].data, copy.frames[0].bytes})).job,
      9u);

  // The envelope of a control message goes through the data-path header codec.
  std::vector<std::byte> header;
  const std::size_t sizes[] = {msg.frames[0].bytes};
  codec::encode_header(msg.hdr, sizes, header);
  const auto h = codec::decode_header(header);
  ASSERT_TRUE(h) << h.error().to_string();
  EXPECT_EQ(h->env.kind, msg_kind::control);
  EXPECT_EQ(to_string(h->env.kind), "control");
}

TEST(control, a_start_job_carries_its_initial_training_state_as_frames) {
  const endpoint src{1, scheduler_id}, dst{2, node_agent_id};
  start_job s = full_start_job();
  auto state = std::make_shared<ps::training_state>();
  state->version = 4500;
  state->updates = 4321;
  state->samples_applied = 123456789012ull;
  state->values = {1.5f, -2.0f, 0.25f};
  state->state_a = {0.1f, 0.2f, 0.3f};
  state->state_b = {4.f, 5.f, 6.f};
  s.first_step = state->version;
  s.initial = state;
  auto msg = make_control(src, dst, s);
  ASSERT_EQ(msg.frames.size(), 4u);
  EXPECT_EQ(msg.frames[1].bytes, 12u);
  EXPECT_EQ(msg.frames[1].data, reinterpret_cast<const std::byte*>(state->values.data()));
  EXPECT_EQ(msg.frames[3].data, reinterpret_cast<const std::byte*>(state->state_b.data()));
  auto back = read_control(msg);
  ASSERT_TRUE(back);
  const auto& got = std::get<start_job>(*back);
  expect_same(got, s);
  EXPECT_EQ(got.first_step, 4500);
  ASSERT_TRUE(got.initial);
  EXPECT_EQ(got.initial->version, 4500);
  EXPECT_EQ(got.initial->updates, 4321);
  EXPECT_EQ(got.initial->samples_applied, 123456789012ull);
  EXPECT_EQ(got.initial->values, state->values);
  EXPECT_EQ(got.initial->state_a, state->state_a);
  EXPECT_EQ(got.initial->state_b, state->state_b);
  // Plain SGD keeps no state: the values alone.
  auto plain = std::make_shared<ps::training_state>(*state);
  plain->state_a.clear();
  plain->state_b.clear();
  s.initial = plain;
  auto one = make_control(src, dst, s);
  ASSERT_EQ(one.frames.size(), 2u);
  auto back_one = read_control(one);
  ASSERT_TRUE(back_one);
  EXPECT_EQ(std::get<start_job>(*back_one).initial->values, plain->values);
  EXPECT_TRUE(std::get<start_job>(*back_one).initial->state_a.empty());
  // Without a checkpoint: one frame, and none read back.
  EXPECT_FALSE(
      std::get<start_job>(*read_control(make_control(src, dst, full_start_job()))).initial);

  // Hostile frames: not whole floats, on another message, or one too many: dropped.
  auto odd = msg;
  odd.frames[2].bytes = 7;
  EXPECT_FALSE(read_control(odd));
  auto other = make_control(src, dst, stop_job{3});
  other.frames.push_back(msg.frames[1]);
  EXPECT_FALSE(read_control(other));
  auto five = msg;
  five.frames.push_back(msg.frames[1]);
  EXPECT_FALSE(read_control(five));
}

/// A script's model as it travels: an entry, a layout, a bundle of `bundle_bytes` bytes.
std::shared_ptr<worker::script_payload> a_script(std::size_t bundle_bytes) {
  auto p = std::make_shared<worker::script_payload>();
  p->entry = "train.py";
  p->layout_json = R"({"samples":40,"tensors":[{"name":"w","shape":[3],"dtype":"float32",)"
                   R"("kind":"param"}]})";
  auto b = std::make_shared<std::vector<std::byte>>(bundle_bytes);
  for (std::size_t i = 0; i < b->size(); ++i) (*b)[i] = std::byte(i * 13);
  p->bundle = std::move(b);
  return p;
}

TEST(control, a_script_travels_with_its_start_and_its_submit_as_frames) {
  const endpoint src{1, scheduler_id}, dst{2, node_agent_id};
  // A start: the initial state's frames, then the bundle's, last.
  start_job s = full_start_job();
  s.script = a_script(1000);
  auto state = std::make_shared<ps::training_state>();
  state->values = {1.5f, -2.0f, 0.25f};
  state->state_a = {0.1f, 0.2f, 0.3f};
  s.initial = state;
  auto msg = make_control(src, dst, s);
  ASSERT_EQ(msg.frames.size(), 4u);
  EXPECT_EQ(msg.frames[3].bytes, 1000u);
  auto back = read_control(msg);
  ASSERT_TRUE(back);
  const auto& got = std::get<start_job>(*back);
  expect_same(got, s);
  EXPECT_TRUE(*got.script->bundle == *s.script->bundle);
  EXPECT_FALSE(got.script->initial) << "a start's values go to the shards as `initial`";
  EXPECT_EQ(got.initial->values, state->values);
  EXPECT_EQ(got.initial->state_a, state->state_a);
  // The workers' phase: the bundle alone.
  s.initial = nullptr;
  auto workers = make_control(src, dst, s);
  ASSERT_EQ(workers.frames.size(), 2u);
  auto back_w = read_control(workers);
  ASSERT_TRUE(back_w);
  EXPECT_FALSE(std::get<start_job>(*back_w).initial);
  EXPECT_TRUE(*std::get<start_job>(*back_w).script->bundle == *s.script->bundle);

  // A submit: the initial values, then the bundle.
  submit_request q{"epochs: 1\n", "a.yaml", "/tmp/w", 2, 1, 77};
  auto sub = a_script(300);
  sub->initial = std::make_shared<const std::vector<float>>(std::vector<float>{4, 5, 6});
  q.script = sub;
  auto req = make_control(src, dst, api_request{q});
  ASSERT_EQ(req.frames.size(), 3u);
  auto back_q = read_control(req);
  ASSERT_TRUE(back_q);
  const auto& got_q = std::get<submit_request>(std::get<api_request>(*back_q));
  expect_same(api_request{got_q}, api_request{q});
  EXPECT_EQ(*got_q.script->initial, *sub->initial);
  EXPECT_TRUE(*got_q.script->bundle == *sub->bundle);

  // Frames missing, frames too many, a bundle over the limit, values not whole f32s: dropped.
  auto no_bundle = workers;
  no_bundle.frames.pop_back();
  EXPECT_FALSE(read_control(no_bundle));
  auto short_submit = req;
  short_submit.frames.pop_back();
  EXPECT_FALSE(read_control(short_submit));
  auto long_submit = req;
  long_submit.frames.push_back(req.frames[2]);
  EXPECT_FALSE(read_control(long_submit));
  auto odd = req;
  odd.frames[1].bytes = 7;
  EXPECT_FALSE(read_control(odd));
  auto huge = workers;
  huge.frames.back().bytes = std::size_t(worker::max_packed_bundle_bytes) + 1;  // never read
  EXPECT_FALSE(read_control(huge));
  auto plain = make_control(src, dst, api_request{submit_request{"epochs: 1\n", "a.yaml", "/"}});
  ASSERT_EQ(plain.frames.size(), 1u);
  plain.frames.push_back(req.frames[1]);
  EXPECT_FALSE(read_control(plain)) << "a submit without a script takes no frames";
}

TEST(control, make_control_names_the_job_the_message_is_about) {
  const endpoint a{1, 1}, b{2, 2};
  EXPECT_EQ(make_control(a, b, full_heartbeat()).hdr.job, 0u);
  EXPECT_EQ(make_control(a, b, stop_job{11}).hdr.job, 11u);
  EXPECT_EQ(make_control(a, b, command_reply{12, std::nullopt}).hdr.job, 12u);
  EXPECT_EQ(make_control(a, b, api_request{status_request{13}}).hdr.job, 13u);
  EXPECT_EQ(make_control(a, b, api_request{cancel_request{14}}).hdr.job, 14u);
  EXPECT_EQ(make_control(a, b, api_request{nodes_request{}}).hdr.job, 0u);
  EXPECT_EQ(make_control(a, b, api_reply{std::nullopt, submit_reply{15}}).hdr.job, 15u);
  EXPECT_EQ(make_control(a, b, api_reply{std::nullopt, ack_reply{}}).hdr.job, 0u);
}

TEST(control, node_host_id_is_fnv1a_with_bit_31_clear) {
  // FNV-1a 32-bit test vectors, with bit 31 cleared.
  EXPECT_EQ(node_host_id(""), 0x811c9dc5u & 0x7fffffffu);
  EXPECT_EQ(node_host_id("a"), 0xe40c292cu & 0x7fffffffu);
  EXPECT_EQ(node_host_id("foobar"), 0xbf9cf968u & 0x7fffffffu);
  // Stable, and differs between the addresses of one cluster.
  EXPECT_EQ(node_host_id("tcp://10.0.0.1:5555"), node_host_id("tcp://10.0.0.1:5555"));
  std::vector<std::uint32_t> ids;
  for (int i = 0; i < 1000; ++i) {
    const auto id = node_host_id("tcp://10.0." + std::to_string(i / 250) + "." +
                                 std::to_string(i % 250) + ":5555");
    EXPECT_EQ(id & 0x80000000u, 0u);
    EXPECT_NE(id, 0u);
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "no collision among 1000";
}

TEST(control, client_host_id_has_bit_31_set_and_varies) {
  std::vector<std::uint32_t> ids;
  for (int i = 0; i < 64; ++i) {
    const auto id = client_host_id();
    EXPECT_NE(id & 0x80000000u, 0u);
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_GT(std::unique(ids.begin(), ids.end()) - ids.begin(), 60);
}

TEST(control, job_state_names) {
  EXPECT_EQ(to_string(job_state::queued), "queued");
  EXPECT_EQ(to_string(job_state::running), "running");
  EXPECT_EQ(to_string(job_state::succeeded), "succeeded");
  EXPECT_EQ(to_string(job_state::failed), "failed");
  EXPECT_EQ(to_string(job_state::cancelled), "cancelled");
}

}  // namespace
}  // namespace coach::actors
