// libcoach_cuda.so's entry point (kernels/cuda_plugin.hpp): the CUDA backend, its device count
// and NCCL's all-reduce, for programs that load the plugin.
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/nccl_group.hpp"
#include "kernels/cuda_plugin.hpp"

namespace coach::kernels {
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

result<std::unique_ptr<backend>> make_cuda(int device) {
  auto made = cuda_backend::make(device);
  if (!made) return std::unexpected(made.error());
  return std::unique_ptr<backend>(std::move(*made));
}

int count() noexcept {
  return cuda_device_count();
}

result<std::unique_ptr<device_all_reduce>> make_all_reduce(std::span<backend* const> ranks) {
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
}

const cuda_plugin_api api{cuda_plugin_abi, make_cuda, count, make_all_reduce};

}  // namespace
}  // namespace coach::kernels

extern "C" __attribute__((visibility("default"))) const coach::kernels::cuda_plugin_api*
coach_cuda_plugin() {
  return &coach::kernels::api;
}
