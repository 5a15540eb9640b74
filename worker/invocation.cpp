// worker/invocation.cpp: function-mode invocations and their pipe messages (invocation.hpp).
#include "worker/invocation.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <string>

#include "worker/bounded_process.hpp"
#include "worker/local_averaging.hpp"
#include "worker/sparse_batch.hpp"

namespace coach::worker {
namespace {

constexpr std::uint32_t magic = 0x56494f43;  // "COIV" in memory order
enum class kind : std::uint32_t { setup = 1, task = 2, result = 3 };
/// Largest payload accepted: 16 GiB (a corrupt size must not size an allocation).
constexpr std::uint64_t max_payload = std::uint64_t(16) << 30;

result<void> write_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return fail(errc::io_error, "invocation pipe: write failed: {}", std::strerror(errno));
    p += w;
    n -= std::size_t(w);
  }
  return {};
}

/// Reads exactly n bytes; false (no error) when the stream ends before the first byte.
result<bool> read_all(int fd, void* data, std::size_t n, bool may_end) {
  auto* p = static_cast<char*>(data);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return fail(errc::io_error, "invocation pipe: read failed: {}", std::strerror(errno));
    if (r == 0) {
      if (got == 0 && may_end) return false;
      return fail(errc::io_error, "invocation pipe: the stream ended inside a message");
    }
    got += std::size_t(r);
  }
  return true;
}

/// A payload being built: counts and arrays, appended.
struct writer {
  std::vector<char> bytes;
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
  }
  template <class T>
  void put_array(const std::vector<T>& v) {
    put(std::uint64_t(v.size()));
    const auto* p = reinterpret_cast<const char*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(T));
  }
  result<void> send(int fd, kind k) const {
    const std::uint32_t head[2] = {magic, std::uint32_t(k)};
    const std::uint64_t size = bytes.size();
    if (auto r = write_all(fd, head, sizeof head); !r) return r;
    if (auto r = write_all(fd, &size, sizeof size); !r) return r;
    return write_all(fd, bytes.data(), bytes.size());
  }
};

/// A payload being read: every read checked against what is left.
struct reader {
  std::vector<char> bytes;
  std::size_t at = 0;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (bytes.size() - at < sizeof v) {
      ok = false;
      return v;
    }
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  template <class T>
  std::vector<T> get_array() {
    const auto n = get<std::uint64_t>();
    if (!ok || n > (bytes.size() - at) / sizeof(T)) {
      ok = false;
      return {};
    }
    std::vector<T> v(n);
    std::memcpy(v.data(), bytes.data() + at, n * sizeof(T));
    at += n * sizeof(T);
    return v;
  }
};

/// Reads one message of kind `want`: nullopt at a clean end of the stream.
result<std::optional<reader>> receive(int fd, kind want) {
  std::uint32_t head[2];
  auto got = read_all(fd, head, sizeof head, true);
  if (!got) return std::unexpected(got.error());
  if (!*got) return std::optional<reader>{};
  if (head[0] != magic) return fail(errc::protocol_error, "invocation pipe: bad magic {}", head[0]);
  if (head[1] != std::uint32_t(want))
    return fail(errc::protocol_error, "invocation pipe: message kind {} where {} was expected",
                head[1], std::uint32_t(want));
  std::uint64_t size = 0;
  if (auto r = read_all(fd, &size, sizeof size, false); !r) return std::unexpected(r.error());
  if (size > max_payload)
    return fail(errc::protocol_error, "invocation pipe: a message of {} bytes", size);
  reader rd;
  rd.bytes.resize(size);
  if (auto r = read_all(fd, rd.bytes.data(), size, false); !r) return std::unexpected(r.error());
  return std::optional<reader>{std::move(rd)};
}

std::unexpected<error> malformed(std::string_view what) {
  return fail(errc::protocol_error, "invocation pipe: malformed {}", what);
}

