#pragma once
// COACH_HOST_DEVICE marks the functions that both the host compiler and nvcc compile (shapes,
// window arithmetic, the dropout generator), so that the cpu backend and the cuda kernels run the
// very same source for the arithmetic they must agree on bit for bit.

#if defined(__CUDACC__)
#define COACH_HOST_DEVICE __host__ __device__
#else
#define COACH_HOST_DEVICE
#endif
