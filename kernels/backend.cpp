#include "kernels/backend.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cuda_plugin.hpp"

namespace coach::kernels {

result<backend_kind> parse_backend_kind(std::string_view text) {
  if (text == "auto") return backend_kind::auto_select;
  if (text == "cpu") return backend_kind::cpu;
  if (text == "cuda") return backend_kind::cuda;
  return fail(errc::invalid_argument, "backend '{}' is not one of auto, cpu, cuda", text);
}

std::string_view to_string(backend_kind kind) noexcept {
  switch (kind) {
    case backend_kind::auto_select:
      return "auto";
    case backend_kind::cpu:
      return "cpu";
    case backend_kind::cuda:
      return "cuda";
  }
  return "unknown";
}

namespace {

/// The folder of this program (from /proc/self/exe); empty when it cannot be read.
std::filesystem::path program_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path{} : exe.parent_path();
}

/// dlopen's the plugin at `path` (a bare name: on the library path) and checks its interface.
result<const cuda_plugin_api*> open_plugin(const std::string& path) {
  // RTLD_LOCAL: the plugin's copies of the kernels stay its own.
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    return fail(errc::unsupported, "the CUDA backend {} cannot be loaded: {}", path,
                why ? why : "unknown reason");
  }
  using entry_fn = const cuda_plugin_api* (*)();
  auto entry = reinterpret_cast<entry_fn>(::dlsym(lib, "coach_cuda_plugin"));
  if (entry == nullptr)
    return fail(errc::unsupported, "{} is not a Coach CUDA backend (no coach_cuda_plugin)", path);
  const cuda_plugin_api* api = entry();
  if (api == nullptr || api->abi != cuda_plugin_abi)
    return fail(errc::unsupported,
                "{} was built for another version of Coach (interface {}, this program's {}): "
                "rebuild it (cmake --build BUILD --target coach_cuda)",
                path, api ? api->abi : 0, cuda_plugin_abi);
  return api;  // never unloaded: its backends may live until the process exits
}

result<const cuda_plugin_api*> find_plugin() {
  if (const char* env = std::getenv("COACH_CUDA_PLUGIN")) {
    if (*env == '\0')
      return fail(errc::unsupported, "COACH_CUDA_PLUGIN is set empty: the CUDA backend is off");
    return open_plugin(env);
  }
  const auto beside = program_dir() / ".." / "lib" / "libcoach_cuda.so";
  std::error_code ec;
  if (!program_dir().empty() && std::filesystem::exists(beside, ec))
    return open_plugin(std::filesystem::weakly_canonical(beside, ec).string());
  auto bare = open_plugin("libcoach_cuda.so");
  // Found on the library path but not loadable (a CUDA library missing): that reason.
  if (bare || bare.error().message.find("cannot open shared object file") == std::string::npos)
    return bare;
  return fail(errc::unsupported,
              "this build has no CUDA backend: no {} and no libcoach_cuda.so on the library path "
              "(on a host with the CUDA toolkit: COACH_CUDA=1 ./scripts/setup.sh, or configure "
              "with -DCOACH_ENABLE_CUDA=ON and `cmake --build BUILD --target coach_cuda`)",
              beside.lexically_normal().string());
}

}  // namespace

const result<const cuda_plugin_api*>& cuda_plugin() {
  static const result<const cuda_plugin_api*> plugin = find_plugin();
  return plugin;
}

result<std::unique_ptr<backend>> make_backend(backend_kind kind, int device) {
  switch (kind) {
    case backend_kind::auto_select:
      if (cuda_device_present()) return make_backend(backend_kind::cuda, device);
      return make_backend(backend_kind::cpu);
    case backend_kind::cpu: {
      // COACH_CPU_KERNEL (read once): a kernel this CPU lacks is an error here, not a crash.
      const auto& kernel = cpu_kernel_from_environment();
      if (!kernel) return std::unexpected(kernel.error());
      return std::unique_ptr<backend>(std::make_unique<cpu_backend>(*kernel));
    }
    case backend_kind::cuda: {
      const auto& plugin = cuda_plugin();
      if (!plugin) return std::unexpected(plugin.error());
      // Without a device: unsupported, saying why.
      return (*plugin)->make_backend(device);
    }
  }
  return fail(errc::invalid_argument, "backend kind {} is not a known kind",
              static_cast<int>(kind));
}

std::string_view compiled_backends() noexcept {
  return cuda_plugin() ? "cpu,cuda" : "cpu";
}

int device_count() noexcept {
  const auto& plugin = cuda_plugin();
  return plugin ? (*plugin)->device_count() : 0;
}

result<std::unique_ptr<device_all_reduce>> make_device_all_reduce(std::span<backend* const> ranks) {
  const auto& plugin = cuda_plugin();
  if (!plugin) return fail(errc::unsupported, "no device all-reduce: {}", plugin.error().message);
  return (*plugin)->make_all_reduce(ranks);
}

bool cuda_device_present() noexcept {
  return device_count() > 0;
}

}  // namespace coach::kernels