/// This process's resident high-water mark since its exec (VmHWM). Not getrusage's ru_maxrss:
/// Linux keeps that across fork and exec, so a child of a large process would report the
/// parent's resident size.
std::uint64_t peak_rss() {
  std::ifstream status("/proc/self/status");
  std::string key;
  std::uint64_t kib = 0;
  while (status >> key) {
    if (key == "VmHWM:" && status >> kib) return kib * 1024;
    status.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

/// Whether a task's rows fit a model with tables over `samples` samples: one part per table,
/// its offsets a bag per sample, each lookup an index of one of its rows, whole rows of the
/// table's dim.
result<void> check_rows(const network& model, const invocation_task& task, std::size_t samples) {
  const auto& tables = model.tables();
  if (task.tables.size() != tables.size())
    return fail(errc::invalid_argument, "invocation: {} tables' rows for a model of {} tables",
                task.tables.size(), tables.size());
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const auto& r = task.tables[t];
    const std::size_t dim = tables[t].config.dim;
    if (r.values.size() % dim != 0)
      return fail(errc::invalid_argument, "invocation: table {}: {} values are not rows of {}", t,
                  r.values.size(), dim);
    const std::size_t distinct = r.values.size() / dim;
    if (r.offsets.size() != samples + 1 || r.offsets.front() != 0 ||
        r.offsets.back() != r.local.size() || !std::is_sorted(r.offsets.begin(), r.offsets.end()))
      return fail(errc::invalid_argument,
                  "invocation: table {}: offsets of {} entries for {} samples and {} lookups", t,
                  r.offsets.size(), samples, r.local.size());
    for (auto i : r.local)
      if (i >= distinct)
        return fail(errc::invalid_argument, "invocation: table {}: a lookup of row {} of {}", t, i,
                    distinct);
  }
  return {};
}

}  // namespace

result<void> write_setup(int fd, const invocation_setup& s) {
  writer w;
  const auto layers = expanded_layers(s.model);
  std::vector<std::int32_t> ints;
  std::vector<float> floats;
  for (const auto& l : layers) {
    ints.insert(ints.end(),
                {std::int32_t(l.kind), l.units, l.channels, l.kernel, l.stride, l.padding});
    floats.insert(floats.end(), {l.p, l.momentum, l.epsilon});
  }
  w.put_array(ints);
  w.put_array(floats);
  w.put_array(std::vector<std::int32_t>(s.model.input_shape.begin(), s.model.input_shape.end()));
  w.put_array(std::vector<std::int32_t>(s.shape.begin(), s.shape.end()));
  w.put(std::int32_t(s.inputs));
  w.put(std::int32_t(s.classes));
  w.put(std::int32_t(s.max_batch));
  w.put(std::uint8_t(s.averaging));
  w.put(s.local.learning_rate);
  w.put(s.local.momentum);
  w.put(s.local.weight_decay);
  // model.embeddings, one record each, then the interaction and the data set's fields.
  w.put(std::uint64_t(s.model.embeddings.size()));
  for (const auto& e : s.model.embeddings) {
    w.put(e.rows);
    w.put(e.dim);
    w.put(e.init_scale);
    w.put(std::uint8_t(e.pooling));
    w.put(std::uint8_t(e.per_field));
    w.put_array(std::vector<std::int32_t>(e.fields.begin(), e.fields.end()));
  }
  w.put(std::uint8_t(s.model.interaction));
  w.put(s.fields);
  return w.send(fd, kind::setup);
}

result<void> write_task(int fd, const invocation_task& t) {
  writer w;
  w.put_array(t.params);
  w.put_array(t.x);
  w.put_array(t.y);
  w.put_array(t.sizes);
  w.put(t.passes);
  w.put(t.noise);
  w.put(std::uint64_t(t.tables.size()));
  for (const auto& r : t.tables) {
    w.put_array(r.offsets);
    w.put_array(r.local);
    w.put_array(r.values);
  }
  return w.send(fd, kind::task);
}

