#include "kernels/backend.hpp"

#include "kernels/cpu/cpu_backend.hpp"

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
      // TODO(cuda): return the cuBLAS backend once kernels/cuda/ has one.
      return fail(errc::unsupported, "CUDA backend not implemented yet");
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
  // "cpu,cuda" once kernels/cuda/ holds a backend (issue 5); COACH_HAVE_CUDA alone only says the
  // toolkit was found.
  return "cpu";
}

bool cuda_device_present() noexcept {
  // With COACH_HAVE_CUDA this becomes cudaGetDeviceCount(&n) == cudaSuccess && n > 0, in a
  // kernels/cuda/ source (this file stays plain C++). Until the CUDA backend exists, saying
  // false keeps auto_select on the cpu backend, which is the only one that can be made.
  return false;
}

}  // namespace coach::kernels
