#include "kernels/backend.hpp"

#include "kernels/cpu/cpu_backend.hpp"
#ifdef COACH_HAVE_CUDA
#include "kernels/cuda/cuda_backend.hpp"
#endif

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

result<std::unique_ptr<backend>> make_backend(backend_kind kind) {
  switch (kind) {
    case backend_kind::auto_select:
      if (cuda_device_present()) return make_backend(backend_kind::cuda);
      return make_backend(backend_kind::cpu);
    case backend_kind::cpu:
      return std::unique_ptr<backend>(std::make_unique<cpu_backend>());
    case backend_kind::cuda:
#ifdef COACH_HAVE_CUDA
    {
      // Device 0 of those visible; a caller placing workers on several devices uses
      // cuda_backend::make(device). Without a device: unsupported, saying why.
      auto made = cuda_backend::make(0);
      if (!made) return std::unexpected(made.error());
      return std::unique_ptr<backend>(std::move(*made));
    }
#else
      return fail(errc::unsupported,
                  "this build has no CUDA backend (configure with COACH_ENABLE_CUDA=ON on a host "
                  "with the CUDA toolkit)");
#endif
  }
  return fail(errc::invalid_argument, "backend kind {} is not a known kind",
              static_cast<int>(kind));
}

std::string_view compiled_backends() noexcept {
#ifdef COACH_HAVE_CUDA
  return "cpu,cuda";
#else
  return "cpu";
#endif
}

bool cuda_device_present() noexcept {
#ifdef COACH_HAVE_CUDA
  // cudaGetDeviceCount, probed once per process (kernels/cuda/cuda_backend.cpp).
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

}  // namespace coach::kernels