result<void> write_result(int fd, const invocation_result& r) {
  writer w;
  w.put(r.samples);
  w.put(r.loss_sum);
  w.put(r.peak_rss_bytes);
  w.put_array(r.out);
  w.put(std::uint64_t(r.row_grads.size()));
  for (const auto& g : r.row_grads) w.put_array(g);
  return w.send(fd, kind::result);
}

result<std::optional<invocation_setup>> read_setup(int fd) {
  auto m = receive(fd, kind::setup);
  if (!m) return std::unexpected(m.error());
  if (!*m) return std::optional<invocation_setup>{};
  auto& rd = **m;
  invocation_setup s;
  const auto ints = rd.get_array<std::int32_t>();
  const auto floats = rd.get_array<float>();
  const auto input_shape = rd.get_array<std::int32_t>();
  const auto shape = rd.get_array<std::int32_t>();
  if (ints.size() % 6 != 0 || floats.size() / 3 != ints.size() / 6 || floats.size() % 3 != 0 ||
      input_shape.size() != 3 || shape.size() != 3)
    return malformed("setup");
  s.model.type = "layers";
  for (std::size_t i = 0; i < ints.size() / 6; ++i) {
    const std::int32_t* v = ints.data() + 6 * i;
    if (v[0] < 0 || v[0] > std::int32_t(layer_kind::gelu)) return malformed("setup");
    s.model.layers.push_back(layer_config{layer_kind(v[0]), v[1], v[2], v[3], v[4], v[5],
                                          floats[3 * i], floats[3 * i + 1], floats[3 * i + 2]});
  }
  std::copy(input_shape.begin(), input_shape.end(), s.model.input_shape.begin());
  std::copy(shape.begin(), shape.end(), s.shape.begin());
  s.inputs = rd.get<std::int32_t>();
  s.classes = rd.get<std::int32_t>();
  s.max_batch = rd.get<std::int32_t>();
  s.averaging = rd.get<std::uint8_t>() != 0;
  s.local.learning_rate = rd.get<float>();
  s.local.momentum = rd.get<float>();
  s.local.weight_decay = rd.get<float>();
  const auto tables = rd.get<std::uint64_t>();
  if (!rd.ok || tables > rd.bytes.size()) return malformed("setup");
  for (std::uint64_t i = 0; i < tables && rd.ok; ++i) {
    embedding_config e;
    e.rows = rd.get<std::uint64_t>();
    e.dim = rd.get<std::uint32_t>();
    e.init_scale = rd.get<float>();
    const auto pooling = rd.get<std::uint8_t>();
    e.per_field = rd.get<std::uint8_t>() != 0;
    const auto fields = rd.get_array<std::int32_t>();
    if (pooling > std::uint8_t(sparse::pooling::mean)) return malformed("setup");
    e.pooling = sparse::pooling(pooling);
    e.fields.assign(fields.begin(), fields.end());
    s.model.embeddings.push_back(std::move(e));
  }
  const auto inter = rd.get<std::uint8_t>();
  if (inter > std::uint8_t(interaction::dot)) return malformed("setup");
  s.model.interaction = worker::interaction(inter);
  s.fields = rd.get<std::uint32_t>();
  if (!rd.ok || rd.at != rd.bytes.size()) return malformed("setup");
  return std::optional<invocation_setup>{std::move(s)};
}

