#pragma once
// kernels::cuda_plugin: the CUDA backend lives in a plugin, libcoach_cuda.so (kernels/cuda/, built
// as the `coach_cuda` target), loaded on first use. Programs link none of CUDA: a host without a
// GPU neither builds the CUDA code (scripts/setup.sh builds the plugin only where a GPU is or
// COACH_CUDA=1 asks) nor loads cuBLAS's ~97 MB when a `coach` command starts.
//
// Where it is looked for, first found wins:
//   1. $COACH_CUDA_PLUGIN, a path (set but empty: no plugin, the cpu only);
//   2. lib/libcoach_cuda.so beside the program's folder (build/apps/coach -> build/lib/; an
//      installed /usr/bin/coach -> /usr/lib/);
//   3. libcoach_cuda.so on the library path (LD_LIBRARY_PATH, the device bundle's lib/).
// The plugin and the program must come from one build: the plugin says which backend interface
// it was built for (cuda_plugin_abi) and a mismatch is refused, not called.

#include <memory>
#include <span>

#include "common/error.hpp"

namespace coach::kernels {

class backend;
class device_all_reduce;

/// Bumped whenever kernels/backend.hpp's backend or device_all_reduce interface changes.
inline constexpr int cuda_plugin_abi = 1;

/// What the plugin exports: coach_cuda_plugin() returns one of these.
struct cuda_plugin_api {
  int abi = 0;  ///< cuda_plugin_abi of the plugin's build
  /// cuda_backend::make(device).
  result<std::unique_ptr<backend>> (*make_backend)(int device) = nullptr;
  /// CUDA devices visible (probed once).
  int (*device_count)() noexcept = nullptr;
  /// NCCL's all-reduce over CUDA backends (kernels/backend.hpp make_device_all_reduce).
  result<std::unique_ptr<device_all_reduce>> (*make_all_reduce)(std::span<backend* const>) =
      nullptr;
};

/// The plugin, loaded once per process: its entry points, or why there is none (unsupported,
/// naming where it was looked for, or dlopen's reason for one that would not load).
const result<const cuda_plugin_api*>& cuda_plugin();

}  // namespace coach::kernels

/// The plugin's one exported symbol.
extern "C" const coach::kernels::cuda_plugin_api* coach_cuda_plugin();
