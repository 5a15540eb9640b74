#pragma once
// kernels::nccl_group: sums a buffer of device floats across the workers of one job that run on
// one host, one rank per device, all ranks in this process (ncclCommInitAll). DESIGN.md
// "Kernels": on a host with several GPUs, local workers reduce gradients with NCCL before one push
// per host.
//
// How it is meant to be used (nothing calls it yet; worker::host_reducer does the same sum in
// host memory today, for `host_reduce: true`, and is what this replaces on multi-GPU nodes):
//   1. A host that runs k workers of a job makes one group over their k devices, and gives worker
//      i rank i and its own cuda_backend::make(device(i)).
//   2. Each step, once forward_backward has written worker i's gradient (the sum over its batch)
//      into its device buffer, every worker calls all_reduce_sum(i, grad, n, be.stream()). When
//      all k have enqueued theirs, every buffer holds the sum over the host's k batches.
//   3. One worker (rank 0) downloads that sum and pushes it, one push per shard, with the samples
//      of all k batches; the other ranks push nothing. The shards then see one push per host and
//      the network carries a 1/k share of the gradient bytes.
// A single-GPU host takes the same path with a group of one rank (the all-reduce leaves the buffer
// as it is), so the worker code has one shape on every host.
//
// Threads: each rank is driven by one thread at a time (its worker's; workers are detached
// actors, a thread each), and the ranks run in parallel: the all-reduce of in-process ranks
// completes on the devices only when every rank has enqueued its part, so no rank's thread may
// wait for its result (download, synchronize) before every other rank has called all_reduce_sum.
// Callers whose ranks share a thread drive all of them from it with all_reduce_sum_all instead.
// Every rank must issue the same sequence of all-reduces with the same n.
//
// Errors: NCCL failures throw kernels::cuda_error (code internal, message from NCCL); a build
// without NCCL (COACH_HAVE_NCCL undefined) makes no group: make() says so.

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "common/error.hpp"

struct CUstream_st;  // cudaStream_t is CUstream_st*
struct ncclComm;     // ncclComm_t is ncclComm*

namespace coach::kernels {

class nccl_group {
 public:
  /// True when this build has NCCL (COACH_HAVE_NCCL).
  static bool available() noexcept;

  /// Makes a group with rank r on CUDA device devices[r].
  /// Errors: unsupported (no NCCL in this build, or no CUDA device visible; the message says
  /// which), invalid_argument (an empty list, a device index that does not exist, a device
  /// named twice), internal (NCCL could not set the group up).
  static result<std::unique_ptr<nccl_group>> make(std::span<const int> devices);

  /// Destroys the communicators. REQUIRES: no all-reduce of the group still pending (the
  /// callers have synchronized their streams). Never throws.
  ~nccl_group();
  nccl_group(const nccl_group&) = delete;
  nccl_group& operator=(const nccl_group&) = delete;

  /// Number of ranks.
  int size() const noexcept { return static_cast<int>(devices_.size()); }
  /// The device of rank `rank`. REQUIRES: 0 <= rank < size().
  int device(int rank) const;

  /// Enqueues rank `rank`'s part of an in-place sum: afterwards buf[i] on every rank is the sum of
  /// buf[i] over the ranks. `stream` (a cudaStream_t of device(rank), e.g. cuda_backend::stream())
  /// orders it after the work that wrote buf and before what reads it. Returns once enqueued.
  /// REQUIRES: 0 <= rank < size(); buf holds n floats on device(rank); every rank calls with the
  /// same n (see "Threads" above). Throws cuda_error when NCCL fails.
  void all_reduce_sum(int rank, float* buf, std::size_t n, CUstream_st* stream);

  /// The same for every rank at once, from one thread: rank r's buffer is buffers[r], enqueued on
  /// streams[r]. REQUIRES: buffers.size() == streams.size() == size(). Throws cuda_error.
  void all_reduce_sum_all(std::span<float* const> buffers, std::size_t n,
                          std::span<CUstream_st* const> streams);

 private:
  explicit nccl_group(std::vector<int> devices);

  std::vector<int> devices_;
  std::vector<ncclComm*> comms_;  ///< comms_[r] is rank r's communicator
};

}  // namespace coach::kernels