result<std::optional<invocation_task>> read_task(int fd) {
  auto m = receive(fd, kind::task);
  if (!m) return std::unexpected(m.error());
  if (!*m) return std::optional<invocation_task>{};
  auto& rd = **m;
  invocation_task t;
  t.params = rd.get_array<float>();
  t.x = rd.get_array<float>();
  t.y = rd.get_array<std::int32_t>();
  t.sizes = rd.get_array<std::uint32_t>();
  t.passes = rd.get<std::uint32_t>();
  t.noise = rd.get<std::uint64_t>();
  const auto tables = rd.get<std::uint64_t>();
  if (!rd.ok || tables > rd.bytes.size()) return malformed("task");
  t.tables.resize(tables);
  for (auto& r : t.tables) {
    r.offsets = rd.get_array<std::uint32_t>();
    r.local = rd.get_array<std::uint32_t>();
    r.values = rd.get_array<float>();
  }
  if (!rd.ok || rd.at != rd.bytes.size()) return malformed("task");
  return std::optional<invocation_task>{std::move(t)};
}

result<std::optional<invocation_result>> read_result(int fd) {
  auto m = receive(fd, kind::result);
  if (!m) return std::unexpected(m.error());
  if (!*m) return std::optional<invocation_result>{};
  auto& rd = **m;
  invocation_result r;
  r.samples = rd.get<std::uint64_t>();
  r.loss_sum = rd.get<double>();
  r.peak_rss_bytes = rd.get<std::uint64_t>();
  r.out = rd.get_array<float>();
  const auto tables = rd.get<std::uint64_t>();
  if (!rd.ok || tables > rd.bytes.size()) return malformed("result");
  r.row_grads.resize(tables);
  for (auto& g : r.row_grads) g = rd.get_array<float>();
  if (!rd.ok || rd.at != rd.bytes.size()) return malformed("result");
  return std::optional<invocation_result>{std::move(r)};
}

result<network> invocation_network(const invocation_setup& setup) {
  if (!setup.model.embeddings.empty()) {
    // The tables resolve against the data set's fields as the worker's network did.
    dataset layout;
    layout.features = std::size_t(std::max(setup.inputs, 0));
    layout.fields = setup.fields;
    layout.classes = setup.classes;
    auto net = network::for_data(setup.model, layout);
    if (!net) return fail(net.error().code, "invocation: {}", net.error().message);
    return net;
  }
  std::array<int, 3> shape = setup.shape;
  if (shape == std::array<int, 3>{0, 0, 0}) shape = {1, 1, setup.inputs};
  if (std::int64_t(shape[0]) * shape[1] * shape[2] != setup.inputs)
    return fail(errc::invalid_argument, "invocation: a {}x{}x{} sample of {} inputs", shape[0],
                shape[1], shape[2], setup.inputs);
  auto net = network::build(setup.model, shape, setup.classes);
  if (!net) return fail(net.error().code, "invocation: {}", net.error().message);
  return net;
}

