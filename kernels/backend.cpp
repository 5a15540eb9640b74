#include "kernels/backend.hpp"

#include "kernels/cpu/cpu_backend.hpp"
#ifdef COACH_HAVE_CUDA
#include <vector>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/nccl_group.hpp"
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

result<std::unique_ptr<backend>> make_backend(backend_kind kind, int device) {
  switch (kind) {
    case backend_kind::auto_select:
      if (cuda_device_present()) return make_backend(backend_kind::cuda, device);
      return make_backend(backend_kind::cpu);
    case backend_kind::cpu:
      return std::unique_ptr<backend>(std::make_unique<cpu_backend>());
    case backend_kind::cuda:
#ifdef COACH_HAVE_CUDA
    {
      // Without a device: unsupported, saying why.
      auto made = cuda_backend::make(device);
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

int device_count() noexcept {
#ifdef COACH_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

#ifdef COACH_HAVE_CUDA
namespace {

/// NCCL's all-reduce over the streams of CUDA backends, one per device.
class nccl_all_reduce final : public device_all_reduce {
 public:
  nccl_all_reduce(std::unique_ptr<nccl_group> group, std::vector<CUstream_st*> streams)
      : group_(std::move(group)), streams_(std::move(streams)) {}
  void sum(std::span<float* const> bufs, std::size_t n) override {
    group_->all_reduce_sum_all(bufs, n, streams_);
  }

 private:
  std::unique_ptr<nccl_group> group_;
  std::vector<CUstream_st*> streams_;
};

}  // namespace
#endif

result<std::unique_ptr<device_all_reduce>> make_device_all_reduce(std::span<backend* const> ranks) {
#ifdef COACH_HAVE_CUDA
  std::vector<int> devices;
  std::vector<CUstream_st*> streams;
  for (auto* be : ranks) {
    auto* cuda = dynamic_cast<cuda_backend*>(be);
    if (cuda == nullptr)
      return fail(errc::unsupported, "a device all-reduce needs CUDA backends, not '{}'",
                  be->name());
    devices.push_back(cuda->device());
    streams.push_back(cuda->stream());
  }
  auto group = nccl_group::make(devices);
  if (!group) return std::unexpected(group.error());
  return std::unique_ptr<device_all_reduce>(
      std::make_unique<nccl_all_reduce>(std::move(*group), std::move(streams)));
#else
  (void)ranks;
  return fail(errc::unsupported, "this build has no CUDA backend, so no device all-reduce");
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
