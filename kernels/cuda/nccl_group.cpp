// Host code only (NCCL's API is plain C), so it is a .cpp: the C++23 of coach::result is not
// available to nvcc.
#include "kernels/cuda/nccl_group.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/enforce.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_error.hpp"

#ifdef COACH_HAVE_NCCL
#include <nccl.h>
#endif

namespace coach::kernels {

#ifdef COACH_HAVE_NCCL
namespace {

/// A coach::error for a failed NCCL call; `comm` (may be null) adds NCCL's own last message.
coach::error nccl_error(ncclResult_t status, ncclComm_t comm, std::string_view what) {
  std::string text = ncclGetErrorString(status);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += coach::format(" ({})", last);
  return coach::error{errc::internal, coach::format("nccl: {} failed: {}", what, text)};
}

void check_nccl(ncclResult_t status, ncclComm_t comm, std::string_view what) {
  if (status != ncclSuccess) throw cuda_error(nccl_error(status, comm, what));
}

}  // namespace
#endif

bool nccl_group::available() noexcept {
#ifdef COACH_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

result<std::unique_ptr<nccl_group>> nccl_group::make(std::span<const int> devices) {
#ifndef COACH_HAVE_NCCL
  (void)devices;
  return fail(errc::unsupported,
              "this build has no NCCL, so local GPU workers cannot all-reduce: install NCCL "
              "(nccl.h and libnccl under the CUDA toolkit) and reconfigure");
#else
  if (devices.empty()) return fail(errc::invalid_argument, "an NCCL group needs at least 1 device");
  const int count = cuda_device_count();
  if (count == 0)
    return fail(errc::unsupported, "no CUDA device visible to this process ({})",
                cuda_unavailable_reason());
  for (std::size_t r = 0; r < devices.size(); ++r) {
    if (devices[r] < 0 || devices[r] >= count)
      return fail(errc::invalid_argument,
                  "NCCL group rank {}: CUDA device {} does not exist (this process sees {})", r,
                  devices[r], count);
    if (std::find(devices.begin(), devices.begin() + std::ptrdiff_t(r), devices[r]) !=
        devices.begin() + std::ptrdiff_t(r))
      return fail(errc::invalid_argument, "NCCL group: device {} named twice (one rank per device)",
                  devices[r]);
  }
  std::unique_ptr<nccl_group> group(new nccl_group({devices.begin(), devices.end()}));
  group->comms_.assign(devices.size(), nullptr);
  const ncclResult_t status =
      ncclCommInitAll(group->comms_.data(), int(devices.size()), group->devices_.data());
  if (status != ncclSuccess) {
    group->comms_.clear();  // ncclCommInitAll leaves nothing to destroy when it fails
    return std::unexpected(nccl_error(
        status, nullptr, coach::format("ncclCommInitAll over {} device(s)", devices.size())));
  }
  return group;
#endif
}

nccl_group::nccl_group(std::vector<int> devices) : devices_(std::move(devices)) {}

nccl_group::~nccl_group() {
#ifdef COACH_HAVE_NCCL
  for (ncclComm_t c : comms_)
    if (c != nullptr) (void)ncclCommDestroy(c);
#endif
}

int nccl_group::device(int rank) const {
  COACH_ENFORCE(rank >= 0 && rank < size(), "nccl_group rank out of range");
  return devices_[std::size_t(rank)];
}

void nccl_group::all_reduce_sum(int rank, float* buf, std::size_t n, CUstream_st* stream) {
  COACH_ENFORCE(rank >= 0 && rank < size(), "nccl_group rank out of range");
#ifdef COACH_HAVE_NCCL
  if (n == 0) return;  // every rank has the same n, so every rank skips
  const int dev = devices_[std::size_t(rank)];
  detail::check_cuda(cudaSetDevice(dev), dev, "cudaSetDevice (all-reduce)");
  ncclComm_t comm = comms_[std::size_t(rank)];
  check_nccl(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, stream), comm,
             coach::format("ncclAllReduce of {} floats, rank {} of {}", n, rank, size()));
#else
  (void)buf, (void)n, (void)stream;
  COACH_ENFORCE(false, "an nccl_group exists only in builds with NCCL");
#endif
}

void nccl_group::all_reduce_sum_all(std::span<float* const> buffers, std::size_t n,
                                    std::span<CUstream_st* const> streams) {
  COACH_ENFORCE(buffers.size() == devices_.size() && streams.size() == devices_.size(),
                "all_reduce_sum_all needs one buffer and one stream per rank");
#ifdef COACH_HAVE_NCCL
  if (n == 0) return;
  // One thread enqueues every rank: the calls must be one NCCL group, or the first would wait
  // for ranks that have not been enqueued yet.
  check_nccl(ncclGroupStart(), nullptr, "ncclGroupStart");
  std::optional<coach::error> failed;
  for (std::size_t r = 0; r < devices_.size() && !failed; ++r) {
    const ncclResult_t s =
        ncclAllReduce(buffers[r], buffers[r], n, ncclFloat32, ncclSum, comms_[r], streams[r]);
    if (s != ncclSuccess)
      failed = nccl_error(s, comms_[r], coach::format("ncclAllReduce of {} floats, rank {}", n, r));
  }
  // The group is closed even after a failure, so NCCL's group state stays consistent.
  const ncclResult_t end = ncclGroupEnd();
  if (failed) throw cuda_error(std::move(*failed));
  check_nccl(end, nullptr, coach::format("ncclGroupEnd (all-reduce of {} floats)", n));
#else
  (void)n;
  COACH_ENFORCE(false, "an nccl_group exists only in builds with NCCL");
#endif
}

}  // namespace coach::kernels