result<invocation_result> compute_invocation(const invocation_setup& setup,
                                             const invocation_task& task, kernels::backend& be) {
  if (setup.inputs < 1 || setup.classes < 2 || setup.max_batch < 1)
    return fail(errc::invalid_argument, "invocation: a model of {} inputs and {} classes",
                setup.inputs, setup.classes);
  auto built = invocation_network(setup);
  if (!built) return std::unexpected(built.error());
  const network& model = *built;
  const std::size_t rows = task.y.size();
  if (task.params.size() != model.num_params())
    return fail(errc::invalid_argument, "invocation: {} parameters for a model of {}",
                task.params.size(), model.num_params());
  if (task.x.size() != rows * std::size_t(setup.inputs))
    return fail(errc::invalid_argument, "invocation: {} features for {} rows of {}", task.x.size(),
                rows, setup.inputs);
  std::uint64_t sum = 0;
  for (auto n : task.sizes) {
    if (n > std::uint32_t(setup.max_batch))
      return fail(errc::invalid_argument, "invocation: a local step of {} rows (at most {})", n,
                  setup.max_batch);
    sum += n;
  }
  if (task.passes < 1 || (!setup.averaging && task.passes != 1))
    return fail(errc::invalid_argument, "invocation: {} passes over the rows", task.passes);
  if (sum != rows || (!setup.averaging && task.sizes.size() > 1))
    return fail(errc::invalid_argument, "invocation: local steps of {} rows for {} rows", sum,
                rows);
  for (auto label : task.y)
    if (label < 0 || label >= setup.classes)
      return fail(errc::invalid_argument, "invocation: label {} of {} classes", label,
                  setup.classes);
  const auto& tables = model.tables();
  if (!tables.empty()) {
    if (setup.averaging)
      return fail(errc::invalid_argument,
                  "invocation: a model with embedding tables under averaging");
    if (auto ok = check_rows(model, task, rows); !ok) return std::unexpected(ok.error());
  } else if (!task.tables.empty()) {
    return fail(errc::invalid_argument, "invocation: {} tables' rows for a model without tables",
                task.tables.size());
  }
  dataset data;
  data.rows = rows;
  data.features = std::size_t(setup.inputs);
  data.classes = setup.classes;
  data.x = task.x;
  data.y = task.y;
  std::vector<std::uint32_t> indices(rows);
  for (std::size_t i = 0; i < rows; ++i) indices[i] = std::uint32_t(i);

  const std::size_t n = model.num_params();
  float* w0 = be.alloc(n);
  float* out = be.alloc(n);
  be.upload(w0, task.params.data(), n);
  network_runner runner(model, be, setup.max_batch);
  invocation_result r;
  r.samples = rows;
  if (setup.averaging) {
    local_averaging avg(be, n, setup.local);
    const auto o = avg.run(runner, w0, data, indices, task.sizes, out, task.passes, task.noise);
    r.loss_sum = o.loss_sum;
    r.samples = o.samples;
  } else if (!tables.empty()) {
    std::vector<table_batch> batch(tables.size());
    std::vector<std::span<const float>> pulled;
    for (std::size_t t = 0; t < tables.size(); ++t) {
      batch[t].table = std::uint32_t(t);
      batch[t].offsets = task.tables[t].offsets;
      batch[t].rows.local = task.tables[t].local;
      // The row ids are the worker's business: the pass needs their values and positions only.
      batch[t].rows.rows.resize(task.tables[t].values.size() / tables[t].config.dim);
      pulled.push_back(task.tables[t].values);
    }
    r.loss_sum =
        runner.forward_backward(w0, data, indices, batch, pulled, out, r.row_grads, task.noise);
  } else {
    r.loss_sum = runner.forward_backward(w0, data, indices, out, task.noise);
  }
  r.out.resize(n);
  be.download(r.out.data(), out, n);
  be.free(w0);
  be.free(out);
  return r;
}

int run_invocation(int in_fd, int out_fd, std::uint64_t max_tasks) {
  try {
    auto setup = read_setup(in_fd);
    if (!setup || !*setup) {
      std::fprintf(stderr, "coach-invocation: %s\n",
                   setup ? "no setup" : setup.error().message.c_str());
      return 1;
    }
    auto be = kernels::make_backend(kernels::backend_kind::cpu);
    if (!be) {
      std::fprintf(stderr, "coach-invocation: %s\n", be.error().message.c_str());
      return 1;
    }
    for (std::uint64_t done = 0; max_tasks == 0 || done < max_tasks; ++done) {
      auto task = read_task(in_fd);
      if (!task) {
        std::fprintf(stderr, "coach-invocation: %s\n", task.error().message.c_str());
        return 1;
      }
      if (!*task) return 0;  // the worker has nothing more for this invocation
      auto r = compute_invocation(**setup, **task, **be);
      if (!r) {
        std::fprintf(stderr, "coach-invocation: %s\n", r.error().message.c_str());
        return 1;
      }
      r->peak_rss_bytes = peak_rss();
      if (auto w = write_result(out_fd, *r); !w) {
        std::fprintf(stderr, "coach-invocation: %s\n", w.error().message.c_str());
        return 1;
      }
    }
    return 0;
  } catch (const std::bad_alloc&) {
    return exit_out_of_memory;
  }
}

}  // namespace coach::worker
